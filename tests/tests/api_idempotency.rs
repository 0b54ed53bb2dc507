//! Black-box tests of Idempotency-Key (decisions.md §5, §6): a retry with the same key and
//! payload gets the first answer again with `Idempotent-Replayed: true` and moves money once;
//! another payload under the key is 422 `idempotency_key_reused`; keys are per caller; concurrent
//! retries run the request once; and the answers survive a graceful restart and a crash.

use std::sync::OnceLock;

use serde_json::json;
use walletd_tests::http::Response;
use walletd_tests::server::{Employee, Options, Server, PLATFORM_BUSINESS_ID};

struct Fixture {
    server: Server,
    operator: Employee,
    second_operator: Employee,
}

fn fixture() -> &'static Fixture {
    static FIXTURE: OnceLock<Fixture> = OnceLock::new();
    FIXTURE.get_or_init(|| {
        let server = Server::start();
        let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        let second_operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
        Fixture {
            server,
            operator,
            second_operator,
        }
    })
}

fn key() -> String {
    format!("key-{}", walletd_tests::server::unique())
}

fn balance(server: &Server, token: &str, wallet: u64) -> String {
    let (text, json) = server.balance(token, wallet);
    let start = text.find(r#""balance":"#).expect("balance field");
    let rest = &text[start + r#""balance":"#.len()..];
    let end = rest.find(',').expect("a field after balance");
    assert!(json["data"]["balance"].is_number());
    rest[..end].to_owned()
}

fn transactions(server: &Server, token: &str, wallet: u64) -> u64 {
    server.get_ok(&format!("/v1/wallets/{wallet}/transactions"), token)["data"]["total"]
        .as_u64()
        .expect("total")
}

fn assert_fresh(response: &Response, status: u16) {
    assert_eq!(response.status, status, "{}", response.text());
    assert_eq!(
        response.header("idempotent-replayed"),
        None,
        "a first answer"
    );
}

fn assert_replay_of(response: &Response, first: &Response) {
    assert_eq!(response.status, first.status, "{}", response.text());
    assert_eq!(response.header("idempotent-replayed"), Some("true"));
    assert_eq!(
        response.text(),
        first.text(),
        "the first answer, byte for byte"
    );
}

/// Each retry (key, first answer, body) posted to `path` again replays its first answer.
fn assert_all_replay(
    server: &Server,
    path: &str,
    token: &str,
    retries: &[(&String, &Response, &str)],
) {
    for (key, first, body) in retries {
        let again = server.post_idempotent(path, token, key, body);
        assert_replay_of(&again, first);
    }
}

#[test]
fn same_key_and_body_replays_the_first_answer_and_moves_money_once() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let key = key();
    let first = f
        .server
        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 10.25}"#);
    assert_fresh(&first, 200);
    assert_eq!(first.json()["data"]["idempotency_key"], json!(key));
    // Whitespace and spelling of the same JSON do not make it another request.
    for body in [r#"{"amount": 10.25}"#, r#"{ "amount" : 10.25 }"#] {
        let again = f
            .server
            .post_idempotent(&path, &f.operator.token, &key, body);
        assert_replay_of(&again, &first);
    }
    assert_eq!(
        balance(&f.server, &customer.token, customer.wallet_id),
        "10.25"
    );
    assert_eq!(
        transactions(&f.server, &customer.token, customer.wallet_id),
        1
    );
}

