//! Idempotency answers in the history store: the rendered answer to every keyed request, kept for
//! the retention window and then dropped (issue 14, item 7).
//!
//! ```text
//! answers_from_<start ms>  digest(caller, key)  -> (caller length | caller | key, StoredAnswer)
//!                          one keyspace per generation of decision time ([`generations`])
//! meta                     "answers_latest:" start -> i64  a generation's latest decision time
//! meta                     "answers_since"      -> u64   first LSN whose answer is filed
//! ```
//!
//! The indexer files an answer with the rest of its WAL record, in the same write batch, so the
//! store holds an answer exactly when it covers the record's LSN. Then the in-memory table drops
//! it ([`crate::runtime::idempotency::IdempotencyTable::forget_filed`]).
//!
//! **The key** is 16 bytes of SHA-256 over the caller and the key, not the ~45-byte name whose
//! common prefix every comparison walked: a client's keys are random, so every table flushed
//! into an answers' keyspace overlaps all of the level below it, and the shorter the keys, the
//! cheaper its compactions. The value carries the name, and a lookup whose name differs finds
//! nothing there (two names with one digest would share its slot, the later answer replacing
//! the earlier).
//!
//! **Generations** ([`generations`]): each keyspace holds the answers decided in one stretch
//! of time (a quarter of the retention window), and the purge deletes a generation whole once
//! the latest answer it holds has expired. A lookup asks the generations newest first: a key used again
//! after its window is found with its newest answer.
//!
//! **Older stores.** Two earlier layouts are read and drained, never written:
//! - [`digest_layout`] (store layouts 4 and 5): one `answers_by_digest` keyspace of every live
//!   answer and a purge index by LSN. Lookups ask it after the generations; the purge drains it
//!   in log order and it is deleted once empty.
//! - The first layout (`answers`: caller length | caller | key -> `StoredAnswer`;
//!   `answer_times`: decided at | that name -> ()): a lookup that finds nothing in the newer
//!   layouts asks it, and the purge drains its index. Once nothing is left after its resume
//!   point the lookups stop asking, `meta` marks the layout drained, and the next open deletes
//!   both keyspaces. Stores with these keyspaces carry key layout 3 or later
//!   (`super::epochs`): a walletd from before refuses the store instead of opening empty
//!   first-layout answer keyspaces beside the new ones and running retries again.
//!
//! A store written before answers were filed has no `answers_since`: it is taken to be the LSN
//! after what the store covered, and recovery files the answers of the records it replays below
//! it (and those an older snapshot carried) before the engine serves; then it is 0.

pub(crate) mod digest_layout;
pub(crate) mod generations;

use std::ops::Bound;
use std::sync::atomic::Ordering;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use self::generations::Target;
use super::store::{decode, encode, numbers, time_key, HistoryStore, Open, StoreError};
use super::writes::Writes;
use crate::runtime::journal::IdempotencyRecord;

pub(crate) const ANSWERS_SINCE: &[u8] = b"answers_since";
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

/// What an answers' keyspace holds under a digest: the answer with the name it was filed under.
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

/// The key of a name in an answers' keyspace: the first 16 bytes of SHA-256 over a domain tag
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

/// Files answers into their generations within one write batch: remembers the last generation
/// used, so a batch's answers (decided within milliseconds of each other) ask for it once, and
/// the latest decision time it gave each generation, written once per batch ([`Self::finish`]).
#[derive(Default)]
pub(crate) struct AnswerFiler {
    last: Option<Target>,
    latest: Vec<(std::sync::Arc<generations::Generation>, i64)>,
}

