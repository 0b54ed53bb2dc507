//! Owned read models handed to callers (the API renders them as JSON; actors send them across
//! threads). Built from the records plus their wallet, so a view is self-contained.

use rust_decimal::Decimal;

use crate::ledger::hold::{Hold, HoldStatus};
use crate::ledger::transaction::{
    Direction, Hash, LedgerEntry, Transaction, TransactionStatus, TransactionType,
};
use crate::ledger::wallet::{OwnerType, Wallet, WalletStatus, WalletType};
use crate::values::currency::Currency;
use crate::values::ids::{EntryId, HoldId, TransactionId, Uuid, WalletId};

fn owned(text: Option<&str>) -> Option<String> {
    text.map(str::to_owned)
}

/// A wallet (contract §2.2).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct WalletView {
    pub id: WalletId,
    pub uuid: Uuid,
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub wallet_type: WalletType,
    pub status: WalletStatus,
    pub currency: Currency,
    /// Derived from the id: 12 digits, zero-padded.
    pub account_number: String,
    pub balance: Decimal,
    pub pending_balance: Decimal,
    pub held_balance: Decimal,
    pub available_balance: Decimal,
    pub business_id: u64,
    pub branch_id: u64,
    pub balance_verified_at_ms: i64,
    pub meta: Option<String>,
    pub chain_head: Hash,
    pub created_at_ms: i64,
    pub updated_at_ms: i64,
}

impl WalletView {
    #[must_use]
    pub fn of(wallet: &Wallet) -> Self {
        Self {
            id: wallet.id(),
            uuid: wallet.uuid(),
            owner_type: wallet.owner_type(),
            owner_id: wallet.owner_id(),
            wallet_type: wallet.wallet_type(),
            status: wallet.status(),
            currency: wallet.currency(),
            account_number: format!("{:012}", wallet.id().0),
            balance: wallet.balance(),
            pending_balance: wallet.pending(),
            held_balance: wallet.held(),
            available_balance: wallet.available().unwrap_or(Decimal::ZERO),
            business_id: wallet.business_id(),
            branch_id: wallet.branch_id(),
            balance_verified_at_ms: wallet.balance_verified_at_ms(),
            meta: owned(wallet.meta()),
            chain_head: wallet.chain_head(),
            created_at_ms: wallet.created_at_ms(),
            updated_at_ms: wallet.updated_at_ms(),
        }
    }
}

/// `GET /wallets/{id}/balance` (the API adds `as_of`).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BalanceView {
    pub wallet_id: WalletId,
    pub currency: Currency,
    pub balance: Decimal,
    pub available_balance: Decimal,
    pub held_balance: Decimal,
    pub pending_balance: Decimal,
}

impl BalanceView {
    #[must_use]
    pub fn of(wallet: &Wallet) -> Self {
        Self {
            wallet_id: wallet.id(),
            currency: wallet.currency(),
            balance: wallet.balance(),
            available_balance: wallet.available().unwrap_or(Decimal::ZERO),
            held_balance: wallet.held(),
            pending_balance: wallet.pending(),
        }
    }
}

/// A transaction (contract §2.3). `exchange_rate`/`local_amount`/`payment_method` are always null
/// for wallet operations and left to the API.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransactionView {
    pub id: TransactionId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub transaction_type: TransactionType,
    pub direction: Direction,
    pub status: TransactionStatus,
    pub amount: Decimal,
    pub currency: Currency,
    pub fee_amount: Decimal,
    pub net_amount: Decimal,
    /// "transaction" for refunds and reversals, "transfer" for cross-shard transfer sides,
    /// "payment", "payout" or "settlement" for the commerce types.
    pub reference_type: Option<&'static str>,
    pub reference_id: Option<u64>,
    /// Cross-shard transfer sides only.
    pub transfer_uuid: Option<Uuid>,
    /// The payment, payout or settlement a commerce transaction belongs to.
    pub reference_uuid: Option<Uuid>,
    pub counterparty_wallet_id: Option<WalletId>,
    pub external_reference: Option<String>,
    pub idempotency_key: Option<String>,
    pub business_id: u64,
    pub branch_id: u64,
    pub description: Option<String>,
    pub meta: Option<String>,
    pub refunded_amount: Decimal,
    pub reversed_by_transaction_id: Option<TransactionId>,
    pub completed_at_ms: i64,
    pub reversed_at_ms: Option<i64>,
    pub created_at_ms: i64,
}

/// What a record's view shows of the wallet that holds it: facts that never change once the
/// wallet exists, so a view built from history on disk needs no copy of the wallet.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Holder {
    pub id: WalletId,
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub currency: Currency,
    pub business_id: u64,
    pub branch_id: u64,
}

impl From<&Wallet> for Holder {
    fn from(wallet: &Wallet) -> Self {
        Holder {
            id: wallet.id(),
            owner_type: wallet.owner_type(),
            owner_id: wallet.owner_id(),
            currency: wallet.currency(),
            business_id: wallet.business_id(),
            branch_id: wallet.branch_id(),
        }
    }
}

impl Holder {
    fn id(&self) -> WalletId {
        self.id
    }
    fn owner_type(&self) -> OwnerType {
        self.owner_type
    }
    fn owner_id(&self) -> u64 {
        self.owner_id
    }
    fn currency(&self) -> Currency {
        self.currency
    }
    fn business_id(&self) -> u64 {
        self.business_id
    }
    fn branch_id(&self) -> u64 {
        self.branch_id
    }
}

impl From<&Holder> for Holder {
    fn from(holder: &Holder) -> Self {
        *holder
    }
}

