//! [`Chunked`]: an append-only sequence stored in fixed-size chunks, so growing it never moves
//! what it already holds.
//!
//! A wallet's history only grows, and a hot wallet's grows by millions of records. In a `Vec`
//! every doubling copies the whole history into freshly faulted pages on the shard thread: measured
//! under HTTP transfers over 100 wallets, those copies and the kernel zeroing pages for them took
//! ~10% of the server's CPU and put multi-millisecond pauses into p99 (BENCHMARKS.md, "Where the
//! time goes"). Here the first chunk grows like a `Vec` up to one chunk (an idle or quiet wallet
//! pays no more than before), and every later chunk is allocated once at full size and never
//! reallocated.
//!
//! Elements keep their order and their positions; lookups by an ascending key are binary searches
//! over the chunks' first elements and then inside one chunk. Serialized, it is exactly a sequence,
//! the same bytes as the `Vec` it replaces, so snapshots are unchanged.

use std::fmt;
use std::marker::PhantomData;

use serde::de::{SeqAccess, Visitor};
use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// Bytes a full chunk aims at: large enough that the outer table stays tiny, small enough to stay
/// below the allocators' direct-`mmap` threshold (128 KiB), so chunks come from the heap.
const CHUNK_BYTES: usize = 32 << 10;

/// An append-only sequence in chunks that are never reallocated once full size.
#[derive(Clone, PartialEq, Eq)]
pub struct Chunked<T> {
    chunks: Vec<Vec<T>>,
    len: usize,
}

impl<T> Default for Chunked<T> {
    fn default() -> Self {
        Self::new()
    }
}

impl<T: 'static> Chunked<T> {
    const EMPTY: &'static Self = &Self::new();

    /// An empty sequence to lend where there is none (an idle wallet's history).
    #[must_use]
    pub const fn empty() -> &'static Self {
        Self::EMPTY
    }
}

impl<T: fmt::Debug> fmt::Debug for Chunked<T> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_list().entries(self.iter()).finish()
    }
}

impl<T> Chunked<T> {
    /// Elements per full chunk: at least 16, about [`CHUNK_BYTES`] of them.
    pub const CHUNK_LEN: usize = {
        let size = if std::mem::size_of::<T>() == 0 {
            1
        } else {
            std::mem::size_of::<T>()
        };
        let len = CHUNK_BYTES / size;
        if len < 16 {
            16
        } else {
            len
        }
    };

    #[must_use]
    pub const fn new() -> Self {
        Chunked {
            chunks: Vec::new(),
            len: 0,
        }
    }

