//! Filing: what the indexer writes to the store for each durable event, in LSN order.
//!
//! It mirrors what `Shard::apply` does to a wallet's history and to payments, payouts,
//! settlements, payment links and QR payloads, through the same record methods (`Transaction::mark_reversed`,
//! `Transaction::set_refunded`, `LedgerEntry::mark_reversed`, `Hold::close`,
//! `Payment::complete`, `Payment::close`, `Payment::set_refunded`, `Payout::apply_change`,
//! `Settlement::apply_change`, `PaymentLink::mark_used`), so the store holds exactly the records the shard would show;
//! cross-shard moves go to [`super::moves`]. Every other event leaves history alone.
//!
//! One call files a group of records as one atomic write batch. A batch cannot read its own
//! writes, so records changed twice within it (a transfer refunded a moment later) go through a
//! batch-local overlay that later events of the batch read first. The report aggregates
//! ([`super::report_days`]) are read-modify-written the same way, in the same batch.

use rustc_hash::FxHashMap as HashMap;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::answers::AnswerFiler;
use super::dated;
use super::epochs::{
    id_epoch, record_key, time_index_key, wallet_records, EpochsSeen, ENTRY_TIMES,
};
use super::moves::MoveOverlay;
use super::pages::{
    counted, directory_count, directory_key, fine_key, starts_block, starts_fine, KindCounts, Paged,
};
use super::remembered::Remembered;
use super::report_days::{ReportBatch, Scope};
use super::store::{
    decode, encode, encode_value, key2, link_writes, payment_writes, payout_writes,
    settlement_writes, HistoryStore, Open, StoreError, Write, COMMERCE_COMPLETE, INDEXED_LSN,
    LINKS_COMPLETE, SETTLEMENTS_COMPLETE,
};
use super::uuid_keys::UuidKeys;
use super::writes::Writes;
use crate::commerce::payment::{Payment, PaymentLink};
use crate::commerce::payout::{Payout, Settlement};
use crate::ledger::hold::Hold;
use crate::ledger::transaction::{Hash, LedgerEntry, Transaction};
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::event::Event;
use crate::values::ids::UuidKind;

/// Most wallets the indexer remembers between batches (each of its memories below: ~84 bytes
/// a wallet of entries, up to ~50 MiB at the bound with the hash tables' spare room); past it
/// the least recently used half is forgotten ([`Remembered`]). A miss costs a read of the
/// store: a seek to the wallet's newest entry for its chain head, its report subject, its date
/// index. The epochs are remembered for twice as many (wallet, kind) pairs, two kinds
/// (transactions and entries) a wallet: ~24 bytes a pair, up to ~25 MiB; a miss there costs
/// one redundant write of the wallet's epoch key.
const CHAIN_HEADS_MAX: usize = 1 << 18;

/// The indexer's memory between batches, so that filing needs no reads on the hot path: each
/// recently written wallet's newest entry hash (the hash before its next entry). Its record
/// counts are in the store's `counted`, shared with readers ([`super::pages::count_of`]).
pub(crate) struct ChainHeads {
    /// Most wallets remembered ([`CHAIN_HEADS_MAX`]; smaller in tests that cross a forgetting).
    bound: usize,
    heads: Remembered<Hash>,
    /// Each recently seen wallet's business, currency and whether the transaction report counts
    /// it (a miss reads `report_subjects`).
    scopes: Remembered<Scope>,
    /// The epochs of each recently filed wallet's records ([`super::epochs`]).
    epochs: EpochsSeen,
    /// The shards' uuid keys ([`super::uuid_keys`]).
    keys: UuidKeys,
    /// Wallets whose entries at the posting floor need no marker (it is written, or they have
    /// no entry in the date index): [`super::dated`]. Forgotten only between batches: a
    /// marker written in the batch is not yet in the store to be read.
    ordered: Remembered<()>,
    /// Wallets given date index keys by this indexer (entries logged before the floor), which
    /// the store may not show yet; forgotten only between batches too.
    indexed: Remembered<()>,
    /// Whether the store filed a record at the floor ([`dated::FLOOR_SINCE`]); `None`: not
    /// read yet.
    floor_since: Option<bool>,
}

