//! One atomic write to the store, applied to its memtables in key order.
//!
//! fjall applies a write batch item by item, in the order it was written, and each item is one
//! insert into its keyspace's memtable: a skiplist searched from the top. The indexer writes in
//! event order, which hops between wallets, so each search walked its own path of nodes through
//! a memtable of tens of thousands. Applied in key order, each search follows the path of the
//! one before it as far as their keys share it, through nodes that search left in the cache.
//! Under batches of 1,000 transfers the indexer's CPU per transfer fell by 3.6 to 7 %; under
//! single requests, whose filing batches are small, it did not change (BENCHMARKS.md, "Writes
//! in key order").
//!
//! The items are sorted by key alone, and stably: a keyspace's items then come in key order, and
//! two writes of one key in one keyspace keep their order, so the later one still wins. Items
//! of different keyspaces interleave, which changes nothing: every item of a batch gets the
//! same sequence number, and a reader sees all of them or none; fjall's journal records them in
//! the order applied, and its recovery replays a batch whole, in that order, or not at all.

/// A write batch that hands its items to fjall sorted by key ([`Writes::commit`]).
pub(crate) struct Writes {
    db: fjall::Database,
    items: Vec<Item>,
}

struct Item {
    /// The key's first 24 bytes as two integers (most keys are no longer), then the item's
    /// position in the batch: what the sort compares, the whole key only on a tie of the first.
    head: (u128, u64),
    at: usize,
    keyspace: fjall::Keyspace,
    key: fjall::UserKey,
    /// `None` removes the key.
    value: Option<fjall::UserValue>,
}

impl Writes {
    pub(crate) fn new(db: &fjall::Database) -> Self {
        Writes {
            db: db.clone(),
            items: Vec::new(),
        }
    }

    pub(crate) fn insert<K: Into<fjall::UserKey>, V: Into<fjall::UserValue>>(
        &mut self,
        keyspace: &fjall::Keyspace,
        key: K,
        value: V,
    ) {
        self.push(keyspace, key.into(), Some(value.into()));
    }

    pub(crate) fn remove<K: Into<fjall::UserKey>>(&mut self, keyspace: &fjall::Keyspace, key: K) {
        self.push(keyspace, key.into(), None);
    }

    fn push(
        &mut self,
        keyspace: &fjall::Keyspace,
        key: fjall::UserKey,
        value: Option<fjall::UserValue>,
    ) {
        let (mut high, mut low) = ([0u8; 16], [0u8; 8]);
        for (slot, byte) in high.iter_mut().chain(&mut low).zip(key.iter()) {
            *slot = *byte;
        }
        self.items.push(Item {
            head: (u128::from_be_bytes(high), u64::from_be_bytes(low)),
            at: self.items.len(),
            keyspace: keyspace.clone(),
            key,
            value,
        });
    }

    /// Commits every write atomically, in key order (input already in order, such as a layout
    /// copy's, costs the sort one pass).
    pub(crate) fn commit(self) -> fjall::Result<()> {
        let Writes { db, mut items } = self;
        if items.is_empty() {
            return Ok(());
        }
        // The position breaks every tie, so this unstable sort keeps writes of one key in the
        // order written (sorting by the slices alone cost the indexer as much as the ordered
        // inserts saved).
        items.sort_unstable_by(|a, b| {
            a.head
                .cmp(&b.head)
                .then_with(|| a.key.cmp(&b.key))
                .then(a.at.cmp(&b.at))
        });
        // `Database::batch`, not `WriteBatch::with_capacity`: only the former asks the commit
        // to hand the journal's buffer to the OS, which the store's durability rests on (a
        // killed process loses nothing it committed; `super::store`, "Durability").
        let mut batch = db.batch();
        for item in items {
            match item.value {
                Some(value) => batch.insert(&item.keyspace, item.key, value),
                None => batch.remove(&item.keyspace, item.key),
            }
        }
        batch.commit()
    }
}

#[cfg(test)]
mod tests {
    use super::Writes;

