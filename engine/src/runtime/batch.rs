//! Transfer batches (`POST /v1/transfers/batch`): many transfers in one request, carried to each
//! shard as one actor message ([`ExecuteBatch`]) and logged there as one WAL record per message.
//!
//! # Why this shape
//!
//! A single transfer costs one HTTP request, one actor message and one WAL record. The shard's
//! domain step is a few microseconds; the rest is per-message and per-record overhead. A batch
//! pays that overhead once per shard per step, like TigerBeetle's batches of up to 8,190
//! transfers (`docs/transfer-batches.md` has the protocol and its crash behaviour).
//!
//! Each item is the very command a single transfer sends (`Command::Transfer`, or the steps of
//! the cross-shard protocol), decided and applied by the same `Shard::execute`, so its events
//! are exactly a single transfer's: replay, the history indexer, eviction and every invariant
//! and hash chain need no special case. A batch record is a [`super::journal::JournalEntry`]
//! whose events are the items' events one after another.
//!
//! # Steps
//!
//! * All items on one shard (source and target of every item): one message per at most
//!   [`BATCH_COMMANDS_PER_RECORD_MAX`] items, or one message for an atomic batch, which the shard
//!   applies all-or-nothing (see [`ExecuteBatch`]); one record is atomic across a crash.
//! * Items that cross shards (not atomic): the cross-shard transfer protocol, batched per shard:
//!   one message per source shard reserving (and posting the items that stay on it), one per
//!   target shard crediting, one per source shard finalizing or releasing. Recovery finishes
//!   every reserved item exactly as it finishes a single cross-shard transfer.
//! * Atomic batches whose wallets span shards: reserved on every source shard (one atomic
//!   message and record each, the batch's prepare), then credited, finalized and closed; the
//!   prepares are the commit point (`super::atomic_batch`).

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;
use std::task::Poll;

use crate::ledger::transfer::OutgoingTransfer;
use crate::runtime::actor::{Answer, BatchExecuted, BatchPrepare, Claim, ExecuteBatch, LogAnswer};
use crate::runtime::atomic_batch::AtomicItem;
use crate::runtime::config::{unavailable, EngineError, IdempotencyKey, Reply};
use crate::runtime::engine::{Claimed, Engine};
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::{
    BatchAnswer, BatchItemResult, Command, Context, Outcome, TransferArgs, TransferCredit,
};
use crate::values::error::Rejection;

/// Most items of one batch (TigerBeetle's limit, which clients of such systems are used to).
pub const TRANSFER_BATCH_ITEMS_MAX: usize = 8190;

/// Most commands one non-atomic batch message carries (its bytes are bounded separately, by
/// [`command_bound`] against the log's record size).
pub const BATCH_COMMANDS_PER_RECORD_MAX: usize = 1024;

/// What one item's events can take in a log record at any step of any batch path (a transfer,
/// a reserve, a credit, a release, an atomic batch's undo of either), text aside: an upper
/// bound checked by `tests::batch_bounds`, which measures each of them (423 to 575 bytes with
/// small ids; the margin is for ids and times at their longest varints).
pub const ITEM_EVENT_BYTES: usize = 896;

/// What one posted item's rendered answer can take, text aside (checked by the API's tests,
/// which measure 932 bytes with every id and amount at its longest). A text byte renders as at
/// most six (a JSON `\u00XX` escape).
pub const ITEM_ANSWER_BYTES: usize = 1024;

/// Room kept in every record for its header, the idempotency record and rounding: 64 KiB, or a
/// sixteenth of a record when records are small (small WAL segments, in tests and drills).
const RECORD_SLACK_BYTES: usize = 64 << 10;

/// The text an item's events copy: each byte at most four times (two transactions and their two
/// entries), checked with the bounds.
fn text_bytes(args: &TransferArgs) -> usize {
    let details = &args.details;
    [
        &details.description,
        &details.external_reference,
        &details.idempotency_key,
        &details.meta,
    ]
    .iter()
    .map(|text| text.as_deref().map_or(0, str::len))
    .sum()
}

