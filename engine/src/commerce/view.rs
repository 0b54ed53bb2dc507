//! Owned read models of the commerce records (the API renders them: `PaymentResult` from
//! [`PaymentView`], contract §2.6 from [`SettlementView`], §2.7 from [`PayoutView`], the payment
//! link and QR shapes of decisions §4). Transaction ids are resolved to uuids through the record's
//! wallet, so a view is self-contained.

use rust_decimal::Decimal;

use crate::commerce::payment::{
    Payment, PaymentLink, PaymentLinkStatus, PaymentProvider, PaymentStatus, QrCode,
};
use crate::commerce::payout::{
    PayoutAttemptStatus, PayoutStatus, PeriodType, Settlement, SettlementItem, SettlementStatus,
    Stamp,
};
use crate::values::currency::Currency;
use crate::values::ids::{
    HoldId, PaymentId, PaymentLinkId, PayoutId, QrId, SettlementId, TransactionId, Uuid, WalletId,
};

fn owned(text: Option<&str>) -> Option<String> {
    text.map(str::to_owned)
}

/// Resolves the uuids of ledger records a commerce record refers to by id, wherever they are
/// (the shard's memory or the history store).
pub trait RecordUuids {
    fn transaction_uuid(&self, wallet_id: WalletId, id: TransactionId) -> Option<Uuid>;
    fn hold_uuid(&self, wallet_id: WalletId, id: HoldId) -> Option<Uuid>;
}

fn uuid_of(
    records: &dyn RecordUuids,
    wallet_id: WalletId,
    id: Option<TransactionId>,
) -> Option<Uuid> {
    records.transaction_uuid(wallet_id, id?)
}

/// A payment (the fields of contract §2.8 `PaymentResult` that are the payment's, and more).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentView {
    pub id: PaymentId,
    /// `PaymentResult.transaction_id` and the `paymentUuid` of the API paths.
    pub uuid: Uuid,
    pub merchant_id: u64,
    pub merchant_wallet_id: WalletId,
    pub payer_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub fee_amount: Decimal,
    pub net_amount: Decimal,
    pub status: PaymentStatus,
    pub provider: PaymentProvider,
    pub provider_ref: String,
    pub refunded_amount: Decimal,
    pub description: Option<String>,
    pub metadata: Option<String>,
    pub idempotency_key: Option<String>,
    pub payment_link_uuid: Option<Uuid>,
    /// The merchant wallet's `payment` credit, once completed.
    pub merchant_transaction_uuid: Option<Uuid>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    /// When it was cancelled or failed.
    pub closed_at_ms: Option<i64>,
}

impl PaymentView {
    /// `records` resolves the credit's uuid.
    #[must_use]
    pub fn of(records: &dyn RecordUuids, payment: &Payment) -> Self {
        Self {
            id: payment.id,
            uuid: payment.uuid,
            merchant_id: payment.merchant_id,
            merchant_wallet_id: payment.merchant_wallet_id,
            payer_wallet_id: payment.payer_wallet_id,
            amount: payment.amount,
            currency: payment.currency,
            fee_amount: payment.fee_amount,
            net_amount: payment.net_amount,
            status: payment.status,
            provider: payment.provider,
            provider_ref: payment.provider_ref.to_string(),
            refunded_amount: payment.refunded_amount,
            description: owned(payment.description.as_deref()),
            metadata: owned(payment.metadata.as_deref()),
            idempotency_key: owned(payment.idempotency_key.as_deref()),
            payment_link_uuid: payment.payment_link_uuid,
            merchant_transaction_uuid: uuid_of(
                records,
                payment.merchant_wallet_id,
                payment.merchant_transaction_id,
            ),
            created_at_ms: payment.created_at_ms,
            updated_at_ms: payment.updated_at_ms,
            completed_at_ms: payment.completed_at_ms,
            closed_at_ms: payment.closed_at_ms,
        }
    }
}

/// A payment link (the API adds `url`); `status` as of the instant it was read.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentLinkView {
    pub id: PaymentLinkId,
    pub uuid: Uuid,
    pub merchant_wallet_id: WalletId,
    pub merchant_id: u64,
    pub amount: Decimal,
    pub currency: Currency,
    pub description: Option<String>,
    pub status: PaymentLinkStatus,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub used_by_payment_uuid: Option<Uuid>,
    pub used_at_ms: Option<i64>,
}

impl PaymentLinkView {
    #[must_use]
    pub fn of(link: &PaymentLink, now_ms: i64) -> Self {
        Self {
            id: link.id,
            uuid: link.uuid,
            merchant_wallet_id: link.merchant_wallet_id,
            merchant_id: link.merchant_id,
            amount: link.amount,
            currency: link.currency,
            description: owned(link.description.as_deref()),
            status: link.status_at(now_ms),
            created_at_ms: link.created_at_ms,
            expires_at_ms: link.expires_at_ms,
            used_by_payment_uuid: link.used_by_payment_uuid,
            used_at_ms: link.used_at_ms,
        }
    }
}

/// A QR payment payload (the API renders `svg` from `payload`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct QrView {
    pub id: QrId,
    pub uuid: Uuid,
    pub merchant_wallet_id: WalletId,
    pub merchant_id: u64,
    pub amount: Option<Decimal>,
    pub currency: Currency,
    pub branch_id: u64,
    pub payload: String,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

impl QrView {
    #[must_use]
    pub fn of(qr: &QrCode) -> Self {
        Self {
            id: qr.id,
            uuid: qr.uuid,
            merchant_wallet_id: qr.merchant_wallet_id,
            merchant_id: qr.merchant_id,
            amount: qr.amount,
            currency: qr.currency,
            branch_id: qr.branch_id,
            payload: qr.payload.to_string(),
            created_at_ms: qr.created_at_ms,
            expires_at_ms: qr.expires_at_ms,
        }
    }
}

