//! Snapshots at run time: taken every `snapshot_every_records` logged commands (or on demand)
//! without stopping traffic; each shard's image is built on its own thread, the directory's on
//! the lead's.
//!
//! The pace counts commands, not records: a restart replays what the log holds since the
//! snapshot, and a record a shard gathered holds several commands (`runtime::actor`,
//! "Coalesced records"), a batch's record up to thousands. Counted in records, coalescing
//! made snapshots ~6 times rarer under load, so the log kept ~6 times more segments and a
//! restart replayed ~6 times more.
//!
//! A periodic snapshot that fails (a full disk, an encoding bug) is not retried by the next
//! request: the next periodic attempt waits [`SNAPSHOT_BACKOFF_BASE_MS`], doubling with each
//! failure in a row up to [`SNAPSHOT_BACKOFF_MAX_MS`], and each failure is logged with the wait.
//! A success resets it. An on-demand snapshot ([`Engine::snapshot`]) always runs at once.
//!
//! A periodic snapshot's thread lowers its own scheduling priority ([`SNAPSHOT_NICE`] by
//! default) before it replays: on a machine the load keeps busy, the replay takes the CPU the
//! requests leave (a soak keeps 2 cores 82–92 % busy) instead of a share of theirs. A snapshot
//! someone waits for (on demand, or a stop's) keeps the process's priority. What every
//! snapshot cost, CPU and wall time, bytes and failures, is counted for `/metrics`
//! ([`Engine::snapshot_stats`]).

use crate::runtime::config::{unavailable, EngineError};
use crate::runtime::engine::Engine;
use crate::runtime::image;
use crate::runtime::recovery;
use crate::shard::state::Shard;

/// How much a periodic snapshot's thread lowers its scheduling priority by default (added to the
/// process's nice value, at most 19; `EngineConfig::snapshot_nice`). Linux applies
/// `setpriority` on a thread id to that thread only. At nice +10 a thread weighs ~1/10 of a
/// normal one in the kernel's fair scheduler: it runs on what the requests leave.
pub const SNAPSHOT_NICE: i32 = 10;

/// What one snapshot that was written cost.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotCost {
    /// The LSN it covers.
    pub covered_lsn: u64,
    /// The image's size.
    pub bytes: u64,
    /// From the start of the snapshot (once claimed) to the image being durable.
    pub wall: std::time::Duration,
    /// CPU time of the thread that replayed, encoded and wrote it.
    pub cpu: std::time::Duration,
    /// The nice value that thread ran at (`None`: it could not be read).
    pub nice: Option<i32>,
}

/// What the snapshots since the engine opened cost (a restart starts from zero).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct SnapshotStats {
    /// Whether one is being built now.
    pub running: bool,
    /// Snapshots written.
    pub written: u64,
    /// Snapshots that failed (each is logged with the error).
    pub failed: u64,
    /// Wall time of every snapshot that ended, written or failed.
    pub wall_total: std::time::Duration,
    /// CPU time of every snapshot that ended, written or failed.
    pub cpu_total: std::time::Duration,
    /// The newest snapshot written.
    pub last: Option<SnapshotCost>,
}

/// The wait after the first failed periodic snapshot.
pub(crate) const SNAPSHOT_BACKOFF_BASE_MS: i64 = 1_000;
/// The longest wait between failed periodic snapshots.
pub(crate) const SNAPSHOT_BACKOFF_MAX_MS: i64 = 5 * 60 * 1_000;

/// How long to wait after `failures` failed periodic snapshots in a row (at least 1).
#[must_use]
pub(crate) fn snapshot_backoff_ms(failures: u32) -> i64 {
    let doublings = failures.saturating_sub(1).min(30);
    SNAPSHOT_BACKOFF_BASE_MS
        .saturating_mul(1i64 << doublings)
        .min(SNAPSHOT_BACKOFF_MAX_MS)
}

/// Whether a periodic snapshot is due: none running, `every` commands logged since the last
/// one (`commands_logged` counts them since the engine opened), and any backoff after a failure
/// passed.
pub(crate) fn periodic_snapshot_due(
    state: &crate::runtime::engine::SnapshotState,
    commands_logged: u64,
    every: u64,
    now_ms: i64,
) -> bool {
    every != 0
        && !state.running
        && commands_logged >= state.commands_at_last.saturating_add(every)
        && now_ms >= state.retry_at_ms
}

