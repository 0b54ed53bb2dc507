//! Invariant 7 (see [`Shard`]): the commerce records agree with the wallets, holds and ledger, and
//! their indexes agree with the records. Recomputed from the records; O(records + transactions).

use std::collections::{BTreeMap, BTreeSet, HashMap};

use rust_decimal::Decimal;

use crate::commerce::payment::{PaymentMoveKind, PaymentStatus};
use crate::commerce::payout::PayoutStatus;
use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::{Direction, TransactionStatus, TransactionType};
use crate::ledger::transfer::TransferState;
use crate::ledger::wallet::Wallet;
use crate::shard::state::Shard;
use crate::values::currency::Currency;
use crate::values::error::InvariantViolation;
use crate::values::ids::{TransactionId, Uuid, WalletId};

fn corrupt(record: &'static str, id: u64, what: &'static str) -> InvariantViolation {
    InvariantViolation::CommerceCorrupt { record, id, what }
}

fn check(
    ok: bool,
    record: &'static str,
    id: u64,
    what: &'static str,
) -> Result<(), InvariantViolation> {
    if ok {
        Ok(())
    } else {
        Err(corrupt(record, id, what))
    }
}

impl Shard {
    /// A client wallet of this shard in `currency`.
    fn commerce_wallet(&self, wallet_id: WalletId, currency: Currency) -> Option<&Wallet> {
        self.wallet(wallet_id)
            .filter(|wallet| !wallet.is_system() && wallet.currency() == currency)
    }

