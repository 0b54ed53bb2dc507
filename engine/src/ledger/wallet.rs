//! Wallets: the hot per-wallet record and its lazily allocated history.
//!
//! # Memory
//!
//! A shard may hold millions of idle wallets, so [`Wallet`] keeps only what every wallet needs (ids,
//! owner, currency, three balances, three timestamps: [`WALLET_BYTES_MAX`] bytes at most, checked at
//! compile time) and puts everything that grows (ledger entries, transactions, holds, the chain head,
//! `meta`) in a [`History`] behind `Option<Box<_>>`, allocated on the wallet's first posting, hold or
//! meta. An idle wallet costs its slot in the shard's dense wallet vector plus one entry in the
//! owner-uniqueness index: see `Shard` docs for the per-wallet budget (≤ 200 bytes).
//!
//! # Why balances are cached
//!
//! `balance`, `held` and `pending` are caches of what the ledger and the holds say, kept so that a
//! command is O(1). `Shard::check_invariants` recomputes them.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::ledger::hold::{Hold, HoldStatus};
use crate::ledger::recent::Recent;
use crate::ledger::transaction::{Hash, LedgerEntry, Transaction};
use crate::values::currency::Currency;
use crate::values::ids::{EntryId, HoldId, TransactionId, Uuid, WalletId};

/// Largest allowed `size_of::<Wallet>()`; a test and a compile-time assertion hold it.
pub const WALLET_BYTES_MAX: usize = 136;

const _: () = assert!(std::mem::size_of::<Wallet>() <= WALLET_BYTES_MAX);

/// Who owns a wallet.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum OwnerType {
    Customer,
    Merchant,
    Business,
    /// The shard's own accounts (float, in-transit, ...). Never created by a client.
    System,
}

impl OwnerType {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Customer => "customer",
            Self::Merchant => "merchant",
            Self::Business => "business",
            Self::System => "system",
        }
    }

    /// Parses the client-facing names; `system` is not accepted.
    #[must_use]
    pub fn parse_client(text: &str) -> Option<Self> {
        match text {
            "customer" => Some(Self::Customer),
            "merchant" => Some(Self::Merchant),
            "business" => Some(Self::Business),
            _ => None,
        }
    }
}

/// Purpose of a wallet. The last five are system account kinds.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalletType {
    Primary,
    Savings,
    Escrow,
    /// System: the "world" account that funds deposits, absorbs withdrawals and funds refunds.
    Float,
    /// System: fees collected.
    Fees,
    /// System: payouts on their way out.
    PayoutClearing,
    /// System: merchant settlements on their way out.
    SettlementClearing,
    /// System: cross-shard transfers between reserve and credit.
    InTransit,
}

impl WalletType {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Primary => "primary",
            Self::Savings => "savings",
            Self::Escrow => "escrow",
            Self::Float => "float",
            Self::Fees => "fees",
            Self::PayoutClearing => "payout_clearing",
            Self::SettlementClearing => "settlement_clearing",
            Self::InTransit => "in_transit",
        }
    }

    /// Whether this is a system account kind.
    #[must_use]
    pub fn is_system(&self) -> bool {
        matches!(
            self,
            Self::Float
                | Self::Fees
                | Self::PayoutClearing
                | Self::SettlementClearing
                | Self::InTransit
        )
    }

    /// Parses the client-facing names (system kinds are not accepted).
    #[must_use]
    pub fn parse_client(text: &str) -> Option<Self> {
        match text {
            "primary" => Some(Self::Primary),
            "savings" => Some(Self::Savings),
            "escrow" => Some(Self::Escrow),
            _ => None,
        }
    }
}

/// Whether a wallet may move money.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum WalletStatus {
    Active,
    Frozen,
}

impl WalletStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Frozen => "frozen",
        }
    }
}

/// How many records a wallet has ever had, in memory or not.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct HistoryCounts {
    pub transactions: u64,
    pub entries: u64,
    pub holds: u64,
}

/// What a wallet accumulates; boxed and created on first use.
///
/// Entries, transactions and holds are each in ascending id order (ids only grow), so lookups by id
/// are binary searches. Only the recent ones are here once the shard files history into a store
/// (see [`Recent`]): the ledger keeps a suffix of the chain, with the hash of the entry before it
/// in `entries_before`, and `counts` says how many records there are in all.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub struct History {
    pub(crate) meta: Option<Box<str>>,
    pub(crate) chain_head: Hash,
    pub(crate) entries_before: Hash,
    pub(crate) counts: HistoryCounts,
    pub(crate) entries: Recent<LedgerEntry>,
    pub(crate) transactions: Recent<Transaction>,
    pub(crate) holds: Recent<Hold>,
}

/// One wallet or system account.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Wallet {
    pub(crate) id: WalletId,
    pub(crate) uuid: Uuid,
    pub(crate) owner_id: u64,
    pub(crate) business_id: u64,
    /// 0 when the wallet has no branch.
    pub(crate) branch_id: u64,
    #[serde(with = "crate::values::money::decimal")]
    pub(crate) balance: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub(crate) held: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub(crate) pending: Decimal,
    pub(crate) balance_verified_at_ms: i64,
    pub(crate) created_at_ms: i64,
    pub(crate) updated_at_ms: i64,
    pub(crate) currency: Currency,
    pub(crate) owner_type: OwnerType,
    pub(crate) wallet_type: WalletType,
    pub(crate) status: WalletStatus,
    pub(crate) history: Option<Box<History>>,
}

