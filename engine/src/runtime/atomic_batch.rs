//! Atomic transfer batches whose wallets span shards (`POST /v1/transfers/batch` with
//! `atomic: true`): every item posts, or none does, across shards and across a crash.
//!
//! # Protocol
//!
//! 1. **Decide** (reads, nothing logged): every target can take its credit now (a client wallet
//!    of the item's currency, not frozen: [`Shard::check_transfer_target`]). If one cannot, the
//!    sources of the items up to it are checked the same way ([`Shard::check_transfer_source`],
//!    with what earlier items take from the same wallet), so the answer names the first failing
//!    item and its own error; nothing is posted. The reads answer once what they saw is durable,
//!    so a refusal never rests on a change (a freeze, a withdrawal) a crash could still undo.
//! 2. **Prepare**, one atomic message and one record per source shard, in parallel: every item
//!    whose source is there is reserved into the shard's in-transit account
//!    ([`Command::TransferBatchReserve`], also for a target on the same shard, so that nothing
//!    reaches a target before the batch commits), followed in the same record by
//!    `TransferBatchPrepared { batch, shards, transfers }`. A refused item undoes that shard's
//!    reservations in the same record (`ExecuteBatch`'s all-or-nothing), and nothing of it
//!    stays.
//! 3. **Commit point**: the batch is committed once *every* source shard's prepare is durable.
//!    No record says so: the prepares are the votes, and each names all the voters (`shards`),
//!    so recovery, which reads every shard's log, decides the same way the run did.
//! 4. **Complete** (committed): credit every item on its target ([`TransferCredit::for_batch`]:
//!    a freeze logged after the decision does not refuse it, else the batch could not keep
//!    all-or-nothing), then finalize every item on its source, then, only once every finalize
//!    is durable, close the batch on each source shard (`TransferBatchClosed`).
//! 5. **Abort** (a prepare refused): release every reservation and close the batch, one message
//!    per shard that prepared.
//!
//! Every reserve runs before any credit, so an item cannot spend what an earlier item of the
//! same batch credits to its source (a one-shard atomic batch, applied item by item, can; a
//! non-atomic batch across shards cannot either). The first failing item is named in that
//! order: sources against their balances less what earlier items take, then targets.
//!
//! A committed batch whose completion is refused (a store read that failed) is retried a few
//! times before it is left open for the restart's recovery; an aborted one whose releases
//! cannot be logged is answered as aborted all the same (the restart releases it).
//!
//! # Recovery
//!
//! A prepared transfer is not one of `Shard::pending_outgoing_transfers`: recovery settles each
//! open batch as a whole ([`Engine::settle_open_batches`]). If every shard the batch names still
//! has it open, every prepare was durable: complete it (credits and finalizes are idempotent).
//! Otherwise abort it: release what is still reserved. That is right in both ways a shard can
//! lack it: it never prepared (so the run never reached the commit point and credited nothing),
//! or it closed (closes come only after every finalize is durable, so nothing is reserved any
//! more on any shard, and the abort releases nothing). An abort closes a shard in the same
//! record as its releases: an abort never turns into a commit, because a shard that refused
//! logged no prepare.
//!
//! A prepare whose outcome is unknown (the shard failed, the log was poisoned) stops the run
//! where it is: the batch stays open, its money in transit, until the restart's recovery
//! settles it as above.

use std::collections::BTreeMap;
use std::future::Future;
use std::pin::Pin;

use rust_decimal::Decimal;

use crate::ledger::transfer::OutgoingTransfer;
use crate::runtime::actor::{Answer, BatchExecuted, BatchPrepare, Claim};
use crate::runtime::config::EngineError;
use crate::runtime::engine::Engine;
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::{
    BatchAnswer, BatchItemResult, BatchMark, Command, Outcome, TransferArgs, TransferCredit,
};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{Uuid, WalletId};

/// Attempts at completing a committed batch before leaving it to recovery (20, 100 and 500 ms
/// apart).
const COMMIT_TRIES: u32 = 4;

