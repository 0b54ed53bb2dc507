//! The history store: wallet transactions, ledger entries and holds on disk, in an LSM tree
//! (fjall, in `data_dir/history/`; chosen by measurement in BENCHMARKS.md, "History store: fjall
//! vs redb": it files ~2-5x more transfers per second than redb on this machine and reopens
//! after a crash in about a second).
//!
//! # Keyspaces
//!
//! Keys are big-endian integers, so byte order is numeric order. The record keyspaces start
//! with an epoch of the id (4 bytes, so that a record key fits the 20 bytes fjall keeps inline;
//! or of the time, 8 bytes, for the date index), so a wallet's records are one range per epoch,
//! oldest first, and `wallet_epochs` lists its epochs ([`super::epochs`], which says why).
//! Values start with [`VALUE_FORMAT`], then postcard.
//!
//! ```text
//! meta          "indexed_lsn"                   -> u64           the last WAL record filed
//! transactions  epoch | wallet | transaction id -> Transaction
//! entries       epoch | wallet | entry id       -> (prev hash, LedgerEntry)
//! entry_times   epoch | wallet | created_at | entry id -> ()     the statement's date index
//! holds         epoch | wallet | hold id        -> Hold
//! wallet_epochs wallet | kind | epoch           -> ()            a wallet's epochs ([`super::epochs`])
//! tx_uuids      uuid                            -> wallet | transaction id
//! hold_uuids    uuid                            -> wallet | hold id
//! answers_from_<start ms>  digest            -> (name, StoredAnswer)  idempotency answers, one keyspace a generation ([`super::answers`])
//! pages         wallet | kind | block           -> id            the page directory ([`super::pages`]), kinds 0-2
//! pages         wallet | 3 | 0                  -> ordinal, id   a wallet's first entry at the floor ([`super::dated`])
//! pages         wallet | 4 | ordinal / 64       -> id            the entries' fine directory ([`super::pages::FINE`])
//! report_days, report_subjects                  report aggregates ([`super::report_days`])
//! moves         kind | uuid                     -> MoveRecord    finished cross-shard moves ([`super::moves`])
//! payments      uuid                            -> Payment
//! merchant_payments  merchant wallet | payment id -> uuid      a merchant's payments, oldest first
//! payment_times completed_at | payment id       -> uuid          completed payments by date (fees)
//! payouts       payout id                       -> Payout
//! wallet_payouts wallet | payout id             -> ()            a wallet's payouts, oldest first
//! settlements   settlement id                   -> Settlement
//! wallet_settlements wallet | settlement id     -> ()            a wallet's settlements, oldest first
//! settled_items transaction id                  -> settlement id an executed settlement's claims
//! meta          "commerce_complete"             -> ()            every payment and payout is filed
//! links         uuid                            -> PaymentLink
//! qrs           uuid                            -> QrCode
//! meta          "settlements_complete"          -> ()            every settlement is filed
//! meta          "links_complete"                -> ()            every payment link and QR payload is filed
//! ```
//!
//! An entry is stored with the hash of the entry before it, so a page of the statement shows each
//! entry's `prev_hash` without a second lookup. The page directory makes any page O(page),
//! however deep, and a wallet's count of each kind one seek and fewer than 1,024 keys
//! ([`super::pages::count_of`]).
//!
//! # Durability
//!
//! The WAL is the only commit point. Each indexer batch is one atomic write batch that also sets
//! `indexed_lsn`; it reaches the OS at once (a process crash loses nothing) and is fsynced only at
//! a checkpoint ([`HistoryStore::persist`]), every
//! [`super::HistoryConfig::checkpoint_every`]. After a power loss the store reopens at some
//! batch boundary at or after its last checkpoint, and recovery refiles the log from the
//! `indexed_lsn` it finds.

use std::path::Path;

use serde::de::DeserializeOwned;
use serde::Serialize;

use super::dated;
use super::epochs::{entry_of_time_key, record_key, wallet_entry_times, wallet_records};
use super::pages::{
    count_for_read, count_of, directory_key, directory_keys, fine_key, newest_first_raw,
    newest_merged_raw, starts_block, Paged, BLOCK,
};
use super::writes::Writes;
use crate::commerce::payment::{Payment, PaymentLink, QrCode};
use crate::commerce::payout::{Payout, Settlement, SettlementStatus};
use crate::commerce::state::Commerce;
use crate::ledger::hold::Hold;
use crate::ledger::transaction::{Hash, LedgerEntry, Transaction};
use crate::shard::cold::ColdResult;
use crate::values::ids::{EntryId, HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};

/// First byte of every stored value; a new layout takes a new number and keeps a reader for the
/// old one.
pub const VALUE_FORMAT: u8 = 1;

pub(crate) const INDEXED_LSN: &[u8] = b"indexed_lsn";
/// Present once every payment and payout of the log is filed (absent: a store written before they
/// were, completed by recovery from the shards' memory).
pub(crate) const COMMERCE_COMPLETE: &[u8] = b"commerce_complete";
/// Present once every settlement of the log is filed, with the claims of the executed ones
/// (absent: a store written before they were, completed like `commerce_complete`).
pub(crate) const SETTLEMENTS_COMPLETE: &[u8] = b"settlements_complete";
/// Present once every payment link and QR payload of the log is filed (absent: a store written
/// before they were, completed like `commerce_complete`).
pub(crate) const LINKS_COMPLETE: &[u8] = b"links_complete";
/// The marks of a store that files every commerce record ([`HistoryStore::commerce_complete`]).
const COMMERCE_MARKS: [&[u8]; 3] = [COMMERCE_COMPLETE, SETTLEMENTS_COMPLETE, LINKS_COMPLETE];

/// The store's directory in a data directory.
pub const STORE_DIR: &str = "history";

/// Why the store could not be read or written. Every one is fatal for the indexer.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum StoreError {
    #[error("history store: {0}")]
    Engine(#[from] fjall::Error),
    #[error("history store record {what} {key} is damaged: {reason}")]
    Corrupt {
        what: &'static str,
        key: String,
        reason: String,
    },
    #[error("history store: {what} {key} is missing")]
    Missing { what: &'static str, key: String },
    #[error("history store: {0}")]
    Rule(String),
    #[error("history store is closed")]
    Closed,
}

pub(crate) fn encode<T: Serialize>(value: &T) -> Result<Vec<u8>, StoreError> {
    postcard::to_extend(value, vec![VALUE_FORMAT]).map_err(encoding_failed)
}

fn encoding_failed(error: postcard::Error) -> StoreError {
    StoreError::Corrupt {
        what: "value",
        key: "(encoding)".into(),
        reason: error.to_string(),
    }
}

/// [`encode`] through `scratch`, a buffer kept between calls, straight into a store value: one
/// allocation per value (the value's own) instead of a `Vec` grown from one byte.
pub(crate) fn encode_value<T: Serialize>(
    scratch: &mut Vec<u8>,
    value: &T,
) -> Result<fjall::Slice, StoreError> {
    let mut buffer = std::mem::take(scratch);
    buffer.clear();
    buffer.push(VALUE_FORMAT);
    let buffer = postcard::to_extend(value, buffer).map_err(encoding_failed)?;
    let slice = fjall::Slice::from(buffer.as_slice());
    *scratch = buffer;
    Ok(slice)
}

pub(crate) fn decode<T: DeserializeOwned>(
    what: &'static str,
    key: &[u8],
    bytes: &[u8],
) -> Result<T, StoreError> {
    let corrupt = |reason: String| StoreError::Corrupt {
        what,
        key: hex::encode(key),
        reason,
    };
    match bytes.split_first() {
        Some((&VALUE_FORMAT, body)) => {
            let (value, rest) =
                postcard::take_from_bytes(body).map_err(|e| corrupt(e.to_string()))?;
            if rest.is_empty() {
                Ok(value)
            } else {
                Err(corrupt(format!("{} trailing bytes", rest.len())))
            }
        }
        Some((version, _)) => Err(corrupt(format!("unknown value format {version}"))),
        None => Err(corrupt("empty value".into())),
    }
}

/// Maps a signed millisecond time to a key part that sorts the same way.
pub(crate) fn time_key(at_ms: i64) -> u64 {
    (at_ms as u64) ^ (1 << 63)
}

/// `a | b`, big-endian.
pub(crate) fn key2(a: u64, b: u64) -> [u8; 16] {
    let mut key = [0u8; 16];
    let (high, low) = key.split_at_mut(8);
    high.copy_from_slice(&a.to_be_bytes());
    low.copy_from_slice(&b.to_be_bytes());
    key
}

/// `a | b | c`, big-endian.
pub(crate) fn key3(a: u64, b: u64, c: u64) -> [u8; 24] {
    let mut key = [0u8; 24];
    let (first, rest) = key.split_at_mut(8);
    let (second, third) = rest.split_at_mut(8);
    first.copy_from_slice(&a.to_be_bytes());
    second.copy_from_slice(&b.to_be_bytes());
    third.copy_from_slice(&c.to_be_bytes());
    key
}

/// The big-endian integers of a key or value made by [`key2`] / [`key3`].
pub(crate) fn numbers<const N: usize>(
    what: &'static str,
    bytes: &[u8],
) -> Result<[u64; N], StoreError> {
    if bytes.len() != N * 8 {
        return Err(StoreError::Corrupt {
            what,
            key: hex::encode(bytes),
            reason: format!("{} bytes where {} were expected", bytes.len(), N * 8),
        });
    }
    let mut out = [0u64; N];
    for (slot, chunk) in out.iter_mut().zip(bytes.chunks_exact(8)) {
        let mut word = [0u8; 8];
        word.copy_from_slice(chunk);
        *slot = u64::from_be_bytes(word);
    }
    Ok(out)
}

/// How many records of each kind a wallet has in the store.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct WalletCounts {
    pub transactions: u64,
    pub entries: u64,
    pub holds: u64,
}

/// One page of records, newest first, and how many there are in all.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct StorePage<T> {
    pub records: Vec<T>,
    pub total: u64,
}

/// Memtable bytes of all keyspaces (active and sealed) past which the indexer waits for flushes.
pub const WRITE_BUFFER_MAX_BYTES: u64 = 256 << 20;

