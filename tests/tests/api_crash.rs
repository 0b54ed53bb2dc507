//! Crash drill over HTTP: client threads deposit into and transfer between a set of customer
//! wallets, recording every acknowledged (2xx) operation; the server is SIGKILLed mid-load after a
//! seeded random number of acknowledgements; after a restart on the same data dir:
//!
//! - every acknowledged operation is applied: its transaction is in the wallet's history;
//! - the balances are exactly "initial + acknowledged + some subset of the operations that were in
//!   flight at the kill" (at most one per thread, so every subset is tried): a transfer is never
//!   half applied and refused operations (422) never applied, and total money equals the initial
//!   funds plus the deposits applied;
//! - every wallet's ledger verifies (hash chain, cached balance);
//! - after a graceful stop, `walletd replay --verify` rebuilds the same state and prints
//!   "verified".
//!
//! The seed is printed; rerun with `WALLETD_API_CRASH_SEED=<seed>` (thread interleaving still
//! varies from run to run).

use std::collections::{HashMap, HashSet};
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{SystemTime, UNIX_EPOCH};

use serde_json::Value;
use walletd_tests::acks::AckCount;
use walletd_tests::crash::XorShift;
use walletd_tests::http;
use walletd_tests::server::{Options, Server, PLATFORM_BUSINESS_ID};

const THREADS: usize = 8;
/// Shard actors: wallets spread over them, so most transfers take the cross-shard path.
const SHARDS: u32 = 4;
const WALLETS: usize = 6;
/// Cents each wallet starts with (acknowledged before the load).
const INITIAL_CENTS: i64 = 100_000;

#[derive(Debug, Clone, Copy)]
enum Op {
    Deposit { wallet: usize, cents: i64 },
    Transfer { from: usize, to: usize, cents: i64 },
}

impl Op {
    /// The change this operation makes to each wallet's balance, in cents.
    fn effect(self) -> Vec<(usize, i64)> {
        match self {
            Op::Deposit { wallet, cents } => vec![(wallet, cents)],
            Op::Transfer { from, to, cents } => vec![(from, -cents), (to, cents)],
        }
    }

