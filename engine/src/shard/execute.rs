//! `Shard::execute`: decide, apply, and build what the caller sees.
//!
//! The convenience path for callers that apply immediately (tests, a shard actor that applies before
//! awaiting WAL durability as in notes/dependencies.md §1). The outcome is read back from the state
//! after applying, so it shows exactly what replay will rebuild.

use crate::ledger::view::{EntryView, HoldView, TransactionView, WalletView};
use crate::shard::command::{Command, Context, Outcome, CLOCK_SKEW_ABSORBED_MS};
use crate::shard::event::Event;
use crate::shard::state::Shard;
use crate::values::error::{ApplyError, ExecuteError, Rejection};
use crate::values::ids::{TransactionId, WalletId};

fn missing(what: &'static str, id: u64) -> ExecuteError {
    ExecuteError::Corrupt(ApplyError::new(what, id))
}

impl Shard {
    /// Decides `command`, applies its events and returns them with the outcome.
    pub fn execute(
        &mut self,
        command: &Command,
        ctx: &Context,
    ) -> Result<(Vec<Event>, Outcome), ExecuteError> {
        // Every record this command changes is stamped with it (see `Shard::evict_filed`).
        self.stamp += 1;
        // A command stamped a little before an entry the shard posted already (its posting
        // floor: commands are stamped on several threads) is decided at the floor, so every
        // time it records agrees with its postings': a hold's, a payment's and a reversal's
        // times are those of the entries they go with, never a few ms before them (which a
        // day's report could split across midnight). Further behind, the clock stepped back:
        // deciding at the floor would move deadlines by the step (holds due within it expired
        // at once, new ones held longer), so only the postings take the floor
        // (`Draft::post`) and the rest follows the clock.
        let behind = self.posted_at_floor_ms.saturating_sub(ctx.now_ms);
        let at_floor = Context {
            now_ms: if behind <= CLOCK_SKEW_ABSORBED_MS {
                ctx.now_ms.max(self.posted_at_floor_ms)
            } else {
                ctx.now_ms
            },
            ..*ctx
        };
        let ctx = &at_floor;
        let events = match (self.decide(command, ctx), command) {
            (Ok(events), _) => events,
            (Err(rejection), Command::PaymentCredit(request)) => {
                // A refused cross-shard credit is logged, so the first decision is final; the
                // caller releases the reservation on the rejection carried in the outcome.
                let events: Vec<Event> = self
                    .payment_credit_refusal(request, &rejection, ctx.now_ms)
                    .into_iter()
                    .collect();
                if events.is_empty()
                    && self
                        .refusal_record(request.reservation_uuid)
                        .map_or(true, |refused| refused.is_none())
                {
                    return Err(rejection.into());
                }
                self.apply_all(&events)?;
                return Ok((events, Outcome::PaymentCreditRefused { rejection }));
            }
            (Err(rejection), _) => return Err(rejection.into()),
        };
        self.apply_all(&events)?;
        // Once events are applied, the command is logged whatever happens: an outcome that
        // cannot be read (a store that fails) stops the shard instead of being answered as a
        // rejection, which would leave memory ahead of the log.
        let outcome = self
            .outcome(command, &events, ctx)
            .map_err(|error| match error {
                ExecuteError::Rejected(_) if !events.is_empty() => {
                    missing("outcome of an applied command unreadable", 0)
                }
                other => other,
            })?;
        Ok((events, outcome))
    }

    pub(crate) fn transaction_view_of(
        &self,
        wallet_id: WalletId,
        transaction_id: TransactionId,
    ) -> Result<TransactionView, ExecuteError> {
        let wallet = self
            .wallet(wallet_id)
            .ok_or(missing("wallet of outcome", wallet_id.0))?;
        // The transaction may be one the indexer filed and memory let go (a transfer's debit,
        // finalized long after it was reserved).
        let transaction = self
            .transaction_record(wallet, transaction_id)?
            .ok_or(missing("transaction of outcome", transaction_id.0))?;
        Ok(TransactionView::of(wallet, &transaction))
    }

    /// The first transaction recorded by `events` (the requested wallet's, by construction).
    fn first_transaction(&self, events: &[Event]) -> Result<TransactionView, ExecuteError> {
        events
            .iter()
            .find_map(|event| match event {
                Event::TransactionRecorded {
                    wallet_id,
                    transaction,
                } => Some((*wallet_id, transaction.id)),
                _ => None,
            })
            .ok_or(missing("transaction of outcome", 0))
            .and_then(|(wallet_id, transaction_id)| {
                self.transaction_view_of(wallet_id, transaction_id)
            })
    }

