//! The shard: one executor's wallets, system accounts, indexes and id sequences.
//!
//! # Invariants
//!
//! [`Shard::check_invariants`] recomputes each of these from the records and names the first breach:
//!
//! 1. **Money is conserved.** Per currency, the signed amounts of all entries of the shard, system
//!    accounts included, sum to zero (every posting balances, see `ledger` docs). Across shards the
//!    per-shard sums ([`Shard::balance_sums_by_currency`]) therefore also sum to zero.
//! 2. **Caches are true.** Each wallet's `balance` equals the sum of its ledger and each entry's
//!    `balance_after` the running sum; `held` equals the sum of its active holds.
//! 3. **Spendable is never negative**: `available = balance − held ≥ 0` for every non-system wallet.
//! 4. **Chains hold.** Every wallet's hash chain recomputes and ends at its stored chain head.
//! 5. **In transit is accounted for.** Per currency, the shard's in-transit account equals the
//!    reserved-or-finalized outgoing transfers and payment reservations minus the credited incoming
//!    ones; across shards the in-transit accounts net to zero once nothing is still `reserved`.
//!    Finished moves leave memory once filed (`moves`), so the finalized and credited ones are
//!    kept as per-currency totals updated in apply ([`Shard::transit_totals`]), and the records
//!    in memory (those in flight) add their part.
//! 6. **Indexes agree with the records** (owner uniqueness, uuid lookups, hold expiry queue,
//!    settled transactions, open charges, payout holds).
//! 7. **Commerce records agree with the money** (see `invariants_commerce`): a payment's fee + net
//!    is its amount and its refunded total is what its refund postings say; a completed payment has
//!    its merchant credit; a payout's hold is active exactly while the payout is pending or approved
//!    and captured for its amount once executed; a settlement's totals are its items' sums and no
//!    transaction is in two live settlements.
//!
//! And by construction (tested by replay): **`apply` is deterministic**. It reads nothing but the state
//! and the event, never iterates a `HashMap` (hash maps are lookup-only; everything ordered is a `Vec`
//! or `BTreeMap`), so the same events give byte-identical state, compared with
//! [`Shard::state_digest`].
//!
//! # Layout and memory
//!
//! Wallet ids of this shard are dense (`id = seq * shard_count + shard_index`, see `ids`), and wallets
//! are never deleted, so wallets live in a `Vec` at position `seq − 1` instead of a `HashMap`: lookup
//! is one division, and a wallet costs `size_of::<Wallet>()` (≤ 136 bytes) with no hash-table slack.
//! Spare vector capacity is not resident until written (large allocations grow by `mremap`). The
//! owner-uniqueness index adds a 24-byte key/value plus a control byte per wallet, ×2.3 in the worst
//! case of hash-table load (7/16, just after growth): ≈ 57 bytes. So an idle wallet costs at most
//! 136 + 57 = 193 bytes and ≈ 175 on average, against the 200-byte target
//! ([`IDLE_WALLET_BYTES_BUDGET`], checked by a test from the type sizes).

use std::borrow::Cow;
use std::collections::{BTreeMap, HashMap, VecDeque};

// Maps keyed by ids and uuids this process minted (never a client's input): Fx hashing instead
// of SipHash, which was ~6 % of the shard thread's samples under batched transfers.
use rustc_hash::FxHashMap;

use rust_decimal::Decimal;

use crate::commerce::state::{Commerce, CommerceIndex};
use crate::commerce::view::RecordUuids;
use crate::ledger::hold::Hold;
use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::Hash;
use crate::ledger::transaction::{ChainChecker, LedgerEntry, Transaction};
use crate::ledger::transfer::{
    IncomingTransfer, OutgoingTransfer, PreparedBatch, TransferState, TransitTotals,
};
use crate::ledger::view::{BalanceView, EntryView, HoldView, TransactionView, WalletView};
use crate::ledger::wallet::{OwnerType, Wallet, WalletType};
use crate::shard::cold::{unavailable, ColdHistory, ColdResult, Recall};
use crate::shard::command::{paginate, Page, Paged};
use crate::values::currency::Currency;
use crate::values::error::Rejection;
use crate::values::ids::{
    EntryId, HoldId, IdSpace, PayoutId, SettlementId, TransactionId, Uuid, UuidKind, WalletId,
};
use crate::values::sealed::UuidKey;

/// Whether a shard holds a record, as routing asks every shard for one named by uuid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Presence {
    Here,
    Absent,
    /// The store could not be read: the record may be here. Routing prefers a shard that
    /// answered [`Presence::Here`], and else sends the command to this one, where it is refused
    /// as unavailable rather than as not found.
    Unknown,
}

impl Presence {
    /// What a lookup on this shard found.
    #[must_use]
    pub fn of<T>(found: Result<Option<T>, Rejection>) -> Self {
        match found {
            Ok(Some(_)) => Presence::Here,
            Ok(None) => Presence::Absent,
            Err(_) => Presence::Unknown,
        }
    }
}

/// Target resident bytes of an idle wallet, including its index slots.
pub const IDLE_WALLET_BYTES_BUDGET: usize = 200;

/// Wallets an eviction pass keeps room for between passes (`Shard::evicting`): 32 KiB.
const EVICTING_KEPT: usize = 4096;

/// Uniqueness key: one wallet per (owner, currency, wallet type). System accounts use owner id 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct OwnerKey {
    pub(crate) owner_id: u64,
    pub(crate) currency: Currency,
    pub(crate) owner_type: OwnerType,
    pub(crate) wallet_type: WalletType,
}

