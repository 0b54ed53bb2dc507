//! The shard actor: one actix actor per Arbiter thread, owning one [`Shard`] and nothing else.
//!
//! Each wallet is an actor in the actor-model sense, a state machine changed only by the messages
//! it handles one at a time; hosting many wallets in one shard actor (a `HashMap` inside [`Shard`])
//! costs 86 B a wallet instead of ~900 B for an actix actor each (notes/dependencies.md §1).
//!
//! A command runs in three steps: decide and apply in memory, inside one handler call so nothing
//! interleaves; hand the encoded [`JournalEntry`] to the WAL (which assigns its LSN and fixes the
//! shard's order), alone or in a record shared with the commands queued behind it ("Coalesced
//! records" below); then answer at once with a [`Durable`]: the result sealed with the WAL ticket
//! of that record, which only the ticket's resolution opens. The shard goes on to the next
//! command while earlier ones await their fsync (pipelining), and the caller awaits the ticket on
//! its own thread, so the log's wake-up reaches the caller directly instead of passing back
//! through the shard's thread. No answer escapes early: reads and rejections are sealed with the
//! ticket of every record the shard had appended when it computed them (`last_lsn`), and of the
//! record it is gathering, so no response shows state that is not yet durable (ARCHITECTURE.md
//! invariants 1 and 2).
//!
//! If the WAL refuses an append after the state was changed in memory (it was poisoned), the
//! shard's memory is ahead of its log; the shard then refuses everything until the process
//! restarts and recovery rebuilds it from the log.
//!
//! # Coalesced records
//!
//! Commands that find other commands queued behind them share a record (issue 15: "a shard that
//! finds several commands queued takes them as one batch and logs them in one record"). An
//! [`Execute`] that changes something is decided and applied at once, as always, but its events
//! and its idempotency entry join the shard's *gathered* record instead of being appended alone;
//! the first command of a gathered record asks the actor to flush it
//! (`AsyncContext::notify`), and actix handles such notifications only after the mailbox is
//! drained, so the flush comes once every command already queued has been decided, and appends
//! them all as one [`JournalEntry`]. The commands' answers carry a [`Ticket::Gathering`], which
//! resolves to that record's WAL ticket: nothing is answered before the record is durable, and
//! the record holds the commands' events in the order they were decided, so replaying it is
//! replaying them one by one. The gathered record is flushed before anything else is appended
//! (batches, directory commands, answers, expired holds) and before a history read takes its
//! bound, so the log's order stays the order of decision; it is flushed at once when
//! `coalesce_max` messages of any kind were handled since its first command, so it holds at
//! most that many commands and a steady stream of reads cannot hold it back. `coalesce_max` 1
//! logs every command alone, as before.
//!
//! Reads, refusals and commands that change nothing, decided while a record is gathered, wait
//! for it too ([`ShardActor::after_durable`]). A [`Peek`] does not: it may see a fact (a
//! wallet's owner, which shard holds a uuid) whose record is still gathered, and a step on
//! another shard may then become durable before it. That is safe for the same reason a peek
//! is never rendered: whatever a client is answered that depends on the fact runs a step on
//! the fact's own shard, queued behind the gathered record and logged after it, and waits for
//! that step (a transfer to a wallet whose creation a crash lost is refused its credit by
//! recovery and released, unanswered). A shard that failed still appends a gathered record it
//! holds (the commands in it were decided before the failure, so it is a valid prefix of the
//! log) before refusing what comes next; if a split append fails partway, every command of
//! the record is answered `Unavailable`, also those already logged, whose keys replay the
//! logged answers to a retry.

use std::collections::VecDeque;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::time::Duration;

use actix::{Actor, AsyncContext, Context as ActorContext, Handler, Message};

use super::clock::Clock;
use super::config::{EngineError, Renderer};
use super::engine::WalletScope;
use super::history::{History, HistoryBounds};
use super::idempotency::IdempotencyTable;
use super::journal::{IdempotencyRecord, JournalEntry};
use crate::identity::directory::{Directory, DirectoryCommand, DirectoryEvent};
use crate::ledger::view::Holder;
use crate::shard::command::{
    BatchMark, Command, Context, Outcome, CLOCK_SKEW_ABSORBED_MS, EXPIRE_BATCH_MAX,
};
use crate::shard::event::Event;
use crate::shard::state::Shard;
use crate::values::error::{ExecuteError, Rejection};
use crate::values::ids::{Uuid, WalletId};

/// What answer to log with an idempotency key.
#[derive(Clone, Debug)]
pub enum Answer {
    /// The command's own result.
    Result,
    /// The result if it is a rejection; otherwise the command is the first of several steps and
    /// its key is logged as pending.
    RejectionOnly,
    /// The view of a transaction after the command (the debit side of a finished transfer).
    Transaction(Uuid),
    /// A rejection decided by an earlier step (the target refused a cross-shard credit).
    Rejected(Rejection),
    /// An outcome computed by an earlier step on another shard (a cross-shard payment's view).
    Given(Box<Outcome>),
    /// The view of a payment of this shard after the command (a finished cross-shard refund).
    Payment(Uuid),
    /// A whole transfer batch answered by one [`ExecuteBatch`]: the template holds the items
    /// decided before the engine (`Some`), and `None` where this message's results go, in order.
    Batch {
        atomic: bool,
        template: Vec<Option<crate::shard::command::BatchItemResult>>,
    },
}

/// An idempotency key riding along with a command.
pub struct Claim {
    /// The record to log, `response` still `None`.
    pub record: IdempotencyRecord,
    pub answer: Answer,
}

/// Run a command on the shard.
pub struct Execute {
    pub command: Command,
    pub context: Context,
    pub claim: Option<Claim>,
}

/// What a command did, once durable.
#[derive(Debug)]
pub struct Executed {
    pub result: Result<Outcome, Rejection>,
    /// The rendered answer, when the command carried a claim with a renderer.
    pub response: Option<Vec<u8>>,
}

impl Message for Execute {
    type Result = Result<Durable<Executed>, EngineError>;
}

/// A shard's answer that may be shown only once the log is durable up to what it depends on.
///
/// The value is reachable only through [`Durable::wait`], which resolves when the ticket does, so
/// a caller cannot render state ahead of the log by mistake.
#[must_use = "an answer is valid only once its records are durable: call wait"]
pub struct Durable<T> {
    value: T,
    ticket: Ticket,
}

