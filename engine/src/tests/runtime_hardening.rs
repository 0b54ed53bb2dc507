//! Issue 16, items 8 and 9 at run time: an encoding failure fails the command (or the snapshot)
//! before anything is appended (or kept), and a failed snapshot backs off.
//!
//! No value of the engine's types fails to encode with postcard, so these tests use the one
//! fault test builds add to the engine's encoder: bytes containing
//! `encode_fault_marker(what)` (here, in a deposit's description or a business name) fail as a
//! serialiser error would (`values::error::encode_versioned`). Release builds have no such check.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use rust_decimal::Decimal;

use crate::identity::directory::{Directory, DirectoryCommand};
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::runtime::clock::SeededClock;
use crate::runtime::journal::JournalEntry;
use crate::runtime::snapshot::{
    periodic_snapshot_due, snapshot_backoff_ms, SNAPSHOT_BACKOFF_BASE_MS, SNAPSHOT_BACKOFF_MAX_MS,
};
use crate::runtime::{Engine, EngineConfig, EngineError, Renderer};
use crate::shard::command::{CreateWallet, Details, MoneyMove, PlaceHold};
use crate::values::error::encode_fault_marker;
use crate::{Command, Currency, Outcome, Rejection, WalletId};

pub(super) struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        format!("{route}:{result:?}").into_bytes()
    }
}

pub(super) const START_MS: i64 = 1_700_000_000_000;

/// Writes the log a run would have left: one record per (shard, events).
pub(super) fn write_log(config: &EngineConfig, entries: Vec<(u32, Vec<crate::Event>)>) {
    let (log, _) = wal::Wal::open(config.wal_dir(), config.wal.clone()).unwrap();
    for (shard, events) in entries {
        let entry = JournalEntry {
            shard,
            events,
            directory: Vec::new(),
            idempotency: Vec::new(),
        };
        log.append(entry.encode().unwrap()).unwrap().wait().unwrap();
    }
    log.close().unwrap();
}

/// An idempotency key logged pending on `shard`, as the first step of a multi-step request logs
/// it (`move_uuid`: the move it names; `None` for a transfer batch over several records),
/// appended to the log in `config`; the key to retry it with.
pub(super) fn append_pending_key(
    config: &EngineConfig,
    shard: u32,
    move_uuid: Option<crate::Uuid>,
) -> crate::runtime::IdempotencyKey {
    use crate::runtime::journal::IdempotencyRecord;
    let key = crate::runtime::IdempotencyKey {
        caller: "customer:1".into(),
        key: "multi-step-1".into(),
        fingerprint: [5; 32],
        legacy: None,
        route: 40,
    };
    let pending = JournalEntry {
        shard,
        events: Vec::new(),
        directory: Vec::new(),
        idempotency: vec![IdempotencyRecord {
            caller: key.caller.clone(),
            key: key.key.clone(),
            fingerprint: key.fingerprint,
            at_ms: START_MS,
            route: key.route,
            response: None,
            transfer_uuid: move_uuid,
        }],
    };
    let (log, _) = wal::Wal::open(config.wal_dir(), config.wal.clone()).unwrap();
    log.append(pending.encode().unwrap())
        .unwrap()
        .wait()
        .unwrap();
    log.close().unwrap();
    key
}

pub(super) fn open(dir: &std::path::Path, clock: &Arc<SeededClock>) -> Engine {
    let mut config = EngineConfig::new(dir);
    config.snapshot_every_records = 0;
    Engine::open(config, clock.clone(), Arc::new(DebugRenderer))
        .unwrap()
        .0
}

pub(super) async fn wallet(engine: &Engine) -> WalletId {
    customer_wallet(engine, 1).await
}

/// The primary YER wallet of customer `owner_id` (business 1).
pub(super) async fn customer_wallet(engine: &Engine, owner_id: u64) -> WalletId {
    owned_wallet(engine, OwnerType::Customer, owner_id, 1).await
}
/// A primary YER wallet of `owner_type` `owner_id` in business `business_id`.
pub(super) async fn owned_wallet(
    engine: &Engine,
    owner_type: OwnerType,
    owner_id: u64,
    business_id: u64,
) -> WalletId {
    created_wallet(
        engine,
        create_wallet(owner_type, owner_id, (business_id, 0)),
    )
    .await
}