/// Two words instead of the derived six writes (a length, the code bytes, the minor unit, two
/// discriminants): the owner index takes one insert per wallet when a snapshot loads, and its
/// SipHash was 8 % of a 1M-wallet restart. Equal keys write equal words.
impl std::hash::Hash for OwnerKey {
    fn hash<H: std::hash::Hasher>(&self, state: &mut H) {
        state.write_u64(self.owner_id);
        state.write_u64(
            u64::from(self.currency.packed()) << 16
                | (self.owner_type as u64) << 8
                | self.wallet_type as u64,
        );
    }
}

impl OwnerKey {
    pub(crate) fn of(wallet: &Wallet) -> Self {
        Self {
            owner_id: wallet.owner_id(),
            currency: wallet.currency(),
            owner_type: wallet.owner_type(),
            wallet_type: wallet.wallet_type(),
        }
    }

    pub(crate) fn system(currency: Currency, wallet_type: WalletType) -> Self {
        Self {
            owner_id: 0,
            currency,
            owner_type: OwnerType::System,
            wallet_type,
        }
    }
}

/// Lookup structures derived from the records; rebuilt when a snapshot is loaded, never serialised.
#[derive(Clone, Debug, Default)]
pub(crate) struct Indexes {
    pub(crate) owners: HashMap<OwnerKey, WalletId>,
    pub(crate) transactions: FxHashMap<Uuid, (WalletId, TransactionId)>,
    pub(crate) holds: FxHashMap<Uuid, (WalletId, HoldId)>,
    /// Active holds by expiry, the queue `expire_holds` reads in order.
    pub(crate) hold_expiry: BTreeMap<(i64, HoldId), WalletId>,
    pub(crate) commerce: CommerceIndex,
}

/// A payment link or QR payload, as eviction tracks them.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) enum LinkKey {
    Link(Uuid),
    Qr(Uuid),
}

/// Records of one kind changed under a command, by the stamp of that command: where eviction
/// looks once the indexer has filed it. A record may leave memory only once its *last* change
/// is filed, so each key's last stamp is kept beside the queue.
#[derive(Clone, Debug)]
pub(crate) struct Stamped<K> {
    /// Each key's last stamp (absent: loaded from a snapshot, stamp 0).
    last: FxHashMap<K, u64>,
    /// Keys by the stamp of a change, oldest first; a key changed twice is queued twice.
    queue: VecDeque<(u64, K)>,
}

impl<K> Default for Stamped<K> {
    fn default() -> Self {
        Self {
            last: FxHashMap::default(),
            queue: VecDeque::new(),
        }
    }
}

impl<K: Copy + Eq + std::hash::Hash> Stamped<K> {
    /// Notes that `key` changed under the command stamped `stamp`.
    pub(crate) fn touch(&mut self, key: K, stamp: u64) {
        self.last.insert(key, stamp);
        if self.queue.back() != Some(&(stamp, key)) {
            self.queue.push_back((stamp, key));
        }
    }

    /// The next queued key whose change is filed (stamped at or before `filed`), taken off the
    /// queue.
    pub(crate) fn next_filed(&mut self, filed: u64) -> Option<K> {
        match self.queue.front() {
            Some(&(stamp, key)) if stamp <= filed => {
                self.queue.pop_front();
                Some(key)
            }
            _ => None,
        }
    }

    /// Whether `key` changed again after `filed` (its last change is not filed yet).
    pub(crate) fn changed_after(&self, key: &K, filed: u64) -> bool {
        self.last.get(key).is_some_and(|&at| at > filed)
    }

    /// Forgets `key`'s last stamp (it left memory).
    pub(crate) fn forget(&mut self, key: &K) {
        self.last.remove(key);
    }

    /// Empties the queue (everything is about to be evicted regardless of stamps).
    pub(crate) fn clear_queue(&mut self) {
        self.queue.clear();
    }
}

/// One shard's state. See the module docs for its invariants and layout.
#[derive(Clone, Debug)]
pub struct Shard {
    pub(crate) ids: IdSpace,
    pub(crate) next_wallet_seq: u64,
    pub(crate) next_transaction_seq: u64,
    pub(crate) next_entry_seq: u64,
    pub(crate) next_hold_seq: u64,
    /// Position `seq − 1` holds the wallet with sequence number `seq`.
    pub(crate) wallets: Vec<Wallet>,
    pub(crate) transfers_out: BTreeMap<Uuid, OutgoingTransfer>,
    pub(crate) transfers_in: BTreeMap<Uuid, IncomingTransfer>,
    /// Per currency, what finished cross-shard moves sent and received (invariant 5; see
    /// `moves`).
    pub(crate) transit: BTreeMap<Currency, TransitTotals>,
    /// Payments, links, QR payloads, payouts, settlements, cross-shard payment steps.
    pub(crate) commerce: Commerce,
    pub(crate) index: Indexes,
    /// Where records that left memory are found, and whether they leave (see `cold`).
    pub(crate) recall: Recall,
    /// Sequence number of the command being applied: the stamp of every record it changes.
    pub(crate) stamp: u64,
    /// Wallets whose records changed, by the stamp of the change, oldest first: where eviction
    /// looks once the indexer has filed that command.
    pub(crate) touched: VecDeque<(u64, WalletId)>,
    /// The wallets one eviction pass visits (kept for its capacity, up to [`EVICTING_KEPT`];
    /// empty between passes).
    evicting: Vec<WalletId>,
    /// Cross-shard moves finished, by the stamp of the command that finished them, oldest first:
    /// they leave memory once it is filed (see `moves`).
    pub(crate) moves_touched: VecDeque<(u64, crate::shard::moves::MoveKey)>,
    /// Commerce records changed under a command, by the stamp of the change (see `Stamped`):
    /// payments, payouts, settlements, and payment links and QR payloads (both leave memory
    /// once their last change is filed).
    pub(crate) touched_payments: Stamped<Uuid>,
    pub(crate) touched_payouts: Stamped<PayoutId>,
    pub(crate) touched_settlements: Stamped<SettlementId>,
    pub(crate) touched_links: Stamped<LinkKey>,
    /// Whether final payments, payouts and settlements leave memory once filed: false only
    /// while recovery replays for a store written before they were filed (they are filed from
    /// memory afterwards, see `recovery`).
    pub(crate) finals_leave: bool,
    /// The key of the shard's sealed uuids (`values::sealed`), once a command chose it.
    pub(crate) uuid_key: Option<UuidKey>,
    /// Atomic transfer batches prepared here and not closed, by batch uuid
    /// (`runtime::atomic_batch`): in memory until closed, and in the snapshot.
    pub(crate) prepared_batches: BTreeMap<Uuid, PreparedBatch>,
    /// The latest `created_at_ms` of any entry posted on this shard (`i64::MIN`: none known).
    /// A posting is never stamped earlier (`ledger::posting`), so each wallet's entries are in
    /// time order as they are in id order, and the history store finds a period's entries by
    /// searching the wallet's entries instead of keeping a date index of them
    /// (`runtime::history::dated`). In the snapshot from version 8.
    pub(crate) posted_at_floor_ms: i64,
}