impl AnswerFiler {
    /// Adds `record`'s answer (logged at `lsn`) to `writes`. Records without an answer (the
    /// pending key of an unfinished move) are hot state and not filed; while recovering, an
    /// answer decided before the retention window is expired and not filed either
    /// ([`generations`]).
    pub(crate) fn file(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        record: &IdempotencyRecord,
        lsn: u64,
    ) -> Result<(), StoreError> {
        let Some(response) = &record.response else {
            return Ok(());
        };
        let at_ms = record.at_ms;
        // While recovering, one the clock of the open finds expired is not filed.
        if at_ms < open.generations.floor_ms() {
            return Ok(());
        }
        if !self.last.as_ref().is_some_and(|target| target.holds(at_ms)) {
            let chosen =
                open.generations
                    .target(&open.db, super::store::keyspace_options, at_ms)?;
            match chosen {
                Some(target) => self.last = Some(target),
                // Expired: not filed.
                None => return Ok(()),
            }
        }
        let Some(target) = &self.last else {
            return Ok(());
        };
        match self
            .latest
            .iter_mut()
            .find(|(generation, _)| std::sync::Arc::ptr_eq(generation, &target.generation))
        {
            Some((_, latest)) => *latest = (*latest).max(at_ms),
            None => self.latest.push((target.generation.clone(), at_ms)),
        }
        let name = answer_key(&record.caller, &record.key);
        let digest = digest(&name);
        let named = Named {
            name,
            answer: StoredAnswer {
                fingerprint: record.fingerprint,
                at_ms,
                lsn,
                response: response.clone(),
            },
        };
        writes.insert(&target.generation.keyspace, digest, encode(&named)?);
        Ok(())
    }

    /// Adds each generation's new latest decision time to `writes`: in the batch that files the
    /// answers, so the store never holds an answer later than its generation's time says. The
    /// times kept in memory are raised once the batch is committed ([`LatestTimes::committed`]).
    #[must_use = "the latest times are raised in memory only once the batch is committed"]
    pub(crate) fn finish(self, open: &Open, writes: &mut Writes) -> LatestTimes {
        LatestTimes(
            self.latest
                .into_iter()
                .filter(|(generation, latest)| generation.write_latest(&open.meta, writes, *latest))
                .collect(),
        )
    }
}

/// The latest decision times a batch wrote ([`AnswerFiler::finish`]).
pub(crate) struct LatestTimes(Vec<(std::sync::Arc<generations::Generation>, i64)>);

impl LatestTimes {
    /// The batch is committed: the generations' times in memory follow what `meta` now says.
    pub(crate) fn committed(self) {
        for (generation, latest) in self.0 {
            generation.committed(latest);
        }
    }
}

/// The answer filed under `name` in the generations, newest first.
fn in_generations(open: &Open, name: &[u8]) -> Result<Option<StoredAnswer>, StoreError> {
    let digest = digest(name);
    open.generations.newest_first(|keyspace| {
        let Some(bytes) = keyspace.get(digest)? else {
            return Ok(None);
        };
        let named: Named = decode("answer", &digest, &bytes)?;
        Ok((named.name == name).then_some(named.answer))
    })
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

/// The newest answer filed under `name` in any layout.
fn filed(open: &Open, name: &[u8]) -> Result<Option<StoredAnswer>, StoreError> {
    if let Some(answer) = in_generations(open, name)? {
        return Ok(Some(answer));
    }
    if let Some(answer) = digest_layout::lookup(open.digest_layout.as_ref(), name)? {
        return Ok(Some(answer));
    }
    filed_before(open, name)
}

/// A test's seam inside [`HistoryStore::answer`]: there a test holds the lookup of one key, as
/// a keyspace's version lock held through a slow sync would (`tests::idempotency_lookups`).
#[cfg(test)]
pub(crate) mod in_answer_lookup {
    type Hook = Box<dyn FnOnce() + Send>;

    /// Hooks by caller and key (tests run side by side in one process: each uses its own keys).
    static HOOKS: std::sync::Mutex<Vec<((String, String), Hook)>> =
        std::sync::Mutex::new(Vec::new());

    /// Runs `hook` in the next lookup of (`caller`, `key`).
    pub(crate) fn set(caller: &str, key: &str, hook: Hook) {
        lock().push(((caller.to_owned(), key.to_owned()), hook));
    }

    pub(super) fn run(caller: &str, key: &str) {
        let hook = {
            let mut hooks = lock();
            hooks
                .iter()
                .position(|((c, k), _)| c == caller && k == key)
                .map(|at| hooks.swap_remove(at).1)
        };
        if let Some(hook) = hook {
            hook();
        }
    }

    fn lock() -> std::sync::MutexGuard<'static, Vec<((String, String), Hook)>> {
        HOOKS
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner)
    }
}

/// What a purge removed.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub struct Purged {
    /// Answers removed one by one from the layouts before generations.
    pub answers: usize,
    /// Generations dropped whole.
    pub generations: usize,
}

impl HistoryStore {
    /// The answer filed under (`caller`, `key`), expired or not.
    pub fn answer(&self, caller: &str, key: &str) -> Result<Option<StoredAnswer>, StoreError> {
        self.foreground("answer", || {
            #[cfg(test)]
            in_answer_lookup::run(caller, key);
            self.with(|open| filed(open, &answer_key(caller, key)))
        })
    }

