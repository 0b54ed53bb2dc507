//! Crash drill over HTTP with payments, refunds and payouts in flight (ARCHITECTURE.md
//! invariants 1, 4 and 5). A 4-shard walletd serves one merchant wallet and several payers, so
//! most payments and refunds take the cross-shard path; client threads pay (initiate, confirm),
//! refund part of their completed payments, and move payouts of the merchant wallet through
//! create (funds held), approve (by a second employee: four eyes), execute or cancel. The server
//! is SIGKILLed after a seeded random number of acknowledged steps; after a restart on the same
//! data dir:
//!
//! - every acknowledged step is there: a confirmed payment is completed (or refunded since), its
//!   refunded amount covers every acknowledged refund, a payout is in the state its last
//!   acknowledged step left it in (or the one its in-flight step leads to);
//! - no payment, refund or payout is half-moved: every wallet's balance *and* held balance equal
//!   "initial + acknowledged effects + one subset of the steps in flight at the kill" (at most one
//!   per thread, so every subset is tried), with fees read from the answers as exact decimals;
//! - every ledger verifies, and after a graceful stop `walletd replay --verify` (double entry per
//!   currency across shards, no move left between its steps) prints "verified".
//!
//! The seed is printed; rerun with `WALLETD_API_CRASH_COMMERCE_SEED=<seed>` (thread interleaving
//! still varies from run to run).

use std::collections::HashMap;
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use rust_decimal::Decimal;
use serde_json::Value;
use walletd_tests::crash::XorShift;
use walletd_tests::http::{self, Response};
use walletd_tests::server::{decimal, exact_json, Options, Server, PLATFORM_BUSINESS_ID};

/// Payer threads (one payer wallet each) plus one payout thread.
const PAYERS: usize = 5;
const SHARDS: u32 = 4;
/// What each payer starts with, and the merchant wallet, in cents.
const PAYER_CENTS: i64 = 200_000;
const MERCHANT_CENTS: i64 = 500_000;
/// Wallet index of the merchant in the balance vectors; payers are 1..=PAYERS.
const MERCHANT: usize = 0;

/// One acknowledged (or in-flight) step and what it does to (balance, held) of each wallet.
#[derive(Debug, Clone)]
enum Step {
    Initiate,
    /// Payer `payer` debited `amount`, the merchant credited `net`.
    Confirm {
        payment: String,
        payer: usize,
        amount: i64,
        net: i64,
    },
    /// Merchant debited, payer credited (fees are kept).
    Refund {
        payment: String,
        payer: usize,
        amount: i64,
    },
    /// The merchant's funds held.
    PayoutCreate {
        amount: i64,
    },
    PayoutApprove {
        payout: u64,
    },
    /// Held funds leave the merchant wallet.
    PayoutExecute {
        payout: u64,
        amount: i64,
    },
    /// Held funds freed.
    PayoutCancel {
        payout: u64,
        amount: i64,
    },
}

impl Step {
    /// (wallet, balance delta, held delta) in cents.
    fn effect(&self) -> Vec<(usize, i64, i64)> {
        match *self {
            Step::Initiate | Step::PayoutApprove { .. } => vec![],
            Step::Confirm {
                payer, amount, net, ..
            } => vec![(payer, -amount, 0), (MERCHANT, net, 0)],
            Step::Refund { payer, amount, .. } => vec![(MERCHANT, -amount, 0), (payer, amount, 0)],
            Step::PayoutCreate { amount } => vec![(MERCHANT, 0, amount)],
            Step::PayoutExecute { amount, .. } => vec![(MERCHANT, -amount, -amount)],
            Step::PayoutCancel { amount, .. } => vec![(MERCHANT, 0, -amount)],
        }
    }
}

#[derive(Debug, Default)]
struct Log {
    acked: Vec<Step>,
    /// No answer (the kill): may or may not be applied.
    in_flight: Vec<Step>,
    /// Payout id -> the status its last acknowledged step left.
    payout_status: HashMap<u64, &'static str>,
}

fn money(cents: i64) -> String {
    format!("{}.{:02}", cents / 100, cents % 100)
}

