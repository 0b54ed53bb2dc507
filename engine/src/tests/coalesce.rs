//! Coalesced records (`runtime::actor`, "Coalesced records"; issue 15: "a shard that finds
//! several commands queued takes them as one batch and logs them in one record").
//!
//! Each test parks shard 0's actor inside a read, queues commands in its mailbox from the test
//! thread (`Addr::send` enqueues before it returns), and lets the actor go: it then finds them
//! all queued, exactly as under load, and the tests see what it logged.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;

use super::park_shard;
use super::runtime_hardening::{balance, create_wallet, deposit, wallet, DebugRenderer, START_MS};
use crate::ledger::wallet::OwnerType;
use crate::runtime::actor::{Answer, Claim, Execute};
use crate::runtime::clock::SeededClock;
use crate::runtime::engine::{ClaimGuard, Claimed};
use crate::runtime::journal::JournalEntry;
use crate::runtime::{Engine, EngineConfig, EngineError, IdempotencyKey, WalFileSystem};
use crate::shard::command::{Details, MoneyMove};
use crate::{Command, Event, Outcome, Rejection, WalletId};

/// How long an answer that must not come is given to come anyway (as in
/// `engine/tests/durability.rs`): a premature answer would be ready microseconds after the
/// record is written; this only bounds the test's running time.
const MUST_NOT_ANSWER_WITHIN: Duration = Duration::from_millis(300);

/// Lets held syncs through when dropped, so a failing assertion does not leave the log's writer
/// (and the engine's shutdown after it) waiting for ever.
struct ReleaseOnDrop(wal::fs::FaultyFs);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.hold_segment_syncs(false);
    }
}

fn config(dir: &std::path::Path, coalesce_max: usize) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.snapshot_every_records = 0;
    config.coalesce_max = coalesce_max;
    config
}

/// An engine gathering up to 32 commands a record, whose log syncs through a [`wal::fs::FaultyFs`]
/// the test can hold.
fn open_faulty(dir: &std::path::Path) -> (Engine, wal::fs::FaultyFs) {
    let fs = wal::fs::FaultyFs::new();
    let mut config = config(dir, 32);
    config.file_system = WalFileSystem(Arc::new(fs.clone()));
    (open(config), fs)
}

fn open(config: EngineConfig) -> Engine {
    let clock = Arc::new(SeededClock::new(7, START_MS));
    Engine::open(config, clock, Arc::new(DebugRenderer))
        .unwrap()
        .0
}

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: "customer:1".into(),
        key: name.into(),
        fingerprint: [1; 32],
        legacy: None,
        route: 1,
    }
}

/// Claims `key` before returning, as a request does before it sends its command: with no
/// other lookup running, the store's lookup runs inline and the claim never waits.
fn claim_now(engine: &Engine, key: &IdempotencyKey) -> Claimed {
    use std::future::Future;
    let claim = std::pin::pin!(engine.claim(key, &|| None));
    match claim.poll(&mut std::task::Context::from_waker(std::task::Waker::noop())) {
        std::task::Poll::Ready(claimed) => claimed.unwrap(),
        std::task::Poll::Pending => panic!("a claim with no other lookup running waited"),
    }
}

/// Queues `command` on shard 0 now, under `key` if given; the answer once durable.
fn queue(
    engine: &Engine,
    command: Command,
    key: Option<&IdempotencyKey>,
) -> impl std::future::Future<Output = Result<crate::runtime::actor::Executed, EngineError>> {
    let (guard, claim): (Option<ClaimGuard>, Option<Claim>) = match key {
        Some(key) => match claim_now(engine, key) {
            Claimed::Fresh(guard, record) => (
                Some(guard),
                Some(Claim {
                    record,
                    answer: Answer::Result,
                }),
            ),
            Claimed::Answered(reply) => panic!("{key:?} was answered before: {reply:?}"),
        },
        None => (None, None),
    };
    let request = engine.addr(0).unwrap().send(Execute {
        command,
        context: engine.inner.clock.context(),
        claim,
    });
    async move {
        let executed = request.await.unwrap()?.wait().await;
        drop(guard);
        executed
    }
}

fn described_deposit(wallet_id: WalletId, n: usize) -> Command {
    deposit(wallet_id, Some(format!("coalesced deposit {n}")))
}