impl<T> Durable<T> {
    /// The value once every record it depends on is durable; `Unavailable` if the log failed.
    pub async fn wait(self) -> Result<T, EngineError> {
        let ticket = match self.ticket {
            Ticket::Logged(ticket) => ticket,
            Ticket::Gathering(gathering) => gathering.logged().await?,
        };
        ticket
            .await
            .map_err(|e| EngineError::Unavailable(e.to_string()))?;
        Ok(self.value)
    }
}

/// What an answer waits for: a record already handed to the log, or the shard's gathered record,
/// not yet appended (see "Coalesced records" above).
enum Ticket {
    Logged(wal::Append),
    Gathering(Arc<Gathering>),
}

/// The WAL ticket of a gathered record, once the shard has appended it.
struct Gathering {
    /// Set once, when the record is appended (or could not be).
    logged: std::sync::OnceLock<Result<wal::Append, EngineError>>,
    appended: tokio::sync::Notify,
}

impl Gathering {
    fn new() -> Arc<Self> {
        Arc::new(Gathering {
            logged: std::sync::OnceLock::new(),
            appended: tokio::sync::Notify::new(),
        })
    }

    /// Publishes the outcome of the append and wakes every waiter.
    fn resolve(&self, outcome: Result<wal::Append, EngineError>) {
        let _ = self.logged.set(outcome);
        self.appended.notify_waiters();
    }

    async fn logged(&self) -> Result<wal::Append, EngineError> {
        loop {
            let mut appended = std::pin::pin!(self.appended.notified());
            // Registered before the check, so a resolve between the two still wakes it.
            appended.as_mut().enable();
            if let Some(outcome) = self.logged.get() {
                return outcome.clone();
            }
            appended.await;
        }
    }
}

/// Commands decided and applied whose events and keys wait to be appended as one record.
struct Gathered {
    events: Vec<Event>,
    keys: Vec<IdempotencyRecord>,
    /// Where each command's events and keys end, and its command stamp, so an oversized record
    /// can be split into records each paired with its own command's stamp.
    ends: Vec<(usize, usize, u64)>,
    /// Messages the actor handled since the record's first command (its commands included).
    messages: usize,
    ticket: Arc<Gathering>,
}

impl Drop for Gathered {
    /// A gathered record dropped unappended (the actor stopped) answers its commands
    /// `Unavailable`: none of them was logged, so none may be acknowledged.
    fn drop(&mut self) {
        if self.ticket.logged.get().is_none() {
            self.ticket.resolve(Err(EngineError::Unavailable(
                "the shard stopped before logging the command".into(),
            )));
        }
    }
}

/// Test builds: the (command stamp, LSN) pairs of the records the indexer has not filed yet.
#[cfg(test)]
pub(crate) struct Unfiled;

#[cfg(test)]
impl Message for Unfiled {
    type Result = Vec<(u64, u64)>;
}

#[cfg(test)]
impl Handler<Unfiled> for ShardActor {
    type Result = Vec<(u64, u64)>;

    fn handle(&mut self, _: Unfiled, _: &mut Self::Context) -> Self::Result {
        self.unfiled.iter().copied().collect()
    }
}

/// Append the shard's gathered record (see "Coalesced records").
struct FlushGathered;

impl Message for FlushGathered {
    type Result = ();
}

/// Read the shard's state; answered once everything the shard had appended is durable.
pub struct Read<R>(pub Box<dyn FnOnce(&Shard) -> R + Send>);

impl<R: Send + 'static> Message for Read<R> {
    type Result = Result<Durable<R>, EngineError>;
}

/// Read a wallet's unchanging facts for a history read of it, with the LSN the history store
/// must cover before it serves that wallet's history (see [`ShardActor::history_bound`]). Not
/// sealed with a durability ticket: the bound covers the wallet's creation and every change to
/// its history, and the indexer files only durable records, so waiting for the bound is the
/// durability wait for what such a read shows; which is why it answers only the wallet's
/// [`WalletScope`] (facts fixed at creation), never state that changes. Asked only when the
/// engine does not remember the wallet's scope: otherwise a read finds the bound without the
/// shard ([`HistoryBounds`]).
pub struct ReadForHistory(pub WalletId);

impl Message for ReadForHistory {
    type Result = Result<(Result<WalletScope, Rejection>, u64), EngineError>;
}

/// [`ReadForHistory`] for every wallet of a merchant on this shard (owner type merchant,
/// business `merchant_id`), in id order, with the latest of their bounds.
pub struct ReadMerchantForHistory(pub u64);

impl Message for ReadMerchantForHistory {
    type Result = Result<(Vec<Holder>, u64), EngineError>;
}

/// Drop from memory what the indexer has filed now, instead of at the next tick; answers how
/// many records the shard still holds in memory.
pub struct EvictFiled;

impl Message for EvictFiled {
    type Result = usize;
}

/// Change the directory (shard 0 only).
pub struct ExecuteDirectory {
    pub command: DirectoryCommand,
    pub context: Context,
}

impl Message for ExecuteDirectory {
    type Result = Result<Durable<Result<DirectoryEvent, Rejection>>, EngineError>;
}

/// Read the directory (shard 0 only); answered once what it shows is durable.
pub struct ReadDirectory<R>(pub Box<dyn FnOnce(&Directory) -> R + Send>);

impl<R: Send + 'static> Message for ReadDirectory<R> {
    type Result = Result<Durable<R>, EngineError>;
}

/// Read directory facts that never change once written (whether a business is a merchant)
/// without waiting for durability; shard 0 only. The same rules as [`Peek`]: for routing and
/// permission checks, never rendered.
pub struct PeekDirectory<R>(pub Box<dyn FnOnce(&Directory) -> R + Send>);

impl<R: Send + 'static> Message for PeekDirectory<R> {
    type Result = Result<R, EngineError>;
}

/// Read facts that never change once written (a wallet's owner, business and currency; which
/// shard holds a uuid) without waiting for durability. Only for routing and permission checks:
/// never render what a peek returns, since it may include records not yet durable, or not yet
/// appended (a gathered record: see "Coalesced records"); the command that follows waits for
/// its own durability anyway.
pub struct Peek<R>(pub Box<dyn FnOnce(&Shard) -> R + Send>);

impl<R: Send + 'static> Message for Peek<R> {
    type Result = Result<R, EngineError>;
}

