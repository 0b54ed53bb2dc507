//! Black-box tests of provider webhooks (decisions.md §5, docs/commerce-api.md "Provider
//! webhooks"): `POST /v1/webhooks/{provider}` signed with HMAC-SHA256 over
//! `"{timestamp}.{raw body}"`.
//!
//! - a missing, malformed or wrong signature, a tampered body, or a timestamp more than 300 s
//!   away is 401 and changes nothing;
//! - an event id seen before is answered 200 with the first answer, `duplicate: true`, and no
//!   second effect, also after a restart;
//! - `payment.succeeded` / `payment.failed` complete or fail a pending sandbox payment;
//!   `payout.succeeded` / `payout.failed` mark an executed payout paid, or failed with its funds
//!   back in the wallet;
//! - an event naming another amount or currency than its target is 422, an unknown target 404,
//!   an unknown provider 404, all with nothing changed.
//!
//! Every server runs with `WEBHOOK_SECRET` and `FEE_SCHEDULE` (YER 2.5 % + 1.00). Amounts are
//! compared as exact decimals read from the raw JSON text.

use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{
    dec, sign_webhook, unique, unix_now, Customer, Employee, Server, PLATFORM_BUSINESS_ID,
    WEBHOOK_SECRET,
};

/// A merchant with its YER wallet and the staff the tests need.
struct World {
    /// Platform operator: funds customer wallets.
    operator: Employee,
    merchant: u64,
    /// Operator, merchant and finance of the merchant: creates payouts, reads its wallet.
    maker: Employee,
    /// restricted_approver and restricted_operator of the merchant: approves and executes.
    checker: Employee,
    merchant_wallet: u64,
}

impl World {
    fn new(server: &Server) -> World {
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let merchant = server.create_business(true);
        let maker = server.create_employee(merchant, &["operator", "merchant", "finance"]);
        let checker =
            server.create_employee(merchant, &["restricted_approver", "restricted_operator"]);
        let merchant_wallet = server.create_merchant_wallet(&maker.token, merchant, "YER")["id"]
            .as_u64()
            .expect("merchant wallet id");
        World {
            operator,
            merchant,
            maker,
            checker,
            merchant_wallet,
        }
    }

    fn payer(&self, server: &Server, amount: &str) -> Customer {
        let customer = server.register_customer();
        server.deposit(&self.operator.token, customer.wallet_id, amount);
        customer
    }

    /// A pending sandbox payment of `amount` YER from `payer`; returns (uuid, provider_ref).
    fn sandbox_payment(&self, server: &Server, payer: &Customer, amount: &str) -> (String, String) {
        let response = server.post(
            "/v1/payments/initiate",
            Some(&payer.token),
            &format!(
                r#"{{"merchant_id": {}, "wallet_id": {}, "amount": {amount}, "currency_code": "YER", "provider": "sandbox"}}"#,
                self.merchant, payer.wallet_id
            ),
        );
        assert_eq!(response.status, 201, "initiate: {}", response.text());
        let data = &response.json()["data"];
        assert_eq!(data["status"], json!("pending"), "{data}");
        (
            data["transaction_id"].as_str().expect("uuid").to_owned(),
            data["provider_ref"]
                .as_str()
                .expect("provider_ref")
                .to_owned(),
        )
    }

    /// An executed payout of `amount` from the merchant wallet; returns its id.
    fn executed_payout(&self, server: &Server, amount: &str) -> u64 {
        let created = server.post_expect(
            "/v1/payouts",
            Some(&self.maker.token),
            &format!(
                r#"{{"wallet_id": {}, "amount": {amount}, "currency_code": "YER", "payout_method": "bank_transfer", "payout_destination": {{"iban": "YE00TEST0001"}}}}"#,
                self.merchant_wallet
            ),
            201,
        );
        let id = created["data"]["id"].as_u64().expect("payout id");
        for action in ["approve", "execute"] {
            let response = server.post(
                &format!("/v1/payouts/{id}/{action}"),
                Some(&self.checker.token),
                "{}",
            );
            assert_eq!(response.status, 200, "{action}: {}", response.text());
        }
        id
    }

    fn payout_status(&self, server: &Server, id: u64) -> Value {
        server.get_ok(&format!("/v1/payouts/{id}"), &self.maker.token)["data"]["status"].clone()
    }

    fn payment_status(&self, server: &Server, payer: &Customer, uuid: &str) -> Value {
        let response = server.get(&format!("/v1/payments/{uuid}/status"), Some(&payer.token));
        assert_eq!(response.status, 200, "status: {}", response.text());
        response.json()["data"]["status"].clone()
    }
}

