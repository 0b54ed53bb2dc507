//! [`Engine`]: the handle the API holds. It sends each command to the shard that owns it (routing in
//! `super::routing`, cross-shard protocols in `super::cross_shard`), keeps idempotency and reads
//! shards and the directory; snapshots are in `super::snapshot`, opening in `super::recovery`.

use crate::identity::directory::{Customer, Directory, DirectoryCommand, DirectoryEvent};
use crate::ledger::view::WalletView;
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::runtime::actor::{
    Answer, Claim, Execute, ExecuteDirectory, Executed, Peek, PeekDirectory, Read, ReadDirectory,
    ShardActor,
};
use crate::runtime::clock::Clock;
use crate::runtime::config::{unavailable, EngineConfig, EngineError, IdempotencyKey, Reply};
use crate::runtime::history::{History, HistoryStore, StoreError, StoredAnswer};
use crate::runtime::idempotency::{same_request, Begin, IdempotencyTable};
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::{Command, CreateWallet, Outcome};
use crate::shard::state::Shard;
use crate::values::currency::Currency;
use crate::values::ids::owner_shard;
use crate::values::ids::{shard_of, WalletId};
use actix::{Addr, ArbiterHandle};
use std::sync::atomic::Ordering;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;

pub(crate) struct Inner {
    pub(crate) shards: Vec<Addr<ShardActor>>,
    /// Commands sent to each shard and not yet answered (a gauge for metrics).
    pub(crate) in_flight: Vec<std::sync::atomic::AtomicU64>,
    /// The Arbiter of each shard, for work that must outlive its caller.
    pub(crate) arbiters: Vec<ArbiterHandle>,
    pub(crate) wal: wal::Wal,
    pub(crate) clock: Arc<dyn Clock>,
    pub(crate) idempotency: Arc<IdempotencyTable>,
    pub(crate) config: EngineConfig,
    pub(crate) system: actix::System,
    /// The first shard failure (memory and log may disagree), set by the shard.
    pub(crate) failure: Arc<std::sync::OnceLock<String>>,
    pub(crate) actors: Mutex<Option<JoinHandle<()>>>,
    /// History on disk and the indexer that files it.
    pub(crate) history: History,
    pub(crate) store: Arc<HistoryStore>,
    /// Whether a runtime worker is in an idempotency lookup of the store now
    /// ([`Engine::filed_answer`]).
    pub(crate) inline_lookup: std::sync::atomic::AtomicBool,
    /// One turn for a lookup in the runtime's blocking pool ([`Engine::filed_answer`]).
    pub(crate) pool_lookup: Arc<tokio::sync::Semaphore>,
    pub(crate) indexer: Mutex<Option<JoinHandle<()>>>,
    /// Commands the shards logged since the engine opened (a record a shard gathered counts
    /// each of its commands, a batch each of its items): periodic snapshots are paced by it.
    pub(crate) commands_logged: Arc<std::sync::atomic::AtomicU64>,
    /// Where the last snapshot stands, to trigger the next.
    pub(crate) snapshot_state: Mutex<SnapshotState>,
    /// Woken whenever a snapshot finishes (taken or failed): [`Engine::snapshot_when_free`].
    pub(crate) snapshot_finished: tokio::sync::Notify,
    /// Wallet scopes already looked up. They never change once a wallet exists (wallets are
    /// never deleted), so a permission check needs no trip to the shard's thread after the first
    /// one: on the hot paths that trip was a second cross-thread round trip per request. About
    /// [`WALLET_SCOPES_MAX`] at most; those not used lately are forgotten ([`super::Forgetful`]).
    pub(crate) wallet_scopes: super::Forgetful<WalletId, WalletScope>,
    /// Every wallet's history bound, written by its shard, read by history reads without a
    /// message to the shard ([`Engine::holder_for_history`]).
    pub(crate) history_bounds: Arc<super::history::HistoryBounds>,
    /// Cross-shard moves recovery could not finish and left reserved (see
    /// [`crate::runtime::recovery::QuarantinedMove`]).
    pub(crate) quarantined: Mutex<Vec<crate::runtime::recovery::QuarantinedMove>>,
}

/// A wallet scope never changes: every remembered one is served and kept.
fn always(_: &WalletScope) -> bool {
    true
}

