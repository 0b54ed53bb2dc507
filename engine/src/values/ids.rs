//! Identifiers: numeric ids, uuids, and the shard id space.
//!
//! # Numeric ids and shards
//!
//! Every numeric id (wallet, transaction, entry, hold, payment, payment link, QR, payout,
//! settlement) is minted by exactly one shard from a per-kind sequence `seq = 1, 2, 3, ...` with
//!
//! ```text
//! id = seq * shard_count + shard_index        (so id ≡ shard_index (mod shard_count), id ≥ shard_count)
//! shard_of(id) = id mod shard_count
//! seq_of(id)   = id div shard_count
//! ```
//!
//! so ids are unique across shards without coordination and [`shard_of`] is a pure function that the
//! API uses to route a command to the shard owning a wallet. With one shard the ids are 1, 2, 3, ...
//! `shard_count` is fixed for the life of a data directory: changing it would re-route existing ids.
//!
//! # Uuids
//!
//! The engine draws no randomness. A uuid is derived from the command's caller-supplied entropy
//! (see [`crate::Context`]), the shard index, the kind of record and its freshly minted numeric id:
//! `sha256("walletd-uuid-v1" || entropy || shard_index || kind || id)`, truncated to 16 bytes with the
//! RFC 9562 version-4 and variant bits set. Because `(shard, kind, id)` never repeats, uuids are unique
//! even if a caller reused entropy; with fresh entropy they are unguessable. The derived value is stored
//! in the events, so replay never derives it again.
//!
//! Transactions and holds instead get *sealed* uuids (`values::sealed`): a keyed permutation of
//! (kind, wallet, id) that looks as random but opens, under the shard's logged key, to the record,
//! so finding it needs no uuid index. Their uuids are stored in the events all the same.
//!
//! Payments, payment reservations and cross-shard transfers get *time-ordered* uuids
//! ([`Uuid::derive_timed`], RFC 9562 version 7): the deciding command's time in the first 48
//! bits, then 74 bits of the same derivation. Two of them collide only within one millisecond
//! and with 2^-74 luck; the history store files them in time order.

use std::fmt;
use std::str::FromStr;

use serde::{Deserialize, Deserializer, Serialize, Serializer};
use sha2::{Digest, Sha256};

macro_rules! numeric_id {
    ($(#[$doc:meta])* $name:ident) => {
        $(#[$doc])*
        #[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
        #[serde(transparent)]
        pub struct $name(pub u64);

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                self.0.fmt(f)
            }
        }
    };
}

numeric_id!(
    /// A wallet (or system account): the `id` used in API paths.
    WalletId
);
numeric_id!(
    /// A wallet transaction (contract §2.3).
    TransactionId
);
numeric_id!(
    /// A ledger entry (contract §2.4).
    EntryId
);
numeric_id!(
    /// A hold; the API names holds by uuid, the engine also keeps a numeric id for ordering.
    HoldId
);
numeric_id!(
    /// A payment (contract §2.8); the API names payments by uuid (`PaymentResult.transaction_id`).
    PaymentId
);
numeric_id!(
    /// A payment link; named by uuid, the id orders them and derives the uuid.
    PaymentLinkId
);
numeric_id!(
    /// A QR payment payload; named by uuid, the id orders them and derives the uuid.
    QrId
);
numeric_id!(
    /// A payout (contract §2.7): the `payoutId` of the API paths, so `shard_of(id)` routes it.
    PayoutId
);
numeric_id!(
    /// A settlement (contract §2.6): the `settlementId` of the API paths, routed like a payout.
    SettlementId
);

/// The shard that owns (minted) a numeric id. `shard_count` 0 is treated as 1.
#[must_use]
pub fn shard_of(id: u64, shard_count: u32) -> u32 {
    let count = u64::from(shard_count.max(1));
    // The remainder is < shard_count, so it fits in u32.
    u32::try_from(id % count).unwrap_or(0)
}

/// One shard's slice of the id space (see the module docs for the formula). Deserialisation
/// validates like [`IdSpace::new`], so a decoded id space never divides by zero.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(try_from = "RawIdSpace")]
pub struct IdSpace {
    shard_index: u32,
    shard_count: u32,
}

#[derive(Deserialize)]
struct RawIdSpace {
    shard_index: u32,
    shard_count: u32,
}

impl TryFrom<RawIdSpace> for IdSpace {
    type Error = &'static str;

    fn try_from(raw: RawIdSpace) -> Result<Self, Self::Error> {
        IdSpace::new(raw.shard_index, raw.shard_count)
            .ok_or("shard index must be below a non-zero shard count")
    }
}

impl IdSpace {
    /// `None` unless `shard_count >= 1` and `shard_index < shard_count`.
    #[must_use]
    pub fn new(shard_index: u32, shard_count: u32) -> Option<Self> {
        (shard_count >= 1 && shard_index < shard_count).then_some(Self {
            shard_index,
            shard_count,
        })
    }

    #[must_use]
    pub fn shard_index(&self) -> u32 {
        self.shard_index
    }

