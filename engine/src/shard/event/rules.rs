//! Rules an event must satisfy on its own, whatever the state: the pair of the checks `decide`
//! made before encoding, checked again after decoding. The commerce events' rules are in
//! `super::commerce`.

use rust_decimal::Decimal;

use crate::ledger::hold::HoldStatus;
use crate::ledger::wallet::OwnerType;
use crate::shard::event::commerce;
use crate::shard::event::types::{positive, text_ok, Event};

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
            Self::TransferBatchPrepared {
                shards, transfers, ..
            } => crate::ledger::transfer::check_prepared(shards, transfers)?,
            Self::WalletStatusChanged { .. }
            | Self::EntryReversed { .. }
            | Self::TransactionReversed { .. }
            | Self::TransferFinalized { .. }
            | Self::TransferReleased { .. }
            | Self::BalanceVerified { .. }
            | Self::UuidKeyChosen { .. }
            | Self::TransferBatchClosed { .. } => {}
            commerce => return commerce::validate(commerce),
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
            Self::PaymentCreditRefused { .. } => 3,
            Self::UuidKeyChosen { .. } => 4,
            Self::TransferBatchPrepared { .. } | Self::TransferBatchClosed { .. } => 5,
            _ => 2,
        }
    }
}
