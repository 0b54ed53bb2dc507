//! Black-box tests of the merchant routes (docs/commerce-api.md "Merchant wallets" and "Who may
//! call what"): merchant wallet creation, overview, payment links, EMVCo QR payloads, the merchant
//! transaction list and the merchant settlement request. One server for the file; each test has
//! its own merchant business and customers.

use std::collections::HashMap;
use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::http::Response;
use walletd_tests::server::{
    dec, decimal, exact_json, unique, unix_now, unix_seconds, utc_date, Customer, Employee, Server,
    PLATFORM_BUSINESS_ID,
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

/// A merchant business and its staff (no wallet yet).
struct Merchant {
    id: u64,
    /// Role operator: creates and funds the merchant's wallets.
    operator: Employee,
    /// Role merchant.
    clerk: Employee,
    /// Role merchant_finance.
    finance: Employee,
}

fn merchant(server: &Server) -> Merchant {
    let id = server.create_business(true);
    Merchant {
        id,
        operator: server.create_employee(id, &["operator"]),
        clerk: server.create_employee(id, &["merchant"]),
        finance: server.create_employee(id, &["merchant_finance"]),
    }
}

fn create_wallet(server: &Server, token: &str, body: &str) -> Response {
    server.post("/v1/merchant-wallets", Some(token), body)
}

fn wallet_id(wallet: &Value) -> u64 {
    wallet["id"].as_u64().expect("wallet id")
}

fn standard_error(response: &Response, status: u16, code: &str, what: &str) {
    assert_eq!(response.status, status, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}: {body}");
    assert_eq!(body["error"]["code"], json!(code), "{what}: {body}");
}

fn funded(f: &Fixture, amount: &str) -> Customer {
    let customer = f.server.register_customer();
    f.server
        .deposit(&f.operator.token, customer.wallet_id, amount);
    customer
}

#[test]
fn creating_a_merchant_wallet_answers_201_with_a_merchant_owned_wallet() {
    let f = fixture();
    let m = merchant(&f.server);
    let response = create_wallet(
        &f.server,
        &m.operator.token,
        &json!({"merchant_id": m.id, "currency_code": "YER"}).to_string(),
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let wallet = &body["data"];
    assert_eq!(wallet["owner_type"], json!("merchant"));
    assert_eq!(wallet["owner_id"], json!(m.id));
    assert_eq!(wallet["business_id"], json!(m.id));
    assert_eq!(wallet["currency_code"], json!("YER"));
    assert_eq!(wallet["status"], json!("active"));
    assert_eq!(wallet["branch_id"], json!(0));
    assert_eq!(
        decimal(&exact_json(&response.body)["data"]["cached_balance"]),
        dec("0")
    );
    // The merchant's staff can read it like any wallet of their business.
    let shown = f.server.wallet(&m.clerk.token, wallet_id(wallet));
    assert_eq!(shown["uuid"], wallet["uuid"]);

    // With a branch.
    let branch = create_wallet(
        &f.server,
        &m.operator.token,
        &json!({"merchant_id": m.id, "currency_code": "USD", "branch_id": 7}).to_string(),
    );
    assert_eq!(branch.status, 201, "{}", branch.text());
    assert_eq!(branch.json()["data"]["branch_id"], json!(7));
}

#[test]
fn a_second_wallet_of_the_same_merchant_and_currency_is_409_duplicate() {
    let f = fixture();
    let m = merchant(&f.server);
    f.server
        .create_merchant_wallet(&m.operator.token, m.id, "YER");
    for body in [
        json!({"merchant_id": m.id, "currency_code": "YER"}),
        json!({"merchant_id": m.id, "currency_code": "YER", "branch_id": 3}),
    ] {
        standard_error(
            &create_wallet(&f.server, &m.operator.token, &body.to_string()),
            409,
            "duplicate",
            &body.to_string(),
        );
    }
    // Another currency is another wallet.
    f.server
        .create_merchant_wallet(&m.operator.token, m.id, "SAR");
    let overview = f.server.get_ok(
        &format!("/v1/merchant-wallets/{}/overview", m.id),
        &m.clerk.token,
    );
    assert_eq!(
        overview["data"]["wallets"].as_array().map(Vec::len),
        Some(2)
    );
}

#[test]
fn only_an_operator_of_the_merchant_may_create_its_wallets() {
    let f = fixture();
    let m = merchant(&f.server);
    let other = merchant(&f.server);
    let customer = f.server.register_customer();
    let body = json!({"merchant_id": m.id, "currency_code": "YER"}).to_string();
    for (who, token) in [
        (
            "an operator of another merchant",
            other.operator.token.as_str(),
        ),
        ("the merchant's finance staff", m.finance.token.as_str()),
        ("the merchant's clerk", m.clerk.token.as_str()),
        ("a customer", customer.token.as_str()),
    ] {
        let response = create_wallet(&f.server, token, &body);
        assert_eq!(response.status, 403, "{who}: {}", response.text());
    }
    assert_eq!(
        f.server.post("/v1/merchant-wallets", None, &body).status,
        401
    );
    // Nothing was created: the operator's own request is the first.
    assert_eq!(
        create_wallet(&f.server, &m.operator.token, &body).status,
        201
    );
}

#[test]
fn a_business_that_is_not_a_merchant_or_does_not_exist_is_404() {
    let f = fixture();
    let plain = f.server.create_business(false);
    let operator = f.server.create_employee(plain, &["operator", "merchant"]);
    standard_error(
        &create_wallet(
            &f.server,
            &operator.token,
            &json!({"merchant_id": plain, "currency_code": "YER"}).to_string(),
        ),
        404,
        "not_found",
        "a wallet for a business that is not a merchant",
    );
    standard_error(
        &f.server.get(
            &format!("/v1/merchant-wallets/{plain}/overview"),
            Some(&operator.token),
        ),
        404,
        "not_found",
        "overview of a business that is not a merchant",
    );
    let m = merchant(&f.server);
    standard_error(
        &f.server.get(
            "/v1/merchant-wallets/987654321/overview",
            Some(&m.clerk.token),
        ),
        404,
        "not_found",
        "overview of a business that does not exist",
    );
}

#[test]
fn merchant_routes_refuse_other_businesses_and_roles_outside_the_route() {
    let f = fixture();
    let m = merchant(&f.server);
    let wallet = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "YER"),
    );
    let other = merchant(&f.server);
    let finance_only = f.server.create_employee(m.id, &["finance"]);
    let customer = f.server.register_customer();
    let overview = format!("/v1/merchant-wallets/{}/overview", m.id);
    for (who, token) in [
        ("another merchant's clerk", other.clerk.token.as_str()),
        ("another merchant's finance", other.finance.token.as_str()),
        (
            "finance without a merchant role",
            finance_only.token.as_str(),
        ),
        ("a customer", customer.token.as_str()),
    ] {
        let response = f.server.get(&overview, Some(token));
        assert_eq!(response.status, 403, "{who}: {}", response.text());
    }
    // merchant_finance reads the overview too; admin of the merchant holds both roles.
    f.server.get_ok(&overview, &m.finance.token);
    let admin = f.server.create_employee(m.id, &["admin"]);
    f.server.get_ok(&overview, &admin.token);
    // The settlement request needs merchant_finance: the clerk (merchant) is refused.
    let request = json!({
        "wallet_id": wallet,
        "period_start": utc_date(-1),
        "period_end": utc_date(0),
        "idempotency_key": format!("settle-{}", unique()),
    })
    .to_string();
    let response = f.server.post(
        &format!("/v1/merchant-wallets/{}/settlement-request", m.id),
        Some(&m.clerk.token),
        &request,
    );
    assert_eq!(response.status, 403, "{}", response.text());
}