pub struct ShardActor {
    shard: Shard,
    /// Shard 0 hosts the identities.
    directory: Option<Directory>,
    wal: wal::Wal,
    clock: Arc<dyn Clock>,
    idempotency: Arc<IdempotencyTable>,
    renderer: Arc<dyn Renderer>,
    /// LSN of the newest record this shard appended.
    last_lsn: u64,
    /// Set when memory and log may disagree; every later message is refused.
    failed: Option<String>,
    /// The engine's first failure, shared by every shard: [`super::Engine::failure`] reports it
    /// so the process can stop (fail-stop, ARCHITECTURE.md invariant 11).
    failure: Arc<std::sync::OnceLock<String>>,
    hold_tick: Duration,
    /// The indexer's progress: records it has filed leave the shard's memory.
    history: Option<History>,
    /// (command stamp, LSN of its record) of appended commands the indexer has not filed yet,
    /// oldest first.
    unfiled: VecDeque<(u64, u64)>,
    /// Per wallet, the LSN of the newest record whose events changed its filed history
    /// ([`Event::history_wallet`]), kept until the indexer has filed it: a wallet changed less
    /// recently than the indexer's lag has nothing to wait for. Shared with every shard and
    /// with readers, who look a bound up without a message to this actor; this actor writes
    /// its own wallets' bounds ([`HistoryBounds`]). Every history read also waits for the log's
    /// last LSN when the actors started (what recovery replayed, which the indexer may still
    /// be filing).
    bounds: Arc<HistoryBounds>,
    /// (LSN, wallet) of every bound this actor noted, oldest first: what to forget once filed,
    /// without walking the map.
    history_queue: VecDeque<(u64, u64)>,
    /// Commands decided but not yet appended (see "Coalesced records").
    gathered: Option<Gathered>,
    /// At most this many commands share a record (1: every command is logged alone).
    coalesce_max: usize,
    /// The log's largest record: a gathered record that would pass it is appended command by
    /// command instead.
    record_bytes_max: usize,
    /// Commands logged by every shard since the engine opened (a gathered record counts each of
    /// its commands, a batch each of its items): what periodic snapshots are paced by, since a
    /// restart replays commands, not records.
    commands_logged: Arc<std::sync::atomic::AtomicU64>,
    /// When the shard last warned that its commands' clock is behind its posting floor.
    clock_warned: Option<std::time::Instant>,
}

/// How a shard gathers commands into records (see "Coalesced records"), and counts them.
#[derive(Clone, Debug)]
pub struct Coalesce {
    /// At most this many commands share a record (1: each is logged alone).
    pub commands_max: usize,
    /// The log's largest record, in bytes.
    pub record_bytes_max: usize,
    /// The engine's count of logged commands (see [`ShardActor`]'s field of that name).
    pub commands_logged: Arc<std::sync::atomic::AtomicU64>,
}

/// How often a shard drops what the indexer has filed. Memory holds about this long of records
/// beyond the indexer's lag.
const EVICT_TICK: Duration = Duration::from_millis(50);

/// At most one warning a shard in this long that its clock is behind its posting floor.
const CLOCK_WARN_EVERY: Duration = Duration::from_secs(60);

/// How far the clock is behind the posting floor `floor_ms`, when that is worth a warning: a
/// command stamped at `command_ms` more than [`CLOCK_SKEW_ABSORBED_MS`] behind it, the clock
/// read now (`now`: the instant and the wall clock) still that far behind (not a command that
/// only waited in a long queue), and no warning given since [`CLOCK_WARN_EVERY`] before.
fn clock_warning(
    floor_ms: i64,
    command_ms: i64,
    warned: Option<std::time::Instant>,
    now: impl FnOnce() -> (std::time::Instant, i64),
) -> Option<(i64, std::time::Instant)> {
    if floor_ms.saturating_sub(command_ms) <= CLOCK_SKEW_ABSORBED_MS {
        return None;
    }
    let (at, clock_ms) = now();
    let behind = floor_ms.saturating_sub(clock_ms);
    let due = warned.is_none_or(|last| at.saturating_duration_since(last) >= CLOCK_WARN_EVERY);
    (behind > CLOCK_SKEW_ABSORBED_MS && due).then_some((behind, at))
}

impl ShardActor {
    #[allow(clippy::too_many_arguments)]
    pub(crate) fn new(
        shard: Shard,
        directory: Option<Directory>,
        wal: wal::Wal,
        clock: Arc<dyn Clock>,
        idempotency: Arc<IdempotencyTable>,
        renderer: Arc<dyn Renderer>,
        hold_tick: Duration,
        failure: Arc<std::sync::OnceLock<String>>,
        history: Option<History>,
        bounds: Arc<HistoryBounds>,
        coalesce: Coalesce,
    ) -> Self {
        let last_lsn = wal.last_lsn();
        ShardActor {
            shard,
            directory,
            wal,
            clock,
            idempotency,
            renderer,
            last_lsn,
            failed: None,
            failure,
            hold_tick,
            history,
            unfiled: VecDeque::new(),
            bounds,
            history_queue: VecDeque::new(),
            gathered: None,
            coalesce_max: coalesce.commands_max.max(1),
            record_bytes_max: coalesce.record_bytes_max,
            commands_logged: coalesce.commands_logged,
            clock_warned: None,
        }
    }

    /// Warns (at most once a minute) when a command's clock was well behind the shard's
    /// posting floor: its postings took the floor's time, its deadlines its clock's.
    fn note_clock(&mut self, command_ms: i64) {
        let floor_ms = self.shard.posted_at_floor_ms;
        let clock = &self.clock;
        let now = || (std::time::Instant::now(), clock.now_ms());
        if let Some((behind_ms, at)) = clock_warning(floor_ms, command_ms, self.clock_warned, now) {
            self.clock_warned = Some(at);
            tracing::warn!(
                shard = self.shard.shard_index(),
                behind_ms,
                floor_ms,
                "the wall clock is behind the newest posting of this shard: postings are \
                 stamped at that time until the clock catches up, deadlines follow the clock \
                 (check the host's clock)"
            );
        }
    }

    fn count_logged(&self, commands: usize) {
        self.commands_logged
            .fetch_add(commands as u64, std::sync::atomic::Ordering::Relaxed);
    }

