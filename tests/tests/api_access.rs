//! Issue 17, "Let no one in": each attack of the issue tried against a running `walletd` the way
//! it was reported, and refused (decisions.md §2, §5). The money-moving roles have their own table
//! in `api_money_out.rs`.
//!
//! Tests that need their own settings (rate limits on, slow password hashing, short timeouts,
//! kept keys, a umask) start their own server; the rest share one.

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::os::unix::fs::PermissionsExt as _;
use std::path::Path;
use std::process::Stdio;
use std::sync::OnceLock;
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use base64::engine::general_purpose::URL_SAFE_NO_PAD;
use base64::Engine as _;
use hmac::{Hmac, Mac};
use serde_json::{json, Value};
use sha2::Sha256;
use walletd_tests::http::Response;
use walletd_tests::server::{
    sign_webhook, unix_now, Options, Server, JWT_SECRET, PASSWORD, PLATFORM_BUSINESS_ID,
    WEBHOOK_SECRET,
};

fn shared() -> &'static Server {
    static SERVER: OnceLock<Server> = OnceLock::new();
    SERVER.get_or_init(Server::start)
}

fn start_with_env(rate_limits: bool, env: &[(&'static str, &str)]) -> Server {
    Server::start_with(Options {
        rate_limits,
        env: env.iter().map(|(k, v)| (*k, (*v).to_owned())).collect(),
        ..Options::default()
    })
}

/// A raw connection, for requests the blocking client cannot make (headers without their body).
fn connect(address: SocketAddr) -> TcpStream {
    let stream = TcpStream::connect(address).expect("connect");
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
}

/// Reads whatever the server answers until it closes (or 10 s pass); returns the status line.
fn read_status(stream: &mut TcpStream) -> String {
    let mut answer = Vec::new();
    let mut chunk = [0u8; 4096];
    loop {
        match stream.read(&mut chunk) {
            Ok(0) => break,
            Ok(n) => {
                answer.extend_from_slice(&chunk[..n]);
                if answer.windows(4).any(|w| w == b"\r\n\r\n") {
                    break;
                }
            }
            Err(error) => panic!(
                "no answer ({error}); read so far: {:?}",
                String::from_utf8_lossy(&answer)
            ),
        }
    }
    let text = String::from_utf8_lossy(&answer).into_owned();
    text.lines().next().unwrap_or_default().to_owned()
}

fn random_phone() -> String {
    format!(
        "+9677{:08}",
        walletd_tests::server::unique() * 7919 % 100_000_000
    )
}

// ---------------------------------------------------------------------------------------------
// 1. Webhook signatures: at most 4 candidates of 64 hex, one MAC, a rate class.

#[test]
fn issue17_a_webhook_with_thousands_of_signature_entries_is_refused_before_any_hashing() {
    let server = shared();
    let timestamp = unix_now().to_string();
    // A 1 MiB body (just under the limit) and 5,000 `v1=` entries, as in the report.
    let body = format!(r#"{{"id":"evt","pad":"{}"}}"#, "x".repeat((1 << 20) - 64));
    let signature = vec!["v1="; 5_000].join(",");
    let started = Instant::now();
    let response = server.post_with_headers(
        "/v1/webhooks/sandbox",
        None,
        &[
            ("X-Webhook-Timestamp", &timestamp),
            ("X-Webhook-Signature", &signature),
        ],
        &body,
    );
    let took = started.elapsed();
    assert_eq!(response.status, 401, "{}", response.text());
    assert_eq!(response.error_code(), "webhook_signature_invalid");
    // One MAC over 1 MiB per entry took seconds; refusing on shape takes no hashing at all.
    assert!(
        took < Duration::from_secs(2),
        "the refusal took {took:?}: the server hashed per entry"
    );
}

#[test]
fn issue17_webhook_signature_entries_must_be_one_to_four_of_64_hex_characters() {
    let server = shared();
    let body = r#"{"id":"evt_shape","type":"payment.failed","data":{}}"#;
    let timestamp = unix_now().to_string();
    let good = sign_webhook(WEBHOOK_SECRET, &timestamp, body);
    let stale = format!("v1={}", "0".repeat(64));
    let post = |signature: &str| {
        server.post_with_headers(
            "/v1/webhooks/sandbox",
            None,
            &[
                ("X-Webhook-Timestamp", &timestamp),
                ("X-Webhook-Signature", signature),
            ],
            body,
        )
    };
    // The right signature among others of the right shape (key rotation) still verifies: the body
    // is then read (its payment_uuid is missing: 422), so the signature passed.
    let four = format!("{stale},{stale},{stale},{good}");
    assert_eq!(post(&four).status, 422, "{}", post(&four).text());
    // With the right signature inside, each of these shapes is refused all the same.
    for (what, signature) in [
        ("five entries", format!("{stale},{four}")),
        ("an empty entry", format!("v1=,{good}")),
        ("a short entry", format!("v1=00ff,{good}")),
        ("a non-hex entry", format!("v1={},{good}", "g".repeat(64))),
        ("a trailing comma", format!("{good},")),
    ] {
        let response = post(&signature);
        assert_eq!(response.status, 401, "{what}: {}", response.text());
        assert_eq!(response.error_code(), "webhook_signature_invalid", "{what}");
    }
}

#[test]
fn issue17_the_webhook_route_is_rate_limited_per_client_address() {
    let server = start_with_env(true, &[]);
    let timestamp = unix_now().to_string();
    let signature = format!("v1={}", "0".repeat(64));
    let post = || {
        server.post_with_headers(
            "/v1/webhooks/sandbox",
            None,
            &[
                ("X-Webhook-Timestamp", &timestamp),
                ("X-Webhook-Signature", &signature),
            ],
            "{}",
        )
    };
    for n in 1..=300 {
        let response = post();
        assert_eq!(response.status, 401, "request {n}: {}", response.text());
    }
    let refused = post();
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.error_code(), "rate_limited");
    assert!(refused.header("retry-after").is_some());
}

// ---------------------------------------------------------------------------------------------
// 2. Public routes keyed by address only; failed logins per account; a bounded hashing queue.

#[test]
fn issue17_a_bearer_token_does_not_reset_the_limit_of_public_routes() {
    let server = start_with_env(true, &[]);
    // Five customers (five pay_api requests from this address), as in the report.
    let tokens: Vec<String> = (0..5).map(|_| server.register_customer().token).collect();
    // 25 more wrong-password logins fill the address's 30 per minute, whatever token rides along.
    for n in 0..25 {
        let body = json!({"phone": random_phone(), "password": "wrong password"}).to_string();
        let token = &tokens[n % tokens.len()];
        let response = server.post("/v1/auth/customer/login", Some(token), &body);
        assert_eq!(response.status, 401, "login {n}: {}", response.text());
    }
    for token in &tokens {
        let body = json!({"phone": random_phone(), "password": "wrong password"}).to_string();
        let response = server.post("/v1/auth/customer/login", Some(token), &body);
        assert_eq!(
            response.status,
            429,
            "a token bought a fresh budget: {}",
            response.text()
        );
    }
    // Register with a token is limited by the address too: no account is created.
    let phone = random_phone();
    let body = json!({"name": "Mallory", "phone": phone, "password": PASSWORD}).to_string();
    let response = server.post("/v1/auth/customer/register", Some(&tokens[0]), &body);
    assert_eq!(response.status, 429, "{}", response.text());
    let login = json!({"phone": phone, "password": PASSWORD}).to_string();
    // Still limited (so this cannot log in either): the account must not exist once it passes.
    assert_eq!(
        server.post("/v1/auth/customer/login", None, &login).status,
        429
    );
}

#[test]
fn issue17_ten_failed_logins_lock_the_account_for_fifteen_minutes() {
    let server = shared();
    let customer = server.register_customer();
    let wrong = json!({"phone": customer.phone, "password": "not the password"}).to_string();
    for n in 1..=10 {
        let response = server.post("/v1/auth/customer/login", None, &wrong);
        assert_eq!(response.status, 401, "failure {n}: {}", response.text());
    }
    // The right password now answers 429 too: the lock does not tell a guesser it guessed right.
    let right = json!({"phone": customer.phone, "password": PASSWORD}).to_string();
    let locked = server.post("/v1/auth/customer/login", None, &right);
    assert_eq!(locked.status, 429, "{}", locked.text());
    assert_eq!(locked.error_code(), "too_many_failed_logins");
    let retry_after: u64 = locked
        .header("retry-after")
        .and_then(|v| v.parse().ok())
        .expect("Retry-After");
    assert!(
        (800..=900).contains(&retry_after),
        "Retry-After {retry_after}"
    );
    // Another account is not affected, and the locked customer's token still works.
    let other = server.register_customer();
    let body = json!({"phone": other.phone, "password": PASSWORD}).to_string();
    assert_eq!(
        server.post("/v1/auth/customer/login", None, &body).status,
        200
    );
    assert_eq!(server.get("/v1/wallets", Some(&customer.token)).status, 200);

    // Employees too, per business and login.
    let employee = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let wrong = json!({"business_id": PLATFORM_BUSINESS_ID, "email": employee.email, "password": "not the password"}).to_string();
    for n in 1..=10 {
        let response = server.post("/v1/auth/employee/login", None, &wrong);
        assert_eq!(response.status, 401, "failure {n}: {}", response.text());
    }
    let right =
        json!({"business_id": PLATFORM_BUSINESS_ID, "email": employee.email, "password": PASSWORD})
            .to_string();
    let locked = server.post("/v1/auth/employee/login", None, &right);
    assert_eq!(locked.status, 429, "{}", locked.text());
    assert_eq!(locked.error_code(), "too_many_failed_logins");
}

#[test]
fn issue17_a_login_flood_is_refused_fast_instead_of_queued_behind_argon2() {
    // Real Argon2 cost (OWASP's 19 MiB), so hashing is the bottleneck, as in production.
    let server = start_with_env(false, &[("WALLETD_PASSWORD_HASH_MEMORY_KIB", "19456")]);
    let address = server.address();
    let flood: Vec<_> = (0..48)
        .map(|_| {
            let body = json!({"phone": random_phone(), "password": "wrong password"}).to_string();
            std::thread::spawn(move || {
                walletd_tests::http::send(
                    address,
                    "POST",
                    "/v1/auth/customer/login",
                    &[],
                    Some(body.as_bytes()),
                )
                .expect("an answer")
            })
        })
        .collect();
    let answers: Vec<Response> = flood
        .into_iter()
        .map(|t| t.join().expect("flood thread"))
        .collect();
    let busy: Vec<&Response> = answers.iter().filter(|r| r.status == 503).collect();
    assert!(
        !busy.is_empty(),
        "48 concurrent logins were all queued: {:?}",
        answers.iter().map(|r| r.status).collect::<Vec<_>>()
    );
    for response in &busy {
        assert_eq!(response.error_code(), "busy", "{}", response.text());
        assert_eq!(response.header("retry-after"), Some("1"));
    }
    assert!(answers.iter().all(|r| r.status == 401 || r.status == 503));
    // Once the flood is answered, a real login goes through.
    server.admin_token();
}

// ---------------------------------------------------------------------------------------------
// 4. Data at rest.

fn mode(path: &Path) -> u32 {
    std::fs::symlink_metadata(path)
        .expect("metadata")
        .permissions()
        .mode()
        & 0o777
}

/// Every directory under `root` (itself included) is 0700 and every file 0600.
fn assert_private(root: &Path) -> usize {
    let mut checked = 0;
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path).expect("metadata");
        if metadata.is_dir() {
            assert_eq!(mode(&path), 0o700, "{}", path.display());
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        } else if metadata.is_file() {
            assert_eq!(mode(&path), 0o600, "{}", path.display());
        }
        checked += 1;
    }
    checked
}

