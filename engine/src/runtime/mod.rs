//! The engine at run time: shard actors, the write-ahead log, recovery and snapshots.
//!
//! # Layout
//! - [`Engine`]: the handle the API holds. Routes each command to the shard that owns its wallet,
//!   orchestrates cross-shard transfers, keeps idempotency, takes snapshots.
//! - [`actor`]: the shard actor (one per actix Arbiter thread) that owns one [`Shard`].
//! - [`journal`]: the WAL record of one command. [`idempotency`]: the key table.
//! - [`recovery`]: open = load the newest snapshot, replay the log after it, finish half-done
//!   cross-shard transfers. [`image`]: the snapshot payload.
//! - [`clock`]: where time and randomness come from (logged, never recomputed).
//!
//! # Threads
//! The WAL writer is its own thread. Each shard actor runs on its own Arbiter (a current-thread
//! tokio runtime). Every request the API submits is spawned onto the Arbiter of the shard it
//! concerns and runs to its end there even if the HTTP client goes away: actix skips a queued
//! message whose requester has dropped its reply channel (notes/dependencies.md §1), and a
//! transfer must never stop halfway, nor an idempotency key stay claimed, because a client hung
//! up. Spawning on the shard's own thread (rather than one shared orchestrator thread) keeps the
//! hop to the actor thread-local and lets shards orchestrate in parallel.
//!
//! # Cross-shard transfers
//! With one shard (the default) a transfer is one command and one WAL record: atomic. When the
//! two wallets live on different shards the transfer takes durable steps:
//! 1. *reserve* on the source shard: the source is debited into the shard's in-transit account
//!    and the transfer is recorded as reserved (with the request's idempotency key, pending);
//! 2. *credit* on the target shard: the target is credited from its in-transit account; the
//!    target records the transfer's uuid, so a repeated credit is a no-op;
//! 3. *finalize* on the source shard (with the request's answer), or, if the target refused the
//!    credit (frozen, wrong currency), *release*: the source is credited back.
//!
//! Recovery finishes every transfer found reserved and not settled: it repeats the credit (a
//! no-op if it had happened) and finalizes, or releases if the target refuses. So after any crash
//! every transfer has posted both legs or none (ARCHITECTURE.md invariant 4).

pub mod actor;
pub mod clock;
mod commerce;
pub mod idempotency;
pub mod image;
pub mod journal;
pub mod recovery;

use std::path::PathBuf;
use std::sync::{Arc, Mutex};
use std::thread::JoinHandle;
use std::time::Duration;

use actix::{Addr, ArbiterHandle};

use self::actor::{
    Answer, Claim, Execute, ExecuteDirectory, Executed, Peek, PeekDirectory, Read, ReadDirectory,
    ShardActor,
};
use self::clock::Clock;
use self::idempotency::{Begin, IdempotencyTable};
use self::journal::IdempotencyRecord;
use crate::command::{Command, CreateWallet, Outcome, TransferArgs, TransferCredit};
use crate::currency::Currency;
use crate::directory::{Customer, Directory, DirectoryCommand, DirectoryEvent};
use crate::error::Rejection;
use crate::ids::{shard_of, Uuid, WalletId};
use crate::shard::Shard;
use crate::view::WalletView;
use crate::wallet::{OwnerType, WalletType};

pub use self::recovery::{recorded_shard_count, OpenError, RecoveryReport, SHARDS_FILE};

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
    /// How often each shard expires overdue holds.
    pub hold_tick: Duration,
    /// Take a snapshot after this many records since the last one (0: only on demand).
    pub snapshot_every_records: u64,
    /// What the WAL writes through: the real file system, or a test's (to hold back fsyncs).
    pub file_system: WalFileSystem,
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

impl EngineConfig {
    /// Defaults for a data directory: one shard, durable log, snapshot every 1M records.
    #[must_use]
    pub fn new(data_dir: impl Into<PathBuf>) -> Self {
        EngineConfig {
            data_dir: data_dir.into(),
            shard_count: 1,
            wal: wal::Options::default(),
            mailbox_capacity: 4096,
            hold_tick: Duration::from_secs(1),
            snapshot_every_records: 1_000_000,
            file_system: WalFileSystem::default(),
        }
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
    pub fingerprint: [u8; 32],
    /// Passed back to the [`Renderer`].
    pub route: u16,
}

/// The answer to an idempotent request: the rendered bytes, and whether they are a replay.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Reply {
    pub response: Vec<u8>,
    pub replayed: bool,
}