/// Queues `count` deposits into `wallet_id` behind the parked shard (the n-th under `keys[n]`
/// when keys are given), lets the shard go, and answers each deposit's result once durable.
async fn deposits_found_queued(
    engine: &Engine,
    wallet_id: WalletId,
    count: usize,
    keys: Option<&[IdempotencyKey]>,
) -> Vec<crate::runtime::actor::Executed> {
    let (release, parked) = park_shard(engine, 0).await;
    let answers: Vec<_> = (0..count)
        .map(|n| {
            let key = keys.map(|keys| &keys[n]);
            queue(engine, described_deposit(wallet_id, n), key)
        })
        .collect();
    release.send(()).unwrap();
    parked.await.unwrap();
    let mut executed = Vec::with_capacity(count);
    for answer in answers {
        let answer = answer.await.unwrap();
        assert!(
            matches!(answer.result, Ok(Outcome::Transaction(_))),
            "{answer:?}"
        );
        executed.push(answer);
    }
    executed
}

/// The log's records after `after`, decoded, with their version bytes.
fn records_after(config: &EngineConfig, after: u64) -> Vec<(u8, JournalEntry)> {
    let mut records = Vec::new();
    wal::reader::read_from(
        &config.wal_dir(),
        config.wal.record_bytes_max,
        after + 1,
        &mut |record| {
            records.push((
                record.payload[0],
                JournalEntry::decode(record.payload).unwrap(),
            ));
            Ok(())
        },
    )
    .unwrap();
    records
}

fn deposits_in(entry: &JournalEntry) -> usize {
    entry
        .events
        .iter()
        .filter(|event| matches!(event, Event::TransactionRecorded { .. }))
        .count()
}

/// Queues `count` deposits behind a parked actor, lets it go, and answers how many deposits
/// each record after the wallet's creation held, once every deposit is answered (after a
/// shutdown, so the log is whole), and the wallet.
async fn queued_deposits_logged_in(config: EngineConfig, count: usize) -> (Vec<usize>, WalletId) {
    let engine = open(config.clone());
    let wallet_id = wallet(&engine).await;
    let before = engine.inner.wal.last_lsn();
    deposits_found_queued(&engine, wallet_id, count, None).await;
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(5 * count));
    let _ = engine.shutdown();
    let records = records_after(&config, before)
        .iter()
        .map(|(_, entry)| deposits_in(entry))
        .collect();
    (records, wallet_id)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_commands_found_queued_share_one_record_and_replay_their_answers_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), 32);
    let engine = open(config.clone());
    let wallet_id = wallet(&engine).await;
    let before = engine.inner.wal.last_lsn();

    let keys: Vec<IdempotencyKey> = (0..20).map(|n| key(&format!("k{n}"))).collect();
    let responses: Vec<Vec<u8>> = deposits_found_queued(&engine, wallet_id, 20, Some(&keys))
        .await
        .into_iter()
        .map(|executed| executed.response.unwrap())
        .collect();
    let _ = engine.shutdown();

    let records = records_after(&config, before);
    assert_eq!(records.len(), 1, "20 queued deposits, one record");
    let (version, entry) = &records[0];
    assert_eq!(
        *version,
        crate::runtime::journal::POSTED_AT_FLOOR_VERSION,
        "every record is written at version 7 at least (more than one key needs 6)"
    );
    assert_eq!(deposits_in(entry), 20);
    let logged: Vec<&str> = entry.idempotency.iter().map(|k| k.key.as_str()).collect();
    let expected: Vec<String> = (0..20).map(|n| format!("k{n}")).collect();
    assert_eq!(logged, expected, "the keys in the order their commands ran");

    // Replayed from the log: the balance, and every key's own answer.
    let engine = open(config.clone());
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(100));
    for (n, key) in keys.iter().enumerate() {
        let reply = engine
            .execute_idempotent(described_deposit(wallet_id, n), key.clone())
            .await
            .unwrap();
        assert!(reply.replayed, "{key:?}");
        assert_eq!(reply.response, responses[n], "{key:?}");
    }
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(100));
    let _ = engine.shutdown();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_record_holds_at_most_coalesce_max_commands_and_1_logs_each_alone() {
    let dir = tempfile::tempdir().unwrap();
    let (records, _) = queued_deposits_logged_in(config(dir.path(), 8), 20).await;
    assert_eq!(records, vec![8, 8, 4]);
    let dir = tempfile::tempdir().unwrap();
    let (records, _) = queued_deposits_logged_in(config(dir.path(), 1), 20).await;
    assert_eq!(records, vec![1; 20]);
}

