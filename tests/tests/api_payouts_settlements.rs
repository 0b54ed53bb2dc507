//! Black-box tests of payouts and settlements (docs/commerce-api.md "Payouts", "Settlements"):
//! create holds or gathers, four-eyes approval, reject with a reason, execute, cancel, every
//! refused transition 409 `invalid_state` with nothing changed, lists with filters and pages,
//! idempotency keys. One server for the file; each test has its own customers or merchant.

use std::collections::HashSet;
use std::sync::OnceLock;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{
    dec, decimal, exact_json, unique, utc_date, Balances, Customer, Employee, Server,
    PLATFORM_BUSINESS_ID,
};

/// Staff of one business for payouts and settlements.
struct Staff {
    /// Role operator (and merchant): deposits, merchant wallets.
    operator: Employee,
    /// Roles finance and restricted_approver: creates, and so may not approve its own.
    maker: Employee,
    /// Role restricted_approver.
    approver: Employee,
    /// Role restricted_operator.
    executor: Employee,
    /// Role finance only.
    finance: Employee,
}

fn staff(server: &Server, business: u64) -> Staff {
    Staff {
        operator: server.create_employee(business, &["operator", "merchant"]),
        maker: server.create_employee(business, &["finance", "restricted_approver"]),
        approver: server.create_employee(business, &["restricted_approver"]),
        executor: server.create_employee(business, &["restricted_operator"]),
        finance: server.create_employee(business, &["finance"]),
    }
}

struct Fixture {
    server: Server,
    /// The platform business's staff (customer wallets belong to it).
    platform: Staff,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let platform = staff(&server, PLATFORM_BUSINESS_ID);
        Fixture { server, platform }
    })
}

impl Fixture {
    fn funded(&self, amount: &str) -> Customer {
        let customer = self.server.register_customer();
        self.server
            .deposit(&self.platform.operator.token, customer.wallet_id, amount);
        customer
    }

    fn balances(&self, wallet: u64) -> Balances {
        self.server.balances(&self.platform.operator.token, wallet)
    }

    fn assert_balances(&self, wallet: u64, balance: &str, held: &str, what: &str) {
        let b = self.balances(wallet);
        assert_eq!(
            (b.balance, b.held, b.available),
            (dec(balance), dec(held), dec(balance) - dec(held)),
            "{what}: balance, held, available of wallet {wallet}"
        );
    }

    fn create_payout(&self, token: &str, wallet: u64, amount: &str, extra: &str) -> Response {
        self.server.post(
            "/v1/payouts",
            Some(token),
            &format!(
                r#"{{"wallet_id": {wallet}, "amount": {amount}, "currency_code": "YER", "payout_method": "bank_transfer", "payout_destination": {{"iban": "YE00TEST0001"}}{extra}}}"#
            ),
        )
    }

    /// A pending payout by the maker that must answer 201; returns its id.
    fn payout(&self, wallet: u64, amount: &str) -> u64 {
        let response = self.create_payout(&self.platform.maker.token, wallet, amount, "");
        assert_eq!(response.status, 201, "create payout: {}", response.text());
        id_of(&response)
    }

    fn payout_action(&self, token: &str, id: u64, action: &str, body: &str) -> Response {
        self.server
            .post(&format!("/v1/payouts/{id}/{action}"), Some(token), body)
    }

