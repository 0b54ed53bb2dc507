//! The shard: one executor's wallets, system accounts, indexes and id sequences.
//!
//! # Invariants
//!
//! [`Shard::check_invariants`] recomputes each of these from the records and names the first breach:
//!
//! 1. **Money is conserved.** Per currency, the signed amounts of all entries of the shard, system
//!    accounts included, sum to zero (every posting balances, see `ledger` docs). Across shards the
//!    per-shard sums ([`Shard::entry_sums_by_currency`]) therefore also sum to zero.
//! 2. **Caches are true.** Each wallet's `balance` equals the sum of its ledger and each entry's
//!    `balance_after` the running sum; `held` equals the sum of its active holds.
//! 3. **Spendable is never negative**: `available = balance − held ≥ 0` for every non-system wallet.
//! 4. **Chains hold.** Every wallet's hash chain recomputes and ends at its stored chain head.
//! 5. **In transit is accounted for.** Per currency, the shard's in-transit account equals the
//!    reserved-or-finalized outgoing transfers and payment reservations minus the credited incoming
//!    ones; across shards the in-transit accounts net to zero once nothing is still `reserved`.
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

use std::collections::{BTreeMap, HashMap};

use rust_decimal::Decimal;

use crate::commerce::state::{Commerce, CommerceIndex};
use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::Hash;
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer, TransferState};
use crate::ledger::view::{BalanceView, EntryView, HoldView, TransactionView, WalletView};
use crate::ledger::wallet::{OwnerType, Wallet, WalletType};
use crate::shard::command::{paginate, Page, Paged};
use crate::values::currency::Currency;
use crate::values::error::Rejection;
use crate::values::ids::{HoldId, IdSpace, TransactionId, Uuid, WalletId};

/// Target resident bytes of an idle wallet, including its index slots.
pub const IDLE_WALLET_BYTES_BUDGET: usize = 200;

/// Uniqueness key: one wallet per (owner, currency, wallet type). System accounts use owner id 0.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub(crate) struct OwnerKey {
    pub(crate) owner_id: u64,
    pub(crate) currency: Currency,
    pub(crate) owner_type: OwnerType,
    pub(crate) wallet_type: WalletType,
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
    pub(crate) transactions: HashMap<Uuid, (WalletId, TransactionId)>,
    pub(crate) holds: HashMap<Uuid, (WalletId, HoldId)>,
    /// Active holds by expiry, the queue `expire_holds` reads in order.
    pub(crate) hold_expiry: BTreeMap<(i64, HoldId), WalletId>,
    pub(crate) commerce: CommerceIndex,
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
    /// Payments, links, QR payloads, payouts, settlements, cross-shard payment steps.
    pub(crate) commerce: Commerce,
    pub(crate) index: Indexes,
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
            commerce: Commerce::new(),
            index: Indexes::default(),
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

    /// Where the transaction with this uuid lives.
    #[must_use]
    pub fn locate_transaction(&self, uuid: Uuid) -> Option<(WalletId, TransactionId)> {
        self.index.transactions.get(&uuid).copied()
    }

    /// Where the hold with this uuid lives.
    #[must_use]
    pub fn locate_hold(&self, uuid: Uuid) -> Option<(WalletId, HoldId)> {
        self.index.holds.get(&uuid).copied()
    }

    /// Outgoing cross-shard transfers still `reserved` (neither finalized nor released), in uuid
    /// order: what recovery must complete.
    #[must_use]
    pub fn pending_outgoing_transfers(&self) -> Vec<OutgoingTransfer> {
        self.transfers_out
            .values()
            .filter(|transfer| transfer.state == TransferState::Reserved)
            .cloned()
            .collect()
    }

    #[must_use]
    pub fn outgoing_transfer(&self, uuid: Uuid) -> Option<&OutgoingTransfer> {
        self.transfers_out.get(&uuid)
    }

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
            .locate_transaction(uuid)
            .ok_or(Rejection::NotFound("transaction"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let transaction = wallet
            .transaction(transaction_id)
            .ok_or(Rejection::NotFound("transaction"))?;
        Ok(TransactionView::of(wallet, transaction))
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
                let prev_hash = position
                    .checked_sub(1)
                    .and_then(|before| entries.get(before))
                    .map_or(Hash::ZERO, |before| before.hash);
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
        let (wallet_id, hold_id) = self.locate_hold(uuid).ok_or(Rejection::NotFound("hold"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let hold = wallet.hold(hold_id).ok_or(Rejection::NotFound("hold"))?;
        Ok(HoldView::of(wallet, hold))
    }

    /// Per currency, the sum of the signed amounts of every entry on this shard (recomputed from the
    /// entries). Zero per currency on a healthy shard; the lead can add these across shards.
    #[must_use]
    pub fn entry_sums_by_currency(&self) -> BTreeMap<Currency, Option<Decimal>> {
        let mut sums: BTreeMap<Currency, Option<Decimal>> = BTreeMap::new();
        for wallet in &self.wallets {
            let sum = sums.entry(wallet.currency()).or_insert(Some(Decimal::ZERO));
            for entry in wallet.entries() {
                *sum = sum.and_then(|total| total.checked_add(entry.signed_amount()));
            }
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
