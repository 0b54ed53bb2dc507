//! The indexer: one thread that files durable WAL records into the history store, in LSN order.
//!
//! The WAL's writer hands it every record once synced, batch by batch, over a channel bounded by
//! bytes (`wal::tap`, [`crate::runtime::config::HistoryConfig::queue_bytes_max`]): the indexer's
//! brief pauses (preempted on busy cores, or waiting on its store's journal) do not stop the
//! log's syncs, and once the
//! budget is spent the writer waits, so the indexer falling behind slows appends instead of
//! growing memory. Each batch (plus whatever else is already queued, up to [`FILE_RECORDS_MAX`]
//! records or [`FILE_BYTES_MAX`] bytes) is one store transaction with durability off; every
//! `checkpoint_every` one commit is durable, and only then may the WAL drop segments the store
//! covers ([`wal::Wal::set_retention_floor`]).
//!
//! Progress is published on a `watch` channel: readers of history wait until the indexed LSN
//! reaches what they could have seen. A store error stops the indexer for good: it is published
//! as a failure (readers get `Unavailable`), logged, and the channel to the WAL is dropped, which
//! poisons the log so that nothing is acknowledged that history would never show.

use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio::sync::watch;
use wal::tap::{RecvTimeoutError, TapReceiver};

use super::filing::{file_batch, ChainHeads, Filed};
use super::store::{HistoryStore, StoreError};
use crate::runtime::clock::Clock;
use crate::runtime::idempotency::IdempotencyTable;
use crate::runtime::journal::{IdempotencyRecord, JournalEntry, POSTED_AT_FLOOR_VERSION};
use crate::shard::event::Event;

/// Most WAL records filed in one store transaction.
pub const FILE_RECORDS_MAX: usize = 16 * 1024;

/// Bytes of log records past which the indexer stops taking queued batches into one store
/// transaction: a group holds at most this plus one writer batch (itself at most
/// `wal::Options::batch_bytes_max`, or one record larger than that), whatever the channel
/// holds beside it.
pub const FILE_BYTES_MAX: usize = 4 << 20;

/// Most expired idempotency answers of a store's older layouts removed one by one per
/// checkpoint (the current layout drops whole generations): purging keeps up with any rate the
/// log can write (a checkpoint a second) without one long pause.
pub const PURGE_ANSWERS_MAX: usize = 64 * 1024;

/// What the live indexer does with idempotency answers beside filing them.
pub(crate) struct Answers {
    /// The live table: an answer leaves it once filed.
    pub(crate) table: Arc<IdempotencyTable>,
    pub(crate) clock: Arc<dyn Clock>,
    /// The retention window; older answers are purged from the store at checkpoints.
    pub(crate) retention_ms: i64,
}

/// Where the indexer stands.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Progress {
    /// Every record up to this LSN is in the store (visible to readers, maybe not yet durable
    /// in it: the WAL covers the rest).
    pub indexed_lsn: u64,
    /// The last durable checkpoint of the store.
    pub checkpoint_lsn: u64,
    /// Set when the indexer stopped on an error; it never resumes.
    pub failed: Option<Arc<str>>,
}

/// Files records into the store: the catch-up at open and the live thread share it.
pub(crate) struct Filer {
    store: Arc<HistoryStore>,
    heads: ChainHeads,
    pending: Vec<Filed>,
    /// Answers of records the store already covers but filed without their answer (a store
    /// written before answers were filed): filed on their own at the next flush.
    backfill: Vec<(u64, IdempotencyRecord)>,
    /// The first LSN whose answer the store holds (see [`super::answers`]).
    answers_since: u64,
    /// Move events of records the store covers but filed without them (a store written before
    /// moves were filed), in LSN order: refiled at the next flush ([`super::moves`]).
    moves_backfill: Vec<Event>,
    /// The first LSN whose moves the store holds.
    moves_since: u64,
    answers: Option<Answers>,
    /// Answers filed but not yet dropped from memory ([`Filer::forget_filed_answers`]).
    filed_answers: Vec<((String, String), u64)>,
    pub(crate) indexed_lsn: u64,
    pub(crate) checkpoint_lsn: u64,
    last_checkpoint: Instant,
    checkpoint_every: Duration,
    /// When the indexer last warned that the purge waits on an answer from the future.
    warned_purge_stall: Option<Instant>,
}

