//! Atomic transfer batches across shards (`runtime::atomic_batch`): the shard's rules for the
//! batch's steps, and recovery's decision for every point a crash can stop the protocol at.
//!
//! The recovery tests write the log a crashed run would have left (shard by shard, with
//! [`Harness`]), then open an engine on it: the decision recovery takes is the protocol's
//! commit rule, so each case below would fail if it were wrong.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{append_pending_key, write_log, DebugRenderer, START_MS};
use super::{dec, transfer, Harness};
use crate::ledger::transfer::OutgoingTransfer;
use crate::runtime::clock::SeededClock;
use crate::runtime::{Engine, EngineConfig};
use crate::shard::command::{BatchMark, TransferCredit};
use crate::shard::state::Shard;
use crate::values::ids::Uuid;
use crate::{Command, Event, Outcome, Rejection, WalletId};

const BATCH: Uuid = Uuid([7; 16]);

fn reserve(h: &mut Harness, from: WalletId, to: WalletId, amount: &str) -> OutgoingTransfer {
    match h.ok(Command::TransferBatchReserve(transfer(
        from, to, amount, "EUR",
    ))) {
        Outcome::TransferReserved { transfer, .. } => transfer,
        other => panic!("not reserved: {other:?}"),
    }
}

fn prepare(h: &mut Harness, shards: &[u32], transfers: &[&OutgoingTransfer]) {
    h.ok(Command::TransferBatchMark {
        batch: BATCH,
        mark: BatchMark::Prepared {
            shards: shards.to_vec(),
            transfers: transfers.iter().map(|t| t.uuid).collect(),
        },
    });
}

fn close(h: &mut Harness) -> Outcome {
    h.ok(Command::TransferBatchMark {
        batch: BATCH,
        mark: BatchMark::Closed,
    })
}

#[test]
fn a_batch_reserve_may_target_its_own_shard_and_a_plain_reserve_may_not() {
    let mut h = Harness::with_shard(Shard::new(0, 2).unwrap());
    let a = h.create(1, "EUR");
    let b = h.create(3, "EUR");
    h.deposit(a, "10");
    assert!(h.shard.owns(b));
    let refused = h.reject(Command::TransferReserve(transfer(a, b, "1", "EUR")));
    assert!(
        matches!(refused, Rejection::InvalidRequest(_)),
        "{refused:?}"
    );
    let reserved = reserve(&mut h, a, b, "4");
    assert_eq!(h.balance(a), dec("6"));
    // Its credit, on the same shard, as a committed batch's.
    h.ok(Command::TransferCredit(TransferCredit::for_batch(
        &reserved, BATCH,
    )));
    assert_eq!(h.balance(b), dec("4"));
    // A plain credit from this shard is still refused.
    let other = reserve(&mut h, a, b, "1");
    let refused = h.reject(Command::TransferCredit(TransferCredit::for_transfer(
        &other,
    )));
    assert!(
        matches!(refused, Rejection::InvalidRequest(_)),
        "{refused:?}"
    );
}

#[test]
fn a_committed_batch_credits_a_target_frozen_after_the_decision() {
    let mut source = Harness::with_shard(Shard::new(0, 2).unwrap());
    let mut target = Harness::with_shard(Shard::new(1, 2).unwrap());
    let a = source.create(1, "EUR");
    let b = target.create(2, "EUR");
    source.deposit(a, "10");
    let reserved = reserve(&mut source, a, b, "3");
    target.ok(Command::FreezeWallet { wallet_id: b });
    let refused = target.reject(Command::TransferCredit(TransferCredit::for_transfer(
        &reserved,
    )));
    assert!(matches!(refused, Rejection::WalletFrozen), "{refused:?}");
    target.ok(Command::TransferCredit(TransferCredit::for_batch(
        &reserved, BATCH,
    )));
    assert_eq!(target.balance(b), dec("3"));
}

