//! Ledger records: transactions, ledger entries and the per-wallet hash chain.
//!
//! # Double entry
//!
//! Every money movement is one *posting*: a set of ledger entries whose signed amounts sum to zero in
//! one currency, together with one [`Transaction`] record for each customer/merchant wallet it touches
//! (a deposit: one transaction, entries "wallet credit" + "float debit"; a same-shard transfer: the
//! source's debit-side and the target's credit-side transactions, entries "source debit" + "target
//! credit"). Each transaction lists *all* entries of its posting in [`Transaction::legs`], so a reversal
//! can mirror the whole posting from any of its transactions. Entries on system accounts carry the id
//! of the posting's first transaction.
//!
//! # Hash chain
//!
//! Each wallet's entries form a chain: `hash = sha256(prev_hash || canonical bytes of the entry)`, with
//! `prev_hash` all zeros for the first entry and the last hash kept as the wallet's chain head. The
//! canonical bytes (see [`entry_hash`]) are fixed-width little-endian fields plus length-prefixed text,
//! and include the wallet id and currency so that an entry cannot be moved to another wallet. The only
//! mutable field, `reversed_by_entry_id`, is left out: marking an entry reversed does not rewrite
//! history, the reversal is itself a new chained entry.

use std::fmt;

use rust_decimal::Decimal;
use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

use crate::values::currency::Currency;
use crate::values::ids::{EntryId, TransactionId, Uuid, WalletId};
use crate::values::money::canonical_bytes;

/// A SHA-256 value (entry hash, chain head, state digest). Hex in human-readable formats.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Hash(pub [u8; 32]);

impl Hash {
    /// The `prev_hash` of a wallet's first entry.
    pub const ZERO: Hash = Hash([0u8; 32]);

    #[must_use]
    pub fn to_hex(&self) -> String {
        hex::encode(self.0)
    }
}

impl fmt::Display for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl fmt::Debug for Hash {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(&self.to_hex())
    }
}

impl Serialize for Hash {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.serialize_str(&self.to_hex())
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Hash {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            let mut bytes = [0u8; 32];
            hex::decode_to_slice(text.as_bytes(), &mut bytes).map_err(serde::de::Error::custom)?;
            Ok(Self(bytes))
        } else {
            <[u8; 32]>::deserialize(deserializer).map(Self)
        }
    }
}

/// Side of a ledger entry from its wallet's point of view.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum Direction {
    Debit,
    Credit,
}

impl Direction {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Debit => "debit",
            Self::Credit => "credit",
        }
    }

    #[must_use]
    pub fn opposite(&self) -> Self {
        match self {
            Self::Debit => Self::Credit,
            Self::Credit => Self::Debit,
        }
    }

    /// `amount` with the sign of this side: negative for a debit.
    #[must_use]
    pub fn signed(&self, amount: Decimal) -> Decimal {
        match self {
            Self::Debit => -amount,
            Self::Credit => amount,
        }
    }

    fn tag(&self) -> u8 {
        match self {
            Self::Debit => 1,
            Self::Credit => 2,
        }
    }
}

/// Kind of a transaction; also used as the `entry_type` of its entries.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionType {
    Deposit,
    Withdrawal,
    Transfer,
    Refund,
    Reversal,
    HoldCapture,
    /// A payment: the payer's debit side and the merchant's credit side (gross `amount`, with the
    /// merchant's `fee_amount` and `net_amount`).
    Payment,
    /// A refund of a payment: the merchant's debit side and the payer's credit side.
    PaymentRefund,
    /// A payout's execution: the wallet's held funds captured into payout clearing.
    Payout,
    /// A failed payout's funds returned from payout clearing.
    PayoutReturn,
    /// A settlement's execution: the merchant wallet's net total into settlement clearing.
    Settlement,
}

impl TransactionType {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Deposit => "deposit",
            Self::Withdrawal => "withdrawal",
            Self::Transfer => "transfer",
            Self::Refund => "refund",
            Self::Reversal => "reversal",
            Self::HoldCapture => "hold_capture",
            Self::Payment => "payment",
            Self::PaymentRefund => "payment_refund",
            Self::Payout => "payout",
            Self::PayoutReturn => "payout_return",
            Self::Settlement => "settlement",
        }
    }

    /// Whether the transaction belongs to a payment, payout or settlement, whose own life cycle
    /// (not a client reversal or wallet refund) undoes it.
    #[must_use]
    pub fn is_commerce(&self) -> bool {
        matches!(
            self,
            Self::Payment
                | Self::PaymentRefund
                | Self::Payout
                | Self::PayoutReturn
                | Self::Settlement
        )
    }

    fn tag(&self) -> u8 {
        match self {
            Self::Deposit => 1,
            Self::Withdrawal => 2,
            Self::Transfer => 3,
            Self::Refund => 4,
            Self::Reversal => 5,
            Self::HoldCapture => 6,
            Self::Payment => 7,
            Self::PaymentRefund => 8,
            Self::Payout => 9,
            Self::PayoutReturn => 10,
            Self::Settlement => 11,
        }
    }
}

