//! History on disk: what a read needs to show (wallet transactions, ledger entries, holds), kept
//! in an embedded store ([`store`], fjall) by an indexer ([`indexer`]) that files durable WAL
//! records in LSN order ([`filing`]). The WAL stays the only commit point: the store's own
//! commits are not synced except at checkpoints, and recovery refiles the log after the last
//! checkpoint (ARCHITECTURE.md: indexer → history store).
//!
//! # Reading
//!
//! A read of history first waits until the indexer has filed every record the caller could have
//! seen ([`History::caught_up`]), the same rule as the durability wait of every answer
//! (invariant 2 and 10): a client that saw a transfer acknowledged finds it in its statement.
//!
//! # Recovery
//!
//! On open the store names the LSN it covers durably; the log is replayed from there (or from
//! the snapshot, if older) and the records the store lacks are filed before the engine serves.
//! The WAL keeps every segment above the store's last checkpoint
//! ([`wal::Wal::set_retention_floor`]), so that replay is always possible; a store that is behind
//! what the log still holds is refused, never served.

pub mod answers;
mod bounds;
mod dated;
mod epochs;
pub(crate) mod filing;
pub mod indexer;
pub mod moves;
pub(crate) mod pages;
mod reads;
mod remembered;
mod report_days;
#[cfg(test)]
mod report_tests;
mod reports;
pub mod store;
mod uuid_keys;
mod writes;

use std::sync::Arc;

use tokio::sync::watch;

pub use self::answers::StoredAnswer;
pub(crate) use self::bounds::HistoryBounds;
pub use self::indexer::Progress;
pub use self::report_days::Recount;
pub use self::store::{
    ForegroundReadStats, HistoryStore, StoreError, StoreMemory, StorePage, WalletCounts,
    SLOW_FOREGROUND_READ, STORE_DIR,
};
use crate::runtime::config::EngineError;
pub use crate::runtime::config::HistoryConfig;

/// The read side of history: the store and the indexer's progress. Cheap to clone.
#[derive(Clone, Debug)]
pub struct History {
    store: Arc<HistoryStore>,
    progress: watch::Receiver<Progress>,
    /// Whether the indexer may file (held back only by tests).
    #[cfg_attr(not(test), allow(dead_code))]
    filing: Arc<FilingGate>,
}

impl History {
    pub(crate) fn new(
        store: Arc<HistoryStore>,
        progress: watch::Receiver<Progress>,
        filing: Arc<FilingGate>,
    ) -> Self {
        History {
            store,
            progress,
            filing,
        }
    }

    /// Holds the indexer back until the returned hold drops (tests only): once this returns,
    /// the indexer has finished and published the batch it was filing, and files and publishes
    /// nothing more meanwhile, so [`History::progress`] stands still (records queue up, and
    /// past the indexer's channel the log waits). Holds nest. A clean stop does not wait for a
    /// hold, but a log stalled on a full channel does: drop holds before shutting down.
    #[cfg(test)]
    #[must_use = "filing resumes when the hold drops"]
    pub(crate) fn hold_filing(&self) -> FilingHold {
        *self.filing.lock() += 1;
        FilingHold(self.filing.clone())
    }

    /// The store, for reads that have waited ([`History::caught_up`]).
    #[must_use]
    pub fn store(&self) -> &HistoryStore {
        &self.store
    }

    /// Where the indexer stands now.
    #[must_use]
    pub fn progress(&self) -> Progress {
        self.progress.borrow().clone()
    }

    /// Waits until every record up to `lsn` is in the store; `Unavailable` if the indexer
    /// stopped.
    pub async fn caught_up(&self, lsn: u64) -> Result<(), EngineError> {
        let mut progress = self.progress.clone();
        let reached = progress
            .wait_for(|p| p.indexed_lsn >= lsn || p.failed.is_some())
            .await
            .map_err(|_| EngineError::Unavailable("the history indexer stopped".into()))?;
        match &reached.failed {
            Some(reason) => Err(EngineError::Unavailable(format!(
                "the history indexer stopped: {reason}"
            ))),
            None => Ok(()),
        }
    }
}

/// Whether the indexer may file: it files and publishes each batch holding this gate's lock,
/// after waiting while a test holds filing back ([`History::hold_filing`]). Outside tests
/// nothing holds it, and the lock is uncontended.
#[derive(Debug, Default)]
pub(crate) struct FilingGate {
    /// How many holds are alive.
    holds: std::sync::Mutex<usize>,
    released: std::sync::Condvar,
}

impl FilingGate {
    fn lock(&self) -> std::sync::MutexGuard<'_, usize> {
        self.holds
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }

    /// Waits while filing is held, then answers the lock to file under.
    pub(crate) fn open(&self) -> std::sync::MutexGuard<'_, usize> {
        let mut holds = self.lock();
        while *holds > 0 {
            holds = self
                .released
                .wait(holds)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        holds
    }
}

/// Filing held back ([`History::hold_filing`]) until this drops.
#[cfg(test)]
#[derive(Debug)]
pub(crate) struct FilingHold(Arc<FilingGate>);

#[cfg(test)]
impl Drop for FilingHold {
    fn drop(&mut self) {
        let mut holds = self.0.lock();
        *holds = holds.saturating_sub(1);
        if *holds == 0 {
            self.0.released.notify_all();
        }
    }
}

/// Maps a store failure to what the engine answers.
pub(crate) fn unavailable(error: StoreError) -> EngineError {
    EngineError::Unavailable(error.to_string())
}
