//! A wallet's entries within a period, found by searching the wallet's own entries: no date
//! index for entries posted at the shard's floor (store layout 8).
//!
//! A shard stamps no posting earlier than an entry before it (`Shard::posted_at_floor_ms`,
//! journal format 7 and up), so a wallet's entries from then on are in time order as they are
//! in id order, and the entries of a period are one run of the wallet's ordinals. Its ends are
//! found by a binary search over the page directory's blocks, then over the fine directory's
//! sub-blocks within one (one entry read a step), and a scan of at most one sub-block
//! ([`FINE`] entries; up to a whole [`BLOCK`] where fine keys are missing, as for entries
//! filed before them): O(log n + FINE) reads however long the period, and the period's count
//! is the run's length, not a scan of it. The date index cost the indexer two store items of
//! the six a transfer files, and a keyspace to flush and compact (BENCHMARKS.md, "Entries in
//! time order").
//!
//! Entries logged before format 7 may be out of time order by a few milliseconds (commands
//! were stamped on the HTTP threads and decided in arrival order) or by more (a clock stepped
//! back); they keep their date index keys (`entry_times`, [`super::epochs::wallet_entry_times`]).
//! A wallet with such entries gets a marker at its first entry posted at the floor:
//!
//! ```text
//! pages   wallet | 3 | 0    -> ordinal (u64), id (u64)   the wallet's first entry at the floor
//! ```
//!
//! so that its older entries are read through the index and the newer through the search. A
//! wallet without date index keys has every entry at the floor; one with keys and no marker
//! has none yet. Both parts of a period are listed newest first, the newer part first.

use super::epochs::{epoch_key, record_key, wallet_records, ENTRY_TIMES};
use super::pages::{directory_key, fine_key, Paged, BLOCK, FINE};
use super::store::{decode, key3, numbers, Open, StoreError};
use crate::ledger::transaction::{Hash, LedgerEntry};

/// The `meta` key holding the LSN of the first record at the floor the store filed: a record
/// before the floor after it is refused (an older walletd wrote the log after a newer one: its
/// entries would fall inside the runs the search reads as in time order).
pub(crate) const FLOOR_SINCE: &[u8] = b"posted_at_floor_since";

/// The `pages` kind of a wallet's marker (the directory's own kinds are 0 to 2, [`Paged`]).
const FLOOR_MARKER: u64 = 3;

/// The `pages` key of `wallet`'s marker.
pub(crate) fn marker_key(wallet: u64) -> [u8; 24] {
    key3(wallet, FLOOR_MARKER, 0)
}

/// The marker's value: the ordinal and id of the wallet's first entry posted at the floor.
pub(crate) fn marker_value(ordinal: u64, id: u64) -> Vec<u8> {
    let mut value = Vec::with_capacity(16);
    value.extend_from_slice(&ordinal.to_be_bytes());
    value.extend_from_slice(&id.to_be_bytes());
    value
}

/// Whether `wallet` has entries in the date index (entries logged before the floor).
pub(crate) fn has_indexed_entries(open: &Open, wallet: u64) -> Result<bool, StoreError> {
    let range = epoch_key(wallet, ENTRY_TIMES, 0)..=epoch_key(wallet, ENTRY_TIMES, u64::MAX);
    match open.wallet_epochs.range(range).next() {
        Some(guard) => guard.key().map(|_| true).map_err(StoreError::from),
        None => Ok(false),
    }
}

/// How a wallet's entries are found by date.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Parts {
    /// The ordinal and id of its first entry in time order (`(0, 0)`: all of them), or `None`
    /// when every entry it has is in the date index.
    pub(crate) ordered_from: Option<(u64, u64)>,
    /// Whether it has entries in the date index.
    pub(crate) indexed: bool,
}