#[test]
fn issue17_the_data_dir_is_private_whatever_the_umask() {
    let mut server = Server::start_with(Options {
        umask: Some(0o000),
        kept_keys: true,
        ..Options::default()
    });
    let customer = server.register_customer();
    server.deposit(&server.admin_token(), customer.wallet_id, "10");
    assert!(server.data_dir().join("jwt-secret").exists());
    assert!(server.data_dir().join("webhook-secret").exists());
    // A snapshot, the WAL, the key files, the history store: everything walletd made.
    assert_eq!(server.stop().code(), Some(0));
    let (status, _, stderr) = server.run_tool(&["snapshot"]);
    assert!(status.success(), "{stderr}");
    let checked = assert_private(server.data_dir());
    assert!(checked >= 5, "only {checked} paths in the data dir");
}

#[test]
fn issue17_a_data_dir_left_open_by_an_older_walletd_is_narrowed_at_start() {
    let mut server = Server::start();
    server.register_customer();
    assert_eq!(server.stop().code(), Some(0));
    let dir = server.data_dir().to_path_buf();
    std::fs::set_permissions(&dir, std::fs::Permissions::from_mode(0o755)).expect("chmod");
    for entry in walk(&dir) {
        let wanted = if entry.is_dir() { 0o755 } else { 0o644 };
        std::fs::set_permissions(&entry, std::fs::Permissions::from_mode(wanted)).expect("chmod");
    }
    server.restart();
    assert_private(&dir);
}