#[test]
fn overview_lists_the_wallets_and_sums_balances_per_branch_and_currency() {
    let f = fixture();
    let m = merchant(&f.server);
    let yer = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "YER"),
    );
    let usd = f.server.post_expect(
        "/v1/merchant-wallets",
        Some(&m.operator.token),
        &json!({"merchant_id": m.id, "currency_code": "USD", "branch_id": 7}).to_string(),
        201,
    )["data"]["id"]
        .as_u64()
        .expect("wallet id");
    let sar = f.server.post_expect(
        "/v1/merchant-wallets",
        Some(&m.operator.token),
        &json!({"merchant_id": m.id, "currency_code": "SAR", "branch_id": 7}).to_string(),
        201,
    )["data"]["id"]
        .as_u64()
        .expect("wallet id");
    f.server.deposit(&m.operator.token, yer, "12.50");
    f.server.deposit(&m.operator.token, yer, "0.25");
    f.server.deposit(&m.operator.token, usd, "3.25");
    f.server.deposit(&m.operator.token, sar, "1.00");
    // A payment adds its net: 10.00 - (0.25 + 1.00).
    let payer = funded(f, "20");
    f.server.complete_payment(&payer, m.id, "10.00", "");

    let response = f.server.get(
        &format!("/v1/merchant-wallets/{}/overview", m.id),
        Some(&m.clerk.token),
    );
    assert_eq!(response.status, 200, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    assert_eq!(body["data"]["merchant_id"], json!(m.id));
    let mut ids: Vec<u64> = body["data"]["wallets"]
        .as_array()
        .expect("wallets")
        .iter()
        .map(wallet_id)
        .collect();
    ids.sort_unstable();
    let mut expected = vec![yer, usd, sar];
    expected.sort_unstable();
    assert_eq!(ids, expected);
    let exact = exact_json(&response.body);
    let branches: HashMap<(String, String), rust_decimal::Decimal> = exact["data"]["branches"]
        .as_array()
        .expect("branches")
        .iter()
        .map(|b| {
            (
                (
                    b["branch_id"].as_str().expect("branch_id").to_owned(),
                    b["currency_code"].as_str().expect("currency").to_owned(),
                ),
                decimal(&b["balance"]),
            )
        })
        .collect();
    let expected: HashMap<(String, String), rust_decimal::Decimal> = [
        (("0", "YER"), "21.50"),
        (("7", "USD"), "3.25"),
        (("7", "SAR"), "1.00"),
    ]
    .into_iter()
    .map(|((branch, currency), balance)| ((branch.to_owned(), currency.to_owned()), dec(balance)))
    .collect();
    assert_eq!(branches, expected, "{}", response.text());
}

