//! [`Recent`]: the records of one wallet that are still in memory, in ascending id order, each
//! stamped with the shard's command sequence number of the command that last changed it.
//!
//! Memory holds hot state only (ARCHITECTURE.md, invariant 10): a record stays here while the
//! history indexer has not filed its latest version (or, for a hold, while it is active), and is
//! evicted once it has ([`Recent::evict`]); the store then answers for it. A shard that has no
//! store (a pure `Shard` in tests and benches) never evicts, so there this is the whole history.
//!
//! Serialized, it is exactly the sequence of records, without stamps: records loaded from a
//! snapshot are stamped 0, older than any command of the running process.

use std::collections::VecDeque;
use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Records in ascending id order with the stamp of their last change.
#[derive(Clone, PartialEq, Eq)]
pub struct Recent<T> {
    items: VecDeque<(u64, T)>,
}

impl<T> Default for Recent<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: 'static> Recent<T> {
    const EMPTY: &'static Self = &Self::new();

    /// An empty sequence to lend where there is none (an idle wallet's history).
    #[must_use]
    pub const fn empty() -> &'static Self {
        Self::EMPTY
    }
}

impl<T: fmt::Debug> fmt::Debug for Recent<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> Recent<T> {
    #[must_use]
    pub const fn new() -> Self {
        Recent {
            items: VecDeque::new(),
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.items.len()
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.items.is_empty()
    }

    /// Appends the newest record (its id is above every id held).
    pub(crate) fn push(&mut self, stamp: u64, value: T) {
        self.items.push_back((stamp, value));
    }

    #[must_use]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.items.get(index).map(|(_, value)| value)
    }

    #[must_use]
    pub fn first(&self) -> Option<&T> {
        self.items.front().map(|(_, value)| value)
    }

    #[must_use]
    pub fn last(&self) -> Option<&T> {
        self.items.back().map(|(_, value)| value)
    }

    /// Oldest first; reversible and exact-sized.
    pub fn iter(&self) -> impl DoubleEndedIterator<Item = &T> + ExactSizeIterator + Clone + '_ {
        self.items.iter().map(|(_, value)| value)
    }

    fn position<K: Ord>(&self, key: &K, mut key_of: impl FnMut(&T) -> K) -> Result<usize, usize> {
        self.items
            .binary_search_by(|(_, element)| key_of(element).cmp(key))
    }

    /// The record whose ascending `key` equals `key`.
    pub fn find_by_key<K: Ord>(&self, key: &K, key_of: impl FnMut(&T) -> K) -> Option<&T> {
        let index = self.position(key, key_of).ok()?;
        self.get(index)
    }

    /// The record whose ascending `key` equals `key`, to change under command `stamp`.
    pub(crate) fn find_by_key_mut<K: Ord>(
        &mut self,
        key: &K,
        key_of: impl FnMut(&T) -> K,
        stamp: u64,
    ) -> Option<&mut T> {
        let index = self.position(key, key_of).ok()?;
        let (at, value) = self.items.get_mut(index)?;
        *at = stamp;
        Some(value)
    }

    /// Puts back a record read from the store (it left memory earlier) to change it under
    /// command `stamp`; returns it. Keeps the id order.
    pub(crate) fn recall<K: Ord>(
        &mut self,
        stamp: u64,
        value: T,
        mut key_of: impl FnMut(&T) -> K,
    ) -> Option<&mut T> {
        let key = key_of(&value);
        let index = match self.position(&key, &mut key_of) {
            Ok(index) => {
                if let Some(slot) = self.items.get_mut(index) {
                    *slot = (stamp, value);
                }
                index
            }
            Err(index) => {
                self.items.insert(index, (stamp, value));
                index
            }
        };
        self.items.get_mut(index).map(|(_, value)| value)
    }

    /// Drops every record stamped at or before `filed` that `keep` does not hold on to, calling
    /// `left` for each. With `prefix_only`, stops at the first record it must keep, so what stays
    /// is a suffix of the id order (a wallet's ledger, whose hash chain is read by position).
    /// Returns how many left.
    pub(crate) fn evict(
        &mut self,
        filed: u64,
        prefix_only: bool,
        keep: impl Fn(&T) -> bool,
        mut left: impl FnMut(&T),
    ) -> usize {
        let before = self.items.len();
        // The filed prefix goes first, without moving what stays; usually nothing behind it is
        // both filed and free to go, and the scan below finds that without moving a record
        // (`retain` shifts every record that stays).
        while let Some((stamp, value)) = self.items.front() {
            if *stamp > filed || keep(value) {
                break;
            }
            left(value);
            self.items.pop_front();
        }
        let behind = !prefix_only
            && self
                .items
                .iter()
                .any(|(stamp, value)| *stamp <= filed && !keep(value));
        if behind {
            self.items.retain(|(stamp, value)| {
                let stays = *stamp > filed || keep(value);
                if !stays {
                    left(value);
                }
                stays
            });
        }
        let gone = before - self.items.len();
        if gone > 0 && self.items.len() < self.items.capacity() / 4 {
            self.items.shrink_to(self.items.len() * 2);
        }
        gone
    }
}

