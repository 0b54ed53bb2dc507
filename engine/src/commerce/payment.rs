//! Payments, payment links, QR payloads, and the cross-shard payment protocol.
//!
//! # Payments
//!
//! A [`Payment`] lives on the shard of its *merchant's* wallet. Its life:
//!
//! ```text
//! pending ──confirm / credit / provider success──> completed ──refund──> partially_refunded ──> refunded
//!    ├──cancel──> cancelled
//!    └──fail────> failed          (no money moved)
//! ```
//!
//! The fee is computed once, at initiation, from the caller's [`crate::values::fee::FeeRule`]
//! (`fee_amount + net_amount = amount`). Completion posts one balanced posting: payer −amount,
//! merchant +net, the currency's `fees` system account +fee (a zero leg is left out). The provider
//! `wallet` is paid from the payer's wallet; the `sandbox` provider is paid from outside (the float
//! account) when its webhook reports success, and refunded back to the float account; a provider
//! failure (or `FailPayment`) fails any pending payment, moving nothing. A refund
//! debits the merchant by the refunded amount (fees are not returned) and credits the payer; the
//! cumulative refunds never exceed the amount. Both sides' transactions carry the payment's uuid in
//! `transfer_uuid` (shown as `reference_uuid`), and no client reversal or wallet refund applies to
//! them: the payment's own life cycle undoes them.
//!
//! A payment link is single-use: it becomes `used` when a payment that names it completes; before
//! that it is `active` until `expires_at` (then `expired`, computed against the reader's clock).
//!
//! # Cross-shard payments (payer and merchant wallets on different shards)
//!
//! The transfer protocol of [`crate::transfer`], with the fee split on the credit side. Each step is
//! one command on one shard, so one WAL record:
//!
//! **Confirm** (`Charge`), payer shard P, merchant shard M (the payment lives on M):
//! 1. P: [`crate::Command::PaymentReserve`]: debit the payer into P's in-transit account (payer's
//!    `payment` debit transaction) and record a [`PaymentReservation`] `reserved`. Idempotent by
//!    payment uuid: while a reservation of this payment is not released, a repeat returns it.
//! 2. M: [`crate::Command::PaymentCredit`] (built by [`crate::shard::command::PaymentCredit::for_reservation`]):
//!    check the payment is still pending and matches (payer, merchant, amount, currency), debit M's
//!    in-transit by the amount, credit the merchant the net and the fees account the fee, mark the
//!    payment `completed`, record an [`IncomingPaymentCredit`]. Idempotent by reservation uuid (a
//!    repeat is a no-op answered `duplicate`). Refused when the payment is no longer pending, the
//!    merchant wallet is frozen, ... A refusal is itself recorded on M
//!    ([`RefusedPaymentCredit`]), so the first decision on a reservation is final: two confirms of
//!    one payment orchestrate the same reservation, and without the record the second could credit
//!    (the merchant unfrozen meanwhile) what the first releases, creating money (issue 16).
//! 3. P: [`crate::Command::PaymentReserveFinalize`] once the credit is durable, or
//!    [`crate::Command::PaymentReserveRelease`] when it was refused (the reserve posting is mirrored,
//!    the payer gets the amount back).
//!
//! **Refund** (`Refund`), the mirror image: on M, [`crate::Command::RefundPayment`] debits the
//! merchant into M's in-transit account, raises the payment's refunded total (so concurrent refunds
//! cannot exceed the amount) and records a reservation; the credit on P credits the payer; finalize
//! or release on M (release mirrors the debit and lowers the refunded total again).
//!
//! **Recovery**: [`crate::Shard::pending_payment_reservations`] lists, on every shard, the
//! reservations still `reserved`; for each, send `PaymentCredit::for_reservation` to the shard of its
//! `target_wallet_id` (safe: idempotent), then finalize on this shard if the credit was accepted
//! (or was a duplicate), release if it was refused. Never credit a released reservation.
//!
//! Money: every step balances inside its shard. In-transit accounts hold transfers and payment
//! reservations alike; invariant 5 counts both, and across shards they net to zero once nothing is
//! `reserved`.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::ledger::transfer::TransferState;
use crate::values::currency::Currency;
use crate::values::ids::{PaymentId, PaymentLinkId, QrId, TransactionId, Uuid, WalletId};

