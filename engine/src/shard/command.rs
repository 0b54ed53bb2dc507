//! Commands (what a caller asks), the context they run in, and outcomes (what the caller gets back).
//!
//! A command is validated and turned into events by `Shard::decide`; it is never logged itself (the
//! events are). Every input that depends on time or chance is in [`Context`], so `decide` is a pure
//! function of `(state, command, context)`.

use rust_decimal::Decimal;

use crate::commerce::payment::{PaymentMoveKind, PaymentProvider, PaymentReservation};
use crate::commerce::payout::PeriodType;
use crate::commerce::view::{PaymentLinkView, PaymentView, PayoutView, QrView, SettlementView};
use crate::ledger::transfer::OutgoingTransfer;
use crate::ledger::view::{EntryView, HoldView, IntegrityReport, TransactionView, WalletView};
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::values::currency::Currency;
use crate::values::error::Rejection;
use crate::values::fee::FeeRule;
use crate::values::ids::{PayoutId, SettlementId, Uuid, WalletId};

/// Longest accepted text field (description, reason, meta, references, idempotency key), in bytes.
pub const TEXT_BYTES_MAX: usize = 4096;

/// Most holds one `ExpireHolds` command closes (bounds one WAL record).
pub const EXPIRE_BATCH_MAX: u32 = 10_000;

/// How far behind its shard's posting floor a command's clock may be and the whole command
/// still be decided at the floor (`Shard::execute`): the skew of commands stamped on several
/// threads and decided in arrival order. Past it the clock stepped back: only the command's
/// postings take the floor's time, its deadlines (a hold's expiry, a link's) follow its own
/// clock, and the shard's actor logs a warning.
pub const CLOCK_SKEW_ABSORBED_MS: i64 = 1_000;

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
    /// The committed atomic batch the transfer belongs to: its credit is not refused by a
    /// freeze that came after the batch's decision, and its source may be on this shard.
    pub batch: Option<Uuid>,
}

/// What [`Command::TransferBatchMark`] logs.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchMark {
    /// The reservations of the batch's items on this shard (the batch's source shards, sorted).
    Prepared {
        shards: Vec<u32>,
        transfers: Vec<Uuid>,
    },
    /// Every transfer of the batch here is settled.
    Closed,
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
            batch: None,
        }
    }

    /// The credit of a transfer of the committed atomic batch `batch`.
    #[must_use]
    pub fn for_batch(transfer: &OutgoingTransfer, batch: Uuid) -> Self {
        Self {
            batch: Some(batch),
            ..Self::for_transfer(transfer)
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

/// Starts a payment, on the merchant wallet's shard (see `payment` docs).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct InitiatePayment {
    /// The merchant (business) id; the merchant wallet must belong to it.
    pub merchant_id: u64,
    pub merchant_wallet_id: WalletId,
    /// Recorded; may live on another shard (checked here only when it is local).
    pub payer_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    /// The currency's fee rule from the configuration; the split is computed now and stored.
    pub fee: FeeRule,
    pub provider: PaymentProvider,
    pub description: Option<String>,
    /// Opaque client metadata (JSON text).
    pub metadata: Option<String>,
    pub idempotency_key: Option<String>,
    /// A payment link of this merchant wallet: active, not expired, same amount and currency.
    pub payment_link_uuid: Option<Uuid>,
}

/// Refunds a completed payment, in part (`amount`) or in whole (default: what is left).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct RefundPayment {
    pub payment_uuid: Uuid,
    pub amount: Option<Decimal>,
    pub reason: Option<String>,
}

/// An outside provider's verdict on a pending `sandbox` payment (its webhook).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentProviderResult {
    pub payment_uuid: Uuid,
    pub succeeded: bool,
    /// When given it must be the payment's `provider_ref`.
    pub provider_ref: Option<String>,
}

/// Cross-shard confirm, step 1, on the payer's shard (built from the payment on the merchant's).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentReserve {
    pub payment_uuid: Uuid,
    pub payer_wallet_id: WalletId,
    pub merchant_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub description: Option<String>,
}

impl PaymentReserve {
    /// The reserve command that confirms `payment` across shards.
    #[must_use]
    pub fn for_payment(payment: &PaymentView) -> Self {
        Self {
            payment_uuid: payment.uuid,
            payer_wallet_id: payment.payer_wallet_id,
            merchant_wallet_id: payment.merchant_wallet_id,
            amount: payment.amount,
            currency: payment.currency,
            description: payment.description.clone(),
        }
    }
}