    /// The LSN the history store must cover before it serves `wallet_id`'s history as a caller
    /// could have seen it: the newest record that created the wallet or changed that history
    /// ([`Event::history_wallet`]), or what recovery replayed when this actor started,
    /// whichever is later. The store holds only durable records, so reaching it also makes
    /// everything the read shows durable.
    ///
    /// Only the wallet's own shard logs events that name it, and this actor logs them all, so
    /// no record beyond the bound changes the wallet's history. Waiting for the durable LSN
    /// instead, as every history read did, made a read of a quiet wallet wait for the indexer
    /// to file the whole load's backlog (a statement page's p99 was 169 ms under load).
    fn history_bound(&self, wallet_id: WalletId) -> u64 {
        if self.history.is_none() {
            // Not tracked without an indexer to forget it (no engine runs so; recovery always
            // gives the actors the history): everything this shard logged, which the store
            // holds only once durable.
            return self.last_lsn.max(self.bounds.started());
        }
        self.bounds.bound(wallet_id.0)
    }

    /// Drops from the shard's memory every record whose latest change the indexer has filed.
    fn evict_filed(&mut self) {
        let Some(history) = &self.history else {
            return;
        };
        let indexed = history.progress().indexed_lsn;
        let mut filed = None;
        while let Some(&(stamp, lsn)) = self.unfiled.front() {
            if lsn > indexed {
                break;
            }
            filed = Some(stamp);
            self.unfiled.pop_front();
        }
        if let Some(stamp) = filed {
            self.shard.evict_filed(stamp);
        }
        while let Some(&(lsn, wallet)) = self.history_queue.front() {
            if lsn > indexed {
                break;
            }
            self.history_queue.pop_front();
            self.bounds.forget(wallet, lsn);
        }
        // A burst (or a stalled indexer) may have touched every wallet: give that memory back.
        if self.history_queue.capacity() > 4 * self.history_queue.len() + 1024 {
            self.history_queue.shrink_to_fit();
            self.bounds.shrink();
        }
    }

    fn fail(&mut self, reason: String) -> EngineError {
        tracing::error!(shard = self.shard.shard_index(), reason = %reason, "shard stopped accepting commands; restart the process to recover from the log");
        self.failed = Some(reason.clone());
        let _ = self.failure.set(format!(
            "shard {} failed: {reason}",
            self.shard.shard_index()
        ));
        EngineError::Unavailable(reason)
    }

    /// `value`, to be shown once every record this shard appended so far, and its gathered
    /// record, is durable.
    fn after_durable<T>(&self, value: T) -> Durable<T> {
        let ticket = match &self.gathered {
            Some(gathered) => Ticket::Gathering(Arc::clone(&gathered.ticket)),
            None => Ticket::Logged(self.wal.wait_for(self.last_lsn)),
        };
        Durable { value, ticket }
    }

    /// An answer that reads a record which could not be read is not kept under a key. When the
    /// command changed nothing, it is refused as unavailable (the claim is released); when it
    /// did, memory is ahead of the log and the shard stops: a restart replays the log, which
    /// never held the command, and recovery finishes a cross-shard move under its pending key.
    fn readable_answer(
        &mut self,
        view: &Result<Outcome, Rejection>,
        events: &[Event],
    ) -> Result<(), EngineError> {
        match view {
            Err(Rejection::Unavailable(reason)) if events.is_empty() => {
                Err(EngineError::Unavailable((*reason).to_owned()))
            }
            Err(Rejection::Unavailable(reason)) => Err(self.fail(format!(
                "the answer of an applied command could not be read: {reason}"
            ))),
            _ => Ok(()),
        }
    }

    /// Decide, apply, log alone (after the gathered record). Returns the result and, when
    /// something was logged, the WAL ticket.
    fn run(&mut self, message: Execute) -> Result<(Executed, Option<wal::Append>), EngineError> {
        self.flush_gathered()?;
        let (executed, logged) = self.decide(message)?;
        match logged {
            Some((events, key)) => {
                let ticket = self.log(events, key.into_iter().collect(), 1)?;
                Ok((executed, Some(ticket)))
            }
            None => Ok((executed, None)),
        }
    }

    /// Decide and apply a command; returns its result and what it must log (its events and its
    /// idempotency entry), `None` when it changed nothing and carries no key.
    #[allow(clippy::type_complexity)]
    fn decide(
        &mut self,
        message: Execute,
    ) -> Result<(Executed, Option<(Vec<Event>, Option<IdempotencyRecord>)>), EngineError> {
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let (events, result) = match self.shard.execute(&message.command, &message.context) {
            Ok((events, outcome)) => (events, Ok(outcome)),
            Err(ExecuteError::Rejected(rejection)) => (Vec::new(), Err(rejection)),
            Err(ExecuteError::Corrupt(error)) => {
                return Err(self.fail(format!("applying decided events failed: {error}")))
            }
        };
        self.note_clock(message.context.now_ms);
        // A filed record could not be read: nothing changed, and that is not an answer to keep
        // under the request's key (a retry must run again), so nothing is logged and the claim
        // is released.
        if let Err(Rejection::Unavailable(reason)) = &result {
            return Err(EngineError::Unavailable((*reason).to_owned()));
        }
        let (response, idempotency) = match message.claim {
            Some(Claim { mut record, answer }) => {
                let route = record.route;
                let response = match answer {
                    Answer::Result => Some(self.renderer.render(route, &result)),
                    Answer::RejectionOnly => result
                        .is_err()
                        .then(|| self.renderer.render(route, &result)),
                    Answer::Transaction(uuid) => {
                        let view = self.shard.transaction_view(uuid).map(Outcome::Transaction);
                        self.readable_answer(&view, &events)?;
                        Some(self.renderer.render(route, &view))
                    }
                    Answer::Rejected(rejection) => {
                        Some(self.renderer.render(route, &Err(rejection)))
                    }
                    Answer::Given(outcome) => Some(self.renderer.render(route, &Ok(*outcome))),
                    Answer::Payment(uuid) => {
                        let view = self.shard.payment_view(uuid).map(Outcome::Payment);
                        self.readable_answer(&view, &events)?;
                        Some(self.renderer.render(route, &view))
                    }
                    // Only batches carry a template; a single command renders its own result.
                    Answer::Batch { .. } => Some(self.renderer.render(route, &result)),
                };
                record.response.clone_from(&response);
                if response.is_some() {
                    // The retention window runs from when the answer was decided (for a
                    // cross-shard move, its last step), not from when the key was claimed.
                    record.at_ms = message.context.now_ms;
                }
                // The first step of a cross-shard move: recovery finds the waiting key by it.
                match &result {
                    Ok(Outcome::TransferReserved { transfer, .. }) => {
                        record.transfer_uuid = Some(transfer.uuid);
                    }
                    Ok(Outcome::PaymentReserved { reservation, .. }) => {
                        record.transfer_uuid = Some(reservation.uuid);
                    }
                    _ => {}
                }
                (response, Some(record))
            }
            None => (None, None),
        };
        if events.is_empty() && idempotency.is_none() {
            return Ok((Executed { result, response }, None));
        }
        Ok((Executed { result, response }, Some((events, idempotency))))
    }

