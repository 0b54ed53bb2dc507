//! Deciding the cross-shard payment steps: reserve (charge), credit (charge or refund), finalize
//! and release (protocol in `payment` docs). The refund's reserve step is `RefundPayment` itself
//! (`decide_payment.rs`).

use rust_decimal::Decimal;

use crate::commerce::payment::{
    IncomingPaymentCredit, PaymentMoveKind, PaymentProvider, PaymentReservation,
};
use crate::ledger::transaction::{Direction, TransactionText, TransactionType};
use crate::ledger::transfer::TransferState;
use crate::ledger::wallet::WalletType;
use crate::shard::command::{PaymentCredit, PaymentReserve};
use crate::shard::commerce::payment::Funding;
use crate::shard::event::Event;
use crate::shard::ledger::checks::{bounded_text, check_not_frozen, check_spendable};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::ledger::reversal::ReverseMode;
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{Uuid, UuidKind};
use crate::values::money::validate_amount;

impl Shard {
    pub(crate) fn decide_payment_reserve(
        &self,
        draft: &mut Draft<'_>,
        request: &PaymentReserve,
    ) -> Result<(), Rejection> {
        let description = bounded_text(request.description.as_deref())?;
        if request.payer_wallet_id == request.merchant_wallet_id {
            return Err(Rejection::InvalidRequest(
                "payer and merchant are the same wallet",
            ));
        }
        if self.owns(request.merchant_wallet_id) {
            return Err(Rejection::InvalidRequest(
                "merchant is on this shard: confirm the payment there",
            ));
        }
        if let Some(open) = self.open_charge_record(request.payment_uuid)? {
            let same = open.source_wallet_id == request.payer_wallet_id
                && open.target_wallet_id == request.merchant_wallet_id
                && open.amount == request.amount
                && open.currency == request.currency;
            if same {
                return Ok(()); // idempotent: reserved before and not released
            }
            return Err(Rejection::InvalidRequest(
                "payment already reserved with other details",
            ));
        }
        let payer = self.client_wallet(request.payer_wallet_id)?;
        if payer.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        check_not_frozen(payer)?;
        check_spendable(payer, amount)?;
        let transaction_id = draft.peek_transaction_id()?;
        let in_transit = draft.system_account(request.currency, WalletType::InTransit)?;
        let kind = TransactionType::Payment;
        let text = TransactionText {
            description,
            ..TransactionText::default()
        };
        let mut debit = TxSpec::new(payer.id(), kind, Direction::Debit, amount, text);
        debit.counterparty_wallet_id = Some(request.merchant_wallet_id);
        debit.transfer_uuid = Some(request.payment_uuid);
        let legs = [
            LegSpec::new(payer.id(), Direction::Debit, amount, kind, 0),
            LegSpec::new(in_transit, Direction::Credit, amount, kind, 0),
        ];
        draft.post(request.currency, &[debit], &legs)?;
        draft.push(Event::PaymentReserved(Box::new(PaymentReservation {
            uuid: draft.timed_uuid(UuidKind::PaymentReservation, transaction_id.0),
            payment_uuid: request.payment_uuid,
            kind: PaymentMoveKind::Charge,
            source_wallet_id: payer.id(),
            target_wallet_id: request.merchant_wallet_id,
            amount,
            currency: request.currency,
            transaction_id,
            state: TransferState::Reserved,
            reserved_at_ms: draft.now_ms(),
            settled_at_ms: None,
        })));
        Ok(())
    }

    pub(crate) fn decide_payment_credit(
        &self,
        draft: &mut Draft<'_>,
        request: &PaymentCredit,
    ) -> Result<(), Rejection> {
        if let Some(existing) = self.credit_record(request.reservation_uuid)? {
            let same = existing.payment_uuid == request.payment_uuid
                && existing.kind == request.kind
                && existing.source_wallet_id == request.source_wallet_id
                && existing.target_wallet_id == request.target_wallet_id
                && existing.amount == request.amount
                && existing.currency == request.currency;
            if same {
                return Ok(()); // idempotent: credited before, nothing to do
            }
            return Err(Rejection::InvalidRequest(
                "reservation already credited with other details",
            ));
        }
        if self.refusal_record(request.reservation_uuid)?.is_some() {
            // The first decision is final: its reservation is being (or was) released.
            return Err(Rejection::InvalidState(
                "the credit of this reservation was refused before",
            ));
        }
        if request.source_wallet_id == request.target_wallet_id {
            return Err(Rejection::InvalidRequest(
                "source and target are the same wallet",
            ));
        }
        if self.owns(request.source_wallet_id) {
            return Err(Rejection::InvalidRequest(
                "source is on this shard: not a cross-shard payment",
            ));
        }
        let target = self.client_wallet(request.target_wallet_id)?;
        let transaction_id = match request.kind {
            PaymentMoveKind::Charge => {
                let payment = self.find_payment(request.payment_uuid)?;
                let matches = payment.payer_wallet_id == request.source_wallet_id
                    && payment.merchant_wallet_id == target.id()
                    && payment.amount == request.amount
                    && payment.currency == request.currency;
                if !matches {
                    return Err(Rejection::InvalidRequest(
                        "reservation does not match the payment",
                    ));
                }
                check_not_frozen(target)?;
                if payment.provider != PaymentProvider::Wallet {
                    return Err(Rejection::InvalidState(
                        "a sandbox payment completes on its provider's result",
                    ));
                }
                self.check_completable(&payment)?;
                self.post_completion(draft, &payment, target, Funding::InTransit)?
            }
            PaymentMoveKind::Refund => {
                if target.currency() != request.currency {
                    return Err(Rejection::CurrencyMismatch);
                }
                let amount = validate_amount(request.amount, request.currency)?;
                check_not_frozen(target)?;
                let in_transit = draft.system_account(request.currency, WalletType::InTransit)?;
                let kind = TransactionType::PaymentRefund;
                let mut credit = TxSpec::new(
                    target.id(),
                    kind,
                    Direction::Credit,
                    amount,
                    TransactionText::default(),
                );
                credit.counterparty_wallet_id = Some(request.source_wallet_id);
                credit.transfer_uuid = Some(request.payment_uuid);
                let legs = [
                    LegSpec::new(in_transit, Direction::Debit, amount, kind, 0),
                    LegSpec::new(target.id(), Direction::Credit, amount, kind, 0),
                ];
                let posted = draft.post(request.currency, &[credit], &legs)?;
                *posted
                    .transactions
                    .first()
                    .ok_or(Rejection::InvalidState("internal: no transaction"))?
            }
        };
        draft.push(Event::PaymentCredited(Box::new(IncomingPaymentCredit {
            uuid: request.reservation_uuid,
            payment_uuid: request.payment_uuid,
            kind: request.kind,
            source_wallet_id: request.source_wallet_id,
            target_wallet_id: target.id(),
            amount: crate::values::money::to_currency_scale(request.amount, request.currency),
            currency: request.currency,
            transaction_id,
            credited_at_ms: draft.now_ms(),
        })));
        Ok(())
    }

