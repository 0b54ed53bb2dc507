//! The page directory: any page of a wallet's history in O(page), however deep.
//!
//! A wallet's records are ordered by id ([`super::epochs`]), and ids are shard-wide sequences, so a wallet's ids are
//! sparse and the record `n` places from its newest cannot be computed from a key: without help,
//! page `p` skips `(p − 1) × per_page` keys, and a uniformly chosen page of a wallet with 1M
//! entries skipped 500k of them (~0.4 s, `statement_page` in BENCHMARKS.md).
//!
//! The indexer knows each record's ordinal within its wallet (the wallet's count before it, kept
//! in its memory and read once from this directory, [`count_of`]), and files the id of every
//! [`BLOCK`]-th one:
//!
//! ```text
//! pages   wallet | kind | ordinal / BLOCK   -> id (u64)      kind: 0 transaction, 1 entry, 2 hold
//! meta    "pages_complete"                  -> ()            every block of every wallet is filed
//! ```
//!
//! A page covering ordinals `lo..=hi` then starts at the directory's id for block `lo / BLOCK`,
//! skips fewer than [`BLOCK`] keys, reads `hi − lo + 1` and reverses them: at most one point read
//! and `BLOCK + per_page` keys, independent of depth. One directory key per 1,024 records is
//! what it costs the indexer.
//!
//! A store written before the directory existed gets it built from its own records on open
//! ([`complete_directory`]), once, before the marker is set; a reader that finds a block missing
//! all the same (a damaged store) falls back to the skip, which is slow but right.

use super::epochs::{record_of, wallet_records, Rows};
use super::store::{key3, numbers, Open, StoreError};
use super::writes::Writes;
use crate::values::ids::WalletId;

/// Records per directory key.
pub(crate) const BLOCK: u64 = 1024;

/// Set once the directory holds every block of every wallet.
pub(crate) const PAGES_COMPLETE: &[u8] = b"pages_complete";

/// Which records a directory key points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paged {
    Transaction = 0,
    Entry = 1,
    Hold = 2,
}

impl Paged {
    /// Every kind, in order.
    pub(crate) const ALL: [Paged; 3] = [Paged::Transaction, Paged::Entry, Paged::Hold];

    pub(crate) fn keyspace(self, open: &Open) -> &fjall::Keyspace {
        match self {
            Paged::Transaction => &open.transactions,
            Paged::Entry => &open.entries,
            Paged::Hold => &open.holds,
        }
    }
}

/// The directory key of `ordinal`'s block.
pub(crate) fn directory_key(wallet: u64, kind: Paged, ordinal: u64) -> [u8; 24] {
    key3(wallet, kind as u64, ordinal / BLOCK)
}

/// Whether a record with this ordinal starts a block (and so gets a directory key).
pub(crate) fn starts_block(ordinal: u64) -> bool {
    ordinal.is_multiple_of(BLOCK)
}

/// Entries per key of the fine directory: inside each block, the id of every `FINE`-th
/// entry, so that the search for a time ([`super::dated`]) scans at most this many entries
/// where it scanned up to a block. One more store item per 64 entries:
///
/// ```text
/// pages   wallet | 4 | ordinal / FINE   -> id (u64)   entries only; none where a block starts
/// ```
///
/// Entries filed by a build before it (2026-11-29) have none, and a search that misses a fine
/// key scans the block as before; a key present is always right, since an entry's ordinal is
/// its wallet's count before it and never changes. Older builds never read these keys.
pub(crate) const FINE: u64 = 64;

/// The `pages` kind of the fine keys (the blocks' kinds are 0 to 2, [`Paged`]; 3 is the floor
/// marker of [`super::dated`]).
const FINE_KIND: u64 = 4;

/// The fine directory key of entry `ordinal`'s sub-block.
pub(crate) fn fine_key(wallet: u64, ordinal: u64) -> [u8; 24] {
    key3(wallet, FINE_KIND, ordinal / FINE)
}

/// Whether an entry with this ordinal gets a fine key: it starts a sub-block but not a block,
/// whose key holds its id already.
pub(crate) fn starts_fine(ordinal: u64) -> bool {
    ordinal.is_multiple_of(FINE) && !starts_block(ordinal)
}

