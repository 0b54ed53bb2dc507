//! Epoch-first keys for the append-only record keyspaces, so that compaction work per record
//! stays bounded however long the store has been written.
//!
//! Keyed `wallet | id`, every memtable of `transactions`, `entries` and `holds` spans every
//! wallet, so every flushed table overlaps every table below it and each compaction rewrites
//! a level's worth of history: under a steady load the store's one worker spent more per
//! record the longer it ran, and throughput fell with it (BENCHMARKS.md, "Why throughput
//! decays"). Keyed `epoch | wallet | id` instead, with `epoch = id >> ID_EPOCH_BITS` (ids grow
//! within a shard), new records fall only into the newest epochs' key range: tables of older
//! epochs overlap nothing new, and lsm-tree's leveled strategy moves such tables down a level
//! without rewriting them (`pick_minimal_compaction` tries a window that overlaps nothing in
//! the next level first).
//!
//! ```text
//! transactions   epoch(id) | wallet | transaction id        -> Transaction
//! entries        epoch(id) | wallet | entry id              -> (prev hash, LedgerEntry)
//! holds          epoch(id) | wallet | hold id               -> Hold
//! entry_times    epoch(t) | wallet | t | entry id           -> ()   t: created_at as a time key
//! wallet_epochs  wallet | kind | epoch                      -> ()   the epochs a wallet has records in
//! meta           "layout"                                   -> 8    this layout: entries at the posting floor not in `entry_times` (7: every entry in it; 20-byte record keys, answers in generations, no `counts`; 6: 24-byte record keys; 5: answers by digest, their purge index grouped; 4: one purge key per answer; 3: with `counts`; 2: before answers by digest; absent: wallet-first)
//! ```
//!
//! A record key is 20 bytes, `epoch (4) | wallet (8) | id (8)` ([`record_key`]): fjall keeps keys
//! of up to 20 bytes inside its memtable's skiplist nodes, so the indexer's inserts compare
//! them without loading each from the heap. Ids from 2^50 - 2^18 up share the last epoch
//! ([`LAST_ID_EPOCH`]). Layouts 2 to 6 keyed the same records with an 8-byte epoch, in
//! [`WIDE_RECORD_KEYSPACES`]; they are copied on open ([`upgrade_layout`]).
//!
//! A wallet's records are then one range per epoch it has records in, and `wallet_epochs`
//! lists those epochs (kind 0 transactions, 1 entries, 2 holds, 3 entry times); the indexer
//! writes a wallet's epoch key once per epoch ([`EpochsSeen`]). [`wallet_records`] and
//! [`wallet_entry_times`] chain the ranges, oldest or newest first: a read costs one seek per
//! epoch it crosses, and ordering is exact because the epoch is a monotonic function of the
//! key's next part (the id, or the time). The date index's epochs are of `created_at`, not of
//! the id, so a date range maps to a contiguous range of epochs even if the clock stepped back.
//!
//! A store written wallet-first is copied into this layout on open ([`upgrade_layout`]),
//! with progress in the log; the `layout` mark is written after the copy and the old
//! keyspaces are dropped after the mark, so a crash at any point redoes or finishes the copy.

use super::pages::{complete_directory, Paged, PAGES_COMPLETE};
use super::remembered::Remembered;
use super::store::{
    flush_and_wait, keyspace_options, numbers, rotate_full, time_key, Open, StoreError,
    INDEXED_LSN, WIDE_RECORD_KEYSPACES,
};
use super::writes::Writes;

/// Ids per epoch: 2^18 (~262k). Under the soak's load a shard allots that many transaction ids
/// in about half a minute.
pub(crate) const ID_EPOCH_BITS: u32 = 18;
/// Time-key units (milliseconds) per epoch of the date index: 2^15 ms, about 33 s.
pub(crate) const TIME_EPOCH_BITS: u32 = 15;

/// The `meta` key naming the key layout, and this layout's number.
pub(crate) const LAYOUT: &[u8] = b"layout";
const LAYOUT_EPOCHS: u8 = 2;
/// Layout 2 with the idempotency answers by digest (`super::answers`). The records are keyed
/// as in layout 2; the number changed so that a walletd from before refuses the store (it would
/// open empty first-layout answer keyspaces beside the new ones and run retries again).
const LAYOUT_ANSWERS: u8 = 3;
/// Layout 3 without the `counts` keyspace: a wallet's counts come from the page directory
/// ([`super::pages::count_of`]). The number changed so that a walletd from before refuses the
/// store: it would read counts that are no longer written, and file page directory keys at
/// the ordinals they give.
pub(crate) const LAYOUT_DERIVED_COUNTS: u8 = 4;
/// Layout 4 with the purge's index of idempotency answers grouped: one `answers_by_lsn` key
/// per write batch's answers instead of one per answer (`super::answers`). Per-answer entries
/// of layout 4 stay readable; the number changed so that a walletd from before refuses the
/// store instead of failing on a grouped entry at its first purge.
pub(crate) const LAYOUT_GROUPED_PURGE: u8 = 5;
/// Layout 5 with idempotency answers filed in generations (`super::answers::generations`);
/// the digest layout of 4 and 5 is read and drained, never written. The number changed so
/// that a walletd from before refuses the store: it would file answers where lookups of this
/// one never look, and miss every answer filed in a generation (a retry would run twice).
pub(crate) const LAYOUT_ANSWER_GENERATIONS: u8 = 6;
/// Layout 6 with the record keyspaces keyed in 20 bytes, a 4-byte epoch ([`record_key`]), which
/// fjall keeps inline. The records of layouts 2 to 6 are copied into it on open
/// ([`copy_wide_records`]). The number changed so that a walletd from before refuses the
/// store: it would file into its 24-byte keyspaces, which this layout no longer reads.
pub(crate) const LAYOUT_RECORD_KEYS_INLINE: u8 = 7;
/// Layout 7 without date index keys for entries posted at the shard's floor (journal format 7
/// and up), found by a search of the wallet's entries instead, and with a marker per wallet
/// where they start after indexed ones ([`super::dated`]). A layout 7 store is one with every
/// entry indexed: it needs no copy, only the mark. The number changed so that a walletd from
/// before refuses the store: it would find none of these entries by date.
pub(crate) const LAYOUT_DATED_BY_FLOOR: u8 = 8;
/// The layout this walletd writes.
pub(crate) const LAYOUT_CURRENT: u8 = LAYOUT_DATED_BY_FLOOR;
/// The way out of a store this walletd refuses to open.
const REBUILD: &str = "Move the data dir's history/ aside and start walletd: it rebuilds the \
                       store from the log (or, if the log no longer starts at LSN 1, run \
                       `walletd replay --from-archive DIR`)";

