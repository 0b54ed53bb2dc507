//! Events: every change of state, and their binary codec.
//!
//! `Shard::decide` turns a command into a list of events; `Shard::apply` performs one event. Events
//! are facts, not requests: each carries every id, uuid, timestamp, `balance_after` and hash that
//! `decide` computed, so `apply` only stores them and replay never generates or recomputes a value.
//! `apply` still checks that an event fits (ids in sequence, records exist, balances add up) and
//! refuses one that does not with [`crate::ApplyError`].
//!
//! # Codec
//!
//! All events of one command are encoded together and written as ONE WAL record, so a command is
//! durable entirely or not at all. Layout of [`encode`]'s output:
//!
//! ```text
//! byte 0     EVENT_FORMAT_VERSION (2; 1 is still read)
//! bytes 1..  postcard encoding of the event list: varint count, then each event
//!            (varint variant index, then its fields in declaration order; integers as varints,
//!            i64 zig-zag; Decimal as its 16-byte `Decimal::serialize()` form; uuid 16 raw bytes;
//!            hash 32 raw bytes; currency as a length-prefixed 3-byte code; Option as 0/1 + value)
//! ```
//!
//! Adding a field or variant changes the format: bump the version and keep a decoder for the old one.
//! Version 2 appended the commerce events (payments, links, QR, payouts, settlements, cross-shard
//! payment steps) and the commerce transaction types; variants were only appended, so a version 1
//! batch decodes unchanged with the same decoder, which refuses a version 1 batch that holds
//! anything version 2 added ([`Event::format_version`]).
//! [`decode`] never panics, refuses trailing bytes, non-canonical decimals, unknown currencies and
//! variants, and validates each event's self-contained rules ([`Event::validate`]) — the pair of the
//! checks `decide` made before encoding. serde_json gives a readable form for `wal inspect`
//! (decimals as strings, uuids hyphenated, hashes hex).

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::command::TEXT_BYTES_MAX;
use crate::currency::Currency;
use crate::error::DecodeError;
use crate::hold::{Hold, HoldStatus};
use crate::ids::{EntryId, HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};
use crate::ledger::{LedgerEntry, Transaction};
use crate::payment::{
    IncomingPaymentCredit, Payment, PaymentLink, PaymentReservation, PaymentStatus, QrCode,
};
use crate::payout::{Payout, PayoutChange, Settlement, SettlementChange};
use crate::transfer::{IncomingTransfer, OutgoingTransfer};
use crate::wallet::{OwnerType, WalletStatus, WalletType};

/// First byte of every encoded event batch.
pub const EVENT_FORMAT_VERSION: u8 = 2;

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
        #[serde(with = "crate::money::decimal")]
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
        #[serde(with = "crate::money::decimal_opt")]
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
        #[serde(with = "crate::money::decimal")]
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
}

pub(crate) fn text_ok(text: Option<&str>) -> bool {
    text.is_none_or(|text| text.len() <= TEXT_BYTES_MAX)
}

pub(crate) fn positive(amount: Decimal) -> bool {
    amount > Decimal::ZERO
}

