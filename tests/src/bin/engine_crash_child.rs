//! The process that `tests/engine_crash.rs` kills: it opens the engine on a data directory and
//! moves money between a fixed set of customer wallets from many tasks until it is SIGKILLed.
//!
//! Usage: `engine_crash_child DIR SHARDS RUN`
//!
//! `RUN` seeds the traffic and names this run's operations (`<run>.<task>.<counter>`), so it must
//! differ between runs on one directory. The lines it prints are described in
//! [`walletd_tests::engine_drill`]: `TRY` before each command, `ACK` or `REJ` once the engine
//! answered, each flushed before the task goes on. Half the operations run under an idempotency
//! key (`Engine::execute_idempotent`), half without (`Engine::execute`). It stops by itself after [`RUN_SECONDS_MAX`] or
//! when its stdout is gone, so a parent that dies does not leave it running.

use std::io::Write;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SystemClock;
use engine::runtime::{owner_shard, Engine, EngineError};
use engine::shard::command::CreateWallet;
use engine::{Command, Outcome, WalletId};
use rust_decimal::Decimal;
use walletd_tests::crash::XorShift;
use walletd_tests::engine_drill::{
    command, config, idempotency_key, renderer, yer, Kind, Op, TASKS, WALLETS,
};

/// A safety net: the parent kills the child long before this.
const RUN_SECONDS_MAX: u64 = 60;
/// Out of 100 operations: deposits, then withdrawals; the rest are transfers.
const DEPOSIT_PERCENT: u64 = 30;
const WITHDRAW_PERCENT: u64 = 15;
/// Out of 100 transfers, how many pick a target on another shard when one exists.
const CROSS_SHARD_PERCENT: u64 = 80;
/// Out of 100 operations, how many run under an idempotency key.
const KEYED_PERCENT: u64 = 50;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, shards, run] = args.as_slice() else {
        fail("usage: engine_crash_child DIR SHARDS RUN");
    };
    let dir = PathBuf::from(dir);
    let shards: u32 = shards
        .parse()
        .unwrap_or_else(|_| fail("SHARDS must be a number"));
    let run: u64 = run.parse().unwrap_or_else(|_| fail("RUN must be a number"));

    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .unwrap_or_else(|e| fail(&format!("build the runtime: {e}")));
    runtime.block_on(drive(dir, shards, run));
}

async fn drive(dir: PathBuf, shards: u32, run: u64) {
    let started = Instant::now();
    let (engine, report) = Engine::open(config(&dir, shards), Arc::new(SystemClock), renderer())
        .unwrap_or_else(|e| fail(&format!("open: {e}")));
    say(&format!(
        "OPEN {} {} {}",
        report.records_replayed,
        report.transfers_completed,
        started.elapsed().as_millis()
    ));

    let mut wallets = Vec::new();
    for owner_id in 1..=WALLETS {
        let wallet_id = find_or_create_wallet(&engine, owner_id).await;
        say(&format!("WALLET {owner_id} {}", wallet_id.0));
        wallets.push(wallet_id);
    }
    say("READY");

    let deadline = Instant::now() + Duration::from_secs(RUN_SECONDS_MAX);
    let wallets = Arc::new(wallets);
    let mut tasks = Vec::new();
    for task in 0..TASKS {
        let engine = engine.clone();
        let wallets = wallets.clone();
        tasks.push(tokio::spawn(async move {
            let mut rng = XorShift::new(run.wrapping_mul(1000).wrapping_add(task as u64));
            for counter in 0u64.. {
                if Instant::now() > deadline {
                    return;
                }
                let op = draw(
                    &engine,
                    &wallets,
                    &mut rng,
                    format!("{run}.{task}.{counter}"),
                );
                perform(&engine, &op).await;
                if counter % 64 == 63 {
                    tokio::task::yield_now().await;
                }
            }
        }));
    }
    // Explicit snapshots, on top of the automatic ones every few hundred records.
    let snapshots = {
        let engine = engine.clone();
        tokio::spawn(async move {
            let mut rng = XorShift::new(run ^ 0x5A5A_5A5A);
            while Instant::now() < deadline {
                tokio::time::sleep(Duration::from_millis(2 + rng.below(30))).await;
                match engine.snapshot().await {
                    Ok(lsn) => say(&format!("SNAP {lsn}")),
                    Err(EngineError::Unavailable(reason)) if reason.contains("already") => {}
                    Err(e) => fail(&format!("snapshot: {e}")),
                }
            }
        })
    };
    for task in tasks {
        if task.await.is_err() {
            fail("a traffic task panicked");
        }
    }
    let _ = snapshots.await;
    let _ = engine.shutdown();
}