    /// Appends one record of the shard's commands' events and keys, and remembers what the
    /// indexer and the idempotency table need of it.
    fn log(
        &mut self,
        events: Vec<Event>,
        keys: Vec<IdempotencyRecord>,
        commands: usize,
    ) -> Result<wal::Append, EngineError> {
        let entry = self.entry(events, keys);
        let bytes = self.encode(&entry)?;
        let stamp = self.shard.command_stamp();
        self.log_encoded(entry, bytes, (stamp, commands))
    }

    fn entry(&self, events: Vec<Event>, keys: Vec<IdempotencyRecord>) -> JournalEntry {
        JournalEntry {
            shard: self.shard.shard_index(),
            events,
            directory: Vec::new(),
            idempotency: keys,
        }
    }

    /// [`Self::log`] of an entry already encoded, holding `commands` commands, whose last ran
    /// as `stamp`: once the indexer has filed it, the shard may drop what that command and those
    /// before it changed.
    fn log_encoded(
        &mut self,
        entry: JournalEntry,
        bytes: Vec<u8>,
        (stamp, commands): (u64, usize),
    ) -> Result<wal::Append, EngineError> {
        let ticket = self.append_encoded(&entry, bytes)?;
        self.count_logged(commands);
        if self.history.is_some() {
            self.unfiled.push_back((stamp, ticket.lsn()));
        }
        for record in entry.idempotency {
            self.keep_key(record, ticket.lsn());
        }
        Ok(ticket)
    }

    /// Adds a decided command's events and key to the gathered record; its answer waits for
    /// that record. Flushes at once when the record is full (see [`Self::note_message`]);
    /// otherwise the first command of a record asks for the flush that follows the drained
    /// mailbox.
    fn gather(
        &mut self,
        events: Vec<Event>,
        key: Option<IdempotencyRecord>,
        ctx: &mut ActorContext<Self>,
    ) -> Result<Arc<Gathering>, EngineError> {
        let gathered = match &mut self.gathered {
            Some(gathered) => gathered,
            slot @ None => {
                ctx.notify(FlushGathered);
                slot.insert(Gathered {
                    events: Vec::new(),
                    keys: Vec::new(),
                    ends: Vec::new(),
                    messages: 0,
                    ticket: Gathering::new(),
                })
            }
        };
        gathered.events.extend(events);
        gathered.keys.extend(key);
        let stamp = self.shard.command_stamp();
        gathered
            .ends
            .push((gathered.events.len(), gathered.keys.len(), stamp));
        let ticket = Arc::clone(&gathered.ticket);
        self.note_message()?;
        Ok(ticket)
    }

    /// Counts a message handled while a record is gathered, and flushes the record once
    /// `coalesce_max` messages were: a record holds at most that many commands, and waits for at
    /// most that many messages however steadily others (reads, peeks, commands that change
    /// nothing) keep the mailbox from draining.
    fn note_message(&mut self) -> Result<(), EngineError> {
        let full = self.gathered.as_mut().is_some_and(|gathered| {
            gathered.messages += 1;
            gathered.messages >= self.coalesce_max
        });
        if full {
            self.flush_gathered()?;
        }
        Ok(())
    }

    /// Appends the gathered record, if any, and hands its ticket to the commands waiting on it.
    /// A record the log could not take whole (larger than its largest record) is appended
    /// command by command; the last record's ticket then stands for all of them, since the log
    /// makes records durable in order.
    fn flush_gathered(&mut self) -> Result<(), EngineError> {
        let Some(mut gathered) = self.gathered.take() else {
            return Ok(());
        };
        let entry = self.entry(
            std::mem::take(&mut gathered.events),
            std::mem::take(&mut gathered.keys),
        );
        let last_stamp = gathered
            .ends
            .last()
            .map_or_else(|| self.shard.command_stamp(), |&(_, _, stamp)| stamp);
        let outcome = match self.encode(&entry) {
            Ok(bytes) if bytes.len() > self.record_bytes_max && gathered.ends.len() > 1 => {
                self.log_one_by_one(entry, &gathered.ends)
            }
            Ok(bytes) => self.log_encoded(entry, bytes, (last_stamp, gathered.ends.len())),
            Err(error) => Err(error),
        };
        gathered.ticket.resolve(outcome.clone());
        outcome.map(drop)
    }

    /// Appends each command of a gathered record as its own record, in order, each paired with
    /// its own command's stamp (the shard's stamp is already the last command's).
    fn log_one_by_one(
        &mut self,
        entry: JournalEntry,
        ends: &[(usize, usize, u64)],
    ) -> Result<wal::Append, EngineError> {
        let mut events = entry.events.into_iter();
        let mut keys = entry.idempotency.into_iter();
        let mut start = (0, 0);
        let mut last = None;
        for &(events_end, keys_end, stamp) in ends {
            let command_events = events
                .by_ref()
                .take(events_end.saturating_sub(start.0))
                .collect();
            let command_keys = keys
                .by_ref()
                .take(keys_end.saturating_sub(start.1))
                .collect();
            start = (events_end, keys_end);
            let entry = self.entry(command_events, command_keys);
            let bytes = self.encode(&entry)?;
            last = Some(self.log_encoded(entry, bytes, (stamp, 1))?);
        }
        last.ok_or_else(|| self.fail("a gathered record held no command".into()))
    }

    /// Stores a key logged at `lsn` in the table, tagged with that LSN: shown to retries only
    /// once durable. The indexer drops a filed answer after publishing its progress; if it filed
    /// this one before it was stored here, it found nothing to drop, and this side does.
    fn keep_key(&self, record: IdempotencyRecord, lsn: u64) {
        self.idempotency.record(&record, lsn);
        if record.response.is_some()
            && self
                .history
                .as_ref()
                .is_some_and(|history| history.progress().indexed_lsn >= lsn)
        {
            self.idempotency
                .forget_filed(&(record.caller, record.key), lsn);
        }
    }