/// The command that creates a primary YER wallet of `owner_type` `owner_id` in `(business,
/// branch)`.
pub(super) fn create_wallet(
    owner_type: OwnerType,
    owner_id: u64,
    (business_id, branch_id): (u64, u64),
) -> Command {
    Command::CreateWallet(CreateWallet {
        owner_type,
        owner_id,
        currency: Currency::from_code("YER").unwrap(),
        wallet_type: WalletType::Primary,
        business_id,
        branch_id,
        meta: None,
    })
}

/// Runs `create` (a [`create_wallet`] command) and answers the new wallet's id.
pub(super) async fn created_wallet(engine: &Engine, create: Command) -> WalletId {
    let created = engine.execute(create).await.unwrap();
    let Outcome::Wallet(wallet) = created else {
        panic!("not a wallet: {created:?}")
    };
    wallet.id
}

pub(super) fn deposit(wallet_id: WalletId, description: Option<String>) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id,
        amount: Decimal::from(5),
        currency: None,
        details: Details {
            description,
            ..Details::default()
        },
    })
}

pub(super) async fn balance(engine: &Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

fn snapshot_files(dir: &std::path::Path) -> Vec<String> {
    std::fs::read_dir(dir.join("wal"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|name| name.contains(".snap"))
        .collect()
}

/// A command whose journal entry cannot be encoded is answered `Unavailable` (the API's 503
/// `unavailable`), nothing is appended, and the shard stops (its memory holds effects the log
/// never will). A restart finds the log without the command. Before, an empty record was
/// appended and acknowledged, and replay refused it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_16_a_command_whose_record_cannot_be_encoded_fails_before_it_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(3, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    let (last_before, _) = engine.lsns();

    let poisoned = deposit(wallet_id, Some(encode_fault_marker("journal entry")));
    let failed = engine.execute(poisoned).await;
    assert!(
        matches!(&failed, Err(EngineError::Unavailable(reason)) if reason.contains("could not be encoded")),
        "{failed:?}"
    );
    assert_eq!(engine.lsns().0, last_before, "nothing was appended");
    assert!(engine.failure().is_some(), "the shard reports its failure");
    let _ = engine.shutdown();

    let engine = open(dir.path(), &clock);
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(5));
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(10));
    let _ = engine.shutdown();
}

/// Each encoder refuses instead of answering empty bytes: the journal entry, the event batch,
/// the shard snapshot, the directory, and the image that holds them.
#[test]
fn issue_16_every_encoder_returns_its_error_instead_of_empty_bytes() {
    let mut h = crate::tests::Harness::new();
    let wallet_id = h.create(1, "YER");
    let command = deposit(wallet_id, Some(encode_fault_marker("event batch")));
    let context = h.ctx();
    let (events, _) = h.shard.execute(&command, &context).unwrap();
    let error = crate::shard::event::encode(&events).unwrap_err();
    assert_eq!(error.what, "event batch");

    let entry = JournalEntry {
        shard: 0,
        events: events.clone(),
        directory: Vec::new(),
        idempotency: Vec::new(),
    };
    // The event batch marker is not the journal's: the entry encodes.
    assert!(entry.encode().is_ok());
    let command = deposit(wallet_id, Some(encode_fault_marker("journal entry")));
    let context = h.ctx();
    let (events, _) = h.shard.execute(&command, &context).unwrap();
    let entry = JournalEntry { events, ..entry };
    assert_eq!(entry.encode().unwrap_err().what, "journal entry");

    let command = deposit(wallet_id, Some(encode_fault_marker("shard snapshot")));
    h.ok(command);
    assert_eq!(h.shard.snapshot_bytes().unwrap_err().what, "shard snapshot");
    let image = crate::runtime::image::encode(&[(1, h.shard.clone())], &Directory::new(), &[]);
    assert_eq!(image.unwrap_err().what, "shard snapshot");

    let mut directory = Directory::new();
    let command = DirectoryCommand::CreateBusiness {
        name: encode_fault_marker("directory"),
        is_merchant: false,
    };
    for event in directory.decide(&command, START_MS).unwrap() {
        directory.apply(&event).unwrap();
    }
    assert_eq!(directory.to_bytes().unwrap_err().what, "directory");
}