/// The table size of the keyspaces compacted with fjall's leveled strategy (the large record
/// keyspaces and the answers' generations, [`keyspace_options`]), which settling a
/// generation keeps ([`super::answers::generations::Generations::settle_step`]).
pub(crate) const LEVELED_TABLE_BYTES: u64 = 32 << 20;
/// Store journal bytes past which the indexer seals every memtable (bounds what a reopen
/// replays of the store's own journal).
const JOURNAL_MAX_BYTES: u64 = 96 << 20;
/// Longest the indexer waits for flushes before it stops with an error.
const FLUSH_WAIT_MAX: std::time::Duration = std::time::Duration::from_secs(120);

/// The record keyspaces' names: epoch-first keys of 20 bytes ([`super::epochs`]). Layouts 2
/// to 6 kept the same records under 24-byte keys in [`WIDE_RECORD_KEYSPACES`], the
/// wallet-first layout in the names without `_by_epoch`.
const TRANSACTIONS: &str = "transactions_by_epoch20";
const ENTRIES: &str = "entries_by_epoch20";
const ENTRY_TIMES: &str = "entry_times_by_epoch";
const HOLDS: &str = "holds_by_epoch20";
/// The record keyspaces of layouts 2 to 6 (`epoch (8) | wallet | id`), in [`Paged`] order:
/// copied into the 20-byte keys on open ([`super::epochs::upgrade_layout`]), then dropped.
pub(crate) const WIDE_RECORD_KEYSPACES: [&str; 3] = [
    "transactions_by_epoch",
    "entries_by_epoch",
    "holds_by_epoch",
];

/// The open database and its keyspaces.
pub(crate) struct Open {
    pub(crate) db: fjall::Database,
    pub(crate) meta: fjall::Keyspace,
    pub(crate) transactions: fjall::Keyspace,
    pub(crate) entries: fjall::Keyspace,
    pub(crate) entry_times: fjall::Keyspace,
    pub(crate) holds: fjall::Keyspace,
    pub(crate) wallet_epochs: fjall::Keyspace,
    pub(crate) tx_uuids: fjall::Keyspace,
    pub(crate) hold_uuids: fjall::Keyspace,
    /// The idempotency answers' generations ([`super::answers::generations`]).
    pub(crate) generations: super::answers::generations::Generations,
    /// The answers' digest layout, in a store written before generations
    /// ([`super::answers::digest_layout`]).
    pub(crate) digest_layout: Option<super::answers::digest_layout::DigestLayout>,
    /// The first layout's `answers` and `answer_times`, in a store that still has them.
    pub(crate) legacy_answers: Option<[fjall::Keyspace; 2]>,
    /// The first layout's index still holds answers: lookups ask it too.
    pub(crate) legacy_answers_live: std::sync::atomic::AtomicBool,
    pub(crate) pages: fjall::Keyspace,
    pub(crate) report_days: fjall::Keyspace,
    pub(crate) report_subjects: fjall::Keyspace,
    /// The report aggregates count every filed record (`meta` `reports_complete`); until then
    /// filing leaves them alone and reports are refused.
    pub(crate) reports: std::sync::atomic::AtomicBool,
    pub(crate) moves: fjall::Keyspace,
    pub(crate) payments: fjall::Keyspace,
    pub(crate) merchant_payments: fjall::Keyspace,
    pub(crate) payment_times: fjall::Keyspace,
    pub(crate) payouts: fjall::Keyspace,
    pub(crate) wallet_payouts: fjall::Keyspace,
    pub(crate) settlements: fjall::Keyspace,
    pub(crate) wallet_settlements: fjall::Keyspace,
    pub(crate) settled_items: fjall::Keyspace,
    pub(crate) links: fjall::Keyspace,
    pub(crate) qrs: fjall::Keyspace,
    /// Each wallet's counts as the store holds them, kept by the indexer after every commit
    /// (before it publishes its progress, so a read that waited for its records finds them
    /// counted) for the wallets it has filed since the store opened; a kind not known here is
    /// counted from the page directory ([`super::pages::count_of`]), and a page read fills an
    /// empty slot with the count it derived ([`super::pages::count_for_read`]). Grows with
    /// wallets, not with history (~70 bytes a wallet).
    pub(crate) counted: std::sync::Mutex<super::pages::Counted>,
}

impl Open {
    /// Every keyspace with the memtable size at which the indexer seals it.
    fn keyspaces(&self) -> Vec<(fjall::Keyspace, u64)> {
        const LARGE: u64 = 16 << 20;
        const SMALL: u64 = 8 << 20;
        let fixed = [
            (&self.meta, SMALL),
            (&self.transactions, LARGE),
            (&self.entries, LARGE),
            (&self.entry_times, LARGE),
            (&self.holds, LARGE),
            (&self.wallet_epochs, SMALL),
            (&self.tx_uuids, LARGE),
            (&self.hold_uuids, LARGE),
            (&self.pages, SMALL),
            (&self.report_days, SMALL),
            (&self.report_subjects, SMALL),
            (&self.moves, SMALL),
            (&self.payments, LARGE),
            (&self.merchant_payments, SMALL),
            (&self.payment_times, SMALL),
            (&self.payouts, SMALL),
            (&self.wallet_payouts, SMALL),
            (&self.settlements, SMALL),
            (&self.wallet_settlements, SMALL),
            (&self.settled_items, SMALL),
            (&self.links, SMALL),
            (&self.qrs, SMALL),
        ];
        let older = self.legacy_answers.iter().flatten().chain(
            self.digest_layout
                .iter()
                .flat_map(|layout| layout.keyspaces()),
        );
        fixed
            .into_iter()
            .chain(older.map(|keyspace| (keyspace, SMALL)))
            .map(|(keyspace, limit)| (keyspace.clone(), limit))
            .chain(
                self.generations
                    .keyspaces()
                    .into_iter()
                    .map(|keyspace| (keyspace, LARGE)),
            )
            .collect()
    }
}

/// How a keyspace of the store is made (kept with it: an existing keyspace keeps what it was
/// created with).
pub(crate) fn keyspace_options(name: &str) -> fjall::KeyspaceCreateOptions {
    let mut options = fjall::KeyspaceCreateOptions::default().max_memtable_size(u64::MAX >> 1);
    // The records' data blocks are lz4-compressed at every level, not only from L2
    // down (fjall's default): with epoch-first keys most tables reach the lower
    // levels by a move, never rewritten, so a table is compressed when it is first
    // written or never. Random keys (uuids, client keys) do not compress: their
    // keyspaces are left alone and spend nothing on it.
    let [wide_transactions, wide_entries, wide_holds] = WIDE_RECORD_KEYSPACES;
    let record = [
        TRANSACTIONS,
        ENTRIES,
        HOLDS,
        wide_transactions,
        wide_entries,
        wide_holds,
    ]
    .contains(&name);
    let compressed = if record || name == "payments" {
        fjall::CompressionType::Lz4
    } else {
        fjall::CompressionType::None
    };
    options =
        options.data_block_compression_policy(fjall::config::CompressionPolicy::all(compressed));
    // No table keeps its block index or bloom filter in memory: they go through
    // the block cache, which is bounded. fjall pins L0's and L1's indexes and L0's
    // filters by default, decided when it writes a table (a merge out of L0 counts
    // as L1 wherever the base level sits), and a table keeps it when compaction
    // moves it down a level without rewriting it, which is how most tables of the
    // epoch-first keyspaces (and every table of the old `answers_by_lsn`) reach the deeper
    // levels: the pinned indexes grew with every table ever written, 2 MiB a minute
    // under the soak, without bound (BENCHMARKS.md, "What the store holds in
    // memory"). Kept with the keyspace when it is created.
    options = options
        .index_block_pinning_policy(fjall::config::PinningPolicy::disabled())
        .filter_block_pinning_policy(fjall::config::PinningPolicy::disabled());
    // Merging eight 16 MiB tables at a time instead of four halves how often an
    // L0 -> L1 compaction rewrites the tables it overlaps (L1 stays 8 x 32 MiB =
    // 256 MiB). Measured when these keyspaces were keyed wallet-first, where every
    // table overlapped all of L1: a 4-minute soak's last minute went from x0.71
    // of the first to x0.84 (BENCHMARKS.md). The uuid indexes are random-keyed, so
    // every one of their L0 -> L1 compactions overlaps all of L1: with 8 MiB
    // memtables and four L0 tables a merge, `tx_uuids` wrote the most table bytes
    // of all keyspaces by minute 8 of a soak (454 MiB in 30 s), so they get the
    // large memtables and this strategy too. Kept with the keyspace when it is
    // created, so an existing store keeps the strategy it was made with.
    // An answers' keyspace: a generation of them (`super::answers::generations`).
    let answers = super::answers::generations::start_of(name).is_some();
    if answers || record || matches!(name, ENTRY_TIMES | "payments" | "tx_uuids" | "hold_uuids") {
        options = options.compaction_strategy(std::sync::Arc::new(
            fjall::compaction::Leveled::default()
                .with_l0_threshold(8)
                .with_table_target_size(LEVELED_TABLE_BYTES),
        ));
    }
    if answers {
        // Answers are the largest values (a rendered response, ~350 bytes) and are
        // never changed: kept apart in blob files, written once at flush, compaction
        // moves only their keys. Without it the one worker fell behind under a keyed
        // soak and sealed memtables piled up in memory (BENCHMARKS.md).
        options.with_kv_separation(Some(
            fjall::KvSeparationOptions::default()
                .separation_threshold(64)
                .compression(fjall::CompressionType::Lz4),
        ))
    } else {
        options
    }
}

/// What the history store holds in memory ([`HistoryStore::memory`]), in bytes, and how many
/// tables it has on disk.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StoreMemory {
    /// Active and sealed memtables of every keyspace: what is not yet in the store's on-disk
    /// tables (bounded by the indexer's sealing).
    pub memtables: u64,
    /// Blocks in the block cache (bounded by its capacity, `cache_bytes`).
    pub block_cache: u64,
    /// Bloom filters kept in memory for the tables of the levels fjall pins them for.
    pub pinned_filters: u64,
    /// Block indexes kept in memory for the tables of the levels fjall pins them for.
    pub pinned_indexes: u64,
    /// Tables of every keyspace.
    pub tables: u64,
    /// Generations of idempotency answers (keyspaces, [`super::answers::generations`]): about
    /// five, whatever the history, unless the clock ran ahead.
    pub answer_generations: u64,
}

