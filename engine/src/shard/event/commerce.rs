//! Self-contained rules of the commerce events ([`Event::validate`] for version 2 events): what
//! `decide` guarantees before encoding, checked again after decoding.

use rust_decimal::Decimal;

use crate::commerce::payment::PaymentStatus;
use crate::commerce::payout::{
    PayoutChange, PayoutStatus, SettlementChange, SettlementStatus, DAY_MS, SETTLEMENT_ITEMS_MAX,
};
use crate::ledger::transfer::TransferState;
use crate::shard::event::types::{positive, text_ok, Event};

/// Longest QR payload accepted in an event (EMVCo payloads are at most 512 characters).
const QR_PAYLOAD_CHARS_MAX: usize = 512;

fn split_ok(amount: Decimal, fee: Decimal, net: Decimal) -> bool {
    positive(amount)
        && fee >= Decimal::ZERO
        && net >= Decimal::ZERO
        && fee.checked_add(net) == Some(amount)
}

fn ensure(ok: bool, what: &'static str) -> Result<(), &'static str> {
    if ok {
        Ok(())
    } else {
        Err(what)
    }
}

fn reason_ok(reason: &str) -> bool {
    !reason.trim().is_empty() && text_ok(Some(reason))
}

pub(crate) fn validate(event: &Event) -> Result<(), &'static str> {
    match event {
        Event::PaymentInitiated(payment) => validate_payment(payment),
        Event::PaymentClosed { status, .. } => ensure(
            matches!(status, PaymentStatus::Cancelled | PaymentStatus::Failed),
            "a payment closes as cancelled or failed",
        ),
        Event::PaymentRefundTotalChanged {
            refunded_amount, ..
        } => ensure(
            *refunded_amount >= Decimal::ZERO,
            "refunded amount cannot be negative",
        ),
        Event::PaymentLinkCreated(link) => ensure(
            positive(link.amount)
                && link.expires_at_ms > link.created_at_ms
                && link.used_by_payment_uuid.is_none()
                && link.used_at_ms.is_none()
                && text_ok(link.description.as_deref()),
            "a new payment link must be unused, positive and expire later",
        ),
        Event::QrCreated(qr) => ensure(
            qr.amount.is_none_or(positive)
                && qr.expires_at_ms > qr.created_at_ms
                && qr.payload.len() <= QR_PAYLOAD_CHARS_MAX
                && crate::values::emvco::verify(&qr.payload),
            "QR payload malformed or its CRC wrong",
        ),
        Event::PaymentReserved(reservation) => ensure(
            positive(reservation.amount)
                && reservation.source_wallet_id != reservation.target_wallet_id
                && reservation.state == TransferState::Reserved
                && reservation.settled_at_ms.is_none(),
            "a new payment reservation needs a positive amount and two wallets",
        ),
        Event::PaymentCredited(credit) => ensure(
            positive(credit.amount) && credit.source_wallet_id != credit.target_wallet_id,
            "a payment credit needs a positive amount and two wallets",
        ),
        Event::PaymentCreditRefused { .. } => Ok(()),
        Event::PayoutCreated(payout) => validate_payout(payout),
        Event::PayoutChanged { change, .. } => ensure(
            match change {
                PayoutChange::Approved { notes, .. } => text_ok(notes.as_deref()),
                PayoutChange::Rejected { reason, .. } => reason_ok(reason),
                PayoutChange::Paid { provider_ref } | PayoutChange::Failed { provider_ref, .. } => {
                    text_ok(provider_ref.as_deref())
                }
                PayoutChange::Cancelled { .. } | PayoutChange::Executed { .. } => true,
            },
            "payout change text empty or too long",
        ),
        Event::SettlementCreated(settlement) => validate_settlement(settlement),
        Event::SettlementChanged { change, .. } => ensure(
            match change {
                SettlementChange::Approved { notes, .. } => text_ok(notes.as_deref()),
                SettlementChange::Rejected { reason, .. } => reason_ok(reason),
                SettlementChange::Cancelled { .. } | SettlementChange::Executed { .. } => true,
            },
            "settlement change text empty or too long",
        ),
        _ => Ok(()),
    }
}

fn validate_payment(payment: &crate::commerce::payment::Payment) -> Result<(), &'static str> {
    ensure(
        split_ok(payment.amount, payment.fee_amount, payment.net_amount),
        "payment amount must be positive and fee + net must equal it",
    )?;
    ensure(
        payment.status == PaymentStatus::Pending
            && payment.refunded_amount.is_zero()
            && payment.merchant_transaction_id.is_none()
            && payment.completed_at_ms.is_none()
            && payment.closed_at_ms.is_none(),
        "a new payment must be pending with nothing moved",
    )?;
    ensure(
        payment.merchant_wallet_id != payment.payer_wallet_id,
        "payer and merchant are the same wallet",
    )?;
    ensure(
        [
            payment.description.as_deref(),
            payment.metadata.as_deref(),
            payment.idempotency_key.as_deref(),
            Some(&*payment.provider_ref),
        ]
        .into_iter()
        .all(text_ok),
        "payment text too long",
    )
}

fn validate_payout(payout: &crate::commerce::payout::Payout) -> Result<(), &'static str> {
    ensure(
        positive(payout.amount)
            && payout.status == PayoutStatus::Pending
            && payout.attempts.is_empty()
            && payout.approved.is_none()
            && payout.rejected.is_none()
            && payout.cancelled.is_none()
            && payout.executed.is_none()
            && payout.transaction_id.is_none()
            && payout.return_transaction_id.is_none(),
        "a new payout must be pending and untouched",
    )?;
    ensure(
        !payout.payout_method.trim().is_empty()
            && [
                Some(&*payout.payout_method),
                payout.payout_destination.as_deref(),
                payout.description.as_deref(),
                payout.idempotency_key.as_deref(),
            ]
            .into_iter()
            .all(text_ok),
        "payout text empty or too long",
    )
}

fn validate_settlement(
    settlement: &crate::commerce::payout::Settlement,
) -> Result<(), &'static str> {
    if settlement.status != SettlementStatus::Pending
        || settlement.approved.is_some()
        || settlement.rejected.is_some()
        || settlement.cancelled.is_some()
        || settlement.executed.is_some()
        || settlement.transaction_id.is_some()
    {
        return Err("a new settlement must be pending and untouched");
    }
    if settlement.items.is_empty() || settlement.items.len() > SETTLEMENT_ITEMS_MAX {
        return Err("a settlement has 1 to 10000 items");
    }
    if settlement.period_end_ms < settlement.period_start_ms
        || settlement.period_start_ms.rem_euclid(DAY_MS) != 0
        || settlement.period_end_ms.rem_euclid(DAY_MS) != 0
    {
        return Err("settlement period must be whole days, end not before start");
    }
    let mut total = Decimal::ZERO;
    let mut fees = Decimal::ZERO;
    for item in &settlement.items {
        if !split_ok(item.amount, item.fee_amount, item.net_amount) {
            return Err("settlement item amount must be positive and fee + net must equal it");
        }
        total = total
            .checked_add(item.net_amount)
            .ok_or("settlement total overflows")?;
        fees = fees
            .checked_add(item.fee_amount)
            .ok_or("settlement total overflows")?;
    }
    if !positive(total) || total != settlement.total_amount || fees != settlement.total_fee_amount {
        return Err("settlement totals are not the sums of its items");
    }
    if !text_ok(settlement.notes.as_deref()) || !text_ok(settlement.idempotency_key.as_deref()) {
        return Err("settlement text too long");
    }
    Ok(())
}