/// One item of an atomic batch: its position in the batch, and its source and target shards.
pub(crate) struct AtomicItem {
    pub position: usize,
    pub args: TransferArgs,
    pub source: u32,
    pub target: u32,
}

/// The answer of an atomic batch that posted nothing: the failing item's rejection, every
/// other item not posted.
fn aborted(len: usize, failed: usize, rejection: Rejection) -> BatchAnswer {
    let mut rejection = Some(rejection);
    let items = (0..len)
        .map(|position| match rejection.take_if(|_| position == failed) {
            Some(rejection) => BatchItemResult::Rejected(rejection),
            None => BatchItemResult::NotPosted,
        })
        .collect();
    BatchAnswer {
        atomic: true,
        items,
        failed: Some(failed),
    }
}

/// The first failing item by position, of two candidates.
fn first(
    a: Option<(usize, Rejection)>,
    b: Option<(usize, Rejection)>,
) -> Option<(usize, Rejection)> {
    match (a, b) {
        (Some(a), Some(b)) => Some(if b.0 < a.0 { b } else { a }),
        (a, b) => a.or(b),
    }
}

impl Engine {
    /// Runs an atomic batch whose wallets span shards (see the module docs). `len` is the
    /// batch's item count; `items` are all of them, in order.
    pub(crate) async fn run_atomic_across(
        &self,
        len: usize,
        items: Vec<AtomicItem>,
        home: u32,
        record: Option<IdempotencyRecord>,
    ) -> Result<BatchAnswer, EngineError> {
        if let Some((position, rejection)) = self.doomed(&items).await? {
            return Ok(aborted(len, position, rejection));
        }
        let context = self.inner.clock.context();
        let mut seed = [0u8; 16];
        seed.copy_from_slice(&context.entropy[..16]);
        let batch = Uuid::from_random_bytes(seed);
        let mut shards: Vec<u32> = items.iter().map(|item| item.source).collect();
        shards.sort_unstable();
        shards.dedup();
        tracing::debug!(%batch, items = items.len(), ?shards, "preparing an atomic batch");

        // Prepare: one atomic message per source shard, the shards at once.
        let mut by_source: BTreeMap<u32, Vec<&AtomicItem>> = BTreeMap::new();
        for item in &items {
            by_source.entry(item.source).or_default().push(item);
        }
        let mut claim = record.map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let mut futures: Vec<Pin<Box<dyn Future<Output = _> + Send + '_>>> = Vec::new();
        for (shard, members) in &by_source {
            let commands: Vec<Command> = members
                .iter()
                .map(|item| Command::TransferBatchReserve(item.args.clone()))
                .collect();
            let claim = if *shard == home { claim.take() } else { None };
            let prepare = BatchPrepare {
                batch,
                shards: shards.clone(),
            };
            let shard = *shard;
            futures.push(Box::pin(async move {
                (
                    shard,
                    self.send_batch(shard, commands, (true, Some(prepare)), claim)
                        .await,
                )
            }));
        }
        let mut prepared: Vec<(u32, BatchExecuted)> = Vec::new();
        let mut unknown = None;
        for (shard, result) in super::batch::join_all(futures).await {
            match result {
                Ok(executed) => prepared.push((shard, executed)),
                Err(error) => unknown = unknown.or(Some(error)),
            }
        }
        if let Some(error) = unknown {
            tracing::error!(%batch, %error, "an atomic batch's prepare failed: the batch stays open until a restart settles it");
            return Err(error);
        }

        // The votes: the first refused item, else every reservation in the batch's order.
        let mut refused = None;
        let mut reserved: Vec<(usize, OutgoingTransfer, Uuid)> = Vec::new();
        let mut closing = Vec::new();
        for (shard, executed) in prepared {
            let members = by_source.get(&shard).map_or(&[][..], Vec::as_slice);
            if let Some(index) = executed.failed {
                let rejection = executed
                    .results
                    .into_iter()
                    .nth(index)
                    .and_then(Result::err)
                    .unwrap_or(Rejection::Unavailable("item lost"));
                let position = members.get(index).map_or(0, |item| item.position);
                refused = first(refused, Some((position, rejection)));
                continue;
            }
            closing.push(shard);
            for (item, result) in members.iter().zip(executed.results) {
                match result {
                    Ok(Outcome::TransferReserved {
                        transfer,
                        transaction,
                    }) => reserved.push((item.position, transfer, transaction.uuid)),
                    other => {
                        return Err(EngineError::Unavailable(format!(
                            "an atomic batch's reservation answered {other:?}"
                        )))
                    }
                }
            }
        }
        reserved.sort_by_key(|(position, _, _)| *position);
        let transfers: Vec<OutgoingTransfer> = reserved.iter().map(|(_, t, _)| t.clone()).collect();
        if let Some((position, rejection)) = refused {
            // Aborted for certain: if a release cannot be logged now, the restart releases it
            // (a refused prepare never looks complete), so the answer stands.
            if let Err(error) = self.settle_batch(batch, &closing, &transfers, false).await {
                tracing::error!(%batch, %error, "an aborted atomic batch could not be released now: its reservations stay in transit until a restart releases them");
            }
            return Ok(aborted(len, position, rejection));
        }
        self.complete_committed(batch, &closing, &transfers).await?;

        // Every item posted: the debit sides, as a single transfer answers them.
        let mut answers: Vec<Option<BatchItemResult>> = (0..len).map(|_| None).collect();
        let mut reads: BTreeMap<u32, Vec<(usize, Uuid)>> = BTreeMap::new();
        for (position, transfer, debit) in reserved {
            reads
                .entry(self.shard_of_wallet(transfer.source_wallet_id))
                .or_default()
                .push((position, debit));
        }
        for (position, result) in self.debit_views(reads).await? {
            if let Some(slot) = answers.get_mut(position) {
                *slot = Some(result);
            }
        }
        Ok(super::batch::completed(true, answers))
    }