struct Inner {
    shards: Vec<Addr<ShardActor>>,
    /// Commands sent to each shard and not yet answered (a gauge for metrics).
    in_flight: Vec<std::sync::atomic::AtomicU64>,
    /// The Arbiter of each shard, for work that must outlive its caller.
    arbiters: Vec<ArbiterHandle>,
    wal: wal::Wal,
    clock: Arc<dyn Clock>,
    idempotency: Arc<IdempotencyTable>,
    config: EngineConfig,
    system: actix::System,
    actors: Mutex<Option<JoinHandle<()>>>,
    /// Records appended at the last snapshot, to trigger the next.
    snapshot_state: Mutex<SnapshotState>,
    /// Wallet scopes already looked up. They never change once a wallet exists (wallets are
    /// never deleted), so a permission check needs no trip to the shard's thread after the first
    /// one: on the hot paths that trip was a second cross-thread round trip per request.
    wallet_scopes: dashmap::DashMap<WalletId, WalletScope>,
}

/// Most wallet scopes remembered; past it the cache starts over (a full cache costs ~64 MiB).
const WALLET_SCOPES_MAX: usize = 1 << 20;

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
        self.wal.clone().close().map_err(unavailable)
    }
}

impl Drop for Inner {
    fn drop(&mut self) {
        if let Err(error) = self.stop() {
            tracing::error!(%error, "closing the engine failed");
        }
    }
}

#[derive(Default)]
struct SnapshotState {
    last_lsn: u64,
    running: bool,
}

/// The engine handle: cheap to clone, all clones share the same shards and log.
#[derive(Clone)]
pub struct Engine {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Engine {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Engine")
            .field("shards", &self.inner.shards.len())
            .field("wal", &self.inner.wal)
            .finish()
    }
}

fn unavailable(error: impl std::fmt::Display) -> EngineError {
    EngineError::Unavailable(error.to_string())
}

impl Engine {
    /// Opens the data directory: recovers state from snapshot and log, starts the shards, and
    /// finishes any cross-shard transfer a crash interrupted. See [`recovery`].
    pub fn open(
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        renderer: Arc<dyn Renderer>,
    ) -> Result<(Engine, RecoveryReport), OpenError> {
        recovery::open(config, clock, renderer)
    }

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

    /// The clock commands are stamped with.
    #[must_use]
    pub fn clock(&self) -> &Arc<dyn Clock> {
        &self.inner.clock
    }

    /// Runs `work` on shard `home`'s Arbiter, so it finishes even if the caller stops waiting.
    async fn detached<T, F>(&self, home: u32, work: F) -> Result<T, EngineError>
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