/// An upper bound of the bytes a transfer's (or a reserve's) events add to a batch's record.
fn transfer_bound(args: &TransferArgs) -> usize {
    ITEM_EVENT_BYTES + 4 * text_bytes(args)
}

/// An upper bound of the bytes `command`'s events add to a batch's record.
pub(crate) fn command_bound(command: &Command) -> usize {
    match command {
        Command::Transfer(args)
        | Command::TransferReserve(args)
        | Command::TransferBatchReserve(args) => transfer_bound(args),
        Command::TransferCredit(credit) => {
            ITEM_EVENT_BYTES + 4 * credit.description.as_deref().map_or(0, str::len)
        }
        // Finalize, release, close. (A prepare's mark is not a chunked command: it shares its
        // record with the reservations, in the room their undoing would take, 17 bytes an item
        // against 2 x `ITEM_EVENT_BYTES`.)
        _ => ITEM_EVENT_BYTES,
    }
}

/// An upper bound of one item's part of the batch's rendered answer.
fn answer_bound(item: &BatchItem) -> usize {
    match item {
        BatchItem::Transfer(args) => ITEM_ANSWER_BYTES + 6 * text_bytes(args),
        BatchItem::Refused(error) => 64 + error.len(),
    }
}

/// One item of a batch as the API hands it over.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchItem {
    Transfer(TransferArgs),
    /// Refused before the engine (validation, permission): its rendered error, kept in place.
    Refused(Vec<u8>),
}

/// Fills the template's open slots (`None`) with one message's results, in order.
pub(crate) fn assemble(
    atomic: bool,
    template: Vec<Option<BatchItemResult>>,
    results: &[Result<Outcome, Rejection>],
    failed: Option<usize>,
) -> BatchAnswer {
    let mut next = 0usize;
    let mut failed_item = None;
    let items = template
        .into_iter()
        .enumerate()
        .map(|(position, slot)| {
            if let Some(given) = slot {
                return given;
            }
            let index = next;
            next += 1;
            match failed {
                Some(at) if at == index => {
                    failed_item = Some(position);
                    match results.get(index) {
                        Some(Err(rejection)) => BatchItemResult::Rejected(rejection.clone()),
                        _ => BatchItemResult::Rejected(Rejection::Unavailable("item lost")),
                    }
                }
                Some(_) => BatchItemResult::NotPosted,
                None => item_result(results.get(index)),
            }
        })
        .collect();
    BatchAnswer {
        atomic,
        items,
        failed: failed_item,
    }
}

/// The answer of a batch that ran to its end, one slot per item (a slot left empty is a bug,
/// answered as unavailable rather than dropped).
pub(crate) fn completed(atomic: bool, slots: Vec<Option<BatchItemResult>>) -> BatchAnswer {
    let items = slots
        .into_iter()
        .map(|slot| {
            slot.unwrap_or(BatchItemResult::Rejected(Rejection::Unavailable(
                "item lost",
            )))
        })
        .collect();
    BatchAnswer {
        atomic,
        items,
        failed: None,
    }
}

fn item_result(result: Option<&Result<Outcome, Rejection>>) -> BatchItemResult {
    match result {
        Some(Ok(Outcome::Transaction(view))) => BatchItemResult::Posted(Box::new(view.clone())),
        Some(Err(rejection)) => BatchItemResult::Rejected(rejection.clone()),
        _ => BatchItemResult::Rejected(Rejection::Unavailable("unexpected batch result")),
    }
}