#[test]
fn a_prepared_batch_is_held_apart_from_single_transfers_until_closed() {
    let mut h = Harness::with_shard(Shard::new(0, 2).unwrap());
    let a = h.create(1, "EUR");
    let b = WalletId(1); // on shard 1
    h.deposit(a, "10");
    let first = reserve(&mut h, a, b, "2");
    let second = reserve(&mut h, a, b, "3");
    // Only reserved transfers of this shard, each in one batch, and the batch names this shard.
    let mut wrong = h.shard.clone();
    let mut wrong_ctx = h.ctx();
    wrong_ctx.now_ms = h.now_ms;
    for bad in [
        BatchMark::Prepared {
            shards: vec![1],
            transfers: vec![first.uuid],
        },
        BatchMark::Prepared {
            shards: vec![0, 1],
            transfers: vec![Uuid([9; 16])],
        },
        BatchMark::Prepared {
            shards: vec![1, 0],
            transfers: vec![first.uuid],
        },
        BatchMark::Prepared {
            shards: vec![0, 2],
            transfers: vec![first.uuid],
        },
    ] {
        let command = Command::TransferBatchMark {
            batch: BATCH,
            mark: bad,
        };
        assert!(wrong.execute(&command, &wrong_ctx).is_err(), "{command:?}");
    }
    prepare(&mut h, &[0, 1], &[&first, &second]);
    assert!(
        h.shard.pending_outgoing_transfers().is_empty(),
        "recovery must not finish a batch's transfers one by one"
    );
    let again = Command::TransferBatchMark {
        batch: Uuid([8; 16]),
        mark: BatchMark::Prepared {
            shards: vec![0, 1],
            transfers: vec![first.uuid],
        },
    };
    h.reject(again);
    // The open batch survives a snapshot, and the snapshot refuses one that does not fit.
    let bytes = h.shard.snapshot_bytes().unwrap();
    let loaded = Shard::from_snapshot_bytes(&bytes).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    assert_eq!(loaded.prepared_batches(), h.shard.prepared_batches());
    assert!(loaded.pending_outgoing_transfers().is_empty());
    // Closing waits for every transfer to settle.
    let refused = h.reject(Command::TransferBatchMark {
        batch: BATCH,
        mark: BatchMark::Closed,
    });
    assert!(matches!(refused, Rejection::InvalidState(_)), "{refused:?}");
    h.ok(Command::TransferFinalize {
        transfer_uuid: first.uuid,
    });
    h.ok(Command::TransferRelease {
        transfer_uuid: second.uuid,
    });
    h.log.clear();
    close(&mut h);
    assert_eq!(h.log, vec![Event::TransferBatchClosed { batch: BATCH }]);
    assert!(h.shard.prepared_batches().is_empty());
    // Closing again is a no-op.
    h.log.clear();
    assert_eq!(close(&mut h), Outcome::TransferBatchMarked);
    assert!(h.log.is_empty());
}

/// Two source shards: `a0` (shard 0, 100 EUR) pays `b1` (shard 1) 10 and `b0` (its own shard)
/// 5, `a1` (shard 1, 100 EUR) pays `b0` (shard 0) 20, in one atomic batch. The tests write
/// what a run did, shard by shard, up to where it stopped; recovery then settles the batch.
struct Crash {
    shards: Vec<Harness>,
    entries: Vec<(u32, Vec<Event>)>,
    wallets: [WalletId; 4],
    /// The source shards the prepares name.
    voters: Vec<u32>,
}

impl Crash {
    fn new() -> Self {
        Self::on(2)
    }

    /// On `count` shards (the batch's wallets on shards 0 and 1).
    fn on(count: u32) -> Self {
        let mut shards: Vec<Harness> = (0..count)
            .map(|i| Harness::with_shard(Shard::new(i, count).unwrap()))
            .collect();
        let a0 = shards[0].create(1, "EUR");
        let b0 = shards[0].create(3, "EUR");
        let a1 = shards[1].create(2, "EUR");
        let b1 = shards[1].create(4, "EUR");
        shards[0].deposit(a0, "100");
        shards[1].deposit(a1, "100");
        let mut crash = Crash {
            shards,
            entries: Vec::new(),
            wallets: [a0, b0, a1, b1],
            voters: vec![0, 1],
        };
        crash.take(0);
        crash.take(1);
        crash
    }

    /// Logs what shard `i` did since the last take as one record.
    fn take(&mut self, i: usize) {
        let events = std::mem::take(&mut self.shards[i].log);
        if !events.is_empty() {
            self.entries.push((i as u32, events));
        }
    }

    /// The prepare of shard `i`: its items reserved and the batch marked, in one record.
    fn prepare(&mut self, i: usize) -> Vec<OutgoingTransfer> {
        let [a0, b0, a1, b1] = self.wallets;
        let items: &[(WalletId, WalletId, &str)] = if i == 0 {
            &[(a0, b1, "10"), (a0, b0, "5")]
        } else {
            &[(a1, b0, "20")]
        };
        let reserved: Vec<OutgoingTransfer> = items
            .iter()
            .map(|(from, to, amount)| reserve(&mut self.shards[i], *from, *to, amount))
            .collect();
        let voters = self.voters.clone();
        prepare(
            &mut self.shards[i],
            &voters,
            &reserved.iter().collect::<Vec<_>>(),
        );
        self.take(i);
        reserved
    }