fn walk(root: &Path) -> Vec<std::path::PathBuf> {
    let mut all = Vec::new();
    let mut pending = vec![root.to_path_buf()];
    while let Some(path) = pending.pop() {
        if path.is_dir() {
            for entry in std::fs::read_dir(&path).expect("read_dir") {
                pending.push(entry.expect("entry").path());
            }
        }
        if path != root {
            all.push(path);
        }
    }
    all
}

/// Starts `walletd serve` as `server` would and reports whether it came up (it is stopped then)
/// or exited, with its stderr.
fn start_outcome(server: &Server, env: &[(&str, &str)]) -> Result<(), String> {
    use std::io::BufRead as _;
    let mut command = server.serve_command();
    for (name, value) in env {
        command.env(name, value);
    }
    let mut child = command
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn walletd");
    let stdout = child.stdout.take().expect("stdout");
    let mut lines = std::io::BufReader::new(stdout).lines();
    // Either the listening line comes, or stdout closes when the process exits.
    let listening = lines.any(|line| line.is_ok_and(|l| l.starts_with("walletd listening on")));
    if listening {
        let _ = child.kill();
        let _ = child.wait();
        return Ok(());
    }
    let mut stderr = String::new();
    if let Some(mut pipe) = child.stderr.take() {
        let _ = pipe.read_to_string(&mut stderr);
    }
    let status = child.wait().expect("wait");
    assert!(!status.success(), "exited 0 without listening: {stderr}");
    Err(stderr)
}

