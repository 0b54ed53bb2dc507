//! Black-box tests of payments (docs/commerce-api.md "Payments"): initiate with the configured fee
//! split, confirm, cancel, refund, status, idempotent retries, who may act on a payment, the
//! sandbox provider, and a cross-shard payment on a 4-shard server.
//!
//! Every server runs with `FEE_SCHEDULE` = `YER:2.5+1,USD:2.9+0.30,SAR:0`. One server for the
//! file (the 4-shard test starts its own); each test has its own customers and its own merchant.
//! Amounts are compared as exact decimals read from the raw JSON text, never through f64.

use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{
    dec, decimal, exact_json, unique, Customer, Employee, Options, Server, PLATFORM_BUSINESS_ID,
};

struct Fixture {
    server: Server,
    /// Operator of the platform business: deposits into customer wallets.
    operator: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        Fixture { server, operator }
    })
}

/// A merchant business with its YER wallet and staff.
struct Shop {
    id: u64,
    /// Roles operator and merchant: creates and funds the merchant's wallets, reads them.
    operator: Employee,
    /// Role merchant_finance: refunds.
    finance: Employee,
    /// Role merchant (not merchant_finance).
    clerk: Employee,
    /// The merchant's YER wallet.
    wallet: u64,
}

fn shop(server: &Server) -> Shop {
    let id = server.create_business(true);
    let operator = server.create_employee(id, &["operator", "merchant"]);
    let finance = server.create_employee(id, &["merchant_finance"]);
    let clerk = server.create_employee(id, &["merchant"]);
    let wallet = server.create_merchant_wallet(&operator.token, id, "YER")["id"]
        .as_u64()
        .expect("merchant wallet id");
    Shop {
        id,
        operator,
        finance,
        clerk,
        wallet,
    }
}

fn funded(server: &Server, operator: &Employee, amount: &str) -> Customer {
    let customer = server.register_customer();
    server.deposit(&operator.token, customer.wallet_id, amount);
    customer
}

fn initiate_body(shop_id: u64, wallet: u64, amount: &str, currency: &str, extra: &str) -> String {
    format!(
        r#"{{"merchant_id": {shop_id}, "wallet_id": {wallet}, "amount": {amount}, "currency_code": "{currency}"{extra}}}"#
    )
}

fn initiate(server: &Server, payer: &Customer, shop: &Shop, amount: &str) -> Response {
    server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &initiate_body(shop.id, payer.wallet_id, amount, "YER", ""),
    )
}

/// Initiates a YER payment that must answer 201; returns its uuid.
fn initiated(server: &Server, payer: &Customer, shop: &Shop, amount: &str) -> String {
    let response = initiate(server, payer, shop, amount);
    assert_eq!(response.status, 201, "initiate: {}", response.text());
    uuid_of(&response)
}

fn uuid_of(response: &Response) -> String {
    response.json()["data"]["transaction_id"]
        .as_str()
        .unwrap_or_else(|| panic!("transaction_id in {}", response.text()))
        .to_owned()
}

fn act(server: &Server, token: &str, uuid: &str, action: &str, body: &str) -> Response {
    server.post(&format!("/v1/payments/{uuid}/{action}"), Some(token), body)
}

/// A payment route's 2xx answer: `success: true`, `error_code: ""`, the given status.
fn succeeded(response: &Response, http_status: u16, status: &str, what: &str) -> Value {
    assert_eq!(response.status, http_status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["success"], json!(true), "{what}: {body}");
    assert_eq!(body["data"]["success"], json!(true), "{what}: {body}");
    assert_eq!(body["data"]["status"], json!(status), "{what}: {body}");
    assert_eq!(body["data"]["error_code"], json!(""), "{what}: {body}");
    body
}

/// A refused payment request: the payment envelope with `success: false`, the stable
/// `error_code` and a message.
fn refused(response: &Response, http_status: u16, code: &str, what: &str) {
    assert_eq!(response.status, http_status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["success"], json!(false), "{what}: {body}");
    assert_eq!(body["data"]["success"], json!(false), "{what}: {body}");
    assert_eq!(body["data"]["error_code"], json!(code), "{what}: {body}");
    assert!(
        body["data"]["message"]
            .as_str()
            .is_some_and(|m| !m.is_empty()),
        "{what}: a message in {body}"
    );
}

/// A standard error body (`{status: false, error: {code}}`).
fn standard_error(response: &Response, http_status: u16, code: &str, what: &str) {
    assert_eq!(response.status, http_status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}: {body}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
}