    #[must_use]
    pub fn shard_count(&self) -> u32 {
        self.shard_count
    }

    /// The id of sequence number `seq` (≥ 1); `None` on overflow or `seq == 0`.
    #[must_use]
    pub fn id_of(&self, seq: u64) -> Option<u64> {
        if seq == 0 {
            return None;
        }
        seq.checked_mul(u64::from(self.shard_count))?
            .checked_add(u64::from(self.shard_index))
    }

    /// The sequence number of `id` if this shard minted it.
    #[must_use]
    pub fn seq_of(&self, id: u64) -> Option<u64> {
        let count = u64::from(self.shard_count);
        let seq = id / count;
        (id % count == u64::from(self.shard_index) && seq >= 1).then_some(seq)
    }

    /// Whether `id` belongs to this shard.
    #[must_use]
    pub fn owns(&self, id: u64) -> bool {
        shard_of(id, self.shard_count) == self.shard_index
    }
}

/// What a derived uuid names; part of the derivation input so two kinds never share a uuid.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
#[repr(u8)]
pub enum UuidKind {
    Wallet = 1,
    Transaction = 2,
    Entry = 3,
    Hold = 4,
    Transfer = 5,
    Payment = 6,
    /// The `provider_ref` of a payment (derived from the payment id).
    ProviderRef = 7,
    PaymentLink = 8,
    Qr = 9,
    Payout = 10,
    Settlement = 11,
    /// A cross-shard payment reservation (derived from its reserve transaction id).
    PaymentReservation = 12,
}

/// A 128-bit uuid. Serialised as 16 raw bytes in binary formats and as the hyphenated string in
/// human-readable ones (serde_json for `wal inspect`).
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord, Default)]
pub struct Uuid(pub [u8; 16]);

impl Uuid {
    /// A version-4 uuid from 16 random bytes (sets the version and variant bits).
    #[must_use]
    pub fn from_random_bytes(mut bytes: [u8; 16]) -> Self {
        bytes[6] = (bytes[6] & 0x0f) | 0x40;
        bytes[8] = (bytes[8] & 0x3f) | 0x80;
        Self(bytes)
    }

    /// The deterministic derivation described in the module docs.
    #[must_use]
    pub fn derive(entropy: &[u8; 32], shard_index: u32, kind: UuidKind, id: u64) -> Self {
        let mut hasher = Sha256::new();
        hasher.update(b"walletd-uuid-v1");
        hasher.update(entropy);
        hasher.update(shard_index.to_le_bytes());
        hasher.update([kind as u8]);
        hasher.update(id.to_le_bytes());
        let digest = hasher.finalize();
        let mut bytes = [0u8; 16];
        for (out, byte) in bytes.iter_mut().zip(digest.iter()) {
            *out = *byte;
        }
        Self::from_random_bytes(bytes)
    }

    /// A time-ordered uuid (RFC 9562 version 7): the first 48 bits are `at_ms`, the 74 other
    /// free bits those of [`Uuid::derive`]. For records the history store keys by uuid
    /// (payments, and the cross-shard moves of transfers and payments): keys that grow with time
    /// are filed in order, so each flushed table of them follows the last instead of
    /// overlapping a whole level as random keys do, and compaction no longer rewrites that
    /// level for every flush (docs/history.md, "Time-ordered uuids"). 74 random bits stay
    /// unguessable; what the uuid tells is its record's creation time, which its owner sees
    /// anyway. A time before 1970 or after 10889 is clamped.
    #[must_use]
    pub fn derive_timed(
        entropy: &[u8; 32],
        shard_index: u32,
        kind: UuidKind,
        id: u64,
        at_ms: i64,
    ) -> Self {
        let mut uuid = Self::derive(entropy, shard_index, kind, id);
        let ms = u64::try_from(at_ms).unwrap_or(0).min((1 << 48) - 1);
        if let (Some(head), Some(time)) = (uuid.0.get_mut(..6), ms.to_be_bytes().get(2..)) {
            head.copy_from_slice(time);
        }
        uuid.0[6] = (uuid.0[6] & 0x0f) | 0x70;
        uuid
    }

    #[must_use]
    pub fn as_bytes(&self) -> &[u8; 16] {
        &self.0
    }
}

impl Uuid {
    /// The canonical form: 36 lowercase hex digits and hyphens (8-4-4-4-12). Built with a table
    /// rather than one formatter call per byte: every response carries one or two uuids, and the
    /// per-byte formatting was ~1% of the server's CPU under load.
    #[must_use]
    pub fn hyphenated(&self) -> [u8; 36] {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        let mut out = [b'-'; 36];
        let mut at = 0;
        for (i, byte) in self.0.iter().enumerate() {
            if matches!(i, 4 | 6 | 8 | 10) {
                at += 1;
            }
            if let (Some(high), Some(low)) = (
                HEX.get(usize::from(byte >> 4)),
                HEX.get(usize::from(byte & 0x0f)),
            ) {
                if let Some(slot) = out.get_mut(at..at + 2) {
                    slot.copy_from_slice(&[*high, *low]);
                }
            }
            at += 2;
        }
        out
    }
}

