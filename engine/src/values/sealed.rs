//! Sealed uuids: uuids of transactions and holds that decode, under their shard's key, to the
//! record they name.
//!
//! A derived uuid ([`Uuid::derive`]) is a hash, so finding the record it names needs an index
//! from uuid to record (`tx_uuids`, `hold_uuids` in the history store). Those indexes are keyed
//! by random values: every compaction of theirs overlaps a whole level, and under a long load
//! they were the keyspaces whose cost per record grew fastest (docs/history.md, "Why throughput
//! decays"). A sealed uuid needs no index:
//!
//! ```text
//! plain  = kind (4 bits) | wallet id (48 bits) | record id (48 bits) | 22 zero bits   (122 bits)
//! sealed = Feistel(key, plain): two 61-bit halves, 6 rounds,
//!          round r: (L, R) -> (R, L xor F(r, R)),  F(r, x) = SHA-256(key | r | x) mod 2^61
//! uuid   = the 122 bits in the free bits of an RFC 9562 version-4 uuid
//! ```
//!
//! Four Feistel rounds of a pseudo-random function are a pseudo-random permutation
//! (Luby–Rackoff), and six keep that bound meaningful far past the uuids one key will ever
//! seal, so without the key a sealed uuid looks as random as a derived one and says nothing
//! about counts. The key is therefore a secret, like the password hashes: it lives in the
//! WAL (and its archive), the snapshots and the store's `meta`, all private to walletd's
//! user, and `wal inspect` prints it redacted. It cannot be rotated: the uuids it sealed are
//! stored in records and stay valid forever. With the key it opens to (kind, wallet, id): a lookup is one point read
//! of the record, which is kept only if the record's stored uuid is the one asked. Any 122 bits
//! open to *something*; the zero bits refuse all but 1 in 4 million at once, and the stored-uuid
//! check refuses the rest, so a forged or mistyped uuid finds nothing.
//!
//! The key is the shard's: chosen once, from the entropy of the first command that seals a
//! uuid (`Event::UuidKeyChosen`, logged with that command, so replay and the history indexer
//! learn it from the log), and carried by snapshots. Records from before the key (or with an id
//! beyond 2^48, where sealing refuses instead of wrapping) keep derived uuids and their index
//! entries; the indexer files an index entry exactly for the uuids that do not open to their
//! own record.

use std::fmt;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::values::ids::{Uuid, UuidKind};

/// Bits of a wallet id or a record id in the sealed plaintext.
const ID_BITS: u32 = 48;
const ID_MASK: u64 = (1 << ID_BITS) - 1;
/// Bits of each Feistel half.
const HALF_BITS: u32 = 61;
const HALF_MASK: u64 = (1 << HALF_BITS) - 1;
/// Zero bits at the bottom of the plaintext: the cheap first check of `open`.
const CHECK_BITS: u32 = 122 - 4 - 2 * ID_BITS;
/// Six rounds: four already make a pseudo-random permutation (Luby–Rackoff), but their bound
/// weakens near 2^30 uuids under one key, which a busy shard reaches in days; more rounds
/// push it towards 2^61 (Patarin). A key never changes, so neither may this.
const ROUNDS: u8 = 6;

/// A shard's key for sealed uuids (module docs). Its `Debug` does not print it.
#[derive(Clone, Copy, PartialEq, Eq, Serialize, Deserialize)]
pub struct UuidKey(pub [u8; 32]);

impl fmt::Debug for UuidKey {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str("UuidKey(..)")
    }
}

