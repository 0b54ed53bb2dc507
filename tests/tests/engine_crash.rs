//! Crash drill of the engine with real processes and SIGKILL (ARCHITECTURE.md invariants 1, 4, 5
//! and 6): a child (`engine_crash_child`) opens the engine with 4 shards and moves money between
//! 16 customer wallets from 32 tasks, mostly by cross-shard transfers, printing `TRY` before and
//! `ACK`/`REJ` after each command (see `walletd_tests::engine_drill`). The parent SIGKILLs it at a
//! seeded moment, then opens the same directory in-process and checks:
//!
//! - (a) every invariant of every shard, and per currency all entries of all shards sum to zero;
//! - (b) no cross-shard transfer is left `reserved`: recovery finished every one;
//! - (c) every `ACK`ed operation is in the ledger, no rejected one is, and none appears that the
//!   child never tried. Each operation's id is the description of every transaction it posts, so
//!   the parent finds each operation's legs and checks it posted exactly its legs (both sides of a
//!   transfer, across shards) or nothing. Each wallet's balance equals the sum of what the landed
//!   operations did to it, and the total of customer balances lies within the acknowledged total
//!   minus the in-flight withdrawals and plus the in-flight deposits. An operation in flight at a
//!   kill may land or not, but once a recovery decided, later recoveries agree;
//! - idempotency across crashes: half the operations run under an idempotency key. The answer an
//!   `ACK` carries names the transaction the ledger holds for that operation. Then the parent
//!   retries, under the same key, every keyed operation that was in flight at the kill and a
//!   sample of the acknowledged and rejected ones: a landed or answered one must be answered
//!   from the table (`replayed`, same bytes; for in-flight ones, naming the ledger's
//!   transaction), one that did not land must run now, exactly once;
//! - (d) the state digest is the same after a second reopen (replay is deterministic), and the
//!   second open finds nothing left to finish;
//! - (e) then the next round restarts the child on the same directory: recovery after recovery.
//!
//! Some rounds run two children before the parent looks, the second killed early (while it
//! replays the log and finishes the transfers the first left reserved), so a recovery is itself
//! interrupted. Kill moments are drawn from one seed, printed; rerun a failure with
//! `ENGINE_CRASH_SEED=<seed>`, soak with `ENGINE_CRASH_ROUNDS=<n>` (default 30).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::collections::{BTreeMap, HashMap};
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::runtime::clock::SystemClock;
use engine::runtime::{Engine, RecoveryReport};
use rust_decimal::Decimal;
use walletd_tests::crash::XorShift;
use walletd_tests::engine_drill::{
    command, config, idempotency_key, parse_line, renderer, Kind, Line, Op,
};

const ROUNDS: u64 = 30;
const SHARDS: u32 = 4;
/// Most `ACK` lines the parent waits for before the kill.
const ACKS_BEFORE_KILL_MAX: u64 = 400;
/// Longest pause between the chosen `ACK` and the kill.
const KILL_DELAY_US_MAX: u64 = 3_000;
/// Longest pause after spawning, for kills that do not wait for traffic: long enough to land
/// anywhere from process start through recovery to the first commands.
const EARLY_KILL_DELAY_US_MAX: u64 = 150_000;
/// How long the parent waits for one line from the child.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_SEED: u64 = 0x656E_6769_6E65_2121;
/// Most acknowledged keyed operations of a round the parent retries (all in-flight keyed ones
/// and all rejected keyed ones are retried).
const ACKED_RETRIES_MAX: usize = 64;

#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after spawning plus a pause: the child may still be recovering.
    Early { delay_us: u64 },
    /// Once `acks` ACK lines arrived, plus a pause.
    AfterAcks { acks: u64, delay_us: u64 },
}