/// A snapshot whose image cannot be encoded fails before anything is kept, and the failure sets
/// the periodic snapshot's backoff: no new attempt until the wait has passed, the wait doubling
/// per failure in a row and capped, reset by a success. Before, nothing held back the next
/// request from starting the same failing snapshot at once.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_16_a_failed_snapshot_keeps_nothing_and_backs_off() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(4, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    // An active hold is hot state, so its reason is in every snapshot image (a deposit's
    // description is history, filed in the store and not in the image).
    engine
        .execute(Command::PlaceHold(PlaceHold {
            wallet_id,
            amount: Decimal::ONE,
            currency: Currency::from_code("YER").unwrap(),
            reason: Some(encode_fault_marker("snapshot image")),
            expiry_minutes: None,
        }))
        .await
        .unwrap();

    let due = |engine: &Engine| {
        let state = engine.inner.snapshot_state.lock().unwrap();
        periodic_snapshot_due(&state, u64::MAX, 1, engine.inner.clock.now_ms())
    };
    assert!(
        due(&engine),
        "a periodic snapshot is due before any failure"
    );
    for failures in 1..=3u32 {
        assert!(engine.claim_snapshot());
        let failed = engine
            .snapshot_claimed(engine.inner.config.snapshot_nice)
            .await;
        assert!(
            matches!(&failed, Err(EngineError::Unavailable(r)) if r.contains("encoding snapshot image failed")),
            "{failed:?}"
        );
        assert!(snapshot_files(dir.path()).is_empty(), "nothing was kept");
        let wait = snapshot_backoff_ms(failures);
        assert_eq!(wait, SNAPSHOT_BACKOFF_BASE_MS << (failures - 1));
        assert!(!due(&engine), "retried at once after failure {failures}");
        clock.advance_ms(wait - 1);
        assert!(
            !due(&engine),
            "retried before the wait after failure {failures}"
        );
        clock.advance_ms(1);
        assert!(
            due(&engine),
            "not retried after the wait, failure {failures}"
        );
    }
    let stats = engine.snapshot_stats();
    assert_eq!(
        (stats.written, stats.failed, stats.last, stats.running),
        (0, 3, None, false),
        "every failure is counted, none as written"
    );
    assert!(
        stats.cpu_total > std::time::Duration::ZERO && stats.wall_total >= stats.cpu_total,
        "what the failed snapshots spent is counted: {stats:?}"
    );
    assert_eq!(snapshot_backoff_ms(40), SNAPSHOT_BACKOFF_MAX_MS);
    assert_eq!(snapshot_backoff_ms(u32::MAX), SNAPSHOT_BACKOFF_MAX_MS);

    // An on-demand snapshot still runs at once; once one succeeds the backoff is gone.
    let _ = engine.shutdown();
    let dir2 = tempfile::tempdir().unwrap();
    let engine = open(dir2.path(), &clock);
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    engine.inner.snapshot_state.lock().unwrap().failures = 5;
    engine.inner.snapshot_state.lock().unwrap().retry_at_ms = i64::MAX;
    engine.snapshot().await.unwrap();
    let state = engine.inner.snapshot_state.lock().unwrap();
    assert_eq!((state.failures, state.retry_at_ms), (0, i64::MIN));
    drop(state);
    assert_eq!(snapshot_files(dir2.path()).len(), 1);
    let _ = engine.shutdown();
}

/// What a written snapshot cost is counted for `/metrics`: the LSN it covers, its size (the
/// file's, less the header), its CPU time (its own thread's, no more than its wall time), the
/// totals, and the priority its thread ran at: lowered by `snapshot_nice` for a periodic one,
/// the process's own for one someone waits for.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_written_snapshot_reports_what_it_cost() {
    let process_nice = rustix::process::getpriority_process(None).unwrap();
    let lowered = process_nice + crate::runtime::SNAPSHOT_NICE;
    assert!(
        lowered <= 19,
        "the test needs room to lower a thread's priority"
    );
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(22, START_MS));
    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.inner.config.snapshot_nice,
        crate::runtime::SNAPSHOT_NICE
    );
    assert_eq!(
        engine.snapshot_stats(),
        crate::runtime::SnapshotStats::default()
    );
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    let covered = engine.snapshot().await.unwrap();
    let on_demand = engine.snapshot_stats().last.unwrap();
    assert_eq!(on_demand.nice, Some(process_nice), "{on_demand:?}");

    // A periodic snapshot: claimed, then run as `maybe_snapshot` runs it.
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    assert!(engine.claim_snapshot());
    let covered_then = engine
        .snapshot_claimed(engine.inner.config.snapshot_nice)
        .await
        .unwrap();
    assert!(covered_then > covered);

    let stats = engine.snapshot_stats();
    let last = stats.last.expect("a snapshot was written");
    assert_eq!((stats.written, stats.failed, stats.running), (2, 0, false));
    assert_eq!(last.covered_lsn, covered_then);
    assert_eq!(last.nice, Some(lowered), "{last:?}");
    let file = dir
        .path()
        .join("wal")
        .join(format!("{covered_then:020}.snap"));
    assert_eq!(
        last.bytes + wal::snapshot::SNAPSHOT_HEADER_BYTES as u64,
        std::fs::metadata(&file).unwrap().len(),
        "the image is what the file holds after its header"
    );
    assert!(
        last.cpu > std::time::Duration::ZERO && last.cpu <= last.wall,
        "{last:?}"
    );
    assert_eq!(stats.cpu_total, on_demand.cpu + last.cpu);
    assert!(stats.wall_total >= stats.cpu_total, "{stats:?}");
    let _ = engine.shutdown();
}