/// Longest payment link, in minutes (30 days).
pub const LINK_MINUTES_MAX: u32 = 43_200;
/// Payment link lifetime when the request gives none (one day).
pub const LINK_MINUTES_DEFAULT: u32 = 60 * 24;

/// Life-cycle state of a payment.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentStatus {
    Pending,
    Completed,
    Cancelled,
    Failed,
    Refunded,
    PartiallyRefunded,
}

impl PaymentStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Completed => "completed",
            Self::Cancelled => "cancelled",
            Self::Failed => "failed",
            Self::Refunded => "refunded",
            Self::PartiallyRefunded => "partially_refunded",
        }
    }

    /// Whether the money moved (completed, then maybe refunded in part or whole).
    #[must_use]
    pub fn is_completed(&self) -> bool {
        matches!(
            self,
            Self::Completed | Self::Refunded | Self::PartiallyRefunded
        )
    }

    /// The status of a completed payment of `amount` with `refunded` refunded so far.
    #[must_use]
    pub fn after_refunds(amount: Decimal, refunded: Decimal) -> Self {
        if refunded.is_zero() {
            Self::Completed
        } else if refunded >= amount {
            Self::Refunded
        } else {
            Self::PartiallyRefunded
        }
    }
}

/// Who moves a payment's money.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentProvider {
    /// The payer's wallet, on confirm.
    Wallet,
    /// An outside provider: completes (or fails) on its webhook; money enters through the float.
    Sandbox,
}

impl PaymentProvider {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Wallet => "wallet",
            Self::Sandbox => "sandbox",
        }
    }

    /// Parses the client-facing names.
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        match text {
            "wallet" => Some(Self::Wallet),
            "sandbox" => Some(Self::Sandbox),
            _ => None,
        }
    }
}

/// A payment (contract §2.8), kept on its merchant wallet's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payment {
    pub id: PaymentId,
    pub uuid: Uuid,
    /// The merchant (business) id.
    pub merchant_id: u64,
    pub merchant_wallet_id: WalletId,
    /// May live on another shard.
    pub payer_wallet_id: WalletId,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    #[serde(with = "crate::values::money::decimal")]
    pub fee_amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub net_amount: Decimal,
    pub status: PaymentStatus,
    pub provider: PaymentProvider,
    /// A derived uuid, hyphenated.
    pub provider_ref: Box<str>,
    /// Refunds recorded so far (reserved cross-shard refunds included).
    #[serde(with = "crate::values::money::decimal")]
    pub refunded_amount: Decimal,
    pub description: Option<Box<str>>,
    /// Client metadata, opaque (JSON text from the API).
    pub metadata: Option<Box<str>>,
    pub idempotency_key: Option<Box<str>>,
    pub payment_link_uuid: Option<Uuid>,
    /// The merchant wallet's credit-side `payment` transaction, once completed.
    pub merchant_transaction_id: Option<TransactionId>,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    /// When it was cancelled or failed.
    pub closed_at_ms: Option<i64>,
}

impl Payment {
    /// Whether the payment may leave memory once filed: every state but `pending`. A completed
    /// payment still changes on a refund (and on a refund's release), which recalls it from the
    /// store; a cancelled or failed one never changes again.
    #[must_use]
    pub fn may_leave_memory(&self) -> bool {
        self.status != PaymentStatus::Pending
    }

    /// Completes a pending payment with its merchant credit (`PaymentCompleted`).
    pub(crate) fn complete(
        &mut self,
        merchant_transaction_id: TransactionId,
        at_ms: i64,
    ) -> Result<(), &'static str> {
        if self.status != PaymentStatus::Pending {
            return Err("only a pending payment completes");
        }
        self.status = PaymentStatus::Completed;
        self.merchant_transaction_id = Some(merchant_transaction_id);
        self.completed_at_ms = Some(at_ms);
        self.updated_at_ms = at_ms;
        Ok(())
    }

    /// Cancels or fails a pending payment (`PaymentClosed`).
    pub(crate) fn close(&mut self, status: PaymentStatus, at_ms: i64) -> Result<(), &'static str> {
        if self.status != PaymentStatus::Pending {
            return Err("only a pending payment closes");
        }
        self.status = status;
        self.closed_at_ms = Some(at_ms);
        self.updated_at_ms = at_ms;
        Ok(())
    }

    /// Sets the refunded total of a completed payment (`PaymentRefundTotalChanged`).
    pub(crate) fn set_refunded(
        &mut self,
        refunded_amount: Decimal,
        at_ms: i64,
    ) -> Result<(), &'static str> {
        if !self.status.is_completed() || refunded_amount > self.amount {
            return Err("refunds of a payment that is not completed, or above its amount");
        }
        self.refunded_amount = refunded_amount;
        self.status = PaymentStatus::after_refunds(self.amount, refunded_amount);
        self.updated_at_ms = at_ms;
        Ok(())
    }
}