    /// Step 1 (see the module docs): the first item that would fail because of its target, or
    /// an earlier one because of its source; `None` when every target can take its credit.
    async fn doomed(
        &self,
        items: &[AtomicItem],
    ) -> Result<Option<(usize, Rejection)>, EngineError> {
        let mut by_target: BTreeMap<
            u32,
            Vec<(usize, WalletId, crate::values::currency::Currency)>,
        > = BTreeMap::new();
        for item in items {
            by_target.entry(item.target).or_default().push((
                item.position,
                item.args.target_wallet_id,
                item.args.currency,
            ));
        }
        let mut failing = None;
        for (shard, wanted) in by_target {
            let found = self
                .read_shard(shard, move |s: &Shard| {
                    wanted.into_iter().find_map(|(position, wallet, currency)| {
                        s.check_transfer_target(wallet, currency)
                            .err()
                            .map(|rejection| (position, rejection))
                    })
                })
                .await?;
            failing = first(failing, found);
        }
        let Some((target_fails, _)) = failing else {
            return Ok(None);
        };
        // A source refusal at or before that item comes first (a transfer checks its source
        // before its target).
        let mut by_source: BTreeMap<u32, Vec<(usize, TransferArgs)>> = BTreeMap::new();
        for item in items.iter().filter(|item| item.position <= target_fails) {
            by_source
                .entry(item.source)
                .or_default()
                .push((item.position, item.args.clone()));
        }
        for (shard, wanted) in by_source {
            let found = self
                .read_shard(shard, move |s: &Shard| {
                    let mut spent: BTreeMap<WalletId, Decimal> = BTreeMap::new();
                    for (position, args) in wanted {
                        let before = spent.get(&args.source_wallet_id).copied();
                        match s.check_transfer_source(&args, before.unwrap_or_default()) {
                            Ok((_, amount, _)) => {
                                let total = before.unwrap_or_default().saturating_add(amount);
                                spent.insert(args.source_wallet_id, total);
                            }
                            Err(rejection) => return Some((position, rejection)),
                        }
                    }
                    None
                })
                .await?;
            failing = match (failing, found) {
                // At the same item the source's refusal is the one a transfer gives.
                (Some(target), Some(source)) if source.0 <= target.0 => Some(source),
                (failing, _) => failing,
            };
        }
        Ok(failing)
    }

