//! Black-box tests of the wallet routes: create, createCustomerWallet, get (scope), list
//! (pagination), balance, freeze and unfreeze. One server for the file; each test has its own
//! customers.

use std::sync::OnceLock;

use serde_json::{json, Value};
use walletd_tests::server::{Employee, Server, PLATFORM_BUSINESS_ID};

struct Fixture {
    server: Server,
    /// Operator of the platform business (serves customer wallets).
    operator: Employee,
    /// restricted_operator of the platform business (freeze, unfreeze).
    restricted_operator: Employee,
    /// An admin of another business.
    outsider: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let restricted_operator =
            server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_operator"]);
        let other = server.create_business(false);
        let outsider = server.create_employee(other, &["admin"]);
        Fixture {
            server,
            operator,
            restricted_operator,
            outsider,
        }
    })
}

fn create_wallet_body(customer_id: u64, currency: &str) -> String {
    json!({"owner_type": "customer", "owner_id": customer_id, "currency_code": currency})
        .to_string()
}

#[test]
fn an_operator_creates_a_customer_wallet_201_and_a_second_alike_is_409() {
    let f = fixture();
    let customer = f.server.register_customer();
    let response = f.server.post(
        "/v1/wallets",
        Some(&f.operator.token),
        &create_wallet_body(customer.id, "USD"),
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let wallet = &response.json()["data"];
    assert_eq!(wallet["owner_type"], json!("customer"));
    assert_eq!(wallet["owner_id"], json!(customer.id));
    assert_eq!(wallet["currency_code"], json!("USD"));
    assert_eq!(wallet["wallet_type"], json!("primary"));
    assert_eq!(wallet["status"], json!("active"));
    assert_eq!(wallet["business_id"], json!(PLATFORM_BUSINESS_ID));
    assert!(wallet["uuid"].as_str().is_some_and(|u| u.len() == 36));
    assert!(wallet["account_number"]
        .as_str()
        .is_some_and(|a| !a.is_empty()));
    assert!(
        response.text().contains(r#""cached_balance":0.00"#),
        "{}",
        response.text()
    );
    assert_ne!(wallet["id"], json!(customer.wallet_id));

    // Same owner, currency and type: 409, and nothing new appears in the customer's list.
    let again = f.server.post(
        "/v1/wallets",
        Some(&f.operator.token),
        &create_wallet_body(customer.id, "USD"),
    );
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.error_code(), "duplicate");
    // The registration's YER primary wallet counts too.
    let yer = f.server.post(
        "/v1/wallets",
        Some(&f.operator.token),
        &create_wallet_body(customer.id, "YER"),
    );
    assert_eq!(yer.status, 409, "{}", yer.text());
    let list = f.server.get_ok("/v1/wallets", &customer.token);
    assert_eq!(list["data"]["total"], json!(2), "{list}");
    // Another wallet type of the same currency is a different wallet.
    let savings = f.server.post(
        "/v1/wallets",
        Some(&f.operator.token),
        &json!({"owner_type": "customer", "owner_id": customer.id, "currency_code": "USD", "wallet_type": "savings"}).to_string(),
    );
    assert_eq!(savings.status, 201, "{}", savings.text());
}

#[test]
fn wallet_creation_refuses_unknown_currencies_and_owners_with_422() {
    let f = fixture();
    let customer = f.server.register_customer();
    for code in ["XYZ", "usd", "", "DOLLARS"] {
        let response = f.server.post(
            "/v1/wallets",
            Some(&f.operator.token),
            &create_wallet_body(customer.id, code),
        );
        assert_eq!(response.status, 422, "{code:?}: {}", response.text());
        assert_eq!(response.error_code(), "unknown_currency", "{code:?}");
    }
    let nobody = f.server.post(
        "/v1/wallets",
        Some(&f.operator.token),
        &create_wallet_body(99_999_999, "USD"),
    );
    assert_eq!(nobody.status, 422, "{}", nobody.text());
    assert_eq!(nobody.error_code(), "unknown_owner");
    // A customer cannot open wallets (business_operator tier).
    let own = f.server.post(
        "/v1/wallets",
        Some(&customer.token),
        &create_wallet_body(customer.id, "USD"),
    );
    assert_eq!(own.status, 403, "{}", own.text());
}

#[test]
fn create_customer_wallet_opens_a_primary_wallet_for_an_existing_customer() {
    let f = fixture();
    let customer = f.server.register_customer();
    let response = f.server.post(
        "/v1/wallets/users",
        Some(&f.operator.token),
        &json!({"customer_id": customer.id, "currency_code": "SAR"}).to_string(),
    );
    assert_eq!(response.status, 201, "{}", response.text());
    let wallet = &response.json()["data"];
    assert_eq!(wallet["owner_id"], json!(customer.id));
    assert_eq!(wallet["currency_code"], json!("SAR"));
    assert_eq!(wallet["wallet_type"], json!("primary"));
    // The default currency is YER, which the customer already has.
    let default = f.server.post(
        "/v1/wallets/users",
        Some(&f.operator.token),
        &json!({"customer_id": customer.id}).to_string(),
    );
    assert_eq!(default.status, 409, "{}", default.text());
    let unknown = f.server.post(
        "/v1/wallets/users",
        Some(&f.operator.token),
        &json!({"customer_id": 88_888_888, "currency_code": "EUR"}).to_string(),
    );
    assert_eq!(unknown.status, 422, "{}", unknown.text());
}

#[test]
fn get_wallet_is_scoped_owner_200_other_customer_404_other_business_403() {
    let f = fixture();
    let owner = f.server.register_customer();
    let stranger = f.server.register_customer();
    let path = format!("/v1/wallets/{}", owner.wallet_id);
    let own = f.server.get(&path, Some(&owner.token));
    assert_eq!(own.status, 200, "{}", own.text());
    assert_eq!(own.json()["data"]["id"], json!(owner.wallet_id));
    assert_eq!(own.json()["status"], json!(true));

    let other = f.server.get(&path, Some(&stranger.token));
    assert_eq!(other.status, 404, "{}", other.text());
    assert_eq!(other.error_code(), "not_found");
    // Exactly what an unknown wallet answers: existence is not revealed.
    let missing = f.server.get("/v1/wallets/987654321", Some(&stranger.token));
    assert_eq!(missing.status, 404);
    assert_eq!(missing.json()["message"], other.json()["message"]);

    let outsider = f.server.get(&path, Some(&f.outsider.token));
    assert_eq!(outsider.status, 403, "{}", outsider.text());
    assert_eq!(outsider.error_code(), "forbidden");
    // Any employee of the wallet's business may read it.
    let staff = f.server.get(&path, Some(&f.operator.token));
    assert_eq!(staff.status, 200, "{}", staff.text());
    // A path id that is not a number is an unknown wallet, not a 500.
    let junk = f.server.get("/v1/wallets/abc", Some(&owner.token));
    assert_eq!(junk.status, 404, "{}", junk.text());
}

fn list(f: &Fixture, token: &str, query: &str) -> walletd_tests::http::Response {
    f.server.get(&format!("/v1/wallets?{query}"), Some(token))
}

#[test]
fn list_wallets_paginates_and_refuses_out_of_range_pages_with_422() {
    let f = fixture();
    let customer = f.server.register_customer();
    for currency in ["USD", "SAR"] {
        f.server.post_expect(
            "/v1/wallets",
            Some(&f.operator.token),
            &create_wallet_body(customer.id, currency),
            201,
        );
    }
    let all = f.server.get_ok("/v1/wallets", &customer.token)["data"].clone();
    assert_eq!(all["total"], json!(3));
    assert_eq!(all["per_page"], json!(20));
    assert_eq!(all["current_page"], json!(1));
    assert_eq!(all["last_page"], json!(1));
    assert_eq!(all["from"], json!(1));
    assert_eq!(all["to"], json!(3));
    let data = all["data"].as_array().expect("records");
    assert_eq!(data.len(), 3);
    assert!(data.iter().all(|w| w["owner_id"] == json!(customer.id)));

    let first = list(f, &customer.token, "per_page=2&page=1");
    assert_eq!(first.status, 200, "{}", first.text());
    let first = &first.json()["data"];
    assert_eq!(first["data"].as_array().map(Vec::len), Some(2));
    assert_eq!(
        (first["from"].clone(), first["to"].clone()),
        (json!(1), json!(2))
    );
    assert_eq!(first["last_page"], json!(2));
    let second = &list(f, &customer.token, "per_page=2&page=2").json()["data"];
    assert_eq!(second["data"].as_array().map(Vec::len), Some(1));
    assert_eq!(
        (second["from"].clone(), second["to"].clone()),
        (json!(3), json!(3))
    );
    // Pages hold distinct wallets, in a stable order.
    assert_ne!(first["data"][0]["id"], second["data"][0]["id"]);
    assert_ne!(first["data"][1]["id"], second["data"][0]["id"]);

    let past = list(f, &customer.token, "per_page=2&page=9");
    assert_eq!(past.status, 200, "{}", past.text());
    let past = &past.json()["data"];
    assert_eq!(past["data"], json!([]));
    assert_eq!(past["total"], json!(3));
    assert_eq!(past["current_page"], json!(9));
    assert_eq!(past["from"], Value::Null);
    assert_eq!(past["to"], Value::Null);

    for query in [
        "per_page=0",
        "per_page=101",
        "page=0",
        "per_page=-1",
        "page=abc",
    ] {
        let response = list(f, &customer.token, query);
        assert_eq!(response.status, 422, "{query}: {}", response.text());
        assert_eq!(response.error_code(), "validation_failed", "{query}");
    }
    // A page far past the end (offset near u32::MAX * 100) is empty, not an overflow.
    for query in ["page=4294967295&per_page=100", "page=4294967295"] {
        let response = list(f, &customer.token, query);
        assert_eq!(response.status, 200, "{query}: {}", response.text());
        assert_eq!(response.json()["data"]["data"], json!([]), "{query}");
        assert_eq!(response.json()["data"]["total"], json!(3), "{query}");
    }
    let response = list(f, &customer.token, "page=4294967296");
    assert_eq!(response.status, 422, "{}", response.text());
    for query in ["per_page=1", "per_page=100"] {
        assert_eq!(list(f, &customer.token, query).status, 200, "{query}");
    }
}

#[test]
fn balance_reports_posted_available_held_and_pending_at_currency_scale() {
    let f = fixture();
    let customer = f.server.register_customer();
    f.server
        .deposit(&f.operator.token, customer.wallet_id, "100.5");
    let (text, balance) = f.server.balance(&customer.token, customer.wallet_id);
    let data = &balance["data"];
    assert_eq!(data["wallet_id"], json!(customer.wallet_id));
    assert_eq!(data["currency_code"], json!("YER"));
    assert!(data["as_of"].is_string());
    for needle in [
        r#""balance":100.50"#,
        r#""available_balance":100.50"#,
        r#""held_balance":0.00"#,
        r#""pending_balance":0.00"#,
    ] {
        assert!(text.contains(needle), "{needle} in {text}");
    }
    let stranger = f.server.register_customer();
    let response = f.server.get(
        &format!("/v1/wallets/{}/balance", customer.wallet_id),
        Some(&stranger.token),
    );
    assert_eq!(response.status, 404, "{}", response.text());
}

#[test]
fn a_frozen_wallet_refuses_credits_and_debits_with_409_until_unfrozen() {
    let f = fixture();
    let customer = f.server.register_customer();
    let wallet = customer.wallet_id;
    f.server.deposit(&f.operator.token, wallet, "50");
    // Freezing needs restricted_operator: a plain operator and the owner are refused.
    let freeze = format!("/v1/wallets/{wallet}/freeze");
    let unfreeze = format!("/v1/wallets/{wallet}/unfreeze");
    assert_eq!(
        f.server.post(&freeze, Some(&f.operator.token), "").status,
        403
    );
    assert_eq!(
        f.server.post(&freeze, Some(&customer.token), "").status,
        403
    );

    let frozen = f
        .server
        .post(&freeze, Some(&f.restricted_operator.token), "");
    assert_eq!(frozen.status, 200, "{}", frozen.text());
    assert_eq!(frozen.json()["data"]["status"], json!("frozen"));
    assert_eq!(
        f.server.wallet(&customer.token, wallet)["status"],
        json!("frozen")
    );

    for route in ["deposit", "withdraw"] {
        let response = f.server.post(
            &format!("/v1/wallets/{wallet}/{route}"),
            Some(&f.operator.token),
            r#"{"amount": 1}"#,
        );
        assert_eq!(response.status, 409, "{route}: {}", response.text());
        assert_eq!(response.error_code(), "wallet_frozen", "{route}");
    }
    let (text, _) = f.server.balance(&customer.token, wallet);
    assert!(text.contains(r#""balance":50.00"#), "{text}");

    let thawed = f
        .server
        .post(&unfreeze, Some(&f.restricted_operator.token), "");
    assert_eq!(thawed.status, 200, "{}", thawed.text());
    assert_eq!(thawed.json()["data"]["status"], json!("active"));
    let again = f
        .server
        .post(&unfreeze, Some(&f.restricted_operator.token), "");
    assert_eq!(again.status, 409, "{}", again.text());
    assert_eq!(again.json()["status"], json!(false));
    f.server.deposit(&f.operator.token, wallet, "1");
    let (text, _) = f.server.balance(&customer.token, wallet);
    assert!(text.contains(r#""balance":51.00"#), "{text}");
}