    /// Moves a payout with `action` (approve by the approver, execute by the executor, reject
    /// and cancel by whom the route wants); must answer 200 with `status`.
    fn move_payout(&self, id: u64, action: &str, status: &str) -> Value {
        let (token, body) = match action {
            "approve" => (&self.platform.approver.token, r#"{"notes": "ok"}"#),
            "reject" => (&self.platform.approver.token, r#"{"reason": "no"}"#),
            "execute" => (&self.platform.executor.token, ""),
            "cancel" => (&self.platform.maker.token, ""),
            _ => unreachable!("unknown action {action}"),
        };
        let response = self.payout_action(token, id, action, body);
        assert_eq!(response.status, 200, "{action}: {}", response.text());
        let body = response.json();
        assert_eq!(body["status"], json!(true), "{action}: {body}");
        assert_eq!(body["data"]["status"], json!(status), "{action}: {body}");
        body
    }

    fn get_payout(&self, id: u64) -> Value {
        self.server
            .get_ok(&format!("/v1/payouts/{id}"), &self.platform.finance.token)["data"]
            .clone()
    }
}

fn id_of(response: &Response) -> u64 {
    response.json()["data"]["id"]
        .as_u64()
        .unwrap_or_else(|| panic!("an id in {}", response.text()))
}

fn standard_error(response: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(response.status, status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}: {body}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
}

// ---------------------------------------------------------------------------------------------
// Payouts
// ---------------------------------------------------------------------------------------------

#[test]
fn creating_a_payout_answers_201_pending_and_holds_the_amount() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let response = f.create_payout(
        &f.platform.maker.token,
        wallet,
        "30.00",
        r#", "description": "weekly""#,
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let payout = &body["data"];
    assert_eq!(payout["status"], json!("pending"));
    assert_eq!(payout["wallet_id"], json!(wallet));
    assert_eq!(payout["currency_code"], json!("YER"));
    assert_eq!(payout["payout_method"], json!("bank_transfer"));
    assert_eq!(
        payout["payout_destination"],
        json!({"iban": "YE00TEST0001"})
    );
    assert_eq!(payout["description"], json!("weekly"));
    assert_eq!(payout["attempts"], json!([]));
    // With no key in the body or the header, the payout's uuid is its key.
    assert!(payout["uuid"].is_string());
    assert_eq!(payout["idempotency_key"], payout["uuid"]);
    assert_eq!(
        decimal(&exact_json(&response.body)["data"]["amount"]),
        dec("30.00")
    );
    f.assert_balances(wallet, "100", "30.00", "after create");
    let shown = exact_json(
        &f.server
            .get(
                &format!("/v1/wallets/{wallet}"),
                Some(&f.platform.operator.token),
            )
            .body,
    );
    assert_eq!(decimal(&shown["data"]["cached_held_balance"]), dec("30.00"));

    // Beyond what is spendable now (70.00): 422 insufficient_funds, nothing held.
    standard_error(
        &f.create_payout(&f.platform.maker.token, wallet, "70.01", ""),
        422,
        "insufficient_funds",
        "payout beyond spendable",
    );
    f.assert_balances(wallet, "100", "30.00", "after the refused create");
}

#[test]
fn only_business_finance_creates_payouts() {
    let f = fixture();
    let customer = f.funded("100");
    let other = f.server.create_business(false);
    let other_finance = f.server.create_employee(other, &["finance"]);
    for (who, token) in [
        ("the customer", customer.token.as_str()),
        ("an operator", f.platform.operator.token.as_str()),
        ("an approver", f.platform.approver.token.as_str()),
        ("finance of another business", other_finance.token.as_str()),
    ] {
        let response = f.create_payout(token, customer.wallet_id, "1.00", "");
        assert_eq!(response.status, 403, "{who}: {}", response.text());
    }
    f.assert_balances(customer.wallet_id, "100", "0", "nothing held");
}

#[test]
fn the_creator_cannot_approve_its_own_payout() {
    let f = fixture();
    let customer = f.funded("100");
    let id = f.payout(customer.wallet_id, "10.00");
    standard_error(
        &f.payout_action(&f.platform.maker.token, id, "approve", "{}"),
        403,
        "four_eyes",
        "approval by the creator",
    );
    assert_eq!(f.get_payout(id)["status"], json!("pending"));
    // Finance without the approver role: 403 too.
    let response = f.payout_action(&f.platform.finance.token, id, "approve", "{}");
    assert_eq!(response.status, 403, "{}", response.text());
    // Another approver may.
    let approved = f.move_payout(id, "approve", "approved");
    assert!(approved["message_translated"].is_string(), "{approved}");
    assert!(approved["message"].is_string(), "{approved}");
}

#[test]
fn executing_an_approved_payout_captures_the_hold_with_one_attempt() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let id = f.payout(wallet, "30.00");
    f.move_payout(id, "approve", "approved");
    f.assert_balances(wallet, "100", "30.00", "approved: still held");
    // Execution is restricted_operator's: the approver may not.
    let response = f.payout_action(&f.platform.approver.token, id, "execute", "");
    assert_eq!(response.status, 403, "{}", response.text());

    let executed = f.move_payout(id, "execute", "executed");
    assert!(executed["message_translated"].is_string(), "{executed}");
    let attempts = executed["data"]["attempts"].as_array().expect("attempts");
    assert_eq!(attempts.len(), 1, "{executed}");
    let attempt = &attempts[0];
    assert_eq!(attempt["attempt_number"], json!(1));
    assert_eq!(attempt["status"], json!("submitted"));
    assert!(attempt["submitted_at"].is_string(), "{attempt}");
    assert!(attempt.get("completed_at").is_some(), "{attempt}");
    assert!(
        attempt["provider_ref"]
            .as_str()
            .is_some_and(|r| !r.is_empty()),
        "{attempt}"
    );
    f.assert_balances(wallet, "70.00", "0", "executed");
    assert_eq!(f.get_payout(id)["status"], json!("executed"));
}

#[test]
fn rejecting_needs_a_reason_and_releases_the_funds() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let id = f.payout(wallet, "25.00");
    for body in [
        "{}",
        r#"{"reason": ""}"#,
        r#"{"reason": "   "}"#,
        r#"{"reason": null}"#,
    ] {
        let response = f.payout_action(&f.platform.approver.token, id, "reject", body);
        assert_eq!(response.status, 422, "reject {body:?}: {}", response.text());
        assert_eq!(response.json()["status"], json!(false));
    }
    assert_eq!(f.get_payout(id)["status"], json!("pending"));
    f.assert_balances(wallet, "100", "25.00", "still held after refused rejects");
    let rejected = f.payout_action(
        &f.platform.approver.token,
        id,
        "reject",
        r#"{"reason": "destination not verified"}"#,
    );
    assert_eq!(rejected.status, 200, "{}", rejected.text());
    let body = rejected.json();
    assert_eq!(body["data"]["status"], json!("rejected"));
    assert!(body["message_translated"].is_string(), "{body}");
    f.assert_balances(wallet, "100", "0", "released by the reject");
}

