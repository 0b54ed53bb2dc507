//! `Shard::apply` for the commerce events: each arm checks that the event fits (records exist and
//! are in the state the transition starts from, ids in sequence, the postings it refers to were
//! applied before it in the batch), then mutates the records and their indexes.

use rust_decimal::Decimal;

use crate::commerce::payment::{
    IncomingPaymentCredit, Payment, PaymentLink, PaymentMoveKind, PaymentReservation,
    PaymentStatus, QrCode, RefusedPaymentCredit,
};
use crate::commerce::payout::{Payout, PayoutChange, Settlement, SettlementChange};
use crate::ledger::hold::HoldStatus;
use crate::ledger::transfer::TransferState;
use crate::shard::cold::Recall;
use crate::shard::event::Event;
use crate::shard::moves::MoveKey;
use crate::shard::state::{LinkKey, Shard};
use crate::values::error::ApplyError;
use crate::values::ids::{HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};

impl Shard {
    pub(crate) fn apply_commerce(&mut self, event: &Event) -> Result<(), ApplyError> {
        match event {
            Event::PaymentInitiated(payment) => self.apply_payment_initiated(payment),
            Event::PaymentCompleted {
                payment_uuid,
                merchant_transaction_id,
                at_ms,
            } => self.apply_payment_completed(*payment_uuid, *merchant_transaction_id, *at_ms),
            Event::PaymentClosed {
                payment_uuid,
                status,
                at_ms,
            } => {
                let payment = self.payment_for_apply(*payment_uuid)?;
                let id = payment.id.0;
                payment
                    .close(*status, *at_ms)
                    .map_err(|reason| ApplyError::new(reason, id))
            }
            Event::PaymentRefundTotalChanged {
                payment_uuid,
                refunded_amount,
                at_ms,
            } => match self.payment_for_change(*payment_uuid)? {
                Some(payment) => {
                    let id = payment.id.0;
                    payment
                        .set_refunded(*refunded_amount, *at_ms)
                        .map_err(|reason| ApplyError::new(reason, id))
                }
                // Replaying a payment that left memory: the store's filing changes it.
                None => Ok(()),
            },
            Event::PaymentLinkCreated(link) => self.apply_link_created(link),
            Event::PaymentLinkUsed {
                link_uuid,
                payment_uuid,
                at_ms,
            } => {
                // Replay drops a completed payment after its record; within it, it is here.
                let completed = self
                    .commerce
                    .payments
                    .get(payment_uuid)
                    .map_or(matches!(self.recall, Recall::Replay), |payment| {
                        payment.status.is_completed()
                    });
                let Some(link) = self.link_for_change(*link_uuid)? else {
                    // Replay keeps no link: its filing marks it.
                    return Ok(());
                };
                let id = link.id.0;
                if !completed {
                    return Err(ApplyError::new("link's payment not completed", id));
                }
                link.mark_used(*payment_uuid, *at_ms)
                    .map_err(|reason| ApplyError::new(reason, id))?;
                self.touch_link(LinkKey::Link(*link_uuid));
                Ok(())
            }
            Event::QrCreated(qr) => self.apply_qr_created(qr),
            Event::PaymentReserved(reservation) => self.apply_payment_reserved(reservation),
            Event::PaymentCredited(credit) => self.apply_payment_credited(credit),
            refused @ Event::PaymentCreditRefused { .. } => {
                match crate::shard::moves::refusal_of(refused) {
                    Some(refusal) => self.apply_payment_credit_refused(refusal),
                    None => Err(ApplyError::new("not a refusal", 0)),
                }
            }
            Event::PaymentReserveFinalized {
                reservation_uuid,
                at_ms,
            } => self.settle_reservation(*reservation_uuid, TransferState::Finalized, *at_ms),
            Event::PaymentReserveReleased {
                reservation_uuid,
                at_ms,
            } => self.settle_reservation(*reservation_uuid, TransferState::Released, *at_ms),
            Event::PayoutCreated(payout) => self.apply_payout_created(payout),
            Event::PayoutChanged {
                payout_id,
                change,
                at_ms,
            } => self.apply_payout_changed(*payout_id, change, *at_ms),
            Event::SettlementCreated(settlement) => self.apply_settlement_created(settlement),
            Event::SettlementChanged {
                settlement_id,
                change,
                at_ms,
            } => self.apply_settlement_changed(*settlement_id, change, *at_ms),
            _ => Err(ApplyError::new("internal: not a commerce event", 0)),
        }
    }