/// The keyspace layouts 2 and 3 kept a wallet's counts in, dropped on the way to layout 4.
const COUNTS_KEYSPACE: &str = "counts";
/// The `meta` key holding, from the mark until the wallet-first keyspaces are dropped, the
/// `indexed_lsn` the copy covered.
const COPIED_AT: &[u8] = b"layout_copied_at";

/// The kind of a `wallet_epochs` key for the date index (records use their [`Paged`] number).
pub(crate) const ENTRY_TIMES: u64 = 3;

/// The keyspaces of the wallet-first layout, in [`Paged`] order, then the date index.
const OLD_KEYSPACES: [&str; 4] = ["transactions", "entries", "holds", "entry_times"];

/// `a | b | c | d`, big-endian.
pub(crate) fn key4(a: u64, b: u64, c: u64, d: u64) -> [u8; 32] {
    let mut key = [0u8; 32];
    for (chunk, word) in key.chunks_exact_mut(8).zip([a, b, c, d]) {
        chunk.copy_from_slice(&word.to_be_bytes());
    }
    key
}

/// The last epoch a record key can name: its epoch is 4 bytes, so every id from
/// `LAST_ID_EPOCH << ID_EPOCH_BITS` (2^50 - 2^18) up shares it. Ids are a shard's sequence numbers
/// times the shard count, so a store reaches it only after ~10^15 records of a shard.
pub(crate) const LAST_ID_EPOCH: u64 = u32::MAX as u64;

/// The epoch of a record id.
pub(crate) fn id_epoch(id: u64) -> u64 {
    (id >> ID_EPOCH_BITS).min(LAST_ID_EPOCH)
}

/// The first and last id of `epoch` (the last epoch holds every id from its first up).
fn epoch_ids(epoch: u64) -> (u64, u64) {
    let first = epoch << ID_EPOCH_BITS;
    if epoch >= LAST_ID_EPOCH {
        (first, u64::MAX)
    } else {
        (first, first | ((1 << ID_EPOCH_BITS) - 1))
    }
}

/// Bytes of a record key: `epoch (4) | wallet (8) | id (8)`, big-endian. 20 bytes is what
/// fjall's keys (`byteview`) keep inline: a memtable's skiplist compares such keys inside its
/// nodes, where a longer key is one more cache miss per comparison on the indexer's hot path
/// (BENCHMARKS.md, "Record keys inline").
pub(crate) const RECORD_KEY_BYTES: usize = 20;

/// The key of `wallet`'s record `id` in `transactions`, `entries` or `holds`.
pub(crate) fn record_key(wallet: u64, id: u64) -> [u8; RECORD_KEY_BYTES] {
    let mut key = [0u8; RECORD_KEY_BYTES];
    let (epoch, rest) = key.split_at_mut(4);
    let (wallet_part, id_part) = rest.split_at_mut(8);
    // `id_epoch` is at most `LAST_ID_EPOCH`, which fits.
    let epoch_bytes = u32::try_from(id_epoch(id))
        .unwrap_or(u32::MAX)
        .to_be_bytes();
    epoch.copy_from_slice(&epoch_bytes);
    wallet_part.copy_from_slice(&wallet.to_be_bytes());
    id_part.copy_from_slice(&id.to_be_bytes());
    key
}

/// The date index key of `wallet`'s entry `entry_id`, created at `at_ms`, and its epoch.
pub(crate) fn time_index_key(wallet: u64, at_ms: i64, entry_id: u64) -> ([u8; 32], u64) {
    let at = time_key(at_ms);
    let epoch = at >> TIME_EPOCH_BITS;
    (key4(epoch, wallet, at, entry_id), epoch)
}

/// The `wallet_epochs` key saying `wallet` has records of `kind` in `epoch`.
pub(crate) fn epoch_key(wallet: u64, kind: u64, epoch: u64) -> [u8; 24] {
    super::store::key3(wallet, kind, epoch)
}

/// The (wallet, id) of a record key made by [`record_key`].
pub(crate) fn record_of(key: &[u8]) -> Result<(u64, u64), StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what: "record key",
        key: hex::encode(key),
        reason,
    };
    let (epoch, rest) = key
        .split_first_chunk::<4>()
        .ok_or_else(|| corrupt(format!("{} bytes where 20 were expected", key.len())))?;
    let [wallet, id] = numbers::<2>("record key", rest)?;
    let epoch = u32::from_be_bytes(*epoch);
    if u64::from(epoch) != id_epoch(id) {
        return Err(corrupt(format!(
            "epoch {epoch} is not the epoch of id {id}"
        )));
    }
    Ok((wallet, id))
}