impl UuidKey {
    /// The key a shard chooses from a command's entropy (32 fresh random bytes per command).
    #[must_use]
    pub fn choose(entropy: &[u8; 32], shard_index: u32) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"walletd-uuid-key-v1");
        hasher.update(entropy);
        hasher.update(shard_index.to_le_bytes());
        Self(hasher.finalize().into())
    }

    /// The round function: 41 bytes in, so one SHA-256 block (the key as the first 32 bytes).
    fn round(&self, round: u8, half: u64) -> u64 {
        let mut hasher = Sha256::new();
        hasher.update(self.0);
        hasher.update([round]);
        hasher.update(half.to_le_bytes());
        let digest: [u8; 32] = hasher.finalize().into();
        let mut word = [0u8; 8];
        word.copy_from_slice(&digest[..8]);
        u64::from_le_bytes(word) & HALF_MASK
    }

    /// The sealed uuid of record `id` of `kind` in `wallet`, or `None` when an id does not fit
    /// in 48 bits (the caller derives one instead).
    #[must_use]
    pub fn seal(&self, kind: UuidKind, wallet: u64, id: u64) -> Option<Uuid> {
        if wallet > ID_MASK || id > ID_MASK {
            return None;
        }
        let plain = (u128::from(kind as u8) << (122 - 4))
            | (u128::from(wallet) << (ID_BITS + CHECK_BITS))
            | (u128::from(id) << CHECK_BITS);
        let (mut left, mut right) = ((plain >> HALF_BITS) as u64, plain as u64 & HALF_MASK);
        for round in 0..ROUNDS {
            (left, right) = (right, left ^ self.round(round, right));
        }
        Some(pack((u128::from(left) << HALF_BITS) | u128::from(right)))
    }

    /// What `uuid` names if this key sealed it: (kind byte, wallet, id). `None` for a uuid that
    /// is not a version-4 one or whose check bits are not zero; a `Some` is only a candidate
    /// until the record's own uuid is compared (module docs).
    #[must_use]
    pub fn open(&self, uuid: Uuid) -> Option<(u8, u64, u64)> {
        let sealed = unpack(uuid)?;
        let (mut left, mut right) = ((sealed >> HALF_BITS) as u64, sealed as u64 & HALF_MASK);
        for round in (0..ROUNDS).rev() {
            (left, right) = (right ^ self.round(round, left), left);
        }
        let plain = (u128::from(left) << HALF_BITS) | u128::from(right);
        if plain & ((1 << CHECK_BITS) - 1) != 0 {
            return None;
        }
        let kind = (plain >> (122 - 4)) as u8;
        let wallet = (plain >> (ID_BITS + CHECK_BITS)) as u64 & ID_MASK;
        let id = (plain >> CHECK_BITS) as u64 & ID_MASK;
        Some((kind, wallet, id))
    }

    /// The (wallet, id) a uuid of `kind` names if this key sealed it (a candidate, see `open`).
    #[must_use]
    pub fn open_as(&self, kind: UuidKind, uuid: Uuid) -> Option<(u64, u64)> {
        self.open(uuid)
            .filter(|(opened, _, _)| *opened == kind as u8)
            .map(|(_, wallet, id)| (wallet, id))
    }

    /// Whether `uuid` is the sealed uuid of exactly this record: then no index entry is needed.
    #[must_use]
    pub fn sealed(&self, kind: UuidKind, wallet: u64, id: u64, uuid: Uuid) -> bool {
        self.open_as(kind, uuid) == Some((wallet, id))
    }
}

/// 122 bits into a version-4 uuid: bytes 0..6 and the low nibble of byte 6 and byte 7 take the
/// high 60 bits, the low 6 bits of byte 8 and bytes 9..16 the low 62.
fn pack(bits: u128) -> Uuid {
    let high = (bits >> 62) as u64;
    let low = bits as u64 & ((1 << 62) - 1);
    let top = ((high >> 12) << 16) | (0x4 << 12) | (high & 0xfff);
    let bottom = (0b10 << 62) | low;
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&top.to_be_bytes());
    bytes[8..].copy_from_slice(&bottom.to_be_bytes());
    Uuid(bytes)
}

/// The inverse of [`pack`]; `None` unless the version and variant bits are a version-4 uuid's.
fn unpack(uuid: Uuid) -> Option<u128> {
    let mut top = [0u8; 8];
    let mut bottom = [0u8; 8];
    top.copy_from_slice(&uuid.0[..8]);
    bottom.copy_from_slice(&uuid.0[8..]);
    let (top, bottom) = (u64::from_be_bytes(top), u64::from_be_bytes(bottom));
    if (top >> 12) & 0xf != 0x4 || bottom >> 62 != 0b10 {
        return None;
    }
    let high = ((top >> 16) << 12) | (top & 0xfff);
    let low = bottom & ((1 << 62) - 1);
    Some((u128::from(high) << 62) | u128::from(low))
}

#[cfg(test)]
mod tests {
    use std::collections::HashSet;

    use proptest::prelude::*;

    use super::*;

    fn key(seed: u8) -> UuidKey {
        UuidKey::choose(&[seed; 32], 0)
    }