/// One server for the file; each test makes its own merchant (`World`), so tests running in
/// parallel never share a wallet.
struct Fixture {
    server: Server,
}

impl Fixture {
    fn world(&self) -> World {
        World::new(&self.server)
    }
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| Fixture {
        server: Server::start(),
    })
}

/// An event body with a fresh id; `data` is JSON text, so amounts go out exactly as written.
fn event(kind: &str, data: &str) -> String {
    format!(
        r#"{{"id": "evt-{}", "type": "{kind}", "data": {data}}}"#,
        unique()
    )
}

fn payment_event(kind: &str, uuid: &str, provider_ref: &str, amount: &str) -> String {
    event(
        kind,
        &format!(
            r#"{{"payment_uuid": "{uuid}", "provider_ref": "{provider_ref}", "amount": {amount}, "currency_code": "YER"}}"#
        ),
    )
}

fn payout_event(kind: &str, payout_id: u64, provider_ref: &str, amount: &str) -> String {
    event(
        kind,
        &format!(
            r#"{{"payout_id": {payout_id}, "provider_ref": "{provider_ref}", "amount": {amount}, "currency_code": "YER"}}"#
        ),
    )
}

/// A 401 `webhook_signature_invalid` in the standard error shape.
fn unauthorized(response: &Response, what: &str) {
    assert_eq!(response.status, 401, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}: {body}");
    assert_eq!(
        body["error"]["code"],
        json!("webhook_signature_invalid"),
        "{what}: {body}"
    );
}

fn applied(response: &Response, duplicate: bool, what: &str) -> Value {
    assert_eq!(response.status, 200, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true), "{what}: {body}");
    assert_eq!(body["data"]["applied"], json!(true), "{what}: {body}");
    assert_eq!(
        body["data"]["duplicate"],
        json!(duplicate),
        "{what}: {body}"
    );
    body
}

/// What a case sends: its name, its headers and its body.
type Delivery = (&'static str, Vec<(&'static str, String)>, String);

#[test]
fn bad_missing_or_stale_signatures_are_401_and_change_nothing() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    let payer = world.payer(server, "200");
    let (uuid, provider_ref) = world.sandbox_payment(server, &payer, "100.00");
    let body = payment_event("payment.succeeded", &uuid, &provider_ref, "100.00");
    let path = "/v1/webhooks/sandbox";
    let now = unix_now().to_string();
    let good = sign_webhook(WEBHOOK_SECRET, &now, &body);

    let cases: Vec<Delivery> = vec![
        ("no headers", vec![], body.clone()),
        (
            "no signature",
            vec![("X-Webhook-Timestamp", now.clone())],
            body.clone(),
        ),
        (
            "no timestamp",
            vec![("X-Webhook-Signature", good.clone())],
            body.clone(),
        ),
        (
            "signed with another secret",
            vec![
                ("X-Webhook-Timestamp", now.clone()),
                (
                    "X-Webhook-Signature",
                    sign_webhook("not-the-secret", &now, &body),
                ),
            ],
            body.clone(),
        ),
        (
            "a tampered body",
            vec![
                ("X-Webhook-Timestamp", now.clone()),
                ("X-Webhook-Signature", good.clone()),
            ],
            body.replace("payment.succeeded", "payment.failed"),
        ),
        (
            "a signature over another timestamp",
            vec![
                ("X-Webhook-Timestamp", (unix_now() - 1).to_string()),
                ("X-Webhook-Signature", good.clone()),
            ],
            body.clone(),
        ),
        (
            "not hex",
            vec![
                ("X-Webhook-Timestamp", now.clone()),
                ("X-Webhook-Signature", "v1=zz".to_owned()),
            ],
            body.clone(),
        ),
        (
            "another scheme",
            vec![
                ("X-Webhook-Timestamp", now.clone()),
                ("X-Webhook-Signature", good.replace("v1=", "v2=")),
            ],
            body.clone(),
        ),
    ];
    for (what, headers, sent) in &cases {
        let headers: Vec<(&str, &str)> = headers.iter().map(|(n, v)| (*n, v.as_str())).collect();
        unauthorized(&server.post_with_headers(path, None, &headers, sent), what);
    }
    // Correctly signed, but 301 s in the past or in the future.
    for timestamp in [unix_now() - 301, unix_now() + 301] {
        unauthorized(
            &server.post_webhook_at("sandbox", &body, timestamp),
            &format!("timestamp {timestamp}, now {}", unix_now()),
        );
    }
    assert_eq!(
        world.payment_status(server, &payer, &uuid),
        json!("pending")
    );
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("200")
    );
    assert_eq!(
        server
            .balances(&world.maker.token, world.merchant_wallet)
            .balance,
        dec("0")
    );

    // The same event, correctly signed, still applies: nothing above consumed its id.
    applied(
        &server.post_webhook("sandbox", &body),
        false,
        "the good delivery",
    );
    assert_eq!(
        world.payment_status(server, &payer, &uuid),
        json!("completed")
    );
}