/// The indexer's memory of the newest epoch it filed a `wallet_epochs` key for, per wallet and
/// kind, so that a record costs no extra write unless it opens an epoch for its wallet. A miss
/// (after a restart, or once forgotten: [`Self::settle`]) writes the key again, which changes
/// nothing.
#[derive(Default)]
pub(crate) struct EpochsSeen {
    newest: Remembered<u64, (u64, u64)>,
}

impl EpochsSeen {
    /// Files the epoch key of `wallet`'s record of `kind` in `epoch` unless it is known filed.
    pub(crate) fn note(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        wallet: u64,
        kind: u64,
        epoch: u64,
    ) {
        if self.newest.get((wallet, kind)) == Some(epoch) {
            return;
        }
        writes.insert(
            &open.wallet_epochs,
            epoch_key(wallet, kind, epoch),
            Vec::new(),
        );
        self.newest.insert((wallet, kind), epoch);
    }

    /// Between batches: forgets the least recently used half once the memory nears `bound`
    /// (wallet, kind) pairs ([`Remembered::settle`]). Clearing it all at once instead (as the
    /// first version did, past 2^18 pairs) rewrote the epoch key of every wallet filed next.
    pub(crate) fn settle(&mut self, bound: usize) {
        self.newest.settle(bound);
    }

    pub(crate) fn clear(&mut self) {
        self.newest.clear();
    }
}

/// Rows (key, value) of a keyspace, or the error that ended them.
pub(crate) type Rows = Box<dyn Iterator<Item = Result<(fjall::Slice, fjall::Slice), StoreError>>>;

/// The rows of `keyspace` in each epoch of `wallet`'s `kind` within `first..=last` that
/// `wallet_epochs` lists, `bounds(epoch)` of each, chained oldest or newest first. Lazy at both
/// levels: a page of the newest records reads the newest epoch keys only, however many older
/// ones the wallet has.
fn chained<K: AsRef<[u8]> + 'static>(
    open: &Open,
    keyspace: &fjall::Keyspace,
    (wallet, kind, first, last): (u64, u64, u64, u64),
    newest_first: bool,
    bounds: impl Fn(u64) -> (K, K) + 'static,
) -> Rows {
    let epochs = open
        .wallet_epochs
        .range(epoch_key(wallet, kind, first)..=epoch_key(wallet, kind, last));
    let epochs: Box<dyn Iterator<Item = fjall::Guard>> = if newest_first {
        Box::new(epochs.rev())
    } else {
        Box::new(epochs)
    };
    let keyspace = keyspace.clone();
    Box::new(epochs.flat_map(move |guard| -> Rows {
        let epoch = guard
            .key()
            .map_err(StoreError::from)
            .and_then(|key| Ok(numbers::<3>("wallet epoch", &key)?[2]));
        let epoch = match epoch {
            Ok(epoch) => epoch,
            Err(error) => return Box::new(std::iter::once(Err(error))),
        };
        let (low, high) = bounds(epoch);
        let rows = keyspace
            .range(low..=high)
            .map(|guard| guard.into_inner().map_err(StoreError::from));
        if newest_first {
            Box::new(rows.rev())
        } else {
            Box::new(rows)
        }
    }))
}

/// `wallet`'s records of `kind` with ids in `lo..=hi`, oldest first or newest first: one range
/// per epoch the wallet has records in (one seek per epoch reached).
pub(crate) fn wallet_records(
    open: &Open,
    kind: Paged,
    wallet: u64,
    (lo, hi): (u64, u64),
    newest_first: bool,
) -> Rows {
    if lo > hi {
        return Box::new(std::iter::empty());
    }
    let epochs = (wallet, kind as u64, id_epoch(lo), id_epoch(hi));
    chained(
        open,
        kind.keyspace(open),
        epochs,
        newest_first,
        move |epoch| {
            let (first, last) = epoch_ids(epoch);
            (
                record_key(wallet, first.max(lo)),
                record_key(wallet, last.min(hi)),
            )
        },
    )
}

/// `wallet`'s date index keys with time keys in `from..=to`, newest first.
pub(crate) fn wallet_entry_times(open: &Open, wallet: u64, (from, to): (u64, u64)) -> Rows {
    if from > to {
        return Box::new(std::iter::empty());
    }
    let epochs = (
        wallet,
        ENTRY_TIMES,
        from >> TIME_EPOCH_BITS,
        to >> TIME_EPOCH_BITS,
    );
    chained(open, &open.entry_times, epochs, true, move |epoch| {
        (
            key4(epoch, wallet, from, 0),
            key4(epoch, wallet, to, u64::MAX),
        )
    })
}

/// The entry id of a date index key.
pub(crate) fn entry_of_time_key(key: &[u8]) -> Result<u64, StoreError> {
    Ok(numbers::<4>("entry time", key)?[3])
}