    proptest! {
        /// Every record with ids below 2^48 seals to a version-4 uuid that opens to it, and
        /// only to it: under the same key, not as another kind, not under another key.
        #[test]
        fn a_sealed_uuid_opens_to_its_record(wallet in 0..=ID_MASK, id in 0..=ID_MASK, seed: u8) {
            let key = key(seed);
            let uuid = key.seal(UuidKind::Transaction, wallet, id).unwrap();
            prop_assert_eq!(uuid, Uuid::from_random_bytes(uuid.0));
            prop_assert_eq!(key.open(uuid), Some((UuidKind::Transaction as u8, wallet, id)));
            prop_assert!(key.sealed(UuidKind::Transaction, wallet, id, uuid));
            prop_assert!(!key.sealed(UuidKind::Hold, wallet, id, uuid));
            prop_assert!(!key.sealed(UuidKind::Transaction, wallet, id ^ 1, uuid));
            let other = self::key(seed.wrapping_add(1));
            prop_assert!(!other.sealed(UuidKind::Transaction, wallet, id, uuid));
        }

        /// Random uuids (derived ones, forged ones) almost never pass the check bits, and a
        /// derived uuid never counts as sealed for the record it was derived for.
        #[test]
        fn a_derived_uuid_is_not_sealed(entropy: [u8; 32], id in 1..=ID_MASK, wallet in 0..=ID_MASK) {
            let key = key(7);
            let derived = Uuid::derive(&entropy, 0, UuidKind::Transaction, id);
            prop_assert!(!key.sealed(UuidKind::Transaction, wallet, id, derived));
        }
    }

    /// A time-ordered uuid (version 7: payments, transfers' and payments' moves) never opens as
    /// a sealed one, so a payment's uuid cannot be taken for a transaction or a hold.
    #[test]
    fn time_ordered_uuids_never_open() {
        let key = key(3);
        for id in 0..1_000u64 {
            let at = 1_790_000_000_000 + i64::try_from(id).unwrap();
            let timed = Uuid::derive_timed(&[9; 32], 0, UuidKind::Payment, id, at);
            assert_eq!(key.open(timed), None);
        }
    }

    /// Ids past 48 bits are refused, not wrapped onto another record's uuid.
    #[test]
    fn ids_beyond_48_bits_are_not_sealed() {
        let key = key(1);
        assert!(key.seal(UuidKind::Hold, 1 << 48, 1).is_none());
        assert!(key.seal(UuidKind::Hold, 1, 1 << 48).is_none());
        assert!(key.seal(UuidKind::Hold, ID_MASK, ID_MASK).is_some());
    }

    /// Consecutive records get uuids that share no visible structure: 10,000 of them are
    /// distinct, and each bit position is set in about half of them.
    #[test]
    fn consecutive_records_get_unrelated_uuids() {
        let key = key(3);
        let uuids: Vec<Uuid> = (1..=10_000u64)
            .map(|id| key.seal(UuidKind::Transaction, 5, id).unwrap())
            .collect();
        assert_eq!(uuids.iter().collect::<HashSet<_>>().len(), uuids.len());
        for bit in 0..128 {
            if matches!(bit, 48..=51 | 64 | 65) {
                continue; // version and variant bits
            }
            let set = uuids
                .iter()
                .filter(|uuid| uuid.0[bit / 8] & (0x80 >> (bit % 8)) != 0)
                .count();
            assert!(
                (4_500..=5_500).contains(&set),
                "bit {bit} set in {set} of 10000"
            );
        }
    }

    /// Of 200,000 random version-4 uuids, the check bits let through about 2^-22 of them (0.05
    /// expected).
    #[test]
    fn random_uuids_rarely_pass_the_check_bits() {
        let key = key(9);
        let mut state = 0x9E37_79B9_7F4A_7C15u64;
        let mut passed = 0;
        for _ in 0..200_000 {
            let mut bytes = [0u8; 16];
            for chunk in bytes.chunks_mut(8) {
                state ^= state << 13;
                state ^= state >> 7;
                state ^= state << 17;
                chunk.copy_from_slice(&state.to_le_bytes());
            }
            if key.open(Uuid::from_random_bytes(bytes)).is_some() {
                passed += 1;
            }
        }
        assert!(passed <= 2, "{passed} random uuids passed the check bits");
    }
}
