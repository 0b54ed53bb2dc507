//! Deciding refunds and reversals.
//!
//! **Refund** (`POST /wallets/refund`): credits a wallet against one of its debits (withdrawal,
//! transfer debit side, hold capture), funded by the currency's float account: the operator returns
//! money from outside, the original counterparty is not debited. The refunds of one original never
//! exceed it (`refund_exceeds_original`); the running total is kept on the original transaction.
//! Refused (`invalid_state`) while the original is the debit of a cross-shard transfer still
//! `reserved`: the transfer's release mirrors that posting, which a refund would make impossible.
//!
//! **Reversal** (`POST /wallets/reverse`): mirrors every entry of the original *posting* (all wallets,
//! system accounts included: reversing one side of a transfer reverses both), each mirror an entry
//! with `is_reversal` and `reverses_entry_id`, the originals marked `reversed_by_entry_id`, one
//! `reversal` transaction per customer/merchant wallet involved. Refused when:
//! - the transaction is itself a reversal, or a side of a cross-shard transfer (the transfer protocol
//!   settles those), or a payment, payment refund, payout or settlement posting (their own life
//!   cycles undo those), or has refunds (reverse the refunds first, else money would return twice):
//!   `invalid_state`;
//! - any part of the posting is already reversed: `already_reversed`;
//! - a wallet involved is frozen (`wallet_frozen`) or its spendable would go negative
//!   (`insufficient_funds`).
//!
//! Reversing a refund lowers its original's refunded total again. A cross-shard transfer's release
//! reuses the same mirroring ([`ReverseMode::TransferRelease`]), skipping the client-only checks.

use std::borrow::Cow;

use rust_decimal::Decimal;

use crate::ledger::transaction::{
    Direction, EntryRef, LedgerEntry, Transaction, TransactionText, TransactionType,
};
use crate::ledger::transfer::TransferState;
use crate::ledger::wallet::{Wallet, WalletType};
use crate::shard::command::Refund;
use crate::shard::event::Event;
use crate::shard::ledger::checks::{bounded_text, details_text};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{TransactionId, Uuid, WalletId};
use crate::values::money::validate_amount;

/// Who asks for a reversal.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum ReverseMode {
    /// A client's `reverse` command: every check applies.
    Client,
    /// Releasing a reserved cross-shard transfer or payment reservation: returns funds even to a
    /// frozen wallet.
    TransferRelease,
}