/// `amount`, `fee_amount`, `net_amount` of a PaymentResult are exactly these, and add up.
fn assert_split(response: &Response, amount: &str, fee: &str, net: &str) {
    let data = &exact_json(&response.body)["data"];
    let (a, f, n) = (
        decimal(&data["amount"]),
        decimal(&data["fee_amount"]),
        decimal(&data["net_amount"]),
    );
    assert_eq!(a, dec(amount), "amount in {}", response.text());
    assert_eq!(f, dec(fee), "fee_amount in {}", response.text());
    assert_eq!(n, dec(net), "net_amount in {}", response.text());
    assert_eq!(f + n, a, "fee + net = amount in {}", response.text());
}

fn balance(server: &Server, token: &str, wallet: u64) -> rust_decimal::Decimal {
    server.balances(token, wallet).balance
}

fn payment_status(server: &Server, token: &str, uuid: &str) -> Value {
    let response = server.get(&format!("/v1/payments/{uuid}/status"), Some(token));
    assert_eq!(response.status, 200, "status: {}", response.text());
    response.json()
}

#[test]
fn initiate_answers_201_pending_with_the_scheduled_fee_split_and_moves_nothing() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "150");
    let response = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &initiate_body(
            shop.id,
            payer.wallet_id,
            "100.00",
            "YER",
            r#", "description": "order A-1", "metadata": {"order": "A-1", "lines": 2}"#,
        ),
    );
    let body = succeeded(&response, 201, "pending", "initiate");
    // YER 2.5 % + 1: 2.50 + 1.00.
    assert_split(&response, "100.00", "3.50", "96.50");
    let data = &body["data"];
    assert!(
        data["transaction_id"]
            .as_str()
            .is_some_and(|u| u.len() == 36 && u.matches('-').count() == 4),
        "{data}"
    );
    assert_eq!(data["provider"], json!("wallet"));
    assert_eq!(data["currency"], json!("YER"));
    assert_eq!(data["is_duplicate"], json!(false));
    assert_eq!(data["metadata"], json!({"order": "A-1", "lines": 2}));
    assert_eq!(data["merchant_id"], json!(shop.id));
    assert_eq!(data["merchant_wallet_id"], json!(shop.wallet));
    assert_eq!(data["payer_wallet_id"], json!(payer.wallet_id));
    assert!(data["message"].as_str().is_some_and(|m| !m.is_empty()));
    assert_eq!(
        decimal(&exact_json(&response.body)["data"]["refunded_amount"]),
        dec("0")
    );
    // Nothing is posted until the confirm.
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("150")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("0")
    );

    // Without metadata the result carries `{}`.
    let plain = initiate(&f.server, &payer, &shop, "1.00");
    let plain = succeeded(&plain, 201, "pending", "initiate without metadata");
    assert_eq!(plain["data"]["metadata"], json!({}));
}

#[test]
fn fees_round_half_even_add_the_fixed_part_and_never_exceed_the_amount() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "100");
    for currency in ["USD", "SAR"] {
        f.server
            .create_merchant_wallet(&shop.operator.token, shop.id, currency);
    }
    let mut wallets = vec![("YER", payer.wallet_id)];
    for currency in ["USD", "SAR"] {
        let created = f.server.post_expect(
            "/v1/wallets/users",
            Some(&f.operator.token),
            &json!({"customer_id": payer.id, "currency_code": currency}).to_string(),
            201,
        );
        let wallet = created["data"]["id"].as_u64().expect("wallet id");
        f.server.deposit(&f.operator.token, wallet, "100");
        wallets.push((currency, wallet));
    }
    let wallet_of = |currency: &str| {
        wallets
            .iter()
            .find(|(c, _)| *c == currency)
            .map(|(_, w)| *w)
            .expect("a payer wallet")
    };
    for (currency, amount, fee, net) in [
        // 5.00 x 2.5 % = 0.125, a tie: half-even keeps 0.12 (half-up would say 0.13); + 1.00.
        ("YER", "5.00", "1.12", "3.88"),
        // 2.5 % of 0.50 is 0.0125 -> 0.01, + 1.00 = 1.01: more than the amount, so all of it.
        ("YER", "0.50", "0.50", "0.00"),
        // 2.9 % of 10.00 = 0.29, + 0.30.
        ("USD", "10.00", "0.59", "9.41"),
        // 2.9 % of 0.50 = 0.0145 -> 0.01, + 0.30.
        ("USD", "0.50", "0.31", "0.19"),
        // SAR:0: no fee.
        ("SAR", "20.00", "0", "20.00"),
    ] {
        let response = f.server.post(
            "/v1/payments/initiate",
            Some(&payer.token),
            &initiate_body(shop.id, wallet_of(currency), amount, currency, ""),
        );
        succeeded(&response, 201, "pending", &format!("{currency} {amount}"));
        assert_split(&response, amount, fee, net);
        assert_eq!(response.json()["data"]["currency"], json!(currency));
    }
}