impl Filer {
    pub(crate) fn new(
        store: Arc<HistoryStore>,
        checkpoint_every: Duration,
    ) -> Result<Self, StoreError> {
        let indexed = store.indexed_lsn()?;
        // A new store files every answer and move; an older one lacks those it covers.
        let answers_since = since(store.answers_since()?, indexed, || {
            store.set_answers_since(0)
        })?;
        let moves_since = since(store.moves_since()?, indexed, || store.set_moves_since(0))?;
        Ok(Filer {
            store,
            heads: ChainHeads::default(),
            pending: Vec::new(),
            backfill: Vec::new(),
            answers_since,
            moves_backfill: Vec::new(),
            moves_since,
            answers: None,
            filed_answers: Vec::new(),
            indexed_lsn: indexed,
            checkpoint_lsn: indexed,
            last_checkpoint: Instant::now(),
            checkpoint_every,
            warned_purge_stall: None,
        })
    }

    /// Drops the answers filed since the last call from the in-memory table, a second time.
    /// [`Filer::flush`] drops each once it is committed (so a reader that waited for the
    /// progress finds it gone from memory), but a shard may store an answer only after that
    /// (it stores it after appending, and the log may be faster). Called after the progress
    /// that covers them is published, this pass drops what a shard stored before it saw that
    /// progress, and a shard that stores one later sees the progress and drops it itself
    /// (`ShardActor::run`): none is left behind. Every drop is after the commit, so a lookup
    /// that misses memory finds the answer in the store.
    pub(crate) fn forget_filed_answers(&mut self) {
        if let Some(answers) = &self.answers {
            for (caller_and_key, lsn) in self.filed_answers.drain(..) {
                answers.table.forget_filed(&caller_and_key, lsn);
            }
        } else {
            self.filed_answers.clear();
        }
    }

    /// From now on, drops each answer from `answers.table` once filed and purges expired ones.
    pub(crate) fn serve_answers(&mut self, answers: Answers) {
        self.answers = Some(answers);
    }

    /// Once recovery has filed what the log and the snapshot hold, every answer in the retention
    /// window is in the store: records it covers need no backfill from now on.
    pub(crate) fn answers_complete(&mut self) -> Result<(), StoreError> {
        if self.answers_since != 0 {
            self.flush(false)?;
            self.store.set_answers_since(0)?;
            self.answers_since = 0;
        }
        Ok(())
    }

    /// Likewise for moves: once recovery has refiled the moves of the records it replayed and
    /// those an older snapshot carried, the store holds every move.
    pub(crate) fn moves_complete(&mut self) -> Result<(), StoreError> {
        if self.moves_since != 0 {
            self.flush(false)?;
            self.store.set_moves_since(0)?;
            self.moves_since = 0;
        }
        Ok(())
    }