    /// A pending payment (always in memory), to change under the current command.
    fn payment_for_apply(&mut self, uuid: Uuid) -> Result<&mut Payment, ApplyError> {
        if !self.commerce.payments.contains_key(&uuid) {
            return Err(ApplyError::new("unknown payment", 0));
        }
        self.touch_payment(uuid);
        self.commerce
            .payments
            .get_mut(&uuid)
            .ok_or(ApplyError::new("unknown payment", 0))
    }

    /// Payment link `uuid` to change, recalled from the store if it left memory (`None` in
    /// replay, which keeps none: the store's filing changes it). A store that cannot be read
    /// fails the apply: without the link in memory a second payment could find it unused.
    fn link_for_change(&mut self, uuid: Uuid) -> Result<Option<&mut PaymentLink>, ApplyError> {
        if !self.commerce.links.contains_key(&uuid) {
            match &self.recall {
                Recall::Keep => return Err(ApplyError::new("unknown payment link", 0)),
                Recall::Replay => return Ok(None),
                Recall::Store(store) => {
                    let filed = store
                        .payment_link(uuid)
                        .map_err(|_| ApplyError::new("the history store could not be read", 0))?
                        .ok_or(ApplyError::new("unknown payment link", 0))?;
                    self.commerce.links.insert(uuid, filed);
                }
            }
        }
        self.commerce
            .links
            .get_mut(&uuid)
            .map(Some)
            .ok_or(ApplyError::new("unknown payment link", 0))
    }

    /// Whether payment link `uuid` exists: in memory, or (once it left) in the store. Replay,
    /// which keeps none, takes the logged decision on trust, and so does a store that cannot be
    /// read this instant (the decision read the link a moment ago on this thread; an apply
    /// error would stop the shard). Only a store that answers "no such link" refuses.
    fn link_known(&self, uuid: Uuid) -> bool {
        self.commerce.links.contains_key(&uuid)
            || match &self.recall {
                Recall::Keep => false,
                Recall::Replay => true,
                Recall::Store(store) => !matches!(store.payment_link(uuid), Ok(None)),
            }
    }

    /// Payment `uuid`, to change under the current command: in memory, or recalled from the
    /// store into memory (`Recall::Store`); `None` while replaying if it is not in memory (the
    /// store's own filing of the event changes it). As `transaction_for_change`.
    fn payment_for_change(&mut self, uuid: Uuid) -> Result<Option<&mut Payment>, ApplyError> {
        if !self.commerce.payments.contains_key(&uuid) {
            match &self.recall {
                Recall::Keep => return Err(ApplyError::new("unknown payment", 0)),
                Recall::Replay => return Ok(None),
                Recall::Store(store) => {
                    let filed = store
                        .payment(uuid)
                        .map_err(|_| ApplyError::new("the history store could not be read", 0))?
                        .ok_or(ApplyError::new("unknown payment", 0))?;
                    self.commerce.payments.insert(uuid, filed);
                }
            }
        }
        self.payment_for_apply(uuid).map(Some)
    }

    /// Whether `wallet_id` is a client wallet of this shard in `currency` with `transaction_id`
    /// (pass `None` to skip the transaction).
    fn has_client_wallet(
        &self,
        wallet_id: WalletId,
        currency: crate::values::currency::Currency,
        transaction_id: Option<TransactionId>,
    ) -> bool {
        self.wallet(wallet_id).is_some_and(|wallet| {
            !wallet.is_system()
                && wallet.currency() == currency
                && transaction_id.is_none_or(|id| self.transaction_known(wallet, id))
        })
    }