/// How many directory keys `wallet` has for `kind` (a complete directory has one per started
/// block: `count.div_ceil(BLOCK)`).
pub(crate) fn directory_keys(open: &Open, wallet: u64, kind: Paged) -> Result<u64, StoreError> {
    let mut keys = 0u64;
    for guard in wallet_directory(open, wallet, kind) {
        guard.key()?;
        keys += 1;
    }
    Ok(keys)
}

/// `wallet`'s directory keys of `kind`, oldest block first.
fn wallet_directory(
    open: &Open,
    wallet: u64,
    kind: Paged,
) -> impl DoubleEndedIterator<Item = fjall::Guard> {
    open.pages
        .range(directory_key(wallet, kind, 0)..=key3(wallet, kind as u64, u64::MAX))
}

/// A wallet's counts by [`Paged`] kind, each known or not yet read.
pub(crate) type KindCounts = [Option<u64>; 3];

/// The indexer's counts by wallet ([`Open::counted`]).
pub(crate) type Counted = rustc_hash::FxHashMap<u64, KindCounts>;

/// How many records of `kind` `wallet` has: what the indexer counted ([`Open::counted`]), or
/// else `BLOCK` for each block before its last directory key plus the records from that key's
/// id on (fewer than [`BLOCK`] in a complete directory, so one seek and under a thousand
/// keys). Exact whenever that last key is (a block missing before it does not matter; one
/// missing after it only makes the scan longer); a wallet without any key is counted by a scan
/// of its records (none, for a wallet that has none: its `wallet_epochs` range is empty). The
/// indexer used to write every touched wallet's counts in every batch, about one store item
/// per request (BENCHMARKS.md, "Cheaper requests").
pub(crate) fn count_of(open: &Open, wallet: u64, kind: Paged) -> Result<u64, StoreError> {
    match known(open, wallet, kind) {
        Some(count) => Ok(count),
        None => directory_count(open, wallet, kind),
    }
}

/// The count of `kind` the indexer's memory holds for `wallet`, if any.
fn known(open: &Open, wallet: u64, kind: Paged) -> Option<u64> {
    counted(open)
        .get(&wallet)
        .and_then(|counts| counts.get(kind as usize).copied().flatten())
}

/// [`count_of`] for a page read, which also remembers a count it derives ([`remember`]), so
/// that a wallet's reads after its first since the store opened cost no scan (a statement
/// page of a wallet the indexer has not filed since: BENCHMARKS.md, "Counts a page read
/// remembers").
pub(crate) fn count_for_read(open: &Open, wallet: u64, kind: Paged) -> Result<u64, StoreError> {
    if let Some(count) = known(open, wallet, kind) {
        return Ok(count);
    }
    let count = directory_count(open, wallet, kind)?;
    #[cfg(test)]
    between_scan_and_remember::run(open, wallet);
    remember(open, wallet, kind, count);
    Ok(count)
}

/// A test's seam between a page read's scan and its [`remember`]: there the test has a batch
/// of the same wallet committed, the interleaving the rule of [`remember`] is about
/// (`tests::history_reads`).
#[cfg(test)]
pub(crate) mod between_scan_and_remember {
    use super::Open;

    type Hook = Box<dyn FnOnce() + Send>;

    /// Which read a hook is for: the open store (by address: tests run side by side in one
    /// process, each with its own store) and the wallet.
    type For = (usize, u64);

    static HOOK: std::sync::Mutex<Option<(For, Hook)>> = std::sync::Mutex::new(None);

    fn store_of(open: &Open) -> usize {
        std::ptr::from_ref(open) as usize
    }

    /// Runs `hook` in the next page read of `wallet` in `open` that derives a count, between
    /// its scan and its remember.
    pub(crate) fn set(open: &Open, wallet: u64, hook: Hook) {
        *lock() = Some(((store_of(open), wallet), hook));
    }

    pub(super) fn run(open: &Open, wallet: u64) {
        let hook = {
            let mut slot = lock();
            match slot.take() {
                Some((read, hook)) if read == (store_of(open), wallet) => Some(hook),
                other => {
                    *slot = other;
                    None
                }
            }
        };
        if let Some(hook) = hook {
            hook();
        }
    }