    /// Queues one record; records at or below the indexed LSN are already filed and skipped
    /// (all but the answer and the moves, for a store written before those were filed).
    pub(crate) fn add(&mut self, lsn: u64, payload: &[u8]) -> Result<(), StoreError> {
        if lsn <= self.indexed_lsn {
            if lsn >= self.answers_since && lsn >= self.moves_since {
                return Ok(());
            }
            let entry = decode_record(lsn, payload)?;
            if lsn < self.answers_since {
                for answer in entry.idempotency {
                    if answer.response.is_some() {
                        self.backfill.push((lsn, answer));
                    }
                }
            }
            if lsn < self.moves_since {
                self.moves_backfill.extend(
                    entry
                        .events
                        .into_iter()
                        .filter(crate::runtime::history::moves::is_move_event),
                );
            }
            return Ok(());
        }
        if self.pending.last().is_some_and(|last| lsn <= last.lsn) {
            return Ok(());
        }
        let expected = self
            .pending
            .last()
            .map_or(self.indexed_lsn, |last| last.lsn)
            + 1;
        if lsn != expected {
            return Err(StoreError::Rule(format!(
                "record {lsn} arrived where {expected} was expected: the store and the log disagree"
            )));
        }
        let entry = decode_record(lsn, payload)?;
        self.pending.push(Filed {
            lsn,
            shard: entry.shard,
            at_floor: payload
                .first()
                .is_some_and(|version| *version >= POSTED_AT_FLOOR_VERSION),
            events: entry.events,
            answers: entry
                .idempotency
                .into_iter()
                .filter(|answer| answer.response.is_some())
                .collect(),
        });
        if self.pending.len() + self.backfill.len() + self.moves_backfill.len() >= FILE_RECORDS_MAX
        {
            self.flush(false)?;
        }
        Ok(())
    }

    /// Files what is queued; `checkpoint` forces a durable commit, otherwise one is made when
    /// `checkpoint_every` has passed.
    pub(crate) fn flush(&mut self, checkpoint: bool) -> Result<(), StoreError> {
        if !self.backfill.is_empty() {
            self.store.file_answers(&self.backfill)?;
            self.backfill.clear();
        }
        if !self.moves_backfill.is_empty() {
            self.store.refile_moves(&self.moves_backfill)?;
            self.moves_backfill.clear();
        }
        if !self.pending.is_empty() {
            file_batch(&self.store, &self.pending, &mut self.heads)?;
            self.indexed_lsn = self
                .pending
                .last()
                .map_or(self.indexed_lsn, |last| last.lsn);
            // Filed and visible to readers: the answers leave memory now, and once more after
            // the progress is published ([`Filer::forget_filed_answers`]).
            if let Some(answers) = &self.answers {
                for filed in self.pending.drain(..) {
                    for answer in filed.answers {
                        let id = (answer.caller, answer.key);
                        answers.table.forget_filed(&id, filed.lsn);
                        self.filed_answers.push((id, filed.lsn));
                    }
                }
            } else {
                self.pending.clear();
            }
            // After the batch is accounted for: an error here stops the indexer with nothing
            // queued that the store already holds.
            let waited = self.store.rotate_full_memtables()?;
            if waited >= Duration::from_secs(1) {
                tracing::warn!(
                    waited_ms = waited.as_millis() as u64,
                    "the history store's memtables were full: filing, and so the log, waited for its flushes"
                );
            }
        }
        let due = checkpoint || self.last_checkpoint.elapsed() >= self.checkpoint_every;
        if due && self.checkpoint_lsn < self.indexed_lsn {
            self.store.persist()?;
            self.checkpoint_lsn = self.indexed_lsn;
            self.last_checkpoint = std::time::Instant::now();
            if let Some(answers) = &self.answers {
                let cutoff = answers.clock.now_ms().saturating_sub(answers.retention_ms);
                let purged = self.store.purge_answers_before(cutoff, PURGE_ANSWERS_MAX)?;
                if purged != super::answers::Purged::default() {
                    tracing::debug!(
                        answers = purged.answers,
                        generations = purged.generations,
                        "expired idempotency answers removed"
                    );
                }
                let now = cutoff.saturating_add(answers.retention_ms);
                let stalled = self
                    .store
                    .purge_stopped_at()
                    .filter(|at| *at > now + 60_000);
                let quiet = self
                    .warned_purge_stall
                    .is_some_and(|warned| warned.elapsed() < Duration::from_secs(60));
                if let Some(at) = stalled.filter(|_| !quiet) {
                    self.warned_purge_stall = Some(Instant::now());
                    tracing::warn!(
                        decided_at_ms = at,
                        ahead_ms = at - now,
                        "an idempotency answer was decided in the future (the clock was ahead): its generation stays on disk until it expires"
                    );
                }
            }
        }
        Ok(())
    }
}