impl Wallet {
    #[must_use]
    pub fn id(&self) -> WalletId {
        self.id
    }
    #[must_use]
    pub fn uuid(&self) -> Uuid {
        self.uuid
    }
    #[must_use]
    pub fn owner_type(&self) -> OwnerType {
        self.owner_type
    }
    #[must_use]
    pub fn owner_id(&self) -> u64 {
        self.owner_id
    }
    #[must_use]
    pub fn wallet_type(&self) -> WalletType {
        self.wallet_type
    }
    #[must_use]
    pub fn status(&self) -> WalletStatus {
        self.status
    }
    #[must_use]
    pub fn currency(&self) -> Currency {
        self.currency
    }
    #[must_use]
    pub fn business_id(&self) -> u64 {
        self.business_id
    }
    #[must_use]
    pub fn branch_id(&self) -> u64 {
        self.branch_id
    }
    /// Posted balance: the sum of the wallet's ledger.
    #[must_use]
    pub fn balance(&self) -> Decimal {
        self.balance
    }
    /// Sum of active holds.
    #[must_use]
    pub fn held(&self) -> Decimal {
        self.held
    }
    /// Credits announced but not settled (no wallet operation sets it yet).
    #[must_use]
    pub fn pending(&self) -> Decimal {
        self.pending
    }
    /// Spendable: `balance − held`, `None` only on overflow.
    #[must_use]
    pub fn available(&self) -> Option<Decimal> {
        self.balance.checked_sub(self.held)
    }
    #[must_use]
    pub fn balance_verified_at_ms(&self) -> i64 {
        self.balance_verified_at_ms
    }
    #[must_use]
    pub fn created_at_ms(&self) -> i64 {
        self.created_at_ms
    }
    #[must_use]
    pub fn updated_at_ms(&self) -> i64 {
        self.updated_at_ms
    }
    #[must_use]
    pub fn is_system(&self) -> bool {
        self.owner_type == OwnerType::System
    }
    #[must_use]
    pub fn is_frozen(&self) -> bool {
        self.status == WalletStatus::Frozen
    }
    #[must_use]
    pub fn meta(&self) -> Option<&str> {
        self.history
            .as_ref()
            .and_then(|history| history.meta.as_deref())
    }
    /// Hash of the newest entry; zero while the ledger is empty.
    #[must_use]
    pub fn chain_head(&self) -> Hash {
        self.history
            .as_ref()
            .map_or(Hash::ZERO, |history| history.chain_head)
    }
    /// The ledger entries in memory, oldest first: a suffix of the wallet's chain (all of it in a
    /// shard without a history store).
    #[must_use]
    pub fn entries(&self) -> &Recent<LedgerEntry> {
        self.history
            .as_ref()
            .map_or(Recent::empty(), |history| &history.entries)
    }
    /// Hash of the entry before the first one in memory; zero when the chain starts in memory.
    #[must_use]
    pub fn entries_before(&self) -> Hash {
        self.history
            .as_ref()
            .map_or(Hash::ZERO, |history| history.entries_before)
    }
    /// The transactions in memory, oldest first.
    #[must_use]
    pub fn transactions(&self) -> &Recent<Transaction> {
        self.history
            .as_ref()
            .map_or(Recent::empty(), |history| &history.transactions)
    }
    /// The holds in memory (every active one), oldest first.
    #[must_use]
    pub fn holds(&self) -> &Recent<Hold> {
        self.history
            .as_ref()
            .map_or(Recent::empty(), |history| &history.holds)
    }
    /// How many records the wallet has ever had.
    #[must_use]
    pub fn counts(&self) -> HistoryCounts {
        self.history
            .as_ref()
            .map_or(HistoryCounts::default(), |history| history.counts)
    }
    /// Whether the boxed history has been allocated (false for an idle wallet).
    #[must_use]
    pub fn has_history(&self) -> bool {
        self.history.is_some()
    }

    #[must_use]
    pub fn entry(&self, id: EntryId) -> Option<&LedgerEntry> {
        self.entries().find_by_key(&id, |entry| entry.id)
    }

    #[must_use]
    pub fn transaction(&self, id: TransactionId) -> Option<&Transaction> {
        self.transactions()
            .find_by_key(&id, |transaction| transaction.id)
    }

    #[must_use]
    pub fn hold(&self, id: HoldId) -> Option<&Hold> {
        self.holds().find_by_key(&id, |hold| hold.id)
    }

    pub(crate) fn history_mut(&mut self) -> &mut History {
        self.history.get_or_insert_with(Box::default)
    }

    pub(crate) fn entry_mut(&mut self, id: EntryId, stamp: u64) -> Option<&mut LedgerEntry> {
        self.history
            .as_mut()?
            .entries
            .find_by_key_mut(&id, |entry| entry.id, stamp)
    }

    pub(crate) fn transaction_mut(
        &mut self,
        id: TransactionId,
        stamp: u64,
    ) -> Option<&mut Transaction> {
        self.history.as_mut()?.transactions.find_by_key_mut(
            &id,
            |transaction| transaction.id,
            stamp,
        )
    }

    pub(crate) fn hold_mut(&mut self, id: HoldId, stamp: u64) -> Option<&mut Hold> {
        self.history
            .as_mut()?
            .holds
            .find_by_key_mut(&id, |hold| hold.id, stamp)
    }

    /// Sum of active holds, recomputed (`None` on overflow).
    #[must_use]
    pub fn active_holds_sum(&self) -> Option<Decimal> {
        self.holds()
            .iter()
            .filter(|hold| hold.status == HoldStatus::Active)
            .try_fold(crate::values::money::zero(self.currency), |sum, hold| {
                sum.checked_add(hold.amount)
            })
    }
}