/// The customer wallet of `owner_id`: the one an earlier run created, or a new one.
async fn find_or_create_wallet(engine: &Engine, owner_id: u64) -> WalletId {
    let shard = owner_shard(owner_id, engine.shard_count());
    let currency = yer();
    let existing = engine
        .read_shard(shard, move |s| {
            s.wallet_of_owner(OwnerType::Customer, owner_id, currency, WalletType::Primary)
        })
        .await
        .unwrap_or_else(|e| fail(&format!("look up wallet of owner {owner_id}: {e}")));
    if let Some(wallet_id) = existing {
        return wallet_id;
    }
    let create = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id,
        currency,
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: None,
    });
    match engine.execute(create).await {
        Ok(Outcome::Wallet(wallet)) => wallet.id,
        other => fail(&format!("create wallet of owner {owner_id}: {other:?}")),
    }
}

fn draw(engine: &Engine, wallets: &[WalletId], rng: &mut XorShift, id: String) -> Op {
    let pick = |rng: &mut XorShift| wallets[rng.below(wallets.len() as u64) as usize];
    let roll = rng.below(100);
    let (kind, source, target, cents) = if roll < DEPOSIT_PERCENT {
        let wallet = pick(rng);
        (Kind::Deposit, wallet, wallet, 1 + rng.below(50_000))
    } else if roll < DEPOSIT_PERCENT + WITHDRAW_PERCENT {
        let wallet = pick(rng);
        (Kind::Withdraw, wallet, wallet, 1 + rng.below(10_000))
    } else {
        let source = pick(rng);
        let cross = rng.below(100) < CROSS_SHARD_PERCENT;
        let source_shard = engine.shard_of_wallet(source);
        let candidates: Vec<WalletId> = wallets
            .iter()
            .copied()
            .filter(|w| *w != source && (engine.shard_of_wallet(*w) != source_shard) == cross)
            .collect();
        let target = if candidates.is_empty() {
            wallets
                .iter()
                .copied()
                .find(|w| *w != source)
                .unwrap_or(source)
        } else {
            candidates[rng.below(candidates.len() as u64) as usize]
        };
        (Kind::Transfer, source, target, 1 + rng.below(10_000))
    };
    Op {
        id,
        kind,
        source: source.0,
        target: target.0,
        amount: Decimal::new(cents as i64, 2),
        keyed: rng.below(100) < KEYED_PERCENT,
    }
}

async fn perform(engine: &Engine, op: &Op) {
    say(&format!("TRY {}", op.words()));
    if op.keyed {
        match engine
            .execute_idempotent(command(op), idempotency_key(op))
            .await
        {
            Ok(reply) if reply.replayed => fail(&format!("{}: a fresh key was replayed", op.id)),
            Ok(reply) => {
                let answer = String::from_utf8_lossy(&reply.response).into_owned();
                match answer.strip_prefix("err:") {
                    Some(code) => say(&format!("REJ {} {code}", op.words())),
                    None => say(&format!("ACK {} {answer}", op.words())),
                }
            }
            Err(e) => fail(&format!("{}: {e}", op.words())),
        }
        return;
    }
    match engine.execute(command(op)).await {
        Ok(_) => say(&format!("ACK {} -", op.words())),
        Err(EngineError::Rejected(rejection)) => {
            say(&format!("REJ {} {}", op.words(), rejection.code()));
        }
        Err(e) => fail(&format!("{}: {e}", op.words())),
    }
}

/// Prints one line and flushes it; exits quietly when the parent stopped listening.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(3);
    }
}

fn fail(message: &str) -> ! {
    say(&format!("ERR {message}"));
    std::process::exit(1);
}