/// The first LSN whose answers (or moves) a store holds: its mark; for a store without one, 0
/// if it is new (marked so now), else the LSN after what it covers.
fn since(
    mark: Option<u64>,
    indexed: u64,
    set_zero: impl FnOnce() -> Result<(), StoreError>,
) -> Result<u64, StoreError> {
    match mark {
        Some(lsn) => Ok(lsn),
        None if indexed == 0 => set_zero().map(|()| 0),
        None => Ok(indexed + 1),
    }
}

fn decode_record(lsn: u64, payload: &[u8]) -> Result<JournalEntry, StoreError> {
    JournalEntry::decode(payload).map_err(|error| StoreError::Corrupt {
        what: "log record",
        key: lsn.to_string(),
        reason: error.to_string(),
    })
}

/// Runs the indexer until the WAL closes the channel (clean shutdown: a last checkpoint) or a
/// store error stops it.
pub(crate) fn run(
    mut filer: Filer,
    records: TapReceiver,
    progress: watch::Sender<Progress>,
    wal: wal::Wal,
    filing: Arc<super::FilingGate>,
) {
    let tick = filer.checkpoint_every.max(Duration::from_millis(10));
    let outcome = (|| -> Result<(), StoreError> {
        loop {
            let received = records.recv_timeout(tick);
            // Each batch is filed and published under the gate (`History::hold_filing`); a
            // clean stop does not wait for it.
            let _gate =
                (!matches!(received, Err(RecvTimeoutError::Disconnected))).then(|| filing.open());
            match received {
                Ok(batch) => {
                    let mut bytes = 0;
                    for record in &batch {
                        filer.add(record.lsn, &record.payload)?;
                        bytes += record.payload.len();
                    }
                    // Whatever else is already queued joins this store transaction.
                    while filer.pending.len() < FILE_RECORDS_MAX / 2 && bytes < FILE_BYTES_MAX {
                        let Ok(more) = records.try_recv() else {
                            break;
                        };
                        for record in &more {
                            filer.add(record.lsn, &record.payload)?;
                            bytes += record.payload.len();
                        }
                    }
                    filer.flush(false)?;
                }
                Err(RecvTimeoutError::Timeout) => filer.flush(false)?,
                Err(RecvTimeoutError::Disconnected) => {
                    filer.flush(true)?;
                    publish(&progress, &mut filer, &wal);
                    // A clean stop also writes every memtable out, so the next open replays
                    // none of the store's own journal (after a one-minute load that replay was
                    // most of a 2.4 s restart: skiplist inserts, by perf).
                    let started = Instant::now();
                    filer.store.flush_memtables()?;
                    tracing::info!(
                        took_ms = started.elapsed().as_millis() as u64,
                        "history store memtables flushed"
                    );
                    return Ok(());
                }
            }
            publish(&progress, &mut filer, &wal);
        }
    })();
    if let Err(error) = outcome {
        tracing::error!(%error, "the history indexer stopped; the log is poisoned and the process must restart");
        progress.send_modify(|p| p.failed = Some(error.to_string().into()));
        // Dropping the receiver makes the WAL writer's next hand-over fail, which poisons the log.
        drop(records);
    }
}

fn publish(progress: &watch::Sender<Progress>, filer: &mut Filer, wal: &wal::Wal) {
    let changed = progress.send_if_modified(|p| {
        let moved = p.indexed_lsn != filer.indexed_lsn || p.checkpoint_lsn != filer.checkpoint_lsn;
        p.indexed_lsn = filer.indexed_lsn;
        p.checkpoint_lsn = filer.checkpoint_lsn;
        moved
    });
    if changed {
        wal.set_retention_floor(filer.checkpoint_lsn);
    }
    filer.forget_filed_answers();
}
