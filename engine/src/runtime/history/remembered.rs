//! What the indexer remembers of recently filed wallets between batches (their chain heads,
//! report scopes, whether their entries need a marker, the newest epoch of each kind of their
//! records), so that filing reads or writes nothing extra for a wallet it saw lately.
//!
//! It is bounded by keys (a wallet, or a wallet and a kind), and forgets the least recently used half at a time: two
//! generations, the newer read first, an older hit moved into the newer; between batches, once
//! the newer holds half the bound, the older is dropped and the newer becomes it. Forgetting
//! everything at once instead (as the first version did) made every wallet miss again right
//! after: with 100,000 wallets in use and a bound of 65,536, about two thirds of the wallets a
//! batch touched were read back from the store (BENCHMARKS.md, "Remembered wallets").

use std::hash::Hash;

use rustc_hash::FxHashMap as HashMap;

/// A memory keyed by wallet id, or by anything else as small (see the module docs).
pub(crate) struct Remembered<V, K = u64> {
    newer: HashMap<K, V>,
    older: HashMap<K, V>,
}

impl<V, K> Default for Remembered<V, K> {
    fn default() -> Self {
        Self {
            newer: HashMap::default(),
            older: HashMap::default(),
        }
    }
}

impl<V: Copy, K: Copy + Eq + Hash> Remembered<V, K> {
    /// The value remembered for `key`, now the most recently used.
    pub(crate) fn get(&mut self, key: K) -> Option<V> {
        if let Some(value) = self.newer.get(&key) {
            return Some(*value);
        }
        let value = self.older.remove(&key)?;
        self.newer.insert(key, value);
        Some(value)
    }

    pub(crate) fn contains(&mut self, key: K) -> bool {
        self.get(key).is_some()
    }

    pub(crate) fn insert(&mut self, key: K, value: V) {
        self.newer.insert(key, value);
    }

    pub(crate) fn remove(&mut self, key: K) {
        self.newer.remove(&key);
        self.older.remove(&key);
    }

    pub(crate) fn clear(&mut self) {
        self.newer.clear();
        self.older.clear();
    }

    /// Keys remembered (at most `bound` plus what one batch added, after [`Self::settle`]).
    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.newer.len() + self.older.len()
    }

    /// Between batches: once the newer generation holds half of `bound`, forgets the older
    /// (its table is kept, emptied, for the next newer generation: no regrowth each time).
    pub(crate) fn settle(&mut self, bound: usize) {
        if self.newer.len() >= bound / 2 {
            std::mem::swap(&mut self.newer, &mut self.older);
            self.newer.clear();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::Remembered;

    /// Settling forgets the least recently used wallets, half the bound at a time, never the
    /// ones used since the last settle; a value read from the older half stays.
    #[test]
    fn settling_forgets_the_least_recently_used_half() {
        let mut memory = Remembered::default();
        for wallet in 0..4 {
            memory.insert(wallet, wallet * 10);
        }
        memory.settle(8);
        assert_eq!(memory.len(), 4);
        // Wallet 1 is used again; 4 and 5 are new.
        assert_eq!(memory.get(1), Some(10));
        memory.insert(4, 40);
        memory.insert(5, 50);
        memory.settle(8);
        memory.insert(6, 60);
        memory.settle(8);
        // 1, 4, 5 and 6 were the newer half: 0, 2 and 3 went with the older.
        let expected = [
            (0, None),
            (2, None),
            (3, None),
            (1, Some(10)),
            (4, Some(40)),
            (5, Some(50)),
            (6, Some(60)),
        ];
        for (wallet, kept) in expected {
            assert_eq!(memory.get(wallet), kept, "wallet {wallet}");
        }
        assert!(memory.len() <= 8);
        // The newest value wins over an older generation's.
        memory.settle(2);
        memory.insert(4, 41);
        assert_eq!(memory.get(4), Some(41));
        memory.remove(4);
        assert_eq!(memory.get(4), None);
        assert!(memory.contains(1));
        memory.clear();
        assert_eq!(memory.len(), 0);
    }
}