#[test]
fn issue17_a_kept_key_file_that_is_not_64_hex_characters_refuses_to_start() {
    let mut server = Server::start_with(Options {
        kept_keys: true,
        ..Options::default()
    });
    assert_eq!(server.stop().code(), Some(0));
    for name in ["jwt-secret", "webhook-secret"] {
        let path = server.data_dir().join(name);
        let kept = std::fs::read_to_string(&path).expect("kept key");
        assert_eq!(kept.len(), 64, "{name}: {kept:?}");
        assert!(
            kept.bytes().all(|b| b.is_ascii_hexdigit()),
            "{name}: {kept:?}"
        );
        // Kept with a trailing newline (as an editor leaves it): still fine.
        std::fs::write(&path, format!("{kept}\n")).expect("write");
        assert_eq!(start_outcome(&server, &[]), Ok(()), "{name} with a newline");
        // 16 bytes of hex, a hand-edited word, an empty file: refused, with a clear message.
        for bad in ["ab".repeat(16), "password".to_owned(), String::new()] {
            std::fs::write(&path, &bad).expect("write");
            let refused = start_outcome(&server, &[]).expect_err("started with a weak key");
            assert!(
                refused.contains(name) && refused.contains("64 hex characters"),
                "{name} = {bad:?}: {refused}"
            );
        }
        std::fs::write(&path, &kept).expect("restore");
    }
}

