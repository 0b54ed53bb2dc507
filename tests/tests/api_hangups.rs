//! Issue 16, item 1: a client that hangs up never wedges its idempotency key.
//!
//! Under a deposit load, hundreds of keyed deposits are sent by clients that give up after a few
//! milliseconds and close the connection, most of them before the answer. Afterwards every key
//! is retried by a patient client, as a real one would: each must be answered (the stored answer
//! replayed, or the deposit run now), none may stay `409 request_in_progress`, and the balance
//! must show each deposit exactly once.
//!
//! The retry of a key whose first command is still running is answered 409, correctly; the
//! patient client retries it, within a deadline that only a wedged key exceeds.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use walletd_tests::server::{Server, PLATFORM_BUSINESS_ID};

/// Keyed deposits sent by impatient clients.
const KEYS: usize = 200;
/// Threads sending them.
const IMPATIENT_CLIENTS: usize = 24;
/// Threads keeping the server busy meanwhile.
const LOAD_CLIENTS: usize = 8;
/// How long an impatient client waits for its answer.
const GIVE_UP_AFTER: Duration = Duration::from_millis(2);
/// How long a key may stay in progress after everything else is answered.
const SETTLE_DEADLINE: Duration = Duration::from_secs(20);

/// Sends a keyed deposit and hangs up after [`GIVE_UP_AFTER`] (or once answered).
fn impatient_deposit(server: &Server, token: &str, wallet: u64, key: &str) {
    let Ok(mut stream) = TcpStream::connect(server.address()) else {
        return;
    };
    let body = r#"{"amount": 1}"#;
    let request = format!(
        "POST /v1/wallets/{wallet}/deposit HTTP/1.1\r\nHost: {}\r\nAuthorization: Bearer {token}\r\n\
         Idempotency-Key: {key}\r\nContent-Type: application/json\r\nContent-Length: {}\r\n\r\n{body}",
        server.address(),
        body.len()
    );
    let _ = stream.set_nodelay(true);
    if stream.write_all(request.as_bytes()).is_err() {
        return;
    }
    let _ = stream.set_read_timeout(Some(GIVE_UP_AFTER));
    let mut buffer = [0u8; 256];
    let _ = stream.read(&mut buffer);
    // Dropped here: the connection closes, mid-request for most keys.
}

#[test]
fn issue_16_clients_that_hang_up_never_wedge_their_keys() {
    let server = Server::start();
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let target = server.register_customer();
    let load = server.register_customer();
    let keys: Vec<String> = (0..KEYS)
        .map(|i| format!("hangup-{}-{i}", walletd_tests::server::unique()))
        .collect();
    let stop = AtomicBool::new(false);
    std::thread::scope(|scope| {
        for _ in 0..LOAD_CLIENTS {
            scope.spawn(|| {
                let path = format!("/v1/wallets/{}/deposit", load.wallet_id);
                while !stop.load(Ordering::Relaxed) {
                    let _ = server.try_request(
                        "POST",
                        &path,
                        Some(&operator.token),
                        &[],
                        Some(br#"{"amount": 1}"#),
                    );
                }
            });
        }
        let impatient: Vec<_> = keys
            .chunks(KEYS.div_ceil(IMPATIENT_CLIENTS))
            .map(|chunk| {
                let (server, token, wallet) = (&server, &operator.token, target.wallet_id);
                scope.spawn(move || {
                    for key in chunk {
                        impatient_deposit(server, token, wallet, key);
                    }
                })
            })
            .collect();
        for handle in impatient {
            handle.join().expect("impatient client");
        }
        stop.store(true, Ordering::Relaxed);
    });

    // A patient client retries every key.
    let path = format!("/v1/wallets/{}/deposit", target.wallet_id);
    let started = Instant::now();
    let mut fresh = 0usize;
    for key in &keys {
        loop {
            let answer = server.post_idempotent(&path, &operator.token, key, r#"{"amount": 1}"#);
            match answer.status {
                200 => {
                    if answer.header("idempotent-replayed").is_none() {
                        fresh += 1;
                    }
                    break;
                }
                409 => {
                    assert_eq!(answer.error_code(), "request_in_progress");
                    assert!(
                        started.elapsed() < SETTLE_DEADLINE,
                        "key {key} is still in progress {SETTLE_DEADLINE:?} after the load ended"
                    );
                    std::thread::yield_now();
                }
                other => panic!("key {key}: unexpected {other}: {}", answer.text()),
            }
        }
    }
    // Each deposit happened exactly once: the hung-up ones ran (their retry replayed), the
    // others ran at their retry.
    let balance = server.balances(&target.token, target.wallet_id);
    assert_eq!(
        balance.balance,
        rust_decimal::Decimal::from(KEYS as u64),
        "{fresh} deposits ran only at their retry"
    );
    let total = server.get_ok(
        &format!("/v1/wallets/{}/transactions", target.wallet_id),
        &target.token,
    )["data"]["total"]
        .as_u64();
    assert_eq!(total, Some(KEYS as u64));
}