impl Shard {
    /// An empty shard. Shard `shard_index` of `shard_count` mints ids ≡ `shard_index` (mod
    /// `shard_count`). Returns `None` unless `shard_index < shard_count`.
    #[must_use]
    pub fn new(shard_index: u32, shard_count: u32) -> Option<Self> {
        Some(Self::with_ids(IdSpace::new(shard_index, shard_count)?))
    }

    pub(crate) fn with_ids(ids: IdSpace) -> Self {
        Self {
            ids,
            next_wallet_seq: 1,
            next_transaction_seq: 1,
            next_entry_seq: 1,
            next_hold_seq: 1,
            wallets: Vec::new(),
            transfers_out: BTreeMap::new(),
            transfers_in: BTreeMap::new(),
            transit: BTreeMap::new(),
            commerce: Commerce::new(),
            index: Indexes::default(),
            recall: Recall::Keep,
            stamp: 0,
            touched: VecDeque::new(),
            evicting: Vec::new(),
            moves_touched: VecDeque::new(),
            touched_payments: Stamped::default(),
            touched_payouts: Stamped::default(),
            touched_settlements: Stamped::default(),
            touched_links: Stamped::default(),
            finals_leave: true,
            uuid_key: None,
            prepared_batches: BTreeMap::new(),
            posted_at_floor_ms: i64::MIN,
        }
    }

    #[must_use]
    pub fn shard_index(&self) -> u32 {
        self.ids.shard_index()
    }

    #[must_use]
    pub fn shard_count(&self) -> u32 {
        self.ids.shard_count()
    }

    /// Whether this shard owns `wallet_id` (it may still not exist).
    #[must_use]
    pub fn owns(&self, wallet_id: WalletId) -> bool {
        self.ids.owns(wallet_id.0)
    }

    /// Number of wallets, system accounts included.
    #[must_use]
    pub fn wallet_count(&self) -> usize {
        self.wallets.len()
    }

    /// All wallets in id order.
    pub fn wallets(&self) -> impl Iterator<Item = &Wallet> {
        self.wallets.iter()
    }

    pub(crate) fn position_of(&self, wallet_id: WalletId) -> Option<usize> {
        let seq = self.ids.seq_of(wallet_id.0)?;
        usize::try_from(seq - 1).ok()
    }

    #[must_use]
    pub fn wallet(&self, wallet_id: WalletId) -> Option<&Wallet> {
        let position = self.position_of(wallet_id)?;
        self.wallets
            .get(position)
            .filter(|wallet| wallet.id() == wallet_id)
    }

    pub(crate) fn wallet_mut(&mut self, wallet_id: WalletId) -> Option<&mut Wallet> {
        let position = self.position_of(wallet_id)?;
        self.wallets
            .get_mut(position)
            .filter(|wallet| wallet.id() == wallet_id)
    }

    /// The wallet, or `wrong_shard` / `not_found`.
    pub fn find_wallet(&self, wallet_id: WalletId) -> Result<&Wallet, Rejection> {
        if !self.owns(wallet_id) {
            return Err(Rejection::WrongShard(wallet_id));
        }
        self.wallet(wallet_id).ok_or(Rejection::NotFound("wallet"))
    }

    /// A customer/merchant/business wallet (system accounts are not addressable by clients).
    pub(crate) fn client_wallet(&self, wallet_id: WalletId) -> Result<&Wallet, Rejection> {
        let wallet = self.find_wallet(wallet_id)?;
        if wallet.is_system() {
            return Err(Rejection::InvalidRequest(
                "system accounts cannot be used directly",
            ));
        }
        Ok(wallet)
    }

    /// The wallet owned by (owner, currency, wallet type), if any.
    #[must_use]
    pub fn wallet_of_owner(
        &self,
        owner_type: OwnerType,
        owner_id: u64,
        currency: Currency,
        wallet_type: WalletType,
    ) -> Option<WalletId> {
        self.index
            .owners
            .get(&OwnerKey {
                owner_id,
                currency,
                owner_type,
                wallet_type,
            })
            .copied()
    }