#[test]
fn a_timestamp_just_inside_the_window_is_accepted() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    let payer = world.payer(server, "50");
    let (uuid, provider_ref) = world.sandbox_payment(server, &payer, "10.00");
    // 290 s leaves 10 s for the request to arrive within the 300 s window.
    let body = payment_event("payment.succeeded", &uuid, &provider_ref, "10.00");
    applied(
        &server.post_webhook_at("sandbox", &body, unix_now() - 290),
        false,
        "290 s old",
    );
}

#[test]
fn a_replayed_event_answers_the_first_answer_and_moves_nothing_twice() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    let payer = world.payer(server, "300");
    let before = server
        .balances(&world.maker.token, world.merchant_wallet)
        .balance;
    let (uuid, provider_ref) = world.sandbox_payment(server, &payer, "200.00");
    let body = payment_event("payment.succeeded", &uuid, &provider_ref, "200.00");
    let first = applied(&server.post_webhook("sandbox", &body), false, "first");
    // 200.00 - (2.5 % + 1.00) = 194.00 to the merchant; the provider paid (the float account),
    // so the payer's wallet is untouched.
    let after = server
        .balances(&world.maker.token, world.merchant_wallet)
        .balance;
    assert_eq!(after - before, dec("194.00"));
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("300")
    );

    for delivery in 0..3 {
        let again = applied(
            &server.post_webhook("sandbox", &body),
            true,
            &format!("replay {delivery}"),
        );
        assert_eq!(again["data"]["result"], first["data"]["result"]);
        assert_eq!(again["data"]["event_id"], first["data"]["event_id"]);
    }
    // The same id with a different body is still the same event: no second effect.
    let altered: Value = serde_json::from_str(&body).expect("event JSON");
    let mut altered = altered;
    altered["type"] = json!("payment.failed");
    applied(
        &server.post_webhook("sandbox", &altered.to_string()),
        true,
        "same id, other body",
    );
    assert_eq!(
        world.payment_status(server, &payer, &uuid),
        json!("completed")
    );
    assert_eq!(
        server
            .balances(&world.maker.token, world.merchant_wallet)
            .balance,
        after
    );
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("300")
    );
}

#[test]
fn payment_failed_leaves_the_payment_failed_with_no_money_moved() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    let payer = world.payer(server, "80");
    let merchant_before = server.balances(&world.maker.token, world.merchant_wallet);
    let (uuid, provider_ref) = world.sandbox_payment(server, &payer, "60.00");
    let failed = applied(
        &server.post_webhook(
            "sandbox",
            &payment_event("payment.failed", &uuid, &provider_ref, "60.00"),
        ),
        false,
        "payment.failed",
    );
    assert_eq!(
        failed["data"]["result"]["status"],
        json!("failed"),
        "{failed}"
    );
    assert_eq!(world.payment_status(server, &payer, &uuid), json!("failed"));
    let payer_after = server.balances(&payer.token, payer.wallet_id);
    assert_eq!(
        (payer_after.balance, payer_after.held),
        (dec("80"), dec("0"))
    );
    assert_eq!(
        server.balances(&world.maker.token, world.merchant_wallet),
        merchant_before
    );

    // A later success event for the failed payment moves nothing: applied false, with a reason.
    let late = server.post_webhook(
        "sandbox",
        &payment_event("payment.succeeded", &uuid, &provider_ref, "60.00"),
    );
    assert_eq!(late.status, 200, "{}", late.text());
    let late = late.json();
    assert_eq!(late["data"]["applied"], json!(false), "{late}");
    assert!(late["data"]["reason"].is_string(), "{late}");
    assert_eq!(world.payment_status(server, &payer, &uuid), json!("failed"));
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("80")
    );
}