/// A payment link, kept on its merchant wallet's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentLink {
    pub id: PaymentLinkId,
    pub uuid: Uuid,
    pub merchant_wallet_id: WalletId,
    pub merchant_id: u64,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    pub description: Option<Box<str>>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    /// The completed payment that used it.
    pub used_by_payment_uuid: Option<Uuid>,
    pub used_at_ms: Option<i64>,
}

/// A payment link's state as seen at some instant.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentLinkStatus {
    Active,
    Used,
    Expired,
}

impl PaymentLinkStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Used => "used",
            Self::Expired => "expired",
        }
    }
}

impl PaymentLink {
    /// Marks the link used by completed payment `payment_uuid` (`PaymentLinkUsed`); a link is
    /// used once.
    pub(crate) fn mark_used(&mut self, payment_uuid: Uuid, at_ms: i64) -> Result<(), &'static str> {
        if self.used_by_payment_uuid.is_some() {
            return Err("payment link already used");
        }
        self.used_by_payment_uuid = Some(payment_uuid);
        self.used_at_ms = Some(at_ms);
        Ok(())
    }

    /// `used` once used, else `expired` from `expires_at_ms` on (inclusive), else `active`.
    #[must_use]
    pub fn status_at(&self, now_ms: i64) -> PaymentLinkStatus {
        if self.used_by_payment_uuid.is_some() {
            PaymentLinkStatus::Used
        } else if now_ms >= self.expires_at_ms {
            PaymentLinkStatus::Expired
        } else {
            PaymentLinkStatus::Active
        }
    }
}

/// A QR payment payload (EMVCo merchant-presented, see [`crate::emvco`]).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct QrCode {
    pub id: QrId,
    pub uuid: Uuid,
    pub merchant_wallet_id: WalletId,
    pub merchant_id: u64,
    #[serde(with = "crate::values::money::decimal_opt")]
    pub amount: Option<Decimal>,
    pub currency: Currency,
    /// 0 = no branch.
    pub branch_id: u64,
    pub payload: Box<str>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
}

/// Which way a cross-shard payment reservation moves money.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PaymentMoveKind {
    /// Payer → merchant (confirm); the credit side splits off the fee.
    Charge,
    /// Merchant → payer (refund).
    Refund,
}

impl PaymentMoveKind {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Charge => "charge",
            Self::Refund => "refund",
        }
    }
}

/// A cross-shard payment step as its source shard records it (payer's for a charge, merchant's
/// for a refund).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PaymentReservation {
    pub uuid: Uuid,
    pub payment_uuid: Uuid,
    pub kind: PaymentMoveKind,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    /// The source wallet's debit-side transaction.
    pub transaction_id: TransactionId,
    pub state: TransferState,
    pub reserved_at_ms: i64,
    /// When it was finalized or released.
    pub settled_at_ms: Option<i64>,
}

/// A cross-shard payment credit its target shard refused: every later credit of the reservation
/// is refused too, so the reservation's release is the only way its money can go.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct RefusedPaymentCredit {
    /// The reservation's uuid.
    pub uuid: Uuid,
    pub payment_uuid: Uuid,
    pub target_wallet_id: WalletId,
    pub refused_at_ms: i64,
}

/// A cross-shard payment step as its target shard records it (the credit's idempotency record).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingPaymentCredit {
    pub uuid: Uuid,
    pub payment_uuid: Uuid,
    pub kind: PaymentMoveKind,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    /// The target wallet's credit-side transaction.
    pub transaction_id: TransactionId,
    pub credited_at_ms: i64,
}