    /// Transaction `id` of `wallet` from memory or the store (`None` if unreadable, which the
    /// check then reports).
    fn recorded<'a>(
        &self,
        wallet: &'a crate::ledger::wallet::Wallet,
        id: TransactionId,
    ) -> Option<std::borrow::Cow<'a, crate::ledger::transaction::Transaction>> {
        self.transaction_record(wallet, id).ok().flatten()
    }

    /// Whether `id` was minted by this shard before `next_seq`.
    fn minted(&self, id: u64, next_seq: u64) -> bool {
        self.ids.seq_of(id).is_some_and(|seq| seq < next_seq)
    }

    pub(crate) fn check_commerce(&self) -> Result<(), InvariantViolation> {
        self.check_payments()?;
        self.check_links_and_qrs()?;
        self.check_reservations()?;
        self.check_payouts()?;
        self.check_settlements()
    }

    fn check_payments(&self) -> Result<(), InvariantViolation> {
        // Refunds per payment, from the merchant wallets' live refund debits.
        let mut refunds: HashMap<Uuid, Decimal> = HashMap::new();
        let mut overflow = false;
        for wallet in self.wallets().filter(|wallet| wallet.has_history()) {
            self.for_each_transaction(wallet, |transaction| {
                if transaction.transaction_type == TransactionType::PaymentRefund
                    && transaction.direction == Direction::Debit
                    && transaction.status == TransactionStatus::Completed
                {
                    if let Some(payment) = transaction.transfer_uuid {
                        let sum = refunds.entry(payment).or_insert(Decimal::ZERO);
                        match sum.checked_add(transaction.amount) {
                            Some(total) => *sum = total,
                            None => overflow = true,
                        }
                    }
                }
                true
            })
            .map_err(|_| InvariantViolation::IndexMismatch("history store unreadable"))?;
        }
        if overflow {
            return Err(InvariantViolation::Overflow);
        }
        let mut ids = BTreeSet::new();
        for (uuid, payment) in &self.commerce.payments {
            let id = payment.id.0;
            let r = "payment";
            check(*uuid == payment.uuid, r, id, "keyed by another uuid")?;
            check(
                ids.insert(id) && self.minted(id, self.commerce.next_payment_seq),
                r,
                id,
                "id not minted here or used twice",
            )?;
            let merchant = self
                .commerce_wallet(payment.merchant_wallet_id, payment.currency)
                .filter(|wallet| wallet.business_id() == payment.merchant_id)
                .ok_or(corrupt(r, id, "merchant wallet does not fit"))?;
            check(
                payment.fee_amount >= Decimal::ZERO
                    && payment.net_amount >= Decimal::ZERO
                    && payment.fee_amount.checked_add(payment.net_amount) == Some(payment.amount),
                r,
                id,
                "fee + net is not the amount",
            )?;
            let refunded = refunds.get(uuid).copied().unwrap_or(Decimal::ZERO);
            check(
                payment.refunded_amount == refunded && refunded <= payment.amount,
                r,
                id,
                "refunded total disagrees with its refund postings",
            )?;
            if payment.status.is_completed() {
                check(
                    payment.status
                        == PaymentStatus::after_refunds(payment.amount, payment.refunded_amount),
                    r,
                    id,
                    "status disagrees with the refunded total",
                )?;
                let credit = payment
                    .merchant_transaction_id
                    .and_then(|tx| self.recorded(merchant, tx))
                    .ok_or(corrupt(r, id, "completed without its merchant credit"))?;
                check(
                    credit.transaction_type == TransactionType::Payment
                        && credit.direction == Direction::Credit
                        && credit.transfer_uuid == Some(payment.uuid)
                        && credit.amount == payment.amount
                        && credit.fee_amount == payment.fee_amount
                        && credit.net_amount == payment.net_amount,
                    r,
                    id,
                    "merchant credit disagrees with the payment",
                )?;
            } else {
                check(
                    payment.merchant_transaction_id.is_none()
                        && payment.refunded_amount.is_zero()
                        && payment.completed_at_ms.is_none(),
                    r,
                    id,
                    "money moved for a payment that never completed",
                )?;
            }
            if let Some(link_uuid) = payment.payment_link_uuid {
                // A link may have left memory: read from the store, or (replay keeps none)
                // taken on trust, the store being checked by `replay --verify`.
                let fits = match self.payment_link(link_uuid) {
                    Ok(Some(link)) => {
                        !payment.status.is_completed() || link.used_by_payment_uuid == Some(*uuid)
                    }
                    Ok(None) => matches!(self.recall, crate::shard::cold::Recall::Replay),
                    Err(_) => false,
                };
                check(
                    fits,
                    r,
                    id,
                    "names an unknown link, or completed and its link is not marked used by it",
                )?;
            }
        }
        Ok(())
    }

    fn check_links_and_qrs(&self) -> Result<(), InvariantViolation> {
        for (uuid, link) in &self.commerce.links {
            let (r, id) = ("payment link", link.id.0);
            check(*uuid == link.uuid, r, id, "keyed by another uuid")?;
            check(
                self.minted(id, self.commerce.next_link_seq)
                    && self
                        .commerce_wallet(link.merchant_wallet_id, link.currency)
                        .is_some(),
                r,
                id,
                "id or wallet does not fit",
            )?;
            if let Some(payment) = link.used_by_payment_uuid {
                // A completed payment may have left memory: read from the store, or (replay
                // keeps none) taken on trust, the store being checked by `replay --verify`.
                let used = match self.payment(payment) {
                    Ok(Some(payment)) => {
                        payment.status.is_completed() && payment.payment_link_uuid == Some(*uuid)
                    }
                    Ok(None) => matches!(self.recall, crate::shard::cold::Recall::Replay),
                    Err(_) => false,
                };
                check(used, r, id, "used by a payment that did not complete on it")?;
            }
        }
        for (uuid, qr) in &self.commerce.qrs {
            let (r, id) = ("qr", qr.id.0);
            check(
                *uuid == qr.uuid
                    && self.minted(id, self.commerce.next_qr_seq)
                    && self
                        .commerce_wallet(qr.merchant_wallet_id, qr.currency)
                        .is_some()
                    && crate::values::emvco::verify(&qr.payload),
                r,
                id,
                "key, id, wallet or payload does not fit",
            )?;
        }
        Ok(())
    }

    fn check_reservations(&self) -> Result<(), InvariantViolation> {
        let mut open: HashMap<Uuid, Uuid> = HashMap::new();
        for (uuid, reservation) in &self.commerce.reservations {
            let r = "payment reservation";
            let debit = self
                .commerce_wallet(reservation.source_wallet_id, reservation.currency)
                .and_then(|wallet| self.recorded(wallet, reservation.transaction_id));
            check(
                *uuid == reservation.uuid
                    && !self.owns(reservation.target_wallet_id)
                    && debit.is_some_and(|debit| {
                        debit.direction == Direction::Debit
                            && debit.amount == reservation.amount
                            && debit.transfer_uuid == Some(reservation.payment_uuid)
                    }),
                r,
                0,
                "key, target or debit does not fit",
            )?;
            if reservation.kind == PaymentMoveKind::Charge
                && reservation.state != TransferState::Released
                && open
                    .insert(reservation.payment_uuid, reservation.uuid)
                    .is_some()
            {
                return Err(corrupt(r, 0, "two open charges for one payment"));
            }
        }
        if open != self.index.commerce.open_charges {
            return Err(InvariantViolation::IndexMismatch("open charge index"));
        }
        for (uuid, credit) in &self.commerce.credits {
            let credited = self
                .commerce_wallet(credit.target_wallet_id, credit.currency)
                .and_then(|wallet| self.recorded(wallet, credit.transaction_id));
            check(
                *uuid == credit.uuid
                    && !self.owns(credit.source_wallet_id)
                    && credited.is_some_and(|tx| {
                        tx.direction == Direction::Credit && tx.amount == credit.amount
                    }),
                "payment credit",
                0,
                "key, source or credit does not fit",
            )?;
        }
        Ok(())
    }

    fn check_payouts(&self) -> Result<(), InvariantViolation> {
        for (key, payout) in &self.commerce.payouts {
            let (r, id) = ("payout", payout.id.0);
            check(
                *key == payout.id && self.minted(id, self.commerce.next_payout_seq),
                r,
                id,
                "keyed wrongly or not minted here",
            )?;
            let wallet = self
                .commerce_wallet(payout.wallet_id, payout.currency)
                .ok_or(corrupt(r, id, "wallet does not fit"))?;
            let hold = self
                .hold_record(wallet, payout.hold_id)
                .ok()
                .flatten()
                .ok_or(corrupt(r, id, "its hold is missing"))?;
            check(
                self.index.commerce.payout_holds.get(&payout.hold_id) == Some(&payout.id),
                r,
                id,
                "payout hold index",
            )?;
            let hold_fits = hold.amount == payout.amount
                && match payout.status {
                    PayoutStatus::Pending | PayoutStatus::Approved => {
                        hold.status == HoldStatus::Active
                    }
                    PayoutStatus::Rejected | PayoutStatus::Cancelled => {
                        hold.status == HoldStatus::Released
                    }
                    PayoutStatus::Executed | PayoutStatus::Paid | PayoutStatus::Failed => {
                        hold.status == HoldStatus::Captured
                            && hold.captured_amount == Some(payout.amount)
                            && hold.capture_transaction_id == payout.transaction_id
                    }
                };
            check(hold_fits, r, id, "hold state disagrees with the payout")?;
            let executed = matches!(
                payout.status,
                PayoutStatus::Executed | PayoutStatus::Paid | PayoutStatus::Failed
            );
            let debit_ok = payout
                .transaction_id
                .and_then(|tx| self.recorded(wallet, tx))
                .is_some_and(|tx| {
                    tx.transaction_type == TransactionType::Payout && tx.amount == payout.amount
                });
            check(
                executed == debit_ok && executed != payout.attempts.is_empty(),
                r,
                id,
                "execution, debit and attempts disagree",
            )?;
            let returned = payout
                .return_transaction_id
                .and_then(|tx| self.recorded(wallet, tx))
                .is_some_and(|tx| tx.transaction_type == TransactionType::PayoutReturn);
            check(
                returned == (payout.status == PayoutStatus::Failed),
                r,
                id,
                "failed payout without its return, or a return without failure",
            )?;
        }
        if self.index.commerce.payout_holds.len() != self.commerce.payouts.len() {
            return Err(InvariantViolation::IndexMismatch(
                "payout hold index holds unknown holds",
            ));
        }
        Ok(())
    }

    fn check_settlements(&self) -> Result<(), InvariantViolation> {
        let mut settled: BTreeMap<TransactionId, u64> = BTreeMap::new();
        for (key, settlement) in &self.commerce.settlements {
            let (r, id) = ("settlement", settlement.id.0);
            check(
                *key == settlement.id && self.minted(id, self.commerce.next_settlement_seq),
                r,
                id,
                "keyed wrongly or not minted here",
            )?;
            let wallet = self
                .commerce_wallet(settlement.wallet_id, settlement.currency)
                .ok_or(corrupt(r, id, "wallet does not fit"))?;
            let mut total = Decimal::ZERO;
            let mut unique = BTreeSet::new();
            for item in &settlement.items {
                let fits = self
                    .recorded(wallet, item.transaction_id)
                    .is_some_and(|tx| {
                        tx.uuid == item.transaction_uuid
                            && tx.transaction_type == TransactionType::Payment
                            && tx.direction == Direction::Credit
                            && tx.net_amount == item.net_amount
                    });
                check(
                    fits && unique.insert(item.transaction_id),
                    r,
                    id,
                    "item is not one of the wallet's payment credits, or repeats",
                )?;
                total = total
                    .checked_add(item.net_amount)
                    .ok_or(InvariantViolation::Overflow)?;
                if settlement.status.claims_items()
                    && settled.insert(item.transaction_id, id).is_some()
                {
                    return Err(corrupt(r, id, "a transaction is in two live settlements"));
                }
            }
            check(
                total == settlement.total_amount,
                r,
                id,
                "total is not the items' sum",
            )?;
            let executed = settlement
                .transaction_id
                .and_then(|tx| self.recorded(wallet, tx))
                .is_some_and(|tx| {
                    tx.transaction_type == TransactionType::Settlement && tx.amount == total
                });
            check(
                executed
                    == (settlement.status == crate::commerce::payout::SettlementStatus::Executed),
                r,
                id,
                "execution and debit disagree",
            )?;
        }
        let indexed: BTreeMap<TransactionId, u64> = self
            .index
            .commerce
            .settled
            .iter()
            .map(|(tx, settlement)| (*tx, settlement.0))
            .collect();
        if indexed != settled {
            return Err(InvariantViolation::IndexMismatch(
                "settled transaction index",
            ));
        }
        Ok(())
    }
}