#[test]
fn confirm_debits_the_payer_the_amount_and_credits_the_merchant_the_net() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "150");
    let uuid = initiated(&f.server, &payer, &shop, "100.00");
    let confirmed = act(&f.server, &payer.token, &uuid, "confirm", "");
    let body = succeeded(&confirmed, 200, "completed", "confirm");
    assert_split(&confirmed, "100.00", "3.50", "96.50");
    assert_eq!(body["data"]["transaction_id"], json!(uuid));
    assert!(body["data"]["completed_at"].is_string(), "{body}");
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("50.00")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("96.50")
    );
}

#[test]
fn confirming_twice_is_409_invalid_state_and_moves_nothing() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "150");
    let uuid = initiated(&f.server, &payer, &shop, "100.00");
    succeeded(
        &act(&f.server, &payer.token, &uuid, "confirm", ""),
        200,
        "completed",
        "first confirm",
    );
    refused(
        &act(&f.server, &payer.token, &uuid, "confirm", ""),
        409,
        "invalid_state",
        "second confirm",
    );
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("50.00")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("96.50")
    );
    assert_eq!(
        payment_status(&f.server, &payer.token, &uuid)["data"]["status"],
        json!("completed")
    );
}

#[test]
fn insufficient_funds_is_422_insufficient_funds_and_moves_nothing() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "99.99");
    // The check may come at initiate or at confirm; either way it is 422 insufficient_funds.
    let response = initiate(&f.server, &payer, &shop, "100.00");
    if response.status == 201 {
        let uuid = uuid_of(&response);
        refused(
            &act(&f.server, &payer.token, &uuid, "confirm", ""),
            422,
            "insufficient_funds",
            "confirm beyond the balance",
        );
        assert_eq!(
            payment_status(&f.server, &payer.token, &uuid)["data"]["status"],
            json!("pending"),
            "a refused confirm changes nothing"
        );
    } else {
        refused(
            &response,
            422,
            "insufficient_funds",
            "initiate beyond the balance",
        );
    }
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("99.99")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("0")
    );
}

#[test]
fn invalid_amounts_are_422_with_success_false() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "10");
    for amount in ["0", "-1.00", "1.001", r#""10.00""#, "1000000000001"] {
        let response = initiate(&f.server, &payer, &shop, amount);
        assert_eq!(response.status, 422, "amount {amount}: {}", response.text());
        let body = response.json();
        assert_eq!(body["success"], json!(false), "amount {amount}: {body}");
        assert!(
            body["data"]["error_code"]
                .as_str()
                .is_some_and(|c| !c.is_empty()),
            "amount {amount}: {body}"
        );
    }
    // The payer wallet is YER: a USD payment from it is refused.
    f.server
        .create_merchant_wallet(&shop.operator.token, shop.id, "USD");
    let response = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &initiate_body(shop.id, payer.wallet_id, "1.00", "USD", ""),
    );
    assert_eq!(response.status, 422, "{}", response.text());
    assert_eq!(response.json()["success"], json!(false));
}

#[test]
fn cancel_works_only_while_pending() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "100");

    let pending = initiated(&f.server, &payer, &shop, "10.00");
    succeeded(
        &act(&f.server, &payer.token, &pending, "cancel", ""),
        200,
        "cancelled",
        "cancel a pending payment",
    );
    refused(
        &act(&f.server, &payer.token, &pending, "cancel", ""),
        409,
        "invalid_state",
        "cancel a cancelled payment",
    );
    refused(
        &act(&f.server, &payer.token, &pending, "confirm", ""),
        409,
        "invalid_state",
        "confirm a cancelled payment",
    );

    // The merchant's staff may cancel too (any employee of the merchant).
    let by_merchant = initiated(&f.server, &payer, &shop, "5.00");
    succeeded(
        &act(&f.server, &shop.clerk.token, &by_merchant, "cancel", ""),
        200,
        "cancelled",
        "cancel by the merchant",
    );

    let completed = initiated(&f.server, &payer, &shop, "20.00");
    succeeded(
        &act(&f.server, &payer.token, &completed, "confirm", ""),
        200,
        "completed",
        "confirm",
    );
    refused(
        &act(&f.server, &payer.token, &completed, "cancel", ""),
        409,
        "invalid_state",
        "cancel a completed payment",
    );
    assert_eq!(
        payment_status(&f.server, &payer.token, &completed)["data"]["status"],
        json!("completed")
    );
    // Only the confirmed payment moved money: 20.00 out, 20 x 2.5 % + 1 = 1.50 fee.
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("80.00")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("18.50")
    );
}