#[test]
fn cancelling_releases_the_funds_from_pending_and_from_approved() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let pending = f.payout(wallet, "10.00");
    let approved = f.payout(wallet, "20.00");
    f.move_payout(approved, "approve", "approved");
    f.assert_balances(wallet, "100", "30.00", "both held");
    f.move_payout(pending, "cancel", "cancelled");
    f.assert_balances(wallet, "100", "20.00", "the pending one released");
    f.move_payout(approved, "cancel", "cancelled");
    f.assert_balances(wallet, "100", "0", "the approved one released");
}

#[test]
fn every_other_payout_transition_is_409_invalid_state_and_changes_nothing() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let pending = f.payout(wallet, "1.00");
    let approved = f.payout(wallet, "2.00");
    f.move_payout(approved, "approve", "approved");
    let rejected = f.payout(wallet, "3.00");
    f.move_payout(rejected, "reject", "rejected");
    let cancelled = f.payout(wallet, "4.00");
    f.move_payout(cancelled, "cancel", "cancelled");
    let executed = f.payout(wallet, "5.00");
    f.move_payout(executed, "approve", "approved");
    f.move_payout(executed, "execute", "executed");
    // Held: 1.00 + 2.00; balance: 100 - 5.00.
    f.assert_balances(wallet, "95.00", "3.00", "before the refused moves");

    let p = &f.platform;
    let refused: [(u64, &str, &str, &Employee, &str); 13] = [
        (pending, "pending", "execute", &p.executor, ""),
        (approved, "approved", "approve", &p.approver, "{}"),
        (
            approved,
            "approved",
            "reject",
            &p.approver,
            r#"{"reason": "x"}"#,
        ),
        (rejected, "rejected", "approve", &p.approver, "{}"),
        (rejected, "rejected", "execute", &p.executor, ""),
        (rejected, "rejected", "cancel", &p.maker, ""),
        (cancelled, "cancelled", "approve", &p.approver, "{}"),
        (cancelled, "cancelled", "execute", &p.executor, ""),
        (cancelled, "cancelled", "cancel", &p.maker, ""),
        (executed, "executed", "cancel", &p.maker, ""),
        (executed, "executed", "approve", &p.approver, "{}"),
        (executed, "executed", "execute", &p.executor, ""),
        (
            executed,
            "executed",
            "reject",
            &p.approver,
            r#"{"reason": "x"}"#,
        ),
    ];
    for (id, status, action, who, body) in refused {
        standard_error(
            &f.payout_action(&who.token, id, action, body),
            409,
            "invalid_state",
            &format!("{action} a {status} payout"),
        );
        assert_eq!(f.get_payout(id)["status"], json!(status), "{action}");
    }
    f.assert_balances(wallet, "95.00", "3.00", "after the refused moves");
    assert_eq!(
        f.get_payout(executed)["attempts"].as_array().map(Vec::len),
        Some(1)
    );
}

fn list_ids(page: &Value) -> Vec<u64> {
    page["data"]
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["id"].as_u64().expect("id"))
        .collect()
}

