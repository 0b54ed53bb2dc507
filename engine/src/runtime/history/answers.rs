//! Idempotency answers in the history store: the rendered answer to every keyed request, kept for
//! the retention window and then purged (issue 14, item 7).
//!
//! ```text
//! answers_by_digest  digest(caller, key)   -> (caller length | caller | key, StoredAnswer)
//! answers_by_lsn     lsn | digest[..12]    -> 1 | (lsn, decided at, digest) ...
//!                    the purge's index, in log order: a write batch's answers, keyed by its first
//! meta               "answers_since"       -> u64   first LSN whose answer is filed
//! ```
//!
//! The indexer files an answer with the rest of its WAL record, in the same write batch, so the
//! store holds an answer exactly when it covers the record's LSN. Then the in-memory table drops
//! it ([`crate::runtime::idempotency::IdempotencyTable::forget_filed`]).
//!
//! **Why these keys.** A client's keys are random, so every table flushed into the answers'
//! keyspace overlaps all of the level below it, and its compactions rewrite that level: under a
//! long keyed load the answers were the keyspace whose compaction grew fastest per request
//! (BENCHMARKS.md, "Atomic batches across shards: the same soak"). The key is therefore as short
//! as it can be, 16 bytes of SHA-256 over the caller and the key (the value carries both, and a
//! lookup whose name differs finds nothing; two names with one digest would share its slot),
//! instead of the ~45-byte name whose common prefix every comparison walked. The purge's index is keyed by the LSN that logged the answer, which
//! the indexer files in order: each flushed table of it follows the one before and reaches the
//! lower levels by a move, never rewritten. (It was keyed by the decision time, taken before the
//! command queued, so neighbouring tables overlapped by a few milliseconds and every one was
//! merged.) A write batch's answers share one index key, a group of up to [`GROUP_MAX`] (one
//! store item per batch instead of one per answer: the store's cost is per item). The purge
//! walks the index from where it stopped and stops at the first answer still inside the window,
//! writing back what is left of a group it stopped in: an answer decided a little out of log
//! order is purged a little late, never early. Layout 4 wrote one key per answer (`lsn |
//! digest[..12]` -> `decided at | digest[12..]`, 12 bytes, which no group is); the purge reads
//! both.
//! An answer decided while the wall clock was ahead by D holds every purge back for D (the
//! store grows meanwhile; the indexer warns when the purge waits on an answer from the future).
//!
//! **Older stores.** A store written with the first layout (`answers`: caller length | caller |
//! key -> `StoredAnswer`; `answer_times`: decided at | that name -> ()) keeps those keyspaces
//! until its answers expire: a lookup that finds nothing in the new one asks the old one, and the
//! purge drains the old index first. Once nothing is left after its resume point the lookups
//! stop asking, `meta` marks the layout drained, and the next open deletes both keyspaces.
//! Stores with these keyspaces carry key layout 3 (`super::epochs`): a walletd from before them
//! refuses the store instead of opening empty first-layout keyspaces beside it and running
//! retries again.
//!
//! A store written before answers were filed has no `answers_since`: it is taken to be the LSN
//! after what the store covered, and recovery files the answers of the records it replays below
//! it (and those an older snapshot carried) before the engine serves; then it is 0. Those land in
//! the purge's index at their own (older) LSN, or 0 for a snapshot's (in groups, in the
//! snapshot's order): one still inside the window holds the purge back until it expires (with
//! the rest of its group), and one behind the resume point of an earlier purge stays on disk
//! for good (lookups still judge it by its time).

use std::ops::Bound;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use super::store::{decode, encode, numbers, time_key, HistoryStore, Open, StoreError};
use crate::runtime::journal::IdempotencyRecord;

pub(crate) const ANSWERS_SINCE: &[u8] = b"answers_since";
/// The last `answers_by_lsn` key the purge removed: where the next purge starts.
const PURGED_TO: &[u8] = b"answers_by_lsn_purged_to";
/// The last key of the first layout's `answer_times` the purge removed.
const LEGACY_PURGED_TO: &[u8] = b"answers_purged_to";
/// The keyspaces of the first layout (module docs), opened only where they exist.
pub(crate) const LEGACY_KEYSPACES: [&str; 2] = ["answers", "answer_times"];
/// In `meta`: the first layout's index has nothing after the purge's resume point (what is
/// left behind it expired long ago), so the next open deletes its keyspaces.
const LEGACY_DRAINED: &[u8] = b"answers_legacy_drained";

/// One filed answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAnswer {
    /// Digest of what was asked.
    pub fingerprint: [u8; 32],
    /// When it was decided (unix ms): the retention window runs from here.
    pub at_ms: i64,
    /// The WAL record that logged it (0: carried by an older snapshot).
    pub lsn: u64,
    /// The rendered answer, replayed verbatim (a byte string: [`crate::values::bytes`]).
    #[serde(with = "crate::values::bytes::owned")]
    pub response: Vec<u8>,
}