#[test]
fn payout_events_mark_it_paid_or_failed_with_the_funds_returned() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    server.deposit(&world.maker.token, world.merchant_wallet, "500.00");
    let start = server
        .balances(&world.maker.token, world.merchant_wallet)
        .balance;

    let paid = world.executed_payout(server, "120.00");
    let succeeded = payout_event("payout.succeeded", paid, "bank-1", "120.00");
    applied(
        &server.post_webhook("sandbox", &succeeded),
        false,
        "payout.succeeded",
    );
    assert_eq!(world.payout_status(server, paid), json!("paid"));
    let after_paid = server.balances(&world.maker.token, world.merchant_wallet);
    assert_eq!(
        (after_paid.balance, after_paid.held),
        (start - dec("120.00"), dec("0"))
    );

    let bounced = world.executed_payout(server, "75.50");
    let executed = server.balances(&world.maker.token, world.merchant_wallet);
    assert_eq!(executed.balance, start - dec("195.50"));
    let failed = payout_event("payout.failed", bounced, "bank-2", "75.50");
    applied(
        &server.post_webhook("sandbox", &failed),
        false,
        "payout.failed",
    );
    assert_eq!(world.payout_status(server, bounced), json!("failed"));
    let returned = server.balances(&world.maker.token, world.merchant_wallet);
    assert_eq!(
        (returned.balance, returned.held),
        (start - dec("120.00"), dec("0")),
        "the failed payout's funds are back"
    );
    // Delivered again: no second return of the funds.
    applied(
        &server.post_webhook("sandbox", &failed),
        true,
        "payout.failed again",
    );
    assert_eq!(
        server
            .balances(&world.maker.token, world.merchant_wallet)
            .balance,
        start - dec("120.00")
    );
}

#[test]
fn events_naming_another_amount_currency_or_target_are_refused_and_change_nothing() {
    let f = fixture();
    let (server, world) = (&f.server, &f.world());
    let payer = world.payer(server, "40");
    let (uuid, provider_ref) = world.sandbox_payment(server, &payer, "30.00");

    let wrong_amount = payment_event("payment.succeeded", &uuid, &provider_ref, "31.00");
    let response = server.post_webhook("sandbox", &wrong_amount);
    assert_eq!(response.status, 422, "{}", response.text());
    let wrong_currency = payment_event("payment.succeeded", &uuid, &provider_ref, "30.00")
        .replace(r#""currency_code": "YER""#, r#""currency_code": "USD""#);
    let response = server.post_webhook("sandbox", &wrong_currency);
    assert_eq!(response.status, 422, "{}", response.text());
    let unknown_payment = payment_event(
        "payment.succeeded",
        "0b6f4b1c-5a1d-4c1e-9a55-3e0c6d9a0f11",
        "x",
        "30.00",
    );
    let response = server.post_webhook("sandbox", &unknown_payment);
    assert_eq!(response.status, 404, "{}", response.text());
    let unknown_payout = event(
        "payout.succeeded",
        r#"{"payout_id": 987654321, "provider_ref": "x"}"#,
    );
    let response = server.post_webhook("sandbox", &unknown_payout);
    assert_eq!(response.status, 404, "{}", response.text());
    let unknown_type = event(
        "payment.refunded",
        &format!(r#"{{"payment_uuid": "{uuid}"}}"#),
    );
    let response = server.post_webhook("sandbox", &unknown_type);
    assert_eq!(response.status, 422, "{}", response.text());
    let not_json = server.post_webhook("sandbox", "{not json");
    assert_eq!(not_json.status, 400, "{}", not_json.text());
    let other_provider = server.post_webhook(
        "stripe",
        &payment_event("payment.succeeded", &uuid, &provider_ref, "30.00"),
    );
    assert_eq!(other_provider.status, 404, "{}", other_provider.text());

    assert_eq!(
        world.payment_status(server, &payer, &uuid),
        json!("pending")
    );
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("40")
    );
}

/// Event ids are remembered in the log, like idempotency keys: a delivery after a crash and
/// restart is still a duplicate.
#[test]
fn a_replay_after_a_sigkill_and_restart_is_still_a_duplicate() {
    let mut server = Server::start();
    let world = World::new(&server);
    let payer = world.payer(&server, "100");
    let (uuid, provider_ref) = world.sandbox_payment(&server, &payer, "50.00");
    let body = payment_event("payment.succeeded", &uuid, &provider_ref, "50.00");
    let first = applied(
        &server.post_webhook("sandbox", &body),
        false,
        "before the crash",
    );

    server.kill_hard();
    server.restart();

    let again = applied(
        &server.post_webhook("sandbox", &body),
        true,
        "after the restart",
    );
    assert_eq!(again["data"]["result"], first["data"]["result"]);
    assert_eq!(
        world.payment_status(&server, &payer, &uuid),
        json!("completed")
    );
    assert_eq!(
        server.balances(&payer.token, payer.wallet_id).balance,
        dec("100")
    );
    // 50.00 - (1.25 + 1.00) = 47.75, once.
    assert_eq!(
        server
            .balances(&world.maker.token, world.merchant_wallet)
            .balance,
        dec("47.75")
    );
}