    /// The shard of a command that is one message to one shard, known without a lookup: it can
    /// be sent to the shard's actor from the caller's thread. Once the message is in the
    /// actor's mailbox it runs to the end even if the caller stops waiting, like the detached
    /// orchestration of the others, and one thread handoff is saved on the hottest paths.
    fn direct_shard(&self, command: &Command) -> Option<u32> {
        match command {
            Command::Transfer(args) => {
                let source = self.shard_of_wallet(args.source_wallet_id);
                (source == self.shard_of_wallet(args.target_wallet_id)).then_some(source)
            }
            Command::CreateWallet(_)
            | Command::FreezeWallet { .. }
            | Command::UnfreezeWallet { .. }
            | Command::VerifyIntegrity { .. }
            | Command::Deposit(_)
            | Command::Withdraw(_)
            | Command::PlaceHold(_)
            | Command::InitiatePayment(_)
            | Command::CreatePaymentLink(_)
            | Command::CreateQr(_)
            | Command::CreatePayout(_)
            | Command::ApprovePayout { .. }
            | Command::RejectPayout { .. }
            | Command::CancelPayout { .. }
            | Command::ExecutePayout { .. }
            | Command::PayoutProviderResult(_)
            | Command::CreateSettlement(_)
            | Command::ApproveSettlement { .. }
            | Command::RejectSettlement { .. }
            | Command::CancelSettlement { .. }
            | Command::ExecuteSettlement { .. } => Some(self.home(command)),
            _ => None,
        }
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

    /// Executes a command under an idempotency key. A repeat of the same request gets the first
    /// answer again (`replayed`); another request under the same key, or one while the first is
    /// still running, is refused.
    pub async fn execute_idempotent(
        &self,
        command: Command,
        key: IdempotencyKey,
    ) -> Result<Reply, EngineError> {
        let table = &self.inner.idempotency;
        match table.begin(
            &key.caller,
            &key.key,
            key.fingerprint,
            self.inner.wal.durable_lsn(),
        ) {
            Begin::Replay(response) => {
                return Ok(Reply {
                    response,
                    replayed: true,
                })
            }
            Begin::Reused => return Err(EngineError::IdempotencyKeyReused),
            Begin::InFlight => return Err(EngineError::IdempotencyInFlight),
            Begin::Fresh => {}
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
        let outcome = match self.direct_shard(&command) {
            Some(shard) => {
                let claim = Claim {
                    record,
                    answer: Answer::Result,
                };
                self.send(shard, command, Some(claim)).await
            }
            None => {
                let engine = self.clone();
                self.detached(self.home(&command), async move {
                    engine.dispatch(command, Some(record)).await
                })
                .await
            }
        };
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
            Err(error) => {
                // Nothing durable carries the key: free it so a retry can run.
                if matches!(error, EngineError::Unavailable(_)) {
                    table.abandon(&key.caller, &key.key);
                }
                Err(error)
            }
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

    /// The facts of a wallet that never change (owner, business, currency, type), for permission
    /// checks, without waiting for durability (see [`actor::Peek`]). `None` if there is no such
    /// wallet.
    pub async fn wallet_scope(
        &self,
        wallet_id: WalletId,
    ) -> Result<Option<WalletScope>, EngineError> {
        if let Some(scope) = self.inner.wallet_scopes.get(&wallet_id) {
            return Ok(Some(*scope));
        }
        let peek = move |s: &Shard| s.wallet(wallet_id).map(WalletScope::of);
        let scope = self
            .peek_shard(self.shard_of_wallet(wallet_id), peek)
            .await?;
        // Only a wallet that exists is remembered: an unknown id may be created later.
        if let Some(scope) = scope {
            let scopes = &self.inner.wallet_scopes;
            if scopes.len() >= WALLET_SCOPES_MAX {
                scopes.clear();
            }
            scopes.insert(wallet_id, scope);
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

    fn addr(&self, shard: u32) -> Result<&Addr<ShardActor>, EngineError> {
        self.inner
            .shards
            .get(shard as usize)
            .ok_or_else(|| EngineError::Unavailable(format!("no shard {shard}")))
    }

    async fn send(
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

    /// The shard whose Arbiter runs a command's orchestration: its wallet's (the source's for a
    /// transfer), or shard 0 when only an async lookup could tell (holds and transactions named
    /// by uuid).
    fn home(&self, command: &Command) -> u32 {
        let count = self.shard_count();
        match command {
            Command::CreateWallet(create) => owner_shard(create.owner_id, count),
            Command::FreezeWallet { wallet_id }
            | Command::UnfreezeWallet { wallet_id }
            | Command::VerifyIntegrity { wallet_id } => shard_of(wallet_id.0, count),
            Command::Deposit(movement) | Command::Withdraw(movement) => {
                shard_of(movement.wallet_id.0, count)
            }
            Command::Transfer(args) | Command::TransferReserve(args) => {
                shard_of(args.source_wallet_id.0, count)
            }
            Command::TransferCredit(credit) => shard_of(credit.target_wallet_id.0, count),
            Command::PlaceHold(hold) => shard_of(hold.wallet_id.0, count),
            Command::InitiatePayment(payment) => shard_of(payment.merchant_wallet_id.0, count),
            Command::CreatePaymentLink(link) => shard_of(link.merchant_wallet_id.0, count),
            Command::CreateQr(qr) => shard_of(qr.merchant_wallet_id.0, count),
            Command::CreatePayout(payout) => shard_of(payout.wallet_id.0, count),
            Command::ApprovePayout { payout_id, .. }
            | Command::RejectPayout { payout_id, .. }
            | Command::CancelPayout { payout_id, .. }
            | Command::ExecutePayout { payout_id, .. } => shard_of(payout_id.0, count),
            Command::PayoutProviderResult(result) => shard_of(result.payout_id.0, count),
            Command::CreateSettlement(settlement) => shard_of(settlement.wallet_id.0, count),
            Command::ApproveSettlement { settlement_id, .. }
            | Command::RejectSettlement { settlement_id, .. }
            | Command::CancelSettlement { settlement_id, .. }
            | Command::ExecuteSettlement { settlement_id, .. } => shard_of(settlement_id.0, count),
            _ => 0,
        }
    }

    /// Routes a command to its shard (or runs the cross-shard protocol).
    async fn dispatch(
        &self,
        command: Command,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        match &command {
            Command::Transfer(args) => {
                let source = self.shard_of_wallet(args.source_wallet_id);
                let target = self.shard_of_wallet(args.target_wallet_id);
                if source != target {
                    return self.transfer_across(args.clone(), record).await;
                }
            }
            Command::ConfirmPayment { payment_uuid } => {
                if let Some(place) = self.payment_place(*payment_uuid).await? {
                    if place.crosses() {
                        return self.confirm_across(*payment_uuid, place, record).await;
                    }
                }
            }
            Command::RefundPayment(refund) => {
                if let Some(place) = self.payment_place(refund.payment_uuid).await? {
                    if place.crosses() {
                        return self.refund_across(command, place, record).await;
                    }
                }
            }
            _ => {}
        }
        let shard = self.route(&command).await?;
        let claim = record.map(|record| Claim {
            record,
            answer: Answer::Result,
        });
        self.send(shard, command, claim).await
    }

    /// The shard a command belongs to. Commands naming a hold or transaction by uuid are sent to
    /// the shard that has it (shard 0 when none does, which then refuses with `not_found`).
    async fn route(&self, command: &Command) -> Result<u32, EngineError> {
        let count = self.shard_count();
        let by_wallet = |wallet_id: WalletId| shard_of(wallet_id.0, count);
        Ok(match command {
            Command::CreateWallet(create) => owner_shard(create.owner_id, count),
            Command::FreezeWallet { wallet_id }
            | Command::UnfreezeWallet { wallet_id }
            | Command::VerifyIntegrity { wallet_id } => by_wallet(*wallet_id),
            Command::Deposit(movement) | Command::Withdraw(movement) => {
                by_wallet(movement.wallet_id)
            }
            Command::Transfer(args) | Command::TransferReserve(args) => {
                by_wallet(args.source_wallet_id)
            }
            Command::TransferCredit(credit) => by_wallet(credit.target_wallet_id),
            Command::PlaceHold(hold) => by_wallet(hold.wallet_id),
            Command::ReleaseHold { hold_uuid } => {
                self.find(*hold_uuid, |s, u| s.locate_hold(u).is_some())
                    .await?
            }
            Command::CaptureHold(capture) => {
                self.find(capture.hold_uuid, |s, u| s.locate_hold(u).is_some())
                    .await?
            }
            Command::Refund(refund) => {
                self.find(refund.original_transaction_uuid, |s, u| {
                    s.locate_transaction(u).is_some()
                })
                .await?
            }
            Command::Reverse {
                transaction_uuid, ..
            } => {
                self.find(*transaction_uuid, |s, u| s.locate_transaction(u).is_some())
                    .await?
            }
            Command::TransferFinalize { transfer_uuid }
            | Command::TransferRelease { transfer_uuid } => {
                self.find(*transfer_uuid, |s, u| s.outgoing_transfer(u).is_some())
                    .await?
            }
            Command::ConfirmPayment { payment_uuid }
            | Command::CancelPayment { payment_uuid }
            | Command::FailPayment { payment_uuid } => {
                self.find(*payment_uuid, |s, u| s.payment(u).is_some())
                    .await?
            }
            Command::PaymentProviderResult(result) => {
                self.find(result.payment_uuid, |s, u| s.payment(u).is_some())
                    .await?
            }
            Command::RefundPayment(refund) => {
                self.find(refund.payment_uuid, |s, u| s.payment(u).is_some())
                    .await?
            }
            Command::PaymentReserve(reserve) => by_wallet(reserve.payer_wallet_id),
            Command::PaymentCredit(credit) => by_wallet(credit.target_wallet_id),
            Command::PaymentReserveFinalize { reservation_uuid }
            | Command::PaymentReserveRelease { reservation_uuid } => {
                self.find(*reservation_uuid, |s, u| s.payment_reservation(u).is_some())
                    .await?
            }
            command => self.home(command),
        })
    }

    /// The shard for which `has(shard, uuid)` holds; 0 when none. Uses [`Engine::peek_shard`]:
    /// where a uuid lives never changes once it is written.
    pub async fn find(
        &self,
        uuid: Uuid,
        has: fn(&Shard, Uuid) -> bool,
    ) -> Result<u32, EngineError> {
        if self.shard_count() == 1 {
            return Ok(0);
        }
        for shard in 0..self.shard_count() {
            if self.peek_shard(shard, move |s| has(s, uuid)).await? {
                return Ok(shard);
            }
        }
        Ok(0)
    }

    /// The cross-shard transfer protocol (see the module docs).
    async fn transfer_across(
        &self,
        args: TransferArgs,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        let source = self.shard_of_wallet(args.source_wallet_id);
        let claim = record.clone().map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let reserved = self
            .send(source, Command::TransferReserve(args), claim)
            .await?;
        let transfer = match reserved.result {
            Ok(Outcome::TransferReserved { transfer, .. }) => transfer,
            Ok(other) => {
                return Err(EngineError::Unavailable(format!(
                    "transfer reserve answered {other:?}"
                )))
            }
            Err(rejection) => {
                return Ok(Executed {
                    result: Err(rejection),
                    response: reserved.response,
                })
            }
        };
        self.complete_transfer(
            transfer.uuid,
            transfer.target_wallet_id,
            TransferCredit::for_transfer(&transfer),
            record,
        )
        .await
    }

    /// Steps 2 and 3 of a cross-shard transfer; also what recovery runs for a reserved one.
    pub(crate) async fn complete_transfer(
        &self,
        transfer_uuid: Uuid,
        target_wallet_id: WalletId,
        credit: TransferCredit,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        // The transfer lives on its source wallet's shard; no need to search for it.
        let source = self.shard_of_wallet(credit.source_wallet_id);
        let target = self.shard_of_wallet(target_wallet_id);
        let credited = self
            .send(target, Command::TransferCredit(credit), None)
            .await?;
        // Which transaction is the debit never changes once written: a peek is enough.
        let debit_uuid = self
            .peek_shard(source, move |s| {
                let transfer = s.outgoing_transfer(transfer_uuid)?;
                let wallet = s.wallet(transfer.source_wallet_id)?;
                Some(wallet.transaction(transfer.transaction_id)?.uuid)
            })
            .await?;
        let (command, answer) = match credited.result {
            Ok(_) => (
                Command::TransferFinalize { transfer_uuid },
                debit_uuid.map_or(Answer::Result, Answer::Transaction),
            ),
            Err(rejection) => (
                Command::TransferRelease { transfer_uuid },
                Answer::Rejected(rejection),
            ),
        };
        let refused = match &answer {
            Answer::Rejected(rejection) => Some(rejection.clone()),
            _ => None,
        };
        let claim = record.map(|record| Claim { record, answer });
        let settled = self.send(source, command, claim).await?;
        if let Err(rejection) = settled.result {
            return Err(EngineError::Unavailable(format!(
                "settling transfer {transfer_uuid} failed: {rejection}"
            )));
        }
        let result = match (refused, debit_uuid) {
            (Some(rejection), _) => Err(rejection),
            (None, Some(uuid)) => {
                let view = self
                    .read_shard(source, move |s| s.transaction_view(uuid))
                    .await?;
                view.map(Outcome::Transaction)
            }
            (None, None) => Err(Rejection::NotFound("transfer transaction")),
        };
        Ok(Executed {
            result,
            response: settled.response,
        })
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
                max_holds: crate::command::EXPIRE_BATCH_MAX,
            };
            if let Ok(Outcome::HoldsExpired { count }) =
                self.send(shard, command, None).await?.result
            {
                expired += count;
            }
        }
        Ok(expired)
    }

    /// Takes a snapshot now: captures every shard (each pauses only to clone its state), then
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
        self.snapshot_claimed().await
    }

    /// Marks a snapshot as running; false if one already is.
    fn claim_snapshot(&self) -> bool {
        let mut state = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        if state.running {
            return false;
        }
        state.running = true;
        true
    }

    /// Runs a claimed snapshot and releases the claim.
    async fn snapshot_claimed(&self) -> Result<u64, EngineError> {
        let result = self.build_snapshot().await;
        let mut state = self
            .inner
            .snapshot_state
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        state.running = false;
        if let Ok(lsn) = &result {
            state.last_lsn = *lsn;
        }
        result
    }

    async fn build_snapshot(&self) -> Result<u64, EngineError> {
        let target = self.inner.wal.durable_lsn();
        let cutoff = self.inner.clock.now_ms() - idempotency::RETENTION_MS;
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
                let built = (|| -> Result<std::path::PathBuf, EngineError> {
                    let mut state = recovery::Replayed::load(&dir, count).map_err(unavailable)?;
                    let from = state.replay_from();
                    wal::reader::read_range(&dir, record_bytes_max, from, target, &mut |record| state.apply(record))
                        .map_err(unavailable)?;
                    let captures: Vec<(u64, Shard)> = state.shards.into_iter().map(|shard| (target, shard)).collect();
                    let keys = state.table.durable_records(cutoff, target);
                    let payload = image::encode(&captures, &state.directory, &keys);
                    let path = wal.checkpoint(target, &payload).map_err(unavailable)?;
                    tracing::info!(snapshot = %path.display(), covered_lsn = target, bytes = payload.len(), took_ms = started.elapsed().as_millis() as u64, "snapshot written");
                    Ok(path)
                })();
                drop(wal);
                let _ = tx.send(built.map(|_| target));
            })
            .map_err(unavailable)?;
        rx.await.map_err(unavailable)?
    }

    /// Starts a snapshot in the background when enough records were logged since the last one.
    fn maybe_snapshot(&self) {
        let every = self.inner.config.snapshot_every_records;
        if every == 0 {
            return;
        }
        let last = self.inner.wal.last_lsn();
        {
            let state = self
                .inner
                .snapshot_state
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner);
            if state.running || last < state.last_lsn + every {
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
            if let Err(error) = engine.snapshot_claimed().await {
                tracing::warn!(%error, "periodic snapshot failed");
            }
        });
    }