    fn deposited(self) -> i64 {
        match self {
            Op::Deposit { cents, .. } => cents,
            Op::Transfer { .. } => 0,
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    /// Acknowledged operations with their transaction uuid and the wallet that holds it.
    acked: Vec<(Op, String, usize)>,
    /// Refused with a 4xx: must not be applied.
    refused: Vec<Op>,
    /// No answer (the kill): may or may not be applied.
    in_flight: Vec<Op>,
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Exact cents of a JSON number's text at scale 2 ("123.45", "-0.50", "7").
fn cents(text: &str) -> i64 {
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    let fraction = format!("{fraction:0<2}");
    assert!(fraction.len() == 2, "more than 2 decimals in {text}");
    let value = whole.parse::<i64>().expect("whole part") * 100
        + fraction.parse::<i64>().expect("fraction");
    if negative {
        -value
    } else {
        value
    }
}

/// The exact balance of a wallet, read from the raw JSON text.
fn balance_cents(server: &Server, token: &str, wallet: u64) -> i64 {
    let (text, _) = server.balance(token, wallet);
    let start = text.find(r#""balance":"#).expect("balance") + r#""balance":"#.len();
    let end = start + text[start..].find([',', '}']).expect("end of balance");
    cents(&text[start..end])
}

/// Every transaction uuid of a wallet (all pages).
fn transaction_uuids(server: &Server, token: &str, wallet: u64) -> HashSet<String> {
    let mut uuids = HashSet::new();
    for page in 1.. {
        let body = server.get_ok(
            &format!("/v1/wallets/{wallet}/transactions?per_page=100&page={page}"),
            token,
        );
        let records = body["data"]["data"].as_array().expect("records").clone();
        if records.is_empty() {
            break;
        }
        uuids.extend(
            records
                .iter()
                .map(|r| r["uuid"].as_str().expect("uuid").to_owned()),
        );
    }
    uuids
}

fn seed() -> u64 {
    match std::env::var("WALLETD_API_CRASH_SEED") {
        Ok(text) => text.parse().expect("WALLETD_API_CRASH_SEED is a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

#[test]
fn acknowledged_operations_survive_a_sigkill_under_load() {
    let seed = seed();
    println!("api crash drill seed: {seed} (rerun with WALLETD_API_CRASH_SEED={seed})");
    let mut rng = XorShift::new(seed);
    let kill_after_acks = 50 + rng.below(250);
    println!("killing after {kill_after_acks} acknowledged operations");

    let mut server = Server::start_with(Options {
        shards: Some(SHARDS),
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    let wallets: Vec<u64> = (0..WALLETS)
        .map(|_| {
            let customer = server.register_customer();
            server.deposit(&operator.token, customer.wallet_id, &money(INITIAL_CENTS));
            customer.wallet_id
        })
        .collect();

    let log = Arc::new(Mutex::new(Log::default()));
    let acks = Arc::new(AckCount::default());
    let stop = Arc::new(AtomicBool::new(false));
    let unexpected = Arc::new(AtomicU64::new(0));
    let address = server.address();
    let workers: Vec<_> = (0..THREADS)
        .map(|thread| {
            let (log, acks, stop, unexpected) =
                (log.clone(), acks.clone(), stop.clone(), unexpected.clone());
            let token = operator.token.clone();
            let wallets = wallets.clone();
            let mut rng = XorShift::new(seed ^ (thread as u64 + 1).wrapping_mul(0x9E37_79B9));
            std::thread::spawn(move || {
                let authorization = format!("Bearer {token}");
                while !stop.load(Ordering::SeqCst) {
                    let cents = 1 + rng.below(5_000) as i64;
                    let a = rng.below(WALLETS as u64) as usize;
                    let b = (a + 1 + rng.below(WALLETS as u64 - 1) as usize) % WALLETS;
                    let (op, path, body, holder) = if rng.below(3) == 0 {
                        (
                            Op::Deposit { wallet: a, cents },
                            format!("/v1/wallets/{}/deposit", wallets[a]),
                            format!(r#"{{"amount": {}}}"#, money(cents)),
                            a,
                        )
                    } else {
                        // Large enough now and then to be refused for insufficient funds.
                        let cents = if rng.below(10) == 0 { cents * 100 } else { cents };
                        (
                            Op::Transfer { from: a, to: b, cents },
                            "/v1/transfers".to_owned(),
                            format!(
                                r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": {}, "currency_code": "YER"}}"#,
                                wallets[a],
                                wallets[b],
                                money(cents)
                            ),
                            a,
                        )
                    };
                    let response = http::send(
                        address,
                        "POST",
                        &path,
                        &[("Authorization", &authorization)],
                        Some(body.as_bytes()),
                    );
                    let mut log = log.lock().expect("log lock");
                    match response {
                        Ok(response) if (200..300).contains(&response.status) => {
                            let answer: Value = response.json();
                            let uuid = answer["data"]["uuid"].as_str().expect("uuid").to_owned();
                            log.acked.push((op, uuid, holder));
                            drop(log);
                            acks.add();
                        }
                        Ok(response) if response.status == 422 => log.refused.push(op),
                        Ok(response) => {
                            unexpected.fetch_add(1, Ordering::SeqCst);
                            eprintln!("unexpected answer {}: {}", response.status, response.text());
                            log.in_flight.push(op);
                            return;
                        }
                        Err(_) => {
                            // The kill: this one may or may not have been applied.
                            log.in_flight.push(op);
                            return;
                        }
                    }
                }
            })
        })
        .collect();

    acks.wait_for(kill_after_acks, || {
        format!("seed {seed}; server stderr:\n{}", server.stderr_text())
    });
    server.kill_hard();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().expect("a client thread panicked");
    }
    assert_eq!(
        unexpected.load(Ordering::SeqCst),
        0,
        "non-2xx, non-422 answers before the kill"
    );
    let log = Arc::try_unwrap(log)
        .expect("threads done")
        .into_inner()
        .expect("log");
    println!(
        "acked {}, refused {}, in flight at the kill {}",
        log.acked.len(),
        log.refused.len(),
        log.in_flight.len()
    );
    assert!(log.in_flight.len() <= THREADS);

    server.restart();
    let token = operator.token.clone();

    // Every acknowledged operation is in its wallet's history.
    let mut histories: HashMap<usize, HashSet<String>> = HashMap::new();
    for (index, wallet) in wallets.iter().enumerate() {
        histories.insert(index, transaction_uuids(&server, &token, *wallet));
    }
    for (op, uuid, holder) in &log.acked {
        assert!(
            histories[holder].contains(uuid),
            "acknowledged {op:?} ({uuid}) is missing after the crash (seed {seed})"
        );
    }

    // Balances: acknowledged effects plus exactly one subset of the in-flight operations.
    let mut acked_only = vec![INITIAL_CENTS; WALLETS];
    let mut deposits = INITIAL_CENTS * WALLETS as i64;
    for (op, _, _) in &log.acked {
        for (wallet, delta) in op.effect() {
            acked_only[wallet] += delta;
        }
        deposits += op.deposited();
    }
    let actual: Vec<i64> = wallets
        .iter()
        .map(|wallet| balance_cents(&server, &token, *wallet))
        .collect();
    let matching = (0u32..1 << log.in_flight.len()).find(|subset| {
        let mut expected = acked_only.clone();
        for (bit, op) in log.in_flight.iter().enumerate() {
            if subset & (1 << bit) != 0 {
                for (wallet, delta) in op.effect() {
                    expected[wallet] += delta;
                }
            }
        }
        expected == actual
    });
    let Some(subset) = matching else {
        panic!(
            "balances {actual:?} are not the acknowledged ones {acked_only:?} plus any subset of \
             the in-flight {:?} (seed {seed})",
            log.in_flight
        );
    };
    println!(
        "{} of the {} in-flight operations were applied",
        subset.count_ones(),
        log.in_flight.len()
    );
    let applied_deposits: i64 = log
        .in_flight
        .iter()
        .enumerate()
        .filter(|(bit, _)| subset & (1 << bit) != 0)
        .map(|(_, op)| op.deposited())
        .sum();
    assert_eq!(
        actual.iter().sum::<i64>(),
        deposits + applied_deposits,
        "total money is the deposits applied (seed {seed})"
    );
    assert!(
        actual.iter().all(|b| *b >= 0),
        "no negative balance: {actual:?}"
    );

    for wallet in &wallets {
        let report = server.get_ok(
            &format!("/v1/wallets/{wallet}/verify-integrity"),
            &auditor.token,
        );
        assert_eq!(report["data"]["valid"], Value::Bool(true), "{report}");
    }

    let status = server.stop();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM after the drill: {status:?}"
    );
    let (status, stdout, stderr) = server.run_tool(&["replay", "--verify"]);
    assert!(
        status.success() && stdout.contains("verified"),
        "walletd replay --verify: {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
}