/// Awaits every future, in any order of completion; results in the futures' order. (The engine
/// does not depend on the `futures` crate for this one helper.)
pub(crate) async fn join_all<T>(
    futures: Vec<Pin<Box<dyn Future<Output = T> + Send + '_>>>,
) -> Vec<T> {
    let mut futures: Vec<_> = futures.into_iter().map(Some).collect();
    let mut done: Vec<Option<T>> = futures.iter().map(|_| None).collect();
    std::future::poll_fn(|cx| {
        let mut pending = false;
        for (slot, out) in futures.iter_mut().zip(done.iter_mut()) {
            if let Some(future) = slot {
                match future.as_mut().poll(cx) {
                    Poll::Ready(value) => {
                        *out = Some(value);
                        *slot = None;
                    }
                    Poll::Pending => pending = true,
                }
            }
        }
        if pending {
            Poll::Pending
        } else {
            Poll::Ready(())
        }
    })
    .await;
    done.into_iter().flatten().collect()
}

/// An item on its way through the cross-shard steps.
struct Crossing {
    position: usize,
    transfer: OutgoingTransfer,
    debit_uuid: crate::values::ids::Uuid,
    refused: Option<Rejection>,
}

impl Engine {
    /// Runs a batch (see the module docs) and answers one result per item, in order.
    pub async fn execute_batch(
        &self,
        items: Vec<BatchItem>,
        atomic: bool,
    ) -> Result<BatchAnswer, EngineError> {
        let engine = self.clone();
        self.run_detached(async move {
            let (answer, _) = engine.run_batch(items, atomic, None).await?;
            Ok(answer)
        })
        .await
    }

    /// [`Engine::execute_batch`] under an idempotency key: the whole rendered answer is logged
    /// with the batch (in its record when it is one message, else after its last step) and
    /// replayed to a retry, like a single command's ([`Engine::execute_idempotent`]).
    pub async fn execute_batch_idempotent(
        &self,
        items: Vec<BatchItem>,
        atomic: bool,
        key: IdempotencyKey,
    ) -> Result<Reply, EngineError> {
        // Batches came after the canonical fingerprint: no previous release answered one.
        let (guard, record) = match self.claim(&key, &|| None).await? {
            Claimed::Answered(reply) => return Ok(reply),
            Claimed::Fresh(guard, record) => (guard, record),
        };
        let engine = self.clone();
        let response = self
            .run_detached(async move {
                let _guard = guard;
                let (_, response) = engine.run_batch(items, atomic, Some(record)).await?;
                response.ok_or_else(|| {
                    EngineError::Unavailable("the batch's answer was not recorded".into())
                })
            })
            .await?;
        Ok(Reply {
            response,
            replayed: false,
        })
    }

    /// One message of commands to `shard`, answered once its record is durable.
    /// With `prepare`, an atomic cross-shard batch's prepare there (`super::atomic_batch`).
    pub(crate) async fn send_batch(
        &self,
        shard: u32,
        commands: Vec<Command>,
        (atomic, prepare): (bool, Option<BatchPrepare>),
        claim: Option<Claim>,
    ) -> Result<BatchExecuted, EngineError> {
        let commands: Vec<(Command, Context)> = commands
            .into_iter()
            .map(|command| (command, self.inner.clock.context()))
            .collect();
        let _queued = self.queued_on(shard);
        let executed = self
            .addr(shard)?
            .send(ExecuteBatch {
                commands,
                atomic,
                claim,
                prepare,
            })
            .await
            .map_err(unavailable)??
            .wait()
            .await?;
        self.maybe_snapshot();
        Ok(executed)
    }

    /// What a batch may put in one record: the log's record size less some slack.
    pub(crate) fn record_budget(&self) -> usize {
        let record = self.inner.config.wal.record_bytes_max as usize;
        record.saturating_sub(RECORD_SLACK_BYTES.min(record / 16))
    }