/// What `answers_by_digest` holds: the answer with the name it was filed under.
#[derive(Serialize, Deserialize)]
struct Named {
    #[serde(with = "crate::values::bytes::owned")]
    name: Vec<u8>,
    answer: StoredAnswer,
}

/// `caller length | caller | key`: a caller cannot run into the key that follows it.
pub(crate) fn answer_key(caller: &str, key: &str) -> Vec<u8> {
    // Callers are the API's names (`customer:7`); one longer than 64 KiB is cut, never wrapped.
    let caller = caller.as_bytes();
    let caller = caller.get(..usize::from(u16::MAX)).unwrap_or(caller);
    let caller_len = u16::try_from(caller.len()).unwrap_or(u16::MAX);
    let mut out = Vec::with_capacity(2 + caller.len() + key.len());
    out.extend_from_slice(&caller_len.to_be_bytes());
    out.extend_from_slice(caller);
    out.extend_from_slice(key.as_bytes());
    out
}

/// The key of a name in `answers_by_digest`: the first 16 bytes of SHA-256 over a domain tag
/// and the name. A lookup compares the stored name, so it never answers another caller's
/// request; two names with one digest (2^-128 for a pair, 2^64 names before one is even likely)
/// would share the slot, the later answer replacing the earlier.
fn digest(name: &[u8]) -> [u8; 16] {
    let hash = Sha256::new()
        .chain_update(b"walletd-answer-v1")
        .chain_update(name)
        .finalize();
    let mut out = [0u8; 16];
    for (byte, hashed) in out.iter_mut().zip(hash) {
        *byte = hashed;
    }
    out
}

/// Bytes of the digest in the purge's index key. 20 bytes of key are kept inline by the
/// store's memtables and tables (`byteview`), where a longer key is a heap allocation whose
/// every comparison is a pointer chase.
const LSN_KEY_DIGEST: usize = 12;

/// Most answers in one group of the purge's index (32 bytes each): a write batch with more
/// writes several groups (only recovery's upgrade path, filing under a key the index holds,
/// makes a larger one: [`PurgeGroups::write`]).
pub(crate) const GROUP_MAX: usize = 256;

/// The first byte of a group's value. A layout-4 entry is 12 bytes, a group `1 + 32 n`.
const GROUP_FORMAT: u8 = 1;

/// Bytes of one answer in a group: LSN, decision time, digest.
const GROUP_ITEM: usize = 32;

/// One answer in the purge's index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct PurgeEntry {
    lsn: u64,
    at_ms: i64,
    digest: [u8; 16],
}

/// The index key of a group whose first answer is `first`: `lsn | digest[..12]`, in log order.
fn group_key(first: &PurgeEntry) -> [u8; 20] {
    let mut key = [0u8; 20];
    key[..8].copy_from_slice(&first.lsn.to_be_bytes());
    key[8..].copy_from_slice(&first.digest[..LSN_KEY_DIGEST]);
    key
}

fn group_value(entries: &[PurgeEntry]) -> Vec<u8> {
    let mut value = Vec::with_capacity(1 + GROUP_ITEM * entries.len());
    value.push(GROUP_FORMAT);
    for entry in entries {
        value.extend_from_slice(&entry.lsn.to_be_bytes());
        value.extend_from_slice(&entry.at_ms.to_be_bytes());
        value.extend_from_slice(&entry.digest);
    }
    value
}

/// The answers of one index entry, in log order: a group, or a layout-4 entry of one answer
/// (`lsn | digest[..12]` -> `decided at | digest[12..]`).
fn index_entries(key: &[u8], value: &[u8]) -> Result<Vec<PurgeEntry>, StoreError> {
    let corrupt = || StoreError::Corrupt {
        what: "answer index",
        key: hex::encode(key),
        reason: "neither a group of answers nor an LSN, a time and a digest".into(),
    };
    if value.len() == 12 {
        // Layout 4: one answer.
        let (Some((lsn, head)), Some((at, tail))) = (
            key.split_first_chunk::<8>()
                .filter(|(_, head)| head.len() == LSN_KEY_DIGEST),
            value.split_first_chunk::<8>(),
        ) else {
            return Err(corrupt());
        };
        let mut digest = [0u8; 16];
        for (byte, from) in digest.iter_mut().zip(head.iter().chain(tail)) {
            *byte = *from;
        }
        return Ok(vec![PurgeEntry {
            lsn: u64::from_be_bytes(*lsn),
            at_ms: i64::from_be_bytes(*at),
            digest,
        }]);
    }
    let Some((&GROUP_FORMAT, items)) = value.split_first() else {
        return Err(corrupt());
    };
    if items.is_empty() || items.len() % GROUP_ITEM != 0 {
        return Err(corrupt());
    }
    let mut entries = Vec::with_capacity(items.len() / GROUP_ITEM);
    for item in items.chunks_exact(GROUP_ITEM) {
        let Some((lsn, rest)) = item.split_first_chunk::<8>() else {
            return Err(corrupt());
        };
        let Some((at, digest)) = rest.split_first_chunk::<8>() else {
            return Err(corrupt());
        };
        let Ok(digest) = <[u8; 16]>::try_from(digest) else {
            return Err(corrupt());
        };
        entries.push(PurgeEntry {
            lsn: u64::from_be_bytes(*lsn),
            at_ms: i64::from_be_bytes(*at),
            digest,
        });
    }
    Ok(entries)
}