impl Engine {
    /// Takes a snapshot now and returns the LSN it covers (the durable LSN when it started).
    ///
    /// The live shards are not touched: a background thread loads the previous snapshot, replays
    /// the durable log after it up to that LSN (the same code recovery runs, so the result equals
    /// the live state at that LSN, by determinism), and writes the image. Traffic never pauses;
    /// the cost grows with the log written since the last snapshot, not with history.
    pub async fn snapshot(&self) -> Result<u64, EngineError> {
        if !self.claim_snapshot() {
            return Err(EngineError::Unavailable(
                "a snapshot is already being taken".into(),
            ));
        }
        self.snapshot_claimed(0).await
    }

    /// A snapshot of everything logged so far, for a stop: if one is already being taken (a
    /// periodic one), waits for it to finish instead of giving up, then takes another if records
    /// were logged after what that one covered. `None`: nothing was left to cover.
    pub async fn snapshot_when_free(&self) -> Result<Option<u64>, EngineError> {
        loop {
            if self.records_since_snapshot() == 0 {
                return Ok(None);
            }
            // Registered before the claim is tried, so a snapshot finishing in between is not
            // missed.
            let mut finished = std::pin::pin!(self.inner.snapshot_finished.notified());
            finished.as_mut().enable();
            if self.claim_snapshot() {
                return self.snapshot_claimed(0).await.map(Some);
            }
            finished.await;
        }
    }
    /// Log records appended since the newest snapshot (or since the start of the log): what a
    /// restart would replay.
    #[must_use]
    pub fn records_since_snapshot(&self) -> u64 {
        let last = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .last_lsn;
        self.inner.wal.last_lsn().saturating_sub(last)
    }

    /// Marks a snapshot as running; false if one already is.
    pub(crate) fn claim_snapshot(&self) -> bool {
        let mut state = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.running {
            return false;
        }
        state.running = true;
        state.commands_at_claim = self
            .inner
            .commands_logged
            .load(std::sync::atomic::Ordering::Relaxed);
        true
    }
    /// What the snapshots since the engine opened cost, and whether one is running.
    #[must_use]
    pub fn snapshot_stats(&self) -> SnapshotStats {
        let state = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        SnapshotStats {
            running: state.running,
            ..state.stats
        }
    }

    /// Runs a claimed snapshot, its thread's priority lowered by `nice` (0: the process's), and
    /// releases the claim.
    pub(crate) async fn snapshot_claimed(&self, nice: i32) -> Result<u64, EngineError> {
        let started = std::time::Instant::now();
        let result = self.build_snapshot(nice).await;
        let wall = started.elapsed();
        let mut state = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.running = false;
        self.inner.snapshot_finished.notify_waiters();
        state.stats.wall_total = state.stats.wall_total.saturating_add(wall);
        // A thread that never ran (it could not be spawned) or panicked reports no CPU time.
        let (result, cpu) = match result {
            Ok(built) => (built.result, built.cpu),
            Err(error) => (Err(error), std::time::Duration::ZERO),
        };
        state.stats.cpu_total = state.stats.cpu_total.saturating_add(cpu);
        match result {
            Ok(cost) => {
                state.last_lsn = cost.covered_lsn;
                state.commands_at_last = state.commands_at_claim;
                state.failures = 0;
                state.retry_at_ms = i64::MIN;
                let cost = SnapshotCost { wall, ..cost };
                state.stats.written = state.stats.written.saturating_add(1);
                state.stats.last = Some(cost);
                Ok(cost.covered_lsn)
            }
            Err(error) => {
                state.stats.failed = state.stats.failed.saturating_add(1);
                state.failures = state.failures.saturating_add(1);
                let wait_ms = snapshot_backoff_ms(state.failures);
                state.retry_at_ms = self.inner.clock.now_ms().saturating_add(wait_ms);
                tracing::error!(%error, failures_in_a_row = state.failures, retry_in_ms = wait_ms, "a snapshot failed; the next periodic attempt waits");
                Err(error)
            }
        }
    }