/// A read on a request's path slower than this is logged and counted
/// ([`ForegroundReadStats::slow`]).
pub const SLOW_FOREGROUND_READ: std::time::Duration = std::time::Duration::from_millis(50);

/// The store reads made on a request's path: the HTTP threads' idempotency lookups
/// ([`HistoryStore::answer`]) and a shard's recall of records that left its memory
/// (`shard::cold`; a scan's time includes the caller's visits of what it read). Each one blocks
/// the thread that makes it (a runtime worker or a pool thread, or a whole shard), so their
/// time is counted, and the slow ones are logged: at most one line a second, which counts the
/// others (a lock held through a sync makes every lookup waiting on it slow at once).
struct ForegroundReads {
    reads: std::sync::atomic::AtomicU64,
    nanos: std::sync::atomic::AtomicU64,
    slow: std::sync::atomic::AtomicU64,
    /// When the store opened: the clock of `warned_at_ms`.
    opened: std::time::Instant,
    /// When the last slow read was logged (ms since `opened`; 0: never), and `slow` then.
    warned_at_ms: std::sync::atomic::AtomicU64,
    warned_slow: std::sync::atomic::AtomicU64,
}

impl Default for ForegroundReads {
    fn default() -> Self {
        ForegroundReads {
            reads: std::sync::atomic::AtomicU64::new(0),
            nanos: std::sync::atomic::AtomicU64::new(0),
            slow: std::sync::atomic::AtomicU64::new(0),
            opened: std::time::Instant::now(),
            warned_at_ms: std::sync::atomic::AtomicU64::new(0),
            warned_slow: std::sync::atomic::AtomicU64::new(0),
        }
    }
}

impl ForegroundReads {
    /// Counts a slow read, and logs it unless a slow read was logged less than a second ago.
    fn slow(&self, what: &'static str, took: std::time::Duration) {
        use std::sync::atomic::Ordering::Relaxed;
        let slow = self.slow.fetch_add(1, Relaxed) + 1;
        // At least 1: 0 means "never logged".
        let now_ms = u64::try_from(self.opened.elapsed().as_millis())
            .unwrap_or(u64::MAX)
            .max(1);
        let last = self.warned_at_ms.load(Relaxed);
        if last != 0 && now_ms.saturating_sub(last) < 1_000 {
            return;
        }
        if self
            .warned_at_ms
            .compare_exchange(last, now_ms, Relaxed, Relaxed)
            .is_err()
        {
            return;
        }
        let since = slow.saturating_sub(self.warned_slow.fetch_max(slow, Relaxed));
        tracing::warn!(
            read = what,
            took_ms = took.as_millis(),
            slow_reads_since_last_warning = since,
            "a history store read on a request's path was slow"
        );
    }
}

/// What the reads on a request's path cost since the store opened.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct ForegroundReadStats {
    pub reads: u64,
    pub nanos: u64,
    /// Reads that took [`SLOW_FOREGROUND_READ`] or more.
    pub slow: u64,
}

/// The history store. Cheap to share: reads run beside the indexer's writes and see only what
/// it has committed.
pub struct HistoryStore {
    /// `None` once closed: the files are released even while stray handles live on (a restarted
    /// engine in the same process opens them again at once).
    open: std::sync::RwLock<Option<Open>>,
    /// Where the purge of each older answer layout resumes (read from `meta` on the first
    /// purge), and where the last purge was held back ([`HistoryStore::purge_answers_before`]).
    pub(crate) purged_to: std::sync::Mutex<super::answers::PurgedTo>,
    /// Time the indexer waited for fjall's flushes ([`HistoryStore::rotate_full_memtables`]),
    /// in nanoseconds: while it waits, the log waits on it.
    memtable_wait_nanos: std::sync::atomic::AtomicU64,
    /// The reads made on a request's path ([`HistoryStore::foreground`]).
    foreground: ForegroundReads,
}

impl std::fmt::Debug for HistoryStore {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str("HistoryStore")
    }
}

impl HistoryStore {
    /// Opens (creating if needed) the store in the directory `path`, with at most `cache_bytes`
    /// of block cache.
    pub fn open(path: &Path, cache_bytes: usize) -> Result<Self, StoreError> {
        let db = fjall::Database::builder(path)
            .cache_size(cache_bytes as u64)
            // fjall's own journal limit asks its worker to rotate, which can deadlock it (see
            // `rotate_full_memtables`); the indexer keeps the journal under JOURNAL_MAX_BYTES
            // itself, so this one is only a backstop.
            .max_journaling_size(512 << 20)
            // One background worker: with two, fjall 3.1's worker 0 hands every compaction
            // request back to the queue while worker 1 is busy, and the two spin on it (a
            // quarter of walletd's CPU under a transfer load, by perf). On 2 cores one
            // worker flushes and compacts in time.
            .worker_threads(1)
            .open()?;
        // fjall never rotates a memtable by itself here (the limit it sees is out of reach):
        // the indexer does, from its own thread ([`HistoryStore::rotate_full_memtables`]).
        let keyspace = |name: &str| db.keyspace(name, || keyspace_options(name));
        let meta = keyspace("meta")?;
        let open = Open {
            transactions: keyspace(TRANSACTIONS)?,
            entries: keyspace(ENTRIES)?,
            entry_times: keyspace(ENTRY_TIMES)?,
            holds: keyspace(HOLDS)?,
            wallet_epochs: keyspace("wallet_epochs")?,
            tx_uuids: keyspace("tx_uuids")?,
            hold_uuids: keyspace("hold_uuids")?,
            generations: super::answers::generations::Generations::open(
                &db,
                &meta,
                keyspace_options,
            )?,
            digest_layout: super::answers::digest_layout::open(&db, &meta, keyspace_options)?,
            legacy_answers: None,
            legacy_answers_live: std::sync::atomic::AtomicBool::new(false),
            counted: std::sync::Mutex::default(),
            pages: keyspace("pages")?,
            report_days: keyspace("report_days")?,
            report_subjects: keyspace("report_subjects")?,
            reports: std::sync::atomic::AtomicBool::new(false),
            moves: keyspace("moves")?,
            payments: keyspace("payments")?,
            merchant_payments: keyspace("merchant_payments")?,
            payment_times: keyspace("payment_times")?,
            payouts: keyspace("payouts")?,
            wallet_payouts: keyspace("wallet_payouts")?,
            settlements: keyspace("settlements")?,
            wallet_settlements: keyspace("wallet_settlements")?,
            settled_items: keyspace("settled_items")?,
            links: keyspace("links")?,
            qrs: keyspace("qrs")?,
            meta,
            db,
        };
        let open = super::answers::open_legacy(open)?;
        super::epochs::upgrade_layout(&open)?;
        let reports = if open
            .meta
            .get(super::report_days::REPORTS_COMPLETE)?
            .is_some()
        {
            true
        } else if open.meta.get(INDEXED_LSN)?.is_none() {
            // A new store counts every record from the first one.
            open.meta
                .insert(super::report_days::REPORTS_COMPLETE, Vec::new())?;
            true
        } else {
            false
        };
        open.reports
            .store(reports, std::sync::atomic::Ordering::Release);
        Ok(HistoryStore {
            open: std::sync::RwLock::new(Some(open)),
            purged_to: std::sync::Mutex::new(super::answers::PurgedTo::default()),
            memtable_wait_nanos: std::sync::atomic::AtomicU64::new(0),
            foreground: ForegroundReads::default(),
        })
    }

    /// Runs `work` on the open store.
    pub(crate) fn with<R>(
        &self,
        work: impl FnOnce(&Open) -> Result<R, StoreError>,
    ) -> Result<R, StoreError> {
        let guard = self
            .open
            .read()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        match guard.as_ref() {
            Some(open) => work(open),
            None => Err(StoreError::Closed),
        }
    }

    /// Releases the files; later calls answer [`StoreError::Closed`].
    pub fn close(&self) {
        let mut guard = self
            .open
            .write()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        guard.take();
    }

    /// The keyspaces the second compactor ([`run_compactor`]) works on: the ones fjall's
    /// worker spent the most on, by the bytes of tables each wrote in a soak (the random-keyed
    /// ones first: each of their compactions overlaps a whole level). The uuid indexes were
    /// among them until sealed uuids stopped their growth (`values::sealed`).
    /// The sixth step settles the generations of idempotency answers that take no more
    /// ([`super::answers::generations::Generations::settle_step`]).
    const COMPACTED: usize = 6;

    /// One step of the second compactor: asks the compaction strategy of keyspace `which` (of
    /// [`Self::COMPACTED`]) for work and does it on this thread; answers whether it did any (a
    /// compaction that found nothing returns at once). Old versions are kept (a watermark of
    /// 0: nothing is dropped that a reader might still see); fjall's own worker and flushes
    /// drop them later with the real watermark. One keyspace per call, so a [`Self::close`]
    /// waits for at most one compaction.
    pub(crate) fn compact_step(&self, which: usize) -> Result<bool, StoreError> {
        use fjall::AbstractTree;
        self.with(|open| {
            // The generation being filled: the others take only stragglers.
            let newest_answers = open.generations.filling();
            let keyspace = match which % Self::COMPACTED {
                0 => match &newest_answers {
                    Some(keyspace) => keyspace,
                    None => return Ok(false),
                },
                1 => &open.entries,
                2 => &open.payments,
                3 => &open.transactions,
                4 => &open.entry_times,
                _ => return open.generations.settle_step(),
            };
            let started = std::time::Instant::now();
            keyspace
                .tree
                .compact(keyspace.config.compaction_strategy.clone(), 0)
                .map_err(|error| StoreError::Rule(format!("compaction: {error}")))?;
            Ok(started.elapsed() >= std::time::Duration::from_millis(2))
        })
    }