    /// Encodes and appends one record. Memory already holds its commands' effects, so a record
    /// that cannot be encoded or appended stops the shard: nothing is answered, and a restart
    /// rebuilds the shard from the log, which never held the commands.
    fn append(&mut self, entry: &JournalEntry) -> Result<wal::Append, EngineError> {
        let bytes = self.encode(entry)?;
        self.append_encoded(entry, bytes)
    }

    fn encode(&mut self, entry: &JournalEntry) -> Result<Vec<u8>, EngineError> {
        entry.encode().map_err(|error| {
            self.fail(format!(
                "a command's record could not be encoded, so it was not logged: {error}"
            ))
        })
    }

    /// [`Self::append`] of `entry` encoded as `bytes`.
    fn append_encoded(
        &mut self,
        entry: &JournalEntry,
        bytes: Vec<u8>,
    ) -> Result<wal::Append, EngineError> {
        match self.wal.append(bytes) {
            Ok(ticket) => {
                self.last_lsn = ticket.lsn();
                if self.history.is_some() {
                    for wallet in entry.events.iter().filter_map(Event::history_wallet) {
                        // Before the ticket leaves this actor: see `HistoryBounds`.
                        if self.bounds.note(wallet.0, ticket.lsn()) {
                            self.history_queue.push_back((ticket.lsn(), wallet.0));
                        }
                    }
                }
                Ok(ticket)
            }
            Err(error) => Err(self.fail(format!("the write-ahead log refused a record: {error}"))),
        }
    }

    /// Expires overdue holds. Runs on a timer, so holds expire after a restart too.
    fn expire_holds(&mut self) {
        if self.failed.is_some() || self.shard.active_hold_count() == 0 {
            return;
        }
        let message = Execute {
            command: Command::ExpireHolds {
                max_holds: EXPIRE_BATCH_MAX,
            },
            context: self.clock.context(),
            claim: None,
        };
        match self.run(message) {
            Ok((
                Executed {
                    result: Ok(Outcome::HoldsExpired { count }),
                    ..
                },
                _,
            )) if count > 0 => {
                tracing::debug!(shard = self.shard.shard_index(), count, "expired holds");
            }
            Ok(_) => {}
            Err(error) => tracing::error!(%error, "expiring holds failed"),
        }
    }
}

impl Actor for ShardActor {
    type Context = ActorContext<Self>;

    fn started(&mut self, ctx: &mut Self::Context) {
        ctx.run_interval(self.hold_tick, |actor, _| actor.expire_holds());
        if self.history.is_some() {
            ctx.run_interval(EVICT_TICK, |actor, _| actor.evict_filed());
        }
    }
}

impl Handler<Execute> for ShardActor {
    type Result = Result<Durable<Executed>, EngineError>;

    fn handle(&mut self, message: Execute, ctx: &mut Self::Context) -> Self::Result {
        if self.coalesce_max <= 1 {
            return match self.run(message)? {
                (executed, None) => Ok(self.after_durable(executed)),
                (executed, Some(ticket)) => Ok(Durable {
                    value: executed,
                    ticket: Ticket::Logged(ticket),
                }),
            };
        }
        match self.decide(message)? {
            // Changed nothing: shown once what it was decided against is durable, which
            // includes the gathered record if there is one.
            (executed, None) => {
                let durable = self.after_durable(executed);
                self.note_message()?;
                Ok(durable)
            }
            (executed, Some((events, key))) => {
                let ticket = self.gather(events, key, ctx)?;
                Ok(Durable {
                    value: executed,
                    ticket: Ticket::Gathering(ticket),
                })
            }
        }
    }
}

impl Handler<FlushGathered> for ShardActor {
    type Result = ();

    fn handle(&mut self, _: FlushGathered, _: &mut Self::Context) {
        // A failure has stopped the shard and answered the gathered commands already.
        let _ = self.flush_gathered();
    }
}

impl<R: Send + 'static> Handler<Read<R>> for ShardActor {
    type Result = Result<Durable<R>, EngineError>;

    fn handle(&mut self, read: Read<R>, _: &mut Self::Context) -> Self::Result {
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let value = (read.0)(&self.shard);
        let durable = self.after_durable(value);
        self.note_message()?;
        Ok(durable)
    }
}

impl Handler<ReadForHistory> for ShardActor {
    type Result = Result<(Result<WalletScope, Rejection>, u64), EngineError>;

    fn handle(&mut self, read: ReadForHistory, _: &mut Self::Context) -> Self::Result {
        // The bound is an LSN: the gathered record needs one first.
        self.flush_gathered()?;
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let holder = self.shard.find_wallet(read.0).map(WalletScope::of);
        Ok((holder, self.history_bound(read.0)))
    }
}

impl Handler<ReadMerchantForHistory> for ShardActor {
    type Result = Result<(Vec<Holder>, u64), EngineError>;

    fn handle(&mut self, read: ReadMerchantForHistory, _: &mut Self::Context) -> Self::Result {
        self.flush_gathered()?;
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let holders: Vec<Holder> = self
            .shard
            .merchant_wallets_of(read.0)
            .map(Holder::from)
            .collect();
        let bound = holders
            .iter()
            .map(|holder| self.history_bound(holder.id))
            .fold(self.bounds.started(), u64::max);
        Ok((holders, bound))
    }
}

impl Handler<EvictFiled> for ShardActor {
    type Result = usize;

    fn handle(&mut self, _: EvictFiled, _: &mut Self::Context) -> usize {
        // What the caller counts on being filed soon must be in the log.
        let _ = self.flush_gathered();
        self.evict_filed();
        self.shard.records_in_memory()
    }
}

impl<R: Send + 'static> Handler<Peek<R>> for ShardActor {
    type Result = Result<R, EngineError>;

    fn handle(&mut self, peek: Peek<R>, _: &mut Self::Context) -> Self::Result {
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let value = (peek.0)(&self.shard);
        self.note_message()?;
        Ok(value)
    }
}

impl<R: Send + 'static> Handler<PeekDirectory<R>> for ShardActor {
    type Result = Result<R, EngineError>;

    fn handle(&mut self, peek: PeekDirectory<R>, _: &mut Self::Context) -> Self::Result {
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let directory = self
            .directory
            .as_ref()
            .ok_or_else(|| EngineError::Unavailable("the directory lives on shard 0".into()))?;
        let value = (peek.0)(directory);
        self.note_message()?;
        Ok(value)
    }
}