    /// Credits `transfer` on its target's shard, as a committed batch's, in one record.
    fn credit(&mut self, transfer: &OutgoingTransfer) {
        let i = self
            .shards
            .iter()
            .position(|h| h.shard.owns(transfer.target_wallet_id))
            .unwrap();
        self.shards[i].ok(Command::TransferCredit(TransferCredit::for_batch(
            transfer, BATCH,
        )));
        self.take(i);
    }

    /// Finalizes `transfers` on shard `i`, in one record.
    fn finalize(&mut self, i: usize, transfers: &[OutgoingTransfer]) {
        for transfer in transfers {
            self.shards[i].ok(Command::TransferFinalize {
                transfer_uuid: transfer.uuid,
            });
        }
        self.take(i);
    }

    /// Opens an engine on the log; returns the four balances and the recovery report.
    async fn recover(self) -> ([Decimal; 4], crate::runtime::RecoveryReport) {
        self.recover_with(false).await
    }

    /// [`Crash::recover`], with (`snapshot`) a snapshot written at the log's end first, as
    /// the background snapshot does, so that the open batch reaches recovery through the
    /// snapshot's shards and no record after it names the batch.
    async fn recover_with(self, snapshot: bool) -> ([Decimal; 4], crate::runtime::RecoveryReport) {
        let dir = tempfile::tempdir().unwrap();
        let mut config = EngineConfig::new(dir.path());
        config.shard_count = self.shards.len() as u32;
        config.snapshot_every_records = 0;
        write_log(&config, self.entries);
        let snapshot = snapshot.then(|| {
            let (covered, open) = snapshot_log(&config);
            assert!(
                open.iter().all(|&batches| batches == 1),
                "open in the snapshot"
            );
            covered
        });
        let clock = Arc::new(SeededClock::new(31, START_MS));
        let (engine, report) =
            Engine::open(config.clone(), clock.clone(), Arc::new(DebugRenderer)).unwrap();
        if let Some(covered) = snapshot {
            // Replay reads the log again for the fresh history store, but applies to a shard
            // only the records its snapshot does not cover: none here.
            assert_eq!(report.snapshot_lsn, Some(covered));
        }
        let mut balances = [Decimal::ZERO; 4];
        for (slot, wallet) in balances.iter_mut().zip(self.wallets) {
            *slot = engine
                .read_wallet(wallet, move |s| s.wallet(wallet).unwrap().balance())
                .await
                .unwrap();
        }
        engine.check_invariants().await.unwrap();
        for shard in 0..config.shard_count {
            let open = engine
                .peek_shard(shard, |s| s.prepared_batches().len())
                .await
                .unwrap();
            assert_eq!(open, 0, "shard {shard} still has the batch open");
        }
        assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 0);
        engine.shutdown().unwrap();
        // And the settlement itself was logged: a second start finds nothing to do.
        let (engine, again) = Engine::open(config, clock, Arc::new(DebugRenderer)).unwrap();
        assert_eq!(again.batches_completed + again.batches_released, 0);
        engine.shutdown().unwrap();
        (balances, report)
    }
}

/// Writes a snapshot of the state the log in `config`'s WAL leaves, covering all of it, as the
/// background snapshot builds one (replay, encode, checkpoint); answers the LSN it covers and
/// each shard's number of open batches in it.
fn snapshot_log(config: &EngineConfig) -> (u64, Vec<usize>) {
    use crate::runtime::recovery::Replayed;
    let dir = config.wal_dir();
    let (log, _) = wal::Wal::open(&dir, config.wal.clone()).unwrap();
    let target = log.durable_lsn();
    let mut state = Replayed::load(&dir, config.shard_count).unwrap();
    let from = state.replay_from();
    wal::reader::read_range(
        &dir,
        config.wal.record_bytes_max,
        from,
        target,
        &mut |record| state.apply(record),
    )
    .unwrap();
    let open = state
        .shards
        .iter()
        .map(|shard| shard.prepared_batches().len())
        .collect();
    let captures: Vec<(u64, Shard)> = state
        .shards
        .into_iter()
        .map(|shard| (target, shard))
        .collect();
    let keys = state.table.pending_records();
    let payload = crate::runtime::image::encode(&captures, &state.directory, &keys).unwrap();
    log.checkpoint(target, &payload).unwrap();
    log.close().unwrap();
    (target, open)
}

const UNTOUCHED: [&str; 4] = ["100", "0", "100", "0"];
const POSTED: [&str; 4] = ["85", "25", "80", "10"];

