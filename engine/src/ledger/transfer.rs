//! Transfers between wallets, and the cross-shard protocol.
//!
//! A transfer between two wallets of the same shard is one posting (source debit, target credit) in
//! one command: atomic by construction, since one command's events are one WAL record.
//!
//! # Cross-shard protocol
//!
//! When the wallets live on different shards, the lead's orchestrator runs three durable steps, each
//! one command on one shard and so one WAL record:
//!
//! 1. **Reserve** on the source shard ([`crate::Command::TransferReserve`]): debit the source into the
//!    source shard's in-transit account for the currency, record an [`OutgoingTransfer`] in state
//!    `reserved` with a fresh transfer uuid. Normal checks apply (frozen, spendable, currency).
//! 2. **Credit** on the target shard ([`crate::Command::TransferCredit`], carrying the uuid, wallets,
//!    amount and currency from step 1): debit the target shard's in-transit account, credit the target,
//!    record an [`IncomingTransfer`]. Idempotent by transfer uuid: a second credit for the same uuid
//!    emits nothing and returns the first credit's transaction with `duplicate: true`. A credit can be
//!    rejected (target frozen, unknown, other currency).
//! 3. **Finalize** on the source ([`crate::Command::TransferFinalize`]) once the credit is durable:
//!    state `finalized`, no money moves. Or, if the credit was rejected, **Release**
//!    ([`crate::Command::TransferRelease`]): mirror the reserve posting (in-transit debit, source
//!    credit, as reversal entries) and set state `released`. Finalize and release are idempotent on
//!    their own state and refuse the other (`invalid_state`).
//!
//! Recovery: [`crate::Shard::pending_outgoing_transfers`] lists transfers still `reserved` after a
//! restart; for each, re-send the credit (safe: idempotent) and then finalize, or release if the
//! credit is rejected. Never credit a transfer after releasing it: the orchestrator only re-sends
//! credits for transfers that are still `reserved`.
//!
//! Money: every step's posting balances inside its shard, so each shard's per-currency sum stays zero.
//! A reserved transfer sits as `+amount` on the source shard's in-transit account until its credit
//! puts `−amount` on the target's; after finalize (or release, which brings the source side back to
//! zero) the in-transit accounts of all shards net to zero per currency.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::values::currency::Currency;
use crate::values::ids::{TransactionId, Uuid, WalletId};

/// Where an outgoing cross-shard transfer stands on its source shard.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransferState {
    Reserved,
    Finalized,
    Released,
}

impl TransferState {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Reserved => "reserved",
            Self::Finalized => "finalized",
            Self::Released => "released",
        }
    }
}

/// A cross-shard transfer as its source shard records it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct OutgoingTransfer {
    pub uuid: Uuid,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    /// The source wallet's debit-side transfer transaction.
    pub transaction_id: TransactionId,
    pub state: TransferState,
    pub description: Option<Box<str>>,
    pub reserved_at_ms: i64,
    /// When it was finalized or released.
    pub settled_at_ms: Option<i64>,
}

/// A cross-shard transfer as its target shard records it (the idempotency record of the credit).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IncomingTransfer {
    pub uuid: Uuid,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    /// The target wallet's credit-side transfer transaction.
    pub transaction_id: TransactionId,
    pub credited_at_ms: i64,
}

/// One currency's finished cross-shard moves on a shard, as running totals (invariant 5): what
/// left through the in-transit account (outgoing transfers and payment reservations finalized)
/// and what arrived through it (incoming transfers and payment credits). Moves still `reserved`
/// are not counted: they are in memory, and the invariant sums them from their records; released
/// ones moved nothing. So finished records can leave memory and the in-transit account stays
/// checkable.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransitTotals {
    #[serde(with = "crate::values::money::decimal")]
    pub sent: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub received: Decimal,
}

/// Settles a `reserved` move (an outgoing transfer or a payment reservation): `apply` and the
/// history store's filing both go through it.
pub(crate) fn settle_move(
    (state, settled_at_ms): (&mut TransferState, &mut Option<i64>),
    to: TransferState,
    at_ms: i64,
) -> Result<(), &'static str> {
    if *state != TransferState::Reserved || to == TransferState::Reserved {
        return Err("cross-shard move already settled");
    }
    *state = to;
    *settled_at_ms = Some(at_ms);
    Ok(())
}

/// An atomic transfer batch prepared on this shard and not yet closed (`runtime::atomic_batch`):
/// its transfers here stay `reserved` until the batch commits (every one of `shards` logged its
/// prepare) or aborts.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PreparedBatch {
    /// The batch's source shards, sorted.
    pub shards: Vec<u32>,
    /// This shard's transfers of the batch, in the batch's order.
    pub transfers: Vec<Uuid>,
}

/// What a prepared batch must be on its own, whatever the state (`Event::validate` and a
/// snapshot's open batches): its shards sorted and distinct, its transfers distinct, at most a
/// batch's worth.
pub(crate) fn check_prepared(shards: &[u32], transfers: &[Uuid]) -> Result<(), &'static str> {
    let sorted = shards.iter().zip(shards.iter().skip(1)).all(|(a, b)| a < b);
    if shards.is_empty() || !sorted || transfers.is_empty() {
        return Err("a prepared batch names its shards, sorted, and its transfers");
    }
    let distinct: std::collections::HashSet<&Uuid> = transfers.iter().collect();
    if distinct.len() != transfers.len()
        || transfers.len() > crate::runtime::batch::TRANSFER_BATCH_ITEMS_MAX
    {
        return Err("a prepared batch holds distinct transfers, at most 8190");
    }
    Ok(())
}