/// One shard's side of its cross-shard moves (transfers and payment steps), for the pairing check
/// across shards that no single shard can make ([`check_cross_shard_pairs`]).
#[derive(Clone, Debug, Default)]
pub struct CrossShardLegs {
    /// Reserved here (debited into in-transit): uuid, state, amount.
    pub sent: Vec<(Uuid, TransferState, Decimal)>,
    /// Credited here from another shard: uuid, amount.
    pub received: Vec<(Uuid, Decimal)>,
}

impl Shard {
    /// This shard's reservations and received credits (see [`CrossShardLegs`]).
    #[must_use]
    pub fn cross_shard_legs(&self) -> CrossShardLegs {
        let mut legs = CrossShardLegs::default();
        for transfer in self.transfers_out.values() {
            legs.sent
                .push((transfer.uuid, transfer.state, transfer.amount));
        }
        for reservation in self.commerce.reservations.values() {
            legs.sent
                .push((reservation.uuid, reservation.state, reservation.amount));
        }
        for transfer in self.transfers_in.values() {
            legs.received.push((transfer.uuid, transfer.amount));
        }
        for credit in self.commerce.credits.values() {
            legs.received.push((credit.uuid, credit.amount));
        }
        legs
    }
}

/// What the history store holds of a move's two sides: sent (state, amount), received amount.
pub type FiledLegs = (Option<(TransferState, Decimal)>, Option<Decimal>);