/// Most wallet scopes remembered, about (a full memory costs ~100 MiB with the hash table's
/// spare room). Past half of it, those not used in the last two generations are forgotten
/// ([`super::Forgetful`]); the first version started over from empty, so with more wallets in
/// use than this every one of them missed again at once.
pub(crate) const WALLET_SCOPES_MAX: usize = 1 << 20;

impl Inner {
    /// Stops the actor system, then flushes and closes the log. Idempotent.
    fn stop(&self) -> Result<(), EngineError> {
        self.system.stop();
        let actors = self
            .actors
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        // On one of the engine's own Arbiter threads (the last handle dropped by a background
        // snapshot, say) joining would wait for this very thread: let the system wind down alone.
        let on_engine_thread = actix::System::try_current().is_some();
        if let (Some(handle), false) = (actors, on_engine_thread) {
            let _ = handle.join();
        }
        let closed = self.wal.clone().close().map_err(unavailable);
        // The writer has stopped, so the indexer sees its channel close, checkpoints and ends.
        let indexer = self
            .indexer
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .take();
        if let (Some(handle), false) = (indexer, on_engine_thread) {
            let _ = handle.join();
        }
        self.store.close();
        closed
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::error!(%error, "closing the engine failed");
        }
    }
}

/// Releases an idempotency claim when dropped, unless the command logged the key (then the
/// table holds its pending or answered record, which [`IdempotencyTable::abandon`] leaves alone).
pub(crate) struct ClaimGuard {
    pub(crate) table: Arc<IdempotencyTable>,
    pub(crate) caller: String,
    pub(crate) key: String,
}

impl Drop for ClaimGuard {
    fn drop(&mut self) {
        self.table.abandon(&self.caller, &self.key);
    }
}

/// What [`Engine::claim`] found for a key.
pub(crate) enum Claimed {
    /// New: the request runs, holding the claim, and logs this (pending) record with it.
    Fresh(ClaimGuard, IdempotencyRecord),
    /// Answered before: the stored answer, replayed.
    Answered(Reply),
}

#[derive(Default)]
pub(crate) struct SnapshotState {
    pub(crate) last_lsn: u64,
    /// [`Inner::commands_logged`] when the newest snapshot that succeeded was claimed: periodic
    /// snapshots come every `snapshot_every_records` commands after it.
    pub(crate) commands_at_last: u64,
    /// [`Inner::commands_logged`] when the running snapshot was claimed.
    pub(crate) commands_at_claim: u64,
    pub(crate) running: bool,
    /// Periodic attempts that failed in a row (0 after a success).
    pub(crate) failures: u32,
    /// No periodic attempt starts before this (engine clock, unix ms) after a failure.
    pub(crate) retry_at_ms: i64,
    /// What the snapshots since the engine opened cost ([`Engine::snapshot_stats`]).
    pub(crate) stats: crate::runtime::snapshot::SnapshotStats,
}

/// One command counted on a shard's queue-depth gauge (see [`Engine::queued_on`]).
pub(crate) struct QueuedCommand<'a>(&'a std::sync::atomic::AtomicU64);

impl Drop for QueuedCommand<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, std::sync::atomic::Ordering::Relaxed);
    }
}

/// The engine handle: cheap to clone, all clones share the same shards and log.
#[derive(Clone)]
pub struct Engine {
    pub(crate) inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.inner.shards.len())
            .field("wal", &self.inner.wal)
            .finish()
    }
}

impl Engine {
    /// Shard that owns `wallet_id`.
    #[must_use]
    pub fn shard_of_wallet(&self, wallet_id: WalletId) -> u32 {
        shard_of(wallet_id.0, self.shard_count())
    }

    /// Number of shards.
    #[must_use]
    pub fn shard_count(&self) -> u32 {
        self.inner.shards.len() as u32
    }

    /// The log's last and durable LSNs.
    #[must_use]
    pub fn lsns(&self) -> (u64, u64) {
        (self.inner.wal.last_lsn(), self.inner.wal.durable_lsn())
    }