/// How `wallet`'s entries are found by date.
pub(crate) fn parts(open: &Open, wallet: u64) -> Result<Parts, StoreError> {
    if let Some(bytes) = open.pages.get(marker_key(wallet))? {
        let [ordinal, id] = numbers::<2>("floor marker", &bytes)?;
        return Ok(Parts {
            ordered_from: Some((ordinal, id)),
            indexed: true,
        });
    }
    let indexed = has_indexed_entries(open, wallet)?;
    Ok(Parts {
        ordered_from: (!indexed).then_some((0, 0)),
        indexed,
    })
}

/// The entries of a period in time order: ordinals `lo..hi`, and the id at `lo` if any.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Period {
    pub(crate) lo: u64,
    pub(crate) hi: u64,
    pub(crate) lo_id: Option<u64>,
}

/// The entries of `wallet` in time order (those from `start`, of `count`) created within
/// `from_ms..=to_ms`.
pub(crate) fn period(
    open: &Open,
    wallet: u64,
    start: (u64, u64),
    count: u64,
    (from_ms, to_ms): (i64, i64),
) -> Result<Period, StoreError> {
    let none = Period {
        lo: count,
        hi: count,
        lo_id: None,
    };
    if from_ms > to_ms || start.0 >= count {
        return Ok(none);
    }
    let (lo, lo_id) = first_at_or_after(open, wallet, start, count, from_ms)?;
    let Some(id) = lo_id else {
        return Ok(none);
    };
    let hi = match to_ms.checked_add(1) {
        Some(after) => first_at_or_after(open, wallet, (lo, id), count, after)?.0,
        None => count,
    };
    Ok(Period { lo, hi, lo_id })
}

/// Visits the entries of `period`, oldest first.
pub(crate) fn visit_period(
    open: &Open,
    wallet: u64,
    period: Period,
    visit: &mut dyn FnMut(LedgerEntry) -> Result<(), StoreError>,
) -> Result<(), StoreError> {
    let Some(id) = period.lo_id else {
        return Ok(());
    };
    let wanted = usize::try_from(period.hi - period.lo).unwrap_or(usize::MAX);
    for row in wallet_records(open, Paged::Entry, wallet, (id, u64::MAX), false).take(wanted) {
        let (key, bytes) = row?;
        let (_, entry): (Hash, LedgerEntry) = decode("entry", &key, &bytes)?;
        visit(entry)?;
    }
    Ok(())
}

/// The first ordinal in `start.0..count` whose entry was created at `at_ms` or later, with its
/// id (`count` and `None` if none): the last directory block that starts before `at_ms`, by
/// binary search, then within it the last sub-block of the fine directory
/// ([`super::pages::FINE`] entries) likewise, then a scan of that. Where fine keys are
/// missing (entries filed before them) the scan starts at the last key found before `at_ms`:
/// at worst the block's start, as before.
fn first_at_or_after(
    open: &Open,
    wallet: u64,
    (first, first_id): (u64, u64),
    count: u64,
    at_ms: i64,
) -> Result<(u64, Option<u64>), StoreError> {
    // Blocks that start after `first` and before `count`.
    let blocks = (first / BLOCK + 1, (count - 1) / BLOCK);
    let block_key = |block: u64| directory_key(wallet, Paged::Entry, block * BLOCK);
    let block_search = last_before(
        open,
        wallet,
        (blocks, BLOCK, block_key),
        at_ms,
        (first, first_id),
        Missing::GiveUp,
    )?;
    let Some(from) = block_search else {
        // A damaged directory: scan from the start, slow but right.
        return scan(open, wallet, (first, first_id), count, at_ms);
    };
    // Sub-blocks that start after `from` and before the next block or `count`.
    let end = ((from.0 / BLOCK + 1) * BLOCK).min(count);
    let subs = (from.0 / FINE + 1, (end - 1) / FINE);
    let sub_key = |sub: u64| fine_key(wallet, sub * FINE);
    let keys = (subs, FINE, sub_key);
    let from = last_before(open, wallet, keys, at_ms, from, Missing::LookEarlier)?.unwrap_or(from);
    scan(open, wallet, from, count, at_ms)
}

