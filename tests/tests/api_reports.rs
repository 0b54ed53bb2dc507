//! Black-box tests of the reports (docs/commerce-api.md "Reports"): a fresh merchant business
//! does a known set of payments, refunds, payouts and a settlement once (the file's fixture); each
//! test then checks one report's rows against exactly what was done, or who may ask, or the date
//! rules.

use std::collections::BTreeMap;
use std::sync::OnceLock;

use rust_decimal::Decimal;
use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{
    dec, decimal, exact_json, unique, utc_date, Customer, Employee, Server, PLATFORM_BUSINESS_ID,
};

/// The merchant business the reports are about, after its known activity.
struct Fixture {
    server: Server,
    /// The merchant business.
    business: u64,
    /// Its finance employee (business_finance: reads reports).
    finance: Employee,
    /// Its operator (not finance).
    operator: Employee,
    /// Another merchant business's finance employee.
    other_finance: Employee,
    other_business: u64,
    /// Finance of the platform business (not admin).
    platform_finance: Employee,
}

struct Staff {
    operator: Employee,
    maker: Employee,
    approver: Employee,
    executor: Employee,
    finance: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(setup)
}

fn payment(
    server: &Server,
    payer: &Customer,
    wallet: u64,
    merchant: u64,
    amount: &str,
    currency: &str,
) -> String {
    server.initiate_payment(&payer.token, wallet, merchant, amount, currency, "")
}

fn expect_ok(response: &Response, what: &str) -> Value {
    assert!(
        (200..300).contains(&response.status),
        "{what}: {}",
        response.text()
    );
    response.json()
}

