//! Black-box tests of the routes that move money: deposit, withdraw, transfer, refund, reverse;
//! and of the request pipeline on them (amount validation, malformed and oversized bodies,
//! X-Request-ID). Holds and the ledger views are in api_holds_ledger.rs. One server for the file;
//! each test has its own customers.

use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{Customer, Employee, Server, PLATFORM_BUSINESS_ID};

struct Fixture {
    server: Server,
    operator: Employee,
    finance: Employee,
    restricted_finance: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let finance = server.create_employee(PLATFORM_BUSINESS_ID, &["finance"]);
        let restricted_finance =
            server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_finance"]);
        Fixture {
            server,
            operator,
            finance,
            restricted_finance,
        }
    })
}

impl Fixture {
    fn post(&self, path: &str, token: &str, body: &str) -> Response {
        self.server.post(path, Some(token), body)
    }

    fn money(&self, wallet: u64, route: &str, body: &str) -> Response {
        self.post(
            &format!("/v1/wallets/{wallet}/{route}"),
            &self.operator.token,
            body,
        )
    }

    /// A customer whose YER wallet holds `amount`.
    fn funded(&self, amount: &str) -> Customer {
        let customer = self.server.register_customer();
        self.server
            .deposit(&self.operator.token, customer.wallet_id, amount);
        customer
    }

    /// The balance body without `as_of`: equal texts mean nothing moved.
    fn balance_text(&self, wallet: u64) -> String {
        let (_, json) = self.server.balance(&self.operator.token, wallet);
        let mut data = json["data"].clone();
        data.as_object_mut().expect("object").remove("as_of");
        let (text, _) = self.server.balance(&self.operator.token, wallet);
        // Exact amounts come from the text; the rest from the parsed object.
        let amounts: Vec<&str> = text
            .split(',')
            .filter(|part| part.contains("balance\":"))
            .collect();
        format!("{data} {amounts:?}")
    }