/// Cents of an exact decimal with at most 2 fraction digits.
fn cents_of(value: Decimal) -> i64 {
    let mut scaled = value;
    scaled.rescale(2);
    assert_eq!(scaled, value, "{value} has more than 2 decimals");
    i64::try_from(scaled.mantissa()).expect("cents fit in i64")
}

fn amount_cents(response: &Response, field: &str) -> i64 {
    cents_of(decimal(&exact_json(&response.body)["data"][field]))
}

fn seed() -> u64 {
    match std::env::var("WALLETD_API_CRASH_COMMERCE_SEED") {
        Ok(text) => text
            .parse()
            .expect("WALLETD_API_CRASH_COMMERCE_SEED is a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// What a thread saw of one request.
enum Answer {
    Ok(Response),
    /// A 409/422 refusal: nothing changed.
    Refused,
    /// Anything else: the thread stops.
    Unexpected,
    /// No answer: the kill.
    Lost,
}

struct Client {
    address: SocketAddr,
    log: Arc<Mutex<Log>>,
    acks: Arc<(Mutex<u64>, Condvar)>,
    unexpected: Arc<AtomicU64>,
}

impl Client {
    fn post(&self, token: &str, path: &str, body: &str) -> Answer {
        let authorization = format!("Bearer {token}");
        match http::send(
            self.address,
            "POST",
            path,
            &[("Authorization", &authorization)],
            Some(body.as_bytes()),
        ) {
            Ok(response) if (200..300).contains(&response.status) => Answer::Ok(response),
            Ok(response) if matches!(response.status, 409 | 422) => Answer::Refused,
            Ok(response) => {
                self.unexpected.fetch_add(1, Ordering::SeqCst);
                eprintln!(
                    "unexpected answer {} to {path}: {}",
                    response.status,
                    response.text()
                );
                Answer::Unexpected
            }
            Err(_) => Answer::Lost,
        }
    }

    /// Sends one step; records it as acknowledged or in flight. Returns the answer when the
    /// step was acknowledged, `Err(true)` when the thread must stop, `Err(false)` when refused.
    fn step(
        &self,
        token: &str,
        path: &str,
        body: &str,
        step: impl FnOnce(&Response) -> Step,
        pending: Step,
    ) -> Result<Response, bool> {
        match self.post(token, path, body) {
            Answer::Ok(response) => {
                let acked = step(&response);
                let mut log = self.log.lock().expect("log lock");
                match &acked {
                    Step::PayoutCreate { .. } => {
                        let id = response.json()["data"]["id"].as_u64().expect("payout id");
                        log.payout_status.insert(id, "pending");
                    }
                    Step::PayoutApprove { payout } => {
                        log.payout_status.insert(*payout, "approved");
                    }
                    Step::PayoutExecute { payout, .. } => {
                        log.payout_status.insert(*payout, "executed");
                    }
                    Step::PayoutCancel { payout, .. } => {
                        log.payout_status.insert(*payout, "cancelled");
                    }
                    _ => {}
                }
                log.acked.push(acked);
                drop(log);
                let (count, changed) = &*self.acks;
                *count.lock().expect("ack lock") += 1;
                changed.notify_all();
                Ok(response)
            }
            Answer::Refused => Err(false),
            Answer::Unexpected | Answer::Lost => {
                self.log.lock().expect("log lock").in_flight.push(pending);
                Err(true)
            }
        }
    }
}

struct Payer {
    index: usize,
    wallet: u64,
    token: String,
}

/// A payer thread: pays the merchant, and refunds part of its completed payments.
fn pay_loop(
    client: &Client,
    stop: &AtomicBool,
    rng: &mut XorShift,
    payer: &Payer,
    merchant: u64,
    finance: &str,
) {
    // Completed payments: (uuid, amount, refunded so far), in cents.
    let mut completed: Vec<(String, i64, i64)> = Vec::new();
    while !stop.load(Ordering::SeqCst) {
        let refundable = completed
            .iter()
            .position(|(_, amount, refunded)| refunded < amount);
        if let (Some(index), 0) = (refundable, rng.below(4)) {
            let (uuid, amount, refunded) = completed[index].clone();
            let refund = 1 + rng.below((amount - refunded) as u64) as i64;
            let step = Step::Refund {
                payment: uuid.clone(),
                payer: payer.index,
                amount: refund,
            };
            match client.step(
                finance,
                &format!("/v1/payments/{uuid}/refund"),
                &format!(r#"{{"amount": {}}}"#, money(refund)),
                |_| step.clone(),
                step.clone(),
            ) {
                Ok(_) => completed[index].2 += refund,
                Err(true) => return,
                Err(false) => {}
            }
            continue;
        }
        // Now and then more than the payer has: refused at confirm, nothing moves.
        let amount = if rng.below(12) == 0 {
            PAYER_CENTS * 3
        } else {
            100 + rng.below(5_000) as i64
        };
        let initiated = match client.step(
            &payer.token,
            "/v1/payments/initiate",
            &format!(
                r#"{{"merchant_id": {merchant}, "wallet_id": {}, "amount": {}, "currency_code": "YER"}}"#,
                payer.wallet,
                money(amount)
            ),
            |_| Step::Initiate,
            Step::Initiate,
        ) {
            Ok(response) => response,
            Err(true) => return,
            Err(false) => continue,
        };
        let uuid = initiated.json()["data"]["transaction_id"]
            .as_str()
            .expect("transaction_id")
            .to_owned();
        let net = amount_cents(&initiated, "net_amount");
        assert_eq!(amount_cents(&initiated, "amount"), amount);
        let step = Step::Confirm {
            payment: uuid.clone(),
            payer: payer.index,
            amount,
            net,
        };
        match client.step(
            &payer.token,
            &format!("/v1/payments/{uuid}/confirm"),
            "",
            |_| step.clone(),
            step.clone(),
        ) {
            Ok(_) => completed.push((uuid, amount, 0)),
            Err(true) => return,
            Err(false) => {}
        }
    }
}

/// The payout thread: create (maker), approve (checker), then execute or cancel.
fn payout_loop(
    client: &Client,
    stop: &AtomicBool,
    rng: &mut XorShift,
    merchant_wallet: u64,
    maker: &str,
    checker: &str,
) {
    while !stop.load(Ordering::SeqCst) {
        let amount = 100 + rng.below(20_000) as i64;
        let created = match client.step(
            maker,
            "/v1/payouts",
            &format!(
                r#"{{"wallet_id": {merchant_wallet}, "amount": {}, "currency_code": "YER", "payout_method": "bank_transfer", "payout_destination": {{"iban": "YE00DRILL"}}}}"#,
                money(amount)
            ),
            |_| Step::PayoutCreate { amount },
            Step::PayoutCreate { amount },
        ) {
            Ok(response) => response,
            Err(true) => return,
            Err(false) => continue,
        };
        let payout = created.json()["data"]["id"].as_u64().expect("payout id");
        let approve = Step::PayoutApprove { payout };
        match client.step(
            checker,
            &format!("/v1/payouts/{payout}/approve"),
            r#"{"notes": "drill"}"#,
            |_| approve.clone(),
            approve.clone(),
        ) {
            Ok(_) => {}
            Err(true) => return,
            Err(false) => continue,
        }
        let (action, token, last) = if rng.below(5) == 0 {
            ("cancel", maker, Step::PayoutCancel { payout, amount })
        } else {
            ("execute", checker, Step::PayoutExecute { payout, amount })
        };
        if let Err(true) = client.step(
            token,
            &format!("/v1/payouts/{payout}/{action}"),
            "",
            |_| last.clone(),
            last.clone(),
        ) {
            return;
        }
    }
}

/// (balance, held) of a wallet in cents.
fn balances(server: &Server, token: &str, wallet: u64) -> (i64, i64) {
    let b = server.balances(token, wallet);
    (cents_of(b.balance), cents_of(b.held))
}

#[test]
fn acknowledged_payments_refunds_and_payouts_survive_a_sigkill() {
    let seed = seed();
    println!(
        "commerce crash drill seed: {seed} (rerun with WALLETD_API_CRASH_COMMERCE_SEED={seed})"
    );
    let mut rng = XorShift::new(seed);
    let kill_after_acks = 40 + rng.below(200);
    println!("killing after {kill_after_acks} acknowledged steps");

    let mut server = Server::start_with(Options {
        shards: Some(SHARDS),
        ..Options::default()
    });
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let merchant = server.create_business(true);
    let maker = server.create_employee(
        merchant,
        &["operator", "merchant", "finance", "merchant_finance"],
    );
    let checker = server.create_employee(
        merchant,
        &[
            "restricted_approver",
            "restricted_operator",
            "restricted_auditor",
        ],
    );
    let auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    let merchant_wallet = server.create_merchant_wallet(&maker.token, merchant, "YER")["id"]
        .as_u64()
        .expect("merchant wallet id");
    server.deposit(&maker.token, merchant_wallet, &money(MERCHANT_CENTS));
    let payers: Vec<Payer> = (1..=PAYERS)
        .map(|index| {
            let customer = server.register_customer();
            server.deposit(&operator.token, customer.wallet_id, &money(PAYER_CENTS));
            Payer {
                index,
                wallet: customer.wallet_id,
                token: customer.token,
            }
        })
        .collect();
    let cross_shard = payers
        .iter()
        .filter(|p| p.wallet % u64::from(SHARDS) != merchant_wallet % u64::from(SHARDS))
        .count();
    println!("{cross_shard} of {PAYERS} payers are on another shard than the merchant");

    let log = Arc::new(Mutex::new(Log::default()));
    let acks = Arc::new((Mutex::new(0u64), Condvar::new()));
    let stop = Arc::new(AtomicBool::new(false));
    let unexpected = Arc::new(AtomicU64::new(0));
    let client = |_: ()| Client {
        address: server.address(),
        log: log.clone(),
        acks: acks.clone(),
        unexpected: unexpected.clone(),
    };
    let mut workers = Vec::new();
    for payer in &payers {
        let client = client(());
        let stop = stop.clone();
        let payer = Payer {
            index: payer.index,
            wallet: payer.wallet,
            token: payer.token.clone(),
        };
        let finance = maker.token.clone();
        let mut rng = XorShift::new(seed ^ (payer.index as u64).wrapping_mul(0x9E37_79B9));
        workers.push(std::thread::spawn(move || {
            pay_loop(&client, &stop, &mut rng, &payer, merchant, &finance);
        }));
    }
    {
        let client = client(());
        let stop = stop.clone();
        let (maker, checker) = (maker.token.clone(), checker.token.clone());
        let mut rng = XorShift::new(seed ^ 0x005E_ED0F_BA11);
        workers.push(std::thread::spawn(move || {
            payout_loop(&client, &stop, &mut rng, merchant_wallet, &maker, &checker);
        }));
    }

    {
        let (count, changed) = &*acks;
        let mut acked = count.lock().expect("ack lock");
        while *acked < kill_after_acks {
            let (next, waited) = changed
                .wait_timeout(acked, Duration::from_secs(60))
                .expect("ack lock");
            acked = next;
            assert!(
                !waited.timed_out(),
                "no acknowledgement for 60 s after {} (seed {seed}); server stderr:\n{}",
                *acked,
                server.stderr_text()
            );
        }
    }
    server.kill_hard();
    stop.store(true, Ordering::SeqCst);
    for worker in workers {
        worker.join().expect("a client thread panicked");
    }
    assert_eq!(
        unexpected.load(Ordering::SeqCst),
        0,
        "answers other than 2xx, 409 and 422 before the kill (seed {seed})"
    );
    let log = Arc::try_unwrap(log)
        .expect("threads done")
        .into_inner()
        .expect("log");
    let count = |f: fn(&Step) -> bool| log.acked.iter().filter(|s| f(s)).count();
    println!(
        "acked {} steps ({} confirms, {} refunds, {} payout executions); in flight at the kill: {:?}",
        log.acked.len(),
        count(|s| matches!(s, Step::Confirm { .. })),
        count(|s| matches!(s, Step::Refund { .. })),
        count(|s| matches!(s, Step::PayoutExecute { .. })),
        log.in_flight
    );
    assert!(log.in_flight.len() <= PAYERS + 1);

    server.restart();

    // Balance and held of every wallet: acknowledged effects plus one subset of the in-flight.
    let wallets: Vec<(u64, &str)> = std::iter::once((merchant_wallet, maker.token.as_str()))
        .chain(payers.iter().map(|p| (p.wallet, p.token.as_str())))
        .collect();
    let mut acked_only: Vec<(i64, i64)> = std::iter::once((MERCHANT_CENTS, 0))
        .chain(std::iter::repeat_n((PAYER_CENTS, 0), PAYERS))
        .collect();
    for step in &log.acked {
        for (wallet, balance, held) in step.effect() {
            acked_only[wallet].0 += balance;
            acked_only[wallet].1 += held;
        }
    }
    let actual: Vec<(i64, i64)> = wallets
        .iter()
        .map(|(wallet, token)| balances(&server, token, *wallet))
        .collect();
    let matching = (0u32..1 << log.in_flight.len()).find(|subset| {
        let mut expected = acked_only.clone();
        for (bit, step) in log.in_flight.iter().enumerate() {
            if subset & (1 << bit) != 0 {
                for (wallet, balance, held) in step.effect() {
                    expected[wallet].0 += balance;
                    expected[wallet].1 += held;
                }
            }
        }
        expected == actual
    });
    let Some(subset) = matching else {
        panic!(
            "(balance, held) {actual:?} are not the acknowledged {acked_only:?} plus any subset \
             of the in-flight {:?}: something is lost or half-moved (seed {seed})",
            log.in_flight
        );
    };
    println!(
        "{} of the {} in-flight steps were applied",
        subset.count_ones(),
        log.in_flight.len()
    );
    assert!(
        actual
            .iter()
            .all(|(balance, held)| *held >= 0 && balance - held >= 0),
        "spendable never negative: {actual:?}"
    );

    // Every acknowledged confirm left its payment completed, and its refunds are all counted.
    let mut refunds: HashMap<&str, i64> = HashMap::new();
    let mut confirmed: HashMap<&str, usize> = HashMap::new();
    for step in &log.acked {
        match step {
            Step::Confirm { payment, payer, .. } => {
                confirmed.insert(payment, *payer);
            }
            Step::Refund {
                payment, amount, ..
            } => *refunds.entry(payment).or_default() += amount,
            _ => {}
        }
    }
    for (payment, payer) in &confirmed {
        let response = server.get(
            &format!("/v1/payments/{payment}/status"),
            Some(&payers[payer - 1].token),
        );
        assert_eq!(response.status, 200, "{}", response.text());
        let status = response.json()["data"]["status"].clone();
        assert!(
            ["completed", "partially_refunded", "refunded"]
                .iter()
                .any(|s| status == *s),
            "acknowledged confirm of {payment}: status {status} after the crash (seed {seed})"
        );
        let refunded = cents_of(decimal(
            &exact_json(&response.body)["data"]["refunded_amount"],
        ));
        let acked_refunds = refunds.get(payment).copied().unwrap_or(0);
        let in_flight_refund: i64 = log
            .in_flight
            .iter()
            .filter_map(|s| match s {
                Step::Refund {
                    payment: p, amount, ..
                } if p == payment => Some(*amount),
                _ => None,
            })
            .sum();
        assert!(
            refunded == acked_refunds || refunded == acked_refunds + in_flight_refund,
            "payment {payment}: refunded {refunded}, acknowledged {acked_refunds}, in flight \
             {in_flight_refund} (seed {seed})"
        );
    }

    // Every payout is where its last acknowledged step left it, or one in-flight step further.
    for (payout, status) in &log.payout_status {
        let now = server.get_ok(&format!("/v1/payouts/{payout}"), &maker.token)["data"]["status"]
            .as_str()
            .expect("status")
            .to_owned();
        let next = log.in_flight.iter().find_map(|s| match s {
            Step::PayoutApprove { payout: p } if p == payout => Some("approved"),
            Step::PayoutExecute { payout: p, .. } if p == payout => Some("executed"),
            Step::PayoutCancel { payout: p, .. } if p == payout => Some("cancelled"),
            _ => None,
        });
        assert!(
            now == *status || Some(now.as_str()) == next,
            "payout {payout}: {now} after the crash, acknowledged {status}, in flight {next:?} \
             (seed {seed})"
        );
    }

    for (wallet, _) in &wallets {
        // The merchant's auditor for its wallet, the platform's for customer wallets.
        let auditor_token = if *wallet == merchant_wallet {
            checker.token.as_str()
        } else {
            auditor.token.as_str()
        };
        let report = server.get_ok(
            &format!("/v1/wallets/{wallet}/verify-integrity"),
            auditor_token,
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
        "walletd replay --verify (seed {seed}): {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
}