    #[must_use]
    pub fn len(&self) -> usize {
        self.len
    }

    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.len == 0
    }

    /// Appends `value`. Moves nothing already stored once the first chunk is full.
    pub fn push(&mut self, value: T) {
        let full = self
            .chunks
            .last()
            .is_none_or(|chunk| chunk.len() == Self::CHUNK_LEN);
        if full {
            // The first chunk starts small and grows like a Vec; the others are born full size.
            let capacity = if self.chunks.is_empty() {
                4
            } else {
                Self::CHUNK_LEN
            };
            self.chunks.push(Vec::with_capacity(capacity));
        }
        let only_chunk = self.chunks.len() == 1;
        if let Some(chunk) = self.chunks.last_mut() {
            if chunk.len() == chunk.capacity() && only_chunk {
                // Doubling inside the first chunk, capped at one chunk.
                let want = (chunk.capacity() * 2).min(Self::CHUNK_LEN);
                chunk.reserve_exact(want - chunk.len());
            }
            chunk.push(value);
            self.len += 1;
        }
    }

    #[must_use]
    pub fn get(&self, index: usize) -> Option<&T> {
        self.chunks
            .get(index / Self::CHUNK_LEN)?
            .get(index % Self::CHUNK_LEN)
    }

    pub fn get_mut(&mut self, index: usize) -> Option<&mut T> {
        self.chunks
            .get_mut(index / Self::CHUNK_LEN)?
            .get_mut(index % Self::CHUNK_LEN)
    }

    #[must_use]
    pub fn first(&self) -> Option<&T> {
        self.chunks.first()?.first()
    }

    #[must_use]
    pub fn last(&self) -> Option<&T> {
        self.chunks.last()?.last()
    }

    /// Oldest first; reversible and exact-sized.
    pub fn iter(&self) -> Iter<'_, T> {
        Iter {
            inner: self.chunks.iter().flatten(),
            remaining: self.len,
        }
    }

    /// Binary search of a sequence sorted by `key` (as `slice::binary_search_by_key`): `Ok` with
    /// the index of a match, or `Err` with where it would go.
    pub fn binary_search_by_key<K: Ord>(
        &self,
        key: &K,
        mut key_of: impl FnMut(&T) -> K,
    ) -> Result<usize, usize> {
        // The last chunk whose first element is not above the key holds it, if anything does.
        let after = self
            .chunks
            .partition_point(|chunk| chunk.first().is_some_and(|first| key_of(first) <= *key));
        let Some(chunk_index) = after.checked_sub(1) else {
            return Err(0);
        };
        let base = chunk_index * Self::CHUNK_LEN;
        match self.chunks.get(chunk_index) {
            Some(chunk) => chunk
                .binary_search_by(|element| key_of(element).cmp(key))
                .map(|i| base + i)
                .map_err(|i| base + i),
            None => Err(0),
        }
    }

    /// The element whose ascending `key` equals `key`.
    pub fn find_by_key<K: Ord>(&self, key: &K, key_of: impl FnMut(&T) -> K) -> Option<&T> {
        let index = self.binary_search_by_key(key, key_of).ok()?;
        self.get(index)
    }

    /// The element whose ascending `key` equals `key`, mutably.
    pub fn find_by_key_mut<K: Ord>(
        &mut self,
        key: &K,
        key_of: impl FnMut(&T) -> K,
    ) -> Option<&mut T> {
        let index = self.binary_search_by_key(key, key_of).ok()?;
        self.get_mut(index)
    }
}

/// Panics out of bounds, like a slice; the crate denies `clippy::indexing_slicing`, so only
/// tests index.
impl<T> std::ops::Index<usize> for Chunked<T> {
    type Output = T;

    fn index(&self, index: usize) -> &T {
        match self.get(index) {
            Some(value) => value,
            None => panic!("index {index} out of bounds of {} elements", self.len),
        }
    }
}

impl<T> std::ops::IndexMut<usize> for Chunked<T> {
    fn index_mut(&mut self, index: usize) -> &mut T {
        let len = self.len;
        match self.get_mut(index) {
            Some(value) => value,
            None => panic!("index {index} out of bounds of {len} elements"),
        }
    }
}

impl<T> FromIterator<T> for Chunked<T> {
    fn from_iter<I: IntoIterator<Item = T>>(iter: I) -> Self {
        let mut chunked = Chunked::new();
        for value in iter {
            chunked.push(value);
        }
        chunked
    }
}

impl<T> From<Vec<T>> for Chunked<T> {
    fn from(values: Vec<T>) -> Self {
        values.into_iter().collect()
    }
}

/// Iterator over a [`Chunked`], oldest first.
#[derive(Clone)]
pub struct Iter<'a, T> {
    inner: std::iter::Flatten<std::slice::Iter<'a, Vec<T>>>,
    remaining: usize,
}

impl<'a, T> Iterator for Iter<'a, T> {
    type Item = &'a T;

    fn next(&mut self) -> Option<&'a T> {
        let next = self.inner.next()?;
        self.remaining -= 1;
        Some(next)
    }

    fn size_hint(&self) -> (usize, Option<usize>) {
        (self.remaining, Some(self.remaining))
    }
}

impl<T> DoubleEndedIterator for Iter<'_, T> {
    fn next_back(&mut self) -> Option<Self::Item> {
        let next = self.inner.next_back()?;
        self.remaining -= 1;
        Some(next)
    }
}

