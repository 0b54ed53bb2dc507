//! Black-box tests of the per-caller rate limits (contract part 8; decisions.md §5, §6), on
//! servers started with rate limits on (every other test file turns them off). Each test has its
//! own server so that one test's budget cannot leak into another's.

use serde_json::json;
use walletd_tests::http::Response;
use walletd_tests::server::{Options, Server, PASSWORD, PLATFORM_BUSINESS_ID};

fn limited_server() -> Server {
    Server::start_with(Options {
        rate_limits: true,
        ..Options::default()
    })
}

fn header_number(response: &Response, name: &str) -> u64 {
    response
        .header(name)
        .unwrap_or_else(|| panic!("{name} missing: {:?}", response.headers))
        .parse()
        .unwrap_or_else(|_| panic!("{name} is not a number: {:?}", response.header(name)))
}

#[test]
fn the_21st_hold_in_a_minute_is_429_for_that_caller_only() {
    let server = limited_server();
    let first = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let second = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customer = server.register_customer();
    server.deposit(&first.token, customer.wallet_id, "100");
    let body =
        json!({"wallet_id": customer.wallet_id, "amount": 1, "currency_code": "YER"}).to_string();
    for n in 1..=20u64 {
        let response = server.post("/v1/wallets/hold", Some(&first.token), &body);
        assert_eq!(response.status, 200, "hold {n}: {}", response.text());
        assert_eq!(header_number(&response, "ratelimit-limit"), 20);
        assert_eq!(header_number(&response, "ratelimit-remaining"), 20 - n);
        assert!(header_number(&response, "ratelimit-reset") <= 60);
    }
    let refused = server.post("/v1/wallets/hold", Some(&first.token), &body);
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.error_code(), "rate_limited");
    assert_eq!(refused.json()["status"], json!(false));
    let retry_after = header_number(&refused, "retry-after");
    assert!((1..=60).contains(&retry_after), "Retry-After {retry_after}");
    assert_eq!(header_number(&refused, "ratelimit-limit"), 20);
    assert_eq!(header_number(&refused, "ratelimit-remaining"), 0);
    assert!((1..=60).contains(&header_number(&refused, "ratelimit-reset")));
    // The refused request placed nothing: 20 holds of 1 each.
    let (text, _) = server.balance(&first.token, customer.wallet_id);
    assert!(text.contains(r#""held_balance":20.00"#), "{text}");

    // Another caller has its own budget; the limited caller's other classes are untouched.
    let other = server.post("/v1/wallets/hold", Some(&second.token), &body);
    assert_eq!(other.status, 200, "{}", other.text());
    assert_eq!(header_number(&other, "ratelimit-remaining"), 19);
    let read = server.get(
        &format!("/v1/wallets/{}", customer.wallet_id),
        Some(&first.token),
    );
    assert_eq!(read.status, 200, "{}", read.text());
    assert_eq!(header_number(&read, "ratelimit-limit"), 60);
    // A route without a class is never limited.
    assert_eq!(
        server
            .post(
                &format!("/v1/wallets/{}/deposit", customer.wallet_id),
                Some(&first.token),
                r#"{"amount": 1}"#
            )
            .status,
        200
    );
}

#[test]
fn logins_are_limited_per_client_address_in_the_pay_api_class() {
    let server = limited_server();
    let customer = server.register_customer(); // 1 pay_api request from 127.0.0.1
    let body = json!({"phone": customer.phone, "password": PASSWORD}).to_string();
    for n in 2..=30 {
        let response = server.post("/v1/auth/customer/login", None, &body);
        assert_eq!(response.status, 200, "login {n}: {}", response.text());
        assert_eq!(header_number(&response, "ratelimit-limit"), 30);
    }
    let refused = server.post("/v1/auth/customer/login", None, &body);
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert!(refused.header("retry-after").is_some());
    // Wrong passwords count too (a limit that skipped failures would not slow guessing).
    let guess = json!({"phone": customer.phone, "password": "guess guess"}).to_string();
    assert_eq!(
        server.post("/v1/auth/customer/login", None, &guess).status,
        429
    );
    // An authenticated caller is keyed by its token subject, not the shared address.
    assert_eq!(server.get("/v1/wallets", Some(&customer.token)).status, 200);
}