    /// Sets the retention window of answers: generations run a quarter of it, and until
    /// [`Self::file_every_answer`] answers decided before `now_ms - retention_ms` are not filed
    /// ([`generations`]). Recovery calls it before it files anything; until then the default
    /// window (24 h) applies.
    pub fn retain_answers(&self, retention_ms: i64, now_ms: i64) -> Result<(), StoreError> {
        self.with(|open| {
            open.generations.retain(retention_ms, now_ms);
            Ok(())
        })
    }

    /// Files every answer from now on, expired or not (recovery calls it once the engine is
    /// about to serve: see [`generations`]).
    pub fn file_every_answer(&self) -> Result<(), StoreError> {
        self.with(|open| {
            open.generations.file_every_answer();
            Ok(())
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
            let mut writes = Writes::new(&open.db);
            let mut filer = AnswerFiler::default();
            for (lsn, record) in records {
                // Expired by the clock of the open: not filed (and not looked up either).
                if record.at_ms < open.generations.floor_ms() {
                    continue;
                }
                let name = answer_key(&record.caller, &record.key);
                if filed(open, &name)?.is_some_and(|held| held.at_ms >= record.at_ms) {
                    continue;
                }
                filer.file(open, &mut writes, record, *lsn)?;
            }
            let latest = filer.finish(open, &mut writes);
            writes.commit()?;
            latest.committed();
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

    /// Removes answers decided before `cutoff_ms`: the generations whose latest answer is that
    /// old, whole, and up to `most` answers of each older layout while it has any (module
    /// docs), oldest first.
    pub fn purge_answers_before(&self, cutoff_ms: i64, most: usize) -> Result<Purged, StoreError> {
        let mut resume = self
            .purged_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.with(|open| {
            let mut purged = Purged::default();
            if open.legacy_answers_live.load(Ordering::Acquire) {
                purged.answers += purge_legacy(open, &mut resume.legacy, cutoff_ms, most)?;
            }
            let mut stopped_at_ms = None;
            if let Some(layout) = open.digest_layout.as_ref().filter(|l| l.live()) {
                let step = digest_layout::purge(
                    &open.db,
                    &open.meta,
                    layout,
                    &mut resume.digest,
                    cutoff_ms,
                    most,
                )?;
                purged.answers += step.removed;
                stopped_at_ms = step.stopped_at_ms;
            }
            purged.generations = open
                .generations
                .drop_expired(&open.db, &open.meta, cutoff_ms)?;
            resume.stopped_at_ms =
                stopped_at_ms.or_else(|| open.generations.held_back_by(cutoff_ms));
            Ok(purged)
        })
    }

    /// Where the last purge was held back: the decision time of the answer inside the window
    /// that stopped the older layout's purge, or the latest decision time in a generation it
    /// kept (`None` if nothing is kept). After the clock was ahead this lies in the future, and
    /// what is held back stays on disk until it expires; the indexer warns.
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

/// Where each purge of an older layout resumes (`meta` holds the same, read on the first
/// purge), and where the last purge was held back.
#[derive(Default)]
pub(crate) struct PurgedTo {
    digest: Option<fjall::Slice>,
    legacy: Option<fjall::Slice>,
    /// [`HistoryStore::purge_stopped_at`].
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
    let mut writes = Writes::new(&open.db);
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
            response: Some(format!("{{\"at\":{at_ms}}}").into_bytes()),
            transfer_uuid: None,
        };
        // Logged in the order decided, as the indexer files them.
        (at_ms as u64, record)
    }

    fn found(store: &HistoryStore, key: &str) -> Option<i64> {
        store
            .answer("customer:1", key)
            .unwrap()
            .map(|answer| answer.at_ms)
    }

    fn generation_starts(store: &HistoryStore) -> Vec<i64> {
        store.with(|open| Ok(open.generations.starts())).unwrap()
    }

    /// Answers land in generations of a quarter of the window; a purge drops a generation once
    /// the latest answer it holds is outside the window, so no answer inside the window is ever
    /// lost and none outside it outlives the window by more than a generation.
    #[test]
    fn a_purge_drops_whole_generations_once_their_answers_expired() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        let filed: Vec<_> = (0..10)
            .map(|i| answer(&format!("k{i}"), 1_000 + 50 * i))
            .collect();
        for batch in filed.chunks(3) {
            store.file_answers(batch).unwrap();
        }
        assert_eq!(
            generation_starts(&store),
            vec![1_000, 1_100, 1_200, 1_300, 1_400],
            "a generation per 100 ms (a quarter of 400)"
        );
        for cutoff in [1_000, 1_050, 1_099, 1_100, 1_250, 1_399, 1_450] {
            let purged = store.purge_answers_before(cutoff, 1_000).unwrap();
            assert_eq!(purged.answers, 0, "no answer is removed one by one");
            for (_, record) in &filed {
                let at = record.at_ms;
                let kept = found(&store, &record.key);
                if at >= cutoff {
                    assert_eq!(kept, Some(at), "inside the window at {cutoff}: {at}");
                }
                if at < cutoff - 100 {
                    assert_eq!(kept, None, "a generation past the window at {cutoff}: {at}");
                }
            }
        }
        assert_eq!(generation_starts(&store), vec![1_400]);
        assert_eq!(found(&store, "k9"), Some(1_450));
        let purged = store.purge_answers_before(1_451, 1_000).unwrap();
        assert_eq!(
            purged.generations, 1,
            "the newest too, once all it holds expired"
        );
        assert_eq!(found(&store, "k9"), None);
    }

    /// A key used again after its window: the newer answer is found (newest generation first),
    /// an older one filed afterwards (an older snapshot's, at open) does not replace it, and
    /// dropping the older generation leaves it.
    #[test]
    fn a_key_used_again_is_found_with_its_newest_answer() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        store.file_answers(&[answer("k", 1_000)]).unwrap();
        store.file_answers(&[answer("k", 1_500)]).unwrap();
        assert_eq!(found(&store, "k"), Some(1_500));
        store.file_answers(&[answer("k", 1_200)]).unwrap();
        assert_eq!(found(&store, "k"), Some(1_500));
        assert_eq!(
            store.purge_answers_before(1_500, 10).unwrap().generations,
            1
        );
        assert_eq!(found(&store, "k"), Some(1_500));
    }