impl Default for ChainHeads {
    fn default() -> Self {
        ChainHeads {
            bound: CHAIN_HEADS_MAX,
            heads: Remembered::default(),
            scopes: Remembered::default(),
            epochs: EpochsSeen::default(),
            keys: UuidKeys::default(),
            ordered: Remembered::default(),
            indexed: Remembered::default(),
            floor_since: None,
        }
    }
}

impl ChainHeads {
    /// A memory of at most about `bound` wallets.
    #[cfg(test)]
    pub(crate) fn bounded(bound: usize) -> Self {
        ChainHeads {
            bound,
            ..ChainHeads::default()
        }
    }

    /// Between batches: forgets the least recently used half of each memory near its bound.
    fn settle(&mut self) {
        self.heads.settle(self.bound);
        self.scopes.settle(self.bound);
        self.ordered.settle(self.bound);
        self.indexed.settle(self.bound);
        self.epochs.settle(2 * self.bound);
    }

    /// Forgets everything (after a batch that did not commit).
    pub(crate) fn clear(&mut self) {
        self.heads.clear();
        self.scopes.clear();
        self.epochs.clear();
        self.keys.clear();
        self.ordered.clear();
        self.indexed.clear();
        self.floor_since = None;
    }
}

/// What one WAL record gives the store: its events and its idempotency answers.
pub(crate) struct Filed {
    pub(crate) lsn: u64,
    /// The shard whose state the events change.
    pub(crate) shard: u32,
    /// Whether the record's postings were stamped at the shard's floor (journal format 7 and
    /// up): its entries need no date index keys ([`super::dated`]).
    pub(crate) at_floor: bool,
    pub(crate) events: Vec<Event>,
    /// Only answered keys (a pending one is hot state), in the record's order.
    pub(crate) answers: Vec<IdempotencyRecord>,
}

impl Filed {
    /// A record with events and no answer.
    #[cfg(test)]
    pub(crate) fn events(lsn: u64, events: Vec<Event>) -> Self {
        Filed {
            lsn,
            shard: 0,
            at_floor: true,
            events,
            answers: Vec::new(),
        }
    }

    /// The same record as a build before the posting floor logged it.
    #[cfg(test)]
    pub(crate) fn before_floor(self) -> Self {
        Filed {
            at_floor: false,
            ..self
        }
    }

    /// The same record, logged by shard `shard`.
    #[cfg(test)]
    pub(crate) fn on_shard(self, shard: u32) -> Self {
        Filed { shard, ..self }
    }
}

/// Files `records` as one atomic write batch that also sets `indexed_lsn` to the last LSN. Not
/// durable by itself: see [`HistoryStore::persist`].
pub(crate) fn file_batch(
    store: &HistoryStore,
    records: &[Filed],
    heads: &mut ChainHeads,
) -> Result<(), StoreError> {
    let Some(last_lsn) = records.last().map(|record| record.lsn) else {
        return Ok(());
    };
    let result = store.with(|open| {
        heads.keys.load(open)?;
        let mut batch = Batch {
            open,
            writes: Writes::new(&open.db),
            overlay: HashMap::default(),
            counts: HashMap::default(),
            moves: MoveOverlay::default(),
            shard: 0,
            at_floor: true,
            scratch: Vec::with_capacity(512),
        };
        let mut reports = open
            .reports
            .load(std::sync::atomic::Ordering::Acquire)
            .then(ReportBatch::default);
        let mut answers = AnswerFiler::default();
        for record in records {
            batch.shard = record.shard;
            batch.at_floor = record.at_floor;
            let floor_since = match heads.floor_since {
                Some(known) => known,
                None => open.meta.get(dated::FLOOR_SINCE)?.is_some(),
            };
            if record.at_floor && !floor_since {
                let lsn = record.lsn.to_be_bytes().to_vec();
                batch.writes.insert(&open.meta, dated::FLOOR_SINCE, lsn);
            } else if !record.at_floor && floor_since {
                return Err(StoreError::Rule(format!(
                    "record {} was logged before the posting floor (journal format below 7) \
                     after records at it: an older walletd wrote the log after a newer one",
                    record.lsn
                )));
            }
            heads.floor_since = Some(floor_since || record.at_floor);
            for event in &record.events {
                batch.file(event, heads)?;
                if let Some(reports) = reports.as_mut() {
                    reports.file(open, &mut heads.scopes, event)?;
                }
            }
            for answer in &record.answers {
                answers.file(open, &mut batch.writes, answer, record.lsn)?;
            }
        }
        let latest = answers.finish(open, &mut batch.writes);
        let Batch {
            mut writes, counts, ..
        } = batch;
        if let Some(reports) = reports {
            reports.write(open, &mut writes)?;
        }
        writes.insert(&open.meta, INDEXED_LSN, last_lsn.to_be_bytes().to_vec());
        if let Err(error) = writes.commit() {
            counted(open).clear();
            return Err(error.into());
        }
        latest.committed();
        // The counts are not written: readers find them here, before the indexer publishes
        // this batch as filed, or in the page directory ([`super::pages::count_of`]). Every
        // count this batch changed replaces whatever a reader remembered meanwhile (a reader's
        // scan torn by this commit: [`super::pages::count_for_read`]); a kind it did not count
        // keeps what a reader may have remembered since. A wallet created in this batch has
        // every kind counted (zero where it filed none): no reader can have seen more.
        let mut shared = counted(open);
        for (wallet, tally) in counts {
            let slots = shared.entry(wallet).or_default();
            for (slot, count) in slots.iter_mut().zip(tally.next) {
                if count.is_some() {
                    *slot = count;
                }
            }
        }
        Ok(())
    });
    if result.is_err() {
        heads.clear();
    }
    heads.settle();
    result
}