/// Cross-shard payment step 2, on the target wallet's shard.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PaymentCredit {
    pub reservation_uuid: Uuid,
    pub payment_uuid: Uuid,
    pub kind: PaymentMoveKind,
    pub source_wallet_id: WalletId,
    pub target_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
}

impl PaymentCredit {
    /// The credit command for a reservation.
    #[must_use]
    pub fn for_reservation(reservation: &PaymentReservation) -> Self {
        Self {
            reservation_uuid: reservation.uuid,
            payment_uuid: reservation.payment_uuid,
            kind: reservation.kind,
            source_wallet_id: reservation.source_wallet_id,
            target_wallet_id: reservation.target_wallet_id,
            amount: reservation.amount,
            currency: reservation.currency,
        }
    }
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatePaymentLink {
    pub merchant_wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    pub description: Option<String>,
    /// 1..=43200, default 1440 (one day).
    pub expires_in_minutes: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateQr {
    pub merchant_wallet_id: WalletId,
    /// A dynamic QR fixes the amount; without it the payer types it.
    pub amount: Option<Decimal>,
    pub currency: Currency,
    /// Default: the wallet's branch.
    pub branch_id: Option<u64>,
    /// 1..=43200, default 1440 (one day).
    pub expires_in_minutes: Option<u32>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreatePayout {
    pub wallet_id: WalletId,
    pub amount: Decimal,
    pub currency: Currency,
    /// Non-empty.
    pub payout_method: String,
    /// Opaque JSON text.
    pub payout_destination: Option<String>,
    pub description: Option<String>,
    pub idempotency_key: Option<String>,
    /// Employee id (four eyes: this employee may not approve it).
    pub created_by: u64,
}

/// The payout provider's verdict on an executed payout (its webhook).
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct PayoutProviderResult {
    pub payout_id: PayoutId,
    pub succeeded: bool,
    pub provider_ref: Option<String>,
}

#[derive(Clone, Debug, PartialEq, Eq)]
pub struct CreateSettlement {
    pub wallet_id: WalletId,
    pub period_type: PeriodType,
    /// First day, as its UTC day start (unix ms).
    pub period_start_ms: i64,
    /// Last day (inclusive), as its UTC day start.
    pub period_end_ms: i64,
    pub notes: Option<String>,
    pub idempotency_key: Option<String>,
    /// Employee id (four eyes: this employee may not approve it).
    pub created_by: u64,
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
    /// An atomic cross-shard batch's item, on the source's shard: step 1 whether or not the
    /// target is on this shard, so that nothing reaches a target before the batch commits
    /// (`runtime::atomic_batch`).
    TransferBatchReserve(TransferArgs),
    /// An atomic cross-shard batch's prepare or close on this shard (`runtime::atomic_batch`).
    TransferBatchMark {
        batch: Uuid,
        mark: BatchMark,
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
        /// The check of the entries the history store held, run off the shard's thread
        /// ([`crate::runtime::Engine::verify_integrity`]); the shard checks only the entries
        /// after it. `None`: the shard checks the whole chain itself.
        filed: Option<Box<crate::ledger::transaction::ChainChecker>>,
    },
    // ----- commerce (records on the merchant's / wallet's shard; see `payment`, `payout`) -----
    /// A pending payment, on the merchant wallet's shard.
    InitiatePayment(InitiatePayment),
    /// Completes a pending `wallet` payment whose payer is on this shard too: one posting.
    ConfirmPayment {
        payment_uuid: Uuid,
    },
    /// Pending only → cancelled.
    CancelPayment {
        payment_uuid: Uuid,
    },
    /// Pending only → failed (a provider failure); no money moves.
    FailPayment {
        payment_uuid: Uuid,
    },
    /// A `sandbox` payment's webhook: success completes it (funded by the float), failure fails it.
    PaymentProviderResult(PaymentProviderResult),
    /// On the merchant's shard; crosses shards when the payer lives elsewhere.
    RefundPayment(RefundPayment),
    /// Cross-shard confirm step 1, on the payer's shard.
    PaymentReserve(PaymentReserve),
    /// Cross-shard payment step 2 (charge or refund), on the target wallet's shard.
    PaymentCredit(PaymentCredit),
    /// Cross-shard payment step 3 (credit done), on the reservation's shard.
    PaymentReserveFinalize {
        reservation_uuid: Uuid,
    },
    /// Cross-shard payment undo (credit refused), on the reservation's shard.
    PaymentReserveRelease {
        reservation_uuid: Uuid,
    },
    CreatePaymentLink(CreatePaymentLink),
    CreateQr(CreateQr),
    /// Holds the funds and records a pending payout.
    CreatePayout(CreatePayout),
    /// Pending → approved; `by` may not be the creator.
    ApprovePayout {
        payout_id: PayoutId,
        by: u64,
        notes: Option<String>,
    },
    /// Pending → rejected (reason required); the hold is released.
    RejectPayout {
        payout_id: PayoutId,
        by: u64,
        reason: String,
    },
    /// Pending or approved → cancelled; the hold is released.
    CancelPayout {
        payout_id: PayoutId,
        by: u64,
    },
    /// Approved → executed: the hold is captured into payout clearing.
    ExecutePayout {
        payout_id: PayoutId,
        by: u64,
    },
    /// Executed → paid, or → failed with the funds returned.
    PayoutProviderResult(PayoutProviderResult),
    CreateSettlement(CreateSettlement),
    /// Pending → approved; `by` may not be the creator.
    ApproveSettlement {
        settlement_id: SettlementId,
        by: u64,
        notes: Option<String>,
    },
    /// Pending → rejected (reason required); its items are freed.
    RejectSettlement {
        settlement_id: SettlementId,
        by: u64,
        reason: String,
    },
    /// Pending or approved → cancelled; its items are freed.
    CancelSettlement {
        settlement_id: SettlementId,
        by: u64,
    },
    /// Approved → executed: the net total moves into settlement clearing.
    ExecuteSettlement {
        settlement_id: SettlementId,
        by: u64,
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
    /// Initiate, same-shard confirm, cancel, fail, provider result, same-shard refund.
    Payment(PaymentView),
    /// A cross-shard payment step 1 (`PaymentReserve`, or `RefundPayment` with a remote payer):
    /// the reservation and the source wallet's debit.
    PaymentReserved {
        reservation: PaymentReservation,
        transaction: TransactionView,
    },
    /// `duplicate`: this reservation was credited before; nothing changed.
    PaymentCredited {
        transaction: TransactionView,
        duplicate: bool,
    },
    /// The target refused a cross-shard payment credit (and logged the refusal, so every later
    /// credit of the reservation is refused too): release the reservation.
    PaymentCreditRefused {
        rejection: Rejection,
    },
    /// Finalize or release (the state says which).
    PaymentReservationSettled(PaymentReservation),
    PaymentLink(PaymentLinkView),
    Qr(QrView),
    Payout(PayoutView),
    Settlement(SettlementView),
    /// A batch of transfers (`POST /v1/transfers/batch`): one result per item, in order. Never
    /// returned by `Shard::execute`; the runtime assembles it (`runtime::batch`).
    TransferBatch(Box<BatchAnswer>),
    /// An atomic batch's prepare or close was logged (or, for a close, found done).
    TransferBatchMarked,
}

/// What became of one item of a transfer batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum BatchItemResult {
    /// Posted: the source's debit side, as a single transfer answers it.
    Posted(Box<TransactionView>),
    /// The engine refused it (or, in an atomic batch, it is the item that failed).
    Rejected(Rejection),
    /// The API refused it before it reached the engine: its rendered error, opaque here.
    Refused(Vec<u8>),
    /// Not posted because another item of its atomic batch failed.
    NotPosted,
}

/// The answer to a transfer batch.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct BatchAnswer {
    pub atomic: bool,
    pub items: Vec<BatchItemResult>,
    /// Atomic batches: the first item that failed (then nothing was posted).
    pub failed: Option<usize>,
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

    /// The first `count` records, newest first: what one shard contributes when the pages of
    /// several shards are merged (page `p` of the merge needs each shard's first `p × per_page`).
    /// Unlike [`Page::new`] not capped at 100.
    #[must_use]
    pub fn first(count: u32) -> Self {
        Self {
            page: 1,
            per_page: count.max(1),
        }
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