#[test]
fn refunds_go_partial_then_the_rest_and_never_beyond_the_amount() {
    let f = fixture();
    let shop = shop(&f.server);
    // The fee is kept on refund, so the merchant needs more than the net to refund it all.
    f.server.deposit(&shop.operator.token, shop.wallet, "10.00");
    let payer = funded(&f.server, &f.operator, "150");
    let uuid = initiated(&f.server, &payer, &shop, "100.00");
    succeeded(
        &act(&f.server, &payer.token, &uuid, "confirm", ""),
        200,
        "completed",
        "confirm",
    );

    let partial = act(
        &f.server,
        &shop.finance.token,
        &uuid,
        "refund",
        r#"{"amount": 40.00, "reason": "one item returned"}"#,
    );
    succeeded(&partial, 200, "partially_refunded", "partial refund");
    assert_eq!(
        decimal(&exact_json(&partial.body)["data"]["refunded_amount"]),
        dec("40.00")
    );
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("90.00")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("66.50")
    );

    refused(
        &act(
            &f.server,
            &shop.finance.token,
            &uuid,
            "refund",
            r#"{"amount": 60.01}"#,
        ),
        422,
        "refund_exceeds_original",
        "refund beyond what is left",
    );
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("90.00")
    );

    // No amount: what is left (60.00).
    let rest = act(
        &f.server,
        &shop.finance.token,
        &uuid,
        "refund",
        r#"{"reason": "order cancelled"}"#,
    );
    succeeded(&rest, 200, "refunded", "refund the rest");
    assert_eq!(
        decimal(&exact_json(&rest.body)["data"]["refunded_amount"]),
        dec("100.00")
    );
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("150.00")
    );
    // 10.00 + 96.50 - 100.00: the fee stays with the platform.
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("6.50")
    );
    assert_eq!(
        payment_status(&f.server, &payer.token, &uuid)["data"]["status"],
        json!("refunded")
    );
}

#[test]
fn refund_before_completion_is_409() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "50");
    let uuid = initiated(&f.server, &payer, &shop, "10.00");
    refused(
        &act(
            &f.server,
            &shop.finance.token,
            &uuid,
            "refund",
            r#"{"amount": 1.00}"#,
        ),
        409,
        "invalid_state",
        "refund a pending payment",
    );
    succeeded(
        &act(&f.server, &payer.token, &uuid, "cancel", ""),
        200,
        "cancelled",
        "cancel",
    );
    refused(
        &act(&f.server, &shop.finance.token, &uuid, "refund", "{}"),
        409,
        "invalid_state",
        "refund a cancelled payment",
    );
    assert_eq!(balance(&f.server, &payer.token, payer.wallet_id), dec("50"));
}

#[test]
fn refund_needs_merchant_finance_of_the_payments_merchant() {
    let f = fixture();
    let shop = shop(&f.server);
    let other = shop_without_wallet(&f.server);
    let payer = funded(&f.server, &f.operator, "50");
    let uuid = initiated(&f.server, &payer, &shop, "10.00");
    succeeded(
        &act(&f.server, &payer.token, &uuid, "confirm", ""),
        200,
        "completed",
        "confirm",
    );
    for (who, token) in [
        ("the payer", payer.token.as_str()),
        ("a merchant clerk", shop.clerk.token.as_str()),
        ("another merchant's finance", other.token.as_str()),
    ] {
        let response = act(&f.server, token, &uuid, "refund", r#"{"amount": 1.00}"#);
        assert_eq!(response.status, 403, "{who}: {}", response.text());
    }
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("40.00")
    );
}

/// merchant_finance of a fresh merchant business.
fn shop_without_wallet(server: &Server) -> Employee {
    let id = server.create_business(true);
    server.create_employee(id, &["merchant_finance"])
}