/// The children of one round, each killed at its point, before the parent checks.
fn draw_plan(seed: u64, rounds: u64) -> Vec<Vec<KillPoint>> {
    let mut rng = XorShift::new(seed);
    let traffic = |rng: &mut XorShift| KillPoint::AfterAcks {
        acks: rng.below(ACKS_BEFORE_KILL_MAX + 1),
        delay_us: rng.below(KILL_DELAY_US_MAX + 1),
    };
    let early = |rng: &mut XorShift| KillPoint::Early {
        delay_us: rng.below(EARLY_KILL_DELAY_US_MAX + 1),
    };
    (0..rounds)
        .map(|_| match rng.below(100) {
            // A recovery interrupted by a second kill.
            0..20 => vec![traffic(&mut rng), early(&mut rng)],
            20..32 => vec![early(&mut rng)],
            _ => vec![traffic(&mut rng)],
        })
        .collect()
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum State {
    /// `TRY` seen, no answer: in flight when the child died.
    Tried,
    Acked,
    Rejected,
}

struct Tracked {
    op: Op,
    state: State,
    /// What the last verification found: whether the operation is in the ledger.
    landed: Option<bool>,
    /// The answer of an `ACK` (`-` when unkeyed) or the code of a `REJ`.
    answer: Option<String>,
    /// The round whose children tried it.
    round: usize,
}

#[derive(Default)]
struct Model {
    ops: HashMap<String, Tracked>,
    /// Owner → wallet, from the children's `WALLET` lines; must never change.
    wallets: BTreeMap<u64, u64>,
}

#[derive(Default)]
struct Totals {
    kills: u64,
    early_kills: u64,
    children: u64,
    acks: u64,
    rejections: u64,
    in_flight_landed: u64,
    in_flight_lost: u64,
    transfers_finished_by_children: u64,
    transfers_finished_by_parent: u64,
    explicit_snapshots: u64,
    children_killed_before_ready: u64,
    records_replayed_max: u64,
    open_ms_max: u64,
    parent_opens_from_snapshot: u64,
    keyed_answers_checked: u64,
    retries_replayed: u64,
    retries_executed: u64,
}

#[test]
fn engine_keeps_every_acknowledged_operation_across_sigkill() {
    let seed = std::env::var("ENGINE_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let rounds = std::env::var("ENGINE_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS);
    let plan = draw_plan(seed, rounds);
    println!("engine_crash: seed {seed}, {rounds} rounds (rerun with ENGINE_CRASH_SEED={seed})");
    let started = Instant::now();
    let dir = tempfile::tempdir().expect("create a temp dir");
    let runtime = tokio::runtime::Builder::new_current_thread()
        .build()
        .expect("build a runtime");
    let mut model = Model::default();
    let mut totals = Totals::default();
    let mut run = 0u64;
    for (round, kills) in plan.iter().enumerate() {
        for &point in kills {
            run += 1;
            let context = format!("seed {seed}, round {round}, run {run}, {point:?}");
            let lines = run_and_kill(dir.path(), run, point, &context);
            absorb(&mut model, &mut totals, &lines, round, &context);
            totals.kills += 1;
            totals.early_kills += u64::from(matches!(point, KillPoint::Early { .. }));
        }
        let context = format!("seed {seed}, round {round} (after run {run})");
        verify(
            &runtime,
            dir.path(),
            &mut model,
            &mut totals,
            round,
            &context,
        );
    }
    let elapsed = started.elapsed();
    println!(
        "engine_crash: {} kills ({} early, {} before READY) of {} children in {:.1?}; {} ACKs and \
         {} rejections verified; of the operations in flight at a kill {} landed and {} did not; \
         recovery finished {} cross-shard transfers in children and {} in the parent; {} explicit \
         snapshots; {} of {} parent recoveries started from a snapshot; longest replay {} records, \
         slowest child open {} ms; {} checks of a keyed answer against the ledger; of the keyed retries {} \
         were answered from the table and {} ran",
        totals.kills,
        totals.early_kills,
        totals.children_killed_before_ready,
        totals.children,
        elapsed,
        totals.acks,
        totals.rejections,
        totals.in_flight_landed,
        totals.in_flight_lost,
        totals.transfers_finished_by_children,
        totals.transfers_finished_by_parent,
        totals.explicit_snapshots,
        totals.parent_opens_from_snapshot,
        plan.len(),
        totals.records_replayed_max,
        totals.open_ms_max,
        totals.keyed_answers_checked,
        totals.retries_replayed,
        totals.retries_executed,
    );
    assert!(totals.acks > 0, "the children acknowledged nothing");
}

/// Runs one child on `dir` until the kill point, SIGKILLs it, and returns every line it printed.
fn run_and_kill(dir: &Path, run: u64, point: KillPoint, context: &str) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_engine_crash_child"))
        .arg(dir)
        .arg(SHARDS.to_string())
        .arg(run.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn engine_crash_child");
    let stdout = child.stdout.take().expect("child stdout is piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut lines = Vec::new();
    let delay_us = match point {
        KillPoint::Early { delay_us } => delay_us,
        KillPoint::AfterAcks { acks, delay_us } => {
            let mut seen = 0;
            while seen < acks {
                match rx.recv_timeout(LINE_TIMEOUT) {
                    Ok(line) => {
                        assert!(!line.starts_with("ERR"), "{context}: child failed: {line}");
                        seen += u64::from(line.starts_with("ACK "));
                        lines.push(line);
                    }
                    Err(e) => panic!(
                        "{context}: child stopped talking ({e}); last lines {:?}",
                        lines.iter().rev().take(5).collect::<Vec<_>>()
                    ),
                }
            }
            delay_us
        }
    };
    std::thread::sleep(Duration::from_micros(delay_us));
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    reader.join().expect("the reader thread does not panic");
    // Lines written before the kill are still in the pipe: an ACK among them is an ACK.
    lines.extend(rx.try_iter());
    let errors: Vec<_> = lines.iter().filter(|l| l.starts_with("ERR")).collect();
    assert!(errors.is_empty(), "{context}: child failed: {errors:?}");
    assert_eq!(
        status.signal(),
        Some(9),
        "{context}: the child must die by SIGKILL, not exit ({status})"
    );
    lines
}

/// Folds one child's lines into the model.
fn absorb(model: &mut Model, totals: &mut Totals, lines: &[String], round: usize, context: &str) {
    totals.children += 1;
    let mut ready = false;
    for text in lines {
        let line =
            parse_line(text).unwrap_or_else(|| panic!("{context}: unparsable line {text:?}"));
        match line {
            Line::Open {
                records_replayed,
                transfers_completed,
                open_ms,
            } => {
                totals.transfers_finished_by_children += transfers_completed;
                totals.records_replayed_max = totals.records_replayed_max.max(records_replayed);
                totals.open_ms_max = totals.open_ms_max.max(open_ms);
            }
            Line::Wallet {
                owner_id,
                wallet_id,
            } => {
                let known = *model.wallets.entry(owner_id).or_insert(wallet_id);
                assert_eq!(
                    known, wallet_id,
                    "{context}: owner {owner_id}'s wallet changed from {known} to {wallet_id}"
                );
            }
            Line::Ready => ready = true,
            Line::Try(op) => {
                let previous = model.ops.insert(
                    op.id.clone(),
                    Tracked {
                        op,
                        state: State::Tried,
                        landed: None,
                        answer: None,
                        round,
                    },
                );
                assert!(previous.is_none(), "{context}: operation id reused: {text}");
            }
            Line::Ack(op, answer) | Line::Rej(op, answer) => {
                let acked = text.starts_with("ACK ");
                let tracked = model
                    .ops
                    .get_mut(&op.id)
                    .unwrap_or_else(|| panic!("{context}: answer without TRY: {text}"));
                assert_eq!(tracked.op, op, "{context}: answer differs from its TRY");
                assert_eq!(
                    tracked.state,
                    State::Tried,
                    "{context}: answered twice: {text}"
                );
                assert_eq!(
                    answer == "-",
                    acked && !op.keyed,
                    "{context}: the answer does not fit the operation: {text}"
                );
                tracked.answer = Some(answer);
                tracked.state = if acked {
                    totals.acks += 1;
                    State::Acked
                } else {
                    totals.rejections += 1;
                    State::Rejected
                };
            }
            Line::Snap(_) => totals.explicit_snapshots += 1,
            Line::Err(message) => panic!("{context}: child failed: {message}"),
        }
    }
    totals.children_killed_before_ready += u64::from(!ready);
}

/// One customer-wallet transaction as the ledger has it.
struct Posted {
    wallet_id: u64,
    uuid: String,
    description: Option<String>,
    signed_amount: Decimal,
    status: &'static str,
}

struct Scan {
    posted: Vec<Posted>,
    /// Customer wallets and their balances.
    balances: BTreeMap<u64, Decimal>,
}

async fn scan(engine: &Engine) -> Scan {
    let shards = engine
        .read_all(|s| {
            let mut posted = Vec::new();
            let mut balances = Vec::new();
            for wallet in s.wallets().filter(|w| !w.is_system()) {
                balances.push((wallet.id().0, wallet.balance()));
                // History is read through the store: the shards keep hot state only.
                s.for_each_transaction(wallet, |transaction| {
                    let view = engine::ledger::view::TransactionView::of(wallet, transaction);
                    posted.push(Posted {
                        wallet_id: wallet.id().0,
                        uuid: view.uuid.to_string(),
                        description: view.description,
                        signed_amount: view.direction.signed(view.amount),
                        status: view.status.as_str(),
                    });
                    true
                })
                .expect("read the wallet's history");
            }
            (posted, balances)
        })
        .await
        .expect("read every shard");
    let mut result = Scan {
        posted: Vec::new(),
        balances: BTreeMap::new(),
    };
    for (posted, balances) in shards {
        result.posted.extend(posted);
        result.balances.extend(balances);
    }
    result
}

fn open(dir: &Path, context: &str) -> (Engine, RecoveryReport) {
    Engine::open(config(dir, SHARDS), Arc::new(SystemClock), renderer())
        .unwrap_or_else(|e| panic!("{context}: recovery failed: {e}"))
}

/// Opens the directory in-process and checks (a) to (d) of the module docs.
fn verify(
    runtime: &tokio::runtime::Runtime,
    dir: &Path,
    model: &mut Model,
    totals: &mut Totals,
    round: usize,
    context: &str,
) {
    let (engine, report) = open(dir, context);
    totals.transfers_finished_by_parent += report.transfers_completed as u64;
    totals.parent_opens_from_snapshot += u64::from(report.snapshot_lsn.is_some());
    let digest = runtime.block_on(async {
        // (a) Double entry and every shard invariant.
        if let Err(violation) = engine.check_invariants().await {
            panic!("{context}: invariant broken after recovery: {violation}");
        }
        // (b) Recovery finished every cross-shard transfer.
        let pending: Vec<_> = engine
            .read_all(|s| s.pending_outgoing_transfers())
            .await
            .expect("read every shard")
            .into_iter()
            .flatten()
            .collect();
        assert!(
            pending.is_empty(),
            "{context}: transfers left reserved after recovery: {pending:?}"
        );
        // (c) The ledger against what the children were told.
        let scan = scan(&engine).await;
        let source_uuids = check_ledger(model, totals, &scan, context);
        retry_keyed(&engine, model, totals, &source_uuids, round, context).await;
        if let Err(violation) = engine.check_invariants().await {
            panic!("{context}: invariant broken after the retries: {violation}");
        }
        // The hot state is what a replay rebuilds: what memory holds between filings is timing.
        engine.evict_filed().await.expect("evict what is filed");
        engine
            .read_all(|s| s.state_digest().to_hex())
            .await
            .expect("read every shard")
    });
    engine.shutdown().expect("shut the engine down");

    // (d) Deterministic replay, and a recovery that finds nothing left to do.
    let (engine, again) = open(dir, context);
    assert_eq!(
        again.transfers_completed, 0,
        "{context}: the second open found transfers to finish"
    );
    let (digest_again, invariants) = runtime.block_on(async {
        engine.evict_filed().await.expect("evict what is filed");
        (
            engine
                .read_all(|s| s.state_digest().to_hex())
                .await
                .expect("read every shard"),
            engine.check_invariants().await,
        )
    });
    assert_eq!(
        digest_again, digest,
        "{context}: reopening rebuilt a different state ({report:?} then {again:?})"
    );
    if let Err(violation) = invariants {
        panic!("{context}: invariant broken after the second open: {violation}");
    }
    engine.shutdown().expect("shut the engine down");
}

/// (c): every operation in the ledger posted exactly its legs, every acknowledged one is there,
/// balances are what the landed operations make them, keyed answers name the ledger's
/// transactions. Returns, per landed operation, the uuid of its transaction on its source wallet.
fn check_ledger(
    model: &mut Model,
    totals: &mut Totals,
    scan: &Scan,
    context: &str,
) -> HashMap<String, String> {
    // The legs of each operation, by wallet.
    let mut found: HashMap<&str, BTreeMap<u64, Decimal>> = HashMap::new();
    let mut source_uuids: HashMap<String, String> = HashMap::new();
    for posted in &scan.posted {
        let Some(id) = posted.description.as_deref() else {
            panic!(
                "{context}: wallet {} has a transaction no drill operation posted",
                posted.wallet_id
            );
        };
        assert_eq!(
            posted.status, "completed",
            "{context}: operation {id} has a {} transaction",
            posted.status
        );
        *found
            .entry(id)
            .or_default()
            .entry(posted.wallet_id)
            .or_default() += posted.signed_amount;
        if model
            .ops
            .get(id)
            .is_some_and(|t| t.op.source == posted.wallet_id)
        {
            let previous = source_uuids.insert(id.to_string(), posted.uuid.clone());
            assert!(
                previous.is_none(),
                "{context}: operation {id} posted twice on its source wallet"
            );
        }
    }
    for (id, legs) in &found {
        let tracked = model
            .ops
            .get(*id)
            .unwrap_or_else(|| panic!("{context}: the ledger has operation {id} no child tried"));
        assert_ne!(
            tracked.state,
            State::Rejected,
            "{context}: rejected operation {id} is in the ledger: {legs:?}"
        );
        let expected: BTreeMap<u64, Decimal> = tracked.op.effects().into_iter().collect();
        assert_eq!(
            legs, &expected,
            "{context}: operation {:?} posted {legs:?}, not all of its legs",
            tracked.op
        );
        if tracked.state == State::Acked && tracked.op.keyed {
            let expected = tracked.op.accepted_answer(&source_uuids[*id]);
            assert_eq!(
                tracked.answer.as_deref(),
                Some(expected.as_str()),
                "{context}: operation {id} was answered with another transaction than the \
                 ledger holds"
            );
            totals.keyed_answers_checked += 1;
        }
    }

    // The bound on the total the brief asks for, before resolving this round's in-flight ones:
    // settled = what was acknowledged or found landed earlier; in flight = the rest of the tried.
    let mut settled = Decimal::ZERO;
    let (mut in_flight_deposits, mut in_flight_withdrawals) = (Decimal::ZERO, Decimal::ZERO);
    for tracked in model.ops.values() {
        let net = || {
            tracked
                .op
                .effects()
                .iter()
                .map(|(_, a)| *a)
                .sum::<Decimal>()
        };
        match (tracked.state, tracked.landed) {
            (State::Acked, _) | (State::Tried, Some(true)) => settled += net(),
            (State::Tried, None) => match tracked.op.kind {
                Kind::Deposit => in_flight_deposits += tracked.op.amount,
                Kind::Withdraw => in_flight_withdrawals += tracked.op.amount,
                Kind::Transfer => {}
            },
            (State::Rejected, _) | (State::Tried, Some(false)) => {}
        }
    }
    let total: Decimal = scan.balances.values().sum();
    assert!(
        settled - in_flight_withdrawals <= total && total <= settled + in_flight_deposits,
        "{context}: customer balances total {total}, outside [{}, {}]",
        settled - in_flight_withdrawals,
        settled + in_flight_deposits
    );

    // Resolve every operation: acknowledged ones must be there; an earlier verdict must hold.
    let mut expected_balances: BTreeMap<u64, Decimal> = BTreeMap::new();
    for (id, tracked) in &mut model.ops {
        let landed = found.contains_key(id.as_str());
        if tracked.state == State::Acked {
            assert!(
                landed,
                "{context}: acknowledged operation {:?} is not in the ledger",
                tracked.op
            );
        }
        if let Some(before) = tracked.landed {
            assert_eq!(
                before,
                landed,
                "{context}: operation {:?} was {} at the previous recovery and is {} now",
                tracked.op,
                if before { "in the ledger" } else { "absent" },
                if landed { "in the ledger" } else { "absent" },
            );
        } else if tracked.state == State::Tried {
            if landed {
                totals.in_flight_landed += 1;
            } else {
                totals.in_flight_lost += 1;
            }
        }
        tracked.landed = Some(landed);
        if landed {
            for (wallet_id, amount) in tracked.op.effects() {
                *expected_balances.entry(wallet_id).or_default() += amount;
            }
        }
    }
    for (wallet_id, balance) in &scan.balances {
        let expected = expected_balances.remove(wallet_id).unwrap_or_default();
        assert_eq!(
            *balance, expected,
            "{context}: wallet {wallet_id} holds {balance}, the landed operations make {expected}"
        );
    }
    assert!(
        expected_balances.is_empty(),
        "{context}: operations landed on wallets the ledger does not have: {expected_balances:?}"
    );
    let known: Vec<u64> = model.wallets.values().copied().collect();
    for wallet_id in known {
        assert!(
            scan.balances.contains_key(&wallet_id),
            "{context}: wallet {wallet_id} a child reported is gone"
        );
    }
    source_uuids
}

/// Retries this round's keyed operations under their keys: every in-flight one, every rejected
/// one, and a sample of the acknowledged ones. Updates the model with what ran now.
async fn retry_keyed(
    engine: &Engine,
    model: &mut Model,
    totals: &mut Totals,
    source_uuids: &HashMap<String, String>,
    round: usize,
    context: &str,
) {
    let mut ids: Vec<String> = model
        .ops
        .iter()
        .filter(|(_, t)| t.round == round && t.op.keyed)
        .map(|(id, _)| id.clone())
        .collect();
    ids.sort();
    let mut acked_retried = 0;
    for id in ids {
        let tracked = model.ops.get_mut(&id).expect("listed above");
        if tracked.state == State::Acked {
            if acked_retried == ACKED_RETRIES_MAX {
                continue;
            }
            acked_retried += 1;
        }
        let reply = engine
            .execute_idempotent(command(&tracked.op), idempotency_key(&tracked.op))
            .await
            .unwrap_or_else(|e| panic!("{context}: retrying {:?} failed: {e}", tracked.op));
        let answer = String::from_utf8_lossy(&reply.response).into_owned();
        let landed = tracked.landed == Some(true);
        match tracked.state {
            State::Acked | State::Rejected => {
                let first = match tracked.state {
                    State::Rejected => format!("err:{}", tracked.answer.as_deref().unwrap_or("")),
                    _ => tracked.answer.clone().unwrap_or_default(),
                };
                assert!(
                    reply.replayed && answer == first,
                    "{context}: retrying answered {:?} got {answer:?} (replayed: {}), first \
                     answer {first:?}",
                    tracked.op,
                    reply.replayed
                );
                totals.retries_replayed += 1;
            }
            State::Tried if landed => {
                let expected = tracked.op.accepted_answer(&source_uuids[&id]);
                assert!(
                    reply.replayed && answer == expected,
                    "{context}: retrying {:?}, which landed before the kill, got {answer:?} \
                     (replayed: {}), not {expected:?} from the table",
                    tracked.op,
                    reply.replayed
                );
                tracked.state = State::Acked;
                tracked.answer = Some(answer);
                totals.retries_replayed += 1;
            }
            State::Tried => {
                // An operation that moved no money may still have a durable answer: a
                // rejection the kill kept the child from printing (rejections are answers and
                // replay too). A replayed *success* for it, though, would be a lost write.
                assert!(
                    !reply.replayed || answer.starts_with("err:"),
                    "{context}: retrying {:?}, which never landed, was answered from the \
                     table with a success: {answer:?}",
                    tracked.op
                );
                if let Some(code) = answer.strip_prefix("err:") {
                    tracked.state = State::Rejected;
                    tracked.answer = Some(code.to_string());
                } else {
                    tracked.state = State::Acked;
                    tracked.answer = Some(answer);
                    tracked.landed = Some(true);
                }
                totals.retries_executed += 1;
            }
        }
    }
}