/// The purge's index entries of one write batch's answers, written by [`PurgeGroups::write`].
#[derive(Default)]
pub(crate) struct PurgeGroups {
    entries: Vec<PurgeEntry>,
}

/// Whether a group's key may already be in the store.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Held {
    /// The indexer's batches: every LSN is above what the store covers, so no key of theirs
    /// can be held (the batch that would have written one committed nothing).
    Never,
    /// Recovery's upgrade path files answers of LSNs the store covers (0 for a snapshot's):
    /// a key may be held, and what it indexed is kept.
    Maybe,
}

impl PurgeGroups {
    /// Writes the groups into `writes`, [`GROUP_MAX`] answers a key. Two groups of this call
    /// under one key, or a key already in the store (`held`), share one value: an answer is
    /// never dropped from the index by another group's write (such a value may pass
    /// [`GROUP_MAX`]).
    pub(crate) fn write(
        self,
        open: &Open,
        writes: &mut fjall::OwnedWriteBatch,
        held: Held,
    ) -> Result<(), StoreError> {
        let mut groups: Vec<([u8; 20], Vec<PurgeEntry>)> = Vec::new();
        for chunk in self.entries.chunks(GROUP_MAX) {
            let Some(first) = chunk.first() else {
                continue;
            };
            let key = group_key(first);
            match groups.iter_mut().find(|(other, _)| *other == key) {
                Some((_, entries)) => entries.extend_from_slice(chunk),
                None => groups.push((key, chunk.to_vec())),
            }
        }
        for (key, entries) in groups {
            let value = match held {
                Held::Maybe => match open.answer_lsns.get(key)? {
                    Some(value) => {
                        let mut merged = index_entries(&key, &value)?;
                        merged.extend(entries);
                        group_value(&merged)
                    }
                    None => group_value(&entries),
                },
                Held::Never => group_value(&entries),
            };
            writes.insert(&open.answer_lsns, key, value);
        }
        Ok(())
    }
}

/// Adds `record`'s answer (logged at `lsn`) to `writes`, and its purge entry to `groups`.
/// Records without an answer (the pending key of an unfinished move) are hot state and not
/// filed.
pub(crate) fn file_answer(
    open: &Open,
    writes: &mut fjall::OwnedWriteBatch,
    groups: &mut PurgeGroups,
    record: &IdempotencyRecord,
    lsn: u64,
) -> Result<(), StoreError> {
    let Some(response) = &record.response else {
        return Ok(());
    };
    let name = answer_key(&record.caller, &record.key);
    let digest = digest(&name);
    let named = Named {
        name,
        answer: StoredAnswer {
            fingerprint: record.fingerprint,
            at_ms: record.at_ms,
            lsn,
            response: response.clone(),
        },
    };
    groups.entries.push(PurgeEntry {
        lsn,
        at_ms: record.at_ms,
        digest,
    });
    writes.insert(&open.answers, digest, encode(&named)?);
    Ok(())
}

/// The answer filed under `name` in the current layout.
fn filed(open: &Open, name: &[u8]) -> Result<Option<StoredAnswer>, StoreError> {
    let digest = digest(name);
    let Some(bytes) = open.answers.get(digest)? else {
        return Ok(None);
    };
    let named: Named = decode("answer", &digest, &bytes)?;
    Ok((named.name == name).then_some(named.answer))
}

/// The answer filed under `name` in the first layout, while it has any.
fn filed_before(open: &Open, name: &[u8]) -> Result<Option<StoredAnswer>, StoreError> {
    let Some([answers, _]) = &open.legacy_answers else {
        return Ok(None);
    };
    if !open.legacy_answers_live.load(Ordering::Acquire) {
        return Ok(None);
    }
    match answers.get(name)? {
        Some(bytes) => decode("answer", name, &bytes).map(Some),
        None => Ok(None),
    }
}

impl HistoryStore {
    /// The answer filed under (`caller`, `key`), expired or not.
    pub fn answer(&self, caller: &str, key: &str) -> Result<Option<StoredAnswer>, StoreError> {
        self.with(|open| {
            let name = answer_key(caller, key);
            match filed(open, &name)? {
                Some(answer) => Ok(Some(answer)),
                None => filed_before(open, &name),
            }
        })
    }