    fn open() -> (
        tempfile::TempDir,
        fjall::Database,
        fjall::Keyspace,
        fjall::Keyspace,
    ) {
        let dir = tempfile::tempdir().unwrap();
        let db = fjall::Database::builder(dir.path()).open().unwrap();
        let a = db
            .keyspace("a", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        let b = db
            .keyspace("b", fjall::KeyspaceCreateOptions::default)
            .unwrap();
        (dir, db, a, b)
    }

    fn value(keyspace: &fjall::Keyspace, key: &[u8]) -> Option<Vec<u8>> {
        keyspace.get(key).unwrap().map(|value| value.to_vec())
    }

    /// Sorting by key must not reorder two writes of one key: the later one wins, as it would
    /// in the order they were written, whether it is an insert or a remove.
    #[test]
    fn the_later_write_of_a_key_wins_after_sorting() {
        let (_dir, db, a, b) = open();
        let mut writes = Writes::new(&db);
        writes.insert(&a, b"k2".to_vec(), b"first".to_vec());
        writes.insert(&a, b"k1".to_vec(), b"one".to_vec());
        writes.insert(&b, b"k2".to_vec(), b"other keyspace".to_vec());
        writes.insert(&a, b"k2".to_vec(), b"second".to_vec());
        writes.insert(&a, b"k3".to_vec(), b"gone".to_vec());
        writes.remove(&a, b"k3".to_vec());
        writes.remove(&a, b"k4".to_vec());
        writes.insert(&a, b"k4".to_vec(), b"back".to_vec());
        // Keys longer than the 24 bytes the sort compares as integers, alike in those bytes.
        let long = |last: u8| [[7u8; 24].as_slice(), &[last]].concat();
        writes.insert(&a, long(2), b"long first".to_vec());
        writes.insert(&a, long(1), b"long one".to_vec());
        writes.insert(&a, long(2), b"long second".to_vec());
        writes.commit().unwrap();

        assert_eq!(value(&a, b"k1").as_deref(), Some(&b"one"[..]));
        assert_eq!(value(&a, b"k2").as_deref(), Some(&b"second"[..]));
        assert_eq!(value(&a, b"k3"), None);
        assert_eq!(value(&a, b"k4").as_deref(), Some(&b"back"[..]));
        assert_eq!(value(&b, b"k2").as_deref(), Some(&b"other keyspace"[..]));
        assert_eq!(value(&a, &long(1)).as_deref(), Some(&b"long one"[..]));
        assert_eq!(value(&a, &long(2)).as_deref(), Some(&b"long second"[..]));
    }

    /// The batch is atomic and lands in each keyspace whole; an empty one is a no-op.
    #[test]
    fn every_write_lands_in_its_own_keyspace() {
        let (_dir, db, a, b) = open();
        Writes::new(&db).commit().unwrap();
        let mut writes = Writes::new(&db);
        for key in (0u32..500).rev() {
            let keyspace = if key % 2 == 0 { &a } else { &b };
            writes.insert(
                keyspace,
                key.to_be_bytes().to_vec(),
                key.to_le_bytes().to_vec(),
            );
        }
        writes.commit().unwrap();
        assert_eq!(a.len().unwrap(), 250);
        assert_eq!(b.len().unwrap(), 250);
        for key in 0u32..500 {
            let (here, there) = if key % 2 == 0 { (&a, &b) } else { (&b, &a) };
            assert_eq!(
                value(here, &key.to_be_bytes()).as_deref(),
                Some(&key.to_le_bytes()[..])
            );
            assert_eq!(value(there, &key.to_be_bytes()), None);
        }
    }

    /// Thousands of interleaved writes to a few dozen keys, short and long, inserts and
    /// removes: each key ends as its last write left it. A sort that lost the writes' order
    /// among equal keys (the position tie-break) would scramble these.
    #[test]
    fn many_writes_of_few_keys_keep_their_order() {
        let (_dir, db, a, _) = open();
        let key = |slot: u32| {
            let tail = slot.to_be_bytes();
            if slot.is_multiple_of(2) {
                tail.to_vec()
            } else {
                [[9u8; 24].as_slice(), &tail].concat()
            }
        };
        let mut last = std::collections::HashMap::new();
        let mut writes = Writes::new(&db);
        for at in 0u32..5_000 {
            let slot = at.wrapping_mul(2_654_435_761) % 37;
            if at % 7 == 3 {
                writes.remove(&a, key(slot));
                last.insert(slot, None);
            } else {
                writes.insert(&a, key(slot), at.to_be_bytes().to_vec());
                last.insert(slot, Some(at.to_be_bytes().to_vec()));
            }
        }
        writes.commit().unwrap();
        assert_eq!(last.len(), 37);
        for (slot, expected) in last {
            assert_eq!(value(&a, &key(slot)), expected, "slot {slot}");
        }
    }

    /// A commit hands its bytes to the OS at once (the store's durability: a killed process
    /// loses nothing it committed), not only when fjall's 8 KiB journal buffer fills: the
    /// value is in the journal's file right after the commit, read through the OS.
    #[test]
    fn a_commit_reaches_the_os() {
        fn journals(dir: &std::path::Path, found: &mut Vec<Vec<u8>>) {
            for entry in std::fs::read_dir(dir).unwrap() {
                let path = entry.unwrap().path();
                if path.is_dir() {
                    journals(&path, found);
                } else if path.extension().is_some_and(|ext| ext == "jnl") {
                    found.push(std::fs::read(path).unwrap());
                }
            }
        }
        let (dir, db, a, _) = open();
        // Bytes that neither repeat nor compress, so the journal holds them verbatim.
        let mut state = 0x9e37_79b9_7f4a_7c15_u64;
        let value: Vec<u8> = (0..512)
            .map(|_| {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                state.to_le_bytes()[0]
            })
            .collect();
        let mut writes = Writes::new(&db);
        writes.insert(&a, b"key".to_vec(), value.clone());
        writes.commit().unwrap();
        let mut files = Vec::new();
        journals(dir.path(), &mut files);
        assert!(!files.is_empty(), "no journal file");
        let written = files.iter().any(|file| {
            let used = file
                .iter()
                .rposition(|byte| *byte != 0)
                .map_or(0, |at| at + 1);
            file.get(..used)
                .unwrap_or_default()
                .windows(value.len())
                .any(|window| window == value.as_slice())
        });
        assert!(
            written,
            "the committed value is not in the journal's file yet"
        );
    }
}
