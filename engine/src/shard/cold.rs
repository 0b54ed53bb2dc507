//! Where a shard finds the records that left its memory.
//!
//! Memory holds hot state only (ARCHITECTURE.md, invariant 10): balances, chain heads, counters,
//! active holds, pending payments, open payouts and settlements, and the records the history
//! indexer has not filed yet (payment links and QR payloads included: they are read back when
//! used). Everything older is in the history store, which the runtime lends the shard as a
//! [`ColdHistory`]. Three modes ([`Recall`]):
//!
//! * **`Keep`**: a shard with no store (tests, benches, tools): nothing ever leaves memory, and
//!   the shard behaves exactly as a whole-history state machine.
//! * **`Replay`**: recovery and background snapshots. Records are filed into the store from the
//!   log itself, so replay keeps none of them in memory: transactions, entries and closed holds
//!   only advance the counters, chain heads and balances; a change to a record that is not in
//!   memory (a reversal mark, a refund total) is left to the store's filing. Active holds stay.
//! * **`Store`**: a running shard. Records stay in memory, stamped with the command that last
//!   changed them, until the indexer has filed that command ([`crate::shard::Shard::evict_filed`]).
//!   A record that is not in memory is read from the store, which then holds its latest version:
//!   a record leaves memory only once its latest version is filed, and a later change brings it
//!   back into memory (recalled) until that change is filed too.

use std::fmt;
use std::sync::Arc;

use crate::commerce::payment::{Payment, PaymentLink, QrCode};
use crate::commerce::payout::{Payout, Settlement};
use crate::ledger::hold::Hold;
use crate::ledger::transaction::{Hash, LedgerEntry, Transaction};
use crate::shard::moves::{MoveKey, MoveRecord};
use crate::values::error::Rejection;
use crate::values::ids::{EntryId, HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};

/// A failed read of the store; the command is refused as unavailable.
pub type ColdResult<T> = Result<T, String>;

/// Read access to filed history (implemented by the runtime's history store).
pub trait ColdHistory: Send + Sync {
    fn transaction(&self, wallet: WalletId, id: TransactionId) -> ColdResult<Option<Transaction>>;
    fn entry(&self, wallet: WalletId, id: EntryId) -> ColdResult<Option<LedgerEntry>>;
    fn hold(&self, wallet: WalletId, id: HoldId) -> ColdResult<Option<Hold>>;
    fn locate_transaction(&self, uuid: Uuid) -> ColdResult<Option<(WalletId, TransactionId)>>;
    fn locate_hold(&self, uuid: Uuid) -> ColdResult<Option<(WalletId, HoldId)>>;
    /// Every filed transaction of `wallet`, oldest first, until `visit` returns false.
    fn for_each_transaction(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Transaction) -> bool,
    ) -> ColdResult<()>;
    /// Every filed transaction of `wallet` with an entry on it created within `range_ms`
    /// (inclusive), once each, in no particular order: reads only that range of the date index.
    fn for_each_transaction_within(
        &self,
        wallet: WalletId,
        range_ms: (i64, i64),
        visit: &mut dyn FnMut(&Transaction),
    ) -> ColdResult<()>;
    /// The filed entries of `wallet` after `after` (all of them for `None`) with the hash of the
    /// entry before each, oldest first, until `visit` returns false: reads only that range.
    fn for_each_entry_after(
        &self,
        wallet: WalletId,
        after: Option<EntryId>,
        visit: &mut dyn FnMut(&Hash, &LedgerEntry) -> bool,
    ) -> ColdResult<()>;
    /// Every filed entry of `wallet`, oldest first, until `visit` returns false.
    fn for_each_entry(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Hash, &LedgerEntry) -> bool,
    ) -> ColdResult<()> {
        self.for_each_entry_after(wallet, None, visit)
    }
    /// A filed cross-shard move record (`shard::moves`). Required, with no default: a store
    /// that answered "none" for a move it never filed would let a repeated credit post twice.
    fn moved(&self, key: MoveKey) -> ColdResult<Option<MoveRecord>>;
    /// The reservation uuid of a payment's charge that is not released, as filed.
    fn open_charge(&self, payment_uuid: Uuid) -> ColdResult<Option<Uuid>>;
    /// The filed payment with this uuid.
    fn payment(&self, uuid: Uuid) -> ColdResult<Option<Payment>>;
    /// Every filed payment to merchant wallet `merchant`, oldest first, until `visit` returns
    /// false.
    fn for_each_payment(
        &self,
        merchant: WalletId,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> ColdResult<()>;
    /// Every filed payment (of any shard) that completed within `from_ms..=to_ms`, until
    /// `visit` returns false.
    fn for_each_completed_payment(
        &self,
        from_ms: i64,
        to_ms: i64,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> ColdResult<()>;
    /// The filed payout with this id.
    fn payout(&self, id: PayoutId) -> ColdResult<Option<Payout>>;
    /// Every filed payout of `wallet`, oldest first, until `visit` returns false.
    fn for_each_payout(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Payout) -> bool,
    ) -> ColdResult<()>;
    /// The filed settlement with this id.
    fn settlement(&self, id: SettlementId) -> ColdResult<Option<Settlement>>;
    /// The executed settlement that claimed merchant credit `transaction`, as filed. Required,
    /// with no default: a store that answered "none" for a claim it holds would let a payment
    /// be settled twice.
    fn settled_by(&self, transaction: TransactionId) -> ColdResult<Option<SettlementId>>;
    /// The filed payment link with this uuid.
    fn payment_link(&self, uuid: Uuid) -> ColdResult<Option<PaymentLink>>;
    /// The filed QR payload with this uuid.
    fn qr(&self, uuid: Uuid) -> ColdResult<Option<QrCode>>;
}

/// How the shard treats records that are not in its memory (see the module docs).
#[derive(Clone, Default)]
pub enum Recall {
    #[default]
    Keep,
    Replay,
    Store(Arc<dyn ColdHistory>),
}

impl fmt::Debug for Recall {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            Recall::Keep => "Keep",
            Recall::Replay => "Replay",
            Recall::Store(_) => "Store",
        })
    }
}

impl Recall {
    /// Whether records leave memory once filed.
    pub(crate) fn evicts(&self) -> bool {
        !matches!(self, Recall::Keep)
    }

    pub(crate) fn store(&self) -> Option<&dyn ColdHistory> {
        match self {
            Recall::Store(store) => Some(store.as_ref()),
            Recall::Keep | Recall::Replay => None,
        }
    }
}

/// A store failure as the rejection a client sees (503).
pub(crate) fn unavailable(reason: &str) -> Rejection {
    tracing::error!(%reason, "reading filed history failed");
    Rejection::Unavailable("the history store could not be read")
}