/// Brings a store to this layout before anything reads or files it: a new store gets the mark;
/// a store written wallet-first gets its page directory completed (if older still), its records
/// and date index copied into the epoch-first keyspaces with their `wallet_epochs`, then the
/// mark (with the `indexed_lsn` the copy covers), a sync, and the old keyspaces dropped.
/// Idempotent at every step: a crash during the copy redoes it, one after the mark only drops
/// what is left. Wallet-first keyspaces found beside the mark that hold records filed after
/// the copy (an older walletd ran on the upgraded store) are refused, never dropped.
pub(crate) fn upgrade_layout(open: &Open) -> Result<(), StoreError> {
    let wallet_first = OLD_KEYSPACES
        .into_iter()
        .any(|name| open.db.keyspace_exists(name));
    match open.meta.get(LAYOUT)? {
        Some(layout) if layout.as_ref() == [LAYOUT_CURRENT] => {}
        // Every entry of a layout 7 store is in the date index, which is what layout 8 reads
        // for entries logged before the floor.
        Some(layout) if layout.as_ref() == [LAYOUT_RECORD_KEYS_INLINE] => {
            open.meta.insert(LAYOUT, [LAYOUT_CURRENT])?;
            open.db.persist(fjall::PersistMode::SyncData)?;
        }
        // The digest layout of 4 and 5 (answers and their purge index) is read and drained
        // beside the generations filed from now on; the mark is synced before the first
        // generation is written.
        Some(layout)
            if matches!(
                layout.as_ref(),
                [LAYOUT_DERIVED_COUNTS | LAYOUT_GROUPED_PURGE | LAYOUT_ANSWER_GENERATIONS]
            ) =>
        {
            copy_wide_records(open)?;
            open.meta.insert(LAYOUT, [LAYOUT_CURRENT])?;
            open.db.persist(fjall::PersistMode::SyncData)?;
        }
        // Layout 2 had no answers in this layout, layout 3's digest layout is read and drained
        // like 4's and 5's ([`super::answers`]); the counts of layouts 2 and 3 are checked
        // against the copied records, and dropped below once the mark is synced.
        Some(layout) if matches!(layout.as_ref(), [LAYOUT_EPOCHS | LAYOUT_ANSWERS]) => {
            copy_wide_records(open)?;
            check_counts(open)?;
            open.meta.insert(LAYOUT, [LAYOUT_CURRENT])?;
            open.db.persist(fjall::PersistMode::SyncData)?;
        }
        Some(layout) => {
            return Err(StoreError::Rule(format!(
                "the history store has key layout {:?}, which this walletd does not read",
                layout.as_ref()
            )));
        }
        None if wallet_first => copy_wallet_first(open)?,
        None => {
            // A new store: every walletd before this layout created the wallet-first
            // keyspaces on its first open.
            let mut writes = Writes::new(&open.db);
            writes.insert(&open.meta, PAGES_COMPLETE, Vec::new());
            writes.insert(&open.meta, LAYOUT, vec![LAYOUT_CURRENT]);
            writes.commit()?;
            open.db.persist(fjall::PersistMode::SyncData)?;
        }
    }
    drop_wide_records(open)?;
    drop_wallet_first(open)?;
    drop_counts(open)
}

/// Copies the records of layouts 2 to 6, keyed `epoch (8) | wallet | id`, into the 20-byte
/// keys of this layout, with their `wallet_epochs` (the epochs are the same below
/// [`LAST_ID_EPOCH`]). The caller then writes and syncs the mark; a crash before it redoes
/// the copy, which writes the same keys again.
fn copy_wide_records(open: &Open) -> Result<(), StoreError> {
    let mut wide = Vec::new();
    for (name, kind) in WIDE_RECORD_KEYSPACES.into_iter().zip(Paged::ALL) {
        if open.db.keyspace_exists(name) {
            wide.push((open.db.keyspace(name, || keyspace_options(name))?, kind));
        }
    }
    if wide.is_empty() {
        return Ok(());
    }
    // What a killed walletd left in their memtables is flushed first, as for the wallet-first
    // copy (`copy_wallet_first`).
    let handles: Vec<&fjall::Keyspace> = wide.iter().map(|(handle, _)| handle).collect();
    flush_and_wait(&handles, "before the record key copy")?;
    let started = std::time::Instant::now();
    const COPYING: &str = "copying the history store's records into 20-byte keys";
    tracing::info!("{COPYING} (once)");
    let mut copy = Copy::new(open, COPYING);
    for (old, kind) in &wide {
        let to = kind.keyspace(open);
        for guard in old.iter() {
            let (key, value) = guard.into_inner()?;
            let [epoch, wallet, id] = numbers::<3>("record key", &key)?;
            if epoch != id >> ID_EPOCH_BITS {
                return Err(StoreError::Corrupt {
                    what: "record key",
                    key: hex::encode(&key),
                    reason: format!("epoch {epoch} is not the epoch of id {id}. {REBUILD}"),
                });
            }
            copy.put(
                to,
                &record_key(wallet, id),
                value,
                (wallet, *kind as u64, id_epoch(id)),
            )?;
        }
    }
    copy.finish()?;
    tracing::info!(
        records = copy.copied,
        took_ms = started.elapsed().as_millis() as u64,
        "copied the history store's records into 20-byte keys"
    );
    Ok(())
}

/// Drops the 24-byte record keyspaces of a store marked with this layout: the copy covered
/// everything in them (the mark follows it), and a walletd from before refuses the mark
/// before it files anything (it creates them empty first). A crash before the drop leaves it
/// to the next open.
fn drop_wide_records(open: &Open) -> Result<(), StoreError> {
    for name in WIDE_RECORD_KEYSPACES {
        if open.db.keyspace_exists(name) {
            let handle = open.db.keyspace(name, || keyspace_options(name))?;
            open.db.delete_keyspace(handle)?;
            tracing::info!(
                keyspace = name,
                "dropped a history keyspace of 24-byte record keys (copied into 20-byte keys)"
            );
        }
    }
    Ok(())
}