/// Which keyspace an overlay value belongs to.
#[derive(Clone, Copy, PartialEq, Eq, Hash)]
enum Kind {
    Transaction,
    Entry,
    Hold,
    /// Keyed by the payment's uuid.
    Payment,
    /// Keyed by `key2(payout id, 0)`.
    Payout,
    /// Keyed by `key2(settlement id, 0)`.
    Settlement,
    /// Keyed by the link's uuid.
    Link,
}

struct Batch<'a> {
    open: &'a Open,
    writes: Writes,
    /// Values written earlier in this batch, read before the keyspaces (shared with the batch,
    /// not copied).
    overlay: HashMap<(Kind, [u8; 16]), fjall::Slice>,
    /// Each touched wallet's record counts so far: the ordinal its next record gets.
    counts: HashMap<u64, Tally>,
    /// Cross-shard move records written earlier in this batch.
    moves: MoveOverlay,
    /// The shard of the record being filed.
    shard: u32,
    /// Whether the record being filed was stamped at the posting floor ([`Filed::at_floor`]).
    at_floor: bool,
    /// The buffer values are encoded in ([`encode_value`]).
    scratch: Vec<u8>,
}

/// A wallet's counts of each kind ([`Paged`] order) up to the record being filed; `None` for a
/// kind not read from the page directory yet.
struct Tally {
    next: KindCounts,
}

fn rule(what: &str, key: (u64, u64), reason: &str) -> StoreError {
    StoreError::Rule(format!("{what} {}/{}: {reason}", key.0, key.1))
}