#[test]
fn payout_list_filters_by_wallet_and_status_and_pages() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    let elsewhere = f.funded("100");
    let pending = f.payout(wallet, "1.00");
    let approved = f.payout(wallet, "2.00");
    f.move_payout(approved, "approve", "approved");
    let cancelled = f.payout(wallet, "3.00");
    f.move_payout(cancelled, "cancel", "cancelled");
    let other = f.payout(elsewhere.wallet_id, "4.00");

    let list = |query: &str| {
        let body = f
            .server
            .get_ok(&format!("/v1/payouts?{query}"), &f.platform.finance.token);
        assert_eq!(body["status"], json!(true));
        body["data"].clone()
    };
    let all = list(&format!("wallet_id={wallet}"));
    assert_eq!(all["total"], json!(3));
    let ids: HashSet<u64> = list_ids(&all).into_iter().collect();
    assert_eq!(ids, HashSet::from([pending, approved, cancelled]));
    assert!(!ids.contains(&other));

    for (status, id) in [
        ("pending", pending),
        ("approved", approved),
        ("cancelled", cancelled),
    ] {
        let page = list(&format!("wallet_id={wallet}&status={status}"));
        assert_eq!(list_ids(&page), [id], "status={status}: {page}");
        assert_eq!(page["total"], json!(1));
        assert_eq!(page["data"][0]["status"], json!(status));
    }
    assert_eq!(
        list(&format!("wallet_id={wallet}&status=executed"))["total"],
        json!(0)
    );

    let first = list(&format!("wallet_id={wallet}&per_page=2&page=1"));
    let second = list(&format!("wallet_id={wallet}&per_page=2&page=2"));
    assert_eq!(
        (
            &first["current_page"],
            &first["last_page"],
            &first["per_page"],
            &first["total"],
            &first["from"],
            &first["to"]
        ),
        (
            &json!(1),
            &json!(2),
            &json!(2),
            &json!(3),
            &json!(1),
            &json!(2)
        )
    );
    assert_eq!(
        (&second["current_page"], &second["from"], &second["to"]),
        (&json!(2), &json!(3), &json!(3))
    );
    let mut paged: Vec<u64> = list_ids(&first);
    paged.extend(list_ids(&second));
    assert_eq!(paged.len(), 3);
    assert_eq!(paged.into_iter().collect::<HashSet<_>>(), ids);
    let past = list(&format!("wallet_id={wallet}&per_page=2&page=3"));
    assert_eq!(past["data"], json!([]));
    assert_eq!(past["total"], json!(3));
    for query in ["per_page=0", "per_page=101", "page=0"] {
        let response = f.server.get(
            &format!("/v1/payouts?{query}"),
            Some(&f.platform.finance.token),
        );
        assert_eq!(response.status, 422, "{query}: {}", response.text());
    }
    // Another business's payouts are not the platform finance's to list.
    let merchant = f.server.create_business(true);
    let response = f.server.get(
        &format!("/v1/payouts?business_id={merchant}"),
        Some(&f.platform.finance.token),
    );
    assert_eq!(response.status, 403, "{}", response.text());
}

#[test]
fn get_payout_returns_it_and_an_unknown_one_is_404() {
    let f = fixture();
    let customer = f.funded("10");
    let id = f.payout(customer.wallet_id, "1.50");
    let payout = f.get_payout(id);
    assert_eq!(payout["id"], json!(id));
    assert_eq!(payout["status"], json!("pending"));
    assert_eq!(payout["wallet_id"], json!(customer.wallet_id));
    standard_error(
        &f.server
            .get("/v1/payouts/987654321", Some(&f.platform.finance.token)),
        404,
        "not_found",
        "an unknown payout",
    );
}

#[test]
fn a_payout_idempotency_key_gives_the_same_payout_once() {
    let f = fixture();
    let customer = f.funded("100");
    let wallet = customer.wallet_id;
    // Body key.
    let key = format!("payout-{}", unique());
    let extra = format!(r#", "idempotency_key": "{key}""#);
    let first = f.create_payout(&f.platform.maker.token, wallet, "10.00", &extra);
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.json()["data"]["idempotency_key"], json!(key));
    let again = f.create_payout(&f.platform.maker.token, wallet, "10.00", &extra);
    assert!((200..300).contains(&again.status), "{}", again.text());
    assert_eq!(id_of(&again), id_of(&first));
    f.assert_balances(wallet, "100", "10.00", "held once for the body key");

    // Header key.
    let header_key = format!("payout-header-{}", unique());
    let body = format!(
        r#"{{"wallet_id": {wallet}, "amount": 5.00, "currency_code": "YER", "payout_method": "bank_transfer"}}"#
    );
    let first =
        f.server
            .post_idempotent("/v1/payouts", &f.platform.maker.token, &header_key, &body);
    assert_eq!(first.status, 201, "{}", first.text());
    assert_eq!(first.json()["data"]["idempotency_key"], json!(header_key));
    let again =
        f.server
            .post_idempotent("/v1/payouts", &f.platform.maker.token, &header_key, &body);
    assert_eq!(again.status, 201, "{}", again.text());
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.text(), first.text());
    f.assert_balances(wallet, "100", "15.00", "held once for the header key");
}