    /// Cuts one shard's commands into messages of at most [`BATCH_COMMANDS_PER_RECORD_MAX`]
    /// commands whose events fit one record ([`command_bound`]).
    fn record_chunks(&self, commands: Vec<Command>) -> Vec<Vec<Command>> {
        let budget = self.record_budget();
        let mut chunks: Vec<Vec<Command>> = Vec::new();
        let mut bytes = 0;
        for command in commands {
            let bound = command_bound(&command);
            match chunks.last_mut() {
                Some(chunk)
                    if chunk.len() < BATCH_COMMANDS_PER_RECORD_MAX && bytes + bound <= budget =>
                {
                    bytes += bound;
                    chunk.push(command);
                }
                _ => {
                    bytes = bound;
                    chunks.push(vec![command]);
                }
            }
        }
        chunks
    }

    /// Sends each shard its commands, at most [`BATCH_COMMANDS_PER_RECORD_MAX`] a message and
    /// no more than fits one record (one after another per shard, the shards at once), and
    /// answers each shard's results in order.
    /// The first message to `claim_shard` carries `claim`.
    pub(crate) async fn send_per_shard(
        &self,
        by_shard: BTreeMap<u32, Vec<Command>>,
        claim_shard: u32,
        mut claim: Option<Claim>,
    ) -> Result<BTreeMap<u32, Vec<Result<Outcome, Rejection>>>, EngineError> {
        let mut futures: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = Vec::new();
        for (shard, commands) in by_shard {
            let mut claim = if shard == claim_shard {
                claim.take()
            } else {
                None
            };
            futures.push(Box::pin(async move {
                let mut results = Vec::with_capacity(commands.len());
                for chunk in self.record_chunks(commands) {
                    let executed = self
                        .send_batch(shard, chunk, (false, None), claim.take())
                        .await?;
                    results.extend(executed.results);
                }
                Ok::<_, EngineError>((shard, results))
            }));
        }
        let mut answers = BTreeMap::new();
        for joined in join_all(futures).await {
            let (shard, results) = joined?;
            answers.insert(shard, results);
        }
        Ok(answers)
    }