    /// Seals the memtables that reached their size (16 MiB for the eight large keyspaces, 8 MiB
    /// for the rest: they bound the store's share of RSS), which hands their flush to fjall's
    /// worker; then waits while the memtables of all keyspaces together hold more than
    /// [`WRITE_BUFFER_MAX_BYTES`]. Called by the indexer after each batch it files; returns how
    /// long it waited.
    ///
    /// Why here and not in fjall: fjall 3.1 rotates a full memtable by a message to its worker,
    /// and that worker, handling it, sends the flush into its own bounded queue with a blocking
    /// send. Under sustained writes the queue fills with rotation requests (one per write batch
    /// while the memtable is full) and the one worker waits on itself for good: no flush again,
    /// memtables and the store's journal grow without bound (fjall-rs/fjall#323; our 10-minute
    /// soak reached 6.7 GiB, and a gdb backtrace showed the worker parked in `send` inside
    /// `inner_rotate_memtable`). Rotating from this thread, a full queue only makes the indexer
    /// wait, which stalls the WAL writer through its bounded channel: back-pressure, not growth.
    /// A wait longer than [`FLUSH_WAIT_MAX`] stops the indexer with an error (the log is then
    /// poisoned and the process exits) rather than wedging.
    pub(crate) fn rotate_full_memtables(&self) -> Result<std::time::Duration, StoreError> {
        let waited = self.with(rotate_full)?;
        self.memtable_wait_nanos.fetch_add(
            u64::try_from(waited.as_nanos()).unwrap_or(u64::MAX),
            std::sync::atomic::Ordering::Relaxed,
        );
        Ok(waited)
    }

    /// Runs `read`, a read on a request's path, timed ([`ForegroundReads`]).
    pub(crate) fn foreground<T>(&self, what: &'static str, read: impl FnOnce() -> T) -> T {
        use std::sync::atomic::Ordering::Relaxed;
        let started = std::time::Instant::now();
        let result = read();
        let took = started.elapsed();
        let reads = &self.foreground;
        reads.reads.fetch_add(1, Relaxed);
        reads
            .nanos
            .fetch_add(u64::try_from(took.as_nanos()).unwrap_or(u64::MAX), Relaxed);
        if took >= SLOW_FOREGROUND_READ {
            reads.slow(what, took);
        }
        result
    }

    /// A shard's recall of records that left its memory (`shard::cold`): timed as a read on a
    /// request's path, its error as the shard reports it.
    fn recall<T>(
        &self,
        what: &'static str,
        read: impl FnOnce() -> Result<T, StoreError>,
    ) -> ColdResult<T> {
        self.foreground(what, read)
            .map_err(|error| error.to_string())
    }

    /// The reads on a request's path since the store opened.
    #[must_use]
    pub fn foreground_reads(&self) -> ForegroundReadStats {
        use std::sync::atomic::Ordering::Relaxed;
        ForegroundReadStats {
            reads: self.foreground.reads.load(Relaxed),
            nanos: self.foreground.nanos.load(Relaxed),
            slow: self.foreground.slow.load(Relaxed),
        }
    }

    /// Total time the indexer has waited for the store's flushes since it opened (the
    /// `walletd_history_memtable_wait_seconds_total` metric).
    #[must_use]
    pub fn memtable_wait(&self) -> std::time::Duration {
        std::time::Duration::from_nanos(
            self.memtable_wait_nanos
                .load(std::sync::atomic::Ordering::Relaxed),
        )
    }

    /// Seals every memtable that holds anything and waits until fjall's worker has written them
    /// all to disk, then syncs: the next open has no journal to replay. For a clean stop, from
    /// the indexer's thread (never fjall's worker: see [`HistoryStore::rotate_full_memtables`]).
    pub fn flush_memtables(&self) -> Result<(), StoreError> {
        self.with(|open| {
            let keyspaces: Vec<fjall::Keyspace> = open
                .keyspaces()
                .into_iter()
                .map(|(keyspace, _)| keyspace)
                .collect();
            let keyspaces: Vec<&fjall::Keyspace> = keyspaces.iter().collect();
            flush_and_wait(&keyspaces, "at shutdown")?;
            open.db.persist(fjall::PersistMode::SyncData)?;
            Ok(())
        })
    }

    /// What the store holds in memory, by part, and its table count (the
    /// `walletd_history_memory_bytes` and `walletd_history_tables` metrics): which part of
    /// walletd's RSS the store is, and whether one of them grows with history.
    pub fn memory(&self) -> Result<StoreMemory, StoreError> {
        use fjall::AbstractTree;
        self.with(|open| {
            let mut memory = StoreMemory {
                memtables: open.db.write_buffer_size(),
                block_cache: open.db.cache_size(),
                answer_generations: open.generations.count() as u64,
                ..StoreMemory::default()
            };
            for (keyspace, _) in &open.keyspaces() {
                memory.pinned_filters += keyspace.tree.pinned_filter_size() as u64;
                memory.pinned_indexes += keyspace.tree.pinned_block_index_size() as u64;
                memory.tables += keyspace.tree.table_count() as u64;
            }
            Ok(memory)
        })
    }

    /// Makes everything committed so far durable (a checkpoint).
    pub fn persist(&self) -> Result<(), StoreError> {
        self.with(|open| Ok(open.db.persist(fjall::PersistMode::SyncData)?))
    }

    /// The last WAL record whose history is in the store (0 for a new store).
    pub fn indexed_lsn(&self) -> Result<u64, StoreError> {
        self.with(|open| match open.meta.get(INDEXED_LSN)? {
            Some(bytes) => Ok(numbers::<1>("indexed_lsn", &bytes)?[0]),
            None => Ok(0),
        })
    }

    pub fn counts(&self, wallet_id: WalletId) -> Result<WalletCounts, StoreError> {
        self.with(|open| counts_in(open, wallet_id.0))
    }