impl Event {
    /// Rules an event must satisfy on its own, whatever the state (the state-dependent ones are
    /// checked by `apply`).
    pub fn validate(&self) -> Result<(), &'static str> {
        match self {
            Self::WalletCreated(created) => {
                if created.wallet_type.is_system() != (created.owner_type == OwnerType::System) {
                    return Err("system wallet types belong to system owners only");
                }
                if !text_ok(created.meta.as_deref()) {
                    return Err("meta too long");
                }
            }
            Self::TransactionRecorded { transaction, .. } => {
                let text = &transaction.text;
                if !positive(transaction.amount) || transaction.legs.is_empty() {
                    return Err("transaction amount must be positive and it must have legs");
                }
                if transaction.net_amount.checked_add(transaction.fee_amount)
                    != Some(transaction.amount)
                {
                    return Err("transaction net_amount + fee_amount must equal amount");
                }
                if ![
                    &text.description,
                    &text.external_reference,
                    &text.idempotency_key,
                    &text.meta,
                ]
                .iter()
                .all(|field| text_ok(field.as_deref()))
                {
                    return Err("transaction text too long");
                }
            }
            Self::EntryPosted { entry, .. } => {
                if !positive(entry.amount) {
                    return Err("entry amount must be positive");
                }
                if entry.reversed_by_entry_id.is_some() {
                    return Err("a new entry cannot already be reversed");
                }
                if !text_ok(entry.description.as_deref())
                    || !text_ok(entry.idempotency_key.as_deref())
                {
                    return Err("entry text too long");
                }
            }
            Self::HoldPlaced { hold, .. } => {
                if !positive(hold.amount) || hold.status != HoldStatus::Active {
                    return Err("a new hold must be active with a positive amount");
                }
                if hold.expires_at_ms < hold.created_at_ms || !text_ok(hold.reason.as_deref()) {
                    return Err("hold expiry before creation or reason too long");
                }
            }
            Self::HoldClosed {
                status,
                captured_amount,
                capture_transaction_id,
                ..
            } => {
                let captured = *status == HoldStatus::Captured;
                if *status == HoldStatus::Active
                    || captured != captured_amount.is_some()
                    || captured != capture_transaction_id.is_some()
                    || captured_amount.is_some_and(|amount| !positive(amount))
                {
                    return Err("hold closing status and capture fields disagree");
                }
            }
            Self::RefundTotalChanged {
                refunded_amount, ..
            } => {
                if *refunded_amount < Decimal::ZERO {
                    return Err("refunded amount cannot be negative");
                }
            }
            Self::TransferReserved(transfer) => {
                if !positive(transfer.amount)
                    || transfer.source_wallet_id == transfer.target_wallet_id
                {
                    return Err("transfer needs a positive amount and two wallets");
                }
            }
            Self::TransferCredited(transfer) => {
                if !positive(transfer.amount)
                    || transfer.source_wallet_id == transfer.target_wallet_id
                {
                    return Err("transfer needs a positive amount and two wallets");
                }
            }
            Self::WalletStatusChanged { .. }
            | Self::EntryReversed { .. }
            | Self::TransactionReversed { .. }
            | Self::TransferFinalized { .. }
            | Self::TransferReleased { .. }
            | Self::BalanceVerified { .. } => {}
            commerce => return crate::event_commerce::validate(commerce),
        }
        Ok(())
    }

    /// The first format version that can carry this event.
    #[must_use]
    pub fn format_version(&self) -> u8 {
        match self {
            Self::TransactionRecorded { transaction, .. }
                if transaction.transaction_type.is_commerce() =>
            {
                2
            }
            Self::EntryPosted { entry, .. } if entry.entry_type.is_commerce() => 2,
            Self::WalletCreated(_)
            | Self::WalletStatusChanged { .. }
            | Self::TransactionRecorded { .. }
            | Self::EntryPosted { .. }
            | Self::EntryReversed { .. }
            | Self::TransactionReversed { .. }
            | Self::RefundTotalChanged { .. }
            | Self::HoldPlaced { .. }
            | Self::HoldClosed { .. }
            | Self::TransferReserved(_)
            | Self::TransferCredited(_)
            | Self::TransferFinalized { .. }
            | Self::TransferReleased { .. }
            | Self::BalanceVerified { .. } => 1,
            _ => 2,
        }
    }
}

/// Encodes one command's events as one record (layout in the module docs).
///
/// Cannot fail in practice: every event type serialises infallibly into postcard's growable vector
/// (no unknown-length sequences, no custom serialisation errors); should it ever fail, the output is
/// empty, which [`decode`] refuses loudly rather than mis-reading.
#[must_use]
pub fn encode(events: &[Event]) -> Vec<u8> {
    postcard::to_extend(events, vec![EVENT_FORMAT_VERSION]).unwrap_or_default()
}

/// Decodes and validates a record written by [`encode`]. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Vec<Event>, DecodeError> {
    let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if !(EVENT_FORMAT_VERSION_MIN..=EVENT_FORMAT_VERSION).contains(version) {
        return Err(DecodeError::UnsupportedVersion(*version));
    }
    let (events, rest): (Vec<Event>, &[u8]) = postcard::take_from_bytes(body)
        .map_err(|error| DecodeError::Malformed(error.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    for event in &events {
        if event.format_version() > *version {
            return Err(DecodeError::Invalid(
                "event newer than the batch's format version",
            ));
        }
        event.validate().map_err(DecodeError::Invalid)?;
    }
    Ok(events)
}