    /// Files answers outside the indexer (recovery's upgrade path: what an older store or
    /// snapshot holds), each with the LSN that logged it (0 when unknown), as one batch. An
    /// answer the store holds for the same key and decided later (the key reused after its
    /// window) is kept.
    pub(crate) fn file_answers(
        &self,
        records: &[(u64, IdempotencyRecord)],
    ) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.with(|open| {
            let mut writes = open.db.batch();
            let mut groups = PurgeGroups::default();
            for (lsn, record) in records {
                let name = answer_key(&record.caller, &record.key);
                let held = match filed(open, &name)? {
                    Some(answer) => Some(answer),
                    None => filed_before(open, &name)?,
                };
                if held.is_some_and(|held| held.at_ms >= record.at_ms) {
                    continue;
                }
                file_answer(open, &mut writes, &mut groups, record, *lsn)?;
            }
            groups.write(open, &mut writes, Held::Maybe)?;
            writes.commit()?;
            Ok(())
        })
    }

    /// The first LSN whose answer the store holds with the rest of the record; `None` for a store
    /// written before answers were filed.
    pub(crate) fn answers_since(&self) -> Result<Option<u64>, StoreError> {
        self.with(|open| match open.meta.get(ANSWERS_SINCE)? {
            Some(bytes) => Ok(Some(numbers::<1>("answers_since", &bytes)?[0])),
            None => Ok(None),
        })
    }

    pub(crate) fn set_answers_since(&self, lsn: u64) -> Result<(), StoreError> {
        self.with(|open| Ok(open.meta.insert(ANSWERS_SINCE, lsn.to_be_bytes())?))
    }

    /// Removes up to `most` answers decided before `cutoff_ms` (walking at most `most` answers
    /// of the index); answers how many it removed. An answer whose key was used again later (a
    /// newer answer under the same name) is kept, only the stale index entry goes. The first
    /// layout's answers go first, while there are any (module docs).
    ///
    /// Each purge starts after the last index key it removed before (kept in `meta`, written in
    /// the purge's own batch, so a reopened store resumes there too): keys before it are
    /// tombstones until compaction drops them, and a purge that walked them again each time spent
    /// ever longer on them. In an hour-long soak with a 10-minute window that walk took the
    /// indexer's whole core from the first expiry on, and throughput fell from ~11k to ~400 req/s
    /// (BENCHMARKS.md). The indexer files in log order, so no new answer lands behind that point.
    pub fn purge_answers_before(&self, cutoff_ms: i64, most: usize) -> Result<usize, StoreError> {
        let mut resume = self
            .purged_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.with(|open| {
            if open.legacy_answers_live.load(Ordering::Acquire) {
                let removed = purge_legacy(open, &mut resume.legacy, cutoff_ms, most)?;
                if removed > 0 {
                    return Ok(removed);
                }
            }
            if resume.current.is_none() {
                resume.current = open.meta.get(PURGED_TO)?;
            }
            let start = match resume.current.as_ref() {
                Some(key) => Bound::Excluded(key.to_vec()),
                None => Bound::Unbounded,
            };
            let mut writes = open.db.batch();
            let mut removed = 0;
            let mut walked = 0;
            let mut last = None;
            let mut stopped_at = None;
            'keys: for guard in open.answer_lsns.range((start, Bound::Unbounded)) {
                if walked >= most {
                    break;
                }
                let (index_key, index_value) = guard.into_inner()?;
                let entries = index_entries(&index_key, &index_value)?;
                for (done, entry) in entries.iter().enumerate() {
                    let live = entry.at_ms >= cutoff_ms;
                    if live || walked >= most {
                        stopped_at = live.then_some(entry.at_ms);
                        // What is left of the group stays indexed under its key, which the
                        // next purge starts at.
                        if done > 0 {
                            let rest = entries.get(done..).unwrap_or_default();
                            writes.insert(&open.answer_lsns, index_key.to_vec(), group_value(rest));
                        }
                        break 'keys;
                    }
                    walked += 1;
                    if let Some(bytes) = open.answers.get(entry.digest)? {
                        let named: Named = decode("answer", &entry.digest, &bytes)?;
                        if named.answer.lsn == entry.lsn && named.answer.at_ms == entry.at_ms {
                            writes.remove(&open.answers, entry.digest);
                            removed += 1;
                        }
                    }
                }
                writes.remove(&open.answer_lsns, index_key.to_vec());
                last = Some(index_key);
            }
            if let Some(key) = &last {
                writes.insert(&open.meta, PURGED_TO, key.clone());
            }
            writes.commit()?;
            if last.is_some() {
                resume.current = last;
            }
            resume.stopped_at_ms = stopped_at;
            Ok(removed)
        })
    }

    /// When the last purge stopped at an answer still inside the window: that answer's decision
    /// time (`None` if it stopped for another reason). An answer decided while the clock was
    /// ahead holds back every purge behind it in log order until it expires; the indexer warns
    /// when this lies in the future.
    pub fn purge_stopped_at(&self) -> Option<i64> {
        self.purged_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
            .stopped_at_ms
    }
}