    fn apply_payment_initiated(&mut self, payment: &Payment) -> Result<(), ApplyError> {
        let id = payment.id.0;
        let next = self.next_in_sequence(
            id,
            self.commerce.next_payment_seq,
            "payment id out of sequence",
        )?;
        if self.commerce.payments.contains_key(&payment.uuid) {
            return Err(ApplyError::new("duplicate payment uuid", id));
        }
        if !self.has_client_wallet(payment.merchant_wallet_id, payment.currency, None) {
            return Err(ApplyError::new(
                "payment's merchant wallet does not fit",
                id,
            ));
        }
        if payment
            .payment_link_uuid
            .is_some_and(|link| !self.link_known(link))
        {
            return Err(ApplyError::new("payment's link unknown", id));
        }
        self.commerce.payments.insert(payment.uuid, payment.clone());
        self.touch_payment(payment.uuid);
        self.commerce.next_payment_seq = next;
        Ok(())
    }

    fn apply_payment_completed(
        &mut self,
        uuid: Uuid,
        merchant_transaction_id: TransactionId,
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let payment = self
            .commerce
            .payments
            .get(&uuid)
            .ok_or(ApplyError::new("unknown payment", 0))?;
        if payment.status != PaymentStatus::Pending
            || !self.has_client_wallet(
                payment.merchant_wallet_id,
                payment.currency,
                Some(merchant_transaction_id),
            )
        {
            return Err(ApplyError::new(
                "only a pending payment with its merchant credit completes",
                payment.id.0,
            ));
        }
        let payment = self.payment_for_apply(uuid)?;
        let id = payment.id.0;
        payment
            .complete(merchant_transaction_id, at_ms)
            .map_err(|reason| ApplyError::new(reason, id))
    }

    fn apply_link_created(&mut self, link: &PaymentLink) -> Result<(), ApplyError> {
        let id = link.id.0;
        let next =
            self.next_in_sequence(id, self.commerce.next_link_seq, "link id out of sequence")?;
        if self.commerce.links.contains_key(&link.uuid)
            || !self.has_client_wallet(link.merchant_wallet_id, link.currency, None)
        {
            return Err(ApplyError::new("duplicate link or wallet does not fit", id));
        }
        self.commerce.links.insert(link.uuid, link.clone());
        self.touch_link(LinkKey::Link(link.uuid));
        self.commerce.next_link_seq = next;
        Ok(())
    }

    fn apply_qr_created(&mut self, qr: &QrCode) -> Result<(), ApplyError> {
        let id = qr.id.0;
        let next = self.next_in_sequence(id, self.commerce.next_qr_seq, "qr id out of sequence")?;
        if self.commerce.qrs.contains_key(&qr.uuid)
            || !self.has_client_wallet(qr.merchant_wallet_id, qr.currency, None)
        {
            return Err(ApplyError::new("duplicate QR or wallet does not fit", id));
        }
        self.commerce.qrs.insert(qr.uuid, qr.clone());
        self.touch_link(LinkKey::Qr(qr.uuid));
        self.commerce.next_qr_seq = next;
        Ok(())
    }

    fn apply_payment_reserved(
        &mut self,
        reservation: &PaymentReservation,
    ) -> Result<(), ApplyError> {
        let id = reservation.transaction_id.0;
        if self.commerce.reservations.contains_key(&reservation.uuid)
            || !self.has_client_wallet(
                reservation.source_wallet_id,
                reservation.currency,
                Some(reservation.transaction_id),
            )
        {
            return Err(ApplyError::new(
                "duplicate reservation or its debit is missing",
                id,
            ));
        }
        if reservation.kind == PaymentMoveKind::Charge {
            if self
                .index
                .commerce
                .open_charges
                .contains_key(&reservation.payment_uuid)
            {
                return Err(ApplyError::new("payment already has an open charge", id));
            }
            self.index
                .commerce
                .open_charges
                .insert(reservation.payment_uuid, reservation.uuid);
        }
        self.commerce
            .reservations
            .insert(reservation.uuid, reservation.clone());
        Ok(())
    }