/// What [`last_before`] does on a missing key.
#[derive(Clone, Copy, PartialEq, Eq)]
enum Missing {
    /// Answers `None`: a block key is missing only from a damaged directory.
    GiveUp,
    /// Searches the keys before it: a fine key is missing for entries filed before the fine
    /// directory, and any right key before the answer is a right place to scan from.
    LookEarlier,
}

/// Of the directory keys `low..=high` (`key(n)` holds the id of the entry at ordinal `n *
/// step`), the last whose entry was created before `at_ms`, by binary search, as (ordinal,
/// id): `before` if none is. `None` if a key it probed is missing and `missing` gives up.
fn last_before(
    open: &Open,
    wallet: u64,
    ((low, high), step, key): ((u64, u64), u64, impl Fn(u64) -> [u8; 24]),
    at_ms: i64,
    before: (u64, u64),
    missing: Missing,
) -> Result<Option<(u64, u64)>, StoreError> {
    let mut found = before;
    // The first key whose entry is at `at_ms` or later is in `a..=z` (`high + 1`: none); the
    // last probed before `at_ms` is the one before it.
    let (mut a, mut z) = (low, high.saturating_add(1));
    while a < z {
        let mid = a + (z - a) / 2;
        let Some(bytes) = open.pages.get(key(mid))? else {
            if missing == Missing::GiveUp {
                return Ok(None);
            }
            z = mid;
            continue;
        };
        let id = numbers::<1>("page directory", &bytes)?[0];
        if created_at(open, wallet, id)? < at_ms {
            a = mid + 1;
            found = (mid * step, id);
        } else {
            z = mid;
        }
    }
    Ok(Some(found))
}

/// Scans forward from the entry at ordinal `from.0` (id `from.1`) for the first created at
/// `at_ms` or later.
fn scan(
    open: &Open,
    wallet: u64,
    (mut ordinal, id): (u64, u64),
    count: u64,
    at_ms: i64,
) -> Result<(u64, Option<u64>), StoreError> {
    for row in wallet_records(open, Paged::Entry, wallet, (id, u64::MAX), false) {
        if ordinal >= count {
            break;
        }
        let (key, bytes) = row?;
        let (_, entry): (Hash, LedgerEntry) = decode("entry", &key, &bytes)?;
        #[cfg(test)]
        tests::SCANNED.with(|scanned| scanned.set(scanned.get() + 1));
        if entry.created_at_ms >= at_ms {
            return Ok((ordinal, Some(entry.id.0)));
        }
        ordinal += 1;
    }
    Ok((count, None))
}

/// Entry `id` of `wallet`, with the hash of the entry before it; missing, an error.
pub(crate) fn entry(open: &Open, wallet: u64, id: u64) -> Result<(Hash, LedgerEntry), StoreError> {
    let key = record_key(wallet, id);
    let bytes = open.entries.get(key)?.ok_or(StoreError::Missing {
        what: "entry",
        key: format!("{wallet}/{id}"),
    })?;
    decode("entry", &key, &bytes)
}