    /// Builds the image on a thread of its own, its priority lowered by `nice`, and returns what
    /// it covers and cost, or why it failed with the CPU it spent all the same (`wall` is the
    /// caller's to fill). The outer error: the thread could not be spawned, or panicked.
    async fn build_snapshot(&self, nice: i32) -> Result<Built, EngineError> {
        let target = self.inner.wal.durable_lsn();
        let cutoff = self
            .inner
            .clock
            .now_ms()
            .saturating_sub(self.inner.config.idempotency_retention_ms());
        self.inner.idempotency.purge_before(cutoff);
        let wal = self.inner.wal.clone();
        let dir = self.inner.config.wal_dir();
        let count = self.shard_count();
        let record_bytes_max = self.inner.config.wal.record_bytes_max;
        let (tx, rx) = tokio::sync::oneshot::channel();
        std::thread::Builder::new()
            .name("snapshot".into())
            .spawn(move || {
                let started = std::time::Instant::now();
                let nice = yield_to_requests(nice);
                let written = (|| -> Result<(std::path::PathBuf, u64), EngineError> {
                    let mut state = recovery::Replayed::load(&dir, count).map_err(unavailable)?;
                    let from = state.replay_from();
                    wal::reader::read_range(&dir, record_bytes_max, from, target, &mut |record| state.apply(record))
                        .map_err(unavailable)?;
                    let captures: Vec<(u64, Shard)> = state.shards.into_iter().map(|shard| (target, shard)).collect();
                    let keys = state.table.pending_records();
                    let payload = image::encode(&captures, &state.directory, &keys).map_err(unavailable)?;
                    let path = wal.checkpoint(target, &payload).map_err(unavailable)?;
                    Ok((path, payload.len() as u64))
                })();
                drop(wal);
                let cpu = thread_cpu_time();
                if let Ok((path, bytes)) = &written {
                    tracing::info!(snapshot = %path.display(), covered_lsn = target, bytes, took_ms = started.elapsed().as_millis() as u64, cpu_ms = cpu.as_millis() as u64, ?nice, "snapshot written");
                }
                let _ = tx.send(Built {
                    result: written.map(|(_, bytes)| SnapshotCost {
                        covered_lsn: target,
                        bytes,
                        wall: std::time::Duration::ZERO,
                        cpu,
                        nice,
                    }),
                    cpu,
                });
            })
            .map_err(unavailable)?;
        rx.await.map_err(unavailable)
    }
    /// Starts a snapshot in the background when enough commands were logged since the last one.
    pub(crate) fn maybe_snapshot(&self) {
        let every = self.inner.config.snapshot_every_records;
        if every == 0 {
            return;
        }
        let last = self
            .inner
            .commands_logged
            .load(std::sync::atomic::Ordering::Relaxed);
        {
            let state = self
                .inner
                .snapshot_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if !periodic_snapshot_due(&state, last, every, self.inner.clock.now_ms()) {
                return;
            }
        }
        // Claimed before spawning, so requests finishing meanwhile do not start more.
        if !self.claim_snapshot() {
            return;
        }
        let Some(arbiter) = self.inner.arbiters.first() else {
            self.inner
                .snapshot_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .running = false;
            return;
        };
        let engine = self.clone();
        arbiter.spawn(async move {
            // A failure is logged, with its backoff, by `snapshot_claimed`.
            let _ = engine
                .snapshot_claimed(engine.inner.config.snapshot_nice)
                .await;
        });
    }
}

/// What a snapshot's thread sends back: the snapshot written, or why not, and its CPU time.
struct Built {
    result: Result<SnapshotCost, EngineError>,
    cpu: std::time::Duration,
}

/// Lowers the calling thread's scheduling priority by `by` (nothing for 0) and returns the nice
/// value it then runs at. A refusal (a sandbox that forbids it) is logged and changes nothing
/// else: the snapshot is built all the same.
pub(crate) fn yield_to_requests(by: i32) -> Option<i32> {
    let thread = rustix::thread::gettid();
    let result = rustix::process::getpriority_process(Some(thread)).and_then(|nice| {
        if by <= 0 {
            return Ok(nice);
        }
        let lowered = nice.saturating_add(by).min(19);
        rustix::process::setpriority_process(Some(thread), lowered).map(|()| lowered)
    });
    match result {
        Ok(nice) => Some(nice),
        Err(error) => {
            if by > 0 {
                tracing::warn!(%error, "the snapshot thread could not lower its priority; it competes with requests");
            }
            None
        }
    }
}

/// CPU time the calling thread has used.
fn thread_cpu_time() -> std::time::Duration {
    let spent = rustix::time::clock_gettime(rustix::time::ClockId::ThreadCPUTime);
    std::time::Duration::new(
        u64::try_from(spent.tv_sec).unwrap_or(0),
        u32::try_from(spent.tv_nsec).unwrap_or(0),
    )
}