impl TransactionView {
    #[must_use]
    pub fn of(wallet: impl Into<Holder>, transaction: &Transaction) -> Self {
        let wallet = wallet.into();
        let commerce = match transaction.transaction_type {
            TransactionType::Payment | TransactionType::PaymentRefund => Some("payment"),
            TransactionType::Payout | TransactionType::PayoutReturn => Some("payout"),
            TransactionType::Settlement => Some("settlement"),
            _ => None,
        };
        let (reference_type, reference_id) = match (
            transaction.reference_transaction_id,
            transaction.transfer_uuid,
        ) {
            (Some(id), _) => (Some("transaction"), Some(id.0)),
            (None, Some(_)) if commerce.is_some() => (commerce, None),
            (None, Some(_)) => (Some("transfer"), None),
            (None, None) => (None, None),
        };
        let (transfer_uuid, reference_uuid) = match commerce {
            Some(_) => (None, transaction.transfer_uuid),
            None => (transaction.transfer_uuid, None),
        };
        let text = &transaction.text;
        Self {
            id: transaction.id,
            uuid: transaction.uuid,
            wallet_id: wallet.id(),
            owner_type: wallet.owner_type(),
            owner_id: wallet.owner_id(),
            transaction_type: transaction.transaction_type,
            direction: transaction.direction,
            status: transaction.status,
            amount: transaction.amount,
            currency: wallet.currency(),
            fee_amount: transaction.fee_amount,
            net_amount: transaction.net_amount,
            reference_type,
            reference_id,
            transfer_uuid,
            reference_uuid,
            counterparty_wallet_id: transaction.counterparty_wallet_id,
            external_reference: owned(text.external_reference.as_deref()),
            idempotency_key: owned(text.idempotency_key.as_deref()),
            business_id: wallet.business_id(),
            branch_id: wallet.branch_id(),
            description: owned(text.description.as_deref()),
            meta: owned(text.meta.as_deref()),
            refunded_amount: transaction.refunded_amount,
            reversed_by_transaction_id: transaction.reversed_by_transaction_id,
            completed_at_ms: transaction.completed_at_ms,
            reversed_at_ms: transaction.reversed_at_ms,
            created_at_ms: transaction.created_at_ms,
        }
    }
}

/// A ledger entry (contract §2.4); `hash` and `prev_hash` go into the entry's `meta` in JSON.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct EntryView {
    pub id: EntryId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub transaction_id: TransactionId,
    pub direction: Direction,
    pub amount: Decimal,
    pub signed_amount: Decimal,
    pub currency: Currency,
    pub balance_after: Decimal,
    pub entry_type: TransactionType,
    /// Always "posted".
    pub status: &'static str,
    pub idempotency_key: Option<String>,
    pub description: Option<String>,
    pub reversed_by_entry_id: Option<EntryId>,
    pub is_reversal: bool,
    pub reverses_entry_id: Option<EntryId>,
    pub created_at_ms: i64,
    pub hash: Hash,
    pub prev_hash: Hash,
}

impl EntryView {
    /// `prev_hash`: hash of the entry before it in the wallet (zero for the first).
    #[must_use]
    pub fn of(wallet: impl Into<Holder>, entry: &LedgerEntry, prev_hash: Hash) -> Self {
        let wallet = wallet.into();
        Self {
            id: entry.id,
            uuid: entry.uuid,
            wallet_id: wallet.id(),
            transaction_id: entry.transaction_id,
            direction: entry.direction,
            amount: entry.amount,
            signed_amount: entry.signed_amount(),
            currency: wallet.currency(),
            balance_after: entry.balance_after,
            entry_type: entry.entry_type,
            status: "posted",
            idempotency_key: owned(entry.idempotency_key.as_deref()),
            description: owned(entry.description.as_deref()),
            reversed_by_entry_id: entry.reversed_by_entry_id,
            is_reversal: entry.is_reversal(),
            reverses_entry_id: entry.reverses_entry_id,
            created_at_ms: entry.created_at_ms,
            hash: entry.hash,
            prev_hash,
        }
    }
}

/// A hold (contract §2.5).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct HoldView {
    pub id: HoldId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub status: HoldStatus,
    pub reason: Option<String>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    pub closed_at_ms: Option<i64>,
    pub captured_amount: Option<Decimal>,
    pub capture_transaction_id: Option<TransactionId>,
}

impl HoldView {
    #[must_use]
    pub fn of(wallet: impl Into<Holder>, hold: &Hold) -> Self {
        let wallet = wallet.into();
        Self {
            id: hold.id,
            uuid: hold.uuid,
            wallet_id: wallet.id(),
            amount: hold.amount,
            currency: wallet.currency(),
            status: hold.status,
            reason: owned(hold.reason.as_deref()),
            created_at_ms: hold.created_at_ms,
            expires_at_ms: hold.expires_at_ms,
            closed_at_ms: hold.closed_at_ms,
            captured_amount: hold.captured_amount,
            capture_transaction_id: hold.capture_transaction_id,
        }
    }
}

/// Result of `verify-integrity` (decisions.md §3).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct IntegrityReport {
    pub wallet_id: WalletId,
    pub valid: bool,
    pub entries_checked: u64,
    /// Sum of the ledger as recomputed (`None` if it overflowed, which also makes it invalid).
    pub ledger_balance: Option<Decimal>,
    pub cached_balance: Decimal,
    pub chain_head: Hash,
    pub first_invalid_entry_id: Option<EntryId>,
    pub verified_at_ms: i64,
}