#[test]
fn retry_under_the_same_idempotency_key_replays_with_is_duplicate_and_no_second_effect() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "150");
    let body = initiate_body(shop.id, payer.wallet_id, "100.00", "YER", "");
    let key = format!("pay-{}", unique());
    let first = f
        .server
        .post_idempotent("/v1/payments/initiate", &payer.token, &key, &body);
    succeeded(&first, 201, "pending", "first initiate");
    assert_eq!(first.header("idempotent-replayed"), None);
    let again = f
        .server
        .post_idempotent("/v1/payments/initiate", &payer.token, &key, &body);
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    let mut expected = first.json();
    expected["data"]["is_duplicate"] = json!(true);
    assert_eq!(again.json(), expected, "the first answer, marked duplicate");
    let uuid = uuid_of(&first);

    // Another payload under the same key is refused.
    let other = initiate_body(shop.id, payer.wallet_id, "100.01", "YER", "");
    let reused = f
        .server
        .post_idempotent("/v1/payments/initiate", &payer.token, &key, &other);
    assert_eq!(reused.status, 422, "{}", reused.text());

    let confirm_key = format!("confirm-{}", unique());
    let path = format!("/v1/payments/{uuid}/confirm");
    let confirmed = f
        .server
        .post_idempotent(&path, &payer.token, &confirm_key, "");
    succeeded(&confirmed, 200, "completed", "confirm");
    let replayed = f
        .server
        .post_idempotent(&path, &payer.token, &confirm_key, "");
    assert_eq!(replayed.status, 200, "{}", replayed.text());
    assert_eq!(replayed.header("idempotent-replayed"), Some("true"));
    let mut expected = confirmed.json();
    expected["data"]["is_duplicate"] = json!(true);
    assert_eq!(replayed.json(), expected);

    // One payment, debited once.
    assert_eq!(
        balance(&f.server, &payer.token, payer.wallet_id),
        dec("50.00")
    );
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("96.50")
    );
}

#[test]
fn status_route_reports_the_current_state_to_the_payer_and_the_merchant() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "50");
    let uuid = initiated(&f.server, &payer, &shop, "20.00");
    for token in [&payer.token, &shop.clerk.token, &shop.finance.token] {
        let status = payment_status(&f.server, token, &uuid);
        assert_eq!(status["success"], json!(true), "{status}");
        assert_eq!(status["data"]["status"], json!("pending"), "{status}");
        assert_eq!(status["data"]["transaction_id"], json!(uuid));
    }
    succeeded(
        &act(&f.server, &payer.token, &uuid, "confirm", ""),
        200,
        "completed",
        "confirm",
    );
    let response = f
        .server
        .get(&format!("/v1/payments/{uuid}/status"), Some(&payer.token));
    succeeded(&response, 200, "completed", "status after confirm");
    assert_split(&response, "20.00", "1.50", "18.50");
}

#[test]
fn another_customer_cannot_confirm_cancel_or_read_a_payment() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "50");
    let stranger = funded(&f.server, &f.operator, "50");
    let uuid = initiated(&f.server, &payer, &shop, "10.00");
    for action in ["confirm", "cancel"] {
        standard_error(
            &act(&f.server, &stranger.token, &uuid, action, ""),
            404,
            "not_found",
            &format!("{action} by a stranger"),
        );
    }
    standard_error(
        &f.server.get(
            &format!("/v1/payments/{uuid}/status"),
            Some(&stranger.token),
        ),
        404,
        "not_found",
        "status by a stranger",
    );
    // A customer cannot start a payment from someone else's wallet either.
    let response = f.server.post(
        "/v1/payments/initiate",
        Some(&stranger.token),
        &initiate_body(shop.id, payer.wallet_id, "1.00", "YER", ""),
    );
    assert!(
        matches!(response.status, 403 | 404),
        "initiate from another's wallet: {}",
        response.text()
    );
    assert_eq!(
        payment_status(&f.server, &payer.token, &uuid)["data"]["status"],
        json!("pending")
    );
    for customer in [&payer, &stranger] {
        assert_eq!(
            balance(&f.server, &customer.token, customer.wallet_id),
            dec("50")
        );
    }
    // No token at all: 401.
    assert_eq!(
        f.server
            .post(&format!("/v1/payments/{uuid}/confirm"), None, "")
            .status,
        401
    );
}

