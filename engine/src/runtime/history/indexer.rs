//! The indexer: one thread that files durable WAL records into the history store, in LSN order.
//!
//! The WAL's writer hands it every record once synced, batch by batch, over a bounded channel
//! (`wal::Options::durable_tap`); a full channel stalls the writer, so the indexer falling behind
//! slows appends instead of growing memory. Each batch (plus whatever else is already queued, up
//! to [`FILE_RECORDS_MAX`]) is one store transaction with durability off; every
//! `checkpoint_every` one commit is durable, and only then may the WAL drop segments the store
//! covers ([`wal::Wal::set_retention_floor`]).
//!
//! Progress is published on a `watch` channel: readers of history wait until the indexed LSN
//! reaches what they could have seen. A store error stops the indexer for good: it is published
//! as a failure (readers get `Unavailable`), logged, and the channel to the WAL is dropped, which
//! poisons the log so that nothing is acknowledged that history would never show.

use std::sync::Arc;
use std::time::{Duration, Instant};

use crossbeam_channel::{Receiver, RecvTimeoutError};
use tokio::sync::watch;

use super::filing::{file_batch, ChainHeads};
use super::store::{HistoryStore, StoreError};
use crate::runtime::journal::JournalEntry;
use crate::shard::event::Event;

/// Most WAL records filed in one store transaction.
pub const FILE_RECORDS_MAX: usize = 16 * 1024;

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
    pending: Vec<(u64, Vec<Event>)>,
    pub(crate) indexed_lsn: u64,
    pub(crate) checkpoint_lsn: u64,
    last_checkpoint: Instant,
    checkpoint_every: Duration,
}

impl Filer {
    pub(crate) fn new(
        store: Arc<HistoryStore>,
        checkpoint_every: Duration,
    ) -> Result<Self, StoreError> {
        let indexed = store.indexed_lsn()?;
        Ok(Filer {
            store,
            heads: ChainHeads::default(),
            pending: Vec::new(),
            indexed_lsn: indexed,
            checkpoint_lsn: indexed,
            last_checkpoint: Instant::now(),
            checkpoint_every,
        })
    }

    /// Queues one record; records at or below the indexed LSN are already filed and skipped.
    pub(crate) fn add(&mut self, lsn: u64, payload: &[u8]) -> Result<(), StoreError> {
        if lsn <= self.indexed_lsn || self.pending.last().is_some_and(|(last, _)| lsn <= *last) {
            return Ok(());
        }
        let expected = self
            .pending
            .last()
            .map_or(self.indexed_lsn, |(last, _)| *last)
            + 1;
        if lsn != expected {
            return Err(StoreError::Rule(format!(
                "record {lsn} arrived where {expected} was expected: the store and the log disagree"
            )));
        }
        let entry = JournalEntry::decode(payload).map_err(|error| StoreError::Corrupt {
            what: "log record",
            key: lsn.to_string(),
            reason: error.to_string(),
        })?;
        self.pending.push((lsn, entry.events));
        if self.pending.len() >= FILE_RECORDS_MAX {
            self.flush(false)?;
        }
        Ok(())
    }

    /// Files what is queued; `checkpoint` forces a durable commit, otherwise one is made when
    /// `checkpoint_every` has passed.
    pub(crate) fn flush(&mut self, checkpoint: bool) -> Result<(), StoreError> {
        if !self.pending.is_empty() {
            file_batch(&self.store, &self.pending, &mut self.heads)?;
            self.indexed_lsn = self
                .pending
                .last()
                .map_or(self.indexed_lsn, |(lsn, _)| *lsn);
            self.pending.clear();
        }
        let due = checkpoint || self.last_checkpoint.elapsed() >= self.checkpoint_every;
        if due && self.checkpoint_lsn < self.indexed_lsn {
            self.store.persist()?;
            self.checkpoint_lsn = self.indexed_lsn;
            self.last_checkpoint = std::time::Instant::now();
        }
        Ok(())
    }
}

/// Runs the indexer until the WAL closes the channel (clean shutdown: a last checkpoint) or a
/// store error stops it.
pub(crate) fn run(
    mut filer: Filer,
    records: Receiver<Vec<wal::DurableRecord>>,
    progress: watch::Sender<Progress>,
    wal: wal::Wal,
) {
    let tick = filer.checkpoint_every.max(Duration::from_millis(10));
    let outcome = (|| -> Result<(), StoreError> {
        loop {
            match records.recv_timeout(tick) {
                Ok(batch) => {
                    for record in &batch {
                        filer.add(record.lsn, &record.payload)?;
                    }
                    // Whatever else is already queued joins this store transaction.
                    while let Ok(more) = records.try_recv() {
                        for record in &more {
                            filer.add(record.lsn, &record.payload)?;
                        }
                        if filer.pending.len() >= FILE_RECORDS_MAX / 2 {
                            break;
                        }
                    }
                    filer.flush(false)?;
                }
                Err(RecvTimeoutError::Timeout) => filer.flush(false)?,
                Err(RecvTimeoutError::Disconnected) => {
                    filer.flush(true)?;
                    publish(&progress, &filer, &wal);
                    return Ok(());
                }
            }
            publish(&progress, &filer, &wal);
        }
    })();
    if let Err(error) = outcome {
        tracing::error!(%error, "the history indexer stopped; the log is poisoned and the process must restart");
        progress.send_modify(|p| p.failed = Some(error.to_string().into()));
        // Dropping the receiver makes the WAL writer's next hand-over fail, which poisons the log.
        drop(records);
    }
}

fn publish(progress: &watch::Sender<Progress>, filer: &Filer, wal: &wal::Wal) {
    let changed = progress.send_if_modified(|p| {
        let moved = p.indexed_lsn != filer.indexed_lsn || p.checkpoint_lsn != filer.checkpoint_lsn;
        p.indexed_lsn = filer.indexed_lsn;
        p.checkpoint_lsn = filer.checkpoint_lsn;
        moved
    });
    if changed {
        wal.set_retention_floor(filer.checkpoint_lsn);
    }
}