// ---------------------------------------------------------------------------------------------
// Settlements
// ---------------------------------------------------------------------------------------------

/// A merchant business with its YER wallet and staff.
struct Shop {
    id: u64,
    wallet: u64,
    staff: Staff,
}

fn shop(f: &Fixture) -> Shop {
    let id = f.server.create_business(true);
    let staff = staff(&f.server, id);
    let wallet = f
        .server
        .create_merchant_wallet(&staff.operator.token, id, "YER")["id"]
        .as_u64()
        .expect("wallet id");
    Shop { id, wallet, staff }
}

/// A completed YER payment from a fresh customer to `shop`.
fn pay(f: &Fixture, shop: &Shop, amount: &str) {
    let payer = f.funded("1000");
    f.server.complete_payment(&payer, shop.id, amount, "");
}

fn settlement_body(wallet: u64, key: &str, extra: &str) -> String {
    format!(
        r#"{{"wallet_id": {wallet}, "period_type": "custom", "period_start": "{}", "period_end": "{}", "idempotency_key": "{key}"{extra}}}"#,
        utc_date(-1),
        utc_date(0)
    )
}

fn create_settlement(f: &Fixture, shop: &Shop, key: &str) -> Response {
    f.server.post(
        "/v1/wallet-settlements",
        Some(&shop.staff.maker.token),
        &settlement_body(shop.wallet, key, ""),
    )
}

fn new_key() -> String {
    format!("settlement-{}", unique())
}

/// A settlement that must be created (201); returns its id.
fn settlement(f: &Fixture, shop: &Shop) -> u64 {
    let response = create_settlement(f, shop, &new_key());
    assert_eq!(
        response.status,
        201,
        "create settlement: {}",
        response.text()
    );
    id_of(&response)
}

fn settlement_action(f: &Fixture, token: &str, id: u64, action: &str, body: &str) -> Response {
    f.server.post(
        &format!("/v1/wallet-settlements/{id}/{action}"),
        Some(token),
        body,
    )
}