    /// The kinds (`"transactions"`, `"entries"`, `"holds"`) whose page directory lacks a block
    /// for `counts` (a wallet's counts as the shard holds them): pages of those kinds are
    /// slow (read by skipping), and a count derived past a missing last key scans further.
    pub fn directory_gaps(
        &self,
        wallet_id: WalletId,
        counts: WalletCounts,
    ) -> Result<Vec<&'static str>, StoreError> {
        self.with(|open| {
            let mut gaps = Vec::new();
            for (kind, count, name) in [
                (Paged::Transaction, counts.transactions, "transactions"),
                (Paged::Entry, counts.entries, "entries"),
                (Paged::Hold, counts.holds, "holds"),
            ] {
                if directory_keys(open, wallet_id.0, kind)? != count.div_ceil(BLOCK) {
                    gaps.push(name);
                }
            }
            Ok(gaps)
        })
    }

    /// What is wrong with `wallet_id`'s directory keys for entries, if anything: `starts` is
    /// the (ordinal, id) of each of its entries that starts a block or a sub-block of the fine
    /// directory, and each such key present must name that entry. A block key missing is
    /// [`Self::directory_gaps`]'s to report; a fine key may be missing (entries filed before
    /// the fine directory). Reads trust both kinds of key, so `replay --verify` checks them.
    pub fn entry_directory_disagreement(
        &self,
        wallet_id: WalletId,
        starts: &[(u64, u64)],
    ) -> Result<Option<String>, StoreError> {
        self.with(|open| {
            for &(ordinal, id) in starts {
                let (key, name) = if starts_block(ordinal) {
                    (directory_key(wallet_id.0, Paged::Entry, ordinal), "page")
                } else {
                    (fine_key(wallet_id.0, ordinal), "fine")
                };
                let Some(bytes) = open.pages.get(key)? else {
                    continue;
                };
                let named = numbers::<1>("page directory", &bytes)?[0];
                if named != id {
                    return Ok(Some(format!(
                        "its {name} directory key for entry {ordinal} names entry {named}, \
                         not {id}"
                    )));
                }
            }
            Ok(None)
        })
    }

    /// A wallet's transactions, newest first: `per_page` of them after skipping `offset`.
    pub fn transactions_page(
        &self,
        wallet_id: WalletId,
        offset: u64,
        per_page: u64,
    ) -> Result<StorePage<Transaction>, StoreError> {
        self.with(|open| {
            let total = count_for_read(open, wallet_id.0, Paged::Transaction)?;
            let records = newest_first(
                open,
                Paged::Transaction,
                wallet_id,
                (total, offset, per_page),
                "transaction",
            )?;
            Ok(StorePage { records, total })
        })
    }

    /// The transactions of several wallets merged newest first (the merchant transaction
    /// list): the wallets' summed counts, and the page's rows, each with its wallet's index in
    /// `wallets`. One wallet reads through the page directory (O(page) at any depth); several
    /// merge their ranges, reading O(offset + page) keys, never the whole history.
    pub fn merged_transactions_page(
        &self,
        wallets: &[WalletId],
        offset: u64,
        per_page: u64,
    ) -> Result<StorePage<(usize, Transaction)>, StoreError> {
        if let [wallet] = wallets {
            let page = self.transactions_page(*wallet, offset, per_page)?;
            return Ok(StorePage {
                records: page.records.into_iter().map(|record| (0, record)).collect(),
                total: page.total,
            });
        }
        self.with(|open| {
            let mut total = 0u64;
            for wallet in wallets {
                total = total.saturating_add(count_for_read(open, wallet.0, Paged::Transaction)?);
            }
            let records = newest_merged_raw(open, Paged::Transaction, wallets, offset, per_page)?
                .into_iter()
                .map(|(index, key, bytes)| Ok((index, decode("transaction", &key, &bytes)?)))
                .collect::<Result<_, StoreError>>()?;
            Ok(StorePage { records, total })
        })
    }

    /// A wallet's holds in every state, newest first.
    pub fn holds_page(
        &self,
        wallet_id: WalletId,
        offset: u64,
        per_page: u64,
    ) -> Result<StorePage<Hold>, StoreError> {
        self.with(|open| {
            let total = count_for_read(open, wallet_id.0, Paged::Hold)?;
            let records = newest_first(
                open,
                Paged::Hold,
                wallet_id,
                (total, offset, per_page),
                "hold",
            )?;
            Ok(StorePage { records, total })
        })
    }

    /// A wallet's ledger entries with the hash of the entry before each, newest first, optionally
    /// only those created within `from_ms..=to_ms`: entries posted at the shard's floor by a
    /// search of the wallet's own entries, older ones through the date index; never a scan of
    /// the whole ledger (`super::dated`).
    pub fn entries_page(
        &self,
        wallet_id: WalletId,
        offset: u64,
        per_page: u64,
        from_ms: Option<i64>,
        to_ms: Option<i64>,
    ) -> Result<StorePage<(Hash, LedgerEntry)>, StoreError> {
        self.with(|open| {
            let total = count_for_read(open, wallet_id.0, Paged::Entry)?;
            if from_ms.is_none() && to_ms.is_none() {
                let records = newest_first(
                    open,
                    Paged::Entry,
                    wallet_id,
                    (total, offset, per_page),
                    "entry",
                )?;
                return Ok(StorePage { records, total });
            }
            let w = wallet_id.0;
            let period = (from_ms.unwrap_or(i64::MIN), to_ms.unwrap_or(i64::MAX));
            let parts = dated::parts(open, w)?;
            // The part in time order: ordinals `lo..hi`, newest first.
            let (lo, hi) = match parts.ordered_from {
                Some(start) => {
                    let found = dated::period(open, w, start, total, period)?;
                    (found.lo, found.hi)
                }
                None => (total, total),
            };
            let ordered = hi - lo;
            let take = per_page.min(ordered.saturating_sub(offset));
            let skip = (total - hi).saturating_add(offset);
            let mut records: Vec<(Hash, LedgerEntry)> =
                newest_first(open, Paged::Entry, wallet_id, (total, skip, take), "entry")?;
            let mut page_total = ordered;
            // The part before the floor, through the date index.
            if parts.indexed {
                let times = (time_key(period.0), time_key(period.1));
                let skip = offset.saturating_sub(ordered);
                for (index, row) in wallet_entry_times(open, w, times).enumerate() {
                    let (key, _) = row?;
                    page_total += 1;
                    let index = index as u64;
                    if index >= skip && (records.len() as u64) < per_page {
                        records.push(dated::entry(open, w, entry_of_time_key(&key)?)?);
                    }
                }
            }
            Ok(StorePage {
                records,
                total: page_total,
            })
        })
    }

    /// For `replay --verify`: the ordinal of `wallet`'s first entry in time order (its count if
    /// none is), and how many of its entries the date index holds (`super::dated`).
    pub(crate) fn date_parts(&self, wallet_id: WalletId) -> Result<(u64, u64), StoreError> {
        self.with(|open| {
            let w = wallet_id.0;
            let parts = dated::parts(open, w)?;
            let total = count_for_read(open, w, Paged::Entry)?;
            let first = parts.ordered_from.map_or(total, |(ordinal, _)| ordinal);
            let mut indexed = 0u64;
            if parts.indexed {
                for row in wallet_entry_times(open, w, (0, u64::MAX)) {
                    row?;
                    indexed += 1;
                }
            }
            Ok((first, indexed))
        })
    }

    /// Visits, once each and in no particular order, every transaction of `wallet` with an entry
    /// on it created within `from_ms..=to_ms`: by the same search as a period's entries
    /// ([`HistoryStore::entries_page`]), so the cost is the period's entries, not the wallet's
    /// history. A transaction's entries carry its own `created_at_ms` (they are posted by the
    /// same command), so these are exactly the wallet's transactions created in the range that
    /// post to it.
    pub fn for_each_transaction_within(
        &self,
        wallet_id: WalletId,
        (from_ms, to_ms): (i64, i64),
        visit: &mut dyn FnMut(&Transaction),
    ) -> Result<(), StoreError> {
        self.with(|open| {
            let w = wallet_id.0;
            let mut seen = std::collections::HashSet::new();
            let mut visit_entry = |entry: &LedgerEntry| -> Result<(), StoreError> {
                let id = entry.transaction_id.0;
                if !seen.insert(id) {
                    return Ok(());
                }
                let transaction: Transaction =
                    get(&open.transactions, record_key(w, id), "transaction")?.ok_or(
                        StoreError::Missing {
                            what: "transaction",
                            key: format!("{w}/{id}"),
                        },
                    )?;
                visit(&transaction);
                Ok(())
            };
            let parts = dated::parts(open, w)?;
            if let Some(start) = parts.ordered_from {
                let total = count_for_read(open, w, Paged::Entry)?;
                let period = dated::period(open, w, start, total, (from_ms, to_ms))?;
                dated::visit_period(open, w, period, &mut |entry| visit_entry(&entry))?;
            }
            if parts.indexed {
                for row in wallet_entry_times(open, w, (time_key(from_ms), time_key(to_ms))) {
                    let (key, _) = row?;
                    let (_, entry) = dated::entry(open, w, entry_of_time_key(&key)?)?;
                    visit_entry(&entry)?;
                }
            }
            Ok(())
        })
    }

    /// The wallet and id of the transaction with this uuid.
    pub fn locate_transaction(
        &self,
        uuid: Uuid,
    ) -> Result<Option<(WalletId, TransactionId)>, StoreError> {
        self.with(|open| {
            open.tx_uuids
                .get(uuid.0)?
                .map(|bytes| {
                    let [wallet, id] = numbers::<2>("transaction uuid", &bytes)?;
                    Ok((WalletId(wallet), TransactionId(id)))
                })
                .transpose()
        })
    }

    /// The wallet and id of the hold with this uuid.
    pub fn locate_hold(&self, uuid: Uuid) -> Result<Option<(WalletId, HoldId)>, StoreError> {
        self.with(|open| {
            open.hold_uuids
                .get(uuid.0)?
                .map(|bytes| {
                    let [wallet, id] = numbers::<2>("hold uuid", &bytes)?;
                    Ok((WalletId(wallet), HoldId(id)))
                })
                .transpose()
        })
    }

    pub fn transaction(
        &self,
        wallet_id: WalletId,
        id: TransactionId,
    ) -> Result<Option<Transaction>, StoreError> {
        self.with(|open| {
            get(
                &open.transactions,
                record_key(wallet_id.0, id.0),
                "transaction",
            )
        })
    }

    pub fn entry(
        &self,
        wallet_id: WalletId,
        id: EntryId,
    ) -> Result<Option<(Hash, LedgerEntry)>, StoreError> {
        self.with(|open| get(&open.entries, record_key(wallet_id.0, id.0), "entry"))
    }

    pub fn hold(&self, wallet_id: WalletId, id: HoldId) -> Result<Option<Hold>, StoreError> {
        self.with(|open| get(&open.holds, record_key(wallet_id.0, id.0), "hold"))
    }

    /// Visits every entry of a wallet with the hash before it, oldest first (integrity checks,
    /// `replay --verify`). Returns how many there were.
    pub fn for_each_entry(
        &self,
        wallet_id: WalletId,
        visit: &mut dyn FnMut(&(Hash, LedgerEntry)),
    ) -> Result<u64, StoreError> {
        self.with(|open| oldest_first(open, Paged::Entry, wallet_id, "entry", visit))
    }

    /// Visits the entries of a wallet after `after` (every one for `None`), oldest first, until
    /// `visit` returns false; reads only that range.
    pub fn for_each_entry_after(
        &self,
        wallet_id: WalletId,
        after: Option<EntryId>,
        visit: &mut dyn FnMut(&(Hash, LedgerEntry)) -> bool,
    ) -> Result<(), StoreError> {
        self.with(|open| {
            let w = wallet_id.0;
            let from = after.map_or(0, |id| id.0.saturating_add(1));
            if after.is_some_and(|id| id.0 == u64::MAX) {
                return Ok(());
            }
            for row in wallet_records(open, Paged::Entry, w, (from, u64::MAX), false) {
                let (key, bytes) = row?;
                let record: (Hash, LedgerEntry) = decode("entry", &key, &bytes)?;
                if !visit(&record) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// Visits every transaction of a wallet, oldest first.
    pub fn for_each_transaction(
        &self,
        wallet_id: WalletId,
        visit: &mut dyn FnMut(&Transaction),
    ) -> Result<u64, StoreError> {
        self.with(|open| oldest_first(open, Paged::Transaction, wallet_id, "transaction", visit))
    }

    /// The payment with this uuid.
    pub fn payment(&self, uuid: Uuid) -> Result<Option<Payment>, StoreError> {
        self.with(|open| get(&open.payments, uuid.0, "payment"))
    }

    /// Visits every payment to merchant wallet `merchant`, oldest first, until `visit` returns
    /// false.
    pub fn for_each_payment(
        &self,
        merchant: WalletId,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> Result<(), StoreError> {
        let w = merchant.0;
        self.with(|open| {
            payments_by(
                open,
                open.merchant_payments.range(key2(w, 0)..=key2(w, u64::MAX)),
                visit,
            )
        })
    }

    /// Visits every payment that completed within `from_ms..=to_ms`, until `visit` returns
    /// false.
    pub fn for_each_completed_payment(
        &self,
        from_ms: i64,
        to_ms: i64,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> Result<(), StoreError> {
        let (low, high) = (key2(time_key(from_ms), 0), key2(time_key(to_ms), u64::MAX));
        self.with(|open| payments_by(open, open.payment_times.range(low..=high), visit))
    }

    /// The payout with this id.
    pub fn payout(&self, id: PayoutId) -> Result<Option<Payout>, StoreError> {
        self.with(|open| get(&open.payouts, id.0.to_be_bytes(), "payout"))
    }

    /// Every filed payout that `keep` accepts: of `wallet` only (through `wallet_payouts`), or
    /// of every wallet of every shard (the `payouts` keyspace, in id order).
    pub fn payouts_where(
        &self,
        wallet: Option<WalletId>,
        keep: &dyn Fn(&Payout) -> bool,
    ) -> Result<Vec<Payout>, StoreError> {
        self.with(|open| {
            let indexes = (&open.payouts, &open.wallet_payouts);
            records_where(indexes, "payout", wallet, keep)
        })
    }

    /// Visits every payout of wallet `wallet`, oldest first, until `visit` returns false.
    pub fn for_each_payout(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Payout) -> bool,
    ) -> Result<(), StoreError> {
        let w = wallet.0;
        self.with(|open| {
            for guard in open.wallet_payouts.range(key2(w, 0)..=key2(w, u64::MAX)) {
                let key = guard.key()?;
                let [_, id] = numbers::<2>("wallet payout", &key)?;
                let payout: Payout =
                    get(&open.payouts, id.to_be_bytes(), "payout")?.ok_or(StoreError::Missing {
                        what: "payout",
                        key: id.to_string(),
                    })?;
                if !visit(&payout) {
                    break;
                }
            }
            Ok(())
        })
    }

    /// The settlement with this id.
    pub fn settlement(&self, id: SettlementId) -> Result<Option<Settlement>, StoreError> {
        self.with(|open| get(&open.settlements, id.0.to_be_bytes(), "settlement"))
    }

    /// The payment link with this uuid.
    pub fn payment_link(&self, uuid: Uuid) -> Result<Option<PaymentLink>, StoreError> {
        self.with(|open| get(&open.links, uuid.0, "payment link"))
    }

    /// The QR payload with this uuid.
    pub fn qr(&self, uuid: Uuid) -> Result<Option<QrCode>, StoreError> {
        self.with(|open| get(&open.qrs, uuid.0, "qr"))
    }

    /// The executed settlement that claimed transaction `id` (a merchant's payment credit).
    pub fn settled_by(&self, id: TransactionId) -> Result<Option<SettlementId>, StoreError> {
        self.with(|open| match open.settled_items.get(id.0.to_be_bytes())? {
            Some(bytes) => {
                let [settlement] = numbers::<1>("settled item", &bytes)?;
                Ok(Some(SettlementId(settlement)))
            }
            None => Ok(None),
        })
    }

    /// `replay --verify`'s check of the settlements' claims, the one record that keeps a payment
    /// credit from being settled twice once its settlement left memory: every filed executed
    /// settlement's items are claimed by it in `settled_items`, and every claim there belongs to
    /// an executed settlement that holds that item. `Ok(Err(_))` names the first difference;
    /// `Ok(Ok(n))` the claims checked.
    pub fn verify_settled_items(&self) -> Result<Result<u64, String>, StoreError> {
        self.with(|open| {
            let mut claimed = std::collections::HashMap::new();
            for guard in open.settlements.iter() {
                let (key, bytes) = guard.into_inner()?;
                let settlement: Settlement = decode("settlement", &key, &bytes)?;
                if settlement.status != SettlementStatus::Executed {
                    continue;
                }
                for item in &settlement.items {
                    if claimed
                        .insert(item.transaction_id.0, settlement.id.0)
                        .is_some()
                    {
                        return Ok(Err(format!(
                            "transaction {} is in two executed settlements",
                            item.transaction_id.0
                        )));
                    }
                }
            }
            let mut checked = 0u64;
            for guard in open.settled_items.iter() {
                let (key, bytes) = guard.into_inner()?;
                let [transaction] = numbers::<1>("settled item", &key)?;
                let [settlement] = numbers::<1>("settled item", &bytes)?;
                if claimed.remove(&transaction) != Some(settlement) {
                    return Ok(Err(format!(
                        "settled_items gives transaction {transaction} to settlement \
                         {settlement}, which did not execute with it"
                    )));
                }
                checked += 1;
            }
            if let Some((transaction, settlement)) = claimed.into_iter().next() {
                return Ok(Err(format!(
                    "executed settlement {settlement} has no claim on transaction {transaction}"
                )));
            }
            Ok(Ok(checked))
        })
    }

    /// Every filed settlement that `keep` accepts, as [`HistoryStore::payouts_where`] (through
    /// `wallet_settlements`, or the whole `settlements` keyspace).
    pub fn settlements_where(
        &self,
        wallet: Option<WalletId>,
        keep: &dyn Fn(&Settlement) -> bool,
    ) -> Result<Vec<Settlement>, StoreError> {
        self.with(|open| {
            let indexes = (&open.settlements, &open.wallet_settlements);
            records_where(indexes, "settlement", wallet, keep)
        })
    }

    /// Forgets every filed payment and payout and the `commerce_complete` mark, as a store
    /// written before they were filed (tests).
    #[cfg(test)]
    pub(crate) fn forget_commerce(&self) -> Result<(), StoreError> {
        self.with(|open| {
            forget(
                open,
                &[
                    &open.payments,
                    &open.merchant_payments,
                    &open.payment_times,
                    &open.payouts,
                    &open.wallet_payouts,
                ],
                COMMERCE_COMPLETE,
            )
        })
    }

    /// Removes the claim on transaction `id` from `settled_items`, as a damaged store (tests).
    #[cfg(test)]
    pub(crate) fn forget_claim(&self, id: TransactionId) -> Result<(), StoreError> {
        self.with(|open| Ok(open.settled_items.remove(id.0.to_be_bytes())?))
    }

    /// How many entries the uuid indexes hold: (`tx_uuids`, `hold_uuids`) (tests).
    #[cfg(test)]
    pub(crate) fn uuid_index_len(&self) -> Result<(usize, usize), StoreError> {
        self.with(|open| {
            let count = |keyspace: &fjall::Keyspace| -> Result<usize, StoreError> {
                let mut count = 0;
                for guard in keyspace.iter() {
                    guard.key()?;
                    count += 1;
                }
                Ok(count)
            };
            Ok((count(&open.tx_uuids)?, count(&open.hold_uuids)?))
        })
    }

    /// Forgets every filed payment link and QR payload and the `links_complete` mark, as a store
    /// written before they were filed (tests).
    #[cfg(test)]
    pub(crate) fn forget_links(&self) -> Result<(), StoreError> {
        self.with(|open| forget(open, &[&open.links, &open.qrs], LINKS_COMPLETE))
    }

    /// Forgets every filed settlement, their claims and the `settlements_complete` mark, as a
    /// store written before they were filed (tests).
    #[cfg(test)]
    pub(crate) fn forget_settlements(&self) -> Result<(), StoreError> {
        self.with(|open| {
            forget(
                open,
                &[
                    &open.settlements,
                    &open.wallet_settlements,
                    &open.settled_items,
                ],
                SETTLEMENTS_COMPLETE,
            )
        })
    }

    /// Whether every payment, payout, settlement, payment link and QR payload of the log is
    /// filed: a store written before they were lacks them until recovery files the shards'
    /// ([`HistoryStore::file_commerce`]).
    pub fn commerce_complete(&self) -> Result<bool, StoreError> {
        self.with(|open| {
            for mark in COMMERCE_MARKS {
                if open.meta.get(mark)?.is_none() {
                    return Ok(false);
                }
            }
            Ok(true)
        })
    }

    /// Files the shards' commerce records as they are (their latest versions) and marks the
    /// store complete, in one write batch. Not durable by itself. A store that already held
    /// some kinds gets the same records again, unchanged: memory holds the latest version of
    /// each one it has.
    pub(crate) fn file_commerce<'a>(
        &self,
        shards: impl Iterator<Item = &'a Commerce>,
    ) -> Result<(), StoreError> {
        self.with(|open| {
            let mut writes = Writes::new(&open.db);
            for commerce in shards {
                let mut all = Vec::new();
                for payment in commerce.payments.values() {
                    all.extend(payment_writes(open, payment, true)?);
                }
                for payout in commerce.payouts.values() {
                    all.extend(payout_writes(open, payout, true)?);
                }
                for settlement in commerce.settlements.values() {
                    all.extend(settlement_writes(open, settlement, true)?);
                }
                for link in commerce.links.values() {
                    all.extend(link_writes(open, link, true)?);
                }
                for qr in commerce.qrs.values() {
                    all.push((&open.qrs, qr.uuid.0.to_vec(), encode(qr)?));
                }
                for (keyspace, key, value) in all {
                    writes.insert(keyspace, key, value);
                }
            }
            for mark in COMMERCE_MARKS {
                writes.insert(&open.meta, mark, Vec::new());
            }
            writes.commit()?;
            Ok(())
        })
    }

    /// Visits every hold of a wallet, oldest first.
    pub fn for_each_hold(
        &self,
        wallet_id: WalletId,
        visit: &mut dyn FnMut(&Hold),
    ) -> Result<u64, StoreError> {
        self.with(|open| oldest_first(open, Paged::Hold, wallet_id, "hold", visit))
    }
}

/// Empties `keyspaces` and removes `mark` from `meta`, in one batch (tests: a store of an older
/// release).
#[cfg(test)]
fn forget(open: &Open, keyspaces: &[&fjall::Keyspace], mark: &[u8]) -> Result<(), StoreError> {
    let mut writes = Writes::new(&open.db);
    for keyspace in keyspaces {
        for item in keyspace.iter() {
            writes.remove(keyspace, item.key()?.to_vec());
        }
    }
    writes.remove(&open.meta, mark);
    writes.commit()?;
    Ok(())
}

/// Seals every memtable of `keyspaces` that holds anything and waits until fjall's worker has
/// written them all to disk; more than [`FLUSH_WAIT_MAX`] is an error naming `when`.
pub(crate) fn flush_and_wait(keyspaces: &[&fjall::Keyspace], when: &str) -> Result<(), StoreError> {
    use fjall::AbstractTree;
    for keyspace in keyspaces {
        if keyspace.tree.active_memtable().size() > 0 {
            keyspace.rotate_memtable()?;
        }
    }
    let started = std::time::Instant::now();
    while keyspaces
        .iter()
        .any(|keyspace| keyspace.tree.sealed_memtable_count() > 0)
    {
        if started.elapsed() > FLUSH_WAIT_MAX {
            return Err(StoreError::Rule(format!(
                "the store flushed no memtable for {} s {when}",
                FLUSH_WAIT_MAX.as_secs()
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(())
}

/// [`HistoryStore::rotate_full_memtables`] on an open store (also the layout upgrade's copy,
/// which writes before the indexer runs).
pub(crate) fn rotate_full(open: &Open) -> Result<std::time::Duration, StoreError> {
    use fjall::AbstractTree;
    let started = std::time::Instant::now();
    // A journal file is freed once every memtable it holds writes of is flushed, so a
    // small keyspace written a little per batch (meta, a generation taking stragglers) would pin them all: past
    // [`JOURNAL_MAX_BYTES`] every memtable with anything in it is sealed.
    let journal_full = open.db.journal_disk_space()? > JOURNAL_MAX_BYTES;
    for (keyspace, limit) in open.keyspaces() {
        let size = keyspace.tree.active_memtable().size();
        if size >= limit || (journal_full && size > 0) {
            keyspace.rotate_memtable()?;
        }
    }
    while open.db.write_buffer_size() > WRITE_BUFFER_MAX_BYTES {
        if started.elapsed() > FLUSH_WAIT_MAX {
            return Err(StoreError::Rule(format!(
                "the store flushed no memtable for {} s ({} MiB waiting)",
                FLUSH_WAIT_MAX.as_secs(),
                open.db.write_buffer_size() >> 20
            )));
        }
        std::thread::sleep(std::time::Duration::from_millis(2));
    }
    Ok(started.elapsed())
}

fn oldest_first<T: DeserializeOwned>(
    open: &Open,
    kind: Paged,
    wallet_id: WalletId,
    what: &'static str,
    visit: &mut dyn FnMut(&T),
) -> Result<u64, StoreError> {
    let mut count = 0;
    for row in wallet_records(open, kind, wallet_id.0, (0, u64::MAX), false) {
        let (key, bytes) = row?;
        let record: T = decode(what, &key, &bytes)?;
        visit(&record);
        count += 1;
    }
    Ok(count)
}

/// Visits the payments an index range names (values: payment uuids), in key order.
fn payments_by(
    open: &Open,
    range: impl Iterator<Item = fjall::Guard>,
    visit: &mut dyn FnMut(&Payment) -> bool,
) -> Result<(), StoreError> {
    for guard in range {
        let (key, uuid) = guard.into_inner()?;
        let payment: Payment =
            get(&open.payments, &uuid, "payment")?.ok_or_else(|| StoreError::Missing {
                what: "payment",
                key: hex::encode(&key),
            })?;
        if !visit(&payment) {
            break;
        }
    }
    Ok(())
}

/// Every record of `records` (keyed by its id) that `keep` accepts: of `wallet` only, through
/// `by_wallet` (keyed `wallet | id`), in id order; or every one, in id order.
fn records_where<T: DeserializeOwned>(
    (records, by_wallet): (&fjall::Keyspace, &fjall::Keyspace),
    what: &'static str,
    wallet: Option<WalletId>,
    keep: &dyn Fn(&T) -> bool,
) -> Result<Vec<T>, StoreError> {
    let mut kept = Vec::new();
    let mut visit = |key: &[u8], bytes: &[u8]| -> Result<(), StoreError> {
        let record: T = decode(what, key, bytes)?;
        if keep(&record) {
            kept.push(record);
        }
        Ok(())
    };
    match wallet {
        Some(wallet) => {
            let w = wallet.0;
            for guard in by_wallet.range(key2(w, 0)..=key2(w, u64::MAX)) {
                let key = guard.key()?;
                let [_, id] = numbers::<2>(what, &key)?;
                let at = id.to_be_bytes();
                let bytes = records.get(at)?.ok_or(StoreError::Missing {
                    what,
                    key: id.to_string(),
                })?;
                visit(&at, &bytes)?;
            }
        }
        None => {
            for guard in records.iter() {
                let (key, bytes) = guard.into_inner()?;
                visit(&key, &bytes)?;
            }
        }
    }
    Ok(kept)
}

/// One insert of a write batch: keyspace, key, value.
pub(crate) type Write<'a> = (&'a fjall::Keyspace, Vec<u8>, Vec<u8>);

/// What filing `payment` writes: the record, its merchant index and (once completed) its date
/// index; `new` adds the merchant index (written once, when the payment is initiated).
pub(crate) fn payment_writes<'a>(
    open: &'a Open,
    payment: &Payment,
    new: bool,
) -> Result<Vec<Write<'a>>, StoreError> {
    let uuid = payment.uuid.0.to_vec();
    let mut writes = vec![(&open.payments, uuid.clone(), encode(payment)?)];
    if new {
        let key = key2(payment.merchant_wallet_id.0, payment.id.0);
        writes.push((&open.merchant_payments, key.to_vec(), uuid.clone()));
    }
    if let Some(at) = payment
        .completed_at_ms
        .filter(|_| payment.status.is_completed())
    {
        let key = key2(time_key(at), payment.id.0);
        writes.push((&open.payment_times, key.to_vec(), uuid));
    }
    Ok(writes)
}

/// What filing `payout` writes: the record and (`new`) its wallet index.
pub(crate) fn payout_writes<'a>(
    open: &'a Open,
    payout: &Payout,
    new: bool,
) -> Result<Vec<Write<'a>>, StoreError> {
    let mut writes = vec![(
        &open.payouts,
        payout.id.0.to_be_bytes().to_vec(),
        encode(payout)?,
    )];
    if new {
        let key = key2(payout.wallet_id.0, payout.id.0);
        writes.push((&open.wallet_payouts, key.to_vec(), Vec::new()));
    }
    Ok(writes)
}

/// What filing payment link `link` writes: the record (it has no index; `new` is for the
/// signature the filing of changes shares).
pub(crate) fn link_writes<'a>(
    open: &'a Open,
    link: &PaymentLink,
    _new: bool,
) -> Result<Vec<Write<'a>>, StoreError> {
    Ok(vec![(&open.links, link.uuid.0.to_vec(), encode(link)?)])
}

/// What filing `settlement` writes: the record, (`new`) its wallet index and, once it is
/// executed, its claim on each item (a rejected or cancelled one claims nothing; a pending or
/// approved one's claims are hot, in its shard's memory).
pub(crate) fn settlement_writes<'a>(
    open: &'a Open,
    settlement: &Settlement,
    new: bool,
) -> Result<Vec<Write<'a>>, StoreError> {
    let id = settlement.id.0.to_be_bytes();
    let mut writes = vec![(&open.settlements, id.to_vec(), encode(settlement)?)];
    if new {
        let key = key2(settlement.wallet_id.0, settlement.id.0);
        writes.push((&open.wallet_settlements, key.to_vec(), Vec::new()));
    }
    if settlement.status == SettlementStatus::Executed {
        for item in &settlement.items {
            let key = item.transaction_id.0.to_be_bytes().to_vec();
            writes.push((&open.settled_items, key, id.to_vec()));
        }
    }
    Ok(writes)
}