    /// What a refused [`PaymentCredit`] logs: the refusal, so every later credit of the same
    /// reservation is refused too (see `commerce::payment`). `None` when nothing is to be
    /// recorded: the reservation was decided before (credited or refused), or the rejection is
    /// about the request's shape (it names records that do not exist or do not match, which never
    /// changes), so a repeat of the same request is refused the same way without a record and a
    /// malformed request cannot decide a reservation it does not describe.
    pub(crate) fn payment_credit_refusal(
        &self,
        request: &PaymentCredit,
        rejection: &Rejection,
        now_ms: i64,
    ) -> Option<Event> {
        let about_the_request = matches!(
            rejection,
            Rejection::UnknownCurrency
                | Rejection::InvalidRequest(_)
                | Rejection::WrongShard(_)
                | Rejection::NotFound(_)
                | Rejection::CurrencyMismatch
                | Rejection::InvalidAmount(_)
                // A store read failed: nothing was decided, a retry decides.
                | Rejection::Unavailable(_)
        );
        if about_the_request || !self.owns(request.target_wallet_id) {
            return None;
        }
        // Decided before (in memory, or filed): nothing to record. The decision read the same
        // records, so a store that cannot answer here refused it as unavailable already; if it
        // fails now all the same, nothing is recorded and a retry decides.
        let uuid = request.reservation_uuid;
        let decided = !matches!(self.credit_record(uuid), Ok(None))
            || !matches!(self.refusal_record(uuid), Ok(None));
        if decided {
            return None;
        }
        Some(Event::PaymentCreditRefused {
            reservation_uuid: request.reservation_uuid,
            payment_uuid: request.payment_uuid,
            target_wallet_id: request.target_wallet_id,
            at_ms: now_ms,
        })
    }

    pub(crate) fn decide_reservation_finalize(
        &self,
        draft: &mut Draft<'_>,
        reservation_uuid: Uuid,
    ) -> Result<(), Rejection> {
        let reservation = self
            .reservation_record(reservation_uuid)?
            .ok_or(Rejection::NotFound("payment reservation"))?;
        match reservation.state {
            TransferState::Finalized => Ok(()),
            TransferState::Released => Err(Rejection::InvalidState("reservation was released")),
            TransferState::Reserved => {
                draft.push(Event::PaymentReserveFinalized {
                    reservation_uuid,
                    at_ms: draft.now_ms(),
                });
                Ok(())
            }
        }
    }

    pub(crate) fn decide_reservation_release(
        &self,
        draft: &mut Draft<'_>,
        reservation_uuid: Uuid,
    ) -> Result<(), Rejection> {
        let reservation = self
            .reservation_record(reservation_uuid)?
            .ok_or(Rejection::NotFound("payment reservation"))?;
        match reservation.state {
            TransferState::Released => return Ok(()),
            TransferState::Finalized => {
                return Err(Rejection::InvalidState("reservation is finalized"))
            }
            TransferState::Reserved => {}
        }
        self.reverse_posting(
            draft,
            reservation.source_wallet_id,
            reservation.transaction_id,
            Some("cross-shard payment released".into()),
            ReverseMode::TransferRelease,
        )?;
        draft.push(Event::PaymentReserveReleased {
            reservation_uuid,
            at_ms: draft.now_ms(),
        });
        if reservation.kind == PaymentMoveKind::Refund {
            let payment = self.find_payment(reservation.payment_uuid)?;
            let refunded = payment
                .refunded_amount
                .checked_sub(reservation.amount)
                .filter(|refunded| *refunded >= Decimal::ZERO)
                .ok_or(Rejection::InvalidState("internal: refund total below zero"))?;
            draft.push(Event::PaymentRefundTotalChanged {
                payment_uuid: payment.uuid,
                refunded_amount: refunded,
                at_ms: draft.now_ms(),
            });
        }
        Ok(())
    }
}