/// Opens the first layout's keyspaces where they exist (module docs), or deletes them once the
/// purge marked them drained. Not by asking whether they are empty: that walks every tombstone
/// the purge left, and nothing compacts a keyspace no longer written.
pub(crate) fn open_legacy(mut open: Open) -> Result<Open, StoreError> {
    if !LEGACY_KEYSPACES
        .iter()
        .any(|name| open.db.keyspace_exists(name))
    {
        return Ok(open);
    }
    let [answers, times] = LEGACY_KEYSPACES.map(|name| {
        open.db
            .keyspace(name, fjall::KeyspaceCreateOptions::default)
    });
    let (answers, times) = (answers?, times?);
    if open.meta.get(LEGACY_DRAINED)?.is_some() {
        // A crash between the two deletions leaves one: the next open deletes it.
        open.db.delete_keyspace(answers)?;
        open.db.delete_keyspace(times)?;
        tracing::info!("deleted the idempotency answers' first-layout keyspaces (drained)");
        return Ok(open);
    }
    open.legacy_answers = Some([answers, times]);
    open.legacy_answers_live.store(true, Ordering::Release);
    Ok(open)
}

/// Where each purge resumes (`meta` holds the same, read on the first purge).
#[derive(Default)]
pub(crate) struct PurgedTo {
    current: Option<fjall::Slice>,
    legacy: Option<fjall::Slice>,
    /// Where the last purge stopped ([`HistoryStore::purge_stopped_at`]).
    stopped_at_ms: Option<i64>,
}

