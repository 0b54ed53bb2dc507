//! The answers' layout before generations (store layouts 4 and 5): read and drained, never
//! written.
//!
//! ```text
//! answers_by_digest  digest(caller, key)   -> (caller length | caller | key, StoredAnswer)
//! answers_by_lsn     lsn | digest[..12]    -> 1 | (lsn, decided at, digest) ...
//!                    the purge's index, in log order: a write batch's answers, keyed by its first
//! meta               "answers_by_lsn_purged_to"  -> the last index key purged
//! meta               "answers_digest_drained"    -> ()  nothing left after it: delete both
//! ```
//!
//! One keyspace held every live answer, keyed by the digest of its name, and the purge walked
//! an index in log order, read each answer back (to keep one whose key was used again later),
//! and removed it with a tombstone under its random key. Layout 4 indexed each answer under its
//! own key (`lsn | digest[..12]` -> `decided at | digest[12..]`, 12 bytes, which no group is);
//! layout 5 grouped a write batch's answers under one key, up to 256. The purge reads both.
//!
//! A store of those layouts keeps the two keyspaces until their answers expire: lookups ask
//! them after the generations, and each purge walks the index from where it stopped (kept in
//! `meta`: keys before it are tombstones, and walking them again each time once took a whole
//! core) and stops at the first answer still inside the window, writing back what is left of a
//! group it stopped in. Once nothing is left after that point, lookups stop asking, `meta`
//! marks the layout drained, and the next open deletes both keyspaces (not now: a drained
//! keyspace costs nothing, and deleting one under a reader's feet is not worth the care).

use std::ops::Bound;
use std::sync::atomic::{AtomicBool, Ordering};

use super::super::store::{decode, StoreError};
use super::{digest, Named, StoredAnswer};
use crate::runtime::history::writes::Writes;

/// The layout's keyspaces.
pub(crate) const KEYSPACES: [&str; 2] = ["answers_by_digest", "answers_by_lsn"];
/// The last `answers_by_lsn` key the purge removed: where the next purge starts.
const PURGED_TO: &[u8] = b"answers_by_lsn_purged_to";
/// In `meta`: nothing is left after the purge's resume point.
const DRAINED: &[u8] = b"answers_digest_drained";

/// Bytes of the digest in an index key (20 bytes of key were kept inline by `byteview`).
const LSN_KEY_DIGEST: usize = 12;

/// Most answers in one group of the index (32 bytes each), as layout 5 wrote them.
#[cfg(test)]
const GROUP_MAX: usize = 256;

/// The first byte of a group's value. A layout-4 entry is 12 bytes, a group `1 + 32 n`.
const GROUP_FORMAT: u8 = 1;

/// Bytes of one answer in a group: LSN, decision time, digest.
const GROUP_ITEM: usize = 32;

/// The layout's keyspaces in a store that has them.
pub(crate) struct DigestLayout {
    pub(crate) answers: fjall::Keyspace,
    pub(crate) index: fjall::Keyspace,
    /// The index still holds answers after the purge's resume point: lookups ask it.
    live: AtomicBool,
}

impl DigestLayout {
    pub(crate) fn keyspaces(&self) -> [&fjall::Keyspace; 2] {
        [&self.answers, &self.index]
    }

    pub(crate) fn live(&self) -> bool {
        self.live.load(Ordering::Acquire)
    }
}

/// Opens the layout's keyspaces where they exist, or deletes them once a purge marked them
/// drained. `options` is what they were created with (kept with a keyspace that exists).
pub(crate) fn open(
    db: &fjall::Database,
    meta: &fjall::Keyspace,
    options: fn(&str) -> fjall::KeyspaceCreateOptions,
) -> Result<Option<DigestLayout>, StoreError> {
    if !KEYSPACES.iter().any(|name| db.keyspace_exists(name)) {
        return Ok(None);
    }
    let [answers, index] = KEYSPACES.map(|name| db.keyspace(name, || options(name)));
    let (answers, index) = (answers?, index?);
    if meta.get(DRAINED)?.is_some() {
        // A crash between the two deletions leaves one: the next open deletes it.
        db.delete_keyspace(answers)?;
        db.delete_keyspace(index)?;
        tracing::info!("deleted the idempotency answers' digest-layout keyspaces (drained)");
        return Ok(None);
    }
    Ok(Some(DigestLayout {
        answers,
        index,
        live: AtomicBool::new(true),
    }))
}