impl Shard {
    fn find_transaction(&self, uuid: Uuid) -> Result<(&Wallet, Cow<'_, Transaction>), Rejection> {
        let (wallet_id, transaction_id) = self
            .locate_transaction(uuid)?
            .ok_or(Rejection::NotFound("transaction"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let transaction = self
            .transaction_record(wallet, transaction_id)?
            .ok_or(Rejection::NotFound("transaction"))?;
        Ok((wallet, transaction))
    }

    pub(crate) fn decide_refund(
        &self,
        draft: &mut Draft<'_>,
        refund: &Refund,
    ) -> Result<(), Rejection> {
        let mut text = details_text(&refund.details)?;
        if let Some(reason) = bounded_text(refund.reason.as_deref())? {
            text.description = Some(reason);
        }
        let (wallet, original) = self.find_transaction(refund.original_transaction_uuid)?;
        let currency = wallet.currency();
        let amount = validate_amount(refund.amount, currency)?;
        if wallet.is_frozen() {
            return Err(Rejection::WalletFrozen);
        }
        let refundable = original.direction == Direction::Debit
            && matches!(
                original.transaction_type,
                TransactionType::Withdrawal
                    | TransactionType::Transfer
                    | TransactionType::HoldCapture
            );
        if !refundable {
            return Err(Rejection::NotADebit);
        }
        if original.reversed_by_transaction_id.is_some() {
            return Err(Rejection::AlreadyReversed);
        }
        // A transfer still reserved is always in memory (only finished moves leave it).
        let reserved = original.transfer_uuid.is_some_and(|uuid| {
            self.transfers_out
                .get(&uuid)
                .is_some_and(|transfer| transfer.state == TransferState::Reserved)
        });
        if reserved {
            // Its release mirrors the reserve posting, which a refund would block (issue 16).
            return Err(Rejection::InvalidState(
                "the transaction's cross-shard transfer is still reserved",
            ));
        }
        let refunded = original
            .refunded_amount
            .checked_add(amount)
            .ok_or(Rejection::LimitExceeded("refund total"))?;
        if refunded > original.amount {
            return Err(Rejection::RefundExceedsOriginal);
        }
        let float = draft.system_account(currency, WalletType::Float)?;
        let kind = TransactionType::Refund;
        let mut credit = TxSpec::new(wallet.id(), kind, Direction::Credit, amount, text);
        credit.reference_transaction_id = Some(original.id);
        let legs = [
            LegSpec::new(wallet.id(), Direction::Credit, amount, kind, 0),
            LegSpec::new(float, Direction::Debit, amount, kind, 0),
        ];
        draft.post(currency, &[credit], &legs)?;
        draft.push(Event::RefundTotalChanged {
            wallet_id: wallet.id(),
            transaction_id: original.id,
            refunded_amount: refunded,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_reverse(
        &self,
        draft: &mut Draft<'_>,
        transaction_uuid: Uuid,
        reason: &str,
    ) -> Result<(), Rejection> {
        if reason.trim().is_empty() {
            return Err(Rejection::InvalidRequest("a reversal needs a reason"));
        }
        let reason = bounded_text(Some(reason))?;
        let (wallet, transaction) = self.find_transaction(transaction_uuid)?;
        self.reverse_posting(
            draft,
            wallet.id(),
            transaction.id,
            reason,
            ReverseMode::Client,
        )
    }

    /// Mirrors the whole posting that transaction `transaction_id` of `wallet_id` belongs to.
    pub(crate) fn reverse_posting(
        &self,
        draft: &mut Draft<'_>,
        wallet_id: WalletId,
        transaction_id: TransactionId,
        reason: Option<Box<str>>,
        mode: ReverseMode,
    ) -> Result<(), Rejection> {
        const CORRUPT: Rejection =
            Rejection::InvalidState("internal: posting refers to a missing record");
        let wallet = self.find_wallet(wallet_id)?;
        let requested = self
            .transaction_record(wallet, transaction_id)?
            .ok_or(Rejection::NotFound("transaction"))?;
        let currency = wallet.currency();

        // Every entry of the posting, and the client transactions it recorded (first seen first).
        let mut legs: Vec<(&Wallet, Cow<'_, LedgerEntry>)> =
            Vec::with_capacity(requested.legs.len());
        let mut originals: Vec<(&Wallet, Cow<'_, Transaction>)> = Vec::new();
        for EntryRef {
            wallet_id,
            entry_id,
        } in &requested.legs
        {
            let leg_wallet = self.wallet(*wallet_id).ok_or(CORRUPT)?;
            let entry = self.entry_record(leg_wallet, *entry_id)?.ok_or(CORRUPT)?;
            let transaction_id = entry.transaction_id;
            legs.push((leg_wallet, entry));
            if !leg_wallet.is_system()
                && !originals
                    .iter()
                    .any(|(w, t)| w.id() == leg_wallet.id() && t.id == transaction_id)
            {
                originals.push((
                    leg_wallet,
                    self.transaction_record(leg_wallet, transaction_id)?
                        .ok_or(CORRUPT)?,
                ));
            }
        }

        if mode == ReverseMode::Client && originals.iter().any(|(w, _)| w.is_frozen()) {
            return Err(Rejection::WalletFrozen);
        }
        for (_, original) in &originals {
            if original.transaction_type == TransactionType::Reversal {
                return Err(Rejection::InvalidState("a reversal cannot be reversed"));
            }
            if mode == ReverseMode::Client && original.transaction_type.is_commerce() {
                return Err(Rejection::InvalidState(
                    "payment, payout and settlement postings are undone by their own life cycle",
                ));
            }
            if mode == ReverseMode::Client && original.transfer_uuid.is_some() {
                return Err(Rejection::InvalidState(
                    "cross-shard transfers are settled by the transfer protocol",
                ));
            }
            if !original.refunded_amount.is_zero() {
                return Err(Rejection::InvalidState(
                    "transaction has refunds: reverse them first",
                ));
            }
        }
        if originals
            .iter()
            .any(|(_, t)| t.reversed_by_transaction_id.is_some())
            || legs
                .iter()
                .any(|(_, entry)| entry.reversed_by_entry_id.is_some())
        {
            return Err(Rejection::AlreadyReversed);
        }
        // Spendable after the mirror, per client wallet.
        for (client, _) in &originals {
            let delta = legs
                .iter()
                .filter(|(w, _)| w.id() == client.id())
                .try_fold(Decimal::ZERO, |sum, (_, entry)| {
                    sum.checked_sub(entry.signed_amount())
                })
                .ok_or(Rejection::LimitExceeded("balance"))?;
            let after = client
                .available()
                .and_then(|available| available.checked_add(delta));
            if after.is_none_or(|after| after < Decimal::ZERO) {
                return Err(Rejection::InsufficientFunds);
            }
        }

        let kind = TransactionType::Reversal;
        let text = TransactionText {
            description: reason,
            ..TransactionText::default()
        };
        let txs: Vec<TxSpec> = originals
            .iter()
            .map(|(w, original)| {
                let mut spec = TxSpec::new(
                    w.id(),
                    kind,
                    original.direction.opposite(),
                    original.amount,
                    text.clone(),
                );
                spec.reference_transaction_id = Some(original.id);
                spec.counterparty_wallet_id = original.counterparty_wallet_id;
                spec
            })
            .collect();
        let mirror_legs: Vec<LegSpec> = legs
            .iter()
            .map(|(w, entry)| {
                // A system account's entry carries the posting's first transaction id.
                let transaction = originals
                    .iter()
                    .position(|(_, t)| t.id == entry.transaction_id)
                    .unwrap_or(0);
                let mut leg = LegSpec::new(
                    w.id(),
                    entry.direction.opposite(),
                    entry.amount,
                    kind,
                    transaction,
                );
                leg.reverses_entry_id = Some(entry.id);
                leg
            })
            .collect();
        let posted = draft.post(currency, &txs, &mirror_legs)?;

        let now_ms = draft.now_ms();
        for ((w, entry), mirror_id) in legs.iter().zip(&posted.entries) {
            draft.push(Event::EntryReversed {
                wallet_id: w.id(),
                entry_id: entry.id,
                reversed_by_entry_id: *mirror_id,
            });
        }
        for ((w, original), reversal_id) in originals.iter().zip(&posted.transactions) {
            draft.push(Event::TransactionReversed {
                wallet_id: w.id(),
                transaction_id: original.id,
                reversed_by_transaction_id: *reversal_id,
                at_ms: now_ms,
            });
            if original.transaction_type == TransactionType::Refund {
                self.push_refund_undone(draft, w, original)?;
            }
        }
        Ok(())
    }

    /// A reversed refund no longer counts against its original.
    fn push_refund_undone(
        &self,
        draft: &mut Draft<'_>,
        wallet: &Wallet,
        refund: &Transaction,
    ) -> Result<(), Rejection> {
        let Some(original_id) = refund.reference_transaction_id else {
            return Ok(());
        };
        let original = self
            .transaction_record(wallet, original_id)?
            .ok_or(Rejection::NotFound("transaction"))?;
        let refunded = original
            .refunded_amount
            .checked_sub(refund.amount)
            .filter(|refunded| *refunded >= Decimal::ZERO)
            .ok_or(Rejection::InvalidState("internal: refund total below zero"))?;
        draft.push(Event::RefundTotalChanged {
            wallet_id: wallet.id(),
            transaction_id: original_id,
            refunded_amount: refunded,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }
}