    /// The shard's system account of `kind` in `currency`, once created (accounts open lazily, on the
    /// first posting that needs them).
    #[must_use]
    pub fn system_account(&self, currency: Currency, kind: WalletType) -> Option<WalletId> {
        self.index
            .owners
            .get(&OwnerKey::system(currency, kind))
            .copied()
    }

    /// Where the transaction with this uuid lives, if on this shard (see `locate_record`).
    pub fn locate_transaction(
        &self,
        uuid: Uuid,
    ) -> Result<Option<(WalletId, TransactionId)>, Rejection> {
        self.locate_record(
            (UuidKind::Transaction, uuid),
            self.index.transactions.get(&uuid),
            TransactionId,
            |wallet, id| Ok(self.transaction_record(wallet, id)?.map(|found| found.uuid)),
            |store| store.locate_transaction(uuid),
        )
    }

    /// Where the hold with this uuid lives, if on this shard (see `locate_record`).
    pub fn locate_hold(&self, uuid: Uuid) -> Result<Option<(WalletId, HoldId)>, Rejection> {
        self.locate_record(
            (UuidKind::Hold, uuid),
            self.index.holds.get(&uuid),
            HoldId,
            |wallet, id| Ok(self.hold_record(wallet, id)?.map(|found| found.uuid)),
            |store| store.locate_hold(uuid),
        )
    }

    /// Where the record of `kind` named `uuid` lives, if on this shard: in memory (`hot`), or
    /// where the uuid opens to under the shard's key (`values::sealed`), kept only if the record
    /// there has this very uuid (`uuid_at`; any bits open to *some* record), or in the history
    /// store's uuid index (`filed`: uuids derived before the shard's key).
    fn locate_record<I: Copy>(
        &self,
        (kind, uuid): (UuidKind, Uuid),
        hot: Option<&(WalletId, I)>,
        id_of: fn(u64) -> I,
        uuid_at: impl Fn(&Wallet, I) -> Result<Option<Uuid>, Rejection>,
        filed: impl FnOnce(&dyn ColdHistory) -> ColdResult<Option<(WalletId, I)>>,
    ) -> Result<Option<(WalletId, I)>, Rejection> {
        if let Some(&(wallet_id, id)) = hot {
            return Ok(self.owns(wallet_id).then_some((wallet_id, id)));
        }
        let opened = self.uuid_key.and_then(|key| key.open_as(kind, uuid));
        if let Some((wallet, id)) =
            opened.and_then(|(wallet, id)| Some((self.wallet(WalletId(wallet))?, id_of(id))))
        {
            if uuid_at(wallet, id)? == Some(uuid) {
                return Ok(Some((wallet.id(), id)));
            }
        }
        let found = self.hot_or_filed(None, filed)?;
        Ok(found
            .map(Cow::into_owned)
            .filter(|(wallet_id, _)| self.owns(*wallet_id)))
    }

    /// Whether this shard holds the transaction with this uuid (see [`Presence`]).
    #[must_use]
    pub fn holds_transaction(&self, uuid: Uuid) -> Presence {
        Presence::of(self.locate_transaction(uuid))
    }

    /// Whether this shard holds the hold with this uuid (see [`Presence`]).
    #[must_use]
    pub fn holds_hold(&self, uuid: Uuid) -> Presence {
        Presence::of(self.locate_hold(uuid))
    }