fn amounts(values: [&str; 4]) -> [Decimal; 4] {
    values.map(dec)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_prepared_on_some_of_its_shards_is_released_by_recovery() {
    let mut crash = Crash::new();
    crash.prepare(0);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(UNTOUCHED));
    assert_eq!((report.batches_released, report.batches_completed), (1, 0));
    assert_eq!(
        report.transfers_completed, 0,
        "not finished as a single transfer"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_prepared_on_all_its_shards_is_completed_by_recovery() {
    let mut crash = Crash::new();
    crash.prepare(0);
    crash.prepare(1);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(POSTED));
    assert_eq!((report.batches_released, report.batches_completed), (0, 1));
}

/// A batch open in the snapshot recovery starts from (a background snapshot taken between its
/// prepares and its credits): recovery learns it from the snapshot's shards and completes it,
/// as it does from the log; one prepared on only some shards is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_open_in_the_snapshot_is_settled_by_recovery() {
    let mut crash = Crash::new();
    crash.prepare(0);
    crash.prepare(1);
    let (balances, report) = crash.recover_with(true).await;
    assert_eq!(balances, amounts(POSTED));
    assert_eq!((report.batches_released, report.batches_completed), (0, 1));

    let mut crash = Crash::new();
    crash.voters = vec![0, 1];
    let first = crash.prepare(0);
    // Shard 1 prepared nothing of it: the snapshot holds the batch open on shard 0 only.
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    write_log(&config, std::mem::take(&mut crash.entries));
    let (covered, open) = snapshot_log(&config);
    assert_eq!(open, [1, 0]);
    let clock = Arc::new(SeededClock::new(32, START_MS));
    let (engine, report) = Engine::open(config, clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!((report.batches_released, report.batches_completed), (1, 0));
    // Replay reads the log again for the fresh history store, but applies to a shard only the
    // records its snapshot does not cover: none here.
    assert_eq!(report.snapshot_lsn, Some(covered));
    let a0 = crash.wallets[0];
    let balance = engine
        .read_wallet(a0, move |s| s.wallet(a0).unwrap().balance())
        .await
        .unwrap();
    assert_eq!(balance, dec("100"), "{} released", first.len());
    engine.check_invariants().await.unwrap();
    assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 0);
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_committed_batch_with_a_target_frozen_since_is_completed_by_recovery() {
    let mut crash = Crash::new();
    let [_, b0, _, _] = crash.wallets;
    crash.prepare(0);
    crash.prepare(1);
    crash.shards[0].ok(Command::FreezeWallet { wallet_id: b0 });
    crash.take(0);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(POSTED));
    assert_eq!(report.batches_completed, 1);
}

/// A commit that was half credited when the process died (the same-shard item's credit done,
/// the others not).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_stopped_between_its_credits_is_completed_by_recovery() {
    let mut crash = Crash::new();
    let first = crash.prepare(0);
    crash.prepare(1);
    crash.credit(&first[1]);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(POSTED));
    assert_eq!(report.batches_completed, 1);
}

/// Closed on one shard after every finalize, still open on the other: the batch is no longer
/// complete on the logs, and recovery must not release anything (nothing is reserved), only
/// close it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_closed_on_one_shard_is_closed_on_the_other_without_moving_money() {
    let mut crash = Crash::new();
    let first = crash.prepare(0);
    let second = crash.prepare(1);
    for transfer in first.iter().chain(&second) {
        crash.credit(transfer);
    }
    crash.finalize(0, &first);
    crash.finalize(1, &second);
    close(&mut crash.shards[0]);
    crash.take(0);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(POSTED));
    assert_eq!(report.batches_released, 1, "settled by the abort rule");
}

/// Three source shards, the third refused its prepare: the run released and closed shard 0,
/// and died before shard 1 (the log of the third holds nothing of the batch).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_aborted_on_one_shard_is_released_on_the_other() {
    let mut crash = Crash::on(3);
    crash.voters = vec![0, 1, 2];
    let first = crash.prepare(0);
    crash.prepare(1);
    for transfer in &first {
        crash.shards[0].ok(Command::TransferRelease {
            transfer_uuid: transfer.uuid,
        });
    }
    close(&mut crash.shards[0]);
    crash.take(0);
    let (balances, report) = crash.recover().await;
    assert_eq!(balances, amounts(UNTOUCHED));
    assert_eq!((report.batches_released, report.batches_completed), (1, 0));
}