    fn apply_payment_credited(&mut self, credit: &IncomingPaymentCredit) -> Result<(), ApplyError> {
        let id = credit.transaction_id.0;
        if self.commerce.credits.contains_key(&credit.uuid)
            || !self.has_client_wallet(
                credit.target_wallet_id,
                credit.currency,
                Some(credit.transaction_id),
            )
        {
            return Err(ApplyError::new(
                "reservation already credited or its credit is missing",
                id,
            ));
        }
        self.count_transit(credit.currency, credit.amount, false)?;
        self.commerce.credits.insert(credit.uuid, credit.clone());
        self.finish_move(MoveKey::Credit(credit.uuid));
        Ok(())
    }

    fn apply_payment_credit_refused(
        &mut self,
        refusal: RefusedPaymentCredit,
    ) -> Result<(), ApplyError> {
        if self.commerce.credits.contains_key(&refusal.uuid)
            || self.commerce.refused_credits.contains_key(&refusal.uuid)
            || !self.owns(refusal.target_wallet_id)
        {
            return Err(ApplyError::new(
                "payment credit refused after a decision, or not for this shard",
                refusal.target_wallet_id.0,
            ));
        }
        let key = MoveKey::Refusal(refusal.uuid);
        self.commerce.refused_credits.insert(refusal.uuid, refusal);
        self.finish_move(key);
        Ok(())
    }

    fn settle_reservation(
        &mut self,
        uuid: Uuid,
        state: TransferState,
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let reservation = self
            .commerce
            .reservations
            .get_mut(&uuid)
            .ok_or(ApplyError::new("unknown payment reservation", 0))?;
        let id = reservation.transaction_id.0;
        crate::ledger::transfer::settle_move(
            (&mut reservation.state, &mut reservation.settled_at_ms),
            state,
            at_ms,
        )
        .map_err(|_| ApplyError::new("payment reservation already settled", id))?;
        let moved = (reservation.currency, reservation.amount);
        if state == TransferState::Released && reservation.kind == PaymentMoveKind::Charge {
            let payment_uuid = reservation.payment_uuid;
            self.index.commerce.open_charges.remove(&payment_uuid);
        }
        self.settled_move(MoveKey::Reservation(uuid), state, moved)
    }

    /// The status of hold `hold_id` on `wallet_id`, and its amount.
    fn hold_state(&self, wallet_id: WalletId, hold_id: HoldId) -> Option<(HoldStatus, Decimal)> {
        let hold = self.wallet(wallet_id)?.hold(hold_id)?;
        Some((hold.status, hold.amount))
    }

    fn apply_payout_created(&mut self, payout: &Payout) -> Result<(), ApplyError> {
        let id = payout.id.0;
        let next = self.next_in_sequence(
            id,
            self.commerce.next_payout_seq,
            "payout id out of sequence",
        )?;
        let hold_fits = self.hold_state(payout.wallet_id, payout.hold_id)
            == Some((HoldStatus::Active, payout.amount));
        if !hold_fits
            || !self.has_client_wallet(payout.wallet_id, payout.currency, None)
            || self
                .index
                .commerce
                .payout_holds
                .contains_key(&payout.hold_id)
        {
            return Err(ApplyError::new(
                "payout's wallet or active hold does not fit",
                id,
            ));
        }
        self.index
            .commerce
            .payout_holds
            .insert(payout.hold_id, payout.id);
        self.commerce.payouts.insert(payout.id, payout.clone());
        self.touch_payout(payout.id);
        self.commerce.next_payout_seq = next;
        Ok(())
    }