/// Panics out of bounds, like a slice; the crate denies `clippy::indexing_slicing`, so only
/// tests index.
impl<T> std::ops::Index<usize> for Recent<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(value) => value,
            None => panic!("index {index} out of bounds of {} records", self.len()),
        }
    }
}

impl<T> std::ops::IndexMut<usize> for Recent<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len();
        match self.items.get_mut(index) {
            Some((_, value)) => value,
            None => panic!("index {index} out of bounds of {len} records"),
        }
    }
}

impl<T> FromIterator<T> for Recent<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        Recent {
            items: iter.into_iter().map(|value| (0, value)).collect(),
        }
    }
}

impl<T> From<Vec<T>> for Recent<T> {
    fn from(values: Vec<T>) -> Self {
        values.into_iter().collect()
    }
}

impl<'a, T> IntoIterator for &'a Recent<T> {
    type Item = &'a T;
    type IntoIter =
        std::iter::Map<std::collections::vec_deque::Iter<'a, (u64, T)>, fn(&'a (u64, T)) -> &'a T>;

    fn into_iter(self) -> Self::IntoIter {
        fn value<T>((_, value): &(u64, T)) -> &T {
            value
        }
        self.items.iter().map(value as fn(&'a (u64, T)) -> &'a T)
    }
}

impl<T: Serialize> Serialize for Recent<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Recent<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        Vec::<T>::deserialize(deserializer).map(Recent::from)
    }
}

#[cfg(test)]
mod tests {
    use super::Recent;

    #[test]
    fn eviction_drops_only_what_is_filed_and_not_kept() {
        let mut recent: Recent<u32> = Recent::new();
        for (stamp, value) in [(1, 10), (2, 20), (3, 30), (4, 40)] {
            recent.push(stamp, value);
        }
        let mut left = Vec::new();
        // 20 is kept (an active hold, say); 30 and 40 are not filed yet.
        let gone = recent.evict(2, false, |v| *v == 20, |v| left.push(*v));
        assert_eq!(gone, 1);
        assert_eq!(left, vec![10]);
        assert_eq!(recent.iter().copied().collect::<Vec<_>>(), vec![20, 30, 40]);
        // A change restamps: 30 changed by command 9 stays past filing up to 4.
        *recent.find_by_key_mut(&30, |v| *v, 9).unwrap() = 31;
        recent.evict(4, false, |_| false, |_| {});
        assert_eq!(recent.iter().copied().collect::<Vec<_>>(), vec![31]);
    }

    /// The shape holds take: a kept record (an active hold) at the front with filed, droppable
    /// ones behind it. Without `prefix_only` every droppable one goes, each told once and in
    /// order; with it, the kept one stops the eviction.
    #[test]
    fn records_behind_a_kept_one_go_unless_only_a_prefix_may() {
        let fill = || {
            let mut recent: Recent<u32> = Recent::new();
            for (stamp, value) in [(1, 10), (1, 20), (1, 30), (5, 40), (1, 50)] {
                recent.push(stamp, value);
            }
            recent
        };
        let mut recent = fill();
        let mut left = Vec::new();
        let gone = recent.evict(1, false, |v| *v == 20, |v| left.push(*v));
        assert_eq!((gone, left), (3, vec![10, 30, 50]));
        assert_eq!(recent.iter().copied().collect::<Vec<_>>(), vec![20, 40]);
        let mut recent = fill();
        let mut left = Vec::new();
        let gone = recent.evict(1, true, |v| *v == 20, |v| left.push(*v));
        assert_eq!((gone, left), (1, vec![10]));
        assert_eq!(
            recent.iter().copied().collect::<Vec<_>>(),
            vec![20, 30, 40, 50]
        );
    }

    #[test]
    fn prefix_eviction_stops_at_the_first_record_that_stays() {
        let mut recent: Recent<u32> = Recent::new();
        for (stamp, value) in [(1, 10), (5, 20), (2, 30)] {
            recent.push(stamp, value);
        }
        recent.evict(3, true, |_| false, |_| {});
        assert_eq!(recent.iter().copied().collect::<Vec<_>>(), vec![20, 30]);
    }

    #[test]
    fn a_recalled_record_goes_back_in_id_order() {
        let mut recent: Recent<u32> = Recent::new();
        recent.push(1, 10);
        recent.push(1, 30);
        *recent.recall(7, 20, |v| *v).unwrap() += 1;
        assert_eq!(recent.iter().copied().collect::<Vec<_>>(), vec![10, 21, 30]);
        assert_eq!(recent.evict(1, false, |_| false, |_| {}), 2);
        assert_eq!(recent.len(), 1);
    }

    #[test]
    fn serializes_as_the_plain_sequence() {
        let recent: Recent<u32> = vec![1, 2, 3].into();
        let bytes = postcard::to_allocvec(&recent).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&vec![1u32, 2, 3]).unwrap());
        let back: Recent<u32> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, recent);
    }
}