#[test]
fn a_version_6_snapshot_loads_with_no_open_batch() {
    let mut h = Harness::with_shard(Shard::new(0, 2).unwrap());
    let a = h.create(1, "EUR");
    h.deposit(a, "10");
    // Versions before 8 carry no posting floor: compare with the state without it.
    h.shard.posted_at_floor_ms = i64::MIN;
    let mut bytes = h.shard.version_7_snapshot_bytes();
    assert_eq!(bytes[0], 7);
    // Version 7 = version 6 + the open batches (none: one length byte).
    assert_eq!(bytes.pop(), Some(0));
    bytes[0] = 6;
    let loaded = Shard::from_snapshot_bytes(&bytes).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    assert!(loaded.prepared_batches().is_empty());
}

/// A committed batch whose credit the target refuses even now (another currency: the decision
/// was made by a run that did not check it) cannot be settled: recovery quarantines it, counts
/// its reserved transfers as moves in flight, and starts.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_recovery_cannot_settle_is_quarantined_with_its_moves() {
    let mut source = Harness::with_shard(Shard::new(0, 2).unwrap());
    let mut target = Harness::with_shard(Shard::new(1, 2).unwrap());
    let a = source.create(1, "EUR");
    let b = target.create(2, "USD");
    source.deposit(a, "10");
    let mut entries = vec![
        (0, std::mem::take(&mut source.log)),
        (1, std::mem::take(&mut target.log)),
    ];
    let reserved = reserve(&mut source, a, b, "4");
    prepare(&mut source, &[0], &[&reserved]);
    entries.push((0, std::mem::take(&mut source.log)));

    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    write_log(&config, entries);
    let key = append_pending_key(&config, 0, None);
    let clock = Arc::new(SeededClock::new(32, START_MS));
    let (engine, report) = Engine::open(config, clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.quarantined.len(), 1, "{:?}", report.quarantined);
    // The key might be the quarantined batch's (it does not say): it stays pending, not
    // answered as if its items were settled.
    assert_eq!(report.batch_keys_answered, 0);
    let item = crate::runtime::batch::BatchItem::Transfer(transfer(a, b, "4", "EUR"));
    let retry = engine.execute_batch_idempotent(vec![item], true, key).await;
    assert!(
        matches!(retry, Err(crate::runtime::EngineError::IdempotencyInFlight)),
        "{retry:?}"
    );
    let moved = &report.quarantined[0];
    assert_eq!(
        (moved.kind, moved.uuid, moved.moves),
        ("transfer batch", BATCH, 1)
    );
    assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 1);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

/// A keyed batch over several records that the crash stopped before its answer was logged:
/// recovery settles its items (here, an atomic batch prepared on one of its two shards:
/// released) and answers its still-pending key `batch_interrupted`, so a retry gets that final
/// answer (also after another restart) instead of 409 `request_in_progress` for good, and is
/// never run a second time.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_key_of_a_batch_interrupted_before_its_answer_is_answered_batch_interrupted() {
    let mut crash = Crash::new();
    crash.prepare(0);
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    write_log(&config, std::mem::take(&mut crash.entries));
    // Logged on shard 1; recovery answers it on shard 0.
    let key = append_pending_key(&config, 1, None);

    let clock = Arc::new(SeededClock::new(33, START_MS));
    let open = || Engine::open(config.clone(), clock.clone(), Arc::new(DebugRenderer)).unwrap();
    let (engine, report) = open();
    assert_eq!(report.batches_released, 1);
    assert_eq!(report.batch_keys_answered, 1);
    let [a0, _, a1, b1] = crash.wallets;
    let retry = |engine: Engine| {
        let key = key.clone();
        async move {
            let items = vec![
                crate::runtime::batch::BatchItem::Transfer(transfer(a0, b1, "10", "EUR")),
                crate::runtime::batch::BatchItem::Transfer(transfer(a1, a0, "20", "EUR")),
            ];
            engine.execute_batch_idempotent(items, true, key).await
        }
    };
    let reply = retry(engine.clone()).await.unwrap();
    assert!(reply.replayed, "the retry is answered, not run");
    let text = String::from_utf8(reply.response).unwrap();
    assert!(text.contains("BatchInterrupted"), "{text}");
    let balance = engine
        .read_wallet(a0, move |s| s.wallet(a0).unwrap().balance())
        .await
        .unwrap();
    assert_eq!(balance, dec("100"), "released, and the retry moved nothing");
    engine.shutdown().unwrap();

    let (engine, report) = open();
    assert_eq!(report.batch_keys_answered, 0, "the answer was logged");
    let again = retry(engine.clone()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(String::from_utf8(again.response).unwrap(), text);
    engine.shutdown().unwrap();
}
