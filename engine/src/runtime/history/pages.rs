//! The page directory: any page of a wallet's history in O(page), however deep.
//!
//! Records are keyed `wallet | id`, and ids are shard-wide sequences, so a wallet's ids are
//! sparse and the record `n` places from its newest cannot be computed from a key: without help,
//! page `p` skips `(p − 1) × per_page` keys, and a uniformly chosen page of a wallet with 1M
//! entries skipped 500k of them (~0.4 s, `statement_page` in BENCHMARKS.md).
//!
//! The indexer knows each record's ordinal within its wallet (the wallet's count before it, from
//! `counts`), and files the id of every [`BLOCK`]-th one:
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

use super::store::{key2, key3, numbers, Open, StoreError};
use crate::values::ids::WalletId;

/// Records per directory key.
pub(crate) const BLOCK: u64 = 1024;

/// Set once the directory holds every block of every wallet.
const PAGES_COMPLETE: &[u8] = b"pages_complete";

/// Which records a directory key points into.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Paged {
    Transaction = 0,
    Entry = 1,
    Hold = 2,
}

impl Paged {
    fn keyspace(self, open: &Open) -> &fjall::Keyspace {
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
    let keyspace = kind.keyspace(open);
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
            for guard in keyspace
                .range(key2(w, first_id)..=key2(w, u64::MAX))
                .skip(offset as usize)
                .take(wanted as usize)
            {
                rows.push(guard.into_inner()?);
            }
            rows.reverse();
        }
        None => {
            for guard in keyspace
                .range(key2(w, 0)..=key2(w, u64::MAX))
                .rev()
                .skip(usize::try_from(skip).unwrap_or(usize::MAX))
                .take(usize::try_from(take).unwrap_or(usize::MAX))
            {
                rows.push(guard.into_inner()?);
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
    let keyspace = kind.keyspace(open);
    let mut ranges: Vec<std::iter::Rev<fjall::Iter>> = wallets
        .iter()
        .map(|wallet| {
            keyspace
                .range(key2(wallet.0, 0)..=key2(wallet.0, u64::MAX))
                .rev()
        })
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
    ranges: &mut [std::iter::Rev<fjall::Iter>],
    heads: &mut [Option<(fjall::Slice, fjall::Slice)>],
    order: &mut std::collections::BinaryHeap<(u64, usize)>,
) -> Result<(), StoreError> {
    let Some(guard) = ranges.get_mut(index).and_then(Iterator::next) else {
        return Ok(());
    };
    let (key, value) = guard.into_inner()?;
    let [_, id] = numbers::<2>("record key", &key)?;
    order.push((id, index));
    if let Some(head) = heads.get_mut(index) {
        *head = Some((key, value));
    }
    Ok(())
}

/// Builds the directory of a store that has records but no `pages_complete` marker (written
/// before the directory existed), then sets the marker; a new store only gets the marker. Runs
/// before the indexer starts. Logs its progress: it reads every record key once.
pub(crate) fn complete_directory(open: &Open) -> Result<(), StoreError> {
    if open.meta.get(PAGES_COMPLETE)?.is_some() {
        return Ok(());
    }
    const COMMIT_EVERY: usize = 100_000;
    let started = std::time::Instant::now();
    let mut keys_read = 0u64;
    for kind in [Paged::Transaction, Paged::Entry, Paged::Hold] {
        let mut writes = open.db.batch();
        let mut pending = 0usize;
        let mut current: Option<(u64, u64)> = None; // (wallet, next ordinal)
        for guard in kind.keyspace(open).iter() {
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
                writes = open.db.batch();
                pending = 0;
            }
            if keys_read.is_multiple_of(1_000_000) {
                tracing::info!(keys_read, "building the history store's page directory");
            }
        }
        writes.commit()?;
    }
    let mut writes = open.db.batch();
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
    use crate::runtime::history::HistoryStore;

    /// A store holding, for wallet 7, entry-shaped raw records with ids 10, 13, 16, … (sparse,
    /// as a shard's ids are), and a few records of wallets 6 and 8 around it.
    fn store_with(records: u64, directory: bool) -> (tempfile::TempDir, HistoryStore) {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                let mut writes = open.db.batch();
                for wallet in [6u64, 8] {
                    for id in 0..5u64 {
                        writes.insert(&open.entries, key2(wallet, id), vec![wallet as u8]);
                    }
                }
                for ordinal in 0..records {
                    let id = 10 + 3 * ordinal;
                    writes.insert(&open.entries, key2(7, id), id.to_be_bytes().to_vec());
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
            .map(|(key, _)| numbers::<2>("key", &key).unwrap()[1])
            .collect()
    }

    /// What a page must hold: ids of ordinals `total − 1 − skip` down, `take` of them.
    fn expected(total: u64, skip: u64, take: u64) -> Vec<u64> {
        (0..total)
            .rev()
            .skip(skip as usize)
            .take(take as usize)
            .map(|ordinal| 10 + 3 * ordinal)
            .collect()
    }

    #[test]
    fn every_page_through_the_directory_equals_the_scan() {
        let total = 3 * BLOCK + 17;
        let (_dir, store) = store_with(total, true);
        for take in [1, 7, 50, 100] {
            for skip in
                (0..total + 3)
                    .step_by(97)
                    .chain([BLOCK - 1, BLOCK, BLOCK + 1, total - 1, total])
            {
                assert_eq!(
                    page(&store, total, skip, take),
                    expected(total, skip, take),
                    "skip {skip} take {take}"
                );
            }
        }
    }

    #[test]
    fn a_page_is_found_through_the_directory_not_by_skipping() {
        let total = 2 * BLOCK + 5;
        let (_dir, store) = store_with(total, true);
        // Point block 1 one record late: a reader using the directory shows it; a scan would not.
        store
            .with(|open| {
                let ordinal = BLOCK + 1;
                let mut writes = open.db.batch();
                writes.insert(
                    &open.pages,
                    directory_key(7, Paged::Entry, BLOCK),
                    (10 + 3 * ordinal).to_be_bytes().to_vec(),
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

    #[test]
    fn an_older_store_gets_its_directory_built_on_open() {
        let total = 2 * BLOCK + 5;
        let (dir, store) = store_with(total, false);
        store
            .with(|open| {
                open.meta.remove(PAGES_COMPLETE)?;
                Ok(())
            })
            .unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                assert!(open.meta.get(PAGES_COMPLETE)?.is_some());
                for (block, ordinal) in [(0, 0), (1, BLOCK), (2, 2 * BLOCK)] {
                    let id = open.pages.get(key3(7, Paged::Entry as u64, block))?;
                    assert_eq!(
                        id.map(|bytes| numbers::<1>("id", &bytes).unwrap()[0]),
                        Some(10 + 3 * ordinal),
                        "block {block}"
                    );
                }
                for wallet in [6u64, 8] {
                    let id = open.pages.get(key3(wallet, Paged::Entry as u64, 0))?;
                    assert_eq!(
                        id.map(|bytes| numbers::<1>("id", &bytes).unwrap()[0]),
                        Some(0)
                    );
                }
                assert!(open.pages.get(key3(7, Paged::Entry as u64, 3))?.is_none());
                Ok(())
            })
            .unwrap();
        assert_eq!(
            page(&store, total, BLOCK + 2, 9),
            expected(total, BLOCK + 2, 9)
        );
    }
}