fn move_settlement(f: &Fixture, shop: &Shop, id: u64, action: &str, status: &str) -> Response {
    let (token, body) = match action {
        "approve" => (&shop.staff.approver.token, r#"{"notes": "ok"}"#),
        "reject" => (&shop.staff.approver.token, r#"{"reason": "no"}"#),
        "execute" => (&shop.staff.executor.token, ""),
        "cancel" => (&shop.staff.maker.token, ""),
        _ => unreachable!("unknown action {action}"),
    };
    let response = settlement_action(f, token, id, action, body);
    assert_eq!(response.status, 200, "{action}: {}", response.text());
    assert_eq!(response.json()["data"]["status"], json!(status), "{action}");
    response
}

fn get_settlement(f: &Fixture, shop: &Shop, id: u64) -> Response {
    let response = f.server.get(
        &format!("/v1/wallet-settlements/{id}"),
        Some(&shop.staff.finance.token),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    response
}

/// The (amount, fee, net) of each item, sorted, and the totals (net, fee).
fn items_and_totals(response: &Response) -> (Vec<(Decimal, Decimal, Decimal)>, Decimal, Decimal) {
    let exact = exact_json(&response.body);
    let data = &exact["data"];
    let mut items: Vec<(Decimal, Decimal, Decimal)> = data["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|item| {
            assert!(item["transaction_uuid"].is_string(), "{item}");
            (
                decimal(&item["amount"]),
                decimal(&item["fee_amount"]),
                decimal(&item["net_amount"]),
            )
        })
        .collect();
    items.sort();
    (
        items,
        decimal(&data["total_amount"]),
        decimal(&data["total_fee_amount"]),
    )
}

fn item_uuids(response: &Response) -> HashSet<String> {
    response.json()["data"]["items"]
        .as_array()
        .expect("items")
        .iter()
        .map(|i| i["transaction_uuid"].as_str().expect("uuid").to_owned())
        .collect()
}

fn triple(amount: &str, fee: &str, net: &str) -> (Decimal, Decimal, Decimal) {
    (dec(amount), dec(fee), dec(net))
}

#[test]
fn a_settlement_gathers_the_periods_payment_credits_into_items_with_totals() {
    let f = fixture();
    let shop = shop(f);
    // A deposit is not a payment credit: it is never settled.
    f.server
        .deposit(&shop.staff.operator.token, shop.wallet, "5.00");
    pay(f, &shop, "100.00"); // fee 3.50, net 96.50
    pay(f, &shop, "40.00"); // fee 2.00, net 38.00
    let key = new_key();
    let response = create_settlement(f, &shop, &key);
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let data = &body["data"];
    assert_eq!(data["status"], json!("pending"));
    assert_eq!(data["wallet_id"], json!(shop.wallet));
    assert_eq!(data["period_type"], json!("custom"));
    assert_eq!(data["period_start"], json!(utc_date(-1)));
    assert_eq!(data["period_end"], json!(utc_date(0)));
    assert_eq!(data["idempotency_key"], json!(key));
    let (items, total, total_fee) = items_and_totals(&response);
    assert_eq!(
        items,
        [
            triple("40.00", "2.00", "38.00"),
            triple("100.00", "3.50", "96.50")
        ]
    );
    assert_eq!(total, dec("134.50"));
    assert_eq!(total_fee, dec("5.50"));
    // The items are the merchant wallet's credit transactions.
    let listed: HashSet<String> = f.server.get_ok(
        &format!("/v1/merchant-wallets/{}/transactions", shop.id),
        &shop.staff.operator.token,
    )["data"]
        .as_array()
        .expect("transactions")
        .iter()
        .map(|t| t["uuid"].as_str().expect("uuid").to_owned())
        .collect();
    let items = item_uuids(&response);
    assert_eq!(items.len(), 2);
    assert!(items.is_subset(&listed), "{items:?} in {listed:?}");
    // Creating it moves no money.
    assert_eq!(
        f.server
            .balances(&shop.staff.operator.token, shop.wallet)
            .balance,
        dec("139.50")
    );
    // A period with no credits: nothing to settle.
    let empty = f.server.post(
        "/v1/wallet-settlements",
        Some(&shop.staff.maker.token),
        &format!(
            r#"{{"wallet_id": {}, "period_type": "custom", "period_start": "2020-01-01", "period_end": "2020-01-31", "idempotency_key": "{}"}}"#,
            shop.wallet,
            new_key()
        ),
    );
    standard_error(&empty, 422, "nothing_to_settle", "a period with no credits");
}

#[test]
fn items_never_overlap_a_second_settlement_of_the_period_is_422_nothing_to_settle() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let first = create_settlement(f, &shop, &new_key());
    assert_eq!(first.status, 201, "{}", first.text());
    standard_error(
        &create_settlement(f, &shop, &new_key()),
        422,
        "nothing_to_settle",
        "the same period again",
    );
    // A new payment is settled alone.
    pay(f, &shop, "40.00");
    let second = create_settlement(f, &shop, &new_key());
    assert_eq!(second.status, 201, "{}", second.text());
    let (items, total, _) = items_and_totals(&second);
    assert_eq!(items, [triple("40.00", "2.00", "38.00")]);
    assert_eq!(total, dec("38.00"));
    assert!(item_uuids(&first).is_disjoint(&item_uuids(&second)));
}

#[test]
fn cancel_and_reject_free_the_items_for_a_new_settlement() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let first = create_settlement(f, &shop, &new_key());
    assert_eq!(first.status, 201, "{}", first.text());
    let first_id = id_of(&first);
    move_settlement(f, &shop, first_id, "cancel", "cancelled");

    let second = create_settlement(f, &shop, &new_key());
    assert_eq!(second.status, 201, "after the cancel: {}", second.text());
    assert_eq!(item_uuids(&second), item_uuids(&first));
    let second_id = id_of(&second);
    assert_ne!(second_id, first_id);
    // Reject needs a reason, then frees them as well.
    let response = settlement_action(f, &shop.staff.approver.token, second_id, "reject", "{}");
    assert_eq!(response.status, 422, "{}", response.text());
    move_settlement(f, &shop, second_id, "reject", "rejected");

    let third = create_settlement(f, &shop, &new_key());
    assert_eq!(third.status, 201, "after the reject: {}", third.text());
    assert_eq!(item_uuids(&third), item_uuids(&first));
    // The cancelled one is still cancelled and still lists what it held.
    let shown = get_settlement(f, &shop, first_id);
    assert_eq!(shown.json()["data"]["status"], json!("cancelled"));
}