pub(crate) fn get<T: DeserializeOwned>(
    keyspace: &fjall::Keyspace,
    key: impl AsRef<[u8]>,
    what: &'static str,
) -> Result<Option<T>, StoreError> {
    let key = key.as_ref();
    keyspace
        .get(key)?
        .map(|bytes| decode(what, key, &bytes))
        .transpose()
}

/// How many records of each kind `wallet` has, from the page directory ([`count_of`]).
pub(crate) fn counts_in(open: &Open, wallet: u64) -> Result<WalletCounts, StoreError> {
    Ok(WalletCounts {
        transactions: count_of(open, wallet, Paged::Transaction)?,
        entries: count_of(open, wallet, Paged::Entry)?,
        holds: count_of(open, wallet, Paged::Hold)?,
    })
}

/// A page of `wallet_id`'s records of `kind`, newest first; `(total, skip, take)` as in
/// [`super::pages::newest_first_raw`].
fn newest_first<T: DeserializeOwned>(
    open: &Open,
    kind: Paged,
    wallet_id: WalletId,
    (total, skip, take): (u64, u64, u64),
    what: &'static str,
) -> Result<Vec<T>, StoreError> {
    newest_first_raw(open, kind, wallet_id, total, skip, take)?
        .into_iter()
        .map(|(key, bytes)| decode(what, &key, &bytes))
        .collect()
}