/// No money is half-moved between shards: every credit received matches a reservation of the
/// same amount that was not released, and every finalized reservation was credited. A reservation
/// still `reserved` may or may not be credited yet (the protocol is between steps 1 and 3).
pub fn check_cross_shard_pairs(shards: &[CrossShardLegs]) -> Result<(), String> {
    check_cross_shard_pairs_filed(shards, &|_| Ok((None, None)))
}

/// [`check_cross_shard_pairs`] for shards whose finished moves leave memory: a side that is not
/// in memory is looked up in the history store (`filed`), where a finished record is once it
/// left. Pairs with both sides filed are `replay --verify`'s to check.
pub fn check_cross_shard_pairs_filed(
    shards: &[CrossShardLegs],
    filed: &dyn Fn(Uuid) -> Result<FiledLegs, String>,
) -> Result<(), String> {
    let mut sent = HashMap::new();
    for legs in shards {
        for (uuid, state, amount) in &legs.sent {
            sent.insert(*uuid, (*state, *amount));
        }
    }
    let mut received = std::collections::HashMap::new();
    for legs in shards {
        for (uuid, amount) in &legs.received {
            received.insert(*uuid, *amount);
        }
    }
    for legs in shards {
        for (uuid, amount) in &legs.received {
            let found = match sent.get(uuid) {
                Some(found) => Some(*found),
                None => filed(*uuid)?.0,
            };
            match found.as_ref() {
                None => return Err(format!("cross-shard credit {uuid} has no reservation")),
                Some((TransferState::Released, _)) => {
                    return Err(format!(
                        "cross-shard credit {uuid} was received but its reservation was released"
                    ))
                }
                Some((_, reserved)) if reserved != amount => {
                    return Err(format!(
                        "cross-shard credit {uuid} of {amount} does not match its reservation of {reserved}"
                    ))
                }
                Some(_) => {}
            }
        }
    }
    for (uuid, (state, amount)) in &sent {
        if *state != TransferState::Finalized {
            continue;
        }
        let credited = match received.get(uuid) {
            Some(credited) => Some(*credited),
            None => filed(*uuid)?.1,
        };
        match credited {
            None => {
                return Err(format!(
                    "cross-shard move {uuid} was finalized but never credited"
                ))
            }
            Some(credited) if credited != *amount => {
                return Err(format!(
                    "cross-shard credit {uuid} of {credited} does not match its reservation of {amount}"
                ))
            }
            Some(_) => {}
        }
    }
    Ok(())
}