    /// Why the engine can no longer serve, if it cannot: the log is poisoned (a write or fsync
    /// failed), a shard failed (memory and log may disagree), or a shard's actor is gone (its
    /// thread panicked). Nothing clears it but a restart, whose recovery rebuilds from the log:
    /// the process should stop (fail-stop, ARCHITECTURE.md invariant 11) instead of serving half
    /// a service; see [`Engine::watch_failure`].
    #[must_use]
    pub fn failure(&self) -> Option<String> {
        if self.inner.wal.is_poisoned() {
            return Some("the write-ahead log failed and is poisoned".into());
        }
        if let Some(reason) = self.inner.failure.get() {
            return Some(reason.clone());
        }
        self.inner
            .shards
            .iter()
            .position(|shard| !shard.connected())
            .map(|index| format!("shard {index} stopped (its actor is gone)"))
    }

    /// Resolves with [`Engine::failure`]'s reason once there is one, checking every `every`.
    /// A watchdog: the caller logs the reason and exits.
    pub async fn watch_failure(&self, every: std::time::Duration) -> String {
        let mut tick = tokio::time::interval(every);
        loop {
            tick.tick().await;
            if let Some(reason) = self.failure() {
                return reason;
            }
        }
    }

    /// Commands queued at or running on each shard, in shard order.
    #[must_use]
    pub fn queue_depths(&self) -> Vec<u64> {
        self.inner
            .in_flight
            .iter()
            .map(|gauge| gauge.load(std::sync::atomic::Ordering::Relaxed))
            .collect()
    }

    /// The log's writer counters.
    #[must_use]
    pub fn wal_stats(&self) -> wal::StatsSnapshot {
        self.inner.wal.stats()
    }

    /// The LSN of the newest record appended to the log (durable or not yet).
    #[cfg(test)]
    pub(crate) fn wal_last_lsn(&self) -> u64 {
        self.inner.wal.last_lsn()
    }

    /// The clock commands are stamped with.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Runs `work` on shard `home`'s Arbiter, so it finishes even if the caller stops waiting.
    pub(crate) async fn detached<T, F>(&self, home: u32, work: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        let (tx, rx) = tokio::sync::oneshot::channel();
        let arbiter = self
            .inner
            .arbiters
            .get(home as usize)
            .ok_or_else(|| EngineError::Unavailable(format!("no shard {home}")))?;
        let spawned = arbiter.spawn(async move {
            let _ = tx.send(work.await);
        });
        if !spawned {
            return Err(EngineError::Unavailable(
                "the engine is shutting down".into(),
            ));
        }
        rx.await
            .map_err(|_| EngineError::Unavailable("the engine stopped".into()))?
    }

    /// Executes a command and returns its outcome once durable.
    pub async fn execute(&self, command: Command) -> Result<Outcome, EngineError> {
        if let Some(shard) = self.direct_shard(&command) {
            let executed = self.send(shard, command, None).await?;
            return executed.result.map_err(EngineError::Rejected);
        }
        let engine = self.clone();
        self.detached(self.home(&command), async move {
            let executed = engine.dispatch(command, None).await?;
            executed.result.map_err(EngineError::Rejected)
        })
        .await
    }

    /// Claims `key` for a new request, or answers it: a replay of the stored answer (from memory
    /// or from the store), or why the key cannot be used now. The guard releases the claim on
    /// every path on which the command leaves no record. `legacy` is the previous release's
    /// fingerprint of the request, computed only if a stored answer's differs from the canonical
    /// one (`Sync`: the caller's future holds it across the store's lookup, and stays `Send`).
    pub(crate) async fn claim(
        &self,
        key: &IdempotencyKey,
        legacy: &(dyn Fn() -> Option<[u8; 32]> + Sync),
    ) -> Result<Claimed, EngineError> {
        let table = &self.inner.idempotency;
        let cutoff_ms = self
            .inner
            .clock
            .now_ms()
            .saturating_sub(self.inner.config.idempotency_retention_ms());
        match table.begin_matching(
            &key.caller,
            &key.key,
            key.fingerprint,
            legacy,
            self.inner.wal.durable_lsn(),
            cutoff_ms,
        ) {
            Begin::Replay(response) => {
                return Ok(Claimed::Answered(Reply {
                    response,
                    replayed: true,
                }))
            }
            Begin::Reused => return Err(EngineError::IdempotencyKeyReused),
            Begin::InFlight => return Err(EngineError::IdempotencyInFlight),
            Begin::Fresh => {}
        }
        // Claimed in memory from here on: the guard releases the claim on every path on which
        // the command leaves no record, a caller that stops waiting during the lookup included.
        let guard = ClaimGuard {
            table: Arc::clone(table),
            caller: key.caller.clone(),
            key: key.key.clone(),
        };
        // Not in memory: an answer filed earlier is in the store (the indexer drops an answer
        // from memory only after filing it, so it is in one of the two).
        let filed = self.filed_answer(key).await.map_err(unavailable)?;
        if let Some(filed) = filed.filter(|filed| filed.at_ms >= cutoff_ms) {
            drop(guard);
            return if same_request(&filed.fingerprint, &key.fingerprint, legacy) {
                Ok(Claimed::Answered(Reply {
                    response: filed.response,
                    replayed: true,
                }))
            } else {
                Err(EngineError::IdempotencyKeyReused)
            };
        }
        let record = IdempotencyRecord {
            caller: key.caller.clone(),
            key: key.key.clone(),
            fingerprint: key.fingerprint,
            at_ms: self.inner.clock.now_ms(),
            route: key.route,
            response: None,
            transfer_uuid: None,
        };
        Ok(Claimed::Fresh(guard, record))
    }