/// A gathered record over the log's largest record is appended command by command, each record
/// paired with its own command's stamp: paired with the last command's, as a first version did,
/// filing the first record would let the shard drop what the later commands changed before the
/// indexer filed them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_gathered_record_larger_than_the_log_takes_is_logged_command_by_command() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), 32);
    // One deposit's record fits; twenty do not.
    config.wal.record_bytes_max = 4 * 1024;
    config.wal.segment_bytes = 1 << 20;
    let (records, wallet_id) = queued_deposits_logged_in(config.clone(), 20).await;
    assert_eq!(records, vec![1; 20]);

    let engine = open(config.clone());
    let held = engine.inner.history.hold_filing();
    let before = engine.inner.wal.last_lsn();
    deposits_found_queued(&engine, wallet_id, 20, None).await;
    let unfiled = engine
        .addr(0)
        .unwrap()
        .send(crate::runtime::actor::Unfiled)
        .await
        .unwrap();
    let split: Vec<(u64, u64)> = unfiled
        .into_iter()
        .filter(|&(_, lsn)| lsn > before)
        .collect();
    assert_eq!(split.len(), 20, "{split:?}");
    assert!(
        split
            .windows(2)
            .all(|pair| pair[0].0 < pair[1].0 && pair[0].1 < pair[1].1),
        "each record with its own command's stamp: {split:?}"
    );
    drop(held);
    let _ = engine.shutdown();

    let engine = open(config);
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(200));
    let _ = engine.shutdown();
}

/// ARCHITECTURE.md invariants 1 and 2 for a gathered record: a refusal decided against the
/// state a gathered command left (its balance spent) is not answered before that command's
/// record is durable, and neither is the command.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_decided_behind_a_gathered_command_waits_for_its_record() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, fs) = open_faulty(dir.path());
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();

    let (release, parked) = park_shard(&engine, 0).await;
    let withdraw = || {
        Command::Withdraw(MoneyMove {
            wallet_id,
            amount: Decimal::from(5),
            currency: None,
            details: Details::default(),
        })
    };
    let spends = tokio::spawn(queue(&engine, withdraw(), None));
    let mut refused = tokio::spawn(queue(&engine, withdraw(), None));
    fs.hold_segment_syncs(true);
    let _release_syncs = ReleaseOnDrop(fs.clone());
    release.send(()).unwrap();
    parked.await.unwrap();
    let held = fs.clone();
    tokio::task::spawn_blocking(move || held.wait_for_a_held_sync())
        .await
        .unwrap();
    assert!(
        tokio::time::timeout(MUST_NOT_ANSWER_WITHIN, &mut refused)
            .await
            .is_err(),
        "the refusal was answered before the withdrawal it depends on was durable"
    );
    fs.hold_segment_syncs(false);
    assert!(matches!(
        spends.await.unwrap().unwrap().result,
        Ok(Outcome::Transaction(_))
    ));
    assert_eq!(
        refused.await.unwrap().unwrap().result.unwrap_err(),
        Rejection::InsufficientFunds
    );
    assert_eq!(balance(&engine, wallet_id).await, Decimal::ZERO);
    let _ = engine.shutdown();
}

/// A record waits for at most `coalesce_max` messages, whatever they are: reads queued behind
/// its first command flush it as commands would, so a steady stream of reads cannot hold the
/// commands' answers back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reads_queued_behind_a_gathered_command_flush_it_after_coalesce_max_messages() {
    let dir = tempfile::tempdir().unwrap();
    let config = config(dir.path(), 4);
    let engine = open(config.clone());
    let wallet_id = wallet(&engine).await;
    let before = engine.inner.wal.last_lsn();
    let (release, parked) = park_shard(&engine, 0).await;
    let first = queue(&engine, described_deposit(wallet_id, 0), None);
    let reads: Vec<_> = (0..10)
        .map(|_| {
            engine
                .addr(0)
                .unwrap()
                .send(crate::runtime::actor::Read(Box::new(move |shard| {
                    shard.balance(wallet_id).unwrap().balance
                })))
        })
        .collect();
    let second = queue(&engine, described_deposit(wallet_id, 1), None);
    release.send(()).unwrap();
    parked.await.unwrap();
    first.await.unwrap().result.unwrap();
    second.await.unwrap().result.unwrap();
    for (n, read) in reads.into_iter().enumerate() {
        let seen = read.await.unwrap().unwrap().wait().await.unwrap();
        // Every read came after the first deposit and before the second.
        assert_eq!(seen, Decimal::from(5), "read {n}");
    }
    let _ = engine.shutdown();
    let records: Vec<usize> = records_after(&config, before)
        .iter()
        .map(|(_, entry)| deposits_in(entry))
        .collect();
    assert_eq!(
        records,
        vec![1, 1],
        "the first deposit's record waited for 4 messages, not 12"
    );
}