impl fmt::Display for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let text = self.hyphenated();
        f.write_str(std::str::from_utf8(&text).map_err(|_| fmt::Error)?)
    }
}

impl fmt::Debug for Uuid {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Display::fmt(self, f)
    }
}

/// Why a uuid string did not parse.
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("invalid uuid: expected 8-4-4-4-12 hex digits")]
pub struct UuidParseError;

impl FromStr for Uuid {
    type Err = UuidParseError;

    /// Accepts the hyphenated form (either case) only.
    fn from_str(text: &str) -> Result<Self, Self::Err> {
        let raw = text.as_bytes();
        if raw.len() != 36 {
            return Err(UuidParseError);
        }
        let mut hex_digits = [0u8; 32];
        let mut count = 0usize;
        for (i, byte) in raw.iter().enumerate() {
            if matches!(i, 8 | 13 | 18 | 23) {
                if *byte != b'-' {
                    return Err(UuidParseError);
                }
                continue;
            }
            let slot = hex_digits.get_mut(count).ok_or(UuidParseError)?;
            *slot = *byte;
            count += 1;
        }
        let mut bytes = [0u8; 16];
        hex::decode_to_slice(hex_digits, &mut bytes).map_err(|_| UuidParseError)?;
        Ok(Self(bytes))
    }
}

impl Serialize for Uuid {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(self)
        } else {
            self.0.serialize(serializer)
        }
    }
}

impl<'de> Deserialize<'de> for Uuid {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        if deserializer.is_human_readable() {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            text.parse().map_err(serde::de::Error::custom)
        } else {
            <[u8; 16]>::deserialize(deserializer).map(Self)
        }
    }
}

/// Shard for a new wallet (and for its owner's records): all of one owner's wallets live on one shard, so the rule "one wallet
/// per owner, currency and type" is checked by one shard alone.
#[must_use]
pub fn owner_shard(owner_id: u64, shard_count: u32) -> u32 {
    if shard_count <= 1 {
        return 0;
    }
    ((owner_id.wrapping_mul(0x9E37_79B9_7F4A_7C15) >> 32) % u64::from(shard_count)) as u32
}

#[cfg(test)]
mod tests {
    use super::*;

    /// A timed uuid is a version-7 uuid whose first 48 bits are its time, so uuids of later
    /// records sort after earlier ones whatever their random bits; the rest is the derived
    /// uuid's, and a time outside 48 bits is clamped, never wrapped.
    #[test]
    fn timed_uuids_sort_by_their_time_and_keep_the_derived_bits() {
        let at = 1_790_000_000_000_i64;
        let uuids: Vec<Uuid> = (0..200u64)
            .map(|i| {
                let entropy = [u8::try_from(i % 251).unwrap(); 32];
                Uuid::derive_timed(&entropy, 0, UuidKind::Payment, 1_000 - i, at + i as i64)
            })
            .collect();
        assert!(uuids.windows(2).all(|pair| pair[0] < pair[1]));
        let entropy = [7; 32];
        let timed = Uuid::derive_timed(&entropy, 3, UuidKind::Transfer, 42, at);
        let derived = Uuid::derive(&entropy, 3, UuidKind::Transfer, 42);
        assert_eq!(&timed.0[..6], &at.to_be_bytes()[2..]);
        assert_eq!(timed.0[6] >> 4, 7, "version 7");
        assert_eq!(timed.0[8] >> 6, 0b10, "RFC 9562 variant");
        assert_eq!(timed.0[6] & 0x0f, derived.0[6] & 0x0f);
        assert_eq!(&timed.0[7..], &derived.0[7..]);
        assert_eq!(timed.to_string().parse::<Uuid>(), Ok(timed));
        let early = Uuid::derive_timed(&entropy, 3, UuidKind::Transfer, 42, -5);
        assert_eq!(&early.0[..6], &[0; 6]);
        let late = Uuid::derive_timed(&entropy, 3, UuidKind::Transfer, 42, i64::MAX);
        assert_eq!(&late.0[..6], &[0xff; 6]);
    }

    /// The table-built form equals per-byte formatting and parses back, for every byte value in
    /// every position.
    #[test]
    fn uuid_text_is_the_canonical_form_and_round_trips() {
        for seed in 0u8..=255 {
            let mut bytes = [0u8; 16];
            for (i, byte) in bytes.iter_mut().enumerate() {
                *byte = seed.wrapping_mul(31).wrapping_add(i as u8 * 17);
            }
            let uuid = Uuid(bytes);
            let mut expected = String::new();
            for (i, byte) in bytes.iter().enumerate() {
                if matches!(i, 4 | 6 | 8 | 10) {
                    expected.push('-');
                }
                expected.push_str(&format!("{byte:02x}"));
            }
            assert_eq!(uuid.to_string(), expected);
            assert_eq!(expected.parse::<Uuid>().unwrap(), uuid);
        }
    }
}