/// The snapshot's thread lowers its own priority and no other thread's: Linux applies
/// `setpriority` on a thread id to that thread only, which is what lets a snapshot yield to the
/// requests without slowing them.
#[test]
fn the_snapshot_thread_lowers_its_own_priority_only() {
    let nice = |thread| rustix::process::getpriority_process(Some(thread)).unwrap();
    let caller = rustix::thread::gettid();
    let before = nice(caller);
    // The main thread's id is the process id.
    let main_thread = rustix::process::getpid();
    let main_before = nice(main_thread);
    let (lowered, caller_after) = std::thread::spawn(move || {
        let own = rustix::thread::gettid();
        let own_before = nice(own);
        crate::runtime::snapshot::yield_to_requests(0);
        let unchanged = nice(own);
        let reported = crate::runtime::snapshot::yield_to_requests(crate::runtime::SNAPSHOT_NICE);
        assert_eq!(unchanged, own_before, "0 leaves the priority alone");
        assert_eq!(reported, Some(nice(own)), "it reports what it set");
        ((own_before, nice(own)), nice(caller))
    })
    .join()
    .unwrap();
    assert_eq!(
        lowered.1,
        (lowered.0 + crate::runtime::SNAPSHOT_NICE).min(19),
        "{lowered:?}"
    );
    assert!(
        before + crate::runtime::SNAPSHOT_NICE <= 19,
        "room to lower it"
    );
    assert_eq!(caller_after, before, "the caller's priority is unchanged");
    assert_eq!(
        nice(main_thread),
        main_before,
        "the main thread's priority is unchanged"
    );
}

/// Issue 16, item 11: the queue-depth gauge counts a command from before it is sent until its
/// answer is durable, and counts it down after. Before, nothing incremented it: it read 0 always.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_16_the_queue_depth_gauge_counts_a_command_until_it_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(5, START_MS));
    let fs = wal::fs::FaultyFs::new();
    let mut config = EngineConfig::new(dir.path());
    config.snapshot_every_records = 0;
    config.file_system = crate::runtime::WalFileSystem(Arc::new(fs.clone()));
    let engine = Engine::open(config, clock.clone(), Arc::new(DebugRenderer))
        .unwrap()
        .0;
    let wallet_id = wallet(&engine).await;
    assert_eq!(engine.queue_depths(), vec![0]);

    fs.hold_segment_syncs(true);
    let running = tokio::spawn({
        let engine = engine.clone();
        async move { engine.execute(deposit(wallet_id, None)).await }
    });
    let held = fs.clone();
    tokio::task::spawn_blocking(move || held.wait_for_a_held_sync())
        .await
        .unwrap();
    assert_eq!(
        engine.queue_depths(),
        vec![1],
        "a command waiting for its sync"
    );
    fs.hold_segment_syncs(false);
    running.await.unwrap().unwrap();
    assert_eq!(engine.queue_depths(), vec![0], "counted down once durable");
    let _ = engine.shutdown();
}