#[test]
fn settlement_approval_has_four_eyes_and_execute_debits_the_net_total() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    pay(f, &shop, "40.00");
    let id = settlement(f, &shop);
    standard_error(
        &settlement_action(f, &shop.staff.maker.token, id, "approve", "{}"),
        403,
        "four_eyes",
        "approval by the creator",
    );
    let response = settlement_action(f, &shop.staff.finance.token, id, "approve", "{}");
    assert_eq!(
        response.status,
        403,
        "finance is not an approver: {}",
        response.text()
    );
    move_settlement(f, &shop, id, "approve", "approved");
    let balance = || {
        f.server
            .balances(&shop.staff.operator.token, shop.wallet)
            .balance
    };
    assert_eq!(balance(), dec("134.50"), "approved: nothing moved yet");
    let executed = move_settlement(f, &shop, id, "execute", "executed");
    let (_, total, _) = items_and_totals(&executed);
    assert_eq!(total, dec("134.50"));
    assert_eq!(balance(), dec("0.00"), "executed: the net total left");
    assert_eq!(
        get_settlement(f, &shop, id).json()["data"]["status"],
        json!("executed")
    );
    // Executed items stay settled.
    pay(f, &shop, "10.00");
    let next = create_settlement(f, &shop, &new_key());
    assert_eq!(next.status, 201, "{}", next.text());
    assert_eq!(items_and_totals(&next).1, dec("8.75"));
}

#[test]
fn every_other_settlement_transition_is_409_invalid_state() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let pending = settlement(f, &shop);
    let s = &shop.staff;
    standard_error(
        &settlement_action(f, &s.executor.token, pending, "execute", ""),
        409,
        "invalid_state",
        "execute a pending settlement",
    );
    move_settlement(f, &shop, pending, "cancel", "cancelled");
    for (action, who, body) in [
        ("approve", &s.approver, "{}"),
        ("execute", &s.executor, ""),
        ("cancel", &s.maker, ""),
        ("reject", &s.approver, r#"{"reason": "x"}"#),
    ] {
        standard_error(
            &settlement_action(f, &who.token, pending, action, body),
            409,
            "invalid_state",
            &format!("{action} a cancelled settlement"),
        );
    }
    let executed = settlement(f, &shop);
    move_settlement(f, &shop, executed, "approve", "approved");
    standard_error(
        &settlement_action(
            f,
            &s.approver.token,
            executed,
            "reject",
            r#"{"reason": "x"}"#,
        ),
        409,
        "invalid_state",
        "reject an approved settlement",
    );
    move_settlement(f, &shop, executed, "execute", "executed");
    for (action, who, body) in [
        ("cancel", &s.maker, ""),
        ("approve", &s.approver, "{}"),
        ("execute", &s.executor, ""),
    ] {
        standard_error(
            &settlement_action(f, &who.token, executed, action, body),
            409,
            "invalid_state",
            &format!("{action} an executed settlement"),
        );
    }
    // Executed once: the wallet paid its net total once.
    assert_eq!(
        f.server.balances(&s.operator.token, shop.wallet).balance,
        dec("0.00")
    );
}

#[test]
fn a_settlement_idempotency_key_answers_the_same_settlement_and_refuses_another_body() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let key = new_key();
    let body = settlement_body(shop.wallet, &key, r#", "notes": "first""#);
    let first = f.server.post(
        "/v1/wallet-settlements",
        Some(&shop.staff.maker.token),
        &body,
    );
    assert_eq!(first.status, 201, "{}", first.text());
    let again = f.server.post(
        "/v1/wallet-settlements",
        Some(&shop.staff.maker.token),
        &body,
    );
    assert!((200..300).contains(&again.status), "{}", again.text());
    assert_eq!(id_of(&again), id_of(&first));
    let other = settlement_body(shop.wallet, &key, r#", "notes": "second""#);
    standard_error(
        &f.server.post(
            "/v1/wallet-settlements",
            Some(&shop.staff.maker.token),
            &other,
        ),
        422,
        "idempotency_key_reused",
        "the key with another body",
    );
    // One settlement exists for the wallet.
    let list = f.server.get_ok(
        &format!("/v1/wallet-settlements?wallet_id={}", shop.wallet),
        &shop.staff.finance.token,
    );
    assert_eq!(list["data"]["total"], json!(1), "{list}");
}

#[test]
fn settlement_requests_are_validated() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let post = |body: String| {
        f.server.post(
            "/v1/wallet-settlements",
            Some(&shop.staff.maker.token),
            &body,
        )
    };
    let w = shop.wallet;
    for body in [
        // start after end
        format!(
            r#"{{"wallet_id": {w}, "period_type": "custom", "period_start": "{}", "period_end": "{}", "idempotency_key": "{}"}}"#,
            utc_date(0),
            utc_date(-1),
            new_key()
        ),
        // unknown period type
        format!(
            r#"{{"wallet_id": {w}, "period_type": "yearly", "period_start": "{}", "period_end": "{}", "idempotency_key": "{}"}}"#,
            utc_date(-1),
            utc_date(0),
            new_key()
        ),
        // not a date
        format!(
            r#"{{"wallet_id": {w}, "period_type": "custom", "period_start": "2024-13-01", "period_end": "{}", "idempotency_key": "{}"}}"#,
            utc_date(0),
            new_key()
        ),
        // no idempotency key
        format!(
            r#"{{"wallet_id": {w}, "period_type": "custom", "period_start": "{}", "period_end": "{}"}}"#,
            utc_date(-1),
            utc_date(0)
        ),
    ] {
        let response = post(body.clone());
        assert_eq!(response.status, 422, "{body}: {}", response.text());
    }
    // Only business finance creates them.
    let response = f.server.post(
        "/v1/wallet-settlements",
        Some(&shop.staff.approver.token),
        &settlement_body(w, &new_key(), ""),
    );
    assert_eq!(response.status, 403, "{}", response.text());
    // Nothing was created by any of these: the period is still whole.
    assert_eq!(create_settlement(f, &shop, &new_key()).status, 201);
}