    fn lock() -> std::sync::MutexGuard<'static, Option<(For, Hook)>> {
        HOOK.lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// Stores a count a reader derived in the indexer's memory, only if its slot is empty.
///
/// Why such a count is never wrong for long. A derived count reads the last directory key,
/// the wallet's epochs and one range per epoch, each at its own snapshot, so a batch that
/// commits in between can tear it (some of the batch's records seen, some not), and one that
/// commits after the scan makes it stale. Either way that batch added records of this wallet
/// and kind, so the indexer, right after its commit and before it publishes the batch or
/// takes the next one's counts from this memory, stores its own count for them
/// ([`super::filing`]): a count remembered before that is overwritten, one remembered after
/// finds the slot taken (`tests::history_reads::a_count_staled_between_a_reads_scan_and_its_remember_does_not_last`
/// holds a read between its scan and this call while such a batch commits). This holds because the indexer is the only writer of the records,
/// `wallet_epochs` and the page directory while reads run (recovery's refiling, the layout
/// upgrade and [`complete_directory`] finish before the store is served); a writer added
/// beside it must update this memory too. After a failed commit the memory is cleared and
/// the indexer files nothing more in this store (it stops; a restart opens the store afresh).
fn remember(open: &Open, wallet: u64, kind: Paged, count: u64) {
    if let Some(slot) = counted(open)
        .entry(wallet)
        .or_default()
        .get_mut(kind as usize)
    {
        slot.get_or_insert(count);
    }
}

/// [`count_of`] from the page directory alone.
pub(crate) fn directory_count(open: &Open, wallet: u64, kind: Paged) -> Result<u64, StoreError> {
    let last = wallet_directory(open, wallet, kind).next_back();
    let (block, first) = match last {
        Some(last) => {
            let (key, id) = last.into_inner()?;
            let [_, _, block] = numbers::<3>("page directory key", &key)?;
            let [first] = numbers::<1>("page directory id", &id)?;
            (block, first)
        }
        None => (0, 0),
    };
    let mut tail = 0u64;
    for row in wallet_records(open, kind, wallet, (first, u64::MAX), false) {
        row?;
        tail += 1;
    }
    Ok(block.saturating_mul(BLOCK).saturating_add(tail))
}

pub(crate) fn counted(open: &Open) -> std::sync::MutexGuard<'_, Counted> {
    open.counted
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

/// The raw values of a page of `wallet`'s records of `kind`, newest first: `take` of them after
/// skipping the `skip` newest, of `total`.
pub(crate) fn newest_first_raw(
    open: &Open,
    kind: Paged,
    wallet_id: WalletId,
    total: u64,
    skip: u64,
    take: u64,
) -> Result<Vec<(fjall::Slice, fjall::Slice)>, StoreError> {
    if skip >= total || take == 0 {
        return Ok(Vec::new());
    }
    let w = wallet_id.0;
    let hi = total - 1 - skip;
    let lo = hi.saturating_sub(take - 1);
    let start = match open.pages.get(directory_key(w, kind, lo))? {
        Some(bytes) => Some(numbers::<1>("page directory", &bytes)?[0]),
        None => None,
    };
    let mut rows = Vec::new();
    match start {
        Some(first_id) => {
            let offset = lo - (lo / BLOCK) * BLOCK;
            let wanted = hi - lo + 1;
            for row in wallet_records(open, kind, w, (first_id, u64::MAX), false)
                .skip(offset as usize)
                .take(wanted as usize)
            {
                rows.push(row?);
            }
            rows.reverse();
        }
        None => {
            for row in wallet_records(open, kind, w, (0, u64::MAX), true)
                .skip(usize::try_from(skip).unwrap_or(usize::MAX))
                .take(usize::try_from(take).unwrap_or(usize::MAX))
            {
                rows.push(row?);
            }
        }
    }
    Ok(rows)
}

/// The records of `kind` of several wallets merged newest first (ids are shard-wide and only
/// grow, so the id orders them), `skip` then at most `take`: one reverse range per wallet, a
/// merge over their heads, O(skip + take) keys read and only the taken values kept. Each row is
/// (the wallet's index in `wallets`, key, value).
pub(crate) fn newest_merged_raw(
    open: &Open,
    kind: Paged,
    wallets: &[WalletId],
    skip: u64,
    take: u64,
) -> Result<Vec<(usize, fjall::Slice, fjall::Slice)>, StoreError> {
    let mut ranges: Vec<Rows> = wallets
        .iter()
        .map(|wallet| wallet_records(open, kind, wallet.0, (0, u64::MAX), true))
        .collect();
    // Per wallet, its newest record not yet merged; the heap orders their ids.
    let mut heads: Vec<Option<(fjall::Slice, fjall::Slice)>> = vec![None; wallets.len()];
    let mut order = std::collections::BinaryHeap::new();
    for index in 0..wallets.len() {
        advance(index, &mut ranges, &mut heads, &mut order)?;
    }
    let mut rows = Vec::new();
    let mut skipped = 0u64;
    while (rows.len() as u64) < take {
        let Some((_, index)) = order.pop() else {
            break;
        };
        let head = heads.get_mut(index).and_then(Option::take);
        advance(index, &mut ranges, &mut heads, &mut order)?;
        let Some((key, value)) = head else {
            continue;
        };
        if skipped < skip {
            skipped += 1;
        } else {
            rows.push((index, key, value));
        }
    }
    Ok(rows)
}

/// Moves wallet `index`'s merge head to its next (older) record, if any, and queues its id.
fn advance(
    index: usize,
    ranges: &mut [Rows],
    heads: &mut [Option<(fjall::Slice, fjall::Slice)>],
    order: &mut std::collections::BinaryHeap<(u64, usize)>,
) -> Result<(), StoreError> {
    let Some(row) = ranges.get_mut(index).and_then(Iterator::next) else {
        return Ok(());
    };
    let (key, value) = row?;
    let (_, id) = record_of(&key)?;
    order.push((id, index));
    if let Some(head) = heads.get_mut(index) {
        *head = Some((key, value));
    }
    Ok(())
}

/// Builds the directory of a store that has records but no `pages_complete` marker (written
/// before the directory existed), then sets the marker; a new store only gets the marker. Runs
/// on open, before the indexer starts, over the wallet-first keyspaces such a store has
/// (`records`: transactions, entries, holds; see [`super::epochs::upgrade_layout`]). Logs its
/// progress: it reads every record key once.
pub(crate) fn complete_directory(
    open: &Open,
    records: [&fjall::Keyspace; 3],
) -> Result<(), StoreError> {
    if open.meta.get(PAGES_COMPLETE)?.is_some() {
        return Ok(());
    }
    const COMMIT_EVERY: usize = 100_000;
    let started = std::time::Instant::now();
    let mut keys_read = 0u64;
    for (kind, keyspace) in [Paged::Transaction, Paged::Entry, Paged::Hold]
        .into_iter()
        .zip(records)
    {
        let mut writes = Writes::new(&open.db);
        let mut pending = 0usize;
        let mut current: Option<(u64, u64)> = None; // (wallet, next ordinal)
        for guard in keyspace.iter() {
            let key = guard.key()?;
            let [wallet, id] = numbers::<2>("record key", &key)?;
            let ordinal = match current {
                Some((w, next)) if w == wallet => next,
                _ => 0,
            };
            if starts_block(ordinal) {
                writes.insert(
                    &open.pages,
                    directory_key(wallet, kind, ordinal),
                    id.to_be_bytes().to_vec(),
                );
                pending += 1;
            }
            current = Some((wallet, ordinal + 1));
            keys_read += 1;
            if pending >= COMMIT_EVERY {
                writes.commit()?;
                writes = Writes::new(&open.db);
                pending = 0;
            }
            if keys_read.is_multiple_of(1_000_000) {
                tracing::info!(keys_read, "building the history store's page directory");
            }
        }
        writes.commit()?;
    }
    let mut writes = Writes::new(&open.db);
    writes.insert(&open.meta, PAGES_COMPLETE, Vec::new());
    writes.commit()?;
    open.db.persist(fjall::PersistMode::SyncData)?;
    if keys_read > 0 {
        tracing::info!(
            keys_read,
            took_ms = started.elapsed().as_millis() as u64,
            "built the history store's page directory"
        );
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::history::epochs::{
        entry_of_time_key, id_epoch, record_key, wallet_entry_times, EpochsSeen, LAYOUT,
    };
    use crate::runtime::history::store::{key2, time_key};
    use crate::runtime::history::HistoryStore;

    /// Wallet 7's ids are `10 + STRIDE x ordinal`: sparse, as a shard's ids are, and spread over
    /// several epochs (2^18 ids each), so pages cross epoch boundaries.
    const STRIDE: u64 = 300;

    fn id_of(ordinal: u64) -> u64 {
        10 + STRIDE * ordinal
    }

    /// A store holding, for wallet 7, entry-shaped raw records with ids [`id_of`] each ordinal,
    /// and a few records of wallets 6 and 8 in the same epochs around them.
    fn store_with(records: u64, directory: bool) -> (tempfile::TempDir, HistoryStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                let mut writes = Writes::new(&open.db);
                let mut epochs = EpochsSeen::default();
                let kind = Paged::Entry as u64;
                for wallet in [6u64, 8] {
                    for n in 0..5u64 {
                        let id = id_of(n * 700);
                        writes.insert(&open.entries, record_key(wallet, id), vec![wallet as u8]);
                        epochs.note(open, &mut writes, wallet, kind, id_epoch(id));
                    }
                }
                for ordinal in 0..records {
                    let id = id_of(ordinal);
                    writes.insert(&open.entries, record_key(7, id), id.to_be_bytes().to_vec());
                    epochs.note(open, &mut writes, 7, kind, id_epoch(id));
                    if directory && starts_block(ordinal) {
                        writes.insert(
                            &open.pages,
                            directory_key(7, Paged::Entry, ordinal),
                            id.to_be_bytes().to_vec(),
                        );
                    }
                }
                writes.commit()?;
                Ok(())
            })
            .unwrap();
        (dir, store)
    }