    /// Runs a batch; answers it and, under a key, its rendered answer (logged durably).
    async fn run_batch(
        &self,
        items: Vec<BatchItem>,
        atomic: bool,
        record: Option<IdempotencyRecord>,
    ) -> Result<(BatchAnswer, Option<Vec<u8>>), EngineError> {
        if items.is_empty() || items.len() > TRANSFER_BATCH_ITEMS_MAX {
            return Err(EngineError::Rejected(Rejection::InvalidRequest(
                "a batch holds 1 to 8190 items",
            )));
        }
        let answer_bytes: usize = match record {
            Some(_) => items.iter().map(answer_bound).sum(),
            None => 0,
        };
        let mut template = Vec::with_capacity(items.len());
        let mut transfers = Vec::new();
        for (position, item) in items.into_iter().enumerate() {
            match item {
                BatchItem::Transfer(args) => {
                    let source = self.shard_of_wallet(args.source_wallet_id);
                    let target = self.shard_of_wallet(args.target_wallet_id);
                    transfers.push((position, args, source, target));
                    template.push(None);
                }
                BatchItem::Refused(error) => {
                    template.push(Some(BatchItemResult::Refused(error)));
                }
            }
        }
        if atomic && template.iter().any(Option::is_some) {
            return Err(EngineError::Rejected(Rejection::InvalidRequest(
                "an atomic batch holds only items that can run",
            )));
        }
        // Every record the batch needs must fit the log: its answer (logged whole, under a
        // key), and each record of events (an atomic one also holds its undoing if it fails).
        let budget = self.record_budget();
        if answer_bytes > budget {
            return Err(EngineError::Rejected(Rejection::BatchTooLarge(
                "its answer would not fit one log record: send fewer items or shorter texts",
            )));
        }
        let copies = if atomic { 2 } else { 1 };
        let events_of = |source: Option<u32>| -> usize {
            transfers
                .iter()
                .filter(|(_, _, from, _)| source.is_none_or(|shard| *from == shard))
                .map(|(_, args, _, _)| copies * transfer_bound(args))
                .sum()
        };
        // Each record holds at least one command (small segments make records small).
        if transfers
            .iter()
            .any(|(_, args, _, _)| copies * transfer_bound(args) > budget)
        {
            return Err(EngineError::Rejected(Rejection::BatchTooLarge(
                "an item's texts would not fit one log record",
            )));
        }
        let home = transfers.first().map_or(0, |(_, _, source, _)| *source);
        let one_shard = transfers
            .iter()
            .all(|(_, _, source, target)| *source == home && *target == home);
        let one_record = events_of(None) + answer_bytes <= budget;
        if atomic {
            let sources: std::collections::BTreeSet<u32> =
                transfers.iter().map(|(_, _, source, _)| *source).collect();
            let fits = if one_shard {
                one_record
            } else {
                sources
                    .iter()
                    .all(|shard| events_of(Some(*shard)) <= budget)
            };
            if !fits {
                return Err(EngineError::Rejected(Rejection::BatchTooLarge(
                    "an atomic batch's items on one shard must fit one log record: send fewer items or shorter texts",
                )));
            }
        }
        if one_shard && (atomic || (one_record && transfers.len() <= BATCH_COMMANDS_PER_RECORD_MAX))
        {
            let commands = transfers
                .into_iter()
                .map(|(_, args, _, _)| Command::Transfer(args))
                .collect();
            let claim = record.map(|record| Claim {
                record,
                answer: Answer::Batch {
                    atomic,
                    template: template.clone(),
                },
            });
            let executed = self
                .send_batch(home, commands, (atomic, None), claim)
                .await?;
            let answer = assemble(atomic, template, &executed.results, executed.failed);
            return Ok((answer, executed.response));
        }
        let answer = if atomic {
            let items = transfers
                .into_iter()
                .map(|(position, args, source, target)| AtomicItem {
                    position,
                    args,
                    source,
                    target,
                })
                .collect();
            self.run_atomic_across(template.len(), items, home, record.clone())
                .await?
        } else {
            self.run_across(template, transfers, home, record.clone())
                .await?
        };
        let response = match record {
            Some(record) => {
                let claim = Claim {
                    record,
                    answer: Answer::Given(Box::new(Outcome::TransferBatch(Box::new(
                        answer.clone(),
                    )))),
                };
                self.addr(home)?
                    .send(LogAnswer(claim))
                    .await
                    .map_err(unavailable)??
                    .wait()
                    .await?
            }
            None => None,
        };
        Ok((answer, response))
    }

    /// A non-atomic batch over several shards (or longer than one record): the cross-shard
    /// protocol's three steps, each one message per shard. The key (if any) is logged pending
    /// with the first message to `home`.
    async fn run_across(
        &self,
        mut template: Vec<Option<BatchItemResult>>,
        transfers: Vec<(usize, TransferArgs, u32, u32)>,
        home: u32,
        record: Option<IdempotencyRecord>,
    ) -> Result<BatchAnswer, EngineError> {
        // Step 1, per source shard: post the items that stay on it, reserve the others.
        let mut by_source: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
        let mut positions: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (position, args, source, target) in transfers {
            let command = if source == target {
                Command::Transfer(args)
            } else {
                Command::TransferReserve(args)
            };
            by_source.entry(source).or_default().push(command);
            positions.entry(source).or_default().push(position);
        }
        let claim = record.map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let reserved = self.send_per_shard(by_source, home, claim).await?;
        let mut crossing = Vec::new();
        for (shard, results) in reserved {
            let places = positions.get(&shard).map_or(&[][..], Vec::as_slice);
            for (position, result) in places.iter().zip(results) {
                let slot = match result {
                    Ok(Outcome::TransferReserved {
                        transfer,
                        transaction,
                    }) => {
                        crossing.push(Crossing {
                            position: *position,
                            transfer,
                            debit_uuid: transaction.uuid,
                            refused: None,
                        });
                        continue;
                    }
                    other => item_result(Some(&other)),
                };
                if let Some(entry) = template.get_mut(*position) {
                    *entry = Some(slot);
                }
            }
        }
        for (position, result) in self.cross(crossing).await? {
            if let Some(entry) = template.get_mut(position) {
                *entry = Some(result);
            }
        }
        Ok(completed(false, template))
    }