#[test]
fn an_unknown_payment_is_a_standard_404() {
    let f = fixture();
    let payer = f.server.register_customer();
    let unknown = "00000000-0000-4000-8000-000000000000";
    standard_error(
        &f.server.get(
            &format!("/v1/payments/{unknown}/status"),
            Some(&payer.token),
        ),
        404,
        "not_found",
        "status of an unknown payment",
    );
    standard_error(
        &act(&f.server, &payer.token, unknown, "confirm", ""),
        404,
        "not_found",
        "confirm of an unknown payment",
    );
}

#[test]
fn a_sandbox_payment_cannot_be_confirmed_and_completes_by_its_webhook() {
    let f = fixture();
    let shop = shop(&f.server);
    let payer = funded(&f.server, &f.operator, "150");
    let response = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &initiate_body(
            shop.id,
            payer.wallet_id,
            "100.00",
            "YER",
            r#", "provider": "sandbox""#,
        ),
    );
    let body = succeeded(&response, 201, "pending", "sandbox initiate");
    assert_eq!(body["data"]["provider"], json!("sandbox"));
    let provider_ref = body["data"]["provider_ref"]
        .as_str()
        .expect("provider_ref")
        .to_owned();
    assert!(!provider_ref.is_empty());
    let uuid = uuid_of(&response);

    let confirm = act(&f.server, &payer.token, &uuid, "confirm", "");
    assert_eq!(confirm.status, 409, "{}", confirm.text());
    assert_eq!(confirm.json()["success"], json!(false));
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("0")
    );

    let event = json!({
        "id": format!("evt-{}", unique()),
        "type": "payment.succeeded",
        "data": {"payment_uuid": uuid, "provider_ref": provider_ref, "amount": 100.00, "currency_code": "YER"},
    })
    .to_string();
    let hook = f.server.post_webhook("sandbox", &event);
    assert_eq!(hook.status, 200, "{}", hook.text());
    assert_eq!(hook.json()["data"]["applied"], json!(true));
    let status = f
        .server
        .get(&format!("/v1/payments/{uuid}/status"), Some(&payer.token));
    succeeded(&status, 200, "completed", "after the webhook");
    assert_eq!(
        balance(&f.server, &shop.operator.token, shop.wallet),
        dec("96.50")
    );
}

/// Payer and merchant wallets on different shards: confirm and refund move the same money as on
/// one shard.
#[test]
fn a_cross_shard_payment_and_its_refund_move_the_same_money() {
    const SHARDS: u64 = 4;
    let server = Server::start_with(Options {
        shards: Some(4),
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let shop = shop(&server);
    server.deposit(&shop.operator.token, shop.wallet, "10.00");
    let payer = (0..32)
        .map(|_| server.register_customer())
        .find(|c| c.wallet_id % SHARDS != shop.wallet % SHARDS)
        .expect("a customer whose wallet is on another shard than the merchant's");
    server.deposit(&operator.token, payer.wallet_id, "150.00");

    let uuid = initiated(&server, &payer, &shop, "100.00");
    let confirmed = act(&server, &payer.token, &uuid, "confirm", "");
    succeeded(&confirmed, 200, "completed", "cross-shard confirm");
    assert_split(&confirmed, "100.00", "3.50", "96.50");
    assert_eq!(
        balance(&server, &payer.token, payer.wallet_id),
        dec("50.00")
    );
    assert_eq!(
        balance(&server, &shop.operator.token, shop.wallet),
        dec("106.50")
    );

    succeeded(
        &act(
            &server,
            &shop.finance.token,
            &uuid,
            "refund",
            r#"{"amount": 30.00}"#,
        ),
        200,
        "partially_refunded",
        "cross-shard partial refund",
    );
    assert_eq!(
        balance(&server, &payer.token, payer.wallet_id),
        dec("80.00")
    );
    assert_eq!(
        balance(&server, &shop.operator.token, shop.wallet),
        dec("76.50")
    );
    succeeded(
        &act(&server, &shop.finance.token, &uuid, "refund", "{}"),
        200,
        "refunded",
        "cross-shard refund of the rest",
    );
    assert_eq!(
        balance(&server, &payer.token, payer.wallet_id),
        dec("150.00")
    );
    assert_eq!(
        balance(&server, &shop.operator.token, shop.wallet),
        dec("6.50")
    );
    // A second confirm on the cross-shard path is refused like on one shard.
    refused(
        &act(&server, &payer.token, &uuid, "confirm", ""),
        409,
        "invalid_state",
        "confirm a refunded payment",
    );
}