#[test]
fn issue17_a_weak_bootstrap_admin_password_refuses_to_start() {
    let mut server = Server::start();
    assert_eq!(server.stop().code(), Some(0));
    let refused = start_outcome(&server, &[("WALLETD_ADMIN_PASSWORD", "a")])
        .expect_err("started with the admin password \"a\"");
    assert!(refused.contains("WALLETD_ADMIN_PASSWORD"), "{refused}");
}

// ---------------------------------------------------------------------------------------------
// 5. Connections per address; scans in a rate class.

/// A connection to `server` from the loopback address `source` (127.0.0.2 is another client).
fn connect_from(source: [u8; 4], server: SocketAddr) -> TcpStream {
    let socket =
        socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).expect("socket");
    socket
        .bind(&SocketAddr::from((source, 0)).into())
        .expect("bind the source address");
    socket.connect(&server.into()).expect("connect");
    let stream: TcpStream = socket.into();
    stream
        .set_read_timeout(Some(Duration::from_secs(10)))
        .expect("read timeout");
    stream
}

#[test]
fn issue17_idle_sockets_from_one_client_do_not_lock_others_out() {
    // Its own server: the idle sockets take every slot of 127.0.0.1 while they are open.
    let server = &Server::start();
    // 4,100 idle sockets from one address, as in the report (the global cap is 4,096).
    let mut idle = Vec::with_capacity(4_100);
    for _ in 0..4_100 {
        idle.push(connect(server.address()));
    }
    // The one past the per-address cap is told so and closed, not left waiting.
    let mut over = connect(server.address());
    let status = read_status(&mut over);
    assert!(status.contains(" 429 "), "{status:?}");
    // Another client is served at once.
    let started = Instant::now();
    let mut other = connect_from([127, 0, 0, 2], server.address());
    other
        .write_all(b"GET /v1/health HTTP/1.1\r\nHost: walletd\r\nConnection: close\r\n\r\n")
        .expect("write");
    let status = read_status(&mut other);
    assert!(status.contains(" 200 "), "{status:?}");
    assert!(started.elapsed() < Duration::from_secs(5));
    assert!(
        server
            .stderr_text()
            .contains("connection limit per address reached"),
        "no log line: {}",
        server.stderr_text()
    );
    drop(idle);
}

#[test]
fn issue17_reports_and_employee_wallet_lists_are_in_the_scan_class() {
    let server = start_with_env(true, &[]);
    let finance = server.create_employee(PLATFORM_BUSINESS_ID, &["finance"]);
    for n in 1..=30 {
        let response = server.get("/v1/reports/summary", Some(&finance.token));
        assert_eq!(response.status, 200, "report {n}: {}", response.text());
    }
    let refused = server.get("/v1/reports/fees", Some(&finance.token));
    assert_eq!(refused.status, 429, "{}", refused.text());
    assert_eq!(refused.error_code(), "rate_limited");

    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    for n in 1..=30 {
        let response = server.get("/v1/wallets", Some(&operator.token));
        assert_eq!(response.status, 200, "list {n}: {}", response.text());
    }
    let refused = server.get("/v1/wallets", Some(&operator.token));
    assert_eq!(refused.status, 429, "{}", refused.text());
    // A customer's list reads one shard: its class stays 60 per minute.
    let customer = server.register_customer();
    for n in 1..=31 {
        let response = server.get("/v1/wallets", Some(&customer.token));
        assert_eq!(
            response.status,
            200,
            "customer list {n}: {}",
            response.text()
        );
    }
}

// ---------------------------------------------------------------------------------------------
// 6. Tokens: iat checked, a maximum lifetime.

fn now_secs() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_secs() as i64
}

fn mint(claims: &Value) -> String {
    let head = URL_SAFE_NO_PAD.encode(json!({"alg": "HS256", "typ": "JWT"}).to_string());
    let body = URL_SAFE_NO_PAD.encode(claims.to_string());
    let input = format!("{head}.{body}");
    let mut mac = Hmac::<Sha256>::new_from_slice(JWT_SECRET.as_bytes()).expect("any key length");
    mac.update(input.as_bytes());
    format!(
        "{input}.{}",
        URL_SAFE_NO_PAD.encode(mac.finalize().into_bytes())
    )
}

