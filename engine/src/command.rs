//! Commands (what a caller asks), the context they run in, and outcomes (what the caller gets back).
//!
//! A command is validated and turned into events by `Shard::decide`; it is never logged itself (the
//! events are). Every input that depends on time or chance is in [`Context`], so `decide` is a pure
//! function of `(state, command, context)`.

use rust_decimal::Decimal;

use crate::currency::Currency;
use crate::error::Rejection;
use crate::ids::{Uuid, WalletId};
use crate::transfer::OutgoingTransfer;
use crate::view::{EntryView, HoldView, IntegrityReport, TransactionView, WalletView};
use crate::wallet::{OwnerType, WalletType};

/// Longest accepted text field (description, reason, meta, references, idempotency key), in bytes.
pub const TEXT_BYTES_MAX: usize = 4096;

/// Most holds one `ExpireHolds` command closes (bounds one WAL record).
pub const EXPIRE_BATCH_MAX: u32 = 10_000;

/// Inputs from outside the state machine.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Context {
    /// Wall-clock time of the command, unix milliseconds. Stored in the events it produces.
    pub now_ms: i64,
    /// 32 random bytes from the caller (e.g. getrandom), fresh per command; uuids are derived from it
    /// (see `ids` module docs).
    pub entropy: [u8; 32],
}

impl Context {
    #[must_use]
    pub fn new(now_ms: i64, entropy: [u8; 32]) -> Self {
        Self { now_ms, entropy }
    }
}

/// Optional client text of a money movement.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct Details {
    pub description: Option<String>,
    pub external_reference: Option<String>,
    pub idempotency_key: Option<String>,
    /// Client metadata, kept as an opaque string (JSON text from the API).
    pub meta: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateWallet {
    pub owner_type: OwnerType,
    pub owner_id: u64,
    pub currency: Currency,
    pub wallet_type: WalletType,
    pub business_id: u64,
    /// 0 = no branch.
    pub branch_id: u64,
    pub meta: Option<String>,
}

/// Deposit or withdraw.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MoneyMove {
    pub wallet_id: WalletId,
    pub amount: Decimal,
    /// When given it must be the wallet's currency.
    pub currency: Option<Currency>,
    pub details: Details,
}

/// A transfer, same-shard ([`Command::Transfer`]) or the reserve step of a cross-shard one.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferArgs {
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub details: Details,
}

/// The credit step of a cross-shard transfer, built from the source shard's [`OutgoingTransfer`].
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct TransferCredit {
    pub transfer_uuid: Uuid,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub description: Option<String>,
}

