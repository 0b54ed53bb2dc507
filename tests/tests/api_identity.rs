//! Black-box tests of health, registration, login and bearer tokens (decisions.md §2), over
//! loopback HTTP against a real `walletd serve`. One server for the file; every test uses its own
//! customers and employees.

use std::sync::OnceLock;
use std::time::{SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use walletd_tests::server::{Server, JWT_SECRET, PASSWORD, PLATFORM_BUSINESS_ID};

fn server() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

/// A JWT with `header` and `claims`, signed HS256 with `key` (signature left off when `None`).
fn mint(header: &Value, claims: &Value, key: Option<&[u8]>) -> String {
    let head = URL_SAFE_NO_PAD.encode(header.to_string());
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    let signing_input = format!("{head}.{body}");
    let signature = match key {
        Some(key) => {
            let mut mac = Hmac::<Sha256>::new_from_slice(key).expect("any key length");
            mac.update(signing_input.as_bytes());
            URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
        }
        None => String::new(),
    };
    format!("{signing_input}.{signature}")
}

fn hs256() -> Value {
    json!({"alg": "HS256", "typ": "JWT"})
}

/// Claims for `customer:{id}` in the shape of api/src/auth/token.rs, expiring at `exp`.
fn customer_claims(id: u64, exp: i64) -> Value {
    json!({
        "sub": format!("customer:{id}"),
        "business_id": PLATFORM_BUSINESS_ID,
        "roles": [],
        "iat": now_secs() - 10,
        "exp": exp,
        "jti": format!("test-{id}-{exp}"),
        "iss": "walletd",
        "aud": "walletd-api",
    })
}

fn assert_unauthorized(response: &walletd_tests::http::Response, what: &str) {
    assert_eq!(response.status, 401, "{what}: {}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(false), "{what}");
    assert_eq!(body["error"]["code"], json!("unauthorized"), "{what}");
    assert!(body["request_id"].is_string(), "{what}: request_id");
}

#[test]
fn health_reports_ok_version_timestamp_and_wal_positions() {
    let response = server().get("/v1/health", None);
    assert_eq!(response.status, 200, "{}", response.text());
    assert_eq!(
        response.header("content-type"),
        Some("application/json"),
        "content type"
    );
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    assert_eq!(body["data"]["status"], json!("ok"));
    assert!(body["data"]["version"]
        .as_str()
        .is_some_and(|v| !v.is_empty()));
    let timestamp = body["data"]["timestamp"].as_str().expect("timestamp");
    assert!(
        timestamp.ends_with('Z') && timestamp.contains('T'),
        "{timestamp}"
    );
    let last = body["data"]["wal"]["last_lsn"].as_u64().expect("last_lsn");
    let durable = body["data"]["wal"]["durable_lsn"]
        .as_u64()
        .expect("durable_lsn");
    assert!(durable <= last, "durable {durable} > last {last}");
}

#[test]
fn register_answers_201_with_token_customer_and_primary_yer_wallet() {
    let phone = format!("+96771{:07}", walletd_tests::server::unique());
    let body = json!({"name": "Amina", "phone": phone, "password": PASSWORD, "email": "amina@example.com"});
    let response = server().post("/v1/auth/customer/register", None, &body.to_string());
    assert_eq!(response.status, 201, "{}", response.text());
    let body = response.json();
    assert_eq!(body["status"], json!(true));
    let data = &body["data"];
    assert!(data["token"]
        .as_str()
        .is_some_and(|t| t.split('.').count() == 3));
    assert_eq!(data["token_type"], json!("Bearer"));
    assert_eq!(data["expires_in"], json!(3600));
    let customer = &data["customer"];
    assert!(customer["id"].as_u64().is_some_and(|id| id > 0));
    assert_eq!(customer["name"], json!("Amina"));
    assert_eq!(customer["phone"], json!(phone));
    assert_eq!(customer["email"], json!("amina@example.com"));
    assert!(customer["created_at"].is_string());
    let wallet = &data["wallet"];
    assert_eq!(wallet["currency_code"], json!("YER"));
    assert_eq!(wallet["wallet_type"], json!("primary"));
    assert_eq!(wallet["owner_type"], json!("customer"));
    assert_eq!(wallet["owner_id"], customer["id"]);
    assert_eq!(wallet["business_id"], json!(PLATFORM_BUSINESS_ID));
    assert_eq!(wallet["status"], json!("active"));
    // Never-null fields of a new wallet (decisions.md §6).
    assert_eq!(wallet["branch_id"], json!(0));
    assert_eq!(wallet["balance_verified_at"], wallet["created_at"]);
    assert!(
        response.text().contains(r#""cached_balance":0.00"#),
        "{}",
        response.text()
    );
    // The token works at once.
    let token = data["token"].as_str().expect("token");
    let id = wallet["id"].as_u64().expect("wallet id");
    assert_eq!(server().wallet(token, id)["id"], json!(id));
}

#[test]
fn register_with_a_phone_already_registered_is_409() {
    let customer = server().register_customer();
    let body = json!({"name": "Again", "phone": customer.phone, "password": PASSWORD});
    let response = server().post("/v1/auth/customer/register", None, &body.to_string());
    assert_eq!(response.status, 409, "{}", response.text());
    assert_eq!(response.json()["status"], json!(false));
}

#[test]
fn register_refuses_a_bad_phone_and_a_short_password_with_422() {
    let cases = [
        (
            json!({"name": "N", "phone": "967712345678", "password": PASSWORD}),
            "phone",
        ),
        (
            json!({"name": "N", "phone": "+12345", "password": PASSWORD}),
            "phone",
        ),
        (
            json!({"name": "N", "phone": "+1234567890123456", "password": PASSWORD}),
            "phone",
        ),
        (
            json!({"name": "N", "phone": "+96771234abcd", "password": PASSWORD}),
            "phone",
        ),
        (
            json!({"name": "N", "phone": format!("+96772{:07}", walletd_tests::server::unique()), "password": "short"}),
            "password",
        ),
    ];
    for (body, field) in cases {
        let response = server().post("/v1/auth/customer/register", None, &body.to_string());
        assert_eq!(response.status, 422, "{body}: {}", response.text());
        let answer = response.json();
        assert_eq!(
            answer["error"]["code"],
            json!("validation_failed"),
            "{body}"
        );
        assert!(answer["errors"][field].is_array(), "{body}: {answer}");
    }
    // Missing field: also 422 (a shape error, not malformed JSON).
    let response = server().post(
        "/v1/auth/customer/register",
        None,
        r#"{"name": "N", "password": "long enough password"}"#,
    );
    assert_eq!(response.status, 422, "{}", response.text());
}

#[test]
fn customer_login_accepts_the_password_and_refuses_wrong_or_unknown_alike() {
    let customer = server().register_customer();
    let body = json!({"phone": customer.phone, "password": PASSWORD});
    let response = server().post("/v1/auth/customer/login", None, &body.to_string());
    assert_eq!(response.status, 200, "{}", response.text());
    let data = &response.json()["data"];
    assert_eq!(data["token_type"], json!("Bearer"));
    assert_eq!(data["customer"]["id"], json!(customer.id));
    assert_eq!(data["wallet"]["id"], json!(customer.wallet_id));
    let token = data["token"].as_str().expect("token");
    server().wallet(token, customer.wallet_id);

    let wrong = json!({"phone": customer.phone, "password": "not the password"});
    let wrong = server().post("/v1/auth/customer/login", None, &wrong.to_string());
    assert_unauthorized(&wrong, "wrong password");
    let unknown = json!({"phone": "+96779999999999", "password": PASSWORD});
    let unknown = server().post("/v1/auth/customer/login", None, &unknown.to_string());
    assert_unauthorized(&unknown, "unknown phone");
    // The same answer for both: nothing tells which of phone and password was wrong.
    assert_eq!(wrong.json()["message"], unknown.json()["message"]);
}

#[test]
fn employees_log_in_by_email_or_by_phone_and_see_their_roles() {
    let server = server();
    let business = server.create_business(false);
    let phone = format!("+96773{:07}", walletd_tests::server::unique());
    let email = format!("clerk{}@walletd.test", walletd_tests::server::unique());
    let created = server.post_expect(
        "/v1/admin/employees",
        Some(&server.admin_token()),
        &json!({"business_id": business, "name": "Clerk", "email": email, "phone": phone,
                "password": PASSWORD, "roles": ["operator", "finance"]})
        .to_string(),
        201,
    );
    let id = created["data"]["id"].clone();
    for login in [
        json!({"business_id": business, "email": email, "password": PASSWORD}),
        json!({"business_id": business, "phone": phone, "password": PASSWORD}),
    ] {
        let response = server.post("/v1/auth/employee/login", None, &login.to_string());
        assert_eq!(response.status, 200, "{login}: {}", response.text());
        let data = &response.json()["data"];
        assert_eq!(data["token_type"], json!("Bearer"));
        assert_eq!(data["employee"]["id"], id);
        assert_eq!(data["employee"]["business_id"], json!(business));
        assert_eq!(data["employee"]["roles"], json!(["operator", "finance"]));
    }
    // Another business scope, or a wrong password: the same 401.
    let other_scope =
        json!({"business_id": PLATFORM_BUSINESS_ID, "email": email, "password": PASSWORD});
    assert_unauthorized(
        &server.post("/v1/auth/employee/login", None, &other_scope.to_string()),
        "employee of another business",
    );
    let wrong = json!({"business_id": business, "email": email, "password": "nope nope nope"});
    assert_unauthorized(
        &server.post("/v1/auth/employee/login", None, &wrong.to_string()),
        "wrong employee password",
    );
}

#[test]
fn a_token_minted_with_the_server_key_is_accepted() {
    // Proves the minting below matches the server's, so the refusals that follow are meaningful.
    let customer = server().register_customer();
    let token = mint(
        &hs256(),
        &customer_claims(customer.id, now_secs() + 600),
        Some(JWT_SECRET.as_bytes()),
    );
    let response = server().get(&format!("/v1/wallets/{}", customer.wallet_id), Some(&token));
    assert_eq!(response.status, 200, "{}", response.text());
}

#[test]
fn forged_expired_unsigned_and_garbage_tokens_are_401() {
    let customer = server().register_customer();
    let path = format!("/v1/wallets/{}", customer.wallet_id);
    let live = customer_claims(customer.id, now_secs() + 600);
    let forged = mint(
        &hs256(),
        &live,
        Some(b"not the server's secret, 32+ bytes long"),
    );
    let expired = mint(
        &hs256(),
        &customer_claims(customer.id, now_secs() - 5),
        Some(JWT_SECRET.as_bytes()),
    );
    let unsigned = mint(&json!({"alg": "none", "typ": "JWT"}), &live, None);
    // alg none with the real signature appended must not pass either.
    let relabelled = {
        let real = mint(&hs256(), &live, Some(JWT_SECRET.as_bytes()));
        let signature = real.rsplit('.').next().expect("three parts").to_owned();
        let none = mint(&json!({"alg": "none", "typ": "JWT"}), &live, None);
        format!("{none}{signature}")
    };
    let mut wrong_audience = live.clone();
    wrong_audience["aud"] = json!("another-api");
    let wrong_audience = mint(&hs256(), &wrong_audience, Some(JWT_SECRET.as_bytes()));
    let unknown_subject = mint(
        &hs256(),
        &customer_claims(9_999_999, now_secs() + 600),
        Some(JWT_SECRET.as_bytes()),
    );
    // The customer's own token with one payload character changed.
    let tampered = {
        let mut parts: Vec<String> = customer.token.split('.').map(str::to_owned).collect();
        let payload = &mut parts[1];
        let last = payload.pop().expect("payload");
        payload.push(if last == 'A' { 'B' } else { 'A' });
        parts.join(".")
    };
    let cases = [
        ("bad signature", forged.as_str()),
        ("expired", expired.as_str()),
        ("alg none", unsigned.as_str()),
        ("alg none with a signature", relabelled.as_str()),
        ("wrong audience", wrong_audience.as_str()),
        ("unknown subject", unknown_subject.as_str()),
        ("tampered payload", tampered.as_str()),
        ("garbage", "garbage"),
        ("empty", ""),
        ("four parts", "a.b.c.d"),
    ];
    for (what, token) in cases {
        assert_unauthorized(&server().get(&path, Some(token)), what);
    }
    // No Authorization header at all, and a non-bearer scheme.
    assert_unauthorized(&server().get(&path, None), "no token");
    let basic = server().request("GET", &path, None, &[("Authorization", "Basic YTpi")], None);
    assert_unauthorized(&basic, "basic auth");
}

/// The payload of a token walletd issued, decoded (its signature is walletd's to check).
fn claims_of(token: &str) -> Value {
    let payload = token.split('.').nth(1).expect("a JWT has a payload");
    let bytes = URL_SAFE_NO_PAD.decode(payload).expect("base64url payload");
    serde_json::from_slice(&bytes).expect("JSON claims")
}

/// `--token-ttl` (`WALLETD_TOKEN_TTL`) sets the lifetime of every token a login issues, and
/// `expires_in` says it; a lifetime outside 1m..=1h refuses start with a message naming the
/// range (tokens are checked to live at most an hour, so a longer one would be refused by walletd
/// itself).
#[test]
fn the_token_lifetime_is_configurable_within_an_hour() {
    let mut server = Server::start_with(walletd_tests::server::Options {
        env: vec![("WALLETD_TOKEN_TTL", "2m".into())],
        ..Default::default()
    });
    let customer = server.register_customer();
    let login = json!({"phone": customer.phone, "password": PASSWORD});
    let body = server.post_expect("/v1/auth/customer/login", None, &login.to_string(), 200);
    assert_eq!(body["data"]["expires_in"], json!(120), "{body}");
    for token in [
        customer.token.as_str(),
        body["data"]["token"].as_str().expect("token"),
    ] {
        let claims = claims_of(token);
        let lifetime = claims["exp"].as_i64().expect("exp") - claims["iat"].as_i64().expect("iat");
        assert_eq!(lifetime, 120, "{claims}");
        let wallet = format!("/v1/wallets/{}", customer.wallet_id);
        assert_eq!(server.get(&wallet, Some(token)).status, 200);
    }

    server.stop();
    for (ttl, says) in [
        ("2h", "1m..=1h"),
        ("59s", "1m..=1h"),
        ("15", "needs a unit"),
    ] {
        let mut command = server.serve_command();
        command.env("WALLETD_TOKEN_TTL", ttl);
        let output = Server::run_to_exit(&mut command, std::time::Duration::from_secs(30));
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(!output.status.success(), "{ttl}: {:?}", output.status);
        assert!(
            stderr.contains("token-ttl") && stderr.contains(says),
            "{ttl}: {stderr}"
        );
    }
}