/// The answer filed under `name`, while the layout has any.
pub(crate) fn lookup(
    layout: Option<&DigestLayout>,
    name: &[u8],
) -> Result<Option<StoredAnswer>, StoreError> {
    let Some(layout) = layout.filter(|layout| layout.live()) else {
        return Ok(None);
    };
    let digest = digest(name);
    let Some(bytes) = layout.answers.get(digest)? else {
        return Ok(None);
    };
    let named: Named = decode("answer", &digest, &bytes)?;
    Ok((named.name == name).then_some(named.answer))
}

/// One answer in the index.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct PurgeEntry {
    lsn: u64,
    at_ms: i64,
    digest: [u8; 16],
}

/// The index key of a group whose first answer is `first`: `lsn | digest[..12]`, in log order
/// (as layout 5 wrote them).
#[cfg(test)]
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

/// What one purge step over the layout did.
pub(crate) struct Purged {
    pub(crate) removed: usize,
    /// The decision time of the answer inside the window it stopped at, if it stopped at one.
    pub(crate) stopped_at_ms: Option<i64>,
}

/// Removes up to `most` answers decided before `cutoff_ms` (walking at most `most` of the
/// index) from where the last purge stopped (`resume`, read from `meta` the first time). An
/// answer whose key was used again later (a newer answer under the same name) is kept; only the
/// stale index entry goes. When nothing is left after the resume point the layout is marked
/// drained and lookups stop asking it.
pub(crate) fn purge(
    db: &fjall::Database,
    meta: &fjall::Keyspace,
    layout: &DigestLayout,
    resume: &mut Option<fjall::Slice>,
    cutoff_ms: i64,
    most: usize,
) -> Result<Purged, StoreError> {
    if resume.is_none() {
        *resume = meta.get(PURGED_TO)?;
    }
    let start = match resume.as_ref() {
        Some(key) => Bound::Excluded(key.to_vec()),
        None => Bound::Unbounded,
    };
    let mut writes = Writes::new(db);
    let mut removed = 0;
    let mut walked = 0;
    let mut last = None;
    let mut stopped_at_ms = None;
    let mut seen_any = false;
    'keys: for guard in layout.index.range((start, Bound::Unbounded)) {
        seen_any = true;
        if walked >= most {
            break;
        }
        let (index_key, index_value) = guard.into_inner()?;
        let entries = index_entries(&index_key, &index_value)?;
        for (done, entry) in entries.iter().enumerate() {
            let live = entry.at_ms >= cutoff_ms;
            if live || walked >= most {
                stopped_at_ms = live.then_some(entry.at_ms);
                // What is left of the group stays indexed under its key, which the next purge
                // starts at.
                if done > 0 {
                    let rest = entries.get(done..).unwrap_or_default();
                    writes.insert(&layout.index, index_key.to_vec(), group_value(rest));
                }
                break 'keys;
            }
            walked += 1;
            if let Some(bytes) = layout.answers.get(entry.digest)? {
                let named: Named = decode("answer", &entry.digest, &bytes)?;
                if named.answer.lsn == entry.lsn && named.answer.at_ms == entry.at_ms {
                    writes.remove(&layout.answers, entry.digest);
                    removed += 1;
                }
            }
        }
        writes.remove(&layout.index, index_key.to_vec());
        last = Some(index_key);
    }
    if !seen_any {
        meta.insert(DRAINED, Vec::new())?;
        layout.live.store(false, Ordering::Release);
        tracing::info!(
            "the idempotency answers' digest-layout index is drained: its keyspaces are deleted at the next open"
        );
        return Ok(Purged {
            removed: 0,
            stopped_at_ms: None,
        });
    }
    if let Some(key) = &last {
        writes.insert(meta, PURGED_TO, key.clone());
    }
    writes.commit()?;
    if last.is_some() {
        *resume = last;
    }
    Ok(Purged {
        removed,
        stopped_at_ms,
    })
}

#[cfg(test)]
mod tests {
    use super::super::{answer_key, encode};
    use super::*;
    use crate::runtime::history::HistoryStore;