/// The uuids a payout's or payment's view shows, from the store (for views rendered off the
/// shards' threads, after the indexer covers what the caller could have seen). A record the
/// store cannot read shows no uuid, as the shards' own lookup does for a record it lacks.
impl crate::commerce::view::RecordUuids for HistoryStore {
    fn transaction_uuid(&self, wallet_id: WalletId, id: TransactionId) -> Option<Uuid> {
        self.transaction(wallet_id, id)
            .ok()
            .flatten()
            .map(|transaction| transaction.uuid)
    }

    fn hold_uuid(&self, wallet_id: WalletId, id: HoldId) -> Option<Uuid> {
        self.hold(wallet_id, id)
            .ok()
            .flatten()
            .map(|hold| hold.uuid)
    }
}

/// The store as the shards' source of records that left memory (`shard::cold`).
impl crate::shard::cold::ColdHistory for HistoryStore {
    fn transaction(&self, wallet: WalletId, id: TransactionId) -> ColdResult<Option<Transaction>> {
        self.recall("transaction", || {
            HistoryStore::transaction(self, wallet, id)
        })
    }

    fn entry(&self, wallet: WalletId, id: EntryId) -> ColdResult<Option<LedgerEntry>> {
        self.recall("entry", || {
            HistoryStore::entry(self, wallet, id).map(|found| found.map(|(_, entry)| entry))
        })
    }

    fn hold(&self, wallet: WalletId, id: HoldId) -> ColdResult<Option<Hold>> {
        self.recall("hold", || HistoryStore::hold(self, wallet, id))
    }

    fn locate_transaction(&self, uuid: Uuid) -> ColdResult<Option<(WalletId, TransactionId)>> {
        self.recall("locate_transaction", || {
            HistoryStore::locate_transaction(self, uuid)
        })
    }

    fn locate_hold(&self, uuid: Uuid) -> ColdResult<Option<(WalletId, HoldId)>> {
        self.recall("locate_hold", || HistoryStore::locate_hold(self, uuid))
    }