#[cfg(test)]
mod cross_shard_tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn uuid(n: u8) -> Uuid {
        Uuid([n; 16])
    }

    fn legs(sent: &[(u8, TransferState, i64)], received: &[(u8, i64)]) -> CrossShardLegs {
        CrossShardLegs {
            sent: sent
                .iter()
                .map(|(n, state, amount)| (uuid(*n), *state, Decimal::from(*amount)))
                .collect(),
            received: received
                .iter()
                .map(|(n, amount)| (uuid(*n), Decimal::from(*amount)))
                .collect(),
        }
    }

    #[test]
    fn pairs_hold_in_every_stage_of_the_protocol() {
        let source = legs(
            &[
                (1, TransferState::Reserved, 5),
                (2, TransferState::Reserved, 6),
                (3, TransferState::Finalized, 7),
                (4, TransferState::Released, 8),
            ],
            &[],
        );
        // 1: reserved, not credited yet; 2: credited, not finalized yet; 3: done; 4: undone.
        let target = legs(&[], &[(2, 6), (3, 7)]);
        check_cross_shard_pairs(&[source, target]).unwrap();
    }

    #[test]
    fn a_half_moved_payment_is_caught() {
        let finalized_uncredited = legs(&[(1, TransferState::Finalized, 5)], &[]);
        assert!(check_cross_shard_pairs(&[finalized_uncredited]).is_err());
        let released_but_credited = [
            legs(&[(1, TransferState::Released, 5)], &[]),
            legs(&[], &[(1, 5)]),
        ];
        assert!(check_cross_shard_pairs(&released_but_credited).is_err());
        let other_amount = [
            legs(&[(1, TransferState::Finalized, 5)], &[]),
            legs(&[], &[(1, 6)]),
        ];
        assert!(check_cross_shard_pairs(&other_amount).is_err());
        let orphan = [legs(&[], &[(9, 1)])];
        assert!(check_cross_shard_pairs(&orphan).is_err());
    }
}
