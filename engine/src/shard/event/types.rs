//! The events' types: every change of state a shard can log (module docs in `super`).

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::commerce::payment::{
    IncomingPaymentCredit, Payment, PaymentLink, PaymentReservation, PaymentStatus, QrCode,
};
use crate::commerce::payout::{Payout, PayoutChange, Settlement, SettlementChange};
use crate::ledger::hold::{Hold, HoldStatus};
use crate::ledger::transaction::{LedgerEntry, Transaction};
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer};
use crate::ledger::wallet::{OwnerType, WalletStatus, WalletType};
use crate::shard::command::TEXT_BYTES_MAX;
use crate::values::currency::Currency;
use crate::values::ids::{EntryId, HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};
use crate::values::sealed::UuidKey;

/// First byte of every encoded event batch.
pub const EVENT_FORMAT_VERSION: u8 = 5;

/// The oldest version [`decode`] still reads.
pub const EVENT_FORMAT_VERSION_MIN: u8 = 1;

/// A new wallet or system account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct WalletCreated {
    pub wallet_id: WalletId,
    pub uuid: Uuid,
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub wallet_type: WalletType,
    pub currency: Currency,
    pub business_id: u64,
    pub branch_id: u64,
    pub meta: Option<Box<str>>,
    pub at_ms: i64,
}

/// Everything that changes a shard's state.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Event {
    WalletCreated(WalletCreated),
    /// Freeze or unfreeze.
    WalletStatusChanged {
        wallet_id: WalletId,
        status: WalletStatus,
        at_ms: i64,
    },
    /// A transaction record for a wallet; its entries follow as `EntryPosted`.
    TransactionRecorded {
        wallet_id: WalletId,
        transaction: Transaction,
    },
    /// A chained ledger entry; sets the wallet's balance to `balance_after` and chain head to `hash`.
    EntryPosted {
        wallet_id: WalletId,
        entry: LedgerEntry,
    },
    /// Links an original entry to the reversal entry that mirrors it.
    EntryReversed {
        wallet_id: WalletId,
        entry_id: EntryId,
        reversed_by_entry_id: EntryId,
    },
    /// Marks a transaction reversed.
    TransactionReversed {
        wallet_id: WalletId,
        transaction_id: TransactionId,
        reversed_by_transaction_id: TransactionId,
        at_ms: i64,
    },
    /// Sets the cumulative refunded amount of a debit transaction (raised by a refund, lowered when a
    /// refund is reversed).
    RefundTotalChanged {
        wallet_id: WalletId,
        transaction_id: TransactionId,
        #[serde(with = "crate::values::money::decimal")]
        refunded_amount: Decimal,
        at_ms: i64,
    },
    HoldPlaced {
        wallet_id: WalletId,
        hold: Hold,
    },
    /// An active hold became released, captured or expired.
    HoldClosed {
        wallet_id: WalletId,
        hold_id: HoldId,
        status: HoldStatus,
        #[serde(with = "crate::values::money::decimal_opt")]
        captured_amount: Option<Decimal>,
        capture_transaction_id: Option<TransactionId>,
        at_ms: i64,
    },
    TransferReserved(OutgoingTransfer),
    TransferCredited(IncomingTransfer),
    TransferFinalized {
        transfer_uuid: Uuid,
        at_ms: i64,
    },
    TransferReleased {
        transfer_uuid: Uuid,
        at_ms: i64,
    },
    /// A successful integrity check; sets `balance_verified_at`.
    BalanceVerified {
        wallet_id: WalletId,
        at_ms: i64,
    },
    // ----- version 2: commerce -----
    PaymentInitiated(Box<Payment>),
    /// A pending payment's money moved (its posting precedes this event in the batch).
    PaymentCompleted {
        payment_uuid: Uuid,
        merchant_transaction_id: TransactionId,
        at_ms: i64,
    },
    /// A pending payment became cancelled or failed.
    PaymentClosed {
        payment_uuid: Uuid,
        status: PaymentStatus,
        at_ms: i64,
    },
    /// Sets a completed payment's cumulative refunds (raised by a refund, lowered when a
    /// cross-shard refund is released); the status follows.
    PaymentRefundTotalChanged {
        payment_uuid: Uuid,
        #[serde(with = "crate::values::money::decimal")]
        refunded_amount: Decimal,
        at_ms: i64,
    },
    PaymentLinkCreated(Box<PaymentLink>),
    PaymentLinkUsed {
        link_uuid: Uuid,
        payment_uuid: Uuid,
        at_ms: i64,
    },
    QrCreated(Box<QrCode>),
    PaymentReserved(Box<PaymentReservation>),
    PaymentCredited(Box<IncomingPaymentCredit>),
    PaymentReserveFinalized {
        reservation_uuid: Uuid,
        at_ms: i64,
    },
    PaymentReserveReleased {
        reservation_uuid: Uuid,
        at_ms: i64,
    },
    PayoutCreated(Box<Payout>),
    PayoutChanged {
        payout_id: PayoutId,
        change: PayoutChange,
        at_ms: i64,
    },
    SettlementCreated(Box<Settlement>),
    SettlementChanged {
        settlement_id: SettlementId,
        change: SettlementChange,
        at_ms: i64,
    },
    // ----- version 3 -----
    /// The target shard refused a cross-shard payment credit; later credits of the reservation
    /// are refused too (the first decision is final).
    PaymentCreditRefused {
        reservation_uuid: Uuid,
        payment_uuid: Uuid,
        target_wallet_id: WalletId,
        at_ms: i64,
    },
    // ----- version 4 -----
    /// The shard's key for sealed uuids (`values::sealed`), chosen once from the entropy of the
    /// first command that seals one and logged with it.
    UuidKeyChosen {
        key: UuidKey,
    },
    // ----- version 5 -----
    /// An atomic transfer batch whose wallets span shards (`runtime::atomic_batch`): this shard
    /// reserved every item whose source is here into its in-transit account. `shards` are the
    /// batch's source shards, sorted: the batch is committed once each of them logged its
    /// prepare. Its `transfers` are finished by the batch, never one by one by recovery.
    TransferBatchPrepared {
        batch: Uuid,
        shards: Vec<u32>,
        transfers: Vec<Uuid>,
    },
    /// The batch's transfers on this shard are all finalized or released: it is no longer open.
    TransferBatchClosed {
        batch: Uuid,
    },
}