/// Issue 16, item 5: recovery that cannot finish a pending cross-shard move quarantines it and
/// starts. The log below holds a transfer reserved from shard 0 to a frozen wallet on shard 1
/// and, after it, a refund of the transfer's debit, the state issue 16 describes (a binary
/// before item 4 could write it). Recovery's credit is refused (frozen), and the release that
/// follows is refused too (the refund changed the posting it mirrors). Before, `Engine::open`
/// failed with "cannot finish interrupted transfers" and the service could not start at all.
/// Now the transfer is reported (recovery report, `Engine::quarantined_moves`), stays reserved
/// with its money in transit, and every invariant holds.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_16_recovery_quarantines_a_move_it_cannot_finish_and_starts() {
    use crate::shard::state::Shard;
    use crate::tests::{dec, Harness};

    let mut a = Harness::with_shard(Shard::new(0, 2).unwrap());
    let mut b = Harness::with_shard(Shard::new(1, 2).unwrap());
    let mut entries: Vec<(u32, Vec<crate::Event>)> = Vec::new();
    let mut take = |h: &mut Harness| {
        let events = std::mem::take(&mut h.log);
        entries.push((h.shard.shard_index(), events));
    };
    let source = a.create(1, "EUR");
    take(&mut a);
    let target = b.create(2, "EUR");
    take(&mut b);
    a.deposit(source, "10");
    take(&mut a);
    b.ok(Command::FreezeWallet { wallet_id: target });
    take(&mut b);
    let Outcome::TransferReserved { transfer, .. } = a.ok(Command::TransferReserve(
        crate::shard::command::TransferArgs {
            source_wallet_id: source,
            target_wallet_id: target,
            amount: dec("10"),
            currency: Currency::from_code("EUR").unwrap(),
            details: Details::default(),
        },
    )) else {
        panic!("not reserved")
    };
    take(&mut a);
    let debit = a
        .shard
        .wallet(source)
        .unwrap()
        .transactions()
        .last()
        .unwrap()
        .uuid;
    // The refund events, decided where the rules of the time allowed them (the transfer
    // settled on a copy), then logged on the shard where the transfer is still reserved.
    let mut settled = Harness::with_shard(a.shard.clone());
    settled.now_ms = a.now_ms;
    settled.ok(Command::TransferFinalize {
        transfer_uuid: transfer.uuid,
    });
    settled.log.clear();
    settled.ok(Command::Refund(crate::shard::command::Refund {
        original_transaction_uuid: debit,
        amount: dec("4"),
        reason: None,
        details: Details::default(),
    }));
    let refund = std::mem::take(&mut settled.log);
    a.shard.apply_all(&refund).unwrap();
    entries.push((0, refund));

    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    write_log(&config, entries);

    let clock = Arc::new(SeededClock::new(6, START_MS));
    let (engine, report) = Engine::open(config.clone(), clock.clone(), Arc::new(DebugRenderer))
        .expect("recovery quarantines instead of refusing to start");
    assert_eq!(report.transfers_completed, 0);
    assert_eq!(report.quarantined.len(), 1, "{:?}", report.quarantined);
    let moved = &report.quarantined[0];
    assert_eq!((moved.kind, moved.uuid), ("transfer", transfer.uuid));
    assert!(
        moved.reason.contains("settling transfer"),
        "{}",
        moved.reason
    );
    assert_eq!(engine.quarantined_moves(), report.quarantined);
    // Still reserved: the money is in transit, accounted for, and every invariant holds.
    assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 1);
    engine.check_invariants().await.unwrap();
    // The engine serves: the target is still frozen, the source takes a deposit.
    engine.execute(deposit(source, None)).await.unwrap();
    let _ = engine.shutdown();

    // The next start tries it again, and reports it again.
    let (engine, report) =
        Engine::open(config, clock, Arc::new(DebugRenderer)).expect("a second start");
    assert_eq!(report.quarantined.len(), 1);
    let _ = engine.shutdown();
}

/// The shutdown snapshot (`Engine::snapshot_when_free`) does not give up when a periodic one is
/// running: it waits for that one to finish, then covers what it did not. Before, `walletd
/// serve` skipped its shutdown snapshot in that case and the next start replayed the log (a
/// 3.9 s restart after a 3-minute soak).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stop_snapshot_waits_for_a_running_one_then_covers_the_rest() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(21, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();

    // A snapshot is running: a plain one is refused, the stop's one waits.
    assert!(engine.claim_snapshot());
    assert!(engine.snapshot().await.is_err());
    let waiting = tokio::spawn({
        let engine = engine.clone();
        async move { engine.snapshot_when_free().await }
    });
    // Logged while the other snapshot holds the claim.
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    let covered_first = engine.snapshot_claimed(0).await.unwrap();
    let covered_then = waiting.await.unwrap().unwrap();
    assert!(
        covered_then.is_none_or(|lsn| lsn > covered_first),
        "{covered_then:?} after {covered_first}"
    );
    assert_eq!(
        engine.records_since_snapshot(),
        0,
        "the stop's snapshot covers the log"
    );
    // Nothing left: no snapshot is taken.
    assert_eq!(engine.snapshot_when_free().await.unwrap(), None);
    let _ = engine.shutdown();
}