    fn apply_payout_changed(
        &mut self,
        payout_id: PayoutId,
        change: &PayoutChange,
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let id = payout_id.0;
        let payout = self
            .commerce
            .payouts
            .get(&payout_id)
            .ok_or(ApplyError::new("unknown payout", id))?;
        let next = change.status();
        if !payout.status.can_become(next) {
            return Err(ApplyError::new("payout transition not allowed", id));
        }
        // The hold and postings the change relies on came earlier in the batch.
        let hold = self.hold_state(payout.wallet_id, payout.hold_id);
        let wallet = self.wallet(payout.wallet_id);
        let fits = match change {
            PayoutChange::Approved { .. } | PayoutChange::Paid { .. } => true,
            PayoutChange::Rejected { .. } | PayoutChange::Cancelled { .. } => {
                hold.is_some_and(|(status, _)| status == HoldStatus::Released)
            }
            PayoutChange::Executed { transaction_id, .. } => {
                hold.is_some_and(|(status, _)| status == HoldStatus::Captured)
                    && wallet.is_some_and(|w| self.transaction_known(w, *transaction_id))
            }
            PayoutChange::Failed {
                return_transaction_id,
                ..
            } => wallet.is_some_and(|w| self.transaction_known(w, *return_transaction_id)),
        };
        if !fits {
            return Err(ApplyError::new(
                "payout change without its hold closing or posting",
                id,
            ));
        }
        self.touch_payout(payout_id);
        let payout = self
            .commerce
            .payouts
            .get_mut(&payout_id)
            .ok_or(ApplyError::new("unknown payout", id))?;
        payout
            .apply_change(change, at_ms)
            .map_err(|reason| ApplyError::new(reason, id))
    }

    fn apply_settlement_created(&mut self, settlement: &Settlement) -> Result<(), ApplyError> {
        let id = settlement.id.0;
        let next = self.next_in_sequence(
            id,
            self.commerce.next_settlement_seq,
            "settlement id out of sequence",
        )?;
        let wallet = self
            .wallet(settlement.wallet_id)
            .filter(|wallet| !wallet.is_system() && wallet.currency() == settlement.currency)
            .ok_or(ApplyError::new("settlement's wallet does not fit", id))?;
        for item in &settlement.items {
            // A transaction that left memory is checked by its id alone.
            let fits = match wallet.transaction(item.transaction_id) {
                Some(transaction) => transaction.uuid == item.transaction_uuid,
                None => self.transaction_known(wallet, item.transaction_id),
            };
            // Claims of settlements in memory only: an executed settlement that left memory
            // keeps its claim in the store, which the decision read (`Shard::settled_by`);
            // replay applies what was decided.
            if !fits
                || self
                    .index
                    .commerce
                    .settled
                    .contains_key(&item.transaction_id)
            {
                return Err(ApplyError::new(
                    "settlement item unknown or already settled",
                    item.transaction_id.0,
                ));
            }
        }
        for item in &settlement.items {
            self.index
                .commerce
                .settled
                .insert(item.transaction_id, settlement.id);
        }
        self.commerce
            .settlements
            .insert(settlement.id, settlement.clone());
        self.touch_settlement(settlement.id);
        self.commerce.next_settlement_seq = next;
        Ok(())
    }

    fn apply_settlement_changed(
        &mut self,
        settlement_id: SettlementId,
        change: &SettlementChange,
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let id = settlement_id.0;
        let settlement = self
            .commerce
            .settlements
            .get(&settlement_id)
            .ok_or(ApplyError::new("unknown settlement", id))?;
        let next = change.status();
        if !settlement.status.can_become(next) {
            return Err(ApplyError::new("settlement transition not allowed", id));
        }
        if let SettlementChange::Executed { transaction_id, .. } = change {
            let posted = self
                .wallet(settlement.wallet_id)
                .is_some_and(|wallet| self.transaction_known(wallet, *transaction_id));
            if !posted {
                return Err(ApplyError::new("settlement executed without its debit", id));
            }
        }
        if !next.claims_items() {
            for item in &settlement.items {
                self.index.commerce.settled.remove(&item.transaction_id);
            }
        }
        self.touch_settlement(settlement_id);
        self.commerce
            .settlements
            .get_mut(&settlement_id)
            .ok_or(ApplyError::new("unknown settlement", id))?
            .apply_change(change, at_ms)
            .map_err(|reason| ApplyError::new(reason, id))?;
        Ok(())
    }
}