/// Before a store's `counts` are dropped: every wallet's stored counts must be what the page
/// directory gives ([`super::pages::count_of`]), or the store is refused as damaged (the
/// directory would misnumber its pages) with the way out. One pass over `counts`, logged.
fn check_counts(open: &Open) -> Result<(), StoreError> {
    if !open.db.keyspace_exists(COUNTS_KEYSPACE) {
        return Ok(());
    }
    let counts = open
        .db
        .keyspace(COUNTS_KEYSPACE, fjall::KeyspaceCreateOptions::default)?;
    let started = std::time::Instant::now();
    let mut wallets = 0u64;
    for guard in counts.iter() {
        let (key, value) = guard.into_inner()?;
        let [wallet] = numbers::<1>("counts key", &key)?;
        let [transactions, entries, holds] = numbers::<3>("counts", &value)?;
        let derived = super::store::counts_in(open, wallet)?;
        if (derived.transactions, derived.entries, derived.holds) != (transactions, entries, holds)
        {
            return Err(StoreError::Rule(format!(
                "the history store's page directory gives wallet {wallet} {derived:?} where its \
                 counts say {transactions} transactions, {entries} entries and {holds} holds: \
                 the directory is damaged. {REBUILD}"
            )));
        }
        wallets += 1;
        if wallets.is_multiple_of(100_000) {
            tracing::info!(
                wallets,
                "checking the history store's counts against its page directory"
            );
        }
    }
    tracing::info!(
        wallets,
        took_ms = started.elapsed().as_millis() as u64,
        "the history store's counts agree with its page directory"
    );
    Ok(())
}

/// Drops the `counts` keyspace of a store marked with layout 4 or later (no walletd that
/// writes it opens such a store: each refuses a layout it does not know). A crash before the
/// drop leaves it to the next open.
fn drop_counts(open: &Open) -> Result<(), StoreError> {
    if open.db.keyspace_exists(COUNTS_KEYSPACE) {
        let counts = open
            .db
            .keyspace(COUNTS_KEYSPACE, fjall::KeyspaceCreateOptions::default)?;
        open.db.delete_keyspace(counts)?;
        tracing::info!("dropped the history store's counts: the page directory holds them");
    }
    Ok(())
}

/// The copy of a wallet-first store, then the mark.
fn copy_wallet_first(open: &Open) -> Result<(), StoreError> {
    let handles = OLD_KEYSPACES
        .into_iter()
        .map(|name| {
            Ok(open
                .db
                .keyspace(name, fjall::KeyspaceCreateOptions::default)?)
        })
        .collect::<Result<Vec<_>, StoreError>>()?;
    let [transactions, entries, holds, entry_times] = handles.as_slice() else {
        return Err(StoreError::Rule("four wallet-first keyspaces".into()));
    };
    // What a killed walletd left in their memtables (replayed from the store's journal) is
    // flushed first: nothing seals these keyspaces during the copy, and fjall frees journal
    // files oldest first, so it would hold the journal for the whole copy.
    flush_and_wait(
        &handles.iter().collect::<Vec<_>>(),
        "before the layout copy",
    )?;
    let started = std::time::Instant::now();
    complete_directory(open, [transactions, entries, holds])?;
    const COPYING: &str = "copying the history store into its epoch-first layout";
    tracing::info!("{COPYING} (once)");
    let mut copy = Copy::new(open, COPYING);
    for (old, kind) in [
        (transactions, Paged::Transaction),
        (entries, Paged::Entry),
        (holds, Paged::Hold),
    ] {
        let to = kind.keyspace(open);
        for guard in old.iter() {
            let (key, value) = guard.into_inner()?;
            let [wallet, id] = numbers::<2>("record key", &key)?;
            copy.put(
                to,
                &record_key(wallet, id),
                value,
                (wallet, kind as u64, id_epoch(id)),
            )?;
        }
    }
    for guard in entry_times.iter() {
        let key = guard.key()?;
        let [wallet, at, id] = numbers::<3>("entry time", &key)?;
        let epoch = at >> TIME_EPOCH_BITS;
        copy.put(
            &open.entry_times,
            &key4(epoch, wallet, at, id),
            fjall::Slice::from(Vec::new()),
            (wallet, ENTRY_TIMES, epoch),
        )?;
    }
    copy.finish()?;
    check_counts(open)?;
    let covered = open.meta.get(INDEXED_LSN)?.map(|lsn| lsn.to_vec());
    let mut writes = Writes::new(&open.db);
    writes.insert(&open.meta, LAYOUT, vec![LAYOUT_CURRENT]);
    writes.insert(&open.meta, COPIED_AT, covered.unwrap_or_default());
    writes.commit()?;
    open.db.persist(fjall::PersistMode::SyncData)?;
    tracing::info!(
        records = copy.copied,
        took_ms = started.elapsed().as_millis() as u64,
        "copied the history store into its epoch-first layout"
    );
    Ok(())
}