    fn answer(key: &str, at_ms: i64) -> (u64, StoredAnswer, Vec<u8>) {
        // Logged in the order decided, as the indexer filed them.
        let lsn = at_ms as u64;
        (
            lsn,
            StoredAnswer {
                fingerprint: [1; 32],
                at_ms,
                lsn,
                response: b"{}".to_vec(),
            },
            answer_key("customer:1", key),
        )
    }

    /// A store with this layout's keyspaces, as a walletd of layout 5 left it.
    fn store_with_layout(dir: &std::path::Path) -> HistoryStore {
        {
            let db = fjall::Database::builder(dir).open().unwrap();
            for name in KEYSPACES {
                db.keyspace(name, fjall::KeyspaceCreateOptions::default)
                    .unwrap();
            }
            db.persist(fjall::PersistMode::SyncAll).unwrap();
        }
        HistoryStore::open(dir, 1 << 20).unwrap()
    }

    /// Files `answers` as layout 5 did: one write batch, its answers grouped by [`GROUP_MAX`]
    /// under the key of each group's first.
    fn file(store: &HistoryStore, answers: &[(u64, StoredAnswer, Vec<u8>)]) {
        store
            .with(|open| {
                let layout = open.digest_layout.as_ref().unwrap();
                let mut writes = Writes::new(&open.db);
                let mut entries = Vec::new();
                for (lsn, answer, name) in answers {
                    let digest = digest(name);
                    entries.push(PurgeEntry {
                        lsn: *lsn,
                        at_ms: answer.at_ms,
                        digest,
                    });
                    let named = Named {
                        name: name.clone(),
                        answer: answer.clone(),
                    };
                    writes.insert(&layout.answers, digest, encode(&named)?);
                }
                for chunk in entries.chunks(GROUP_MAX) {
                    writes.insert(&layout.index, group_key(&chunk[0]), group_value(chunk));
                }
                writes.commit()?;
                Ok(())
            })
            .unwrap();
    }

    fn purge(store: &HistoryStore, cutoff_ms: i64, most: usize) -> usize {
        store.purge_answers_before(cutoff_ms, most).unwrap().answers
    }

    fn found(store: &HistoryStore, key: &str) -> bool {
        store.answer("customer:1", key).unwrap().is_some()
    }