    fn page(store: &HistoryStore, total: u64, skip: u64, take: u64) -> Vec<u64> {
        store
            .with(|open| newest_first_raw(open, Paged::Entry, WalletId(7), total, skip, take))
            .unwrap()
            .into_iter()
            .map(|(key, _)| record_of(&key).unwrap().1)
            .collect()
    }

    /// What a page must hold: ids of ordinals `total − 1 − skip` down, `take` of them.
    fn expected(total: u64, skip: u64, take: u64) -> Vec<u64> {
        (0..total)
            .rev()
            .skip(skip as usize)
            .take(take as usize)
            .map(id_of)
            .collect()
    }

    fn every_page_is_right(store: &HistoryStore, total: u64) {
        for take in [1, 7, 50, 100] {
            for skip in
                (0..total + 3)
                    .step_by(97)
                    .chain([BLOCK - 1, BLOCK, BLOCK + 1, total - 1, total])
            {
                assert_eq!(
                    page(store, total, skip, take),
                    expected(total, skip, take),
                    "skip {skip} take {take}"
                );
            }
        }
    }

    /// A wallet's count comes from its last directory key and the records after it: exact on
    /// either side of a block boundary, with a block's key missing before the last one, with the
    /// last one missing, and with none at all (a damaged directory is scanned, never trusted
    /// to say zero).
    #[test]
    fn a_wallets_count_is_its_last_block_plus_the_records_after_it() {
        for total in [0, 1, BLOCK - 1, BLOCK, BLOCK + 1, 3 * BLOCK + 17] {
            let (_dir, store) = store_with(total, true);
            let count =
                |store: &HistoryStore| store.with(|open| count_of(open, 7, Paged::Entry)).unwrap();
            assert_eq!(count(&store), total, "{total} records");
            store
                .with(|open| {
                    assert_eq!(count_of(open, 7, Paged::Hold)?, 0, "another kind");
                    assert_eq!(count_of(open, 9, Paged::Entry)?, 0, "another wallet");
                    Ok(())
                })
                .unwrap();
            if total > 2 * BLOCK {
                store
                    .with(|open| Ok(open.pages.remove(directory_key(7, Paged::Entry, BLOCK))?))
                    .unwrap();
                assert_eq!(count(&store), total, "block 1's key missing");
                let last = (total - 1) / BLOCK * BLOCK;
                store
                    .with(|open| Ok(open.pages.remove(directory_key(7, Paged::Entry, last))?))
                    .unwrap();
                assert_eq!(count(&store), total, "the last block's key missing");
            }
            store
                .with(|open| Ok(open.pages.remove(directory_key(7, Paged::Entry, 0))?))
                .unwrap();
            assert_eq!(count(&store), total, "block 0's key missing too");
        }
    }