/// When entry `id` of `wallet` was created.
fn created_at(open: &Open, wallet: u64, id: u64) -> Result<i64, StoreError> {
    Ok(entry(open, wallet, id)?.1.created_at_ms)
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeSet;
    use std::sync::Arc;

    use crate::ledger::transaction::LedgerEntry;
    use crate::runtime::history::filing::{file_batch, ChainHeads, Filed};
    use crate::runtime::history::HistoryStore;
    use crate::shard::state::Shard;
    use crate::tests::Harness;
    use crate::values::ids::WalletId;
    use crate::Event;

    /// The entries of `wallet` in the harness's log, in id order.
    fn entries_of(h: &Harness, wallet: WalletId) -> Vec<LedgerEntry> {
        h.log
            .iter()
            .filter_map(|event| match event {
                Event::EntryPosted { wallet_id, entry } if *wallet_id == wallet => {
                    Some(entry.clone())
                }
                _ => None,
            })
            .collect()
    }

    /// What a period's page must hold: the entries at the floor (ids from `floor_id`) newest
    /// first by id, then the older ones newest first by time (ties: the larger id first, as
    /// the date index reverses), then `offset` and `per_page`; and the period's count.
    fn expected(
        all: &[LedgerEntry],
        floor_id: u64,
        (from, to): (i64, i64),
        (offset, per_page): (usize, usize),
    ) -> (Vec<u64>, u64) {
        let within: Vec<&LedgerEntry> = all
            .iter()
            .filter(|e| (from..=to).contains(&e.created_at_ms))
            .collect();
        let mut newer: Vec<&LedgerEntry> = within
            .iter()
            .copied()
            .filter(|e| e.id.0 >= floor_id)
            .collect();
        newer.sort_by_key(|e| std::cmp::Reverse(e.id.0));
        let mut older: Vec<&LedgerEntry> = within
            .iter()
            .copied()
            .filter(|e| e.id.0 < floor_id)
            .collect();
        older.sort_by_key(|e| std::cmp::Reverse((e.created_at_ms, e.id.0)));
        let ids = newer
            .into_iter()
            .chain(older)
            .map(|e| e.id.0)
            .skip(offset)
            .take(per_page)
            .collect();
        (ids, within.len() as u64)
    }

    fn page(
        store: &HistoryStore,
        wallet: WalletId,
        (from, to): (i64, i64),
        (offset, per_page): (u64, u64),
    ) -> (Vec<u64>, u64) {
        let page = store
            .entries_page(wallet, offset, per_page, Some(from), Some(to))
            .unwrap();
        let ids = page.records.iter().map(|(_, entry)| entry.id.0).collect();
        (ids, page.total)
    }

    /// Every period of interest: around the first and last entry, inside, across the blocks,
    /// empty ones and reversed ones.
    fn periods(all: &[LedgerEntry]) -> Vec<(i64, i64)> {
        let times: BTreeSet<i64> = all.iter().map(|e| e.created_at_ms).collect();
        let first = *times.first().unwrap();
        let last = *times.last().unwrap();
        let mut periods = vec![
            (i64::MIN, i64::MAX),
            (first, last),
            (first - 10, first - 1),
            (last + 1, last + 10),
            (last, first),
        ];
        let picks: Vec<i64> = times.iter().copied().step_by(97).collect();
        for (i, a) in picks.iter().enumerate() {
            for b in picks.iter().skip(i).step_by(5) {
                periods.push((*a, *b));
                periods.push((*a + 1, *b - 1));
            }
        }
        periods
    }

    fn check_all(store: &HistoryStore, h: &Harness, wallet: WalletId, floor_id: u64) {
        let all = entries_of(h, wallet);
        for period in periods(&all) {
            for window in [(0, 20), (7, 50), (1_500, 30), (0, 5_000)] {
                let (ids, total) = page(store, wallet, period, (window.0 as u64, window.1 as u64));
                let (want, want_total) = expected(&all, floor_id, period, window);
                assert_eq!(total, want_total, "count of {period:?}");
                assert_eq!(ids, want, "page {window:?} of {period:?}");
            }
            let mut visited = BTreeSet::new();
            store
                .for_each_transaction_within(wallet, period, &mut |t| {
                    assert!(visited.insert(t.id.0), "visited twice");
                })
                .unwrap();
            let within: BTreeSet<u64> = all
                .iter()
                .filter(|e| (period.0..=period.1).contains(&e.created_at_ms))
                .map(|e| e.transaction_id.0)
                .collect();
            assert_eq!(visited, within, "transactions of {period:?}");
        }
    }

    /// Keys in the date index.
    fn indexed_keys(store: &HistoryStore) -> usize {
        store
            .with(|open| Ok(open.entry_times.iter().count()))
            .unwrap()
    }

    /// A harness whose wallet has `n` deposits, the clock moving by 0 to 4 ms between them
    /// (many entries share a millisecond).
    fn deposits(h: &mut Harness, wallet: WalletId, n: usize) {
        for i in 0..n {
            h.now_ms += (i % 5) as i64;
            h.deposit(wallet, "1.00");
        }
    }

    thread_local! {
        /// Entries [`super::scan`] decoded on this thread.
        pub(super) static SCANNED: std::cell::Cell<u64> = const { std::cell::Cell::new(0) };
    }

    /// Three directory blocks and some: 2,600 entries of `a`, a few of `b` among them, filed
    /// in three batches, each ending with `holds` holds placed on `a` (records counted apart
    /// from its entries).
    fn three_blocks(
        holds: usize,
    ) -> (
        tempfile::TempDir,
        Arc<HistoryStore>,
        Harness,
        WalletId,
        WalletId,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        let b = h.create(2, "YER");
        let mut heads = ChainHeads::default();
        let mut filed = 0;
        for (lsn, n) in [(1u64, 900usize), (2, 1_000), (3, 700)] {
            deposits(&mut h, a, n);
            h.deposit(b, "2.00");
            for _ in 0..holds {
                h.ok(crate::Command::PlaceHold(
                    crate::shard::command::PlaceHold {
                        wallet_id: a,
                        amount: crate::tests::dec("0.01"),
                        currency: crate::tests::cur("YER"),
                        reason: None,
                        expiry_minutes: None,
                    },
                ));
            }
            let records = [Filed::events(lsn, h.log[filed..].to_vec())];
            filed = h.log.len();
            file_batch(&store, &records, &mut heads).unwrap();
        }
        (dir, store, h, a, b)
    }

    #[test]
    fn a_period_of_entries_at_the_floor_is_found_without_a_date_index() {
        let (_dir, store, h, a, b) = three_blocks(0);
        assert_eq!(
            indexed_keys(&store),
            0,
            "no date index for entries at the floor"
        );
        check_all(&store, &h, a, 0);
        check_all(&store, &h, b, 0);
    }

    /// The fine directory holds the id of every 64th entry that does not start a block, and
    /// with it a period's ends are found by scanning at most a sub-block each (a period's
    /// first page used to scan up to a block, 1,024 entries, for each end: the p50 of 1.75 ms
    /// in `statement_page`). Without some of its keys (entries filed before them) a block is
    /// scanned whole and every period still reads right. The wallet's holds, numbered apart
    /// from its entries, file no fine keys.
    #[test]
    fn a_periods_ends_are_found_through_the_fine_directory_or_by_a_scan_without_it() {
        use crate::runtime::history::pages::{fine_key, starts_fine, FINE};
        let (_dir, store, h, a, _) = three_blocks(50);
        let all = entries_of(&h, a);
        let fine: Vec<(u64, u64)> = (0..all.len() as u64)
            .filter(|&ordinal| starts_fine(ordinal))
            .map(|ordinal| (ordinal, all[ordinal as usize].id.0))
            .collect();
        assert_eq!(
            fine.len(),
            2_600 / 64 + 1 - 3,
            "a key per sub-block but the blocks'"
        );
        store
            .with(|open| {
                for &(ordinal, id) in &fine {
                    let value = open.pages.get(fine_key(a.0, ordinal))?.unwrap();
                    assert_eq!(value.as_ref(), id.to_be_bytes(), "fine key of {ordinal}");
                }
                Ok(())
            })
            .unwrap();

        // Periods with both ends deep inside blocks, each end scanning one sub-block at most.
        let time = |ordinal: usize| all[ordinal].created_at_ms;
        let worst = |store: &HistoryStore| {
            let mut worst = 0;
            for (lo, hi) in [(100, 1_900), (1_030, 1_090), (1_500, 2_590), (700, 2_000)] {
                SCANNED.with(|scanned| scanned.set(0));
                page(store, a, (time(lo), time(hi)), (0, 20));
                worst = worst.max(SCANNED.with(std::cell::Cell::get));
            }
            worst
        };
        assert!(worst(&store) <= 2 * (FINE + 1), "scanned {}", worst(&store));

        // A reader's count may be below what is filed meanwhile: the period ends at it.
        let (first, count) = (all[0].id.0, 1_500u64);
        let found = store
            .with(|open| super::period(open, a.0, (0, first), count, (time(1_400), time(2_000))))
            .unwrap();
        let lo = all
            .iter()
            .position(|e| e.created_at_ms >= time(1_400))
            .unwrap() as u64;
        assert_eq!((found.lo, found.hi), (lo, count));
        assert_eq!(found.lo_id, Some(all[lo as usize].id.0));

        // Entries filed before the fine keys: a whole block of them, and one key of another.
        store
            .with(|open| {
                for &(ordinal, _) in &fine {
                    if (1_024..2_048).contains(&ordinal) || ordinal == 2_240 {
                        open.pages.remove(fine_key(a.0, ordinal))?;
                    }
                }
                Ok(())
            })
            .unwrap();
        assert!(
            worst(&store) > 2 * (FINE + 1),
            "a block without its keys is scanned"
        );
        check_all(&store, &h, a, 0);
    }

    #[test]
    fn entries_before_the_floor_are_read_through_the_date_index_and_the_rest_by_search() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        let b = h.create(2, "YER");
        // Logged by a build before the floor: the clock steps back now and then, and nothing
        // held the entries in time order.
        for i in 0..1_500i64 {
            h.shard.posted_at_floor_ms = i64::MIN;
            h.now_ms += if i % 7 == 3 { -40 } else { 3 };
            h.deposit(a, "1.00");
        }
        h.deposit(b, "1.00");
        let mut heads = ChainHeads::default();
        let before = Filed::events(1, h.log.clone()).before_floor();
        file_batch(&store, &[before], &mut heads).unwrap();
        let indexed = indexed_keys(&store);
        let posted = h
            .log
            .iter()
            .filter(|event| matches!(event, Event::EntryPosted { .. }))
            .count();
        assert_eq!(indexed, posted, "every entry before the floor is indexed");
        // Then the floor: postings never earlier than the latest entry (the clock still steps
        // back). The first entry at the floor of each wallet gets the marker.
        let mark = h.log.len();
        let floor_id = h.shard.ids.id_of(h.shard.next_entry_seq).unwrap();
        h.shard.posted_at_floor_ms = i64::MIN;
        for i in 0..1_700i64 {
            h.now_ms += if i % 7 == 3 { -40 } else { 3 };
            h.deposit(a, "1.00");
        }
        h.deposit(b, "1.00");
        // Filed in two batches, the second in two records.
        let at_floor = h.log[mark..].to_vec();
        let (first, second) = at_floor.split_at(at_floor.len() / 3);
        let (second, third) = second.split_at(second.len() / 2);
        file_batch(&store, &[Filed::events(2, first.to_vec())], &mut heads).unwrap();
        file_batch(
            &store,
            &[
                Filed::events(3, second.to_vec()),
                Filed::events(4, third.to_vec()),
            ],
            &mut heads,
        )
        .unwrap();
        assert_eq!(indexed_keys(&store), indexed, "none added at the floor");
        let markers = store
            .with(|open| {
                Ok([a, b].map(|w| {
                    open.pages
                        .get(super::marker_key(w.0))
                        .unwrap()
                        .map(|bytes| super::numbers::<2>("marker", &bytes).unwrap())
                }))
            })
            .unwrap();
        let first_of = |h: &Harness, w: WalletId| -> [u64; 2] {
            let entries = entries_of(h, w);
            let ordinal = entries.iter().position(|e| e.id.0 >= floor_id).unwrap();
            [ordinal as u64, entries[ordinal].id.0]
        };
        assert_eq!(markers[0], Some(first_of(&h, a)));
        assert_eq!(markers[1], Some(first_of(&h, b)));
        check_all(&store, &h, a, floor_id);
        check_all(&store, &h, b, floor_id);

        // With the indexer's memory gone (a restart), no second marker.
        let mut heads = ChainHeads::default();
        let mark = h.log.len();
        h.deposit(a, "1.00");
        file_batch(
            &store,
            &[Filed::events(5, h.log[mark..].to_vec())],
            &mut heads,
        )
        .unwrap();
        let again = store
            .with(|open| Ok(open.pages.get(super::marker_key(a.0)).unwrap()))
            .unwrap()
            .map(|bytes| super::numbers::<2>("marker", &bytes).unwrap());
        assert_eq!(again, Some(first_of(&h, a)));
        check_all(&store, &h, a, floor_id);
    }

    /// A record logged before the floor after one at it is refused (an older walletd wrote the
    /// log after a newer one), also once the indexer's memory is gone.
    #[test]
    fn a_record_before_the_floor_after_one_at_it_is_refused() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        h.deposit(a, "1.00");
        let mut heads = ChainHeads::default();
        let before = Filed::events(1, h.log.clone()).before_floor();
        file_batch(&store, &[before], &mut heads).unwrap();
        let mark = h.log.len();
        h.deposit(a, "1.00");
        file_batch(
            &store,
            &[Filed::events(2, h.log[mark..].to_vec())],
            &mut heads,
        )
        .unwrap();
        for mut heads in [heads, ChainHeads::default()] {
            let mark = h.log.len();
            h.deposit(a, "1.00");
            let late = Filed::events(3, h.log[mark..].to_vec()).before_floor();
            let refused = file_batch(&store, &[late], &mut heads).unwrap_err();
            assert!(refused.to_string().contains("older walletd"), "{refused}");
        }
    }

    /// Entries of a new wallet at the floor need no marker, whatever other wallets have.
    #[test]
    fn a_wallet_with_only_entries_at_the_floor_gets_no_marker() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        h.deposit(a, "1.00");
        h.deposit(a, "1.00");
        let mut heads = ChainHeads::default();
        file_batch(&store, &[Filed::events(1, h.log.clone())], &mut heads).unwrap();
        let (marker, epochs) = store
            .with(|open| {
                let marker = open.pages.get(super::marker_key(a.0)).unwrap();
                let epochs = super::has_indexed_entries(open, a.0).unwrap();
                Ok((marker, epochs))
            })
            .unwrap();
        assert!(marker.is_none() && !epochs);
    }

    /// A shard stamps no posting before an entry it posted before, across a restart from its
    /// snapshot too: a clock stepped back posts at the floor.
    #[test]
    fn a_shard_posts_no_entry_earlier_than_the_one_before() {
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        let b = h.create(2, "YER");
        h.now_ms = 10_000;
        let first = h.deposit(a, "5.00");
        assert_eq!(first.created_at_ms, 10_000);
        // The clock steps back: the next posting, on any wallet of the shard, is at the floor.
        h.now_ms = 9_000;
        let second = h.deposit(b, "1.00");
        assert_eq!(second.created_at_ms, 10_000);
        // And forward again: the clock's own time.
        h.now_ms = 10_500;
        assert_eq!(h.deposit(a, "1.00").created_at_ms, 10_500);
        let restored = Shard::from_snapshot_bytes(&h.shard.snapshot_bytes().unwrap()).unwrap();
        assert_eq!(restored.posted_at_floor_ms, 10_500);
        assert_eq!(restored.state_digest(), h.shard.state_digest());
        // Not ledger state: a shard that knows no floor (restarted from an older snapshot)
        // has the same digest as one rebuilt from the first record.
        let mut unknown = restored.clone();
        unknown.posted_at_floor_ms = i64::MIN;
        assert_eq!(unknown.state_digest(), restored.state_digest());
        let mut h = Harness::with_shard(restored);
        h.now_ms = 8_000;
        assert_eq!(h.deposit(a, "1.00").created_at_ms, 10_500);
        let entries = entries_of(&h, a);
        assert!(entries.iter().all(|e| e.created_at_ms == 10_500));
        // A transaction carries its entries' time.
        assert!(h.log.iter().all(|event| match event {
            Event::TransactionRecorded { transaction, .. } => transaction.created_at_ms == 10_500,
            _ => true,
        }));
    }

    /// A command stamped a little before the floor (commands stamped on several threads)
    /// records every time at the floor, not only its postings': a hold's placement, expiry
    /// and release, and a reversal's mark, agree with the entries they go with. A clock
    /// stepped back further keeps its deadlines: only the postings take the floor.
    #[test]
    fn a_command_stamped_before_the_floor_records_every_time_at_it() {
        use crate::shard::command::{PlaceHold, CLOCK_SKEW_ABSORBED_MS};
        use crate::tests::{cur, dec};
        use crate::{Command, Outcome};
        let place = |wallet_id| {
            Command::PlaceHold(PlaceHold {
                wallet_id,
                amount: dec("1.00"),
                currency: cur("YER"),
                reason: None,
                expiry_minutes: Some(1),
            })
        };
        let mut h = Harness::new();
        let a = h.create(1, "YER");
        h.now_ms = 10_000;
        let deposit = h.deposit(a, "5.00");
        h.now_ms = 10_000 - CLOCK_SKEW_ABSORBED_MS;
        let Outcome::Hold(hold) = h.ok(place(a)) else {
            panic!("not a hold")
        };
        assert_eq!(hold.created_at_ms, 10_000);
        assert_eq!(hold.expires_at_ms, 10_000 + 60_000);
        let Outcome::Hold(released) = h.ok(Command::ReleaseHold {
            hold_uuid: hold.uuid,
        }) else {
            panic!("not a hold")
        };
        assert_eq!(released.closed_at_ms, Some(10_000));
        let reversed_from = h.log.len();
        h.ok(Command::Reverse {
            transaction_uuid: deposit.uuid,
            reason: "clock behind".into(),
        });
        let marks: Vec<i64> = h.log[reversed_from..]
            .iter()
            .filter_map(|event| match event {
                Event::TransactionReversed { at_ms, .. } => Some(*at_ms),
                Event::TransactionRecorded { transaction, .. } => Some(transaction.created_at_ms),
                Event::EntryPosted { entry, .. } => Some(entry.created_at_ms),
                _ => None,
            })
            .collect();
        assert!(marks.len() >= 3, "{marks:?}");
        assert!(marks.iter().all(|at| *at == 10_000), "{marks:?}");

        // The clock steps back by a minute: a hold placed now expires a minute from the
        // clock's time, and the postings still take the floor.
        h.deposit(a, "5.00");
        h.now_ms = 10_000 - 60_000;
        let Outcome::Hold(stepped) = h.ok(place(a)) else {
            panic!("not a hold")
        };
        assert_eq!(stepped.created_at_ms, 10_000 - 60_000);
        assert_eq!(stepped.expires_at_ms, 10_000);
        let Outcome::Hold(captured) =
            h.ok(Command::CaptureHold(crate::shard::command::CaptureHold {
                hold_uuid: stepped.uuid,
                amount: None,
                counter_wallet_id: None,
                details: Default::default(),
            }))
        else {
            panic!("not a hold")
        };
        assert_eq!(captured.closed_at_ms, Some(10_000 - 60_000));
        assert!(entries_of(&h, a).iter().all(|e| e.created_at_ms == 10_000));
        // The clock caught up: its own time again.
        h.now_ms = 11_000;
        assert_eq!(h.deposit(a, "1.00").created_at_ms, 11_000);
    }
}