    fn for_each_transaction(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Transaction) -> bool,
    ) -> ColdResult<()> {
        self.recall("for_each_transaction", || {
            let mut going = true;
            HistoryStore::for_each_transaction(self, wallet, &mut |transaction| {
                if going {
                    going = visit(transaction);
                }
            })
            .map(drop)
        })
    }

    fn for_each_transaction_within(
        &self,
        wallet: WalletId,
        range_ms: (i64, i64),
        visit: &mut dyn FnMut(&Transaction),
    ) -> ColdResult<()> {
        self.recall("for_each_transaction_within", || {
            HistoryStore::for_each_transaction_within(self, wallet, range_ms, visit)
        })
    }

    fn payment(&self, uuid: Uuid) -> ColdResult<Option<Payment>> {
        self.recall("payment", || HistoryStore::payment(self, uuid))
    }

    fn for_each_payment(
        &self,
        merchant: WalletId,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> ColdResult<()> {
        self.recall("for_each_payment", || {
            HistoryStore::for_each_payment(self, merchant, visit)
        })
    }

    fn for_each_completed_payment(
        &self,
        from_ms: i64,
        to_ms: i64,
        visit: &mut dyn FnMut(&Payment) -> bool,
    ) -> ColdResult<()> {
        self.recall("for_each_completed_payment", || {
            HistoryStore::for_each_completed_payment(self, from_ms, to_ms, visit)
        })
    }

    fn payout(&self, id: PayoutId) -> ColdResult<Option<Payout>> {
        self.recall("payout", || HistoryStore::payout(self, id))
    }

    fn for_each_payout(
        &self,
        wallet: WalletId,
        visit: &mut dyn FnMut(&Payout) -> bool,
    ) -> ColdResult<()> {
        self.recall("for_each_payout", || {
            HistoryStore::for_each_payout(self, wallet, visit)
        })
    }

    fn for_each_entry_after(
        &self,
        wallet: WalletId,
        after: Option<EntryId>,
        visit: &mut dyn FnMut(&Hash, &LedgerEntry) -> bool,
    ) -> ColdResult<()> {
        self.recall("for_each_entry_after", || {
            HistoryStore::for_each_entry_after(self, wallet, after, &mut |(before, entry)| {
                visit(before, entry)
            })
        })
    }

    fn moved(
        &self,
        key: crate::shard::moves::MoveKey,
    ) -> ColdResult<Option<crate::shard::moves::MoveRecord>> {
        self.recall("moved", || HistoryStore::moved(self, key))
    }

    fn open_charge(&self, payment_uuid: Uuid) -> ColdResult<Option<Uuid>> {
        self.recall("open_charge", || {
            HistoryStore::open_charge(self, payment_uuid)
        })
    }

    fn settlement(&self, id: SettlementId) -> ColdResult<Option<Settlement>> {
        self.recall("settlement", || HistoryStore::settlement(self, id))
    }

    fn settled_by(&self, transaction: TransactionId) -> ColdResult<Option<SettlementId>> {
        self.recall("settled_by", || HistoryStore::settled_by(self, transaction))
    }

    fn payment_link(&self, uuid: Uuid) -> ColdResult<Option<PaymentLink>> {
        self.recall("payment_link", || HistoryStore::payment_link(self, uuid))
    }

    fn qr(&self, uuid: Uuid) -> ColdResult<Option<QrCode>> {
        self.recall("qr", || HistoryStore::qr(self, uuid))
    }
}

/// A second compaction thread beside fjall's one worker (which cannot be two: see
/// [`HistoryStore::open`]). By minute 8 of a soak that worker spent a whole core compacting
/// while the process used 1.48 of 2, and flushes waited behind it; this thread takes
/// compactions of the largest append-mostly keyspaces in parallel (lsm-tree picks and hides a
/// compaction's tables under one lock, so the two never take the same ones). Holds the store
/// only during a step, so dropping the store's last other handle closes it; returns once the
/// store is closed or dropped.
///
/// Fail-stop, as fjall poisons its database when its own worker's compaction fails: an error
/// or a panic is recorded in `failure` (the engine's first failure, which stops the process)
/// and the thread ends, rather than retrying a merge over damaged tables or a full disk.
pub fn run_compactor(
    store: std::sync::Weak<HistoryStore>,
    failure: std::sync::Arc<std::sync::OnceLock<String>>,
) {
    compact_until_stopped(&store, &failure, |held, which| held.compact_step(which));
}

/// [`run_compactor`]'s loop, with the step it takes (a test's, to fail on purpose).
fn compact_until_stopped(
    store: &std::sync::Weak<HistoryStore>,
    failure: &std::sync::OnceLock<String>,
    mut step: impl FnMut(&HistoryStore, usize) -> Result<bool, StoreError>,
) {
    let mut idle = 0;
    for which in (0..HistoryStore::COMPACTED).cycle() {
        let Some(held) = store.upgrade() else {
            return;
        };
        let stepped = std::panic::catch_unwind(std::panic::AssertUnwindSafe(|| step(&held, which)));
        drop(held);
        let reason = match stepped {
            Ok(Ok(true)) => {
                idle = 0;
                continue;
            }
            Ok(Ok(false)) => {
                idle += 1;
                if idle >= HistoryStore::COMPACTED {
                    idle = 0;
                    std::thread::sleep(std::time::Duration::from_millis(50));
                }
                continue;
            }
            Ok(Err(StoreError::Closed)) => return,
            Ok(Err(error)) => error.to_string(),
            Err(_) => "the history compactor panicked".to_string(),
        };
        tracing::error!(reason = %reason, "the history store's compactor stopped; the process must restart");
        let _ = failure.set(format!("history compactor: {reason}"));
        return;
    }
}

#[cfg(test)]
mod compactor_tests {
    #![allow(clippy::unwrap_used)]

    use fjall::AbstractTree;

    use super::{record_key, HistoryStore};

    /// Writes `tables` flushed tables of 100 keys each into `entries` (numbered from `first`),
    /// waiting for each flush; every table spans the same 100 wallets of one epoch, so each
    /// overlaps the others.
    fn flushed_tables(store: &HistoryStore, tables: u64, first: u64) {
        for table in first..first + tables {
            store
                .with(|open| {
                    for n in 0..100u64 {
                        open.entries
                            .insert(record_key(n, table * 100 + n), [7u8; 40])?;
                    }
                    open.entries.rotate_memtable()?;
                    Ok(())
                })
                .unwrap();
            while store
                .with(|open| Ok(open.entries.tree.sealed_memtable_count()))
                .unwrap()
                > 0
            {
                std::thread::yield_now();
            }
        }
    }

    /// Compactor rounds racing fjall's own worker over many overlapping flushed tables (as in
    /// production for the newest epoch, and for the random-keyed keyspaces) lose and duplicate
    /// nothing, and a closed or dropped store ends the
    /// compactor's loop.
    /// How much work the second compactor takes over is measured by the soak (BENCHMARKS.md),
    /// not here: which of the two picks a compaction is a race.
    #[test]
    fn compactor_rounds_beside_the_worker_keep_every_key() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        for round in 0..4u64 {
            flushed_tables(&store, 9, round * 9);
            for which in 0..HistoryStore::COMPACTED {
                while store.compact_step(which).unwrap() {}
            }
        }
        store
            .with(|open| {
                for table in 0..36u64 {
                    for n in 0..100u64 {
                        assert!(open.entries.get(record_key(n, table * 100 + n))?.is_some());
                    }
                }
                assert_eq!(open.entries.len()?, 3_600);
                Ok(())
            })
            .unwrap();
        // Closed: the loop ends at its next round; dropped: likewise.
        let failure = std::sync::Arc::new(std::sync::OnceLock::new());
        store.close();
        super::run_compactor(std::sync::Arc::downgrade(&store), failure.clone());
        let dropped = std::sync::Arc::downgrade(&store);
        drop(store);
        super::run_compactor(dropped, failure.clone());
        assert!(failure.get().is_none(), "closing is not a failure");
    }

    /// Fail-stop: a compaction step that fails, or panics, is recorded as the engine's failure
    /// (which stops the process) and ends the thread at once, without another step: no retried
    /// merge over damaged tables or a full disk. A step that finds nothing to do is not one.
    #[test]
    fn a_failed_or_panicking_compaction_stops_the_compactor_and_records_why() {
        let dir = tempfile::tempdir().unwrap();
        let store = std::sync::Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let weak = std::sync::Arc::downgrade(&store);

        let failure = std::sync::OnceLock::new();
        let mut steps = 0;
        super::compact_until_stopped(&weak, &failure, |_, _| {
            steps += 1;
            match steps {
                1 => Ok(true),
                2 => Ok(false),
                _ => Err(super::StoreError::Rule("no space left on device".into())),
            }
        });
        assert_eq!(steps, 3, "it stopped at the failing step");
        assert_eq!(
            failure.get().map(String::as_str),
            Some("history compactor: history store: no space left on device")
        );

        let failure = std::sync::OnceLock::new();
        let mut steps = 0;
        super::compact_until_stopped(&weak, &failure, |_, _| {
            steps += 1;
            panic!("a damaged table");
        });
        assert_eq!(steps, 1);
        assert_eq!(
            failure.get().map(String::as_str),
            Some("history compactor: the history compactor panicked")
        );
        drop(store);
    }

    /// No table keeps its block index or bloom filter in memory, neither when it is flushed
    /// nor when a merge writes it for L1: so tables that later move down without a rewrite
    /// (most of the epoch-first keyspaces') carry none with them. With fjall's default
    /// (indexes of L0 and L1, filters of L0) the pinned indexes grew with every table written
    /// (BENCHMARKS.md).
    #[test]
    fn no_table_keeps_its_index_or_filter_in_memory() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let pinned = |store: &HistoryStore| {
            let memory = store.memory().unwrap();
            memory.pinned_indexes + memory.pinned_filters
        };
        flushed_tables(&store, 1, 0);
        assert_eq!(pinned(&store), 0, "a flushed table");
        flushed_tables(&store, 8, 1);
        for which in 0..HistoryStore::COMPACTED {
            while store.compact_step(which).unwrap() {}
        }
        assert_eq!(pinned(&store), 0, "after compaction");
        assert!(store.memory().unwrap().tables > 0);
        // Reads still find every key, through the block cache.
        store
            .with(|open| {
                for table in 0..9u64 {
                    for n in 0..100u64 {
                        assert!(open.entries.get(record_key(n, table * 100 + n))?.is_some());
                    }
                }
                Ok(())
            })
            .unwrap();
        assert!(store.memory().unwrap().block_cache > 0);
    }
}