    /// A page read remembers the count it derives, in the slot the indexer keeps, only while
    /// that slot is empty: a second read costs no scan (records written behind the indexer's
    /// back, which production never does, are not seen), `count_of` gives the same, and a
    /// count the indexer stored is never replaced by one a reader remembers later.
    #[test]
    fn a_count_a_reader_derives_is_remembered_until_the_indexer_counts_the_wallet() {
        let total = 2 * BLOCK + 5;
        let (_dir, store) = store_with(total, true);
        store
            .with(|open| {
                assert_eq!(count_for_read(open, 7, Paged::Entry)?, total);
                assert_eq!(counted(open).get(&7), Some(&[None, Some(total), None]));
                // Two more records filed behind the indexer's back: only a scan would see them.
                let mut writes = Writes::new(&open.db);
                for ordinal in total..total + 2 {
                    writes.insert(&open.entries, record_key(7, id_of(ordinal)), [7u8; 40]);
                }
                writes.commit()?;
                assert_eq!(directory_count(open, 7, Paged::Entry)?, total + 2);
                assert_eq!(count_for_read(open, 7, Paged::Entry)?, total, "remembered");
                assert_eq!(count_of(open, 7, Paged::Entry)?, total);
                // Another kind of the same wallet is derived and remembered beside it.
                assert_eq!(count_for_read(open, 7, Paged::Hold)?, 0);
                assert_eq!(counted(open).get(&7), Some(&[None, Some(total), Some(0)]));
                // The indexer's count, stored after its commit, stands against a count a
                // reader derived before that commit and remembers after it.
                counted(open).insert(7, [None, Some(total + 2), None]);
                remember(open, 7, Paged::Entry, total);
                assert_eq!(counted(open).get(&7), Some(&[None, Some(total + 2), None]));
                assert_eq!(count_for_read(open, 7, Paged::Entry)?, total + 2);
                remember(open, 8, Paged::Hold, 4);
                assert_eq!(counted(open).get(&8), Some(&[None, None, Some(4)]));
                Ok(())
            })
            .unwrap();
    }

