//! Idempotency answers in the history store: the rendered answer to every keyed request, kept for
//! the retention window and then purged (issue 14, item 7).
//!
//! ```text
//! answers       caller length (u16) | caller | key       -> StoredAnswer
//! answer_times  answered at | caller length | caller | key -> ()   the purge's index
//! meta          "answers_since"                          -> u64   first LSN whose answer is filed
//! ```
//!
//! The indexer files an answer with the rest of its WAL record, in the same write batch, so the
//! store holds an answer exactly when it covers the record's LSN. Then the in-memory table drops
//! it ([`crate::runtime::idempotency::IdempotencyTable::forget_filed`]).
//!
//! A store written before answers were filed has no `answers_since`: it is taken to be the LSN
//! after what the store covered, and recovery files the answers of the records it replays below
//! it (and those an older snapshot carried) before the engine serves; then it is 0.

use serde::{Deserialize, Serialize};

use super::store::{decode, encode, numbers, time_key, HistoryStore, Open, StoreError};
use crate::runtime::journal::IdempotencyRecord;

pub(crate) const ANSWERS_SINCE: &[u8] = b"answers_since";
/// The last `answer_times` key the purge removed: where the next purge starts.
const PURGED_TO: &[u8] = b"answers_purged_to";

/// One filed answer.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct StoredAnswer {
    /// Digest of what was asked.
    pub fingerprint: [u8; 32],
    /// When it was decided (unix ms): the retention window runs from here.
    pub at_ms: i64,
    /// The WAL record that logged it (0: carried by an older snapshot).
    pub lsn: u64,
    /// The rendered answer, replayed verbatim.
    pub response: Vec<u8>,
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

fn time_index_key(at_ms: i64, answer_key: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(8 + answer_key.len());
    out.extend_from_slice(&time_key(at_ms).to_be_bytes());
    out.extend_from_slice(answer_key);
    out
}

/// Adds `record`'s answer (logged at `lsn`) to `writes`. Records without an answer (the pending
/// key of an unfinished move) are hot state and not filed.
pub(crate) fn file_answer(
    open: &Open,
    writes: &mut fjall::OwnedWriteBatch,
    record: &IdempotencyRecord,
    lsn: u64,
) -> Result<(), StoreError> {
    let Some(response) = &record.response else {
        return Ok(());
    };
    let key = answer_key(&record.caller, &record.key);
    let stored = StoredAnswer {
        fingerprint: record.fingerprint,
        at_ms: record.at_ms,
        lsn,
        response: response.clone(),
    };
    writes.insert(
        &open.answer_times,
        time_index_key(record.at_ms, &key),
        Vec::new(),
    );
    writes.insert(&open.answers, key, encode(&stored)?);
    Ok(())
}

impl HistoryStore {
    /// The answer filed under (`caller`, `key`), expired or not.
    pub fn answer(&self, caller: &str, key: &str) -> Result<Option<StoredAnswer>, StoreError> {
        self.with(|open| {
            let key = answer_key(caller, key);
            match open.answers.get(&key)? {
                Some(bytes) => decode("answer", &key, &bytes).map(Some),
                None => Ok(None),
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
            for (lsn, record) in records {
                let key = answer_key(&record.caller, &record.key);
                if let Some(bytes) = open.answers.get(&key)? {
                    let held: StoredAnswer = decode("answer", &key, &bytes)?;
                    if held.at_ms >= record.at_ms {
                        continue;
                    }
                }
                file_answer(open, &mut writes, record, *lsn)?;
            }
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

    /// Removes up to `most` answers decided before `cutoff_ms`; answers how many it removed. An
    /// answer whose key was used again later (a newer answer under the same key) is kept, only
    /// the stale index entry goes.
    ///
    /// It starts after the last index key it removed before (kept in `meta`, written in the
    /// purge's own batch, so a reopened store resumes there too): keys before it are tombstones
    /// until compaction drops them, and a purge
    /// that walked them again each time spent ever longer on them. In an hour-long soak with a
    /// 10-minute window that walk took the indexer's whole core from the first expiry on, and
    /// throughput fell from ~11k to ~400 req/s (BENCHMARKS.md). New answers are decided now,
    /// after every cutoff so far, so none lands behind the resume point.
    pub fn purge_answers_before(&self, cutoff_ms: i64, most: usize) -> Result<usize, StoreError> {
        use std::ops::Bound;
        let mut purged_to = self
            .purged_to
            .lock()
            .unwrap_or_else(std::sync::PoisonError::into_inner);
        self.with(|open| {
            if purged_to.is_none() {
                *purged_to = open.meta.get(PURGED_TO)?;
            }
            let end = Bound::Excluded(time_key(cutoff_ms).to_be_bytes().to_vec());
            let start = match purged_to.as_ref() {
                Some(key) => Bound::Excluded(key.to_vec()),
                None => Bound::Unbounded,
            };
            let mut writes = open.db.batch();
            let mut removed = 0;
            let mut last = None;
            for guard in open.answer_times.range((start, end)).take(most) {
                let (index_key, _) = guard.into_inner()?;
                let Some((at, answer_key)) = index_key.split_at_checked(8) else {
                    return Err(StoreError::Corrupt {
                        what: "answer time",
                        key: hex::encode(&index_key),
                        reason: "shorter than its time".into(),
                    });
                };
                let at = numbers::<1>("answer time", at)?[0];
                if let Some(bytes) = open.answers.get(answer_key)? {
                    let stored: StoredAnswer = decode("answer", answer_key, &bytes)?;
                    if time_key(stored.at_ms) == at {
                        writes.remove(&open.answers, answer_key);
                        removed += 1;
                    }
                }
                writes.remove(&open.answer_times, index_key.to_vec());
                last = Some(index_key);
            }
            if let Some(key) = &last {
                writes.insert(&open.meta, PURGED_TO, key.clone());
            }
            writes.commit()?;
            if last.is_some() {
                *purged_to = last;
            }
            Ok(removed)
        })
    }
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
        (1, record)
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
        store.file_answers(&filed).unwrap();
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
}