    /// A record from memory if it is there, else from the store (a shard with one).
    pub(crate) fn hot_or_filed<'a, T: Clone>(
        &self,
        hot: Option<&'a T>,
        filed: impl FnOnce(&dyn ColdHistory) -> ColdResult<Option<T>>,
    ) -> Result<Option<Cow<'a, T>>, Rejection> {
        if let Some(found) = hot {
            return Ok(Some(Cow::Borrowed(found)));
        }
        match self.recall.store() {
            Some(store) => Ok(filed(store).map_err(|e| unavailable(&e))?.map(Cow::Owned)),
            None => Ok(None),
        }
    }

    /// Transaction `id` of `wallet`, from memory or the store.
    pub fn transaction_record<'a>(
        &self,
        wallet: &'a Wallet,
        id: TransactionId,
    ) -> Result<Option<Cow<'a, Transaction>>, Rejection> {
        self.hot_or_filed(wallet.transaction(id), |store| {
            store.transaction(wallet.id(), id)
        })
    }

    /// Entry `id` of `wallet`, from memory or the store.
    pub fn entry_record<'a>(
        &self,
        wallet: &'a Wallet,
        id: EntryId,
    ) -> Result<Option<Cow<'a, LedgerEntry>>, Rejection> {
        self.hot_or_filed(wallet.entry(id), |store| store.entry(wallet.id(), id))
    }

    /// Hold `id` of `wallet`, from memory or the store.
    pub fn hold_record<'a>(
        &self,
        wallet: &'a Wallet,
        id: HoldId,
    ) -> Result<Option<Cow<'a, Hold>>, Rejection> {
        self.hot_or_filed(wallet.hold(id), |store| store.hold(wallet.id(), id))
    }

    /// Every transaction of `wallet` (memory and store merged, memory's version winning), oldest
    /// first, until `visit` returns false.
    pub fn for_each_transaction(
        &self,
        wallet: &Wallet,
        mut visit: impl FnMut(&Transaction) -> bool,
    ) -> Result<(), Rejection> {
        let mut hot = wallet.transactions().iter().peekable();
        let mut going = true;
        if let Some(store) = self.recall.store() {
            store
                .for_each_transaction(wallet.id(), &mut |filed| {
                    while let Some(recent) = hot.next_if(|recent| recent.id < filed.id) {
                        going = visit(recent);
                        if !going {
                            return false;
                        }
                    }
                    going = match hot.next_if(|recent| recent.id == filed.id) {
                        Some(recent) => visit(recent),
                        None => visit(filed),
                    };
                    going
                })
                .map_err(|e| unavailable(&e))?;
        }
        if going {
            for recent in hot {
                if !visit(recent) {
                    break;
                }
            }
        }
        Ok(())
    }

    /// Every transaction of `wallet` created within `range_ms` (inclusive) that posts to it, in id
    /// order, memory's version winning over the filed one, until `visit` returns false. The
    /// store's part comes through its date index, so this costs the period, not the wallet's
    /// history (a settlement of a merchant with a million older payments reads only its
    /// period's).
    pub(crate) fn for_each_transaction_within(
        &self,
        wallet: &Wallet,
        (from_ms, to_ms): (i64, i64),
        mut visit: impl FnMut(&Transaction) -> bool,
    ) -> Result<(), Rejection> {
        let within =
            |transaction: &Transaction| (from_ms..=to_ms).contains(&transaction.created_at_ms);
        let mut found: std::collections::BTreeMap<TransactionId, Cow<'_, Transaction>> =
            std::collections::BTreeMap::new();
        if let Some(store) = self.recall.store() {
            store
                .for_each_transaction_within(wallet.id(), (from_ms, to_ms), &mut |filed| {
                    if within(filed) {
                        found.insert(filed.id, Cow::Owned(filed.clone()));
                    }
                })
                .map_err(|e| unavailable(&e))?;
        }
        for recent in wallet.transactions().iter().filter(|t| within(t)) {
            found.insert(recent.id, Cow::Borrowed(recent));
        }
        for transaction in found.values() {
            if !visit(transaction) {
                break;
            }
        }
        Ok(())
    }

    /// Checks a wallet's whole chain: filed entries from the store, then the suffix in memory.
    pub(crate) fn check_whole_chain(
        &self,
        wallet: &Wallet,
    ) -> Result<crate::ledger::transaction::ChainCheck, Rejection> {
        self.check_chain_after(wallet, ChainChecker::new(wallet.id(), wallet.currency()))
    }

    /// Continues `checker`, the check of a prefix of the wallet's chain (the entries the history
    /// store held when it was read, off this thread), with the entries after it: those filed
    /// and evicted since (read from the store: a short range) and those in memory. So a
    /// verification costs the shard O(entries since the prefix), not O(ledger).
    pub(crate) fn check_chain_after(
        &self,
        wallet: &Wallet,
        mut checker: ChainChecker,
    ) -> Result<crate::ledger::transaction::ChainCheck, Rejection> {
        let after = checker.last_entry_id();
        let in_memory_from = wallet.entries().first().map(|entry| entry.id);
        // Entries filed after the prefix was read and evicted since are only in the store; the
        // range read stops at the first entry still in memory (at once, usually).
        if let Some(store) = self.recall.store() {
            store
                .for_each_entry_after(wallet.id(), after, &mut |_, entry| {
                    if in_memory_from.is_some_and(|first| entry.id >= first) {
                        return false;
                    }
                    checker.feed(entry);
                    true
                })
                .map_err(|e| unavailable(&e))?;
        }
        for entry in wallet.entries().iter() {
            if after.is_none_or(|after| entry.id > after) {
                checker.feed(entry);
            }
        }
        Ok(checker.finish())
    }

    /// Outgoing cross-shard transfers still `reserved` (neither finalized nor released), in uuid
    /// order: what recovery must complete.
    #[must_use]
    pub fn pending_outgoing_transfers(&self) -> Vec<OutgoingTransfer> {
        let in_batch = self.transfers_in_batches();
        self.transfers_out
            .values()
            .filter(|transfer| {
                transfer.state == TransferState::Reserved && !in_batch.contains(&transfer.uuid)
            })
            .cloned()
            .collect()
    }

    /// The transfers of the open atomic batches (each in one batch).
    pub(crate) fn transfers_in_batches(&self) -> std::collections::HashSet<Uuid> {
        self.prepared_batches
            .values()
            .flat_map(|batch| batch.transfers.iter().copied())
            .collect()
    }

    /// Every outgoing cross-shard transfer still `reserved`, those of open atomic batches
    /// included: money in transit ([`Shard::pending_outgoing_transfers`] leaves the batches'
    /// out, since recovery settles each batch as a whole).
    #[must_use]
    pub fn reserved_outgoing_count(&self) -> usize {
        self.transfers_out
            .values()
            .filter(|transfer| transfer.state == TransferState::Reserved)
            .count()
    }

    /// The atomic transfer batches prepared here and not closed (recovery settles them as a
    /// whole: `runtime::atomic_batch`).
    #[must_use]
    pub fn prepared_batches(&self) -> &BTreeMap<Uuid, PreparedBatch> {
        &self.prepared_batches
    }

    /// An outgoing transfer in memory: in flight, or finished and not yet filed
    /// ([`Shard::outgoing_record`] also reads the store).
    #[must_use]
    pub fn outgoing_transfer(&self, uuid: Uuid) -> Option<&OutgoingTransfer> {
        self.transfers_out.get(&uuid)
    }

    /// An incoming transfer in memory ([`Shard::incoming_record`] also reads the store).
    #[must_use]
    pub fn incoming_transfer(&self, uuid: Uuid) -> Option<&IncomingTransfer> {
        self.transfers_in.get(&uuid)
    }

    /// Active holds whose expiry is at or before `now_ms`, oldest expiry first.
    pub(crate) fn holds_due(&self, now_ms: i64) -> impl Iterator<Item = (HoldId, WalletId)> + '_ {
        self.index
            .hold_expiry
            .range(..=(now_ms, HoldId(u64::MAX)))
            .map(|((_, hold_id), wallet_id)| (*hold_id, *wallet_id))
    }

    /// Number of active holds.
    #[must_use]
    pub fn active_hold_count(&self) -> usize {
        self.index.hold_expiry.len()
    }

    // ----- hot state: what stays in memory -----

    /// How this shard treats records that leave memory (see `cold`). A running engine gives it
    /// the history store; recovery replays in `Recall::Replay`.
    pub fn set_recall(&mut self, recall: Recall) {
        self.recall = recall;
    }

    /// Sequence number of the last command `execute` ran: pair it with the LSN of that command's
    /// record, and once the indexer has filed that LSN, pass it to [`Shard::evict_filed`].
    #[must_use]
    pub fn command_stamp(&self) -> u64 {
        self.stamp
    }

    /// Notes that a record of `wallet_id` changed under the current command.
    pub(crate) fn touch(&mut self, wallet_id: WalletId) {
        if self.recall.evicts() && self.touched.back() != Some(&(self.stamp, wallet_id)) {
            self.touched.push_back((self.stamp, wallet_id));
        }
    }

    /// Drops from memory every record whose latest change is filed (commands stamped at or before
    /// `filed`), except active holds and cross-shard moves in flight. Returns how many records
    /// left. Nothing leaves a shard in `Recall::Keep`.
    pub fn evict_filed(&mut self, filed: u64) -> usize {
        if !self.recall.evicts() {
            return 0;
        }
        let mut gone = 0;
        // Each wallet once per pass: a wallet is queued once per command that touched it, and a
        // pass after a burst (a batch of 1,000 transfers among 100 wallets touches each ~20
        // times) would otherwise scan the same wallet's records that often. Scanning them was
        // 18 % of walletd's CPU under batches (BENCHMARKS.md, "Each wallet once per eviction").
        let mut wallets = std::mem::take(&mut self.evicting);
        while let Some(&(stamp, wallet_id)) = self.touched.front() {
            if stamp > filed {
                break;
            }
            self.touched.pop_front();
            wallets.push(wallet_id);
        }
        wallets.sort_unstable();
        wallets.dedup();
        for &wallet_id in &wallets {
            gone += self.evict_wallet(wallet_id, filed);
        }
        wallets.clear();
        // A pass after a long stall of the indexer may have listed every wallet: keep no more
        // than a usual pass needs.
        wallets.shrink_to(EVICTING_KEPT);
        self.evicting = wallets;
        while let Some(uuid) = self.touched_payments.next_filed(filed) {
            gone += self.evict_payment(uuid, filed);
        }
        while let Some(id) = self.touched_payouts.next_filed(filed) {
            gone += self.evict_payout(id, filed);
        }
        while let Some(id) = self.touched_settlements.next_filed(filed) {
            gone += self.evict_settlement(id, filed);
        }
        while let Some(key) = self.touched_links.next_filed(filed) {
            gone += self.evict_link(key, filed);
        }
        gone + self.evict_filed_moves(filed)
    }

    /// Drops payout `id` if it is final and its last change is filed, with its hold's entry in
    /// the payout hold index (its hold is closed: nothing else may close it anyway).
    fn evict_payout(&mut self, id: PayoutId, filed: u64) -> usize {
        if !self.finals_leave || self.touched_payouts.changed_after(&id, filed) {
            return 0;
        }
        let Some(payout) = self
            .commerce
            .payouts
            .get(&id)
            .filter(|payout| payout.may_leave_memory())
        else {
            return 0;
        };
        self.index.commerce.payout_holds.remove(&payout.hold_id);
        self.commerce.payouts.remove(&id);
        self.touched_payouts.forget(&id);
        1
    }

    /// Notes that payout `id` changed under the current command.
    pub(crate) fn touch_payout(&mut self, id: PayoutId) {
        if self.recall.evicts() {
            self.touched_payouts.touch(id, self.stamp);
        }
    }

    /// Payouts held in memory.
    #[must_use]
    pub fn payouts_in_memory(&self) -> usize {
        self.commerce.payouts.len()
    }

    /// Drops settlement `id` if it is final and its last change is filed. An executed one's
    /// claims on its items leave the settled-transaction index with it: the store keeps them
    /// (`settled_items`, filed with the change that executed it), and a new settlement's
    /// decision reads them there ([`Shard::settled_by`]). A rejected or cancelled one claims
    /// nothing.
    fn evict_settlement(&mut self, id: SettlementId, filed: u64) -> usize {
        if !self.finals_leave || self.touched_settlements.changed_after(&id, filed) {
            return 0;
        }
        let Some(settlement) = self
            .commerce
            .settlements
            .get(&id)
            .filter(|settlement| settlement.may_leave_memory())
        else {
            return 0;
        };
        let settled = &mut self.index.commerce.settled;
        for item in &settlement.items {
            if settled.get(&item.transaction_id) == Some(&id) {
                settled.remove(&item.transaction_id);
            }
        }
        self.commerce.settlements.remove(&id);
        self.touched_settlements.forget(&id);
        1
    }

    /// Notes that settlement `id` changed under the current command.
    pub(crate) fn touch_settlement(&mut self, id: SettlementId) {
        if self.recall.evicts() {
            self.touched_settlements.touch(id, self.stamp);
        }
    }

    /// Drops payment link or QR payload `key` once its last change is filed: neither is read
    /// but when asked for (a view, a payment on the link), which reads the store, and a link's
    /// one change (used) recalls it (`link_for_change`).
    fn evict_link(&mut self, key: LinkKey, filed: u64) -> usize {
        if !self.finals_leave || self.touched_links.changed_after(&key, filed) {
            return 0;
        }
        self.touched_links.forget(&key);
        let gone = match key {
            LinkKey::Link(uuid) => self.commerce.links.remove(&uuid).is_some(),
            LinkKey::Qr(uuid) => self.commerce.qrs.remove(&uuid).is_some(),
        };
        usize::from(gone)
    }

    /// Notes that payment link or QR payload `key` changed under the current command.
    pub(crate) fn touch_link(&mut self, key: LinkKey) {
        if self.recall.evicts() {
            self.touched_links.touch(key, self.stamp);
        }
    }

    /// Payment links and QR payloads held in memory.
    #[must_use]
    pub fn links_in_memory(&self) -> usize {
        self.commerce.links.len() + self.commerce.qrs.len()
    }

    /// Settlements held in memory.
    #[must_use]
    pub fn settlements_in_memory(&self) -> usize {
        self.commerce.settlements.len()
    }

    /// Settled-transaction index entries held in memory (claims of the settlements in memory).
    #[must_use]
    pub fn settled_in_memory(&self) -> usize {
        self.index.commerce.settled.len()
    }

    /// Drops payment `uuid` if it may leave memory and its last change is filed.
    fn evict_payment(&mut self, uuid: Uuid, filed: u64) -> usize {
        if !self.finals_leave
            || self.touched_payments.changed_after(&uuid, filed)
            || !self
                .commerce
                .payments
                .get(&uuid)
                .is_some_and(crate::commerce::payment::Payment::may_leave_memory)
        {
            return 0;
        }
        self.commerce.payments.remove(&uuid);
        self.touched_payments.forget(&uuid);
        1
    }

    /// Notes that payment `uuid` changed under the current command.
    pub(crate) fn touch_payment(&mut self, uuid: Uuid) {
        if self.recall.evicts() {
            self.touched_payments.touch(uuid, self.stamp);
        }
    }

    /// Payments held in memory.
    #[must_use]
    pub fn payments_in_memory(&self) -> usize {
        self.commerce.payments.len()
    }

    /// Drops every record that may leave from every wallet (after recovery, once the store
    /// covers the whole log).
    pub fn evict_all(&mut self) -> usize {
        if !self.recall.evicts() {
            return 0;
        }
        self.touched.clear();
        self.touched_payments.clear_queue();
        self.touched_payouts.clear_queue();
        self.touched_settlements.clear_queue();
        self.touched_links.clear_queue();
        let links: Vec<LinkKey> = (self.commerce.links.keys().map(|uuid| LinkKey::Link(*uuid)))
            .chain(self.commerce.qrs.keys().map(|uuid| LinkKey::Qr(*uuid)))
            .collect();
        let links_gone: usize = links
            .into_iter()
            .map(|key| self.evict_link(key, u64::MAX))
            .sum();
        let payments: Vec<Uuid> = self.commerce.payments.keys().copied().collect();
        let payouts: Vec<PayoutId> = self.commerce.payouts.keys().copied().collect();
        let settlements: Vec<SettlementId> = self.commerce.settlements.keys().copied().collect();
        let payments_gone: usize = payments
            .into_iter()
            .map(|uuid| self.evict_payment(uuid, u64::MAX))
            .sum::<usize>()
            + payouts
                .into_iter()
                .map(|id| self.evict_payout(id, u64::MAX))
                .sum::<usize>()
            + settlements
                .into_iter()
                .map(|id| self.evict_settlement(id, u64::MAX))
                .sum::<usize>();
        let ids: Vec<WalletId> = self
            .wallets
            .iter()
            .filter(|wallet| wallet.has_history())
            .map(Wallet::id)
            .collect();
        links_gone
            + payments_gone
            + ids
                .into_iter()
                .map(|wallet_id| self.evict_wallet(wallet_id, u64::MAX))
                .sum::<usize>()
            + self.evict_all_moves()
    }

    fn evict_wallet(&mut self, wallet_id: WalletId, filed: u64) -> usize {
        let Some(position) = self.position_of(wallet_id) else {
            return 0;
        };
        let Some(history) = self
            .wallets
            .get_mut(position)
            .and_then(|wallet| wallet.history.as_mut())
        else {
            return 0;
        };
        let index = &mut self.index;
        let mut gone = history.transactions.evict(
            filed,
            false,
            |_| false,
            |transaction| {
                index.transactions.remove(&transaction.uuid);
            },
        );
        let mut last_gone = None;
        gone += history
            .entries
            .evict(filed, true, |_| false, |entry| last_gone = Some(entry.hash));
        if let Some(hash) = last_gone {
            history.entries_before = hash;
        }
        gone += history.holds.evict(
            filed,
            false,
            |hold| hold.status == HoldStatus::Active,
            |hold| {
                index.holds.remove(&hold.uuid);
            },
        );
        gone
    }

    /// Records held in memory (transactions, entries, holds) across the shard.
    #[must_use]
    pub fn records_in_memory(&self) -> usize {
        self.wallets
            .iter()
            .map(|w| w.transactions().len() + w.entries().len() + w.holds().len())
            .sum()
    }

    // ----- queries -----

    pub fn wallet_view(&self, wallet_id: WalletId) -> Result<WalletView, Rejection> {
        self.find_wallet(wallet_id).map(WalletView::of)
    }

    pub fn balance(&self, wallet_id: WalletId) -> Result<BalanceView, Rejection> {
        self.find_wallet(wallet_id).map(BalanceView::of)
    }

    /// A wallet's transactions, newest first.
    pub fn transactions_page(
        &self,
        wallet_id: WalletId,
        page: Page,
    ) -> Result<Paged<TransactionView>, Rejection> {
        let wallet = self.find_wallet(wallet_id)?;
        let paged = paginate(wallet.transactions().iter().rev(), page);
        Ok(Paged {
            records: paged
                .records
                .into_iter()
                .map(|transaction| TransactionView::of(wallet, transaction))
                .collect(),
            total: paged.total,
        })
    }

    /// The transaction with this uuid.
    pub fn transaction_view(&self, uuid: Uuid) -> Result<TransactionView, Rejection> {
        let (wallet_id, transaction_id) = self
            .locate_transaction(uuid)?
            .ok_or(Rejection::NotFound("transaction"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let transaction = self
            .transaction_record(wallet, transaction_id)?
            .ok_or(Rejection::NotFound("transaction"))?;
        Ok(TransactionView::of(wallet, &transaction))
    }

    /// A wallet's ledger (statement), newest first, optionally limited to entries created within
    /// `from_ms..=to_ms`.
    pub fn ledger_page(
        &self,
        wallet_id: WalletId,
        page: Page,
        from_ms: Option<i64>,
        to_ms: Option<i64>,
    ) -> Result<Paged<EntryView>, Rejection> {
        let wallet = self.find_wallet(wallet_id)?;
        let entries = wallet.entries();
        let in_range = |entry: &&crate::ledger::transaction::LedgerEntry| {
            from_ms.is_none_or(|from| entry.created_at_ms >= from)
                && to_ms.is_none_or(|to| entry.created_at_ms <= to)
        };
        let paged = paginate(
            entries
                .iter()
                .enumerate()
                .rev()
                .filter(|(_, entry)| in_range(entry)),
            page,
        );
        let records = paged
            .records
            .into_iter()
            .map(|(position, entry)| {
                let prev_hash = match position.checked_sub(1) {
                    Some(before) => entries.get(before).map_or(Hash::ZERO, |e| e.hash),
                    None => wallet.entries_before(),
                };
                EntryView::of(wallet, entry, prev_hash)
            })
            .collect();
        Ok(Paged {
            records,
            total: paged.total,
        })
    }

    /// A wallet's holds in every state, newest first.
    pub fn holds_page(
        &self,
        wallet_id: WalletId,
        page: Page,
    ) -> Result<Paged<HoldView>, Rejection> {
        let wallet = self.find_wallet(wallet_id)?;
        let paged = paginate(wallet.holds().iter().rev(), page);
        Ok(Paged {
            records: paged
                .records
                .into_iter()
                .map(|hold| HoldView::of(wallet, hold))
                .collect(),
            total: paged.total,
        })
    }

    /// The hold with this uuid.
    pub fn hold_view(&self, uuid: Uuid) -> Result<HoldView, Rejection> {
        let (wallet_id, hold_id) = self.locate_hold(uuid)?.ok_or(Rejection::NotFound("hold"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let hold = self
            .hold_record(wallet, hold_id)?
            .ok_or(Rejection::NotFound("hold"))?;
        Ok(HoldView::of(wallet, &hold))
    }

    /// Per currency, the sum of the balances of every wallet and system account on this shard.
    /// Each balance is the sum of its wallet's entries (invariant 2), so this is the sum of every
    /// entry ever posted: zero per currency on a healthy shard; the lead adds these across shards.
    #[must_use]
    pub fn balance_sums_by_currency(&self) -> BTreeMap<Currency, Option<Decimal>> {
        let mut sums: BTreeMap<Currency, Option<Decimal>> = BTreeMap::new();
        for wallet in &self.wallets {
            let sum = sums.entry(wallet.currency()).or_insert(Some(Decimal::ZERO));
            *sum = sum.and_then(|total| total.checked_add(wallet.balance()));
        }
        sums
    }

    /// Per currency, the balance of this shard's in-transit account (cross-shard transfers).
    #[must_use]
    pub fn in_transit_by_currency(&self) -> BTreeMap<Currency, Decimal> {
        self.wallets
            .iter()
            .filter(|wallet| wallet.is_system() && wallet.wallet_type() == WalletType::InTransit)
            .map(|wallet| (wallet.currency(), wallet.balance()))
            .collect()
    }

    /// Every hold of a wallet that is active.
    #[must_use]
    pub fn active_holds(&self, wallet_id: WalletId) -> Vec<HoldView> {
        self.wallet(wallet_id)
            .map(|wallet| {
                wallet
                    .holds()
                    .iter()
                    .filter(|hold| hold.status == HoldStatus::Active)
                    .map(|hold| HoldView::of(wallet, hold))
                    .collect()
            })
            .unwrap_or_default()
    }
}

impl RecordUuids for Shard {
    // A store failure is logged by `unavailable`; the view then shows no uuid.
    fn transaction_uuid(&self, wallet_id: WalletId, id: TransactionId) -> Option<Uuid> {
        let wallet = self.wallet(wallet_id)?;
        Some(self.transaction_record(wallet, id).ok()??.uuid)
    }

    fn hold_uuid(&self, wallet_id: WalletId, id: HoldId) -> Option<Uuid> {
        let wallet = self.wallet(wallet_id)?;
        Some(self.hold_record(wallet, id).ok()??.uuid)
    }
}
