//! Deciding payments: initiate, confirm (same shard), cancel, fail, provider result, refund (life
//! cycle in `payment` docs). Checks run in ascending [`Rejection::precedence`]. The cross-shard
//! steps are in `decide_payment_move.rs`, links and QR payloads in `decide_link.rs`.

use rust_decimal::Decimal;

use crate::commerce::payment::{
    Payment, PaymentMoveKind, PaymentProvider, PaymentReservation, PaymentStatus,
};
use crate::ledger::transaction::{Direction, TransactionText, TransactionType};
use crate::ledger::transfer::TransferState;
use crate::ledger::wallet::{Wallet, WalletType};
use crate::shard::command::{InitiatePayment, PaymentProviderResult, RefundPayment};
use crate::shard::event::Event;
use crate::shard::ledger::checks::{bounded_text, check_not_frozen, check_spendable};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{PaymentId, TransactionId, Uuid, UuidKind, WalletId};
use crate::values::money::validate_amount;

/// Where the money of a payment's completion comes from.
#[derive(Clone, Copy)]
pub(crate) enum Funding {
    /// The payer's wallet on this shard (same-shard confirm).
    Payer(WalletId),
    /// The float account (a sandbox provider's success).
    Float,
    /// This shard's in-transit account (the credit step of a cross-shard confirm).
    InTransit,
}

pub(crate) fn payment_text(payment: &Payment, description: Option<Box<str>>) -> TransactionText {
    TransactionText {
        description,
        idempotency_key: payment.idempotency_key.clone(),
        ..TransactionText::default()
    }
}

impl Shard {
    /// The id for sequence number `seq` of a commerce record kind.
    pub(crate) fn record_id(&self, seq: u64) -> Result<u64, Rejection> {
        self.ids
            .id_of(seq)
            .ok_or(Rejection::LimitExceeded("id sequence exhausted"))
    }

