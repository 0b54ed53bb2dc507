//! A concurrent memory that forgets by generations instead of all at once.
//!
//! Several lookups on a request's path are cached in memory: a wallet's scope (the engine's
//! permission check), a verified bearer token (the API's). Each used to be a map cleared
//! wholesale once it reached its bound, so that past the bound every entry in use missed again
//! at the same moment, and the clear itself ran on the request that crossed it (BENCHMARKS.md,
//! "A new wallet's first records read nothing" for the tokens).
//!
//! [`Forgetful`] is bounded by entries and forgets those not used lately. Every half of the
//! bound's worth of entries remembered (or moved, below) opens a new generation, and entries of
//! neither the new generation nor the one before are dropped then: one `retain` over the map,
//! on the call that opened it, so that call still pays for a pass over up to the bound's
//! entries (once per half bound of misses, never for hits of the current generation). An entry
//! used again is moved into the current generation (once per generation), so an entry in use is
//! never forgotten for being old. The map holds about the bound at most: the two newest
//! generations, each about half of it (a few more while threads race a turn). A working set
//! smaller than half the bound stops turning once it is all moved forward.
//!
//! There is no `remove`: a `get` moving an entry could bring a removed one back, so adding one
//! needs a tombstone or a generation check. The predicates run under the map's locks and must
//! not use the same memory. The indexer's single-threaded memory (`history::remembered`) turns
//! on the same two generations, counted by keys in its newer half rather than by events.

use std::borrow::Borrow;
use std::hash::Hash;
use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

/// A bounded concurrent memory (see the module docs).
pub struct Forgetful<K, V> {
    map: DashMap<K, Tagged<V>>,
    /// Entries remembered or moved into a newer generation since the start: a new generation
    /// opens at each multiple of `half`.
    counted: AtomicU64,
    generation: AtomicU64,
    half: u64,
}

struct Tagged<V> {
    value: V,
    generation: u64,
}

impl<K: Eq + Hash, V: Clone> Forgetful<K, V> {
    /// A memory of at most about `bound` entries.
    #[must_use]
    pub fn new(bound: usize) -> Self {
        Forgetful {
            map: DashMap::new(),
            counted: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            half: (bound as u64 / 2).max(1),
        }
    }

    /// The value remembered for `key` if `usable` accepts it. A usable value of an older
    /// generation is moved into the current one. `keep` is the rule for every entry's value
    /// should this call open a generation: an entry it refuses is dropped then, whatever its
    /// generation (an expired token, say); a value `usable` refuses is left for that. Both run
    /// under the map's locks: neither may use this memory.
    pub fn get<Q>(
        &self,
        key: &Q,
        usable: impl Fn(&V) -> bool,
        keep: impl Fn(&V) -> bool,
    ) -> Option<V>
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ToOwned<Owned = K> + ?Sized,
    {
        let current = self.generation.load(Ordering::Acquire);
        let (value, stale) = {
            let tagged = self.map.get(key)?;
            if !usable(&tagged.value) {
                return None;
            }
            (tagged.value.clone(), tagged.generation != current)
        };
        if stale {
            // No guard is held here: the turn may retain over the whole map. It may also drop
            // this very entry (its generation was the one forgotten), so it is remembered anew.
            let generation = self.turn(keep);
            self.map
                .entry(key.to_owned())
                .and_modify(|tagged| tagged.generation = generation)
                .or_insert_with(|| Tagged {
                    value: value.clone(),
                    generation,
                });
        }
        Some(value)
    }

    /// Remembers `value` for `key` in the current generation (`keep` as for [`Self::get`]).
    pub fn insert(&self, key: K, value: V, keep: impl Fn(&V) -> bool) {
        let generation = self.turn(keep);
        self.map.insert(key, Tagged { value, generation });
    }

    /// Counts one entry into the current generation, opening a new one (and dropping what is
    /// older than the one before it, or what `keep` refuses) at each `half`; the generation to
    /// tag the entry with.
    fn turn(&self, keep: impl Fn(&V) -> bool) -> u64 {
        let counted = self.counted.fetch_add(1, Ordering::AcqRel) + 1;
        if !counted.is_multiple_of(self.half) {
            return self.generation.load(Ordering::Acquire);
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.map
            .retain(|_, tagged| tagged.generation + 1 >= generation && keep(&tagged.value));
        generation
    }

    /// Whether `key` is in memory at all, usable or not.
    pub fn holds<Q>(&self, key: &Q) -> bool
    where
        K: Borrow<Q>,
        Q: Hash + Eq + ?Sized,
    {
        self.map.contains_key(key)
    }

    /// Entries in memory (the tests' view: no caller needs it).
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }

    #[cfg(test)]
    fn is_empty(&self) -> bool {
        self.map.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::Forgetful;

    fn always(_: &u64) -> bool {
        true
    }

    /// A new generation drops the entries of neither of the last two generations, keeps an
    /// entry used since, and the memory never holds more than the bound.
    #[test]
    fn entries_are_forgotten_by_generations_and_a_used_one_stays() {
        let memory = Forgetful::new(8);
        for key in 0..4u64 {
            memory.insert(key, key * 10, always);
        }
        // Key 3 opened generation 1; key 0 is used again and moves into it.
        assert_eq!(memory.len(), 4);
        assert_eq!(memory.get(&0, always, always), Some(0));
        memory.insert(4, 40, always);
        memory.insert(5, 50, always);
        // Key 6 opens generation 2: 1 and 2 (generation 0, unused since) are forgotten.
        memory.insert(6, 60, always);
        for gone in [1, 2] {
            assert!(!memory.holds(&gone), "{gone} was forgotten");
            assert_eq!(memory.get(&gone, always, always), None);
        }
        for (kept, value) in [(0, 0), (3, 30), (4, 40), (5, 50), (6, 60)] {
            assert_eq!(memory.get(&kept, always, always), Some(value), "{kept}");
        }
        for key in 100..140u64 {
            memory.insert(key, key, always);
            assert!(memory.len() <= 8, "bounded after {key}: {}", memory.len());
        }
    }

    /// An entry whose move into the current generation is the count that opens the next one
    /// (and so drops its old generation) stays, with its value.
    #[test]
    fn an_entry_moved_by_the_turn_that_drops_its_generation_stays() {
        let memory = Forgetful::new(8);
        for key in 0..7u64 {
            memory.insert(key, key + 100, always);
        }
        // Generation 1 holds 3 to 6; 0 is generation 0. Using it is count 8: generation 2
        // opens and keeps generations 1 and 2 only.
        assert_eq!(memory.get(&0, always, always), Some(100));
        assert!(memory.holds(&0), "0 stays");
        assert!(!memory.holds(&1) && !memory.holds(&2), "1 and 2 are gone");
        // It was tagged with the generation its move opened (2), not the one it read before
        // (1): the next generation, 3, still keeps it, and drops 3 to 6 (generation 1).
        for key in 10..14u64 {
            memory.insert(key, key, always);
        }
        assert!(
            memory.holds(&0),
            "0 is in generation 2, kept by generation 3"
        );
        for gone in 3..7u64 {
            assert!(!memory.holds(&gone), "{gone} was in generation 1");
        }
    }

    /// Hits of the current generation count nothing: however often an entry is read, the
    /// entries beside it are forgotten no sooner.
    #[test]
    fn reading_a_current_entry_opens_no_generation() {
        let memory = Forgetful::new(8);
        for key in 0..3u64 {
            memory.insert(key, key, always);
        }
        for _ in 0..100 {
            assert_eq!(memory.get(&0, always, always), Some(0));
        }
        // Count 4 opens generation 1 and keeps generation 0 as the one before.
        memory.insert(3, 3, always);
        for key in 0..4u64 {
            assert!(memory.holds(&key), "{key} is kept");
        }
    }

    /// A turn that a `get` opens applies that call's `keep` to every entry.
    #[test]
    fn a_turn_opened_by_a_get_drops_what_its_keep_refuses() {
        let memory: Forgetful<u64, u64> = Forgetful::new(4);
        let unexpired_at = |now: u64| move |expires_at: &u64| *expires_at > now;
        memory.insert(1, 1_000, unexpired_at(0));
        memory.insert(2, 50, unexpired_at(0)); // count 2: generation 1; both kept
        memory.insert(3, 1_000, unexpired_at(0));
        // 1 is in generation 0: reading it is count 4, which opens generation 2 with a keep
        // at time 100, under which 2 has expired (and 3 is in generation 1, kept).
        assert_eq!(
            memory.get(&1, unexpired_at(100), unexpired_at(100)),
            Some(1_000)
        );
        assert!(!memory.holds(&2), "expired, dropped by the get's turn");
        assert!(memory.holds(&1) && memory.holds(&3));
    }

    /// A value `usable` refuses is not served and not moved; the next generation drops every
    /// value `keep` refuses, whatever its generation.
    #[test]
    fn a_refused_value_is_not_served_and_keep_drops_it_at_the_next_turn() {
        let memory: Forgetful<String, u64> = Forgetful::new(8);
        let unexpired_at = |now: u64| move |expires_at: &u64| *expires_at > now;
        memory.insert("old".to_owned(), 500, unexpired_at(100));
        memory.insert("new".to_owned(), 5_000, unexpired_at(100));
        assert_eq!(
            memory.get("old", unexpired_at(499), unexpired_at(499)),
            Some(500)
        );
        assert_eq!(
            memory.get("old", unexpired_at(500), unexpired_at(500)),
            None
        );
        assert!(memory.holds("old"), "held until a generation opens");
        memory.insert("x".to_owned(), 5_000, unexpired_at(600));
        memory.insert("y".to_owned(), 5_000, unexpired_at(600));
        assert!(!memory.holds("old"), "dropped when generation 1 opened");
        assert!(memory.holds("new"));
        assert!(!memory.is_empty());
    }

    /// Threads remembering and reading the same keys at once only ever read the value of the
    /// key they asked, and the memory stays within its bound while they run.
    #[test]
    fn concurrent_use_stays_bounded_and_exact() {
        let memory = std::sync::Arc::new(Forgetful::new(64));
        let threads: Vec<_> = (0..4u64)
            .map(|thread| {
                let memory = memory.clone();
                std::thread::spawn(move || {
                    for n in 0..5_000u64 {
                        // Every thread walks the same 1,000 keys, each from its own offset.
                        let key = (n * 7 + thread * 250) % 1_000;
                        if n % 3 == 0 {
                            memory.insert(key, key * 3, always);
                        }
                        if let Some(value) = memory.get(&key, always, always) {
                            assert_eq!(value, key * 3, "the value of {key}");
                        }
                        // While others change it, `len` sums its shards one at a time (an
                        // entry a retain is about to drop and one inserted after can both
                        // count): only a memory that stopped forgetting would pass twice the
                        // bound.
                        assert!(memory.len() <= 2 * 64, "{} entries", memory.len());
                    }
                })
            })
            .collect();
        for thread in threads {
            thread.join().expect("a thread of the test");
        }
        // At rest: two generations of half the bound, plus at most one entry a thread tagged
        // before the last turn and inserted after its retain.
        assert!(memory.len() <= 64 + 4, "{} entries", memory.len());
    }
}