/// Status of a transaction. Postings complete atomically, so a transaction is born `completed`; it
/// becomes `reversed` when a reversal posting mirrors it.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum TransactionStatus {
    Completed,
    Reversed,
}

impl TransactionStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Completed => "completed",
            Self::Reversed => "reversed",
        }
    }
}

/// Where an entry lives: its wallet and id.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
pub struct EntryRef {
    pub wallet_id: WalletId,
    pub entry_id: EntryId,
}

/// Optional client text attached to a transaction (all bounded by [`crate::shard::command::TEXT_BYTES_MAX`]).
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct TransactionText {
    pub description: Option<Box<str>>,
    pub external_reference: Option<Box<str>>,
    pub idempotency_key: Option<Box<str>>,
    pub meta: Option<Box<str>>,
}

/// A wallet transaction (contract §2.3), kept in its wallet's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Transaction {
    pub id: TransactionId,
    pub uuid: Uuid,
    pub transaction_type: TransactionType,
    /// Side of the movement for this transaction's wallet.
    pub direction: Direction,
    pub status: TransactionStatus,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    /// Always zero for wallet operations (fees belong to payments); `net_amount = amount - fee_amount`.
    #[serde(with = "crate::values::money::decimal")]
    pub fee_amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub net_amount: Decimal,
    /// The other customer/merchant wallet of a transfer or capture, if any.
    pub counterparty_wallet_id: Option<WalletId>,
    /// For refunds and reversals: the transaction they refer to (reference_type "transaction").
    pub reference_transaction_id: Option<TransactionId>,
    /// For both sides of a cross-shard transfer: the transfer's uuid. For the commerce types
    /// ([`TransactionType::is_commerce`]): the uuid of the payment, payout or settlement the
    /// transaction belongs to (shown as `reference_uuid`, never as a transfer).
    pub transfer_uuid: Option<Uuid>,
    pub text: TransactionText,
    /// Every entry of the posting this transaction belongs to (all wallets, system accounts included).
    pub legs: Vec<EntryRef>,
    /// Sum of refunds recorded against this transaction (only debits are refundable).
    #[serde(with = "crate::values::money::decimal")]
    pub refunded_amount: Decimal,
    pub reversed_by_transaction_id: Option<TransactionId>,
    pub created_at_ms: i64,
    pub completed_at_ms: i64,
    pub reversed_at_ms: Option<i64>,
}

impl Transaction {
    /// Marks the transaction reversed by `by` at `at_ms` (shard and history indexer alike).
    pub fn mark_reversed(&mut self, by: TransactionId, at_ms: i64) -> Result<(), &'static str> {
        if self.reversed_by_transaction_id.is_some() {
            return Err("transaction already reversed");
        }
        self.reversed_by_transaction_id = Some(by);
        self.status = TransactionStatus::Reversed;
        self.reversed_at_ms = Some(at_ms);
        Ok(())
    }

    /// Sets the cumulative refunded amount (shard and history indexer alike).
    pub fn set_refunded(&mut self, refunded_amount: Decimal) -> Result<(), &'static str> {
        if refunded_amount > self.amount {
            return Err("refunds above the original amount");
        }
        self.refunded_amount = refunded_amount;
        Ok(())
    }
}

/// A ledger entry (contract §2.4), kept in its wallet's history. Status is always `posted`.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LedgerEntry {
    pub id: EntryId,
    pub uuid: Uuid,
    pub transaction_id: TransactionId,
    pub direction: Direction,
    pub entry_type: TransactionType,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub balance_after: Decimal,
    pub reverses_entry_id: Option<EntryId>,
    pub reversed_by_entry_id: Option<EntryId>,
    pub description: Option<Box<str>>,
    pub idempotency_key: Option<Box<str>>,
    pub created_at_ms: i64,
    pub hash: Hash,
}

impl LedgerEntry {
    /// Links this entry to the entry that mirrors it (shard and history indexer alike).
    pub fn mark_reversed(&mut self, by: EntryId) -> Result<(), &'static str> {
        if self.reversed_by_entry_id.is_some() {
            return Err("entry already reversed");
        }
        self.reversed_by_entry_id = Some(by);
        Ok(())
    }

    /// Negative for a debit.
    #[must_use]
    pub fn signed_amount(&self) -> Decimal {
        self.direction.signed(self.amount)
    }

    #[must_use]
    pub fn is_reversal(&self) -> bool {
        self.reverses_entry_id.is_some()
    }
}

fn hash_text(hasher: &mut Sha256, text: Option<&str>) {
    match text {
        None => hasher.update([0u8]),
        Some(text) => {
            hasher.update([1u8]);
            hasher.update((text.len() as u64).to_le_bytes());
            hasher.update(text.as_bytes());
        }
    }
}