impl Batch<'_> {
    fn keyspace(&self, kind: Kind) -> &fjall::Keyspace {
        match kind {
            Kind::Transaction => &self.open.transactions,
            Kind::Entry => &self.open.entries,
            Kind::Hold => &self.open.holds,
            Kind::Payment => &self.open.payments,
            Kind::Payout => &self.open.payouts,
            Kind::Settlement => &self.open.settlements,
            Kind::Link => &self.open.links,
        }
    }

    /// Files a wallet's transaction, entry or hold (`key`: wallet, id) under its epoch-first key,
    /// and into the overlay under `wallet | id`.
    fn put<T: Serialize>(
        &mut self,
        kind: Kind,
        key: (u64, u64),
        value: &T,
    ) -> Result<(), StoreError> {
        let bytes = encode_value(&mut self.scratch, value)?;
        let keyspace = self.keyspace(kind).clone();
        self.writes
            .insert(&keyspace, record_key(key.0, key.1), bytes.clone());
        self.overlay.insert((kind, key2(key.0, key.1)), bytes);
        Ok(())
    }

    fn load<T: DeserializeOwned>(
        &self,
        kind: Kind,
        what: &'static str,
        key: (u64, u64),
    ) -> Result<T, StoreError> {
        let logical = key2(key.0, key.1);
        if let Some(value) = self.overlay.get(&(kind, logical)) {
            return decode(what, &logical, value);
        }
        let bytes = record_key(key.0, key.1);
        let value = self
            .keyspace(kind)
            .get(bytes)?
            .ok_or_else(|| StoreError::Missing {
                what,
                key: format!("{}/{}", key.0, key.1),
            })?;
        decode(what, &bytes, &value)
    }

    /// The ordinal of `wallet`'s next record of `kind` (its count of them so far, from the
    /// indexer's memory or the store), counted; the record that starts a block of the page
    /// directory also files its id there.
    fn ordinal(&mut self, wallet: u64, kind: Paged, id: u64) -> Result<u64, StoreError> {
        let open = self.open;
        let tally = self.counts.entry(wallet).or_insert_with(|| Tally {
            next: counted(open).get(&wallet).copied().unwrap_or_default(),
        });
        let counter = tally
            .next
            .get_mut(kind as usize)
            .ok_or_else(|| StoreError::Rule("a record kind without a count".into()))?;
        // A kind not counted yet is read once from the page directory, the others wait.
        let ordinal = match *counter {
            Some(known) => known,
            None => directory_count(self.open, wallet, kind)?,
        };
        *counter = Some(ordinal + 1);
        if starts_block(ordinal) {
            self.writes.insert(
                &self.open.pages,
                directory_key(wallet, kind, ordinal),
                id.to_be_bytes().to_vec(),
            );
        } else if kind == Paged::Entry && starts_fine(ordinal) {
            self.writes.insert(
                &self.open.pages,
                fine_key(wallet, ordinal),
                id.to_be_bytes().to_vec(),
            );
        }
        Ok(ordinal)
    }

    /// Files, for an entry posted at the floor (ordinal and id `at`), the wallet's marker if
    /// it is its first such entry and the wallet has entries in the date index
    /// ([`super::dated`]).
    fn mark_ordered(
        &mut self,
        heads: &mut ChainHeads,
        wallet: u64,
        (ordinal, id): (u64, u64),
    ) -> Result<(), StoreError> {
        if heads.ordered.contains(wallet) {
            return Ok(());
        }
        // Its first entry, or one after entries at the floor only, or after the marker.
        let needed = ordinal > 0
            && (heads.indexed.contains(wallet) || dated::has_indexed_entries(self.open, wallet)?)
            && self.open.pages.get(dated::marker_key(wallet))?.is_none();
        if needed {
            self.writes.insert(
                &self.open.pages,
                dated::marker_key(wallet),
                dated::marker_value(ordinal, id),
            );
        }
        heads.ordered.insert(wallet, ());
        Ok(())
    }

    /// Files a new transaction or hold (`kind`) of `wallet`: the record, its uuid index, its
    /// ordinal (and directory key) and its epoch.
    fn file_new<T: Serialize>(
        &mut self,
        heads: &mut ChainHeads,
        kind: Paged,
        (wallet, id): (u64, u64),
        record: &T,
        uuid: crate::values::ids::Uuid,
    ) -> Result<(), StoreError> {
        let (overlay, uuids, uuid_kind) = match kind {
            Paged::Transaction => (
                Kind::Transaction,
                self.open.tx_uuids.clone(),
                UuidKind::Transaction,
            ),
            Paged::Hold => (Kind::Hold, self.open.hold_uuids.clone(), UuidKind::Hold),
            Paged::Entry => return Err(StoreError::Rule("an entry has no uuid".into())),
        };
        self.put(overlay, (wallet, id), record)?;
        // A sealed uuid opens to this record: its shard finds it without an index entry.
        if !heads.keys.sealed(self.shard, uuid_kind, (wallet, id), uuid) {
            self.writes
                .insert(&uuids, uuid.0, key2(wallet, id).to_vec());
        }
        self.ordinal(wallet, kind, id)?;
        heads.epochs.note(
            self.open,
            &mut self.writes,
            wallet,
            kind as u64,
            id_epoch(id),
        );
        Ok(())
    }

    fn file(&mut self, event: &Event, heads: &mut ChainHeads) -> Result<(), StoreError> {
        match event {
            Event::TransactionRecorded {
                wallet_id,
                transaction,
            } => {
                let record = (wallet_id.0, transaction.id.0);
                self.file_new(
                    heads,
                    Paged::Transaction,
                    record,
                    transaction,
                    transaction.uuid,
                )?;
            }
            Event::EntryPosted { wallet_id, entry } => {
                let w = wallet_id.0;
                let prev = match heads.heads.get(w) {
                    Some(hash) => hash,
                    None => self.newest_hash(w)?,
                };
                let id = entry.id.0;
                self.put(Kind::Entry, (w, id), &(prev, entry))?;
                heads.heads.insert(w, entry.hash);
                let ordinal = self.ordinal(w, Paged::Entry, id)?;
                let kind = Paged::Entry as u64;
                heads
                    .epochs
                    .note(self.open, &mut self.writes, w, kind, id_epoch(id));
                if self.at_floor {
                    self.mark_ordered(heads, w, (ordinal, id))?;
                } else {
                    // Logged before the posting floor: maybe out of time order, so indexed.
                    let times = self.open.entry_times.clone();
                    let (time_key, time_epoch) = time_index_key(w, entry.created_at_ms, id);
                    self.writes.insert(&times, time_key, Vec::new());
                    heads
                        .epochs
                        .note(self.open, &mut self.writes, w, ENTRY_TIMES, time_epoch);
                    heads.indexed.insert(w, ());
                    heads.ordered.remove(w);
                }
            }
            Event::EntryReversed {
                wallet_id,
                entry_id,
                reversed_by_entry_id,
            } => {
                let key = (wallet_id.0, entry_id.0);
                let (prev, mut entry): (Hash, LedgerEntry) =
                    self.load(Kind::Entry, "entry", key)?;
                entry
                    .mark_reversed(*reversed_by_entry_id)
                    .map_err(|reason| rule("entry", key, reason))?;
                self.put(Kind::Entry, key, &(prev, entry))?;
            }
            Event::TransactionReversed {
                wallet_id,
                transaction_id,
                reversed_by_transaction_id,
                at_ms,
            } => {
                let key = (wallet_id.0, transaction_id.0);
                let mut transaction: Transaction =
                    self.load(Kind::Transaction, "transaction", key)?;
                transaction
                    .mark_reversed(*reversed_by_transaction_id, *at_ms)
                    .map_err(|reason| rule("transaction", key, reason))?;
                self.put(Kind::Transaction, key, &transaction)?;
            }
            Event::RefundTotalChanged {
                wallet_id,
                transaction_id,
                refunded_amount,
                ..
            } => {
                let key = (wallet_id.0, transaction_id.0);
                let mut transaction: Transaction =
                    self.load(Kind::Transaction, "transaction", key)?;
                transaction
                    .set_refunded(*refunded_amount)
                    .map_err(|reason| rule("transaction", key, reason))?;
                self.put(Kind::Transaction, key, &transaction)?;
            }
            Event::HoldPlaced { wallet_id, hold } => {
                let record = (wallet_id.0, hold.id.0);
                self.file_new(heads, Paged::Hold, record, hold, hold.uuid)?;
            }
            Event::HoldClosed {
                wallet_id,
                hold_id,
                status,
                captured_amount,
                capture_transaction_id,
                at_ms,
            } => {
                let key = (wallet_id.0, hold_id.0);
                let mut hold: Hold = self.load(Kind::Hold, "hold", key)?;
                hold.close(*status, *captured_amount, *capture_transaction_id, *at_ms)
                    .map_err(|reason| rule("hold", key, reason))?;
                self.put(Kind::Hold, key, &hold)?;
            }
            Event::PaymentInitiated(payment) => {
                let writes = payment_writes(self.open, payment, true)?;
                self.file_record(Kind::Payment, payment.uuid.0, writes);
            }
            Event::PaymentCompleted {
                payment_uuid,
                merchant_transaction_id,
                at_ms,
            } => self.change_payment(*payment_uuid, |payment| {
                payment.complete(*merchant_transaction_id, *at_ms)
            })?,
            Event::PaymentClosed {
                payment_uuid,
                status,
                at_ms,
            } => self.change_payment(*payment_uuid, |payment| payment.close(*status, *at_ms))?,
            Event::PaymentRefundTotalChanged {
                payment_uuid,
                refunded_amount,
                at_ms,
            } => self.change_payment(*payment_uuid, |payment| {
                payment.set_refunded(*refunded_amount, *at_ms)
            })?,
            Event::PayoutCreated(payout) => {
                let writes = payout_writes(self.open, payout, true)?;
                self.file_record(Kind::Payout, key2(payout.id.0, 0), writes);
            }
            Event::PayoutChanged {
                payout_id,
                change,
                at_ms,
            } => self.refile(
                (Kind::Payout, key2(payout_id.0, 0)),
                &payout_id.0.to_be_bytes(),
                "payout",
                |payout: &mut Payout| payout.apply_change(change, *at_ms),
                payout_writes,
            )?,
            Event::PaymentLinkCreated(link) => {
                let writes = link_writes(self.open, link, true)?;
                self.file_record(Kind::Link, link.uuid.0, writes);
            }
            Event::PaymentLinkUsed {
                link_uuid,
                payment_uuid,
                at_ms,
            } => self.refile(
                (Kind::Link, link_uuid.0),
                &link_uuid.0,
                "payment link",
                |link: &mut PaymentLink| link.mark_used(*payment_uuid, *at_ms),
                link_writes,
            )?,
            Event::QrCreated(qr) => {
                let qrs = self.open.qrs.clone();
                self.writes.insert(&qrs, qr.uuid.0, encode(qr)?);
            }
            Event::SettlementCreated(settlement) => {
                let writes = settlement_writes(self.open, settlement, true)?;
                self.file_record(Kind::Settlement, key2(settlement.id.0, 0), writes);
            }
            Event::SettlementChanged {
                settlement_id,
                change,
                at_ms,
            } => self.refile(
                (Kind::Settlement, key2(settlement_id.0, 0)),
                &settlement_id.0.to_be_bytes(),
                "settlement",
                |settlement: &mut Settlement| settlement.apply_change(change, *at_ms),
                settlement_writes,
            )?,
            Event::WalletCreated(created) => {
                // A wallet has no records before its creation, so its first records need no
                // read of the store: its counts are zero and its chain starts at the zero hash.
                // (The store holds exactly what this filer filed up to its LSN: nothing else
                // writes a wallet's records while it runs, `super::pages::remember`.)
                let w = created.wallet_id.0;
                self.counts.insert(
                    w,
                    Tally {
                        next: [Some(0); Paged::ALL.len()],
                    },
                );
                heads.heads.insert(w, Hash::ZERO);
            }
            Event::UuidKeyChosen { key } => {
                heads
                    .keys
                    .file(self.open, &mut self.writes, self.shard, *key)?;
            }
            moved => self.moves.file(self.open, &mut self.writes, moved, false)?,
        }
        Ok(())
    }

    /// Writes a payment's, payout's, settlement's or link's `writes` (the record first, then its
    /// indexes), the record also into the overlay under `key`.
    fn file_record(&mut self, kind: Kind, key: [u8; 16], writes: Vec<Write<'_>>) {
        for (index, (keyspace, at, value)) in writes.into_iter().enumerate() {
            if index == 0 {
                self.overlay
                    .insert((kind, key), fjall::Slice::from(value.clone()));
            }
            self.writes.insert(keyspace, at, value);
        }
    }

    fn change_payment(
        &mut self,
        uuid: crate::values::ids::Uuid,
        change: impl FnOnce(&mut Payment) -> Result<(), &'static str>,
    ) -> Result<(), StoreError> {
        let overlay = (Kind::Payment, uuid.0);
        self.refile(overlay, &uuid.0, "payment", change, payment_writes)
    }

    /// A filed payment, payout, settlement or link changed through `change` (`change_filed`)
    /// and filed again with `writes` (its record, no new index).
    fn refile<T: DeserializeOwned>(
        &mut self,
        overlay: (Kind, [u8; 16]),
        key: &[u8],
        what: &'static str,
        change: impl FnOnce(&mut T) -> Result<(), &'static str>,
        writes: for<'o> fn(&'o Open, &T, bool) -> Result<Vec<Write<'o>>, StoreError>,
    ) -> Result<(), StoreError> {
        if let Some(record) = self.change_filed(overlay, key, what, change)? {
            let writes = writes(self.open, &record, false)?;
            self.file_record(overlay.0, overlay.1, writes);
        }
        Ok(())
    }

    /// A filed payment, payout or settlement (`overlay`: its place in the overlay; `key`: in its
    /// keyspace) changed through `change`, to file again. One the store lacks is an error,
    /// except in a store written before they were filed (no `commerce_complete`, or no
    /// `settlements_complete` for a settlement): recovery then files the shards' own copy, and
    /// this answers `None`.
    fn change_filed<T: DeserializeOwned>(
        &self,
        overlay: (Kind, [u8; 16]),
        key: &[u8],
        what: &'static str,
        change: impl FnOnce(&mut T) -> Result<(), &'static str>,
    ) -> Result<Option<T>, StoreError> {
        let found = match self.overlay.get(&overlay) {
            Some(value) => Some(value.clone()),
            None => self.keyspace(overlay.0).get(key)?,
        };
        let Some(bytes) = found else {
            let mark = match overlay.0 {
                Kind::Settlement => SETTLEMENTS_COMPLETE,
                Kind::Link => LINKS_COMPLETE,
                _ => COMMERCE_COMPLETE,
            };
            if self.open.meta.get(mark)?.is_none() {
                return Ok(None);
            }
            return Err(StoreError::Missing {
                what,
                key: hex::encode(key),
            });
        };
        let mut record: T = decode(what, key, &bytes)?;
        change(&mut record)
            .map_err(|reason| StoreError::Rule(format!("{what} {}: {reason}", hex::encode(key))))?;
        Ok(Some(record))
    }

    /// The hash of a wallet's newest entry in the store, zero when it has none. Only asked when
    /// no entry of the wallet was filed in this batch (those are in [`ChainHeads`]).
    fn newest_hash(&self, wallet: u64) -> Result<Hash, StoreError> {
        match wallet_records(self.open, Paged::Entry, wallet, (0, u64::MAX), true).next() {
            Some(row) => {
                let (key, bytes) = row?;
                let (_, entry): (Hash, LedgerEntry) = decode("entry", &key, &bytes)?;
                Ok(entry.hash)
            }
            None => Ok(Hash::ZERO),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{file_batch, ChainHeads, Filed};
    use crate::runtime::history::{HistoryStore, StoreError};
    use crate::shard::event::Event;
    use crate::values::ids::{TransactionId, Uuid};

    /// A change to a payment the store lacks is an error once the store files payments
    /// (`commerce_complete`): the indexer stops rather than lose it. Before (a store of an older
    /// release, being upgraded by recovery) it is left to the recovery's filing from memory.
    #[test]
    fn a_change_to_a_payment_the_store_lacks_is_refused_once_payments_are_complete() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        // A store of an older release: no report aggregates either (they would refuse the
        // unknown payment first).
        store.forget_reports().unwrap();
        let completed = || {
            vec![Event::PaymentCompleted {
                payment_uuid: Uuid([7; 16]),
                merchant_transaction_id: TransactionId(1),
                at_ms: 1,
            }]
        };
        let mut heads = ChainHeads::default();
        file_batch(&store, &[Filed::events(1, completed())], &mut heads).unwrap();
        store.file_commerce(std::iter::empty()).unwrap();
        assert!(store.commerce_complete().unwrap());
        let refused = file_batch(&store, &[Filed::events(2, completed())], &mut heads);
        assert!(
            matches!(
                refused,
                Err(StoreError::Missing {
                    what: "payment",
                    ..
                })
            ),
            "{refused:?}"
        );
    }

    /// A keyed answer of customer 1 under `key`, decided at `at_ms`.
    fn keyed_answer(
        key: String,
        at_ms: i64,
        response: &[u8],
    ) -> crate::runtime::journal::IdempotencyRecord {
        crate::runtime::journal::IdempotencyRecord {
            caller: "customer:1".into(),
            key,
            fingerprint: [1; 32],
            at_ms,
            route: 2,
            response: Some(response.to_vec()),
            transfer_uuid: None,
        }
    }

    /// The indexer's batches file their answers in generations: 300 answers over three records
    /// (three generations of 100 ms) are found until the latest answer of their generation
    /// expires, and none is dropped while inside the window.
    #[test]
    fn answers_the_indexer_files_are_purged_once_expired() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        let answer = |i: i64| keyed_answer(format!("k{i}"), 1_000 + i, b"{}");
        let records: Vec<Filed> = (0..3i64)
            .map(|record| Filed {
                answers: (record * 100..record * 100 + 100).map(answer).collect(),
                ..Filed::events(u64::try_from(record).unwrap() + 1, Vec::new())
            })
            .collect();
        file_batch(&store, &records, &mut ChainHeads::default()).unwrap();
        let purged = store.purge_answers_before(1_250, 100_000).unwrap();
        assert_eq!((purged.answers, purged.generations), (0, 2));
        assert!(store.answer("customer:1", "k199").unwrap().is_none());
        for live in ["k200", "k250", "k299"] {
            assert!(
                store.answer("customer:1", live).unwrap().is_some(),
                "{live}"
            );
        }
        let purged = store.purge_answers_before(1_300, 100_000).unwrap();
        assert_eq!(purged.generations, 1);
        assert!(store.answer("customer:1", "k299").unwrap().is_none());
    }

    /// Answers of one batch decided out of order each go to the generation of their own time
    /// (the batch remembers the last one it used, and asks again for a time it does not
    /// hold), and each generation's latest time is what it holds: the purge drops exactly the
    /// generations whose every answer expired.
    #[test]
    fn a_batch_files_answers_decided_out_of_order_by_their_own_times() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        let times = [1_000i64, 1_150, 1_120, 1_160, 1_099];
        let answers = times
            .iter()
            .map(|at_ms| keyed_answer(format!("k{at_ms}"), *at_ms, b"{}"))
            .collect();
        let filed = Filed {
            answers,
            ..Filed::events(1, Vec::new())
        };
        file_batch(&store, &[filed], &mut ChainHeads::default()).unwrap();
        let starts = store.with(|open| Ok(open.generations.starts())).unwrap();
        assert_eq!(starts, vec![1_000, 1_120, 1_150]);
        let found = |at: i64| {
            store
                .answer("customer:1", &format!("k{at}"))
                .unwrap()
                .map(|answer| answer.at_ms)
        };
        for at in times {
            assert_eq!(found(at), Some(at));
        }
        // The first generation's latest is 1,099 (filed last), the second's 1,120.
        let purged = store.purge_answers_before(1_100, 100).unwrap();
        assert_eq!(purged.generations, 1);
        assert_eq!((found(1_000), found(1_099)), (None, None));
        assert_eq!(found(1_120), Some(1_120));
        assert_eq!(
            store.purge_answers_before(1_121, 100).unwrap().generations,
            1
        );
        assert_eq!(
            (found(1_120), found(1_150), found(1_160)),
            (None, Some(1_150), Some(1_160))
        );
    }

    /// The store's memory by part follows what it holds: filed records sit in memtables until
    /// a flush writes them to tables, and reading them back fills the block cache.
    #[test]
    fn the_store_reports_its_memtables_tables_and_cache() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        // A new store holds only its marks (layout, completeness).
        let empty = store.memory().unwrap();
        assert!(empty.memtables < 4_096, "{empty:?}");
        assert_eq!(empty.tables, 0, "{empty:?}");
        let answers = (0..200)
            .map(|i| keyed_answer(format!("k{i}"), 1_000, &[b'x'; 100]))
            .collect();
        let filed = Filed {
            answers,
            ..Filed::events(1, Vec::new())
        };
        file_batch(&store, &[filed], &mut ChainHeads::default()).unwrap();
        let filing = store.memory().unwrap();
        assert!(filing.memtables > 20_000, "{filing:?}");
        assert_eq!(filing.tables, 0, "{filing:?}");
        store.flush_memtables().unwrap();
        // fjall takes a flushed memtable's bytes off its count just after the table replaces
        // it, so the count may lag the flush by a moment (this failed once in a loaded run).
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        let flushed = loop {
            let memory = store.memory().unwrap();
            if memory.memtables == 0 || std::time::Instant::now() > deadline {
                break memory;
            }
            std::thread::yield_now();
        };
        assert_eq!(flushed.memtables, 0, "{flushed:?}");
        assert!(flushed.tables > 0, "{flushed:?}");
        for i in 0..200 {
            assert!(store
                .answer("customer:1", &format!("k{i}"))
                .unwrap()
                .is_some());
        }
        let read = store.memory().unwrap();
        assert!(read.block_cache > 0, "{read:?}");
    }
}
