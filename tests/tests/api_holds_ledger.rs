//! Black-box tests of holds (place, list, capture, release, expiry bounds) and of the ledger
//! views (ledger, statement with date filters, verify-integrity). One server for the file; each
//! test has its own customers.

use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{Customer, Employee, Server, PLATFORM_BUSINESS_ID};

struct Fixture {
    server: Server,
    operator: Employee,
    finance: Employee,
    auditor: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let finance = server.create_employee(PLATFORM_BUSINESS_ID, &["finance"]);
        let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
        Fixture {
            server,
            operator,
            finance,
            auditor,
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
}

fn hold_body(wallet: u64, amount: &str, extra: &str) -> String {
    format!(r#"{{"wallet_id": {wallet}, "amount": {amount}, "currency_code": "YER"{extra}}}"#)
}

#[test]
fn holds_reserve_funds_then_capture_partially_or_release() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let placed = f.post(
        "/v1/wallets/hold",
        &f.operator.token,
        &hold_body(
            wallet,
            "40",
            r#", "reason": "card auth", "expiry_minutes": 30"#,
        ),
    );
    assert_eq!(placed.status, 200, "{}", placed.text());
    let hold = placed.json()["data"].clone();
    assert_eq!(hold["status"], json!("active"));
    assert_eq!(hold["wallet_id"], json!(wallet));
    assert_eq!(hold["currency_code"], json!("YER"));
    assert_eq!(hold["reason"], json!("card auth"));
    assert!(hold["expires_at"]
        .as_str()
        .is_some_and(|t| t > hold["created_at"].as_str().unwrap_or("")));
    assert!(
        placed.text().contains(r#""amount":40.00"#),
        "{}",
        placed.text()
    );
    f.assert_balance(wallet, "100.00", "60.00", "40.00");
    let shown = f.server.wallet(&customer.token, wallet);
    assert_eq!(shown["cached_held_balance"], json!(40.0));

    // The owner sees the hold in the list.
    let list = f
        .server
        .get_ok(&format!("/v1/wallets/{wallet}/holds"), &customer.token);
    assert_eq!(list["data"]["total"], json!(1));
    assert_eq!(list["data"]["data"][0]["uuid"], hold["uuid"]);
    expect(
        &f.post(
            "/v1/wallets/hold",
            &f.operator.token,
            &hold_body(wallet, "60.01", ""),
        ),
        422,
        "insufficient_funds",
        "hold beyond spendable",
    );

    let uuid = hold["uuid"].as_str().expect("uuid");
    let captured = f.post(
        &format!("/v1/wallets/holds/{uuid}/capture"),
        &f.operator.token,
        r#"{"amount": 15.5}"#,
    );
    assert_eq!(captured.status, 200, "{}", captured.text());
    assert_eq!(captured.json()["data"]["status"], json!("captured"));
    f.assert_balance(wallet, "84.50", "84.50", "0.00");
    expect(
        &f.post(
            &format!("/v1/wallets/holds/{uuid}/release"),
            &f.operator.token,
            "",
        ),
        409,
        "invalid_state",
        "release a captured hold",
    );

    let second = f.post(
        "/v1/wallets/hold",
        &f.operator.token,
        &hold_body(wallet, "20", ""),
    );
    let second = second.json()["data"].clone();
    let second_uuid = second["uuid"].as_str().expect("uuid");
    f.assert_balance(wallet, "84.50", "64.50", "20.00");
    expect(
        &f.post(
            &format!("/v1/wallets/holds/{second_uuid}/capture"),
            &f.operator.token,
            r#"{"amount": 20.01}"#,
        ),
        422,
        "capture_exceeds_hold",
        "capture above the hold",
    );
    let released = f.post(
        &format!("/v1/wallets/holds/{second_uuid}/release"),
        &f.operator.token,
        "",
    );
    assert_eq!(released.status, 200, "{}", released.text());
    assert_eq!(released.json()["data"]["status"], json!("released"));
    f.assert_balance(wallet, "84.50", "84.50", "0.00");
    let statuses: Vec<Value> = f
        .server
        .get_ok(&format!("/v1/wallets/{wallet}/holds"), &customer.token)["data"]["data"]
        .as_array()
        .expect("holds")
        .iter()
        .map(|h| h["status"].clone())
        .collect();
    assert_eq!(statuses.len(), 2);
    assert!(statuses.contains(&json!("captured")) && statuses.contains(&json!("released")));
    expect(
        &f.post(
            "/v1/wallets/holds/00000000-0000-4000-8000-000000000000/release",
            &f.operator.token,
            "",
        ),
        404,
        "not_found",
        "release of an unknown hold",
    );
}

#[test]
fn hold_expiry_minutes_must_be_between_1_and_10080() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    for minutes in ["0", "10081", "-1", "1.5"] {
        let response = f.post(
            "/v1/wallets/hold",
            &f.operator.token,
            &hold_body(wallet, "1", &format!(r#", "expiry_minutes": {minutes}"#)),
        );
        assert_eq!(response.status, 422, "{minutes}: {}", response.text());
    }
    f.assert_balance(wallet, "10.00", "10.00", "0.00");
    for minutes in ["1", "10080"] {
        let response = f.post(
            "/v1/wallets/hold",
            &f.operator.token,
            &hold_body(wallet, "1", &format!(r#", "expiry_minutes": {minutes}"#)),
        );
        assert_eq!(response.status, 200, "{minutes}: {}", response.text());
    }
    // The customer may not place holds (business_operator).
    let own = f.post(
        "/v1/wallets/hold",
        &customer.token,
        &hold_body(wallet, "1", ""),
    );
    assert_eq!(own.status, 403, "{}", own.text());
}

#[test]
fn ledger_is_finance_only_and_lists_entries_newest_first() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    f.money(wallet, "deposit", r#"{"amount": 5}"#);
    f.money(wallet, "withdraw", r#"{"amount": 2.5}"#);
    let response = f.ledger(wallet, "");
    assert_eq!(response.status, 200, "{}", response.text());
    let page = &response.json()["data"];
    assert_eq!(page["total"], json!(3));
    let entries = page["data"].as_array().expect("entries");
    let ids: Vec<u64> = entries
        .iter()
        .map(|e| e["id"].as_u64().expect("id"))
        .collect();
    let mut sorted = ids.clone();
    sorted.sort_unstable_by(|a, b| b.cmp(a));
    assert_eq!(ids, sorted, "newest first");
    assert_eq!(entries[0]["direction"], json!("debit"));
    assert_eq!(entries[0]["entry_type"], json!("withdrawal"));
    assert_eq!(entries[0]["status"], json!("posted"));
    assert!(
        response.text().contains(r#""signed_amount":-2.50"#),
        "{}",
        response.text()
    );
    assert!(
        response.text().contains(r#""balance_after":12.50"#),
        "{}",
        response.text()
    );
    assert!(entries[0]["meta"]["hash"].is_string());
    assert_eq!(entries[0]["meta"]["prev_hash"], entries[1]["meta"]["hash"]);
    for who in [&customer.token, &f.operator.token, &f.auditor.token] {
        let refused = f
            .server
            .get(&format!("/v1/wallets/{wallet}/ledger"), Some(who));
        assert_eq!(refused.status, 403, "{}", refused.text());
    }
}

#[test]
fn statement_filters_by_date_and_lists_newest_first() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    f.money(wallet, "deposit", r#"{"amount": 1}"#);
    let statement = |query: &str| {
        f.server.get(
            &format!("/v1/wallets/{wallet}/statement?{query}"),
            Some(&customer.token),
        )
    };
    let all = statement("");
    assert_eq!(all.status, 200, "{}", all.text());
    let entries = all.json()["data"]["data"]
        .as_array()
        .expect("entries")
        .clone();
    assert_eq!(entries.len(), 2);
    assert!(
        entries[0]["id"].as_u64() > entries[1]["id"].as_u64(),
        "newest first"
    );
    let day = entries[1]["created_at"].as_str().expect("created_at")[..10].to_owned();
    let newest_day = entries[0]["created_at"].as_str().expect("created_at")[..10].to_owned();
    let same_day = statement(&format!("from={day}&to={newest_day}"));
    assert_eq!(
        same_day.json()["data"]["total"],
        json!(2),
        "{}",
        same_day.text()
    );
    for query in [
        "from=2999-01-01",
        "to=2000-01-01",
        "from=2000-01-01&to=2000-12-31",
    ] {
        let response = statement(query);
        assert_eq!(response.status, 200, "{query}: {}", response.text());
        let page = &response.json()["data"];
        assert_eq!(page["total"], json!(0), "{query}");
        assert_eq!(page["data"], json!([]), "{query}");
    }
    let since = statement("from=2000-01-01");
    assert_eq!(since.json()["data"]["total"], json!(2));
    for query in [
        "from=2026-13-01",
        "from=yesterday",
        "from=2001-01-02&to=2001-01-01",
    ] {
        let response = statement(query);
        assert_eq!(response.status, 422, "{query}: {}", response.text());
    }
    let stranger = f.server.register_customer();
    let refused = f.server.get(
        &format!("/v1/wallets/{wallet}/statement"),
        Some(&stranger.token),
    );
    assert_eq!(refused.status, 404, "{}", refused.text());
}

#[test]
fn verify_integrity_checks_the_chain_and_stamps_balance_verified_at() {
    let f = fixture();
    let customer = f.funded("10");
    let wallet = customer.wallet_id;
    f.money(wallet, "withdraw", r#"{"amount": 3.33}"#);
    let created = f.server.wallet(&customer.token, wallet);
    assert_eq!(created["balance_verified_at"], created["created_at"]);
    let path = format!("/v1/wallets/{wallet}/verify-integrity");
    let response = f.server.get(&path, Some(&f.auditor.token));
    assert_eq!(response.status, 200, "{}", response.text());
    let report = &response.json()["data"];
    assert_eq!(report["wallet_id"], json!(wallet));
    assert_eq!(report["valid"], json!(true));
    assert_eq!(report["entries_checked"], json!(2));
    assert!(
        response.text().contains(r#""ledger_balance":6.67"#),
        "{}",
        response.text()
    );
    assert!(
        response.text().contains(r#""cached_balance":6.67"#),
        "{}",
        response.text()
    );
    assert_eq!(report["first_invalid_entry_id"], Value::Null);
    assert!(report["chain_head"].as_str().is_some_and(|h| h.len() == 64));
    let verified_at = report["verified_at"].as_str().expect("verified_at");
    let after = f.server.wallet(&customer.token, wallet);
    assert_eq!(after["balance_verified_at"], json!(verified_at));
    for who in [&customer.token, &f.finance.token, &f.operator.token] {
        assert_eq!(f.server.get(&path, Some(who)).status, 403);
    }
}

/// Transactions and holds are named by sealed uuids that open under their shard's key: after a
/// SIGKILL the restarted walletd gets the key back from its log and finds them (a hold released
/// and a deposit reversed by uuid), including one posted after the first restart and found
/// after a second kill; `wal inspect` prints the key redacted, and `replay --verify` agrees
/// that the store's key is the shard's.
#[test]
fn records_are_found_by_uuid_across_a_sigkill_and_inspect_hides_the_key() {
    let mut server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let reverser = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_finance"]);
    let customer = server.register_customer();
    let wallet = customer.wallet_id;
    let uuid_of = |body: &Value| body["data"]["uuid"].as_str().expect("uuid").to_owned();
    let first = uuid_of(&server.deposit(&operator.token, wallet, "50"));
    let placed = server.post(
        "/v1/wallets/hold",
        Some(&operator.token),
        &hold_body(wallet, "5", ""),
    );
    assert_eq!(placed.status, 200, "{}", placed.text());
    let hold = uuid_of(&placed.json());

    server.kill_hard();
    server.restart();
    let released = server.post(
        &format!("/v1/wallets/holds/{hold}/release"),
        Some(&operator.token),
        "{}",
    );
    assert_eq!(released.status, 200, "{}", released.text());
    let reverse = |server: &Server, uuid: &str| {
        server.post(
            "/v1/wallets/reverse",
            Some(&reverser.token),
            &json!({"transaction_uuid": uuid, "reason": "posted twice"}).to_string(),
        )
    };
    let reversed = reverse(&server, &first);
    assert_eq!(reversed.status, 200, "{}", reversed.text());
    let second = uuid_of(&server.deposit(&operator.token, wallet, "7"));

    server.kill_hard();
    server.restart();
    let reversed = reverse(&server, &second);
    assert_eq!(reversed.status, 200, "{}", reversed.text());
    let (text, _) = server.balance(&operator.token, wallet);
    assert!(text.contains(r#""balance":0.00"#), "{text}");
    let mut forged = second.clone().into_bytes();
    let last = forged.last_mut().expect("a uuid");
    *last = if *last == b'0' { b'1' } else { b'0' };
    let forged = String::from_utf8(forged).expect("ascii");
    expect(
        &reverse(&server, &forged),
        404,
        "not_found",
        "a forged uuid",
    );

    assert_eq!(server.stop().code(), Some(0));
    let (status, stdout, stderr) = server.run_tool(&["wal", "inspect"]);
    assert!(status.success(), "wal inspect: {stderr}");
    let keyed: Vec<&str> = stdout
        .lines()
        .filter(|line| line.contains("uuid_key_chosen"))
        .collect();
    assert_eq!(keyed.len(), 1, "one shard, one key: {stdout}");
    assert!(
        keyed[0].contains(r#""uuid_key_chosen":"<redacted>""#),
        "{}",
        keyed[0]
    );
    let (status, stdout, stderr) = server.run_tool(&["replay", "--verify"]);
    assert!(
        status.success() && stdout.contains("verified"),
        "walletd replay --verify: {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
}