#[test]
fn same_key_with_another_payload_route_or_wallet_is_422_idempotency_key_reused() {
    let f = fixture();
    let customer = f.server.register_customer();
    let other = f.server.register_customer();
    let wallet = customer.wallet_id;
    let key = key();
    let deposit = format!("/v1/wallets/{wallet}/deposit");
    let first = f
        .server
        .post_idempotent(&deposit, &f.operator.token, &key, r#"{"amount": 5}"#);
    assert_fresh(&first, 200);
    for (path, body) in [
        (deposit.clone(), r#"{"amount": 6}"#),
        (deposit.clone(), r#"{"amount": 5, "description": "other"}"#),
        (format!("/v1/wallets/{wallet}/withdraw"), r#"{"amount": 5}"#),
        (
            format!("/v1/wallets/{}/deposit", other.wallet_id),
            r#"{"amount": 5}"#,
        ),
    ] {
        let response = f
            .server
            .post_idempotent(&path, &f.operator.token, &key, body);
        assert_eq!(response.status, 422, "{path} {body}: {}", response.text());
        assert_eq!(response.error_code(), "idempotency_key_reused");
    }
    assert_eq!(balance(&f.server, &customer.token, wallet), "5.00");
    assert_eq!(balance(&f.server, &other.token, other.wallet_id), "0.00");
    // The key is scoped per caller: another operator's identical request is its own.
    let theirs =
        f.server
            .post_idempotent(&deposit, &f.second_operator.token, &key, r#"{"amount": 5}"#);
    assert_fresh(&theirs, 200);
    assert_eq!(balance(&f.server, &customer.token, wallet), "10.00");
}

#[test]
fn a_rejection_under_a_key_is_replayed_too() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}/withdraw", customer.wallet_id);
    let key = key();
    let first = f
        .server
        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 3}"#);
    assert_eq!(first.status, 422, "{}", first.text());
    assert_eq!(first.error_code(), "insufficient_funds");
    f.server
        .deposit(&f.operator.token, customer.wallet_id, "10");
    // The first answer again, even though the funds are there now: a retry never runs twice.
    let again = f.server.request(
        "POST",
        &path,
        Some(&f.operator.token),
        &[("Idempotency-Key", &key), ("X-Request-ID", "retry-1")],
        Some(br#"{"amount": 3}"#),
    );
    assert_eq!(again.status, 422);
    assert_eq!(again.header("idempotent-replayed"), Some("true"));
    assert_eq!(again.error_code(), "insufficient_funds");
    // The stored error carries the live request's id.
    assert_eq!(again.json()["request_id"], json!("retry-1"));
    assert_eq!(
        balance(&f.server, &customer.token, customer.wallet_id),
        "10.00"
    );
}

#[test]
fn created_answers_replay_as_201() {
    let f = fixture();
    let customer = f.server.register_customer();
    let target = f.server.register_customer();
    f.server
        .deposit(&f.operator.token, customer.wallet_id, "50");
    let body = format!(
        r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": 20, "currency_code": "YER"}}"#,
        customer.wallet_id, target.wallet_id
    );
    let key = key();
    let first = f
        .server
        .post_idempotent("/v1/transfers", &customer.token, &key, &body);
    assert_fresh(&first, 201);
    let again = f
        .server
        .post_idempotent("/v1/transfers", &customer.token, &key, &body);
    assert_replay_of(&again, &first);
    assert_eq!(
        balance(&f.server, &customer.token, customer.wallet_id),
        "30.00"
    );
    assert_eq!(balance(&f.server, &target.token, target.wallet_id), "20.00");

    let wallet = json!({"owner_type": "customer", "owner_id": customer.id, "currency_code": "USD"})
        .to_string();
    let key = self::key();
    let first = f
        .server
        .post_idempotent("/v1/wallets", &f.operator.token, &key, &wallet);
    assert_fresh(&first, 201);
    let again = f
        .server
        .post_idempotent("/v1/wallets", &f.operator.token, &key, &wallet);
    assert_replay_of(&again, &first);
}

#[test]
fn concurrent_retries_under_one_key_run_the_request_once() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let key = key();
    let answers: Vec<Response> = std::thread::scope(|scope| {
        let handles: Vec<_> = (0..8)
            .map(|_| {
                scope.spawn(|| {
                    f.server
                        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 4}"#)
                })
            })
            .collect();
        handles
            .into_iter()
            .map(|h| h.join().expect("client thread"))
            .collect()
    });
    let fresh: Vec<&Response> = answers
        .iter()
        .filter(|r| r.status == 200 && r.header("idempotent-replayed").is_none())
        .collect();
    assert_eq!(
        fresh.len(),
        1,
        "exactly one first answer: {:?}",
        answers.iter().map(Response::text).collect::<Vec<_>>()
    );
    for answer in &answers {
        match answer.status {
            200 => assert_eq!(answer.text(), fresh[0].text()),
            409 => assert_eq!(answer.error_code(), "request_in_progress"),
            other => panic!("unexpected {other}: {}", answer.text()),
        }
    }
    assert_eq!(
        balance(&f.server, &customer.token, customer.wallet_id),
        "4.00"
    );
    assert_eq!(
        transactions(&f.server, &customer.token, customer.wallet_id),
        1
    );
}

#[test]
fn malformed_idempotency_keys_are_400() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let long = "k".repeat(256);
    for key in [long.as_str(), "\"\""] {
        let response = f
            .server
            .post_idempotent(&path, &f.operator.token, key, r#"{"amount": 1}"#);
        assert_eq!(response.status, 400, "{key}: {}", response.text());
    }
    assert_eq!(
        balance(&f.server, &customer.token, customer.wallet_id),
        "0.00"
    );
}

#[test]
fn replays_survive_a_graceful_restart_and_a_crash() {
    let mut server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customer = server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let graceful_key = key();
    let crash_key = key();
    let graceful =
        server.post_idempotent(&path, &operator.token, &graceful_key, r#"{"amount": 7}"#);
    assert_fresh(&graceful, 200);

    let status = server.stop();
    assert!(status.success(), "SIGTERM exit: {status:?}");
    server.restart();
    let again = server.post_idempotent(&path, &operator.token, &graceful_key, r#"{"amount": 7}"#);
    assert_replay_of(&again, &graceful);
    let reused = server.post_idempotent(&path, &operator.token, &graceful_key, r#"{"amount": 8}"#);
    assert_eq!(reused.status, 422, "{}", reused.text());
    assert_eq!(
        balance(&server, &customer.token, customer.wallet_id),
        "7.00"
    );

    let crash = server.post_idempotent(&path, &operator.token, &crash_key, r#"{"amount": 3}"#);
    assert_fresh(&crash, 200);
    server.kill_hard();
    server.restart();
    assert_all_replay(
        &server,
        &path,
        &operator.token,
        &[
            (&crash_key, &crash, r#"{"amount": 3}"#),
            (&graceful_key, &graceful, r#"{"amount": 7}"#),
        ],
    );
    assert_eq!(
        balance(&server, &customer.token, customer.wallet_id),
        "10.00"
    );
    assert_eq!(
        transactions(&server, &customer.token, customer.wallet_id),
        2
    );
}

/// The value of an unlabelled gauge on `/metrics`.
fn gauge(server: &Server, name: &str) -> u64 {
    let text = server.get("/metrics", None).text();
    text.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or_else(|| panic!("{name} missing from /metrics:\n{text}"))
}

/// Answers are kept in generations of a quarter of the retention window, each deleted whole
/// once its latest answer expired (docs/history.md, "Idempotency answers"). With a 24-second
/// window (6-second generations): a key answered in the first generation runs again once
/// expired and its generation is gone, a key of the next one still replays, and both hold
/// after a SIGKILL right after the drop (the store's journal may still name the deleted
/// keyspace) and a restart. The test waits for the window itself to pass: that is what it tests.
#[test]
fn answers_expire_by_generation_and_survive_a_crash_after_a_drop() {
    let retention = std::time::Duration::from_secs(24);
    let mut server = Server::start_with(Options {
        env: vec![("WALLETD_IDEMPOTENCY_RETENTION", "24s".into())],
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let customer = server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    // A history read waits until the indexer filed (and purged) everything before it.
    let filed = |server: &Server| transactions(server, &customer.token, customer.wallet_id);
    let (first_key, second_key, third_key) = (key(), key(), key());

    let started = std::time::Instant::now();
    let first = server.post_idempotent(&path, &operator.token, &first_key, r#"{"amount": 1}"#);
    assert_fresh(&first, 200);
    std::thread::sleep(retention / 4 + std::time::Duration::from_millis(500));
    let second = server.post_idempotent(&path, &operator.token, &second_key, r#"{"amount": 2}"#);
    assert_fresh(&second, 200);
    filed(&server);
    assert_eq!(
        gauge(&server, "walletd_history_answer_generations"),
        2,
        "the second answer, a quarter-window later, starts a generation"
    );

    // Past the first answer's window: the next filing's checkpoint drops its generation.
    std::thread::sleep(
        (retention + std::time::Duration::from_millis(500)).saturating_sub(started.elapsed()),
    );
    let third = server.post_idempotent(&path, &operator.token, &third_key, r#"{"amount": 3}"#);
    assert_fresh(&third, 200);
    let rerun = server.post_idempotent(&path, &operator.token, &first_key, r#"{"amount": 1}"#);
    assert_fresh(&rerun, 200);
    assert_eq!(filed(&server), 4);
    assert_eq!(
        gauge(&server, "walletd_history_answer_generations"),
        2,
        "the first generation is dropped, the third's answers started another"
    );

    server.kill_hard();
    server.restart();
    // The second answer expires a quarter-window and half a second after the window's start.
    assert!(
        started.elapsed() < retention + retention / 8,
        "the restart took so long that the second answer may have expired too: {:?}",
        started.elapsed()
    );
    assert_all_replay(
        &server,
        &path,
        &operator.token,
        &[
            (&second_key, &second, r#"{"amount": 2}"#),
            (&third_key, &third, r#"{"amount": 3}"#),
            (&first_key, &rerun, r#"{"amount": 1}"#),
        ],
    );
    assert_eq!(
        balance(&server, &customer.token, customer.wallet_id),
        "7.00"
    );
    assert_eq!(filed(&server), 4, "nothing ran twice");
    assert_eq!(gauge(&server, "walletd_history_answer_generations"), 2);
}

/// Issue 16, item 6: the fingerprint is of a canonical encoding with normalized amounts, so
/// `100.5` and `100.50` are one request (under the `Debug` text they were two, and the retry was
/// 422 `idempotency_key_reused`).
#[test]
fn issue_16_an_amount_with_a_trailing_zero_is_the_same_request() {
    let f = fixture();
    let customer = f.server.register_customer();
    let path = format!("/v1/wallets/{}/deposit", customer.wallet_id);
    let key = key();
    let first = f
        .server
        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 100.5}"#);
    assert_fresh(&first, 200);
    let again = f
        .server
        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 100.50}"#);
    assert_replay_of(&again, &first);
    let other = f
        .server
        .post_idempotent(&path, &f.operator.token, &key, r#"{"amount": 100.05}"#);
    assert_eq!(other.status, 422, "{}", other.text());
    assert_eq!(
        transactions(&f.server, &customer.token, customer.wallet_id),
        1
    );
}