    fn outcome(
        &self,
        command: &Command,
        events: &[Event],
        ctx: &Context,
    ) -> Result<Outcome, ExecuteError> {
        let outcome = match command {
            Command::CreateWallet(_) => {
                let wallet_id = events
                    .iter()
                    .rev()
                    .find_map(|event| match event {
                        Event::WalletCreated(created) => Some(created.wallet_id),
                        _ => None,
                    })
                    .ok_or(missing("created wallet", 0))?;
                Outcome::Wallet(self.wallet_view(wallet_id)?)
            }
            Command::FreezeWallet { wallet_id } | Command::UnfreezeWallet { wallet_id } => {
                Outcome::Wallet(WalletView::of(self.find_wallet(*wallet_id)?))
            }
            Command::Deposit(_)
            | Command::Withdraw(_)
            | Command::Transfer(_)
            | Command::Refund(_) => Outcome::Transaction(self.first_transaction(events)?),
            Command::TransferReserve(_) | Command::TransferBatchReserve(_) => {
                let transaction = self.first_transaction(events)?;
                // In flight: in memory.
                let transfer = transaction
                    .transfer_uuid
                    .and_then(|uuid| self.outgoing_transfer(uuid))
                    .ok_or(missing("reserved transfer", transaction.id.0))?
                    .clone();
                Outcome::TransferReserved {
                    transfer,
                    transaction,
                }
            }
            Command::TransferCredit(credit) => {
                // A repeated credit's record may be filed only.
                let incoming = self
                    .incoming_record(credit.transfer_uuid)?
                    .ok_or(missing("credited transfer", 0))?;
                let transaction =
                    self.transaction_view_of(incoming.target_wallet_id, incoming.transaction_id)?;
                Outcome::TransferCredited {
                    transaction,
                    duplicate: events.is_empty(),
                }
            }
            Command::TransferFinalize { transfer_uuid }
            | Command::TransferRelease { transfer_uuid } => {
                let transfer = self
                    .outgoing_record(*transfer_uuid)?
                    .ok_or(Rejection::NotFound("transfer"))?;
                Outcome::TransferSettled(transfer.into_owned())
            }
            Command::TransferBatchMark { .. } => Outcome::TransferBatchMarked,
            Command::PlaceHold(_) => {
                let (wallet_id, hold_id) = events
                    .iter()
                    .find_map(|event| match event {
                        Event::HoldPlaced { wallet_id, hold } => Some((*wallet_id, hold.id)),
                        _ => None,
                    })
                    .ok_or(missing("placed hold", 0))?;
                let wallet = self
                    .wallet(wallet_id)
                    .ok_or(missing("wallet of hold", wallet_id.0))?;
                let hold = wallet
                    .hold(hold_id)
                    .ok_or(missing("placed hold", hold_id.0))?;
                Outcome::Hold(HoldView::of(wallet, hold))
            }
            Command::ReleaseHold { hold_uuid } => Outcome::Hold(self.hold_view(*hold_uuid)?),
            Command::CaptureHold(capture) => Outcome::Hold(self.hold_view(capture.hold_uuid)?),
            Command::ExpireHolds { .. } => Outcome::HoldsExpired {
                count: events.len(),
            },
            Command::Reverse {
                transaction_uuid, ..
            } => {
                let (requested_wallet, _) = self
                    .locate_transaction(*transaction_uuid)?
                    .ok_or(Rejection::NotFound("transaction"))?;
                let mut transaction = None;
                let mut entries = Vec::new();
                for event in events {
                    match event {
                        Event::TransactionRecorded {
                            wallet_id,
                            transaction: recorded,
                        } if *wallet_id == requested_wallet && transaction.is_none() => {
                            transaction = Some(self.transaction_view_of(*wallet_id, recorded.id)?);
                        }
                        Event::EntryPosted { wallet_id, entry } => {
                            let wallet = self
                                .wallet(*wallet_id)
                                .ok_or(missing("wallet of entry", wallet_id.0))?;
                            let position = wallet.entries().iter().position(|e| e.id == entry.id);
                            let prev_hash = match position.and_then(|p| p.checked_sub(1)) {
                                Some(before) => wallet
                                    .entries()
                                    .get(before)
                                    .map_or(crate::ledger::transaction::Hash::ZERO, |before| {
                                        before.hash
                                    }),
                                // The first entry in memory follows the filed ones.
                                None => wallet.entries_before(),
                            };
                            let stored = wallet
                                .entry(entry.id)
                                .ok_or(missing("entry of outcome", entry.id.0))?;
                            entries.push(EntryView::of(wallet, stored, prev_hash));
                        }
                        _ => {}
                    }
                }
                let transaction = transaction.ok_or(missing("reversal transaction", 0))?;
                Outcome::Reversal {
                    transaction,
                    entries,
                }
            }
            Command::VerifyIntegrity { wallet_id, filed } => Outcome::Integrity(
                self.integrity_report(*wallet_id, ctx.now_ms, filed.as_deref())?,
            ),
            commerce => self.commerce_outcome(commerce, events, ctx)?,
        };
        Ok(outcome)
    }
}