    /// Checks every invariant of every shard, and double entry across shards: per currency the
    /// entries of all shards sum to zero. Returns the first violation found, described.
    pub async fn check_invariants(&self) -> Result<(), String> {
        let checks = self
            .read_all(|s| {
                (
                    s.check_invariants().map_err(|v| v.to_string()),
                    s.entry_sums_by_currency(),
                )
            })
            .await
            .map_err(|e| e.to_string())?;
        let mut totals: std::collections::BTreeMap<
            crate::currency::Currency,
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
        crate::invariants_commerce::check_cross_shard_pairs(&legs)
    }

    /// Cross-shard moves still between their first and last step (transfers and payment
    /// reservations `reserved`). After recovery there are none: it finishes them.
    pub async fn pending_cross_shard_moves(&self) -> Result<usize, EngineError> {
        let counts = self
            .read_all(|s| {
                s.pending_outgoing_transfers().len() + s.pending_payment_reservations().len()
            })
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
}

impl WalletScope {
    #[must_use]
    pub fn of(wallet: &crate::wallet::Wallet) -> Self {
        WalletScope {
            wallet_id: wallet.id(),
            owner_type: wallet.owner_type(),
            owner_id: wallet.owner_id(),
            business_id: wallet.business_id(),
            currency: wallet.currency(),
            wallet_type: wallet.wallet_type(),
        }
    }
}

/// Shard for a new wallet: all of one owner's wallets live on one shard, so the rule "one wallet
/// per owner, currency and type" is checked by one shard alone.
#[must_use]
pub fn owner_shard(owner_id: u64, shard_count: u32) -> u32 {
    if shard_count <= 1 {
        return 0;
    }
    ((owner_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % u64::from(shard_count)) as u32
}