fn link(f: &Fixture, m: &Merchant, body: &str) -> Response {
    f.server.post(
        &format!("/v1/merchant-wallets/{}/payment-link", m.id),
        Some(&m.clerk.token),
        body,
    )
}

#[test]
fn a_payment_link_answers_201_with_its_shape_and_expiry() {
    let f = fixture();
    let m = merchant(&f.server);
    f.server
        .create_merchant_wallet(&m.operator.token, m.id, "YER");
    let before = i64::try_from(unix_now()).expect("now");
    let response = link(
        f,
        &m,
        r#"{"amount": 25.00, "currency_code": "YER", "description": "Table 4", "expires_in_minutes": 30}"#,
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let data = &body["data"];
    let uuid = data["uuid"].as_str().expect("uuid");
    assert_eq!(uuid.len(), 36, "{data}");
    assert!(
        data["url"].as_str().is_some_and(
            |u| u.starts_with("http") && u.ends_with(&format!("/v1/payment-links/{uuid}"))
        ),
        "{data}"
    );
    assert_eq!(
        decimal(&exact_json(&response.body)["data"]["amount"]),
        dec("25.00")
    );
    assert_eq!(data["currency_code"], json!("YER"));
    assert_eq!(data["description"], json!("Table 4"));
    assert_eq!(data["status"], json!("active"));
    let expires = unix_seconds(data["expires_at"].as_str().expect("expires_at"));
    let after = i64::try_from(unix_now()).expect("now");
    assert!(
        (before + 30 * 60 - 2..=after + 30 * 60 + 2).contains(&expires),
        "expires_at {} is 30 minutes from now",
        data["expires_at"]
    );

    // Default: 1440 minutes.
    let response = link(f, &m, r#"{"amount": 1.00, "currency_code": "YER"}"#);
    assert_eq!(response.status, 201, "{}", response.text());
    let expires = unix_seconds(
        response.json()["data"]["expires_at"]
            .as_str()
            .expect("expires_at"),
    );
    let now = i64::try_from(unix_now()).expect("now");
    assert!(
        (now + 1440 * 60 - 60..=now + 1440 * 60 + 2).contains(&expires),
        "{}",
        response.text()
    );

    for minutes in ["0", "43201", "-5"] {
        let response = link(
            f,
            &m,
            &format!(
                r#"{{"amount": 1.00, "currency_code": "YER", "expires_in_minutes": {minutes}}}"#
            ),
        );
        assert_eq!(response.status, 422, "{minutes}: {}", response.text());
    }
    let response = link(
        f,
        &m,
        r#"{"amount": 1.00, "currency_code": "YER", "expires_in_minutes": 43200}"#,
    );
    assert_eq!(response.status, 201, "{}", response.text());
    // No wallet in that currency: 404.
    let response = link(f, &m, r#"{"amount": 1.00, "currency_code": "EUR"}"#);
    assert_eq!(response.status, 404, "{}", response.text());
}

#[test]
fn a_payment_link_is_single_use_and_its_amount_must_match() {
    let f = fixture();
    let m = merchant(&f.server);
    let wallet = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "YER"),
    );
    let response = link(f, &m, r#"{"amount": 25.00, "currency_code": "YER"}"#);
    assert_eq!(response.status, 201, "{}", response.text());
    let uuid = response.json()["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    let payer = funded(f, "100");
    let naming = format!(r#", "payment_link_uuid": "{uuid}""#);

    // Another amount than the link's: 422, nothing created.
    let mismatched = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &format!(
            r#"{{"merchant_id": {}, "wallet_id": {}, "amount": 24.00, "currency_code": "YER"{naming}}}"#,
            m.id, payer.wallet_id
        ),
    );
    assert_eq!(mismatched.status, 422, "{}", mismatched.text());
    assert_eq!(mismatched.json()["success"], json!(false));

    let paid = f.server.complete_payment(&payer, m.id, "25.00", &naming);
    let status = f
        .server
        .get_ok(&format!("/v1/payments/{paid}/status"), &payer.token);
    assert_eq!(status["data"]["payment_link_uuid"], json!(uuid));

    // Used: a second payment naming it is refused and moves nothing.
    let second = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &format!(
            r#"{{"merchant_id": {}, "wallet_id": {}, "amount": 25.00, "currency_code": "YER"{naming}}}"#,
            m.id, payer.wallet_id
        ),
    );
    if second.status == 201 {
        // Refused at confirm at the latest.
        let again = second.json()["data"]["transaction_id"]
            .as_str()
            .expect("transaction_id")
            .to_owned();
        let confirm = f.server.post(
            &format!("/v1/payments/{again}/confirm"),
            Some(&payer.token),
            "",
        );
        assert!(
            matches!(confirm.status, 409 | 422),
            "second use of a link: {}",
            confirm.text()
        );
        assert_eq!(confirm.json()["success"], json!(false));
    } else {
        assert!(
            matches!(second.status, 409 | 422),
            "second use of a link: {}",
            second.text()
        );
        let body = second.json();
        assert_eq!(body["success"], json!(false), "{body}");
        assert!(
            body["data"]["error_code"]
                .as_str()
                .is_some_and(|c| !c.is_empty()),
            "{body}"
        );
    }
    assert_eq!(
        f.server.balances(&payer.token, payer.wallet_id).balance,
        dec("75.00")
    );
    // 25.00 - (0.625 -> 0.62 + 1.00).
    assert_eq!(
        f.server.balances(&m.operator.token, wallet).balance,
        dec("23.38")
    );
}

/// CRC-16/CCITT-FALSE: polynomial 0x1021, initial 0xFFFF, no reflection, no final XOR.
fn crc16_ccitt_false(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0xFFFF;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// The EMVCo TLV data objects of a payload, in order; panics when it does not parse exactly.
fn tlv(payload: &str) -> Vec<(String, String)> {
    let mut objects = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        assert!(rest.len() >= 4, "truncated TLV at {rest:?} in {payload}");
        let (id, tail) = rest.split_at(2);
        let (length, tail) = tail.split_at(2);
        assert!(
            id.bytes().all(|b| b.is_ascii_digit()),
            "id {id:?} in {payload}"
        );
        let length: usize = length
            .parse()
            .unwrap_or_else(|_| panic!("length {length:?} in {payload}"));
        assert!(tail.len() >= length, "value of {id} overruns {payload}");
        let (value, tail) = tail.split_at(length);
        objects.push((id.to_owned(), value.to_owned()));
        rest = tail;
    }
    objects
}

fn assert_emvco(payload: &str) -> Vec<(String, String)> {
    assert!(payload.is_ascii(), "{payload}");
    assert!(payload.starts_with("000201"), "{payload}");
    let crc_at = payload.len() - 4;
    assert_eq!(
        &payload[crc_at - 4..crc_at],
        "6304",
        "tag 63 last: {payload}"
    );
    let crc = &payload[crc_at..];
    assert!(
        crc.bytes()
            .all(|b| b.is_ascii_digit() || (b'A'..=b'F').contains(&b)),
        "four upper-case hex digits: {payload}"
    );
    assert_eq!(
        crc,
        format!("{:04X}", crc16_ccitt_false(&payload.as_bytes()[..crc_at])),
        "CRC-16/CCITT-FALSE of everything before it: {payload}"
    );
    let objects = tlv(payload);
    assert_eq!(objects.first().map(|o| o.0.as_str()), Some("00"));
    assert_eq!(objects.last().map(|o| o.0.as_str()), Some("63"));
    objects
}

fn assert_svg(svg: &str) {
    let start = svg.trim_start();
    assert!(
        start.starts_with("<?xml") || start.starts_with("<svg"),
        "a standalone SVG: {}",
        &svg[..svg.len().min(80)]
    );
    assert!(svg.contains("</svg>"), "a closed SVG document");
}

#[test]
fn the_crc_check_value_is_the_standard_one() {
    assert_eq!(crc16_ccitt_false(b"123456789"), 0x29B1);
}

#[test]
fn a_qr_payload_is_emvco_with_a_valid_crc_and_comes_with_an_svg() {
    let f = fixture();
    let m = merchant(&f.server);
    f.server
        .create_merchant_wallet(&m.operator.token, m.id, "YER");
    let path = format!("/v1/merchant-wallets/{}/qr-payment", m.id);
    let response = f.server.post(
        &path,
        Some(&m.clerk.token),
        r#"{"amount": 12.50, "currency_code": "YER", "branch_id": 3}"#,
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let data = &body["data"];
    assert!(
        data["uuid"].as_str().is_some_and(|u| u.len() == 36),
        "{data}"
    );
    assert!(data["expires_at"].is_string(), "{data}");
    assert_eq!(data["currency_code"], json!("YER"));
    assert_eq!(data["branch_id"], json!(3));
    assert_eq!(
        decimal(&exact_json(&response.body)["data"]["amount"]),
        dec("12.50")
    );
    let objects = assert_emvco(data["payload"].as_str().expect("payload"));
    let field = |id: &str| {
        objects
            .iter()
            .find(|(i, _)| i == id)
            .map(|(_, v)| v.clone())
    };
    // EMVCo: tag 53 is the ISO 4217 numeric currency (YER 886), tag 54 the amount.
    assert_eq!(field("53").as_deref(), Some("886"), "{objects:?}");
    assert_eq!(
        field("54").map(|a| dec(&a)),
        Some(dec("12.50")),
        "{objects:?}"
    );
    assert_svg(data["svg"].as_str().expect("svg"));

    // Without an amount: still a valid payload, with no tag 54.
    let response = f
        .server
        .post(&path, Some(&m.finance.token), r#"{"currency_code": "YER"}"#);
    assert_eq!(response.status, 201, "{}", response.text());
    let data = response.json()["data"].clone();
    let objects = assert_emvco(data["payload"].as_str().expect("payload"));
    assert!(objects.iter().all(|(id, _)| id != "54"), "{objects:?}");
    assert_svg(data["svg"].as_str().expect("svg"));
    // Two payloads are two codes.
    assert_ne!(data["uuid"], body["data"]["uuid"]);
}

fn transactions_page(f: &Fixture, m: &Merchant, query: &str) -> (Value, Value) {
    let response = f.server.get(
        &format!("/v1/merchant-wallets/{}/transactions?{query}", m.id),
        Some(&m.clerk.token),
    );
    assert_eq!(response.status, 200, "{query}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    (body["data"].clone(), body["meta"].clone())
}

fn uuids(records: &Value) -> Vec<String> {
    records
        .as_array()
        .expect("records")
        .iter()
        .map(|r| r["uuid"].as_str().expect("uuid").to_owned())
        .collect()
}

#[test]
fn merchant_transactions_list_every_wallet_newest_first_with_meta() {
    let f = fixture();
    let m = merchant(&f.server);
    let yer = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "YER"),
    );
    let usd = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "USD"),
    );
    let deposit = |wallet: u64, amount: &str| {
        f.server.deposit(&m.operator.token, wallet, amount)["data"]["uuid"]
            .as_str()
            .expect("uuid")
            .to_owned()
    };
    let first = deposit(yer, "1.00");
    let second = deposit(usd, "2.00");
    let third = deposit(yer, "3.00");
    let payer = funded(f, "50");
    f.server.complete_payment(&payer, m.id, "10.00", "");

    let (data, meta) = transactions_page(f, &m, "per_page=3");
    assert_eq!(
        meta,
        json!({"current_page": 1, "last_page": 2, "per_page": 3, "total": 4, "from": 1, "to": 3})
    );
    let page_one = uuids(&data);
    assert_eq!(page_one.len(), 3);
    // Newest first: the payment's credit, then the deposits backwards.
    assert_eq!(data[0]["wallet_id"], json!(yer));
    assert!(![&first, &second, &third].contains(&&page_one[0]));
    assert_eq!(page_one[1..], [third, second]);
    assert_eq!(data[2]["wallet_id"], json!(usd));

    let (data, meta) = transactions_page(f, &m, "per_page=3&page=2");
    assert_eq!(
        meta,
        json!({"current_page": 2, "last_page": 2, "per_page": 3, "total": 4, "from": 4, "to": 4})
    );
    assert_eq!(uuids(&data), [first]);

    let (data, meta) = transactions_page(f, &m, "per_page=3&page=3");
    assert_eq!(data, json!([]));
    assert_eq!(meta["total"], json!(4));
    assert_eq!(meta["from"], Value::Null);
    assert_eq!(meta["to"], Value::Null);

    // Default page size 20: everything on one page.
    let (data, meta) = transactions_page(f, &m, "");
    assert_eq!(data.as_array().map(Vec::len), Some(4));
    assert_eq!(meta["per_page"], json!(20));
    for query in ["per_page=0", "per_page=101", "page=0"] {
        let response = f.server.get(
            &format!("/v1/merchant-wallets/{}/transactions?{query}", m.id),
            Some(&m.clerk.token),
        );
        assert_eq!(response.status, 422, "{query}: {}", response.text());
    }
}

#[test]
fn a_settlement_request_answers_200_with_a_custom_period_settlement() {
    let f = fixture();
    let m = merchant(&f.server);
    let wallet = wallet_id(
        &f.server
            .create_merchant_wallet(&m.operator.token, m.id, "YER"),
    );
    let payer = funded(f, "150");
    f.server.complete_payment(&payer, m.id, "100.00", "");
    let key = format!("settle-{}", unique());
    let body = json!({
        "wallet_id": wallet,
        "period_start": utc_date(-1),
        "period_end": utc_date(0),
        "idempotency_key": key,
        "notes": "end of day",
    })
    .to_string();
    let path = format!("/v1/merchant-wallets/{}/settlement-request", m.id);
    let response = f.server.post(&path, Some(&m.finance.token), &body);
    assert_eq!(response.status, 200, "{}", response.text());
    let json = response.json();
    assert_eq!(json["status"], json!(true));
    let settlement = &json["data"];
    assert_eq!(settlement["period_type"], json!("custom"));
    assert_eq!(settlement["status"], json!("pending"));
    assert_eq!(settlement["wallet_id"], json!(wallet));
    assert_eq!(settlement["period_start"], json!(utc_date(-1)));
    assert_eq!(settlement["period_end"], json!(utc_date(0)));
    assert_eq!(settlement["idempotency_key"], json!(key));
    assert_eq!(settlement["notes"], json!("end of day"));
    let exact = exact_json(&response.body);
    let items = exact["data"]["items"].as_array().expect("items");
    assert_eq!(items.len(), 1, "{}", response.text());
    assert_eq!(decimal(&items[0]["net_amount"]), dec("96.50"));
    assert_eq!(decimal(&exact["data"]["total_amount"]), dec("96.50"));
    assert_eq!(decimal(&exact["data"]["total_fee_amount"]), dec("3.50"));

    // The same key and body: the same settlement.
    let again = f.server.post(&path, Some(&m.finance.token), &body);
    assert_eq!(again.status, 200, "{}", again.text());
    assert_eq!(again.json()["data"]["id"], settlement["id"]);
}

/// Payment links leave the shard's memory once filed and are read back from the history store
/// (docs/history.md, "Payment links and QR payloads"): after a SIGKILL right after a link was
/// paid (the indexer may not have filed its use yet) the restarted server shows the link as
/// `used` and refuses a second payment on it. Its own server: the test kills it.
#[test]
fn a_used_payment_link_stays_used_across_a_sigkill() {
    let server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let mut f = Fixture { server, operator };
    let m = merchant(&f.server);
    f.server
        .create_merchant_wallet(&m.operator.token, m.id, "YER");
    let response = link(&f, &m, r#"{"amount": 25.00, "currency_code": "YER"}"#);
    assert_eq!(response.status, 201, "{}", response.text());
    let uuid = response.json()["data"]["uuid"]
        .as_str()
        .expect("uuid")
        .to_owned();
    let payer = funded(&f, "100");
    let naming = format!(r#", "payment_link_uuid": "{uuid}""#);
    f.server.complete_payment(&payer, m.id, "25.00", &naming);

    f.server.kill_hard();
    f.server.restart();

    let shown = f
        .server
        .get_ok(&format!("/v1/payment-links/{uuid}"), &payer.token);
    assert_eq!(shown["data"]["status"], json!("used"), "{shown}");
    let second = f.server.post(
        "/v1/payments/initiate",
        Some(&payer.token),
        &format!(
            r#"{{"merchant_id": {}, "wallet_id": {}, "amount": 25.00, "currency_code": "YER"{naming}}}"#,
            m.id, payer.wallet_id
        ),
    );
    assert_eq!(
        second.status,
        409,
        "second use of a link: {}",
        second.text()
    );
    assert_eq!(
        f.server.balances(&payer.token, payer.wallet_id).balance,
        dec("75.00"),
        "paid once"
    );
}
