//! The engine's settings, the errors it answers with, and what the API hands it (a renderer for
//! idempotent answers, idempotency keys).

use crate::shard::command::Outcome;
use crate::values::error::Rejection;
use std::path::PathBuf;
use std::sync::Arc;
use std::time::Duration;

/// Renders the answer to an idempotent request. The bytes are logged with the command and
/// replayed verbatim to retries, so rendering must be a pure function of `(route, result)`.
/// The API supplies it; the engine never looks inside.
pub trait Renderer: Send + Sync + 'static {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8>;
}

/// Settings of an engine.
#[derive(Debug, Clone)]
pub struct EngineConfig {
    /// The WAL and snapshots live in `data_dir/wal`.
    pub data_dir: PathBuf,
    /// Shard actors (one Arbiter thread each). Fixed for the life of a data directory.
    pub shard_count: u32,
    pub wal: wal::Options,
    /// Messages a shard's mailbox holds before senders wait (back-pressure).
    pub mailbox_capacity: usize,
    /// At most this many commands a shard decided back to back share one WAL record
    /// (`runtime::actor`, "Coalesced records"); 1 logs every command alone
    /// (`--coalesce-max`).
    pub coalesce_max: usize,
    /// How often each shard expires overdue holds.
    pub hold_tick: Duration,
    /// Take a snapshot after this many commands logged since the last one, a coalesced record
    /// counting each of its commands and a batch each of its items (0: only on demand). Named
    /// when a record held one command.
    pub snapshot_every_records: u64,
    /// How much a periodic snapshot's thread lowers its scheduling priority, 0 to 19 (added to
    /// the process's nice value; `--snapshot-nice`, default [`super::SNAPSHOT_NICE`]). A
    /// snapshot someone waits for (on demand, or a stop's) keeps the process's priority.
    pub snapshot_nice: i32,
    /// What the WAL writes through: the real file system, or a test's (to hold back fsyncs).
    pub file_system: WalFileSystem,
    /// The history store (`data_dir/history/`) and its indexer.
    pub history: HistoryConfig,
    /// How long an idempotency key's answer is kept after it was decided; a retry after it runs
    /// as a new request (`--idempotency-retention`).
    pub idempotency_retention: Duration,
}

/// The file system under the WAL (see [`EngineConfig::file_system`]).
#[derive(Clone)]
pub struct WalFileSystem(pub Arc<dyn wal::fs::FileSystem>);

impl Default for WalFileSystem {
    fn default() -> Self {
        WalFileSystem(Arc::new(wal::fs::StdFs))
    }
}

impl std::fmt::Debug for WalFileSystem {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("WalFileSystem")
    }
}

/// Commands per record a shard gathers at most by default: enough to take in one record what
/// 64 connections leave queued, few enough that the first command of a record waits for at most
/// a few dozen others to be decided (microseconds each) before it is appended.
pub const COALESCE_MAX_DEFAULT: usize = 32;

/// The largest WAL record the engine writes: a transfer batch's record holds up to 8,190
/// items' events and, under a key, its whole rendered answer (`runtime::batch` sizes every record
/// below it, and refuses a batch that could not fit). 16 MiB fits 8,190 items with short texts
/// atomic (their events and, if the batch fails late, their undoing) or keyed (events and
/// answer); the log's own default, 4 MiB, fits about a third of that.
pub const RECORD_BYTES_MAX: u32 = 16 << 20;

impl EngineConfig {
    /// Defaults for a data directory: one shard, durable log, snapshot every 1M records.
    #[must_use]
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            shard_count: 1,
            wal: wal::Options {
                record_bytes_max: RECORD_BYTES_MAX,
                ..wal::Options::default()
            },
            mailbox_capacity: 4096,
            coalesce_max: COALESCE_MAX_DEFAULT,
            hold_tick: Duration::from_secs(1),
            snapshot_every_records: 1_000_000,
            snapshot_nice: super::SNAPSHOT_NICE,
            file_system: WalFileSystem::default(),
            history: HistoryConfig::default(),
            idempotency_retention: Duration::from_millis(
                super::idempotency::RETENTION_MS.unsigned_abs(),
            ),
        }
    }

    /// [`EngineConfig::idempotency_retention`] in milliseconds.
    #[must_use]
    pub fn idempotency_retention_ms(&self) -> i64 {
        i64::try_from(self.idempotency_retention.as_millis()).unwrap_or(i64::MAX)
    }

    /// The WAL's directory.
    #[must_use]
    pub fn wal_dir(&self) -> PathBuf {
        self.data_dir.join("wal")
    }
}