impl Handler<ExecuteDirectory> for ShardActor {
    type Result = Result<Durable<Result<DirectoryEvent, Rejection>>, EngineError>;

    fn handle(&mut self, message: ExecuteDirectory, _: &mut Self::Context) -> Self::Result {
        // What was decided before is logged before.
        self.flush_gathered()?;
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let Some(directory) = self.directory.as_mut() else {
            return Err(EngineError::Unavailable(
                "the directory lives on shard 0".into(),
            ));
        };
        let events = match directory.decide(&message.command, message.context.now_ms) {
            Ok(events) => events,
            Err(rejection) => return Ok(self.after_durable(Err(rejection))),
        };
        for event in &events {
            if let Err(error) = directory.apply(event) {
                return Err(self.fail(format!("applying a directory event failed: {error}")));
            }
        }
        let Some(created) = events.first().cloned() else {
            return Err(EngineError::Unavailable(
                "the directory decided nothing".into(),
            ));
        };
        let entry = JournalEntry {
            shard: self.shard.shard_index(),
            events: Vec::new(),
            directory: events,
            idempotency: Vec::new(),
        };
        let ticket = self.append(&entry)?;
        self.count_logged(1);
        Ok(Durable {
            value: Ok(created),
            ticket: Ticket::Logged(ticket),
        })
    }
}

impl<R: Send + 'static> Handler<ReadDirectory<R>> for ShardActor {
    type Result = Result<Durable<R>, EngineError>;

    fn handle(&mut self, read: ReadDirectory<R>, _: &mut Self::Context) -> Self::Result {
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let Some(directory) = self.directory.as_ref() else {
            return Err(EngineError::Unavailable(
                "the directory lives on shard 0".into(),
            ));
        };
        let value = (read.0)(directory);
        let durable = self.after_durable(value);
        self.note_message()?;
        Ok(durable)
    }
}

/// Run several commands on the shard as one message: decided and applied in order, logged as one
/// WAL record, answered once that record is durable (`super::batch` describes the protocol).
///
/// `atomic`: all or none. At the first refusal the commands already applied are undone in
/// reverse order by their compensations ([`compensation`]) inside the same handler call, so
/// nothing else on the shard interleaves and each undo finds exactly the state its command left;
/// the record then holds the commands and their undoing, and every other result is `NotPosted`.
pub struct ExecuteBatch {
    pub commands: Vec<(Command, Context)>,
    pub atomic: bool,
    pub claim: Option<Claim>,
    /// An atomic cross-shard batch's prepare on this shard (`super::atomic_batch`): the
    /// commands are its reservations, and when all of them stand the shard logs the batch's
    /// `TransferBatchPrepared` in the same record.
    pub prepare: Option<BatchPrepare>,
}

/// Which atomic batch a prepare message belongs to.
#[derive(Clone, Debug)]
pub struct BatchPrepare {
    pub batch: Uuid,
    /// The batch's source shards, sorted.
    pub shards: Vec<u32>,
}

/// What a batch message did, once durable.
#[derive(Debug)]
pub struct BatchExecuted {
    /// One per command, in order. In an atomic batch that failed, only the failing command's
    /// rejection; the others are answered `NotPosted` by [`BatchExecuted::failed`].
    pub results: Vec<Result<Outcome, Rejection>>,
    /// Atomic batches: the index of the first command refused (nothing of the message stayed).
    pub failed: Option<usize>,
    /// The rendered answer, when the message carried a claim with a renderer.
    pub response: Option<Vec<u8>>,
}

impl Message for ExecuteBatch {
    type Result = Result<Durable<BatchExecuted>, EngineError>;
}

/// Log an idempotency record on its own (the answer of a batch that spanned several messages).
pub struct LogAnswer(pub Claim);

impl Message for LogAnswer {
    type Result = Result<Durable<Option<Vec<u8>>>, EngineError>;
}

/// The command that undoes an applied batch command, or `None` when it cannot be undone.
fn compensation(outcome: &Outcome) -> Option<Command> {
    match outcome {
        Outcome::Transaction(view) => Some(Command::Reverse {
            transaction_uuid: view.uuid,
            reason: "atomic transfer batch aborted".into(),
        }),
        Outcome::TransferReserved { transfer, .. } => Some(Command::TransferRelease {
            transfer_uuid: transfer.uuid,
        }),
        _ => None,
    }
}

impl ShardActor {
    /// Decide and apply a batch's commands in order (see [`ExecuteBatch`]); returns the events
    /// of all of them, their results and the failing index of an atomic batch. With `prepare`
    /// (an atomic cross-shard batch's prepare), the reservations are followed by the batch's
    /// `TransferBatchPrepared`, inside the same all-or-nothing.
    #[allow(clippy::type_complexity)]
    fn run_batch(
        &mut self,
        commands: &[(Command, Context)],
        atomic: bool,
        prepare: Option<&BatchPrepare>,
    ) -> Result<
        (
            Vec<crate::shard::event::Event>,
            Vec<Result<Outcome, Rejection>>,
            Option<usize>,
        ),
        EngineError,
    > {
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(commands.len());
        for (index, (command, context)) in commands.iter().enumerate() {
            match self.shard.execute(command, context) {
                Ok((mut decided, outcome)) => {
                    events.append(&mut decided);
                    results.push(Ok(outcome));
                }
                Err(ExecuteError::Rejected(rejection)) if atomic => {
                    self.undo(&results, context, &mut events)?;
                    let mut answer = vec![Err(Rejection::InvalidState("not posted")); index];
                    answer.push(Err(rejection));
                    return Ok((events, answer, Some(index)));
                }
                Err(ExecuteError::Rejected(rejection)) => results.push(Err(rejection)),
                Err(ExecuteError::Corrupt(error)) => {
                    return Err(self.fail(format!("applying decided events failed: {error}")))
                }
            }
        }
        if let (Some(prepare), Some((_, context))) = (prepare, commands.last()) {
            let transfers = results
                .iter()
                .filter_map(|result| match result {
                    Ok(Outcome::TransferReserved { transfer, .. }) => Some(transfer.uuid),
                    _ => None,
                })
                .collect();
            let mark = Command::TransferBatchMark {
                batch: prepare.batch,
                mark: BatchMark::Prepared {
                    shards: prepare.shards.clone(),
                    transfers,
                },
            };
            match self.shard.execute(&mark, context) {
                Ok((mut decided, _)) => events.append(&mut decided),
                Err(error) => {
                    return Err(self.fail(format!(
                        "marking an atomic batch prepared after its reservations failed: {error}"
                    )))
                }
            }
        }
        Ok((events, results, None))
    }