impl TransferCredit {
    /// The credit command for a reserved transfer.
    #[must_use]
    pub fn for_transfer(transfer: &OutgoingTransfer) -> Self {
        Self {
            transfer_uuid: transfer.uuid,
            source_wallet_id: transfer.source_wallet_id,
            target_wallet_id: transfer.target_wallet_id,
            amount: transfer.amount,
            currency: transfer.currency,
            description: transfer.description.as_deref().map(str::to_owned),
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PlaceHold {
    pub wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub reason: Option<String>,
    /// 1..=10080, default 60.
    pub expiry_minutes: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CaptureHold {
    pub hold_uuid: Uuid,
    /// Default: the whole hold. The rest of the hold is released.
    pub amount: Option<Decimal>,
    /// Account credited with the captured funds: a wallet of this shard in the same currency; default
    /// the currency's float account.
    pub counter_wallet_id: Option<WalletId>,
    pub details: Details,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Refund {
    pub original_transaction_uuid: Uuid,
    pub amount: Decimal,
    pub reason: Option<String>,
    pub details: Details,
}

/// Everything that can change a shard.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Command {
    CreateWallet(CreateWallet),
    FreezeWallet {
        wallet_id: WalletId,
    },
    /// Only a frozen wallet can be unfrozen.
    UnfreezeWallet {
        wallet_id: WalletId,
    },
    /// Credit the wallet, debit the currency's float account.
    Deposit(MoneyMove),
    /// Debit the wallet, credit the float account; spendable must cover it.
    Withdraw(MoneyMove),
    /// Both wallets on this shard.
    Transfer(TransferArgs),
    /// Cross-shard step 1, on the source's shard (target on another shard).
    TransferReserve(TransferArgs),
    /// Cross-shard step 2, on the target's shard.
    TransferCredit(TransferCredit),
    /// Cross-shard step 3 (credit done), on the source's shard.
    TransferFinalize {
        transfer_uuid: Uuid,
    },
    /// Cross-shard undo (credit refused), on the source's shard.
    TransferRelease {
        transfer_uuid: Uuid,
    },
    PlaceHold(PlaceHold),
    ReleaseHold {
        hold_uuid: Uuid,
    },
    CaptureHold(CaptureHold),
    /// Expire up to `max_holds` (at most [`EXPIRE_BATCH_MAX`]) active holds whose expiry is at or
    /// before `Context::now_ms`, oldest expiry first.
    ExpireHolds {
        max_holds: u32,
    },
    /// Credit a wallet against one of its debits, funded by the float account.
    Refund(Refund),
    /// Mirror every entry of the transaction's posting.
    Reverse {
        transaction_uuid: Uuid,
        reason: String,
    },
    /// Recompute the wallet's chain and balance; a valid result sets `balance_verified_at`.
    VerifyIntegrity {
        wallet_id: WalletId,
    },
}

/// What `Shard::execute` returns for an accepted command.
#[derive(Clone, Debug, PartialEq, Eq)]
#[non_exhaustive]
pub enum Outcome {
    /// Create, freeze, unfreeze.
    Wallet(WalletView),
    /// Deposit, withdraw, transfer (the source's debit side), refund.
    Transaction(TransactionView),
    TransferReserved {
        transfer: OutgoingTransfer,
        transaction: TransactionView,
    },
    /// `duplicate`: this uuid was credited before; nothing changed.
    TransferCredited {
        transaction: TransactionView,
        duplicate: bool,
    },
    /// Finalize or release (the state says which).
    TransferSettled(OutgoingTransfer),
    /// Place, release, capture.
    Hold(HoldView),
    HoldsExpired {
        count: usize,
    },
    /// The reversal transaction of the requested transaction's wallet, and every new mirror entry.
    Reversal {
        transaction: TransactionView,
        entries: Vec<EntryView>,
    },
    Integrity(IntegrityReport),
}

/// A page request: 1-based page number, 1..=100 records a page.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct Page {
    page: u32,
    per_page: u32,
}

impl Page {
    pub const PER_PAGE_MAX: u32 = 100;
    pub const PER_PAGE_DEFAULT: u32 = 20;

    pub fn new(page: u32, per_page: u32) -> Result<Self, Rejection> {
        if page == 0 {
            return Err(Rejection::InvalidRequest("page must be at least 1"));
        }
        if !(1..=Self::PER_PAGE_MAX).contains(&per_page) {
            return Err(Rejection::InvalidRequest("per_page must be 1 to 100"));
        }
        Ok(Self { page, per_page })
    }

    #[must_use]
    pub fn page(&self) -> u32 {
        self.page
    }

    #[must_use]
    pub fn per_page(&self) -> u32 {
        self.per_page
    }

    /// Records to skip before this page.
    #[must_use]
    pub fn offset(&self) -> usize {
        let skipped = u64::from(self.page - 1) * u64::from(self.per_page);
        usize::try_from(skipped).unwrap_or(usize::MAX)
    }
}

impl Default for Page {
    fn default() -> Self {
        Self {
            page: 1,
            per_page: Self::PER_PAGE_DEFAULT,
        }
    }
}

/// One page of records plus the total number of records that matched.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Paged<T> {
    pub records: Vec<T>,
    pub total: u64,
}

/// Pages an iterator that yields records in display order (newest first).
pub fn paginate<T>(records: impl Iterator<Item = T>, page: Page) -> Paged<T> {
    let mut total = 0u64;
    let mut out = Vec::new();
    let offset = page.offset();
    let limit = usize::try_from(page.per_page()).unwrap_or(usize::MAX);
    for (index, record) in records.enumerate() {
        total += 1;
        if index >= offset && out.len() < limit {
            out.push(record);
        }
    }
    Paged {
        records: out,
        total,
    }
}