/// Drops the wallet-first keyspaces left beside the mark: those the copy read (the store's
/// `indexed_lsn` is still the one the copy covered), or empty ones. Anything else was filed by
/// an older walletd after the upgrade, and is refused with the way out.
fn drop_wallet_first(open: &Open) -> Result<(), StoreError> {
    let mut left = Vec::new();
    for name in OLD_KEYSPACES {
        if open.db.keyspace_exists(name) {
            left.push((
                name,
                open.db
                    .keyspace(name, fjall::KeyspaceCreateOptions::default)?,
            ));
        }
    }
    let covered = open.meta.get(COPIED_AT)?;
    if !left.is_empty() {
        let indexed = open.meta.get(INDEXED_LSN)?;
        let copied = covered.as_ref().map(|lsn| lsn.as_ref())
            == Some(indexed.as_deref().unwrap_or_default());
        let mut empty = true;
        for (_, handle) in &left {
            empty &= handle.is_empty()?;
        }
        if !copied && !empty {
            return Err(StoreError::Rule(format!(
                "the history store holds records in its wallet-first keyspaces that were filed \
                 after it was copied into the epoch-first layout (an older walletd ran on it); \
                 they are not in the layout this walletd reads. {REBUILD}"
            )));
        }
        for (name, handle) in left {
            open.db.delete_keyspace(handle)?;
            tracing::info!(keyspace = name, "dropped a wallet-first history keyspace");
        }
    }
    if covered.is_some() {
        open.meta.remove(COPIED_AT)?;
    }
    Ok(())
}

/// The copy of [`upgrade_layout`]: write batches of at most [`Copy::COMMIT_EVERY`] rows, each
/// wallet's epoch key written when its (wallet, kind, epoch) changes, full memtables sealed
/// after each batch.
struct Copy<'a> {
    open: &'a Open,
    /// What the progress lines say.
    what: &'static str,
    writes: Writes,
    pending: usize,
    copied: u64,
    last_epoch: Option<(u64, u64, u64)>,
}

impl<'a> Copy<'a> {
    const COMMIT_EVERY: usize = 100_000;

    fn new(open: &'a Open, what: &'static str) -> Self {
        Copy {
            open,
            what,
            writes: Writes::new(&open.db),
            pending: 0,
            copied: 0,
            last_epoch: None,
        }
    }

    fn put(
        &mut self,
        to: &fjall::Keyspace,
        key: &[u8],
        value: fjall::Slice,
        (wallet, kind, epoch): (u64, u64, u64),
    ) -> Result<(), StoreError> {
        self.writes.insert(to, key, value);
        if self.last_epoch != Some((wallet, kind, epoch)) {
            self.writes.insert(
                &self.open.wallet_epochs,
                epoch_key(wallet, kind, epoch),
                Vec::new(),
            );
            self.last_epoch = Some((wallet, kind, epoch));
        }
        self.pending += 1;
        self.copied += 1;
        if self.pending >= Self::COMMIT_EVERY {
            self.finish()?;
        }
        if self.copied.is_multiple_of(1_000_000) {
            tracing::info!(copied = self.copied, "{}", self.what);
        }
        Ok(())
    }

    fn finish(&mut self) -> Result<(), StoreError> {
        let writes = std::mem::replace(&mut self.writes, Writes::new(&self.open.db));
        writes.commit()?;
        self.pending = 0;
        // Nothing else seals memtables before the indexer runs (they never rotate by
        // themselves here: `HistoryStore::open`), so the copy does, and waits for flushes.
        rotate_full(self.open)?;
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::runtime::history::HistoryStore;

    /// Files raw records of `wallet` with these ids, and their epoch keys.
    fn file_ids(store: &HistoryStore, wallet: u64, ids: &[u64]) {
        store
            .with(|open| {
                let mut writes = Writes::new(&open.db);
                let mut seen = EpochsSeen::default();
                for &id in ids {
                    writes.insert(&open.holds, record_key(wallet, id), id.to_be_bytes());
                    seen.note(open, &mut writes, wallet, Paged::Hold as u64, id_epoch(id));
                }
                writes.commit()?;
                Ok(())
            })
            .unwrap();
    }

    fn ids(rows: Rows) -> Vec<u64> {
        rows.map(|row| record_of(&row.unwrap().0).unwrap().1)
            .collect()
    }

    /// A wallet's records across epochs it has (and epochs it skips), bounded anywhere: exactly
    /// its ids in the bounds, in id order both ways, none of a neighbour's.
    #[test]
    fn a_wallets_records_chain_its_epochs_in_id_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let epoch = 1u64 << ID_EPOCH_BITS;
        let mine: Vec<u64> = [
            0,
            1,
            epoch - 1,
            epoch,
            3 * epoch + 5,
            3 * epoch + 6,
            9 * epoch,
            // The last epoch a key can name, and the ids past it that share it.
            LAST_ID_EPOCH * epoch - 1,
            LAST_ID_EPOCH * epoch,
            LAST_ID_EPOCH * epoch + epoch,
            u64::MAX - 1,
        ]
        .into_iter()
        .collect();
        file_ids(&store, 7, &mine);
        file_ids(
            &store,
            6,
            &[2, epoch + 1, 4 * epoch, LAST_ID_EPOCH * epoch + 3],
        );
        file_ids(&store, 8, &[3, 2 * epoch, 3 * epoch + 7, u64::MAX]);
        for (lo, hi) in [
            (0, u64::MAX),
            (1, epoch),
            (2, 3 * epoch + 5),
            (epoch + 1, 9 * epoch - 1),
            (3 * epoch + 6, 3 * epoch + 6),
            (5, 4),
            (9 * epoch, LAST_ID_EPOCH * epoch),
            (LAST_ID_EPOCH * epoch + 1, u64::MAX),
        ] {
            let want: Vec<u64> = mine
                .iter()
                .copied()
                .filter(|id| (lo..=hi).contains(id))
                .collect();
            store
                .with(|open| {
                    let oldest = ids(wallet_records(open, Paged::Hold, 7, (lo, hi), false));
                    assert_eq!(oldest, want, "{lo}..={hi} oldest first");
                    let mut newest = ids(wallet_records(open, Paged::Hold, 7, (lo, hi), true));
                    newest.reverse();
                    assert_eq!(newest, want, "{lo}..={hi} newest first");
                    Ok(())
                })
                .unwrap();
        }
    }