    /// Undoes the applied commands of an atomic batch, newest first: each compensation meets
    /// exactly the state its command left, so it cannot be refused (if it is, the shard stops
    /// and a restart rebuilds it from the log, which never held the batch).
    fn undo(
        &mut self,
        results: &[Result<Outcome, Rejection>],
        context: &Context,
        events: &mut Vec<crate::shard::event::Event>,
    ) -> Result<(), EngineError> {
        for done in results.iter().rev() {
            let Ok(outcome) = done else { continue };
            let Some(undo) = compensation(outcome) else {
                return Err(self.fail(format!("an atomic batch cannot undo {outcome:?}")));
            };
            match self.shard.execute(&undo, context) {
                Ok((mut undone, _)) => events.append(&mut undone),
                Err(error) => {
                    return Err(
                        self.fail(format!("undoing an atomic batch's command failed: {error}"))
                    )
                }
            }
        }
        Ok(())
    }

    /// Logs `events` and the claim's record in one entry (nothing when both are empty) and
    /// answers with the ticket that makes them durable.
    fn log_batch(
        &mut self,
        events: Vec<crate::shard::event::Event>,
        idempotency: Option<IdempotencyRecord>,
        commands: usize,
    ) -> Result<Option<wal::Append>, EngineError> {
        if events.is_empty() && idempotency.is_none() {
            return Ok(None);
        }
        self.log(events, idempotency.into_iter().collect(), commands.max(1))
            .map(Some)
    }
}

impl Handler<ExecuteBatch> for ShardActor {
    type Result = Result<Durable<BatchExecuted>, EngineError>;

    fn handle(&mut self, message: ExecuteBatch, _: &mut Self::Context) -> Self::Result {
        self.flush_gathered()?;
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let (events, results, failed) =
            self.run_batch(&message.commands, message.atomic, message.prepare.as_ref())?;
        if let Some((_, first)) = message.commands.first() {
            self.note_clock(first.now_ms);
        }
        let (response, idempotency) = match message.claim {
            Some(Claim { mut record, answer }) => {
                let response = match answer {
                    Answer::Batch { atomic, template } => {
                        let answer = super::batch::assemble(atomic, template, &results, failed);
                        let outcome = Ok(Outcome::TransferBatch(Box::new(answer)));
                        Some(self.renderer.render(record.route, &outcome))
                    }
                    // The first message of a batch that spans several: the key is pending.
                    _ => None,
                };
                record.response.clone_from(&response);
                if response.is_some() {
                    // The retention window runs from when the answer was decided.
                    record.at_ms = self.clock.now_ms();
                }
                (response, Some(record))
            }
            None => (None, None),
        };
        let executed = BatchExecuted {
            results,
            failed,
            response,
        };
        match self.log_batch(events, idempotency, message.commands.len())? {
            Some(ticket) => Ok(Durable {
                value: executed,
                ticket: Ticket::Logged(ticket),
            }),
            None => Ok(self.after_durable(executed)),
        }
    }
}

impl Handler<LogAnswer> for ShardActor {
    type Result = Result<Durable<Option<Vec<u8>>>, EngineError>;

    fn handle(&mut self, message: LogAnswer, _: &mut Self::Context) -> Self::Result {
        self.flush_gathered()?;
        if let Some(reason) = &self.failed {
            return Err(EngineError::Unavailable(reason.clone()));
        }
        let Claim { mut record, answer } = message.0;
        let response = match answer {
            Answer::Given(outcome) => Some(self.renderer.render(record.route, &Ok(*outcome))),
            Answer::Rejected(rejection) => {
                Some(self.renderer.render(record.route, &Err(rejection)))
            }
            _ => None,
        };
        record.response.clone_from(&response);
        if response.is_some() {
            record.at_ms = self.clock.now_ms();
        }
        match self.log_batch(Vec::new(), Some(record), 1)? {
            Some(ticket) => Ok(Durable {
                value: response,
                ticket: Ticket::Logged(ticket),
            }),
            None => Ok(self.after_durable(response)),
        }
    }
}

/// A boxed future, for the engine's orchestration helpers.
pub type BoxFuture<T> = Pin<Box<dyn Future<Output = T> + Send>>;

#[cfg(test)]
mod tests {
    use super::{clock_warning, CLOCK_SKEW_ABSORBED_MS, CLOCK_WARN_EVERY};
    use std::time::{Duration, Instant};

    /// A clock well behind the floor is warned of, at most once a minute; a clock at, ahead of
    /// or just behind the floor (commands stamped on several threads) is not, nor a command
    /// that was stamped long ago and only waited in the shard's queue.
    #[test]
    fn a_clock_behind_the_floor_is_warned_of_once_a_minute() {
        let start = Instant::now();
        let floor = 1_000_000;
        let reads = |clock_ms: i64| move || (start, clock_ms);
        assert_eq!(clock_warning(floor, floor, None, reads(floor)), None);
        assert_eq!(
            clock_warning(floor, floor + 5, None, reads(floor + 5)),
            None
        );
        let just = floor - CLOCK_SKEW_ABSORBED_MS;
        assert_eq!(clock_warning(floor, just, None, reads(just)), None);
        assert_eq!(clock_warning(i64::MIN, 0, None, reads(0)), None);
        let past = just - 1;
        assert_eq!(
            clock_warning(floor, past, None, reads(past)),
            Some((CLOCK_SKEW_ABSORBED_MS + 1, start))
        );
        let far = floor - 30_000;
        assert_eq!(
            clock_warning(floor, far, None, reads(far)),
            Some((30_000, start))
        );
        // Stamped long ago, decided now: the clock itself is fine.
        assert_eq!(clock_warning(floor, far, None, reads(floor + 1)), None);
        let soon = start + CLOCK_WARN_EVERY - Duration::from_millis(1);
        assert_eq!(clock_warning(floor, far, Some(start), || (soon, far)), None);
        let later = start + CLOCK_WARN_EVERY;
        assert_eq!(
            clock_warning(floor, far, Some(start), || (later, far)),
            Some((30_000, later))
        );
    }
}