    /// The answer filed in the store under `key`, expired or not, looked up so that at most
    /// one of the caller's runtime workers waits in the store at a time.
    ///
    /// A lookup is a few microseconds, but fjall holds a keyspace's version lock while it syncs
    /// the version file of a flush or compaction, and every lookup in that keyspace waits for
    /// it: 50 to 150 ms on a busy disk. The API runs on two tokio workers; with both in such a
    /// wait, walletd answered nothing at all, not even a health check (BENCHMARKS.md, "Both
    /// HTTP workers in one store lock"). So one lookup at a time runs inline on its worker (no
    /// hand-off: the common case), and a lookup that finds that one busy takes the one turn
    /// in the runtime's blocking pool, waiting for it without a thread: still two lookups at
    /// most at a time, as before, but a wait in the store holds one worker, never both.
    /// Outside a tokio runtime it runs inline.
    async fn filed_answer(&self, key: &IdempotencyKey) -> Result<Option<StoredAnswer>, StoreError> {
        let store = &self.inner.store;
        let inline = &self.inner.inline_lookup;
        let runtime = tokio::runtime::Handle::try_current().ok();
        let taken = runtime.is_none()
            || inline
                .compare_exchange(false, true, Ordering::Acquire, Ordering::Relaxed)
                .is_ok();
        if taken {
            /// Frees the inline slot even if the lookup panics.
            struct Release<'a>(&'a std::sync::atomic::AtomicBool);
            impl Drop for Release<'_> {
                fn drop(&mut self) {
                    self.0.store(false, Ordering::Release);
                }
            }
            let _release = runtime.is_some().then(|| Release(inline));
            return store.answer(&key.caller, &key.key);
        }
        // One lookup in the pool at a time too: the others wait here without a thread. The
        // turn goes with the lookup, so a caller that stops waiting does not free it while the
        // lookup still runs.
        let turn = Arc::clone(&self.inner.pool_lookup)
            .acquire_owned()
            .await
            .map_err(|_| StoreError::Rule("the idempotency lookups stopped".into()))?;
        let (store, caller, name) = (Arc::clone(store), key.caller.clone(), key.key.clone());
        let lookup = runtime
            .ok_or_else(|| StoreError::Rule("no runtime".into()))?
            .spawn_blocking(move || {
                let _turn = turn;
                store.answer(&caller, &name)
            });
        lookup
            .await
            .map_err(|error| StoreError::Rule(format!("an idempotency lookup failed: {error}")))?
    }

    /// Executes a command under an idempotency key. A repeat of the same request gets the first
    /// answer again (`replayed`); another request under the same key, or one while the first is
    /// still running, is refused.
    pub async fn execute_idempotent(
        &self,
        command: Command,
        key: IdempotencyKey,
    ) -> Result<Reply, EngineError> {
        // Once claimed, the guard releases the claim on every path on which the command left no
        // record (a refusal before the log, a dropped message, a panic), and the command runs in
        // its own task, so a client that hangs up neither stops it halfway nor leaves the key
        // `in progress` (ARCHITECTURE.md invariant 11).
        let claimed = {
            // Computed at most once, and only if a stored fingerprint is not the canonical one.
            let digest = std::sync::OnceLock::new();
            let legacy = || {
                *digest.get_or_init(|| {
                    key.legacy
                        .as_ref()
                        .map(|legacy| legacy.fingerprint(&command))
                })
            };
            self.claim(&key, &legacy).await?
        };
        let (guard, record) = match claimed {
            Claimed::Answered(reply) => return Ok(reply),
            Claimed::Fresh(guard, record) => (guard, record),
        };
        let engine = self.clone();
        let work = async move {
            let _guard = guard;
            match engine.direct_shard(&command) {
                Some(shard) => {
                    let claim = Claim {
                        record,
                        answer: Answer::Result,
                    };
                    engine.send(shard, command, Some(claim)).await
                }
                None => engine.dispatch(command, Some(record)).await,
            }
        };
        let outcome = self.run_detached(work).await;
        match outcome {
            Ok(Executed {
                response: Some(response),
                ..
            }) => Ok(Reply {
                response,
                replayed: false,
            }),
            Ok(Executed { response: None, .. }) => Err(EngineError::Unavailable(
                "the command's answer was not recorded".into(),
            )),
            Err(error) => Err(error),
        }
    }

    /// Runs `work` to completion in its own task, on the caller's tokio runtime when there is one
    /// (the API's), else on shard 0's Arbiter: dropping the returned future stops waiting, never
    /// the work.
    pub(crate) async fn run_detached<T, F>(&self, work: F) -> Result<T, EngineError>
    where
        T: Send + 'static,
        F: std::future::Future<Output = Result<T, EngineError>> + Send + 'static,
    {
        match tokio::runtime::Handle::try_current() {
            // Boxed, so the task takes a pointer rather than copies of the whole future.
            Ok(runtime) => runtime.spawn(Box::pin(work)).await.map_err(|error| {
                EngineError::Unavailable(format!("the command's task failed: {error}"))
            })?,
            Err(_) => self.detached(0, work).await,
        }
    }

    /// Reads the state of the shard that owns `wallet_id`. The answer waits until everything the
    /// shard had logged when it was computed is durable.
    pub async fn read_wallet<R, F>(&self, wallet_id: WalletId, read: F) -> Result<R, EngineError>
    where
        R: Send + 'static,
        F: FnOnce(&Shard) -> R + Send + 'static,
    {
        self.read_shard(self.shard_of_wallet(wallet_id), read).await
    }

    /// The facts of a wallet that never change (owner, business, branch, currency, type), for
    /// permission checks, without waiting for durability. `None` if there is no such wallet.
    ///
    /// Remembered once looked up, and the memory is also what a history read shows of the
    /// wallet ([`Engine::holder_for_history`]); so the shard is asked with
    /// [`super::actor::ReadForHistory`], which first logs what the shard has decided but not
    /// logged (its gathered record), never with a peek: a peek could see a wallet whose
    /// creation was still gathered, with no LSN for a history read to wait for, and a
    /// statement could then show a wallet whose creation was not yet durable.
    pub async fn wallet_scope(
        &self,
        wallet_id: WalletId,
    ) -> Result<Option<WalletScope>, EngineError> {
        let scopes = &self.inner.wallet_scopes;
        if let Some(scope) = scopes.get(&wallet_id, always, always) {
            return Ok(Some(scope));
        }
        let (scope, _) = self
            .addr(self.shard_of_wallet(wallet_id))?
            .send(super::actor::ReadForHistory(wallet_id))
            .await
            .map_err(unavailable)??;
        // Only a wallet that exists is remembered: an unknown id may be created later.
        let scope = scope.ok();
        if let Some(scope) = scope {
            scopes.insert(wallet_id, scope, always);
        }
        Ok(scope)
    }

    /// Like [`Engine::read_shard`] but without waiting for durability: for routing and permission
    /// checks on facts that never change once written. Never render the result.
    pub async fn peek_shard<R, F>(&self, shard: u32, peek: F) -> Result<R, EngineError>
    where
        R: Send + 'static,
        F: FnOnce(&Shard) -> R + Send + 'static,
    {
        self.addr(shard)?
            .send(Peek(Box::new(peek)))
            .await
            .map_err(unavailable)?
    }

    /// Reads one shard's state (see [`Engine::read_wallet`]).
    pub async fn read_shard<R, F>(&self, shard: u32, read: F) -> Result<R, EngineError>
    where
        R: Send + 'static,
        F: FnOnce(&Shard) -> R + Send + 'static,
    {
        let addr = self.addr(shard)?;
        addr.send(Read(Box::new(read)))
            .await
            .map_err(unavailable)??
            .wait()
            .await
    }

    /// The wallet's unchanging facts (`Err`: no such wallet) and its history bound: the LSN
    /// the history store must cover before it serves the wallet's history (the newest record
    /// that created the wallet or changed its history, or what recovery replayed). Unlike
    /// [`Engine::read_wallet`] the answer does not wait for the shard's latest record to be
    /// durable: waiting for the indexer to reach the bound is that wait, for what a history
    /// read shows.
    ///
    /// A wallet whose scope the engine remembers (a permission check of the request has
    /// looked it up already) is answered without the shard: its facts from that memory, its
    /// bound from [`super::history::HistoryBounds`]. A message to the shard waits behind every
    /// command queued there, which was a statement page's whole tail under load.
    pub(crate) async fn holder_for_history(
        &self,
        wallet_id: WalletId,
    ) -> Result<(Result<crate::ledger::view::Holder, crate::Rejection>, u64), EngineError> {
        if let Some(scope) = self.inner.wallet_scopes.get(&wallet_id, always, always) {
            // A failed shard answers nothing; with any part of the engine failed the process
            // stops (fail-stop), so none is served here either.
            if let Some(reason) = self.failure() {
                return Err(EngineError::Unavailable(reason));
            }
            return Ok((
                Ok(scope.holder()),
                self.inner.history_bounds.bound(wallet_id.0),
            ));
        }
        let (scope, bound) = self
            .addr(self.shard_of_wallet(wallet_id))?
            .send(super::actor::ReadForHistory(wallet_id))
            .await
            .map_err(unavailable)??;
        if let Ok(scope) = &scope {
            self.inner.wallet_scopes.insert(wallet_id, *scope, always);
        }
        Ok((scope.map(|scope| scope.holder()), bound))
    }

    /// [`Engine::holder_for_history`] for every wallet of merchant `merchant_id` (on its owner
    /// shard), in id order, with the latest of their bounds.
    pub(crate) async fn merchant_holders_for_history(
        &self,
        merchant_id: u64,
    ) -> Result<(Vec<crate::ledger::view::Holder>, u64), EngineError> {
        self.addr(crate::values::ids::owner_shard(
            merchant_id,
            self.shard_count(),
        ))?
        .send(super::actor::ReadMerchantForHistory(merchant_id))
        .await
        .map_err(unavailable)?
    }

    /// Reads every shard with the same function, in shard order.
    pub async fn read_all<R, F>(&self, read: F) -> Result<Vec<R>, EngineError>
    where
        R: Send + 'static,
        F: Fn(&Shard) -> R + Send + Sync + Clone + 'static,
    {
        let mut results = Vec::with_capacity(self.inner.shards.len());
        for shard in 0..self.shard_count() {
            let read = read.clone();
            results.push(self.read_shard(shard, move |s| read(s)).await?);
        }
        Ok(results)
    }

    /// Waits until the indexer has filed everything appended so far, drops it from the shards'
    /// memory, and answers how many records (transactions, entries, holds) the shards still
    /// hold: active holds and whatever was appended meanwhile. For tests and diagnostics.
    pub async fn evict_filed(&self) -> Result<usize, EngineError> {
        self.inner
            .history
            .caught_up(self.inner.wal.last_lsn())
            .await?;
        let mut held = 0;
        for shard in 0..self.shard_count() {
            held += self
                .addr(shard)?
                .send(super::actor::EvictFiled)
                .await
                .map_err(|e| EngineError::Unavailable(e.to_string()))?;
        }
        Ok(held)
    }

    /// Counts a command on `shard`'s queue-depth gauge until the guard drops: from before it is
    /// sent until its answer is durable, or until the waiting future is dropped.
    pub(crate) fn queued_on(&self, shard: u32) -> Option<QueuedCommand<'_>> {
        let gauge = self.inner.in_flight.get(shard as usize)?;
        gauge.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
        Some(QueuedCommand(gauge))
    }

    pub(crate) fn addr(&self, shard: u32) -> Result<&Addr<ShardActor>, EngineError> {
        self.inner
            .shards
            .get(shard as usize)
            .ok_or_else(|| EngineError::Unavailable(format!("no shard {shard}")))
    }

    pub(crate) async fn send(
        &self,
        shard: u32,
        command: Command,
        claim: Option<Claim>,
    ) -> Result<Executed, EngineError> {
        let message = Execute {
            command,
            context: self.inner.clock.context(),
            claim,
        };
        let _queued = self.queued_on(shard);
        let executed = self
            .addr(shard)?
            .send(message)
            .await
            .map_err(unavailable)??
            .wait()
            .await?;
        self.maybe_snapshot();
        Ok(executed)
    }

    /// Changes the directory (identities); returns the created record's event.
    pub async fn directory(
        &self,
        command: DirectoryCommand,
    ) -> Result<DirectoryEvent, EngineError> {
        let engine = self.clone();
        self.detached(0, async move {
            let message = ExecuteDirectory {
                command,
                context: engine.inner.clock.context(),
            };
            let _queued = engine.queued_on(0);
            engine
                .addr(0)?
                .send(message)
                .await
                .map_err(unavailable)??
                .wait()
                .await?
                .map_err(EngineError::Rejected)
        })
        .await
    }

    /// Reads the directory; the answer waits until what it shows is durable.
    pub async fn read_directory<R, F>(&self, read: F) -> Result<R, EngineError>
    where
        R: Send + 'static,
        F: FnOnce(&Directory) -> R + Send + 'static,
    {
        self.addr(0)?
            .send(ReadDirectory(Box::new(read)))
            .await
            .map_err(unavailable)??
            .wait()
            .await
    }

    /// Whether business `business_id` exists and is a merchant, without waiting for durability:
    /// the flag is set when a business is created and never changes, so this is a permission
    /// fact like [`Engine::wallet_scope`] (never render it). A command that follows is logged
    /// after the business, in the one log, so it is durable only once the business is.
    pub async fn is_merchant(&self, business_id: u64) -> Result<bool, EngineError> {
        self.addr(0)?
            .send(PeekDirectory(Box::new(move |d: &Directory| {
                d.business(business_id).is_some_and(|b| b.is_merchant)
            })))
            .await
            .map_err(unavailable)?
    }

    /// Registers a customer and opens their primary wallet (`currency`, owned by the platform
    /// business 1). Two durable steps; recovery opens the wallet if a crash fell between them.
    pub async fn register_customer(
        &self,
        name: String,
        phone: String,
        email: Option<String>,
        password_hash: String,
        currency: Currency,
    ) -> Result<(Customer, WalletView), EngineError> {
        let engine = self.clone();
        self.detached(0, async move {
            let command = DirectoryCommand::RegisterCustomer {
                name,
                phone,
                email,
                password_hash,
            };
            let DirectoryEvent::CustomerRegistered(customer) = engine.directory(command).await?
            else {
                return Err(EngineError::Unavailable(
                    "registration recorded something else".into(),
                ));
            };
            let wallet = engine.open_primary_wallet(customer.id, currency).await?;
            Ok((customer, wallet))
        })
        .await
    }

    /// Opens a customer's primary wallet (business 1), or returns the existing one.
    pub(crate) async fn open_primary_wallet(
        &self,
        customer_id: u64,
        currency: Currency,
    ) -> Result<WalletView, EngineError> {
        let create = CreateWallet {
            owner_type: OwnerType::Customer,
            owner_id: customer_id,
            currency,
            wallet_type: WalletType::Primary,
            business_id: 1,
            branch_id: 0,
            meta: None,
        };
        let shard = owner_shard(customer_id, self.shard_count());
        let existing = self
            .read_shard(shard, move |s| {
                let id = s.wallet_of_owner(
                    OwnerType::Customer,
                    customer_id,
                    currency,
                    WalletType::Primary,
                )?;
                s.wallet_view(id).ok()
            })
            .await?;
        if let Some(wallet) = existing {
            return Ok(wallet);
        }
        match self
            .send(shard, Command::CreateWallet(create), None)
            .await?
            .result
        {
            Ok(Outcome::Wallet(wallet)) => Ok(wallet),
            Ok(other) => Err(EngineError::Unavailable(format!(
                "wallet creation answered {other:?}"
            ))),
            Err(rejection) => Err(EngineError::Rejected(rejection)),
        }
    }

    /// Expires every overdue hold on every shard now (the shards also do it on a timer), and
    /// returns how many expired.
    pub async fn expire_holds(&self) -> Result<usize, EngineError> {
        let mut expired = 0;
        for shard in 0..self.shard_count() {
            let command = Command::ExpireHolds {
                max_holds: crate::shard::command::EXPIRE_BATCH_MAX,
            };
            if let Ok(Outcome::HoldsExpired { count }) =
                self.send(shard, command, None).await?.result
            {
                expired += count;
            }
        }
        Ok(expired)
    }

    /// Checks every invariant of every shard, and double entry across shards: per currency the
    /// entries of all shards sum to zero. Returns the first violation found, described.
    pub async fn check_invariants(&self) -> Result<(), String> {
        let checks = self
            .read_all(|s| {
                (
                    s.check_invariants().map_err(|v| v.to_string()),
                    s.balance_sums_by_currency(),
                )
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut totals: std::collections::BTreeMap<
            crate::values::currency::Currency,
            rust_decimal::Decimal,
        > = std::collections::BTreeMap::new();
        for (shard, (check, sums)) in checks.into_iter().enumerate() {
            check.map_err(|v| format!("shard {shard}: {v}"))?;
            for (currency, sum) in sums {
                let sum = sum
                    .ok_or_else(|| format!("shard {shard}: {} sum overflowed", currency.code()))?;
                *totals.entry(currency).or_default() += sum;
            }
        }
        for (currency, total) in totals {
            if !total.is_zero() {
                return Err(format!(
                    "entries in {} across all shards sum to {total}, not zero",
                    currency.code()
                ));
            }
        }
        let legs = self
            .read_all(Shard::cross_shard_legs)
            .await
            .map_err(|e| e.to_string())?;
        // Finished moves leave memory once filed: a side that is not in memory is in the store.
        let store = self.inner.store.clone();
        crate::shard::commerce::invariants::check_cross_shard_pairs_filed(&legs, &|uuid| {
            store.filed_legs(uuid).map_err(|e| e.to_string())
        })?;
        Ok(())
    }

    /// Idempotency keys held in memory: claims in flight, answers not yet filed in the history
    /// store, and the pending keys of unfinished cross-shard moves. Filed answers live in the
    /// store, so this stays flat under load.
    #[must_use]
    pub fn idempotency_keys_held(&self) -> usize {
        self.inner.idempotency.len()
    }

    /// Cross-shard moves recovery could not finish at open and left reserved, for an operator:
    /// their money stays in transit, every invariant holds, and the next start tries them again.
    #[must_use]
    pub fn quarantined_moves(&self) -> Vec<crate::runtime::recovery::QuarantinedMove> {
        self.inner
            .quarantined
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .clone()
    }

    /// Cross-shard moves still between their first and last step (transfers, those of open
    /// atomic batches included, and payment reservations `reserved`). After recovery there are
    /// none but the quarantined: it finishes them.
    pub async fn pending_cross_shard_moves(&self) -> Result<usize, EngineError> {
        let counts = self
            .read_all(|s| s.reserved_outgoing_count() + s.pending_payment_reservations().len())
            .await?;
        Ok(counts.iter().sum())
    }

    /// Stops the shards, makes the log durable and closes it. Requests still queued fail.
    /// Dropping the last handle does the same, without reporting a failure to flush.
    pub fn shutdown(self) -> Result<(), EngineError> {
        self.inner.stop()
    }
}

/// What never changes about a wallet once it exists: enough to check a caller's permission.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct WalletScope {
    pub wallet_id: WalletId,
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub business_id: u64,
    pub currency: Currency,
    pub wallet_type: WalletType,
    pub branch_id: u64,
}

impl WalletScope {
    #[must_use]
    pub fn of(wallet: &crate::ledger::wallet::Wallet) -> Self {
        WalletScope {
            wallet_id: wallet.id(),
            owner_type: wallet.owner_type(),
            owner_id: wallet.owner_id(),
            business_id: wallet.business_id(),
            currency: wallet.currency(),
            wallet_type: wallet.wallet_type(),
            branch_id: wallet.branch_id(),
        }
    }

    /// The facts a history read shows beside each record.
    #[must_use]
    pub(crate) fn holder(&self) -> crate::ledger::view::Holder {
        crate::ledger::view::Holder {
            id: self.wallet_id,
            owner_type: self.owner_type,
            owner_id: self.owner_id,
            currency: self.currency,
            business_id: self.business_id,
            branch_id: self.branch_id,
        }
    }
}