    /// While recovering, an answer decided before the window (by the clock of the open) is not
    /// filed: a lookup would treat it as absent, and a rebuild over all history would otherwise
    /// create generations for the whole past. Once serving, every answer is, also one decided
    /// after a purge whose clock ran ahead: the clock set back, a lookup honours it again.
    #[test]
    fn an_answer_expired_at_open_is_skipped_but_every_answer_is_filed_once_serving() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 10_000).unwrap();
        store
            .file_answers(&[answer("old", 9_599), answer("live", 9_600)])
            .unwrap();
        assert_eq!(found(&store, "old"), None);
        assert_eq!(found(&store, "live"), Some(9_600));
        assert_eq!(generation_starts(&store), vec![9_600]);
        store.file_every_answer().unwrap();
        // A purge with the clock a long way ahead, then the clock set back.
        assert_eq!(
            store.purge_answers_before(20_000, 10).unwrap().generations,
            1
        );
        store.file_answers(&[answer("back", 10_100)]).unwrap();
        assert_eq!(found(&store, "back"), Some(10_100));
    }

    /// The generations and what they hold outlive a reopen; the next purge drops what expired.
    #[test]
    fn generations_are_found_again_after_a_reopen() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        for at in [1_000, 1_100, 1_200] {
            store
                .file_answers(&[answer(&format!("k{at}"), at)])
                .unwrap();
        }
        store.persist().unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        assert_eq!(generation_starts(&store), vec![1_000, 1_100, 1_200]);
        assert_eq!(found(&store, "k1100"), Some(1_100));
        assert_eq!(
            store.purge_answers_before(1_100, 10).unwrap().generations,
            1
        );
        assert_eq!(found(&store, "k1000"), None);
        assert_eq!(found(&store, "k1100"), Some(1_100));
        store.persist().unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(
            generation_starts(&store),
            vec![1_100, 1_200],
            "the drop lasts"
        );
    }

    /// A lookup compares the name stored under the digest: an answer filed under another name
    /// with the same digest (a collision) is never replayed to this caller.
    #[test]
    fn an_answer_under_the_same_digest_with_another_name_is_not_found() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        store.file_answers(&[answer("k", 1_000)]).unwrap();
        assert!(found(&store, "k").is_some());
        store
            .with(|open| {
                let named = Named {
                    name: answer_key("customer:2", "k"),
                    answer: store_answer(1_000),
                };
                let digest = digest(&answer_key("customer:1", "k"));
                let newest = open.generations.filling().unwrap();
                newest.insert(digest, encode(&named)?)?;
                Ok(())
            })
            .unwrap();
        assert_eq!(store.answer("customer:1", "k").unwrap(), None);
        assert_eq!(store.answer("customer:2", "k").unwrap(), None);
    }

    /// Idempotency lookups and a shard's recall block the thread a request runs on: each is
    /// counted with its time, and one that takes `SLOW_FOREGROUND_READ` or more is counted slow.
    #[test]
    fn reads_on_a_requests_path_are_counted_and_the_slow_ones_told_apart() {
        use crate::shard::cold::ColdHistory;
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        store.file_answers(&[answer("k", 1_000)]).unwrap();
        let before = store.foreground_reads();
        assert!(store.answer("customer:1", "k").unwrap().is_some());
        assert!(store.answer("customer:1", "other").unwrap().is_none());
        assert!(ColdHistory::payment(&store, crate::Uuid([9; 16]))
            .unwrap()
            .is_none());
        let after = store.foreground_reads();
        assert_eq!(after.reads - before.reads, 3, "two lookups and one recall");
        assert_eq!(after.slow, before.slow, "none of them slow");
        store.foreground("slow", || {
            std::thread::sleep(crate::runtime::history::SLOW_FOREGROUND_READ)
        });
        let slow = store.foreground_reads();
        assert_eq!((slow.reads, slow.slow), (after.reads + 1, after.slow + 1));
        assert!(
            slow.nanos - after.nanos
                >= u64::try_from(crate::runtime::history::SLOW_FOREGROUND_READ.as_nanos()).unwrap()
        );
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
        store.file_answers(&[answer("new", 5_000)]).unwrap();
        assert_eq!(store.purge_answers_before(1_005, 1_000).unwrap().answers, 5);
        assert!(store.answer("customer:1", "old4").unwrap().is_none());
        assert!(store.answer("customer:1", "old5").unwrap().is_some());
        assert_eq!(store.purge_answers_before(3_000, 1_000).unwrap().answers, 5);
        assert!(store.answer("customer:1", "new").unwrap().is_some());
        assert_eq!(store.purge_answers_before(3_000, 1_000).unwrap().answers, 0);
        assert!(
            store.answer("customer:1", "new").unwrap().is_some(),
            "inside the window"
        );
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

    /// An answer decided while the clock was ahead starts a generation of its own, which stays
    /// on disk until that answer expires (the purge says it is held back by it); the answers of
    /// the real time go into generations of their own times and are dropped as they expire.
    #[test]
    fn an_answer_from_the_future_holds_only_its_generation_back() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        store.retain_answers(400, 0).unwrap();
        let filed = vec![
            (1, answer("a", 1_000).1),
            (2, answer("ahead", 50_000).1),
            (3, answer("b", 1_002).1),
            (4, answer("c", 1_300).1),
        ];
        store.file_answers(&filed).unwrap();
        assert_eq!(generation_starts(&store), vec![1_000, 1_300, 50_000]);
        assert_eq!(
            store.purge_answers_before(1_001, 100).unwrap().generations,
            0
        );
        assert_eq!(store.purge_stopped_at(), Some(50_000));
        assert_eq!(
            store.purge_answers_before(2_000, 100).unwrap().generations,
            2
        );
        assert_eq!(
            store.purge_stopped_at(),
            Some(50_000),
            "held back by the future"
        );
        for key in ["a", "b", "c"] {
            assert_eq!(found(&store, key), None, "{key}");
        }
        assert_eq!(found(&store, "ahead"), Some(50_000));
        assert_eq!(
            store.purge_answers_before(50_001, 100).unwrap().generations,
            1
        );
        assert_eq!(store.purge_stopped_at(), None);
        assert_eq!(found(&store, "ahead"), None);
    }

    /// A store of key layout 2 (before answers by digest), 3 (with `counts`), 4 (one purge key
    /// per answer) or 5 (answers by digest) is marked with the current layout on open and any
    /// `counts` keyspace dropped, which a walletd from before refuses; a layout this build does
    /// not know is refused.
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
        for older in [2u8, 3, 4, 5] {
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