/// Why the engine did not do what was asked.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum EngineError {
    /// The business rules refused the command; nothing changed.
    #[error(transparent)]
    Rejected(#[from] Rejection),
    /// The idempotency key was used before for a different request.
    #[error("the idempotency key was already used for a different request")]
    IdempotencyKeyReused,
    /// A request with this idempotency key is still being processed.
    #[error("a request with this idempotency key is still in progress")]
    IdempotencyInFlight,
    /// The engine cannot serve (log poisoned, shard stopped, shutting down). Retry after restart.
    #[error("the ledger is unavailable: {0}")]
    Unavailable(String),
}

/// Who asked, under which key, for what (the API computes the fingerprint).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct IdempotencyKey {
    pub caller: String,
    pub key: String,
    /// SHA-256 of the request's canonical encoding ([`super::fingerprint`]).
    pub fingerprint: [u8; 32],
    /// What the previous release hashed for the same request besides the command, so a retry of
    /// a key it answered still matches after the upgrade ([`LegacyRequest`]). Keys live 24 h;
    /// this goes with the release after the one that introduced the canonical fingerprint. New
    /// records always store [`IdempotencyKey::fingerprint`].
    pub legacy: Option<LegacyRequest>,
    /// Passed back to the [`Renderer`].
    pub route: u16,
}

/// The request as the release before the canonical fingerprint hashed it: SHA-256 over the
/// operation, its path parameters and the command's `Debug` text ([`LegacyRequest::fingerprint`]).
/// Computed only when a stored answer under the key has another fingerprint than the canonical
/// one (a retry of a key that release answered, or a reused key): formatting the command was a
/// few percent of the server's CPU when every keyed request paid for it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LegacyRequest {
    /// The route's operation id.
    pub operation: &'static str,
    /// The path parameters, in the route's order.
    pub params: Vec<(String, String)>,
}

impl LegacyRequest {
    /// The previous release's fingerprint of this request carrying `command`.
    #[must_use]
    pub fn fingerprint(&self, command: &crate::shard::command::Command) -> [u8; 32] {
        use sha2::{Digest, Sha256};
        let mut hasher = Sha256::new();
        hasher.update(self.operation.as_bytes());
        for (name, value) in &self.params {
            hasher.update(b"\0");
            hasher.update(name.as_bytes());
            hasher.update(b"=");
            hasher.update(value.as_bytes());
        }
        hasher.update(b"\0");
        hasher.update(format!("{command:?}").as_bytes());
        hasher.finalize().into()
    }
}

/// The answer to an idempotent request: the rendered bytes, and whether they are a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub response: Vec<u8>,
    pub replayed: bool,
}

pub(crate) fn unavailable(error: impl std::fmt::Display) -> EngineError {
    EngineError::Unavailable(error.to_string())
}

/// Settings of the history store and its indexer.
#[derive(Clone, Debug)]
pub struct HistoryConfig {
    /// How often the store commits durably (a checkpoint); the WAL keeps what came after.
    pub checkpoint_every: Duration,
    /// The store's page cache.
    pub cache_bytes: usize,
    /// Bytes of durable records that may wait for the indexer before the WAL writer waits
    /// (`wal::tap`): ~2 s of a soak's log, enough for the indexer's brief pauses (preempted on
    /// busy cores, or waiting on its store's journal) not to stop the log's syncs
    /// (BENCHMARKS.md, "A channel bounded by bytes").
    pub queue_bytes_max: usize,
}

impl Default for HistoryConfig {
    fn default() -> Self {
        HistoryConfig {
            checkpoint_every: Duration::from_secs(1),
            cache_bytes: 64 << 20,
            queue_bytes_max: 16 << 20,
        }
    }
}