    /// Purges in steps remove every expired answer and no live one, and each starts after the
    /// last index key the one before removed, also after the store is opened again: an index
    /// entry planted behind that point is not walked again (the walk over tombstones is what
    /// took a whole core).
    #[test]
    fn purges_resume_after_the_last_key_they_removed() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        let filed: Vec<_> = (0..100)
            .map(|i| answer(&format!("k{i}"), 1_000 + i))
            .collect();
        // Ten write batches, so ten groups: a purge step may stop inside one.
        for batch in filed.chunks(10) {
            file(&store, batch);
        }
        let mut removed = 0;
        loop {
            let step = purge(&store, 1_050, 7);
            assert!(step <= 7);
            if step == 0 {
                break;
            }
            removed += step;
        }
        assert_eq!(removed, 50);
        for i in 0..100 {
            assert_eq!(found(&store, &format!("k{i}")), i >= 50, "k{i}");
        }
        assert_eq!(purge(&store, 1_080, 1_000), 30);
        // Logged behind where the purge stands (as a recovery might have filed it).
        file(&store, &[answer("late", 1_010)]);
        assert_eq!(purge(&store, 1_090, 1_000), 10);
        assert!(found(&store, "late"), "behind the resume point: not walked");
        assert!(found(&store, "k90"));
        store.persist().unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(purge(&store, 1_100, 1_000), 10);
        assert!(!found(&store, "k99"));
    }

    /// The purge walks its index in log order and stops at the first answer still inside the
    /// window: an answer decided out of log order is purged late, never early.
    #[test]
    fn the_purge_stops_at_the_first_live_answer_in_log_order() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        let mut a = answer("a", 1_000);
        let mut b = answer("b", 1_100);
        let mut c = answer("c", 1_001);
        for (lsn, filed) in [(1, &mut a), (2, &mut b), (3, &mut c)] {
            filed.0 = lsn;
            filed.1.lsn = lsn;
        }
        file(&store, &[a, b, c]);
        assert_eq!(purge(&store, 1_050, 100), 1);
        assert!(!found(&store, "a"));
        assert!(found(&store, "c"));
        assert_eq!(store.purge_stopped_at(), Some(1_100));
        assert_eq!(purge(&store, 1_200, 100), 2);
        assert!(!found(&store, "c"));
    }

    /// One write batch's answers share one index key (a group), and a purge that stops inside
    /// a group, at a live answer or at its bound, writes back the rest of it: those are purged
    /// later, none early, none left behind.
    #[test]
    fn a_purge_stopping_inside_a_group_keeps_the_rest() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        let filed: Vec<_> = (0..GROUP_MAX as i64 + 40)
            .map(|i| answer(&format!("k{i}"), 1_000 + i))
            .collect();
        file(&store, &filed);
        let index_keys = |store: &HistoryStore| {
            store
                .with(|open| Ok(open.digest_layout.as_ref().unwrap().index.iter().count()))
                .unwrap()
        };
        assert_eq!(index_keys(&store), 2, "{} answers, two groups", filed.len());

        // Stopped by its bound inside the first group, then by a live answer inside it.
        assert_eq!(purge(&store, 1_100, 30), 30);
        assert!(!found(&store, "k29"));
        assert!(found(&store, "k30"));
        assert_eq!(index_keys(&store), 2, "the rest of the group stays indexed");
        let first = store
            .with(|open| {
                let index = &open.digest_layout.as_ref().unwrap().index;
                let (key, value) = index.iter().next().unwrap().into_inner()?;
                index_entries(&key, &value)
            })
            .unwrap();
        assert_eq!(
            first.len(),
            GROUP_MAX - 30,
            "the walked answers leave the group"
        );
        assert_eq!(first[0].at_ms, 1_030);
        assert_eq!(purge(&store, 1_100, 1_000), 70);
        assert_eq!(store.purge_stopped_at(), Some(1_100));
        assert!(found(&store, "k100"));

        // Reopened, the purge goes on where it stopped, across both groups.
        store.persist().unwrap();
        store.close();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        assert_eq!(
            purge(&store, 1_000 + GROUP_MAX as i64 + 10, 1_000),
            GROUP_MAX - 100 + 10
        );
        let last = GROUP_MAX + 9;
        assert!(!found(&store, &format!("k{last}")));
        assert!(found(&store, &format!("k{}", last + 1)));
        assert_eq!(index_keys(&store), 1, "the first group is gone");
        assert_eq!(purge(&store, i64::MAX, 1_000), 30);
        assert_eq!(index_keys(&store), 0);
    }

    /// A store of layout 4 indexed each answer under its own key; those entries are purged in
    /// log order with the groups filed after them.
    #[test]
    fn per_answer_entries_of_layout_4_are_purged_with_the_groups_after_them() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        store
            .with(|open| {
                let layout = open.digest_layout.as_ref().unwrap();
                for i in 0..5i64 {
                    let (lsn, answer, name) = answer(&format!("old{i}"), 1_000 + i);
                    let digest = digest(&name);
                    let at_ms = answer.at_ms;
                    let named = Named { name, answer };
                    // Layout 4's entry: `lsn | digest[..12]` -> `decided at | digest[12..]`.
                    let mut key = lsn.to_be_bytes().to_vec();
                    key.extend_from_slice(&digest[..LSN_KEY_DIGEST]);
                    let mut value = at_ms.to_be_bytes().to_vec();
                    value.extend_from_slice(&digest[LSN_KEY_DIGEST..]);
                    layout.index.insert(key, value)?;
                    layout.answers.insert(digest, encode(&named)?)?;
                }
                Ok(())
            })
            .unwrap();
        let new: Vec<_> = (0..5)
            .map(|i| answer(&format!("new{i}"), 2_000 + i))
            .collect();
        file(&store, &new);
        assert_eq!(purge(&store, 1_003, 1_000), 3);
        assert!(found(&store, "old3"));
        assert_eq!(purge(&store, 2_002, 1_000), 4);
        assert!(!found(&store, "new1"));
        assert!(found(&store, "new2"));
        assert_eq!(purge(&store, i64::MAX, 1_000), 3);
    }

    /// An answer under the same name filed later in the generations (the key used again after
    /// its window) is the one found, and the purge of this layout's older answer leaves it.
    #[test]
    fn a_newer_answer_in_the_generations_is_found_first_and_survives_the_drain() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        file(&store, &[answer("k", 1_000)]);
        let newer = crate::runtime::journal::IdempotencyRecord {
            caller: "customer:1".into(),
            key: "k".into(),
            fingerprint: [2; 32],
            at_ms: 5_000,
            route: 2,
            response: Some(b"newer".to_vec()),
            transfer_uuid: None,
        };
        store.file_answers(&[(9_000, newer)]).unwrap();
        let held = store.answer("customer:1", "k").unwrap().unwrap();
        assert_eq!(held.response, b"newer");
        assert_eq!(purge(&store, 2_000, 1_000), 1);
        let held = store.answer("customer:1", "k").unwrap().unwrap();
        assert_eq!(held.response, b"newer");
    }

    /// Once the index has nothing after the resume point, lookups stop asking the layout, and
    /// the next open deletes its keyspaces; answers in the generations are unaffected.
    #[test]
    fn a_drained_layout_is_deleted_at_the_next_open() {
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        file(&store, &[answer("old", 1_000)]);
        assert!(found(&store, "old"));
        assert_eq!(purge(&store, 2_000, 1_000), 1);
        let live = store.with(|open| Ok(open.digest_layout.as_ref().unwrap().live()));
        assert!(live.unwrap(), "not yet known to be empty");
        assert_eq!(purge(&store, 2_000, 1_000), 0);
        let live = store.with(|open| Ok(open.digest_layout.as_ref().unwrap().live()));
        assert!(!live.unwrap(), "lookups stop asking the drained layout");
        store.persist().unwrap();
        store.close();

        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let exists = store.with(|open| {
            Ok((
                KEYSPACES.map(|name| open.db.keyspace_exists(name)),
                open.digest_layout.is_some(),
            ))
        });
        assert_eq!(exists.unwrap(), ([false, false], false));
    }

    /// A store of layout 5 opened by this build: marked 6, its digest-layout answers still
    /// found, new answers filed in generations beside them, and the drain goes on from there.
    #[test]
    fn a_layout_5_store_is_upgraded_and_keeps_its_answers() {
        use crate::runtime::history::epochs::{LAYOUT, LAYOUT_CURRENT};
        let dir = tempfile::tempdir().unwrap();
        let store = store_with_layout(dir.path());
        file(&store, &[answer("old", 1_000)]);
        store
            .with(|open| Ok(open.meta.insert(LAYOUT, [5u8])?))
            .unwrap();
        store.persist().unwrap();
        store.close();

        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let mark = store
            .with(|open| Ok(open.meta.get(LAYOUT)?.map(|l| l.to_vec())))
            .unwrap();
        assert_eq!(mark, Some(vec![LAYOUT_CURRENT]));
        assert!(found(&store, "old"));
        let new = crate::runtime::journal::IdempotencyRecord {
            caller: "customer:1".into(),
            key: "new".into(),
            fingerprint: [2; 32],
            at_ms: 2_000,
            route: 2,
            response: Some(b"{}".to_vec()),
            transfer_uuid: None,
        };
        store.file_answers(&[(2_000, new)]).unwrap();
        let (generations, digest_answers) = store
            .with(|open| {
                let layout = open.digest_layout.as_ref().unwrap();
                Ok((open.generations.count(), layout.answers.iter().count()))
            })
            .unwrap();
        assert_eq!(
            (generations, digest_answers),
            (1, 1),
            "the new one in a generation"
        );
        assert!(found(&store, "new") && found(&store, "old"));
        assert_eq!(purge(&store, 1_500, 1_000), 1);
        assert!(!found(&store, "old") && found(&store, "new"));
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
        let store = store_with_layout(dir.path());
        file(&store, &[answer("k", 1_000)]);
        assert!(found(&store, "k"));
        store
            .with(|open| {
                let (_, answer, _) = answer("k", 1_000);
                let named = Named {
                    name: answer_key("customer:2", "k"),
                    answer,
                };
                let digest = digest(&answer_key("customer:1", "k"));
                let layout = open.digest_layout.as_ref().unwrap();
                layout.answers.insert(digest, encode(&named)?)?;
                Ok(())
            })
            .unwrap();
        assert_eq!(store.answer("customer:1", "k").unwrap(), None);
        assert_eq!(store.answer("customer:2", "k").unwrap(), None);
    }
}