impl<T> ExactSizeIterator for Iter<'_, T> {}

impl<'a, T> IntoIterator for &'a Chunked<T> {
    type Item = &'a T;
    type IntoIter = Iter<'a, T>;

    fn into_iter(self) -> Iter<'a, T> {
        self.iter()
    }
}

impl<T: Serialize> Serialize for Chunked<T> {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.collect_seq(self.iter())
    }
}

impl<'de, T: Deserialize<'de>> Deserialize<'de> for Chunked<T> {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct SeqVisitor<T>(PhantomData<T>);

        impl<'de, T: Deserialize<'de>> Visitor<'de> for SeqVisitor<T> {
            type Value = Chunked<T>;

            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("a sequence")
            }

            fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Chunked<T>, A::Error> {
                // No pre-sizing from the length the input claims: it is not trusted.
                let mut chunked = Chunked::new();
                while let Some(value) = seq.next_element()? {
                    chunked.push(value);
                }
                Ok(chunked)
            }
        }

        deserializer.deserialize_seq(SeqVisitor(PhantomData))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    type Big = [u64; 512]; // 4 KiB: 16 to a chunk (the minimum)

    #[test]
    fn positions_survive_growth_across_chunks() {
        let n = Chunked::<u64>::CHUNK_LEN * 3 + 7;
        let mut chunked = Chunked::new();
        for i in 0..n as u64 {
            chunked.push(i * 10);
        }
        assert_eq!(chunked.len(), n);
        for i in 0..n {
            assert_eq!(chunked.get(i), Some(&(i as u64 * 10)));
        }
        assert_eq!(chunked.get(n), None);
        assert_eq!(chunked.first(), Some(&0));
        assert_eq!(chunked.last(), Some(&((n as u64 - 1) * 10)));
        assert!(chunked.iter().copied().eq((0..n as u64).map(|i| i * 10)));
        assert!(chunked
            .iter()
            .rev()
            .copied()
            .eq((0..n as u64).rev().map(|i| i * 10)));
        assert_eq!(chunked.iter().len(), n);
    }

    #[test]
    fn full_chunks_are_never_reallocated() {
        let mut chunked = Chunked::new();
        for i in 0..Chunked::<u64>::CHUNK_LEN as u64 {
            chunked.push(i);
        }
        let first_chunk = chunked.get(0).map(std::ptr::from_ref);
        for i in 0..(Chunked::<u64>::CHUNK_LEN * 5) as u64 {
            chunked.push(i);
        }
        assert_eq!(chunked.get(0).map(std::ptr::from_ref), first_chunk);
    }

    #[test]
    fn binary_search_matches_the_slice_one() {
        let values: Vec<u64> = (0..200u64).map(|i| i * 3 + 1).collect();
        let chunked: Chunked<Big> = values
            .iter()
            .map(|&v| {
                let mut big = [0u64; 512];
                big[0] = v;
                big
            })
            .collect();
        assert_eq!(Chunked::<Big>::CHUNK_LEN, 16);
        for probe in 0..620u64 {
            assert_eq!(
                chunked.binary_search_by_key(&probe, |b| b[0]),
                values.binary_search(&probe),
                "probe {probe}"
            );
        }
        assert_eq!(
            Chunked::<Big>::new().binary_search_by_key(&5, |b| b[0]),
            Err(0)
        );
        assert_eq!(chunked.find_by_key(&301, |b| b[0]).map(|b| b[0]), Some(301));
    }

    #[test]
    fn serializes_exactly_as_a_vec() {
        let vec: Vec<u32> = (0..5000).collect();
        let chunked: Chunked<u32> = vec.clone().into();
        let bytes = postcard::to_allocvec(&chunked).unwrap();
        assert_eq!(bytes, postcard::to_allocvec(&vec).unwrap());
        let back: Chunked<u32> = postcard::from_bytes(&bytes).unwrap();
        assert_eq!(back, chunked);
    }
}