impl Event {
    /// The wallet a history read must wait for this event for: the one whose filed history
    /// (its transactions, ledger entries and holds, the pages the history store serves) it
    /// changes, or the wallet it creates (a history read shows the wallet's facts, so its
    /// creation must be durable first); `None` for every other event. Every variant is named,
    /// so a new one needs a decision here: a history read of a wallet waits only for the
    /// records whose events name it.
    #[must_use]
    pub fn history_wallet(&self) -> Option<WalletId> {
        match self {
            Self::WalletCreated(created) => Some(created.wallet_id),
            Self::TransactionRecorded { wallet_id, .. }
            | Self::EntryPosted { wallet_id, .. }
            | Self::EntryReversed { wallet_id, .. }
            | Self::TransactionReversed { wallet_id, .. }
            | Self::RefundTotalChanged { wallet_id, .. }
            | Self::HoldPlaced { wallet_id, .. }
            | Self::HoldClosed { wallet_id, .. } => Some(*wallet_id),
            Self::WalletStatusChanged { .. }
            | Self::TransferReserved(_)
            | Self::TransferCredited(_)
            | Self::TransferFinalized { .. }
            | Self::TransferReleased { .. }
            | Self::BalanceVerified { .. }
            | Self::PaymentInitiated(_)
            | Self::PaymentCompleted { .. }
            | Self::PaymentClosed { .. }
            | Self::PaymentRefundTotalChanged { .. }
            | Self::PaymentLinkCreated(_)
            | Self::PaymentLinkUsed { .. }
            | Self::QrCreated(_)
            | Self::PaymentReserved(_)
            | Self::PaymentCredited(_)
            | Self::PaymentReserveFinalized { .. }
            | Self::PaymentReserveReleased { .. }
            | Self::PayoutCreated(_)
            | Self::PayoutChanged { .. }
            | Self::SettlementCreated(_)
            | Self::SettlementChanged { .. }
            | Self::PaymentCreditRefused { .. }
            | Self::UuidKeyChosen { .. }
            | Self::TransferBatchPrepared { .. }
            | Self::TransferBatchClosed { .. } => None,
        }
    }
}

pub(crate) fn text_ok(text: Option<&str>) -> bool {
    text.is_none_or(|text| text.len() <= TEXT_BYTES_MAX)
}

pub(crate) fn positive(amount: Decimal) -> bool {
    amount > Decimal::ZERO
}