    /// A store of layout 3 keeps its `counts` only if they agree with what the page directory
    /// gives: one that disagrees is refused as damaged, with the way out, and keeps its counts;
    /// one that agrees is marked with the current layout and its counts are dropped. Its records
    /// are in the 24-byte keyspaces, as layout 3 kept them: the counts are checked against the
    /// copy, so a check before the copy would find none of them.
    #[test]
    fn counts_that_disagree_with_the_directory_refuse_the_upgrade() {
        use crate::runtime::history::epochs::{record_of, ID_EPOCH_BITS, LAYOUT_CURRENT};
        use crate::runtime::history::store::{keyspace_options, WIDE_RECORD_KEYSPACES};
        let total = BLOCK + 5;
        let (dir, store) = store_with(total, true);
        store
            .with(|open| {
                open.meta.insert(LAYOUT, [3])?;
                let [_, wide_entries, _] = WIDE_RECORD_KEYSPACES;
                let wide = open
                    .db
                    .keyspace(wide_entries, || keyspace_options(wide_entries))?;
                let mut writes = Writes::new(&open.db);
                for row in open.entries.iter() {
                    let (key, value) = row.into_inner()?;
                    let (wallet, id) = record_of(&key)?;
                    writes.insert(&wide, key3(id >> ID_EPOCH_BITS, wallet, id), value);
                    writes.remove(&open.entries, key);
                }
                writes.commit()?;
                Ok(())
            })
            .unwrap();
        store.persist().unwrap();
        store.close();
        let older_counts = |entries: u64| {
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            db.keyspace("counts", fjall::KeyspaceCreateOptions::default)
                .unwrap()
                .insert(7u64.to_be_bytes(), key3(0, entries, 0))
                .unwrap();
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        };
        older_counts(total + 1);
        let refused = HistoryStore::open(dir.path(), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(
            refused.contains("wallet 7") && refused.contains("damaged"),
            "{refused}"
        );
        assert!(refused.contains("--from-archive"), "{refused}");
        older_counts(total);
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                assert_eq!(
                    open.meta.get(LAYOUT)?.as_deref(),
                    Some(&[LAYOUT_CURRENT][..])
                );
                assert!(!open.db.keyspace_exists("counts"));
                assert_eq!(count_of(open, 7, Paged::Entry)?, total);
                Ok(())
            })
            .unwrap();
    }

    #[test]
    fn every_page_through_the_directory_equals_the_scan() {
        let total = 3 * BLOCK + 17;
        assert!(id_epoch(id_of(total)) >= 3, "the records span epochs");
        let (_dir, store) = store_with(total, true);
        every_page_is_right(&store, total);
    }

    #[test]
    fn a_page_is_found_through_the_directory_not_by_skipping() {
        let total = 2 * BLOCK + 5;
        let (_dir, store) = store_with(total, true);
        // Point block 1 one record late: a reader using the directory shows it; a scan would not.
        store
            .with(|open| {
                let ordinal = BLOCK + 1;
                let mut writes = Writes::new(&open.db);
                writes.insert(
                    &open.pages,
                    directory_key(7, Paged::Entry, BLOCK),
                    id_of(ordinal).to_be_bytes().to_vec(),
                );
                writes.commit()?;
                Ok(())
            })
            .unwrap();
        let skip = total - 1 - (BLOCK + 10); // newest record shown: ordinal BLOCK + 10
        let shown = page(&store, total, skip, 11);
        assert_ne!(
            shown,
            expected(total, skip, 11),
            "the directory was not read"
        );
    }

    #[test]
    fn a_missing_block_falls_back_to_the_scan() {
        let total = 2 * BLOCK + 5;
        let (_dir, store) = store_with(total, false);
        for skip in [0, 3, BLOCK + 2, total - 1] {
            assert_eq!(page(&store, total, skip, 20), expected(total, skip, 20));
        }
    }

    /// A store written wallet-first, before the page directory: on open its directory is built,
    /// its records and date index are copied into the epoch-first keyspaces, and the old
    /// keyspaces are dropped; every page and a date range read right afterwards, and again
    /// after another open.
    #[test]
    fn an_older_wallet_first_store_is_copied_into_epochs_with_its_directory() {
        let total = 2 * BLOCK + 5;
        let dir = tempfile::tempdir().unwrap();
        {
            let db = fjall::Database::builder(dir.path()).open().unwrap();
            let options = fjall::KeyspaceCreateOptions::default;
            let entries = db.keyspace("entries", options).unwrap();
            let times = db.keyspace("entry_times", options).unwrap();
            let transactions = db.keyspace("transactions", options).unwrap();
            for wallet in [6u64, 8] {
                for n in 0..5u64 {
                    entries
                        .insert(key2(wallet, id_of(n * 700)), vec![wallet as u8])
                        .unwrap();
                }
            }
            transactions.insert(key2(9, 4), vec![9]).unwrap();
            for ordinal in 0..total {
                let id = id_of(ordinal);
                entries
                    .insert(key2(7, id), id.to_be_bytes().to_vec())
                    .unwrap();
                let at = time_key(1_000 * ordinal as i64);
                times.insert(key3(7, at, id), Vec::new()).unwrap();
            }
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
        for _ in 0..2 {
            let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
            store
                .with(|open| {
                    assert!(open.meta.get(PAGES_COMPLETE)?.is_some());
                    assert!(open.meta.get(LAYOUT)?.is_some());
                    for old in ["entries", "entry_times", "transactions", "holds"] {
                        assert!(!open.db.keyspace_exists(old), "{old} is left");
                    }
                    for (block, ordinal) in [(0, 0), (1, BLOCK), (2, 2 * BLOCK)] {
                        let id = open.pages.get(key3(7, Paged::Entry as u64, block))?;
                        assert_eq!(
                            id.map(|bytes| numbers::<1>("id", &bytes).unwrap()[0]),
                            Some(id_of(ordinal)),
                            "block {block}"
                        );
                    }
                    for wallet in [6u64, 8] {
                        let id = open.pages.get(key3(wallet, Paged::Entry as u64, 0))?;
                        assert_eq!(
                            id.map(|bytes| numbers::<1>("id", &bytes).unwrap()[0]),
                            Some(id_of(0))
                        );
                    }
                    assert!(open.pages.get(key3(7, Paged::Entry as u64, 3))?.is_none());
                    assert_eq!(
                        open.transactions.get(record_key(9, 4))?.as_deref(),
                        Some(&[9u8][..])
                    );
                    // Entries created 100 s to 199.999 s in: ordinals 199 down to 100.
                    let range = (time_key(100_000), time_key(199_999));
                    let ids: Vec<u64> = wallet_entry_times(open, 7, range)
                        .map(|row| entry_of_time_key(&row.unwrap().0).unwrap())
                        .collect();
                    assert_eq!(ids, (100..200).rev().map(id_of).collect::<Vec<_>>());
                    Ok(())
                })
                .unwrap();
            every_page_is_right(&store, total);
            store.close();
        }
    }
}