/// One purge step over the first layout's answers ([`HistoryStore::purge_answers_before`]);
/// when its index has nothing left after the resume point, lookups stop asking it.
fn purge_legacy(
    open: &Open,
    resume: &mut Option<fjall::Slice>,
    cutoff_ms: i64,
    most: usize,
) -> Result<usize, StoreError> {
    let Some([answers, times]) = &open.legacy_answers else {
        return Ok(0);
    };
    if resume.is_none() {
        *resume = open.meta.get(LEGACY_PURGED_TO)?;
    }
    let start = match resume.as_ref() {
        Some(key) => Bound::Excluded(key.to_vec()),
        None => Bound::Unbounded,
    };
    if times
        .range((start.clone(), Bound::Unbounded))
        .next()
        .is_none()
    {
        open.meta.insert(LEGACY_DRAINED, Vec::new())?;
        open.legacy_answers_live.store(false, Ordering::Release);
        return Ok(0);
    }
    let end = Bound::Excluded(time_key(cutoff_ms).to_be_bytes().to_vec());
    let mut writes = open.db.batch();
    let mut removed = 0;
    let mut last = None;
    for guard in times.range((start, end)).take(most) {
        let (index_key, _) = guard.into_inner()?;
        let Some((at, name)) = index_key.split_at_checked(8) else {
            return Err(StoreError::Corrupt {
                what: "answer time",
                key: hex::encode(&index_key),
                reason: "shorter than its time".into(),
            });
        };
        let at = numbers::<1>("answer time", at)?[0];
        if let Some(bytes) = answers.get(name)? {
            let stored: StoredAnswer = decode("answer", name, &bytes)?;
            if time_key(stored.at_ms) == at {
                writes.remove(answers, name);
                removed += 1;
            }
        }
        writes.remove(times, index_key.to_vec());
        last = Some(index_key);
    }
    if let Some(key) = &last {
        writes.insert(&open.meta, LEGACY_PURGED_TO, key.clone());
    }
    writes.commit()?;
    if last.is_some() {
        *resume = last;
    }
    Ok(removed)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn answer(key: &str, at_ms: i64) -> (u64, IdempotencyRecord) {
        let record = IdempotencyRecord {
            caller: "customer:1".into(),
            key: key.into(),
            fingerprint: [1; 32],
            at_ms,
            route: 2,
            response: Some(b"{}".to_vec()),
            transfer_uuid: None,
        };
        // Logged in the order decided, as the indexer files them.
        (at_ms as u64, record)
    }

    /// Purges in steps remove every expired answer and no live one, and each starts after the
    /// last index key the one before removed, also after the store is opened again: an index
    /// entry planted behind that point is not walked again (the walk over tombstones is what
    /// took a whole core).
    #[test]
    fn purges_resume_after_the_last_key_they_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let filed: Vec<_> = (0..100)
            .map(|i| answer(&format!("k{i}"), 1_000 + i))
            .collect();
        // Ten write batches, so ten groups: a purge step may stop inside one.
        for batch in filed.chunks(10) {
            store.file_answers(batch).unwrap();
        }
        let mut removed = 0;
        loop {
            let step = store.purge_answers_before(1_050, 7).unwrap();
            assert!(step <= 7);
            if step == 0 {
                break;
            }
            removed += step;
        }
        assert_eq!(removed, 50);
        for i in 0..100 {
            let kept = store.answer("customer:1", &format!("k{i}")).unwrap();
            assert_eq!(kept.is_some(), i >= 50, "k{i}");
        }
        assert_eq!(store.purge_answers_before(1_080, 1_000).unwrap(), 30);
        store.file_answers(&[answer("late", 1_010)]).unwrap();
        assert_eq!(store.purge_answers_before(1_090, 1_000).unwrap(), 10);
        assert!(store.answer("customer:1", "late").unwrap().is_some());
        assert!(store.answer("customer:1", "k90").unwrap().is_some());
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(store.purge_answers_before(1_100, 1_000).unwrap(), 10);
        assert!(store.answer("customer:1", "late").unwrap().is_some());
        assert!(store.answer("customer:1", "k99").unwrap().is_none());
    }

    /// The purge walks its index in log order and stops at the first answer still inside the
    /// window: an answer decided out of log order is purged late, never early.
    #[test]
    fn the_purge_stops_at_the_first_live_answer_in_log_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let mut late = answer("c", 1_001);
        late.0 = 3;
        store
            .file_answers(&[(1, answer("a", 1_000).1), (2, answer("b", 1_100).1), late])
            .unwrap();
        assert_eq!(store.purge_answers_before(1_050, 100).unwrap(), 1);
        assert!(store.answer("customer:1", "a").unwrap().is_none());
        assert!(store.answer("customer:1", "c").unwrap().is_some());
        assert_eq!(store.purge_answers_before(1_200, 100).unwrap(), 2);
        assert!(store.answer("customer:1", "c").unwrap().is_none());
    }

    /// One write batch's answers share one index key (a group), and a purge that stops inside
    /// a group, at a live answer or at its bound, writes back the rest of it: those are purged
    /// later, none early, none left behind.
    #[test]
    fn a_batch_files_one_index_key_and_a_purge_stopping_inside_it_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let filed: Vec<_> = (0..GROUP_MAX as i64 + 40)
            .map(|i| answer(&format!("k{i}"), 1_000 + i))
            .collect();
        store.file_answers(&filed).unwrap();
        let index_keys = |store: &HistoryStore| {
            store
                .with(|open| Ok(open.answer_lsns.iter().count()))
                .unwrap()
        };
        assert_eq!(index_keys(&store), 2, "{} answers, two groups", filed.len());

        // Stopped by its bound inside the first group, then by a live answer inside it.
        assert_eq!(store.purge_answers_before(1_100, 30).unwrap(), 30);
        assert_eq!(
            store.purge_stopped_at(),
            None,
            "stopped by its bound, not a live answer"
        );
        assert!(store.answer("customer:1", "k29").unwrap().is_none());
        assert!(store.answer("customer:1", "k30").unwrap().is_some());
        assert_eq!(index_keys(&store), 2, "the rest of the group stays indexed");
        let first = store
            .with(|open| {
                let (key, value) = open.answer_lsns.iter().next().unwrap().into_inner()?;
                index_entries(&key, &value)
            })
            .unwrap();
        assert_eq!(
            first.len(),
            GROUP_MAX - 30,
            "the walked answers leave the group"
        );
        assert_eq!(first[0].at_ms, 1_030);
        assert_eq!(store.purge_answers_before(1_100, 1_000).unwrap(), 70);
        assert_eq!(store.purge_stopped_at(), Some(1_100));
        assert!(store.answer("customer:1", "k100").unwrap().is_some());

        // Reopened, the purge goes on where it stopped, across both groups.
        store.persist().unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(
            store
                .purge_answers_before(1_000 + GROUP_MAX as i64 + 10, 1_000)
                .unwrap(),
            GROUP_MAX - 100 + 10
        );
        let last = GROUP_MAX + 9;
        assert!(store
            .answer("customer:1", &format!("k{last}"))
            .unwrap()
            .is_none());
        assert!(store
            .answer("customer:1", &format!("k{}", last + 1))
            .unwrap()
            .is_some());
        assert_eq!(index_keys(&store), 1, "the first group is gone");
        assert_eq!(store.purge_answers_before(i64::MAX, 1_000).unwrap(), 30);
        assert_eq!(index_keys(&store), 0);
    }

    /// Recovery may file an answer again under a name it holds an older answer of, with the
    /// same LSN (0: carried by a snapshot): the group key it starts is taken, and the answers
    /// that key indexed stay indexed with the new one.
    #[test]
    fn a_group_filed_under_a_key_the_index_holds_keeps_what_it_indexed() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let at = |key: &str, at_ms| (0, answer(key, at_ms).1);
        store
            .file_answers(&[at("a", 1_000), at("b", 1_001)])
            .unwrap();
        store.file_answers(&[at("a", 1_500)]).unwrap();
        assert_eq!(store.purge_answers_before(1_200, 1_000).unwrap(), 1);
        assert!(
            store.answer("customer:1", "b").unwrap().is_none(),
            "b was indexed"
        );
        assert_eq!(
            store.answer("customer:1", "a").unwrap().unwrap().at_ms,
            1_500
        );
        assert_eq!(store.purge_answers_before(1_600, 1_000).unwrap(), 1);
        assert!(store.answer("customer:1", "a").unwrap().is_none());
    }

    /// Two groups of one call that start with the same key (a name filed twice under one LSN
    /// by recovery) share its value: the first group's answers stay indexed.
    #[test]
    fn two_groups_of_one_batch_under_one_key_share_it() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let at = |key: &str, at_ms| (0, answer(key, at_ms).1);
        let mut filed = vec![at("a", 1_000)];
        filed.extend((1..GROUP_MAX as i64).map(|i| at(&format!("k{i}"), 1_000 + i)));
        filed.push(at("a", 1_500));
        store.file_answers(&filed).unwrap();
        assert_eq!(
            store.purge_answers_before(1_400, 100_000).unwrap(),
            GROUP_MAX - 1
        );
        assert_eq!(
            store.answer("customer:1", "a").unwrap().unwrap().at_ms,
            1_500
        );
        assert_eq!(store.purge_answers_before(i64::MAX, 100_000).unwrap(), 1);
    }

    /// A store of layout 4 indexed each answer under its own key; those entries are purged in
    /// log order with the groups filed after them.
    #[test]
    fn per_answer_entries_of_layout_4_are_purged_with_the_groups_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                for i in 0..5i64 {
                    let (lsn, record) = answer(&format!("old{i}"), 1_000 + i);
                    let name = answer_key(&record.caller, &record.key);
                    let digest = digest(&name);
                    let named = Named {
                        name,
                        answer: StoredAnswer {
                            fingerprint: record.fingerprint,
                            at_ms: record.at_ms,
                            lsn,
                            response: b"{}".to_vec(),
                        },
                    };
                    // Layout 4's entry: `lsn | digest[..12]` -> `decided at | digest[12..]`.
                    let mut key = lsn.to_be_bytes().to_vec();
                    key.extend_from_slice(&digest[..LSN_KEY_DIGEST]);
                    let mut value = record.at_ms.to_be_bytes().to_vec();
                    value.extend_from_slice(&digest[LSN_KEY_DIGEST..]);
                    open.answer_lsns.insert(key, value)?;
                    open.answers.insert(digest, encode(&named)?)?;
                }
                Ok(())
            })
            .unwrap();
        let new: Vec<_> = (0..5)
            .map(|i| answer(&format!("new{i}"), 2_000 + i))
            .collect();
        store.file_answers(&new).unwrap();
        assert_eq!(store.purge_answers_before(1_003, 1_000).unwrap(), 3);
        assert!(store.answer("customer:1", "old3").unwrap().is_some());
        assert_eq!(store.purge_answers_before(2_002, 1_000).unwrap(), 4);
        assert!(store.answer("customer:1", "new1").unwrap().is_none());
        assert!(store.answer("customer:1", "new2").unwrap().is_some());
        assert_eq!(store.purge_answers_before(i64::MAX, 1_000).unwrap(), 3);
    }

    /// Bytes that are neither a group nor a layout-4 entry are refused as damaged, never read
    /// as answers to purge.
    #[test]
    fn a_damaged_index_entry_is_refused() {
        for value in [
            vec![],
            vec![GROUP_FORMAT],
            vec![GROUP_FORMAT; 32],
            vec![2; 33],
            vec![0; 11],
        ] {
            assert!(
                matches!(
                    index_entries(&[0; 20], &value),
                    Err(StoreError::Corrupt { .. })
                ),
                "{value:?}"
            );
        }
        assert!(index_entries(&[0; 19], &[0; 12]).is_err());
        let entry = PurgeEntry {
            lsn: 7,
            at_ms: -3,
            digest: [9; 16],
        };
        assert_eq!(
            index_entries(&group_key(&entry), &group_value(&[entry, entry])).unwrap(),
            vec![entry, entry]
        );
    }

    /// A lookup compares the name stored under the digest: an answer filed under another name
    /// with the same digest (a collision) is never replayed to this caller.
    #[test]
    fn an_answer_under_the_same_digest_with_another_name_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let (_, record) = answer("k", 1_000);
        store.file_answers(&[(1, record)]).unwrap();
        assert!(store.answer("customer:1", "k").unwrap().is_some());
        store
            .with(|open| {
                let named = Named {
                    name: answer_key("customer:2", "k"),
                    answer: store_answer(1_000),
                };
                let digest = digest(&answer_key("customer:1", "k"));
                open.answers.insert(digest, encode(&named)?)?;
                Ok(())
            })
            .unwrap();
        assert_eq!(store.answer("customer:1", "k").unwrap(), None);
        assert_eq!(store.answer("customer:2", "k").unwrap(), None);
    }

    fn store_answer(at_ms: i64) -> StoredAnswer {
        StoredAnswer {
            fingerprint: [2; 32],
            at_ms,
            lsn: at_ms as u64,
            response: b"{}".to_vec(),
        }
    }

    /// A store written with the first layout keeps serving its answers; the purge drains that
    /// layout first, lookups stop asking it once it is empty, and the next open deletes it.
    #[test]
    fn answers_of_the_first_layout_are_found_purged_then_dropped() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store
            .with(|open| {
                let [answers, times] = LEGACY_KEYSPACES.map(|name| {
                    open.db
                        .keyspace(name, fjall::KeyspaceCreateOptions::default)
                });
                let (answers, times) = (answers?, times?);
                // A leftover behind an older build's resume point: an answer with no index
                // entry, which nothing will ever purge (it must not keep the layout alive).
                answers.insert(
                    answer_key("customer:1", "leftover"),
                    encode(&store_answer(10))?,
                )?;
                for i in 0..10 {
                    let name = answer_key("customer:1", &format!("old{i}"));
                    let stored = store_answer(1_000 + i);
                    let mut index = time_key(stored.at_ms).to_be_bytes().to_vec();
                    index.extend_from_slice(&name);
                    times.insert(index, Vec::new())?;
                    answers.insert(name, encode(&stored)?)?;
                }
                Ok(())
            })
            .unwrap();
        store.persist().unwrap();
        store.close();

        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let old = store.answer("customer:1", "old3").unwrap().unwrap();
        assert_eq!(old, store_answer(1_003));
        store.file_answers(&[answer("new", 2_000)]).unwrap();
        assert_eq!(store.purge_answers_before(1_005, 1_000).unwrap(), 5);
        assert!(store.answer("customer:1", "old4").unwrap().is_none());
        assert!(store.answer("customer:1", "old5").unwrap().is_some());
        assert_eq!(store.purge_answers_before(3_000, 1_000).unwrap(), 5);
        assert!(store.answer("customer:1", "new").unwrap().is_some());
        assert_eq!(store.purge_answers_before(3_000, 1_000).unwrap(), 1);
        assert!(store.answer("customer:1", "new").unwrap().is_none());
        let live = store.with(|open| Ok(open.legacy_answers_live.load(Ordering::Acquire)));
        assert!(!live.unwrap(), "lookups stop asking the drained layout");
        store.persist().unwrap();
        store.close();

        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let exists =
            store.with(|open| Ok(LEGACY_KEYSPACES.map(|name| open.db.keyspace_exists(name))));
        assert_eq!(exists.unwrap(), [false, false]);
        assert!(store.answer("customer:1", "leftover").unwrap().is_none());
    }

    /// An answer decided while the clock was ahead holds the purge back (it walks in log order
    /// and stops at the first answer inside the window) and says so; nothing is purged early,
    /// and once it expires the purge goes on.
    #[test]
    fn an_answer_from_the_future_holds_the_purge_back_until_it_expires() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let filed = vec![
            (1, answer("a", 1_000).1),
            (2, answer("ahead", 50_000).1),
            (3, answer("b", 1_002).1),
        ];
        store.file_answers(&filed).unwrap();
        assert_eq!(store.purge_answers_before(2_000, 100).unwrap(), 1);
        assert_eq!(store.purge_stopped_at(), Some(50_000));
        assert!(
            store.answer("customer:1", "b").unwrap().is_some(),
            "held back"
        );
        assert_eq!(store.purge_answers_before(50_001, 100).unwrap(), 2);
        assert_eq!(store.purge_stopped_at(), None);
        for key in ["a", "ahead", "b"] {
            assert!(store.answer("customer:1", key).unwrap().is_none(), "{key}");
        }
    }

    /// A store of key layout 2 (before answers by digest), 3 (with `counts`) or 4 (one purge
    /// key per answer) is marked with the current layout on open and any `counts` keyspace
    /// dropped, which a walletd from before refuses; a layout this build does not know is
    /// refused.
    #[test]
    fn the_store_is_marked_with_the_current_layout_and_refuses_an_unknown_one() {
        use crate::runtime::history::epochs::{LAYOUT, LAYOUT_CURRENT};
        let dir = tempfile::tempdir().unwrap();
        let mut store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let layout = |store: &HistoryStore| {
            store
                .with(|open| Ok(open.meta.get(LAYOUT)?.map(|l| l.to_vec())))
                .unwrap()
        };
        assert_eq!(layout(&store), Some(vec![LAYOUT_CURRENT]));
        for older in [2u8, 3, 4] {
            store
                .with(|open| Ok(open.meta.insert(LAYOUT, [older])?))
                .unwrap();
            store.persist().unwrap();
            store.close();
            {
                // What that layout's walletd kept beside it.
                let db = fjall::Database::builder(dir.path()).open().unwrap();
                db.keyspace("counts", fjall::KeyspaceCreateOptions::default)
                    .unwrap()
                    .insert(7u64.to_be_bytes(), [0u8; 24])
                    .unwrap();
                db.persist(fjall::PersistMode::SyncAll).unwrap();
            }
            let reopened = HistoryStore::open(dir.path(), 1 << 20).unwrap();
            assert_eq!(
                layout(&reopened),
                Some(vec![LAYOUT_CURRENT]),
                "from {older}"
            );
            reopened
                .with(|open| {
                    assert!(!open.db.keyspace_exists("counts"), "from {older}");
                    Ok(())
                })
                .unwrap();
            store = reopened;
        }
        store
            .with(|open| Ok(open.meta.insert(LAYOUT, [9])?))
            .unwrap();
        store.persist().unwrap();
        store.close();
        let refused = HistoryStore::open(dir.path(), 1 << 20).unwrap_err();
        assert!(refused.to_string().contains("key layout [9]"), "{refused}");
    }
}