/// The known activity, all today:
///
/// - deposits: 1000.00 YER, 5.00 USD into the merchant's wallets;
/// - payments completed: 100.00 YER (fee 3.50, net 96.50), 40.00 YER (fee 2.00, net 38.00, then
///   10.00 refunded), 10.00 USD (fee 0.59, net 9.41); one 20.00 YER left pending and one 10.00 YER
///   cancelled (neither counts);
/// - payouts from the YER wallet: 10.00 pending, 20.00 executed, 5.00 rejected;
/// - one settlement of the two YER credits (net 134.50), executed.
///
/// So now: YER balance 1000 + 96.50 + 38.00 - 10.00 - 20.00 - 134.50 = 970.00, held 10.00;
/// USD balance 5.00 + 9.41 = 14.41.
fn setup() -> Fixture {
    let server = Server::start();
    let platform_operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let platform_finance = server.create_employee(PLATFORM_BUSINESS_ID, &["finance"]);
    let business = server.create_business(true);
    let staff = Staff {
        operator: server.create_employee(business, &["operator"]),
        maker: server.create_employee(business, &["finance", "restricted_approver"]),
        approver: server.create_employee(business, &["restricted_approver"]),
        executor: server.create_employee(business, &["restricted_operator"]),
        finance: server.create_employee(business, &["finance", "merchant_finance"]),
    };
    let yer = server.create_merchant_wallet(&staff.operator.token, business, "YER")["id"]
        .as_u64()
        .expect("wallet id");
    let usd = server.create_merchant_wallet(&staff.operator.token, business, "USD")["id"]
        .as_u64()
        .expect("wallet id");
    server.deposit(&staff.operator.token, yer, "1000.00");
    server.deposit(&staff.operator.token, usd, "5.00");

    let payer = server.register_customer();
    server.deposit(&platform_operator.token, payer.wallet_id, "500.00");
    let payer_usd = server.post_expect(
        "/v1/wallets/users",
        Some(&platform_operator.token),
        &json!({"customer_id": payer.id, "currency_code": "USD"}).to_string(),
        201,
    )["data"]["id"]
        .as_u64()
        .expect("wallet id");
    server.deposit(&platform_operator.token, payer_usd, "50.00");

    let confirm = |uuid: &str| {
        expect_ok(
            &server.post(
                &format!("/v1/payments/{uuid}/confirm"),
                Some(&payer.token),
                "",
            ),
            "confirm",
        )
    };
    let a = payment(&server, &payer, payer.wallet_id, business, "100.00", "YER");
    confirm(&a);
    let b = payment(&server, &payer, payer.wallet_id, business, "40.00", "YER");
    confirm(&b);
    expect_ok(
        &server.post(
            &format!("/v1/payments/{b}/refund"),
            Some(&staff.finance.token),
            r#"{"amount": 10.00}"#,
        ),
        "refund",
    );
    let e = payment(&server, &payer, payer_usd, business, "10.00", "USD");
    confirm(&e);
    payment(&server, &payer, payer.wallet_id, business, "20.00", "YER");
    let d = payment(&server, &payer, payer.wallet_id, business, "10.00", "YER");
    expect_ok(
        &server.post(&format!("/v1/payments/{d}/cancel"), Some(&payer.token), ""),
        "cancel",
    );

    let payout = |amount: &str| {
        let body = format!(
            r#"{{"wallet_id": {yer}, "amount": {amount}, "currency_code": "YER", "payout_method": "bank_transfer"}}"#
        );
        expect_ok(
            &server.post("/v1/payouts", Some(&staff.maker.token), &body),
            "create payout",
        )["data"]["id"]
            .as_u64()
            .expect("payout id")
    };
    let act = |kind: &str, id: u64, action: &str, token: &str, body: &str| {
        expect_ok(
            &server.post(&format!("/v1/{kind}/{id}/{action}"), Some(token), body),
            action,
        );
    };
    payout("10.00");
    let executed = payout("20.00");
    act("payouts", executed, "approve", &staff.approver.token, "{}");
    act("payouts", executed, "execute", &staff.executor.token, "");
    let rejected = payout("5.00");
    act(
        "payouts",
        rejected,
        "reject",
        &staff.approver.token,
        r#"{"reason": "wrong account"}"#,
    );

    let settlement = expect_ok(
        &server.post(
            "/v1/wallet-settlements",
            Some(&staff.maker.token),
            &format!(
                r#"{{"wallet_id": {yer}, "period_type": "custom", "period_start": "{}", "period_end": "{}", "idempotency_key": "report-{}"}}"#,
                utc_date(-1),
                utc_date(0),
                unique()
            ),
        ),
        "create settlement",
    )["data"]["id"]
        .as_u64()
        .expect("settlement id");
    act(
        "wallet-settlements",
        settlement,
        "approve",
        &staff.approver.token,
        "{}",
    );
    act(
        "wallet-settlements",
        settlement,
        "execute",
        &staff.executor.token,
        "",
    );

    let other_business = server.create_business(true);
    let other_finance = server.create_employee(other_business, &["finance"]);
    Fixture {
        server,
        business,
        finance: staff.finance,
        operator: staff.operator,
        other_finance,
        other_business,
        platform_finance,
    }
}

fn range() -> String {
    format!("from={}&to={}", utc_date(-1), utc_date(0))
}