    fn assert_balance(&self, wallet: u64, balance: &str, available: &str, held: &str) {
        let (text, _) = self.server.balance(&self.operator.token, wallet);
        for needle in [
            format!(r#""balance":{balance}"#),
            format!(r#""available_balance":{available}"#),
            format!(r#""held_balance":{held}"#),
        ] {
            assert!(text.contains(&needle), "{needle} in {text}");
        }
    }

    fn transactions(&self, wallet: u64) -> Value {
        self.server.get_ok(
            &format!("/v1/wallets/{wallet}/transactions?per_page=100"),
            &self.operator.token,
        )["data"]
            .clone()
    }

    fn ledger(&self, wallet: u64, query: &str) -> Response {
        self.server.get(
            &format!("/v1/wallets/{wallet}/ledger?{query}"),
            Some(&self.finance.token),
        )
    }
}

fn expect(response: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(response.status, status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
    assert!(body["message"].is_string(), "{what}: message");
    assert!(body["request_id"].is_string(), "{what}: request_id");
}

#[test]
fn deposits_and_withdrawals_keep_exact_decimals_at_currency_scale() {
    let f = fixture();
    let customer = f.server.register_customer();
    let wallet = customer.wallet_id;
    let deposit = f.money(
        wallet,
        "deposit",
        r#"{"amount": 0.10, "description": "ten fils"}"#,
    );
    assert_eq!(deposit.status, 200, "{}", deposit.text());
    assert!(
        deposit.text().contains(r#""amount":0.10"#),
        "{}",
        deposit.text()
    );
    let data = &deposit.json()["data"];
    assert_eq!(data["wallet_id"], json!(wallet));
    assert_eq!(data["transaction_type"], json!("deposit"));
    assert_eq!(data["status"], json!("completed"));
    assert_eq!(data["currency_code"], json!("YER"));
    assert_eq!(data["description"], json!("ten fils"));
    assert!(data["uuid"].is_string() && data["created_at"].is_string());

    let deposit = f.money(wallet, "deposit", r#"{"amount": 100.5}"#);
    assert!(
        deposit.text().contains(r#""amount":100.50"#),
        "{}",
        deposit.text()
    );
    f.money(wallet, "deposit", r#"{"amount": 0.2}"#);
    f.assert_balance(wallet, "100.80", "100.80", "0.00");
    let withdraw = f.money(
        wallet,
        "withdraw",
        r#"{"amount": 0.3, "currency_code": "YER"}"#,
    );
    assert_eq!(withdraw.status, 200, "{}", withdraw.text());
    assert!(
        withdraw.text().contains(r#""amount":0.30"#),
        "{}",
        withdraw.text()
    );
    assert_eq!(
        withdraw.json()["data"]["transaction_type"],
        json!("withdrawal")
    );
    f.assert_balance(wallet, "100.50", "100.50", "0.00");
    // The largest amount allowed, 1e12, is taken whole.
    let big = f.money(wallet, "deposit", r#"{"amount": 1000000000000}"#);
    assert_eq!(big.status, 200, "{}", big.text());
    f.assert_balance(wallet, "1000000000100.50", "1000000000100.50", "0.00");
    // A 0-decimal currency renders without a fraction and refuses one.
    let jpy = f.server.post_expect(
        "/v1/wallets",
        Some(&f.operator.token),
        &json!({"owner_type": "customer", "owner_id": customer.id, "currency_code": "JPY"})
            .to_string(),
        201,
    );
    let jpy = jpy["data"]["id"].as_u64().expect("id");
    let yen = f.money(jpy, "deposit", r#"{"amount": 1500}"#);
    assert!(yen.text().contains(r#""amount":1500,"#), "{}", yen.text());
    expect(
        &f.money(jpy, "deposit", r#"{"amount": 1.5}"#),
        422,
        "invalid_amount",
        "JPY 1.5",
    );
}

#[test]
fn a_withdrawal_beyond_spendable_is_422_and_changes_nothing() {
    let f = fixture();
    let customer = f.funded("100.00");
    let wallet = customer.wallet_id;
    let before = (f.balance_text(wallet), f.transactions(wallet));
    expect(
        &f.money(wallet, "withdraw", r#"{"amount": 100.01}"#),
        422,
        "insufficient_funds",
        "withdraw beyond balance",
    );
    assert_eq!((f.balance_text(wallet), f.transactions(wallet)), before);
    // Held funds are not spendable: with 30 held, 80 cannot be withdrawn though 100 is posted.
    let hold = f.post(
        "/v1/wallets/hold",
        &f.operator.token,
        &json!({"wallet_id": wallet, "amount": 30, "currency_code": "YER"}).to_string(),
    );
    assert_eq!(hold.status, 200, "{}", hold.text());
    let before = (f.balance_text(wallet), f.transactions(wallet));
    expect(
        &f.money(wallet, "withdraw", r#"{"amount": 80}"#),
        422,
        "insufficient_funds",
        "withdraw beyond spendable",
    );
    assert_eq!((f.balance_text(wallet), f.transactions(wallet)), before);
    assert_eq!(f.money(wallet, "withdraw", r#"{"amount": 70}"#).status, 200);
    f.assert_balance(wallet, "30.00", "0.00", "30.00");
}

#[test]
fn amounts_must_be_positive_exact_json_numbers_within_bounds() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    let before = (f.balance_text(wallet), f.transactions(wallet));
    let cases: [(&str, u16, &str); 15] = [
        (r#"{"amount": "10.00"}"#, 422, "validation_failed"),
        (r#"{"amount": "5"}"#, 422, "validation_failed"),
        (r#"{"amount": 0}"#, 422, "invalid_amount"),
        (r#"{"amount": 0.00}"#, 422, "invalid_amount"),
        (r#"{"amount": -5}"#, 422, "invalid_amount"),
        (r#"{"amount": 1000000000000.01}"#, 422, "invalid_amount"),
        (r#"{"amount": 1e13}"#, 422, "invalid_amount"),
        (r#"{"amount": 1.001}"#, 422, "invalid_amount"),
        (
            r#"{"amount": 1, "currency_code": "USD"}"#,
            422,
            "currency_mismatch",
        ),
        (
            r#"{"amount": 1, "currency_code": "ZZZ"}"#,
            422,
            "unknown_currency",
        ),
        (r#"{"amount": true}"#, 422, "validation_failed"),
        (
            r#"{"amount": 1, "description": 5}"#,
            422,
            "validation_failed",
        ),
        (r#"{"description": "no amount"}"#, 422, "validation_failed"),
        (r#"{"amount": 1, "amount": 1000}"#, 422, "validation_failed"),
        (
            r#"{"amount": 123456789012345678901234567890}"#,
            422,
            "validation_failed",
        ),
    ];
    for (body, status, code) in cases {
        for route in ["deposit", "withdraw"] {
            expect(
                &f.money(wallet, route, body),
                status,
                code,
                &format!("{route} {body}"),
            );
        }
    }
    for body in [
        r#"{"amount": "#,
        r#"{"amount": 1,}"#,
        "amount=1",
        r#"{"amount": 01}"#,
    ] {
        expect(
            &f.money(wallet, "deposit", body),
            400,
            "malformed_json",
            body,
        );
    }
    // An empty body is an empty object: the amount is missing.
    expect(
        &f.money(wallet, "deposit", ""),
        422,
        "validation_failed",
        "empty body",
    );
    assert_eq!((f.balance_text(wallet), f.transactions(wallet)), before);
}

/// API bug: serde's derived `Deserialize` also reads a struct from a JSON array, positionally, so
/// `[1]` deposits 1 (and `[1, "USD"]` fills `currency_code`). A body must be a JSON object.
#[test]
fn regression_an_array_body_is_refused_not_read_as_positional_fields() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    let before = (f.balance_text(wallet), f.transactions(wallet));
    for body in ["[1]", r#"[1, "YER"]"#] {
        expect(
            &f.money(wallet, "deposit", body),
            422,
            "validation_failed",
            body,
        );
    }
    assert_eq!((f.balance_text(wallet), f.transactions(wallet)), before);
}

#[test]
fn a_body_over_one_mebibyte_is_413_and_changes_nothing() {
    let f = fixture();
    let customer = f.funded("5");
    let wallet = customer.wallet_id;
    let before = f.balance_text(wallet);
    let prefix = r#"{"amount": 1, "description": ""#;
    let suffix = r#""}"#;
    // One byte over the cap: refused from the declared length, before the body is read.
    let filler = (1 << 20) + 1 - prefix.len() - suffix.len();
    let body = format!("{prefix}{}{suffix}", "x".repeat(filler));
    assert_eq!(body.len(), (1 << 20) + 1);
    let response = f.money(wallet, "deposit", &body);
    expect(&response, 413, "payload_too_large", "1 MiB + 1");
    assert_eq!(f.balance_text(wallet), before);
    // Exactly at the cap the body is read (and then refused on its merits: description too long,
    // or accepted); either way it is not a 413.
    let filler = (1 << 20) - prefix.len() - suffix.len();
    let body = format!("{prefix}{}{suffix}", "x".repeat(filler));
    assert_ne!(f.money(wallet, "deposit", &body).status, 413);
}

#[test]
fn x_request_id_is_echoed_generated_and_bounded() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}", customer.wallet_id);
    let given = "trace-abc-123";
    let ok = f.server.request(
        "GET",
        &path,
        Some(&customer.token),
        &[("X-Request-ID", given)],
        None,
    );
    assert_eq!(ok.status, 200);
    assert_eq!(ok.header("x-request-id"), Some(given));
    // Echoed in error bodies too.
    let error = f.server.request(
        "GET",
        "/v1/wallets/999999999",
        Some(&customer.token),
        &[("X-Request-ID", given)],
        None,
    );
    assert_eq!(error.status, 404);
    assert_eq!(error.header("x-request-id"), Some(given));
    assert_eq!(error.json()["request_id"], json!(given));
    // Generated when absent, different per request, and the same in header and body.
    let first = f.server.get("/v1/wallets/999999999", Some(&customer.token));
    let second = f.server.get("/v1/wallets/999999999", Some(&customer.token));
    let id = first
        .header("x-request-id")
        .expect("generated id")
        .to_owned();
    assert!(!id.is_empty());
    assert_ne!(Some(id.as_str()), second.header("x-request-id"));
    assert_eq!(first.json()["request_id"], json!(id));
    // 128 characters pass; 129 are refused with 400 (and a generated id).
    let longest = "a".repeat(128);
    let at_limit = f.server.request(
        "GET",
        &path,
        Some(&customer.token),
        &[("X-Request-ID", &longest)],
        None,
    );
    assert_eq!(at_limit.status, 200, "{}", at_limit.text());
    assert_eq!(at_limit.header("x-request-id"), Some(longest.as_str()));
    let too_long = "a".repeat(129);
    let refused = f.server.request(
        "POST",
        &format!("/v1/wallets/{}/deposit", customer.wallet_id),
        Some(&f.operator.token),
        &[("X-Request-ID", &too_long)],
        Some(br#"{"amount": 1}"#),
    );
    assert_eq!(refused.status, 400, "{}", refused.text());
    assert_eq!(refused.json()["status"], json!(false));
    let generated = refused.header("x-request-id").expect("a generated id");
    assert_ne!(generated, too_long);
    f.assert_balance(customer.wallet_id, "0.00", "0.00", "0.00");
}

fn transfer_body(from: u64, to: u64, amount: &str) -> String {
    format!(
        r#"{{"from_wallet_id": {from}, "to_wallet_id": {to}, "amount": {amount}, "currency_code": "YER"}}"#
    )
}

#[test]
fn transfers_move_money_atomically_from_wallets_the_caller_may_use() {
    let f = fixture();
    let alice = f.funded("100");
    let bob = f.server.register_customer();
    let response = f.post(
        "/v1/transfers",
        &alice.token,
        &transfer_body(alice.wallet_id, bob.wallet_id, "30.25"),
    );
    assert_eq!(response.status, 201, "{}", response.text());
    assert!(
        response.text().contains(r#""amount":30.25"#),
        "{}",
        response.text()
    );
    let data = &response.json()["data"];
    assert_eq!(data["wallet_id"], json!(alice.wallet_id), "the debit side");
    assert_eq!(data["transaction_type"], json!("transfer"));
    assert_eq!(data["status"], json!("completed"));
    f.assert_balance(alice.wallet_id, "69.75", "69.75", "0.00");
    f.assert_balance(bob.wallet_id, "30.25", "30.25", "0.00");

    // Bob cannot move Alice's money: her wallet is not his (404, not 403).
    let before = (
        f.balance_text(alice.wallet_id),
        f.balance_text(bob.wallet_id),
    );
    let stolen = f.post(
        "/v1/transfers",
        &bob.token,
        &transfer_body(alice.wallet_id, bob.wallet_id, "1"),
    );
    expect(&stolen, 404, "not_found", "transfer from another's wallet");
    expect(
        &f.post(
            "/v1/transfers",
            &alice.token,
            &transfer_body(alice.wallet_id, bob.wallet_id, "69.76"),
        ),
        422,
        "insufficient_funds",
        "transfer beyond balance",
    );
    expect(
        &f.post(
            "/v1/transfers",
            &alice.token,
            &transfer_body(alice.wallet_id, alice.wallet_id, "1"),
        ),
        422,
        "invalid_request",
        "transfer to the same wallet",
    );
    let usd = f.post(
        "/v1/transfers",
        &alice.token,
        &format!(
            r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": 1, "currency_code": "USD"}}"#,
            alice.wallet_id, bob.wallet_id
        ),
    );
    expect(
        &usd,
        422,
        "currency_mismatch",
        "transfer in another currency",
    );
    expect(
        &f.post(
            "/v1/transfers",
            &alice.token,
            &transfer_body(alice.wallet_id, 987_654_321, "1"),
        ),
        404,
        "not_found",
        "transfer to an unknown wallet",
    );
    assert_eq!(
        (
            f.balance_text(alice.wallet_id),
            f.balance_text(bob.wallet_id)
        ),
        before
    );
    // Staff of the wallets' business may transfer between customers.
    let staff = f.post(
        "/v1/transfers",
        &f.operator.token,
        &transfer_body(bob.wallet_id, alice.wallet_id, "0.25"),
    );
    assert_eq!(staff.status, 201, "{}", staff.text());
    f.assert_balance(alice.wallet_id, "70.00", "70.00", "0.00");
    f.assert_balance(bob.wallet_id, "30.00", "30.00", "0.00");
}

fn refund_body(uuid: &str, amount: &str) -> String {
    format!(r#"{{"original_transaction_uuid": "{uuid}", "amount": {amount}, "reason": "test"}}"#)
}

#[test]
fn refunds_credit_back_a_debit_and_never_exceed_it() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let withdrawal = f.money(wallet, "withdraw", r#"{"amount": 40}"#).json();
    let uuid = withdrawal["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    let refund = f.post(
        "/v1/wallets/refund",
        &f.operator.token,
        &refund_body(&uuid, "15"),
    );
    assert_eq!(refund.status, 200, "{}", refund.text());
    let body = refund.json();
    assert_eq!(body["status"], json!(true));
    assert!(body["message_translated"].is_string(), "{body}");
    assert_eq!(body["data"]["wallet_id"], json!(wallet));
    assert!(
        refund.text().contains(r#""amount":15.00"#),
        "{}",
        refund.text()
    );
    f.assert_balance(wallet, "75.00", "75.00", "0.00");

    let before = (f.balance_text(wallet), f.transactions(wallet));
    expect(
        &f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body(&uuid, "25.01"),
        ),
        422,
        "refund_exceeds_original",
        "over-refund",
    );
    assert_eq!((f.balance_text(wallet), f.transactions(wallet)), before);
    assert_eq!(
        f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body(&uuid, "25")
        )
        .status,
        200
    );
    f.assert_balance(wallet, "100.00", "100.00", "0.00");
    expect(
        &f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body(&uuid, "0.01"),
        ),
        422,
        "refund_exceeds_original",
        "refund after a full refund",
    );

    // A credit cannot be refunded.
    let deposit = f.money(wallet, "deposit", r#"{"amount": 5}"#).json();
    let credit = deposit["data"]["uuid"].as_str().expect("uuid");
    expect(
        &f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body(credit, "1"),
        ),
        422,
        "not_a_debit",
        "refund of a deposit",
    );
    // Refunds are business_operator: the customer is refused.
    let own = f.post(
        "/v1/wallets/refund",
        &customer.token,
        &refund_body(&uuid, "1"),
    );
    assert_eq!(own.status, 403, "{}", own.text());
    expect(
        &f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body("00000000-0000-4000-8000-000000000000", "1"),
        ),
        404,
        "not_found",
        "refund of an unknown transaction",
    );
    expect(
        &f.post(
            "/v1/wallets/refund",
            &f.operator.token,
            &refund_body("not-a-uuid", "1"),
        ),
        422,
        "validation_failed",
        "refund with a malformed uuid",
    );
}

#[test]
fn reversal_mirrors_every_entry_once_and_needs_a_reason() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    let deposit = f.money(wallet, "deposit", r#"{"amount": 20}"#).json();
    let uuid = deposit["data"]["uuid"].as_str().expect("uuid").to_owned();
    let body = json!({"transaction_uuid": uuid, "reason": "posted twice"}).to_string();

    expect(
        &f.post(
            "/v1/wallets/reverse",
            &f.restricted_finance.token,
            &json!({"transaction_uuid": uuid}).to_string(),
        ),
        422,
        "validation_failed",
        "reverse without a reason",
    );
    expect(
        &f.post(
            "/v1/wallets/reverse",
            &f.restricted_finance.token,
            &json!({"transaction_uuid": uuid, "reason": "  "}).to_string(),
        ),
        422,
        "validation_failed",
        "reverse with a blank reason",
    );
    // restricted_finance only: finance and operator are refused.
    for who in [&f.finance, &f.operator] {
        assert_eq!(f.post("/v1/wallets/reverse", &who.token, &body).status, 403);
    }
    f.assert_balance(wallet, "30.00", "30.00", "0.00");

    let reversed = f.post("/v1/wallets/reverse", &f.restricted_finance.token, &body);
    assert_eq!(reversed.status, 200, "{}", reversed.text());
    let data = &reversed.json()["data"];
    assert!(data["transaction"]["uuid"].is_string());
    let entries = data["entries"].as_array().expect("entries");
    assert!(!entries.is_empty());
    assert!(entries.iter().all(|e| e["is_reversal"] == json!(true)));
    assert!(entries.iter().all(|e| e["reverses_entry_id"].is_u64()));
    f.assert_balance(wallet, "10.00", "10.00", "0.00");
    // The original entry now points at its reversal.
    let ledger = f.ledger(wallet, "per_page=100").json();
    let records = ledger["data"]["data"].as_array().expect("entries").clone();
    let mirror = entries
        .iter()
        .find(|e| e["wallet_id"] == json!(wallet))
        .expect("a mirror entry on this wallet");
    let original = records
        .iter()
        .find(|e| e["id"] == mirror["reverses_entry_id"])
        .expect("the reversed entry is in the ledger");
    assert_eq!(original["reversed_by_entry_id"], mirror["id"]);

    expect(
        &f.post("/v1/wallets/reverse", &f.restricted_finance.token, &body),
        409,
        "already_reversed",
        "reverse twice",
    );
    f.assert_balance(wallet, "10.00", "10.00", "0.00");
}

/// A transfer into a frozen wallet is refused and leaves both sides as they were, on one shard
/// and across shards (where the source is debited first and must be given the money back).
#[test]
fn a_transfer_into_a_frozen_wallet_is_409_and_moves_nothing() {
    for shards in [1, 4] {
        let server = Server::start_with(walletd_tests::server::Options {
            shards: Some(shards),
            ..Default::default()
        });
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let freezer = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_operator"]);
        let customers: Vec<Customer> = (0..4).map(|_| server.register_customer()).collect();
        let source = &customers[0];
        server.deposit(&operator.token, source.wallet_id, "50");
        for target in &customers[1..] {
            let frozen = server.post(
                &format!("/v1/wallets/{}/freeze", target.wallet_id),
                Some(&freezer.token),
                "",
            );
            assert_eq!(frozen.status, 200, "{}", frozen.text());
            let response = server.post(
                "/v1/transfers",
                Some(&source.token),
                &transfer_body(source.wallet_id, target.wallet_id, "20"),
            );
            expect(&response, 409, "wallet_frozen", &format!("{shards} shards"));
        }
        let (text, _) = server.balance(&operator.token, source.wallet_id);
        assert!(
            text.contains(r#""balance":50.00"#),
            "{shards} shards: {text}"
        );
        assert!(
            text.contains(r#""available_balance":50.00"#),
            "{shards} shards: {text}"
        );
        for target in &customers[1..] {
            let (text, _) = server.balance(&operator.token, target.wallet_id);
            assert!(
                text.contains(r#""balance":0.00"#),
                "{shards} shards: {text}"
            );
        }
        // From a frozen wallet: refused too.
        let response = server.post(
            "/v1/transfers",
            Some(&customers[1].token),
            &transfer_body(customers[1].wallet_id, source.wallet_id, "1"),
        );
        assert_eq!(response.status, 409, "{}", response.text());
    }
}