    /// Steps 2 and 3 of the cross-shard protocol for reserved items, batched per shard: credit
    /// on the targets, then finalize (or release the refused) on the sources; then the debit
    /// sides as the items' answers.
    async fn cross(
        &self,
        mut crossing: Vec<Crossing>,
    ) -> Result<Vec<(usize, BatchItemResult)>, EngineError> {
        if crossing.is_empty() {
            return Ok(Vec::new());
        }
        let source_of = |item: &Crossing| self.shard_of_wallet(item.transfer.source_wallet_id);
        let target_of = |item: &Crossing| self.shard_of_wallet(item.transfer.target_wallet_id);
        // Step 2: credit, one message per target shard.
        let mut credits: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
        let mut credited: BTreeMap<u32, Vec<usize>> = BTreeMap::new();
        for (index, item) in crossing.iter().enumerate() {
            let target = target_of(item);
            credits
                .entry(target)
                .or_default()
                .push(Command::TransferCredit(TransferCredit::for_transfer(
                    &item.transfer,
                )));
            credited.entry(target).or_default().push(index);
        }
        for (shard, results) in self.send_per_shard(credits, u32::MAX, None).await? {
            let indexes = credited.get(&shard).map_or(&[][..], Vec::as_slice);
            for (index, result) in indexes.iter().zip(results) {
                if let (Some(item), Err(rejection)) = (crossing.get_mut(*index), result) {
                    item.refused = Some(rejection);
                }
            }
        }
        // Step 3: finalize the credited, release the refused, one message per source shard.
        let mut settles: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
        for item in &crossing {
            let transfer_uuid = item.transfer.uuid;
            let command = match item.refused {
                None => Command::TransferFinalize { transfer_uuid },
                Some(_) => Command::TransferRelease { transfer_uuid },
            };
            settles.entry(source_of(item)).or_default().push(command);
        }
        for (_, results) in self.send_per_shard(settles, u32::MAX, None).await? {
            if let Some(Err(rejection)) = results.into_iter().find(Result::is_err) {
                return Err(EngineError::Unavailable(format!(
                    "settling a batch's cross-shard transfer failed: {rejection}"
                )));
            }
        }
        // The debit sides after the finalize, read once durable.
        let mut answers = Vec::with_capacity(crossing.len());
        let mut reads: BTreeMap<u32, Vec<(usize, crate::values::ids::Uuid)>> = BTreeMap::new();
        for item in crossing {
            match item.refused {
                Some(rejection) => {
                    answers.push((item.position, BatchItemResult::Rejected(rejection)))
                }
                None => reads
                    .entry(self.shard_of_wallet(item.transfer.source_wallet_id))
                    .or_default()
                    .push((item.position, item.debit_uuid)),
            }
        }
        answers.extend(self.debit_views(reads).await?);
        Ok(answers)
    }

    /// Posted items' answers: each debit side (by its transaction uuid, per source shard) as a
    /// single transfer answers it, read once durable.
    pub(crate) async fn debit_views(
        &self,
        reads: BTreeMap<u32, Vec<(usize, crate::values::ids::Uuid)>>,
    ) -> Result<Vec<(usize, BatchItemResult)>, EngineError> {
        let mut answers = Vec::new();
        for (shard, wanted) in reads {
            let views = self
                .read_shard(shard, move |s| {
                    wanted
                        .into_iter()
                        .map(|(position, uuid)| (position, s.transaction_view(uuid)))
                        .collect::<Vec<_>>()
                })
                .await?;
            for (position, view) in views {
                let result = match view {
                    Ok(view) => BatchItemResult::Posted(Box::new(view)),
                    Err(rejection) => BatchItemResult::Rejected(rejection),
                };
                answers.push((position, result));
            }
        }
        Ok(answers)
    }
}