/// A report that must answer 200: the response, checked for its envelope.
fn report(f: &Fixture, name: &str, query: &str, token: &str) -> Response {
    let response = f
        .server
        .get(&format!("/v1/reports/{name}?{query}"), Some(token));
    assert_eq!(response.status, 200, "{name}?{query}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    assert!(body["data"]["rows"].is_array(), "{body}");
    response
}

/// The rows of a report with every number exact: `key` fields joined by '/' as the key, the
/// given decimal fields as values.
fn rows(response: &Response, key: &[&str], values: &[&str]) -> BTreeMap<String, Vec<Decimal>> {
    let exact = exact_json(&response.body);
    let mut map = BTreeMap::new();
    for row in exact["data"]["rows"].as_array().expect("rows") {
        let k = key
            .iter()
            .map(|field| {
                row[field]
                    .as_str()
                    .unwrap_or_else(|| panic!("{field} in {row}"))
            })
            .collect::<Vec<_>>()
            .join("/");
        let v = values.iter().map(|field| decimal(&row[field])).collect();
        assert!(map.insert(k.clone(), v).is_none(), "two rows for {k}");
    }
    map
}

fn expected(entries: &[(&str, &[&str])]) -> BTreeMap<String, Vec<Decimal>> {
    entries
        .iter()
        .map(|(k, v)| ((*k).to_owned(), v.iter().map(|d| dec(d)).collect()))
        .collect()
}

#[test]
fn the_fee_report_sums_the_fees_of_completed_payments_kept_on_refund() {
    let f = fixture();
    let response = report(f, "fees", &range(), &f.finance.token);
    let body = response.json();
    assert_eq!(body["data"]["business_id"], json!(f.business));
    assert_eq!(body["data"]["from"], json!(utc_date(-1)));
    assert_eq!(body["data"]["to"], json!(utc_date(0)));
    assert_eq!(
        rows(&response, &["currency_code"], &["total_fees", "count"]),
        expected(&[("USD", &["0.59", "1"]), ("YER", &["5.50", "2"])])
    );
    // Filtered by currency.
    let response = report(
        f,
        "fees",
        &format!("{}&currency_code=USD", range()),
        &f.finance.token,
    );
    assert_eq!(response.json()["data"]["currency_code"], json!("USD"));
    assert_eq!(
        rows(&response, &["currency_code"], &["total_fees", "count"]),
        expected(&[("USD", &["0.59", "1"])])
    );
}

#[test]
fn the_payout_report_counts_payouts_by_status() {
    let f = fixture();
    let response = report(f, "payouts", &range(), &f.finance.token);
    assert_eq!(
        rows(
            &response,
            &["status", "currency_code"],
            &["count", "total_amount"]
        ),
        expected(&[
            ("executed/YER", &["1", "20.00"]),
            ("pending/YER", &["1", "10.00"]),
            ("rejected/YER", &["1", "5.00"]),
        ])
    );
}

#[test]
fn the_settlement_report_counts_settlements_by_status_with_net_totals() {
    let f = fixture();
    let response = report(f, "settlements", &range(), &f.finance.token);
    assert_eq!(
        rows(
            &response,
            &["status", "currency_code"],
            &["count", "total_amount"]
        ),
        expected(&[("executed/YER", &["1", "134.50"])])
    );
}

#[test]
fn the_summary_report_gives_the_business_wallets_balances_now() {
    let f = fixture();
    let response = report(f, "summary", &range(), &f.finance.token);
    let body = response.json();
    assert_eq!(body["data"]["from"], json!(utc_date(-1)));
    assert_eq!(body["data"]["to"], json!(utc_date(0)));
    assert_eq!(
        rows(
            &response,
            &["currency_code"],
            &[
                "wallet_count",
                "total_balance",
                "total_held",
                "total_pending"
            ]
        ),
        expected(&[
            ("USD", &["1", "14.41", "0", "0"]),
            ("YER", &["1", "970.00", "10.00", "0"]),
        ])
    );
}

#[test]
fn the_transaction_report_groups_the_business_transactions_by_type() {
    let f = fixture();
    let response = report(f, "transactions", &range(), &f.finance.token);
    let reported = rows(
        &response,
        &["transaction_type", "currency_code"],
        &["count", "total_amount"],
    );
    // Every transaction of the merchant's wallets, as its transaction list shows them.
    let merchant = f.server.create_employee(f.business, &["merchant"]);
    let listed = f.server.get(
        &format!(
            "/v1/merchant-wallets/{}/transactions?per_page=100",
            f.business
        ),
        Some(&merchant.token),
    );
    assert_eq!(listed.status, 200, "{}", listed.text());
    let listed = exact_json(&listed.body);
    let mut grouped: BTreeMap<String, Vec<Decimal>> = BTreeMap::new();
    for t in listed["data"].as_array().expect("transactions") {
        let key = format!(
            "{}/{}",
            t["transaction_type"].as_str().expect("type"),
            t["currency_code"].as_str().expect("currency")
        );
        let entry = grouped
            .entry(key)
            .or_insert_with(|| vec![Decimal::ZERO, Decimal::ZERO]);
        entry[0] += Decimal::ONE;
        entry[1] += decimal(&t["amount"]);
    }
    assert_eq!(reported, grouped, "{}", response.text());
    assert_eq!(
        reported.get("deposit/YER"),
        Some(&vec![dec("1"), dec("1000.00")])
    );
    assert_eq!(
        reported.get("deposit/USD"),
        Some(&vec![dec("1"), dec("5.00")])
    );
    // Every change of a balance is a transaction: 2 deposits, 3 payment credits, 1 refund, 1
    // executed payout, 1 executed settlement.
    let total: Decimal = reported.values().map(|v| v[0]).sum();
    assert!(total >= dec("8"), "{reported:?}");
}

#[test]
fn a_range_without_activity_has_no_rows() {
    let f = fixture();
    for name in ["fees", "payouts", "settlements", "transactions"] {
        let response = report(f, name, "from=2020-01-01&to=2020-01-31", &f.finance.token);
        assert_eq!(response.json()["data"]["rows"], json!([]), "{name}");
    }
}

#[test]
fn the_default_range_ends_today() {
    let f = fixture();
    let response = report(f, "fees", "", &f.finance.token);
    let body = response.json();
    assert_eq!(body["data"]["to"], json!(utc_date(0)));
    let from = body["data"]["from"].as_str().expect("from").to_owned();
    assert!(
        from == utc_date(-30) || from == utc_date(-29),
        "the 30 days up to today: {body}"
    );
    assert_eq!(
        rows(&response, &["currency_code"], &["total_fees", "count"]),
        expected(&[("USD", &["0.59", "1"]), ("YER", &["5.50", "2"])])
    );
}

#[test]
fn another_business_report_is_403_except_for_a_platform_admin() {
    let f = fixture();
    for name in ["fees", "payouts", "settlements", "summary", "transactions"] {
        let query = format!("{}&business_id={}", range(), f.business);
        for (who, token) in [
            ("another business's finance", &f.other_finance.token),
            ("platform finance (not admin)", &f.platform_finance.token),
            ("the business's operator (not finance)", &f.operator.token),
        ] {
            let response = f
                .server
                .get(&format!("/v1/reports/{name}?{query}"), Some(token));
            assert_eq!(response.status, 403, "{name} by {who}: {}", response.text());
        }
        // The platform admin may, and sees the business's own figures.
        let admin = report(f, name, &query, &f.server.admin_token());
        let own = report(f, name, &range(), &f.finance.token);
        assert_eq!(admin.json()["data"]["business_id"], json!(f.business));
        assert_eq!(
            admin.json()["data"]["rows"],
            own.json()["data"]["rows"],
            "{name}"
        );
    }
    // The other business's own report is its own: empty.
    let response = report(f, "fees", &range(), &f.other_finance.token);
    assert_eq!(
        response.json()["data"]["business_id"],
        json!(f.other_business)
    );
    assert_eq!(response.json()["data"]["rows"], json!([]));
    // A customer is no business's finance.
    let customer = f.server.register_customer();
    let response = f.server.get(
        &format!("/v1/reports/fees?{}", range()),
        Some(&customer.token),
    );
    assert_eq!(response.status, 403, "{}", response.text());
}

#[test]
fn bad_dates_are_422() {
    let f = fixture();
    for query in [
        format!("from={}&to={}", utc_date(0), utc_date(-1)),
        "from=2023-01-01&to=2024-06-01".to_owned(),
        "from=2024-02-30&to=2024-03-01".to_owned(),
        "from=yesterday&to=2024-03-01".to_owned(),
        "from=2024-03-01&to=2024/03/02".to_owned(),
    ] {
        for name in ["fees", "summary"] {
            let response = f.server.get(
                &format!("/v1/reports/{name}?{query}"),
                Some(&f.finance.token),
            );
            assert_eq!(response.status, 422, "{name}?{query}: {}", response.text());
            assert_eq!(response.json()["status"], json!(false));
        }
    }
}