/// The chained hash of `entry` in wallet `wallet_id` after `prev` (the field layout is the format:
/// changing it breaks every stored chain).
#[must_use]
pub fn entry_hash(
    prev: &Hash,
    wallet_id: WalletId,
    currency: Currency,
    entry: &LedgerEntry,
) -> Hash {
    let mut hasher = Sha256::new();
    hasher.update(b"walletd-entry-v1");
    hasher.update(prev.0);
    hasher.update(entry.id.0.to_le_bytes());
    hasher.update(entry.uuid.0);
    hasher.update(wallet_id.0.to_le_bytes());
    hasher.update(currency.code().as_bytes());
    hasher.update(entry.transaction_id.0.to_le_bytes());
    hasher.update([entry.direction.tag(), entry.entry_type.tag()]);
    hasher.update(canonical_bytes(entry.amount));
    hasher.update(canonical_bytes(entry.balance_after));
    hasher.update(entry.reverses_entry_id.map_or(0, |id| id.0).to_le_bytes());
    hasher.update(entry.created_at_ms.to_le_bytes());
    hash_text(&mut hasher, entry.description.as_deref());
    hash_text(&mut hasher, entry.idempotency_key.as_deref());
    Hash(hasher.finalize().into())
}

/// Result of walking one wallet's chain.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainCheck {
    /// Entries examined (all of them when the chain is valid).
    pub entries_checked: u64,
    /// Sum of signed amounts over all entries, `None` on overflow.
    pub ledger_balance: Option<Decimal>,
    /// Stored hash of the last entry (zero for an empty ledger); must equal the wallet's chain head.
    pub last_hash: Hash,
    /// First entry whose stored hash or balance_after is wrong.
    pub first_invalid_entry_id: Option<EntryId>,
    /// First entry whose stored hash is wrong (a subset of the above).
    pub first_bad_hash_entry_id: Option<EntryId>,
}

/// Recomputes the chain and balances of `entries` (oldest first) of one wallet.
#[must_use]
pub fn check_chain<'a>(
    wallet_id: WalletId,
    currency: Currency,
    entries: impl IntoIterator<Item = &'a LedgerEntry>,
) -> ChainCheck {
    let mut checker = ChainChecker::new(wallet_id, currency);
    for entry in entries {
        checker.feed(entry);
    }
    checker.finish()
}

/// [`check_chain`] one entry at a time, for a chain read from a store in pieces.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct ChainChecker {
    wallet_id: WalletId,
    currency: Currency,
    prev: Hash,
    balance: Option<Decimal>,
    first_invalid: Option<EntryId>,
    first_bad_hash: Option<EntryId>,
    checked: u64,
    last: Option<EntryId>,
}

impl ChainChecker {
    #[must_use]
    pub fn new(wallet_id: WalletId, currency: Currency) -> Self {
        ChainChecker {
            wallet_id,
            currency,
            prev: Hash::ZERO,
            balance: Some(crate::values::money::zero(currency)),
            first_invalid: None,
            first_bad_hash: None,
            checked: 0,
            last: None,
        }
    }

    /// The id of the last entry fed, if any.
    #[must_use]
    pub fn last_entry_id(&self) -> Option<EntryId> {
        self.last
    }

    /// A checker that continues a chain after the entry with hash `prev`, at balance `balance`
    /// (for the suffix of a ledger that is in memory).
    #[must_use]
    pub fn resume(wallet_id: WalletId, currency: Currency, prev: Hash, balance: Decimal) -> Self {
        ChainChecker {
            prev,
            balance: Some(balance),
            ..ChainChecker::new(wallet_id, currency)
        }
    }

    /// The next entry of the chain, oldest first.
    pub fn feed(&mut self, entry: &LedgerEntry) {
        self.checked += 1;
        let expected = entry_hash(&self.prev, self.wallet_id, self.currency, entry);
        self.balance = self
            .balance
            .and_then(|sum| sum.checked_add(entry.signed_amount()));
        let hash_ok = expected == entry.hash;
        let balance_ok = self.balance == Some(entry.balance_after);
        if !hash_ok && self.first_bad_hash.is_none() {
            self.first_bad_hash = Some(entry.id);
        }
        if !(hash_ok && balance_ok) && self.first_invalid.is_none() {
            self.first_invalid = Some(entry.id);
        }
        // Continue the chain from the stored hash so one bad entry is reported once.
        self.prev = entry.hash;
        self.last = Some(entry.id);
    }

    #[must_use]
    pub fn finish(self) -> ChainCheck {
        ChainCheck {
            entries_checked: self.checked,
            ledger_balance: self.balance,
            last_hash: self.prev,
            first_invalid_entry_id: self.first_invalid,
            first_bad_hash_entry_id: self.first_bad_hash,
        }
    }
}