    /// Adds a wallet-first keyspace to a closed store, as an older walletd opening it would:
    /// with one record and the store's `indexed_lsn` moved past it (`filed`), or empty.
    fn older_walletd_opens(dir: &std::path::Path, filed: bool) {
        let db = fjall::Database::builder(dir).open().unwrap();
        let entries = db
            .keyspace("entries", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        if filed {
            let meta = db
                .keyspace("meta", fjall::KeyspaceCreateOptions::default)
                .unwrap();
            entries
                .insert(super::super::store::key2(7, 1), vec![1])
                .unwrap();
            meta.insert(INDEXED_LSN, 99u64.to_be_bytes()).unwrap();
        }
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }

    /// An older walletd that only opened an upgraded store leaves empty wallet-first keyspaces,
    /// which are dropped; one that filed records there is refused with the way out, and its
    /// records are left where they are.
    #[test]
    fn wallet_first_keyspaces_beside_the_mark_are_dropped_only_if_nothing_was_filed_there() {
        // Two stores: fjall does not bring back a keyspace name it dropped once.
        let dir = tempfile::tempdir().unwrap();
        HistoryStore::open(dir.path(), 1 << 20).unwrap().close();
        older_walletd_opens(dir.path(), false);
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                assert!(!open.db.keyspace_exists("entries"));
                Ok(())
            })
            .unwrap();
        store.close();
        let dir = tempfile::tempdir().unwrap();
        HistoryStore::open(dir.path(), 1 << 20).unwrap().close();
        older_walletd_opens(dir.path(), true);
        let refused = HistoryStore::open(dir.path(), 1 << 20)
            .unwrap_err()
            .to_string();
        assert!(refused.contains("older walletd"), "{refused}");
        assert!(refused.contains("--from-archive"), "{refused}");
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        assert!(db.keyspace_exists("entries"), "the records were dropped");
    }

    /// The date index orders by time across epochs even when the clock stepped back (ids and
    /// times disagree), and a range reads only the wallet's entries within it.
    #[test]
    fn the_date_index_is_newest_first_by_time_across_epochs() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let span = 1i64 << TIME_EPOCH_BITS;
        // (entry id, created at): the clock steps back two epochs at id 4.
        let entries = [
            (1u64, 0i64),
            (2, span),
            (3, 3 * span + 9),
            (4, span + 1),
            (5, 5 * span),
        ];
        store
            .with(|open| {
                let mut writes = Writes::new(&open.db);
                let mut seen = EpochsSeen::default();
                for (wallet, shift) in [(7u64, 0i64), (8, 1)] {
                    for (id, at) in entries {
                        let (key, epoch) = time_index_key(wallet, at + shift, id);
                        writes.insert(&open.entry_times, key, Vec::new());
                        seen.note(open, &mut writes, wallet, ENTRY_TIMES, epoch);
                    }
                }
                writes.commit()?;
                Ok(())
            })
            .unwrap();
        let read = |from: i64, to: i64| {
            store
                .with(|open| {
                    Ok(wallet_entry_times(open, 7, (time_key(from), time_key(to)))
                        .map(|row| entry_of_time_key(&row.unwrap().0).unwrap())
                        .collect::<Vec<_>>())
                })
                .unwrap()
        };
        assert_eq!(read(i64::MIN, i64::MAX), vec![5, 3, 4, 2, 1]);
        assert_eq!(read(span, 3 * span + 9), vec![3, 4, 2]);
        assert_eq!(read(span + 1, 5 * span - 1), vec![3, 4]);
        assert_eq!(read(6 * span, 7 * span), Vec::<u64>::new());
    }

    /// A record key is 20 bytes (what fjall keeps inline), sorts as (epoch, wallet, id) sort,
    /// reads back, and a key whose epoch is not its id's is refused as damaged.
    #[test]
    fn record_keys_are_20_bytes_in_epoch_wallet_id_order() {
        let epoch = 1u64 << ID_EPOCH_BITS;
        let ids = [
            0,
            1,
            epoch - 1,
            epoch,
            LAST_ID_EPOCH * epoch - 1,
            LAST_ID_EPOCH * epoch,
            u64::MAX,
        ];
        let mut keys = Vec::new();
        for wallet in [0u64, 1, 0x0100_0000, u64::MAX] {
            for id in ids {
                let key = record_key(wallet, id);
                assert_eq!(key.len(), 20);
                assert_eq!(record_of(&key).unwrap(), (wallet, id));
                keys.push((key, (id_epoch(id), wallet, id)));
            }
        }
        let mut by_bytes = keys.clone();
        by_bytes.sort_by_key(|(key, _)| *key);
        keys.sort_by_key(|(_, order)| *order);
        assert_eq!(by_bytes, keys);
        let mut moved = record_key(7, 5 * epoch);
        moved[3] += 1;
        let refused = record_of(&moved).unwrap_err().to_string();
        assert!(refused.contains("is not the epoch of id"), "{refused}");
        assert!(record_of(&moved[..19]).is_err());
    }

    /// Adds the 24-byte record keyspaces of layouts 2 to 6 to a closed store (holding `records`:
    /// kind, wallet, id, value) and marks it `layout`; `copied` of the records are also put in
    /// the 20-byte keyspaces with a stale value, as a copy cut short by a crash, then a change
    /// filed by an older walletd, leave them (with their `wallet_epochs` keys and the values of
    /// the wide keyspaces if `layout` is this one: a copy that finished). No other
    /// `wallet_epochs` keys: the copy writes them.
    fn wide_layout(
        dir: &std::path::Path,
        records: &[(Paged, u64, u64, Vec<u8>)],
        copied: usize,
        layout: u8,
    ) {
        let db = fjall::Database::builder(dir).open().unwrap();
        let keyspace = |name: &str| db.keyspace(name, || keyspace_options(name)).unwrap();
        let meta = keyspace("meta");
        let wallet_epochs = keyspace("wallet_epochs");
        let wide: Vec<_> = WIDE_RECORD_KEYSPACES
            .iter()
            .map(|name| keyspace(name))
            .collect();
        let narrow = [
            keyspace("transactions_by_epoch20"),
            keyspace("entries_by_epoch20"),
            keyspace("holds_by_epoch20"),
        ];
        for (n, (kind, wallet, id, value)) in records.iter().enumerate() {
            let k = *kind as usize;
            wide[k]
                .insert(
                    super::super::store::key3(id >> ID_EPOCH_BITS, *wallet, *id),
                    value,
                )
                .unwrap();
            if n < copied && layout == LAYOUT_CURRENT {
                // The copy finished and the mark is written: its keys are all there.
                narrow[k].insert(record_key(*wallet, *id), value).unwrap();
                wallet_epochs
                    .insert(epoch_key(*wallet, k as u64, id_epoch(*id)), [])
                    .unwrap();
            } else if n < copied {
                narrow[k].insert(record_key(*wallet, *id), [0xEE]).unwrap();
            }
        }
        meta.insert(LAYOUT, [layout]).unwrap();
        db.persist(fjall::PersistMode::SyncAll).unwrap();
    }

    /// A store of layouts 2 to 6 is copied into 20-byte keys on open, whether the copy starts
    /// afresh, was cut short by a crash, or finished before a crash that came before the drop:
    /// every record reads back in id order with its value, none twice, ids past the last epoch
    /// fold into it, the old keyspaces are gone and the store is marked layout 7. Empty 24-byte
    /// keyspaces beside the mark (an older walletd that refused the store) are dropped.
    #[test]
    fn a_store_with_24_byte_record_keys_is_copied_into_20_byte_keys_on_open() {
        let epoch = 1u64 << ID_EPOCH_BITS;
        let mut records = Vec::new();
        for (kind, wallet) in [
            (Paged::Transaction, 3u64),
            (Paged::Entry, 3),
            (Paged::Hold, 4),
        ] {
            for id in [1u64, 2, epoch + 1, 5 * epoch, 5 * epoch + 9] {
                let value = [kind as u8, wallet as u8, id as u8].to_vec();
                records.push((kind, wallet, id + wallet, value));
            }
        }
        // Another wallet's records in the same epochs, in between.
        records.push((Paged::Entry, 2, 7, vec![9]));
        records.push((Paged::Entry, 4, 5 * epoch + 2, vec![9]));
        // Ids around the last 20-byte epoch, and a wallet whose only record is in a 24-byte
        // epoch past it (which folds into it).
        for (wallet, id) in [
            (4, LAST_ID_EPOCH * epoch - 1),
            (4, LAST_ID_EPOCH * epoch),
            (4, u64::MAX - 1),
            (5, u64::MAX - 1),
        ] {
            records.push((Paged::Hold, wallet, id, id.to_be_bytes().to_vec()));
        }
        let mut cases: Vec<(&[_], usize, u8)> = (LAYOUT_EPOCHS..=LAYOUT_ANSWER_GENERATIONS)
            .map(|layout| (&records[..], 0, layout))
            .collect();
        cases.push((&records, records.len() / 2, LAYOUT_ANSWER_GENERATIONS));
        cases.push((&records, records.len(), LAYOUT_CURRENT));
        cases.push((&[], 0, LAYOUT_CURRENT));
        for (records, copied, layout) in cases {
            let dir = tempfile::tempdir().unwrap();
            HistoryStore::open(dir.path(), 1 << 20).unwrap().close();
            wide_layout(dir.path(), records, copied, layout);
            let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
            store
                .with(|open| {
                    for name in WIDE_RECORD_KEYSPACES {
                        assert!(!open.db.keyspace_exists(name), "{name} was not dropped");
                    }
                    assert_eq!(
                        open.meta.get(LAYOUT)?.as_deref(),
                        Some(&[LAYOUT_CURRENT][..])
                    );
                    for kind in Paged::ALL {
                        for wallet in [2u64, 3, 4, 5] {
                            let want: Vec<(u64, Vec<u8>)> = records
                                .iter()
                                .filter(|(k, w, _, _)| *k == kind && *w == wallet)
                                .map(|(_, _, id, value)| (*id, value.clone()))
                                .collect();
                            let got: Vec<(u64, Vec<u8>)> =
                                wallet_records(open, kind, wallet, (0, u64::MAX), false)
                                    .map(|row| {
                                        let (key, value) = row.unwrap();
                                        (record_of(&key).unwrap().1, value.to_vec())
                                    })
                                    .collect();
                            assert_eq!(
                                got, want,
                                "{kind:?} of wallet {wallet}, layout {layout}, {copied} copied"
                            );
                        }
                    }
                    Ok(())
                })
                .unwrap();
        }
    }
}