    /// Step 4 of a committed batch, retried a few times: every step is idempotent, and a
    /// refusal now (a store read that failed) would otherwise leave the batch half credited
    /// until a restart. If it still fails, the batch stays open for recovery, loudly.
    async fn complete_committed(
        &self,
        batch: Uuid,
        shards: &[u32],
        transfers: &[OutgoingTransfer],
    ) -> Result<(), EngineError> {
        let mut pause = std::time::Duration::from_millis(20);
        let mut tries = 1;
        loop {
            match self.settle_batch(batch, shards, transfers, true).await {
                Ok(()) => return Ok(()),
                Err(error) if tries < COMMIT_TRIES && self.failure().is_none() => {
                    tracing::warn!(%batch, %error, tries, "completing a committed atomic batch failed; trying again");
                    tokio::time::sleep(pause).await;
                    pause *= 5;
                    tries += 1;
                }
                Err(error) => {
                    tracing::error!(%batch, %error, "a committed atomic batch could not be completed: it stays open, its money in transit, until a restart completes it");
                    return Err(error);
                }
            }
        }
    }

    /// Steps 4 and 5 (see the module docs): completes (`commit`) or aborts the batch's
    /// `transfers`, then closes it on `shards`. What is settled already is skipped by the
    /// commands themselves (credits, finalizes and releases are idempotent), so recovery runs
    /// the same steps.
    pub(crate) async fn settle_batch(
        &self,
        batch: Uuid,
        shards: &[u32],
        transfers: &[OutgoingTransfer],
        commit: bool,
    ) -> Result<(), EngineError> {
        let source_of = |t: &OutgoingTransfer| self.shard_of_wallet(t.source_wallet_id);
        let close = Command::TransferBatchMark {
            batch,
            mark: BatchMark::Closed,
        };
        if commit {
            let mut credits: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
            let mut finalizes: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
            for transfer in transfers {
                credits
                    .entry(self.shard_of_wallet(transfer.target_wallet_id))
                    .or_default()
                    .push(Command::TransferCredit(TransferCredit::for_batch(
                        transfer, batch,
                    )));
                finalizes
                    .entry(source_of(transfer))
                    .or_default()
                    .push(Command::TransferFinalize {
                        transfer_uuid: transfer.uuid,
                    });
            }
            self.all_done(batch, "credit", credits).await?;
            self.all_done(batch, "finalize", finalizes).await?;
        } else {
            let mut releases: BTreeMap<u32, Vec<Command>> = BTreeMap::new();
            for transfer in transfers {
                releases
                    .entry(source_of(transfer))
                    .or_default()
                    .push(Command::TransferRelease {
                        transfer_uuid: transfer.uuid,
                    });
            }
            // An abort may close with the releases: it can never become a commit.
            for shard in shards {
                releases.entry(*shard).or_default().push(close.clone());
            }
            return self.all_done(batch, "release", releases).await;
        }
        let closes = shards
            .iter()
            .map(|shard| (*shard, vec![close.clone()]))
            .collect();
        self.all_done(batch, "close", closes).await
    }

    /// Sends each shard its commands and demands that every one stands: a refusal of a step
    /// of a decided batch leaves the batch open for recovery, loudly.
    async fn all_done(
        &self,
        batch: Uuid,
        step: &str,
        by_shard: BTreeMap<u32, Vec<Command>>,
    ) -> Result<(), EngineError> {
        for (shard, results) in self.send_per_shard(by_shard, u32::MAX, None).await? {
            if let Some(Err(rejection)) = results.into_iter().find(Result::is_err) {
                return Err(EngineError::Unavailable(format!(
                    "atomic batch {batch}: a {step} on shard {shard} was refused ({rejection}); the batch stays open until a restart settles it"
                )));
            }
        }
        Ok(())
    }
}