/// One entry of `Payout.attempts`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutAttemptView {
    pub number: u32,
    pub status: PayoutAttemptStatus,
    pub submitted_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    pub provider_ref: Option<String>,
}

/// A payout (contract §2.7 plus its life-cycle stamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutView {
    pub id: PayoutId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub business_id: u64,
    pub amount: Decimal,
    pub currency: Currency,
    pub status: PayoutStatus,
    pub payout_method: String,
    /// Opaque JSON text.
    pub payout_destination: Option<String>,
    pub description: Option<String>,
    pub idempotency_key: Option<String>,
    pub attempts: Vec<PayoutAttemptView>,
    /// The hold reserving the funds (active while pending or approved).
    pub hold_uuid: Option<Uuid>,
    pub created_by: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub approved: Option<Stamp>,
    pub approval_notes: Option<String>,
    pub rejected: Option<Stamp>,
    pub rejection_reason: Option<String>,
    pub cancelled: Option<Stamp>,
    pub executed: Option<Stamp>,
    /// The wallet's `payout` debit (execute).
    pub transaction_uuid: Option<Uuid>,
    pub paid_at_ms: Option<i64>,
    pub failed_at_ms: Option<i64>,
    /// The wallet's `payout_return` credit (provider failure).
    pub return_transaction_uuid: Option<Uuid>,
}

impl PayoutView {
    #[must_use]
    pub fn of(records: &dyn RecordUuids, payout: &crate::commerce::payout::Payout) -> Self {
        Self {
            id: payout.id,
            uuid: payout.uuid,
            wallet_id: payout.wallet_id,
            business_id: payout.business_id,
            amount: payout.amount,
            currency: payout.currency,
            status: payout.status,
            payout_method: payout.payout_method.to_string(),
            payout_destination: owned(payout.payout_destination.as_deref()),
            description: owned(payout.description.as_deref()),
            idempotency_key: owned(payout.idempotency_key.as_deref()),
            attempts: payout
                .attempts
                .iter()
                .map(|attempt| PayoutAttemptView {
                    number: attempt.number,
                    status: attempt.status,
                    submitted_at_ms: attempt.submitted_at_ms,
                    completed_at_ms: attempt.completed_at_ms,
                    provider_ref: owned(attempt.provider_ref.as_deref()),
                })
                .collect(),
            hold_uuid: records.hold_uuid(payout.wallet_id, payout.hold_id),
            created_by: payout.created.by,
            created_at_ms: payout.created.at_ms,
            updated_at_ms: payout.updated_at_ms,
            approved: payout.approved,
            approval_notes: owned(payout.approval_notes.as_deref()),
            rejected: payout.rejected,
            rejection_reason: owned(payout.rejection_reason.as_deref()),
            cancelled: payout.cancelled,
            executed: payout.executed,
            transaction_uuid: uuid_of(records, payout.wallet_id, payout.transaction_id),
            paid_at_ms: payout.paid_at_ms,
            failed_at_ms: payout.failed_at_ms,
            return_transaction_uuid: uuid_of(
                records,
                payout.wallet_id,
                payout.return_transaction_id,
            ),
        }
    }
}

/// A settlement (contract §2.6 plus totals and life-cycle stamps).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct SettlementView {
    pub id: SettlementId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub business_id: u64,
    pub currency: Currency,
    pub period_type: PeriodType,
    pub period_start_ms: i64,
    pub period_end_ms: i64,
    pub status: SettlementStatus,
    pub notes: Option<String>,
    pub idempotency_key: Option<String>,
    /// `{transaction_uuid, amount, fee_amount, net_amount}` each (decisions §6).
    pub items: Vec<SettlementItem>,
    /// Net total: what execute moves.
    pub total_amount: Decimal,
    pub total_fee_amount: Decimal,
    pub created_by: u64,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub approved: Option<Stamp>,
    pub approval_notes: Option<String>,
    pub rejected: Option<Stamp>,
    pub rejection_reason: Option<String>,
    pub cancelled: Option<Stamp>,
    pub executed: Option<Stamp>,
    /// The wallet's `settlement` debit (execute).
    pub transaction_uuid: Option<Uuid>,
}

impl SettlementView {
    #[must_use]
    pub fn of(records: &dyn RecordUuids, settlement: &Settlement) -> Self {
        Self {
            id: settlement.id,
            uuid: settlement.uuid,
            wallet_id: settlement.wallet_id,
            business_id: settlement.business_id,
            currency: settlement.currency,
            period_type: settlement.period_type,
            period_start_ms: settlement.period_start_ms,
            period_end_ms: settlement.period_end_ms,
            status: settlement.status,
            notes: owned(settlement.notes.as_deref()),
            idempotency_key: owned(settlement.idempotency_key.as_deref()),
            items: settlement.items.clone(),
            total_amount: settlement.total_amount,
            total_fee_amount: settlement.total_fee_amount,
            created_by: settlement.created.by,
            created_at_ms: settlement.created.at_ms,
            updated_at_ms: settlement.updated_at_ms,
            approved: settlement.approved,
            approval_notes: owned(settlement.approval_notes.as_deref()),
            rejected: settlement.rejected,
            rejection_reason: owned(settlement.rejection_reason.as_deref()),
            cancelled: settlement.cancelled,
            executed: settlement.executed,
            transaction_uuid: uuid_of(records, settlement.wallet_id, settlement.transaction_id),
        }
    }
}