#[test]
fn settlement_list_filters_by_wallet_and_status_and_get_shows_one() {
    let f = fixture();
    let shop = shop(f);
    pay(f, &shop, "100.00");
    let cancelled = settlement(f, &shop);
    move_settlement(f, &shop, cancelled, "cancel", "cancelled");
    let pending = settlement(f, &shop);
    let list = |query: &str| {
        f.server.get_ok(
            &format!("/v1/wallet-settlements?wallet_id={}&{query}", shop.wallet),
            &shop.staff.finance.token,
        )["data"]
            .clone()
    };
    let all = list("");
    assert_eq!(all["total"], json!(2));
    assert_eq!(
        list_ids(&all).into_iter().collect::<HashSet<_>>(),
        HashSet::from([cancelled, pending])
    );
    assert_eq!(list_ids(&list("status=pending")), [pending]);
    assert_eq!(list_ids(&list("status=cancelled")), [cancelled]);
    assert_eq!(list("status=executed")["total"], json!(0));
    let page = list("per_page=1&page=2");
    assert_eq!(
        (
            &page["current_page"],
            &page["last_page"],
            &page["from"],
            &page["to"]
        ),
        (&json!(2), &json!(2), &json!(2), &json!(2))
    );
    let shown = get_settlement(f, &shop, pending).json();
    assert_eq!(shown["data"]["id"], json!(pending));
    assert_eq!(shown["data"]["status"], json!("pending"));
    standard_error(
        &f.server.get(
            "/v1/wallet-settlements/987654321",
            Some(&shop.staff.finance.token),
        ),
        404,
        "not_found",
        "an unknown settlement",
    );
}

/// An executed settlement leaves the shard's memory once filed and keeps its claim on its
/// payment credits in the history store (docs/history.md, "Settlements"): after a SIGKILL
/// right after the execute was acknowledged (the indexer may not have filed it yet) the
/// restarted server shows it by id and in the list, still refuses the same period as nothing to
/// settle, and settles a later payment alone. Its own server: the test kills it.
#[test]
fn an_executed_settlement_keeps_its_items_across_a_sigkill() {
    let server = Server::start();
    let platform = staff(&server, PLATFORM_BUSINESS_ID);
    let mut f = Fixture { server, platform };
    let shop = shop(&f);
    pay(&f, &shop, "100.00");
    let executed = settlement(&f, &shop);
    move_settlement(&f, &shop, executed, "approve", "approved");
    move_settlement(&f, &shop, executed, "execute", "executed");
    let first = get_settlement(&f, &shop, executed);

    f.server.kill_hard();
    f.server.restart();

    let shown = get_settlement(&f, &shop, executed);
    assert_eq!(
        shown.json()["data"],
        first.json()["data"],
        "the same record"
    );
    let listed = f.server.get_ok(
        &format!("/v1/wallet-settlements?wallet_id={}", shop.wallet),
        &shop.staff.finance.token,
    )["data"]
        .clone();
    assert_eq!(list_ids(&listed), [executed]);
    standard_error(
        &create_settlement(&f, &shop, &new_key()),
        422,
        "nothing_to_settle",
        "the executed settlement's period again, after the restart",
    );
    pay(&f, &shop, "40.00");
    let second = create_settlement(&f, &shop, &new_key());
    assert_eq!(second.status, 201, "{}", second.text());
    let (items, _, _) = items_and_totals(&second);
    assert_eq!(items, [triple("40.00", "2.00", "38.00")]);
    assert!(item_uuids(&first).is_disjoint(&item_uuids(&second)));
}