    /// The payment with this uuid, from memory or the store.
    pub(crate) fn find_payment(
        &self,
        uuid: Uuid,
    ) -> Result<std::borrow::Cow<'_, Payment>, Rejection> {
        self.payment(uuid)?.ok_or(Rejection::NotFound("payment"))
    }

    pub(crate) fn decide_initiate_payment(
        &self,
        draft: &mut Draft<'_>,
        request: &InitiatePayment,
    ) -> Result<(), Rejection> {
        let description = bounded_text(request.description.as_deref())?;
        let metadata = bounded_text(request.metadata.as_deref())?;
        let idempotency_key = bounded_text(request.idempotency_key.as_deref())?;
        request.fee.validate(request.currency)?;
        if request.payer_wallet_id == request.merchant_wallet_id {
            return Err(Rejection::InvalidRequest(
                "payer and merchant are the same wallet",
            ));
        }
        let merchant = self.client_wallet(request.merchant_wallet_id)?;
        if merchant.business_id() != request.merchant_id {
            return Err(Rejection::NotFound("merchant wallet"));
        }
        let payer = if self.owns(request.payer_wallet_id) {
            Some(self.client_wallet(request.payer_wallet_id)?)
        } else {
            None
        };
        let link = match request.payment_link_uuid {
            Some(uuid) => Some(
                self.payment_link(uuid)?
                    .filter(|link| link.merchant_wallet_id == merchant.id())
                    .ok_or(Rejection::NotFound("payment link"))?,
            ),
            None => None,
        };
        let link = link.as_deref();
        let currency = request.currency;
        if merchant.currency() != currency
            || payer.is_some_and(|payer| payer.currency() != currency)
            || link.is_some_and(|link| link.currency != currency)
        {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, currency)?;
        if link.is_some_and(|link| link.amount != amount) {
            return Err(Rejection::InvalidAmount(
                "amount differs from the payment link's amount",
            ));
        }
        check_not_frozen(merchant)?;
        if let Some(link) = link {
            if link.used_by_payment_uuid.is_some() {
                return Err(Rejection::InvalidState("payment link already used"));
            }
            if draft.now_ms() >= link.expires_at_ms {
                return Err(Rejection::PaymentLinkExpired);
            }
        }
        let split = request.fee.split(amount, currency)?;
        let id = PaymentId(self.record_id(self.commerce.next_payment_seq)?);
        let now_ms = draft.now_ms();
        let payment = Payment {
            id,
            uuid: draft.timed_uuid(UuidKind::Payment, id.0),
            merchant_id: merchant.business_id(),
            merchant_wallet_id: merchant.id(),
            payer_wallet_id: request.payer_wallet_id,
            amount,
            currency,
            fee_amount: split.fee_amount,
            net_amount: split.net_amount,
            status: PaymentStatus::Pending,
            provider: request.provider,
            provider_ref: draft
                .uuid(UuidKind::ProviderRef, id.0)
                .to_string()
                .into_boxed_str(),
            refunded_amount: crate::values::money::zero(currency),
            description,
            metadata,
            idempotency_key,
            payment_link_uuid: request.payment_link_uuid,
            merchant_transaction_id: None,
            created_at_ms: now_ms,
            updated_at_ms: now_ms,
            completed_at_ms: None,
            closed_at_ms: None,
        };
        draft.push(Event::PaymentInitiated(Box::new(payment)));
        Ok(())
    }

    /// A pending payment whose link (if any) is still unused.
    pub(crate) fn check_completable(&self, payment: &Payment) -> Result<(), Rejection> {
        if payment.status != PaymentStatus::Pending {
            return Err(Rejection::InvalidState("payment is not pending"));
        }
        if let Some(link_uuid) = payment.payment_link_uuid {
            let link = self
                .payment_link(link_uuid)?
                .ok_or(Rejection::NotFound("payment link"))?;
            if link.used_by_payment_uuid.is_some() {
                return Err(Rejection::InvalidState("payment link already used"));
            }
        }
        Ok(())
    }

    pub(crate) fn decide_confirm_payment(
        &self,
        draft: &mut Draft<'_>,
        payment_uuid: Uuid,
    ) -> Result<(), Rejection> {
        let payment = self.find_payment(payment_uuid)?;
        let merchant = self.client_wallet(payment.merchant_wallet_id)?;
        let payer = self.client_wallet(payment.payer_wallet_id)?;
        if payer.currency() != payment.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        check_not_frozen(payer)?;
        check_not_frozen(merchant)?;
        if payment.provider != PaymentProvider::Wallet {
            return Err(Rejection::InvalidState(
                "a sandbox payment completes on its provider's result",
            ));
        }
        self.check_completable(&payment)?;
        check_spendable(payer, payment.amount)?;
        self.post_completion(draft, &payment, merchant, Funding::Payer(payer.id()))?;
        Ok(())
    }

    /// The completion posting (payer or funding −amount, merchant +net, fees +fee) and the
    /// `PaymentCompleted` (and link used) events. Returns the merchant's credit transaction id.
    pub(crate) fn post_completion(
        &self,
        draft: &mut Draft<'_>,
        payment: &Payment,
        merchant: &Wallet,
        funding: Funding,
    ) -> Result<TransactionId, Rejection> {
        let kind = TransactionType::Payment;
        let currency = payment.currency;
        let text = payment_text(payment, payment.description.clone());
        let mut credit = TxSpec::new(
            merchant.id(),
            kind,
            Direction::Credit,
            payment.amount,
            text.clone(),
        );
        credit.fee_amount = Some(payment.fee_amount);
        credit.counterparty_wallet_id = Some(payment.payer_wallet_id);
        credit.transfer_uuid = Some(payment.uuid);
        let mut txs = vec![credit];
        let mut legs = Vec::with_capacity(3);
        match funding {
            Funding::Payer(payer) => {
                let mut debit = TxSpec::new(payer, kind, Direction::Debit, payment.amount, text);
                debit.counterparty_wallet_id = Some(merchant.id());
                debit.transfer_uuid = Some(payment.uuid);
                txs.push(debit);
                legs.push(LegSpec::new(
                    payer,
                    Direction::Debit,
                    payment.amount,
                    kind,
                    1,
                ));
            }
            Funding::Float | Funding::InTransit => {
                let account = if matches!(funding, Funding::Float) {
                    WalletType::Float
                } else {
                    WalletType::InTransit
                };
                let source = draft.system_account(currency, account)?;
                legs.push(LegSpec::new(
                    source,
                    Direction::Debit,
                    payment.amount,
                    kind,
                    0,
                ));
            }
        }
        if payment.net_amount > Decimal::ZERO {
            legs.push(LegSpec::new(
                merchant.id(),
                Direction::Credit,
                payment.net_amount,
                kind,
                0,
            ));
        }
        if payment.fee_amount > Decimal::ZERO {
            let fees = draft.system_account(currency, WalletType::Fees)?;
            legs.push(LegSpec::new(
                fees,
                Direction::Credit,
                payment.fee_amount,
                kind,
                0,
            ));
        }
        let posted = draft.post(currency, &txs, &legs)?;
        let merchant_transaction_id = *posted
            .transactions
            .first()
            .ok_or(Rejection::InvalidState("internal: no transaction"))?;
        let now_ms = draft.now_ms();
        draft.push(Event::PaymentCompleted {
            payment_uuid: payment.uuid,
            merchant_transaction_id,
            at_ms: now_ms,
        });
        if let Some(link_uuid) = payment.payment_link_uuid {
            draft.push(Event::PaymentLinkUsed {
                link_uuid,
                payment_uuid: payment.uuid,
                at_ms: now_ms,
            });
        }
        Ok(merchant_transaction_id)
    }

    /// Cancel (`Cancelled`) or fail (`Failed`) a pending payment.
    pub(crate) fn decide_close_payment(
        &self,
        draft: &mut Draft<'_>,
        payment_uuid: Uuid,
        status: PaymentStatus,
    ) -> Result<(), Rejection> {
        let payment = self.find_payment(payment_uuid)?;
        if payment.status != PaymentStatus::Pending {
            return Err(Rejection::InvalidState("payment is not pending"));
        }
        draft.push(Event::PaymentClosed {
            payment_uuid,
            status,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_payment_provider_result(
        &self,
        draft: &mut Draft<'_>,
        result: &PaymentProviderResult,
    ) -> Result<(), Rejection> {
        let provider_ref = bounded_text(result.provider_ref.as_deref())?;
        let payment = self.find_payment(result.payment_uuid)?;
        if provider_ref.is_some_and(|given| given != payment.provider_ref) {
            return Err(Rejection::InvalidRequest(
                "provider_ref does not match the payment",
            ));
        }
        if !result.succeeded {
            return self.decide_close_payment(draft, payment.uuid, PaymentStatus::Failed);
        }
        let merchant = self.client_wallet(payment.merchant_wallet_id)?;
        check_not_frozen(merchant)?;
        if payment.provider != PaymentProvider::Sandbox {
            return Err(Rejection::InvalidState(
                "a wallet payment completes on confirm",
            ));
        }
        self.check_completable(&payment)?;
        self.post_completion(draft, &payment, merchant, Funding::Float)?;
        Ok(())
    }

    pub(crate) fn decide_refund_payment(
        &self,
        draft: &mut Draft<'_>,
        request: &RefundPayment,
    ) -> Result<(), Rejection> {
        let reason = bounded_text(request.reason.as_deref())?;
        let payment = self.find_payment(request.payment_uuid)?;
        let merchant = self.client_wallet(payment.merchant_wallet_id)?;
        let wallet_payer = payment.provider == PaymentProvider::Wallet;
        let local_payer = if wallet_payer && self.owns(payment.payer_wallet_id) {
            Some(self.client_wallet(payment.payer_wallet_id)?)
        } else {
            None
        };
        let currency = payment.currency;
        let requested = match request.amount {
            Some(amount) => Some(validate_amount(amount, currency)?),
            None => None,
        };
        check_not_frozen(merchant)?;
        if let Some(payer) = local_payer {
            check_not_frozen(payer)?;
        }
        if !matches!(
            payment.status,
            PaymentStatus::Completed | PaymentStatus::PartiallyRefunded
        ) {
            return Err(Rejection::InvalidState(
                "only a completed payment can be refunded",
            ));
        }
        // Default: what is left (positive: completed or partially refunded).
        let amount = match requested {
            Some(amount) => amount,
            None => payment
                .amount
                .checked_sub(payment.refunded_amount)
                .ok_or(Rejection::LimitExceeded("refund total"))?,
        };
        let refunded = payment
            .refunded_amount
            .checked_add(amount)
            .ok_or(Rejection::LimitExceeded("refund total"))?;
        if refunded > payment.amount {
            return Err(Rejection::RefundExceedsOriginal);
        }
        check_spendable(merchant, amount)?;

        let kind = TransactionType::PaymentRefund;
        let text = payment_text(&payment, reason.or_else(|| payment.description.clone()));
        let mut debit = TxSpec::new(merchant.id(), kind, Direction::Debit, amount, text.clone());
        debit.counterparty_wallet_id = Some(payment.payer_wallet_id);
        debit.transfer_uuid = Some(payment.uuid);
        let debit_leg = LegSpec::new(merchant.id(), Direction::Debit, amount, kind, 0);
        if let Some(payer) = local_payer {
            let mut credit = TxSpec::new(payer.id(), kind, Direction::Credit, amount, text);
            credit.counterparty_wallet_id = Some(merchant.id());
            credit.transfer_uuid = Some(payment.uuid);
            let legs = [
                debit_leg,
                LegSpec::new(payer.id(), Direction::Credit, amount, kind, 1),
            ];
            draft.post(currency, &[debit, credit], &legs)?;
        } else if wallet_payer {
            // The payer lives on another shard: reserve, the credit follows there.
            let transaction_id = draft.peek_transaction_id()?;
            let in_transit = draft.system_account(currency, WalletType::InTransit)?;
            let legs = [
                debit_leg,
                LegSpec::new(in_transit, Direction::Credit, amount, kind, 0),
            ];
            draft.post(currency, &[debit], &legs)?;
            draft.push(Event::PaymentReserved(Box::new(PaymentReservation {
                uuid: draft.timed_uuid(UuidKind::PaymentReservation, transaction_id.0),
                payment_uuid: payment.uuid,
                kind: PaymentMoveKind::Refund,
                source_wallet_id: merchant.id(),
                target_wallet_id: payment.payer_wallet_id,
                amount,
                currency,
                transaction_id,
                state: TransferState::Reserved,
                reserved_at_ms: draft.now_ms(),
                settled_at_ms: None,
            })));
        } else {
            // Sandbox: the money goes back out through the provider (the float).
            let float = draft.system_account(currency, WalletType::Float)?;
            let legs = [
                debit_leg,
                LegSpec::new(float, Direction::Credit, amount, kind, 0),
            ];
            draft.post(currency, &[debit], &legs)?;
        }
        draft.push(Event::PaymentRefundTotalChanged {
            payment_uuid: payment.uuid,
            refunded_amount: refunded,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }
}