/// Periodic snapshots are paced by commands, not records: twenty commands in one record count
/// twenty toward `snapshot_every_records`. Counted in records, coalescing made snapshots ~6
/// times rarer under load, and the log and a restart's replay ~6 times longer.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshots_are_paced_by_commands_not_records() {
    let dir = tempfile::tempdir().unwrap();
    let mut config = config(dir.path(), 32);
    config.snapshot_every_records = 20;
    let engine = open(config);
    let wallet_id = wallet(&engine).await;
    let counted = || {
        engine
            .inner
            .commands_logged
            .load(std::sync::atomic::Ordering::Relaxed)
    };
    let (lsn_before, counted_before) = (engine.inner.wal.last_lsn(), counted());
    deposits_found_queued(&engine, wallet_id, 19, None).await;
    assert_eq!(engine.inner.wal.last_lsn(), lsn_before + 1, "one record");
    assert_eq!(counted() - counted_before, 19, "nineteen commands");
    let due = |engine: &Engine| {
        let state = engine.inner.snapshot_state.lock().unwrap();
        crate::runtime::snapshot::periodic_snapshot_due(
            &state,
            counted(),
            20,
            engine.inner.clock.now_ms(),
        )
    };
    // The wallet's creation and nineteen deposits: twenty commands, in two records.
    assert!(due(&engine), "twenty commands since the engine opened");
    let _ = engine.shutdown();
}

/// Polls `future` once: enough for an engine call to put its message in a shard's mailbox
/// (`Addr::send` enqueues before it returns), whatever the shard is doing.
async fn enqueue<F: std::future::Future + Unpin>(future: &mut F) {
    std::future::poll_fn(|cx| {
        let _ = std::pin::Pin::new(&mut *future).poll(cx);
        std::task::Poll::Ready(())
    })
    .await;
}

/// A wallet's scope is remembered (and shown by its history reads, which trust the memory:
/// `HistoryBounds`) only once the record that created the wallet is logged. Here the creation
/// is gathered, a permission check of the new wallet is queued behind it, and the shard is
/// parked again behind that (by a peek, which logs nothing): the check's answer must come with
/// the creation appended, so a history read of the wallet waits for that record. A first
/// version looked the scope up with a peek at the gathered state: the creation had no LSN yet,
/// and a statement of the wallet would have been served before it was durable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_scope_is_remembered_only_once_the_wallets_creation_is_logged() {
    let dir = tempfile::tempdir().unwrap();
    let (engine, fs) = open_faulty(dir.path());
    let first = wallet(&engine).await;
    // The shard's next wallet id (one shard: ids 1, 2, 3, ...).
    let next = WalletId(first.0 + u64::from(engine.shard_count()));
    let before = engine.wal_last_lsn();

    let (release, parked) = park_shard(&engine, 0).await;
    fs.hold_segment_syncs(true);
    let _release_syncs = ReleaseOnDrop(fs.clone());
    let create = create_wallet(OwnerType::Customer, 2, (1, 0));
    let created = tokio::spawn(queue(&engine, create, None));
    let mut scope = Box::pin(engine.wallet_scope(next));
    enqueue(&mut scope).await;
    let (hold_tx, hold_rx) = std::sync::mpsc::channel::<()>();
    let mut second_park = Box::pin(engine.peek_shard(0, move |_| {
        let _ = hold_rx.recv();
    }));
    enqueue(&mut second_park).await;
    release.send(()).unwrap();
    parked.await.unwrap();

    let scope = scope.await.unwrap().expect("the new wallet exists");
    assert_eq!(scope.wallet_id, next);
    // The shard is parked again, behind the check; nothing after it has run.
    let creation = engine.wal_last_lsn();
    assert!(
        creation > before,
        "the scope was answered before the creation was logged"
    );
    let (holder, bound) = engine.holder_for_history(next).await.unwrap();
    assert_eq!(holder.unwrap().id, next);
    assert_eq!(bound, creation, "a history read waits for the creation");

    hold_tx.send(()).unwrap();
    second_park.await.unwrap();
    fs.hold_segment_syncs(false);
    let Outcome::Wallet(wallet) = created.await.unwrap().unwrap().result.unwrap() else {
        panic!("not a wallet")
    };
    assert_eq!(wallet.id, next);
    let _ = engine.shutdown();
}