fn claims(customer_id: u64, iat: i64, exp: i64) -> Value {
    json!({
        "sub": format!("customer:{customer_id}"),
        "business_id": PLATFORM_BUSINESS_ID,
        "roles": [],
        "iat": iat,
        "exp": exp,
        "jti": format!("t-{iat}-{exp}"),
        "iss": "walletd",
        "aud": "walletd-api",
    })
}

#[test]
fn issue17_tokens_with_a_long_lifetime_or_a_future_iat_are_refused() {
    let server = shared();
    let customer = server.register_customer();
    let path = format!("/v1/wallets/{}", customer.wallet_id);
    let now = now_secs();
    // The server's own tokens, and one minted like them, verify.
    assert_eq!(server.get(&path, Some(&customer.token)).status, 200);
    let fine = mint(&claims(customer.id, now - 10, now + 600));
    assert_eq!(server.get(&path, Some(&fine)).status, 200);
    let year_2100 = 4_102_444_800;
    for (what, token) in [
        ("exp in 2100", mint(&claims(customer.id, now, year_2100))),
        ("a day long", mint(&claims(customer.id, now, now + 86_400))),
        (
            "iat an hour ahead",
            mint(&claims(customer.id, now + 3_600, now + 3_700)),
        ),
        ("no iat", {
            let mut c = claims(customer.id, now, now + 600);
            c.as_object_mut().expect("object").remove("iat");
            mint(&c)
        }),
    ] {
        let response = server.get(&path, Some(&token));
        assert_eq!(response.status, 401, "{what}: {}", response.text());
    }
}

// ---------------------------------------------------------------------------------------------
// 7. Bodies: a declared length over the limit, slow bodies, slow handlers.

#[test]
fn issue17_a_declared_content_length_over_the_limit_is_413_before_the_body_is_read() {
    let server = shared();
    let customer = server.register_customer();
    let mut stream = connect(server.address());
    // Headers only: the 100 MiB body never comes. The answer must not wait for it.
    let head = format!(
        "POST /v1/wallets/{}/deposit HTTP/1.1\r\nHost: walletd\r\nAuthorization: Bearer {}\r\nContent-Type: application/json\r\nContent-Length: 104857600\r\n\r\n",
        customer.wallet_id, customer.token
    );
    stream.write_all(head.as_bytes()).expect("write");
    let status = read_status(&mut stream);
    assert!(status.contains(" 413 "), "{status:?}");
    // Public routes have a smaller limit (16 KiB).
    let mut stream = connect(server.address());
    stream
        .write_all(b"POST /v1/auth/customer/login HTTP/1.1\r\nHost: walletd\r\nContent-Length: 20000\r\n\r\n")
        .expect("write");
    let status = read_status(&mut stream);
    assert!(status.contains(" 413 "), "{status:?}");
}

#[test]
fn issue17_a_body_that_stops_arriving_is_answered_408() {
    let server = start_with_env(false, &[("WALLETD_BODY_READ_TIMEOUT_MS", "300")]);
    let mut stream = connect(server.address());
    stream
        .write_all(b"POST /v1/auth/customer/login HTTP/1.1\r\nHost: walletd\r\nContent-Type: application/json\r\nContent-Length: 100\r\n\r\n{\"phone\":")
        .expect("write");
    let status = read_status(&mut stream);
    assert!(status.contains(" 408 "), "{status:?}");
}

#[test]
fn issue17_a_handler_past_its_timeout_is_answered_503() {
    // Real Argon2 cost makes a login take longer than a 5 ms handler timeout.
    let server = start_with_env(
        false,
        &[
            ("WALLETD_PASSWORD_HASH_MEMORY_KIB", "19456"),
            ("WALLETD_HANDLER_TIMEOUT_MS", "5"),
        ],
    );
    let body = json!({"phone": random_phone(), "password": "wrong password"}).to_string();
    let response = server.post("/v1/auth/customer/login", None, &body);
    assert_eq!(response.status, 503, "{}", response.text());
    assert_eq!(response.error_code(), "timeout");
}
