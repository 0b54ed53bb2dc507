//! The snapshot payload: every shard's state with the LSN it covers, and the idempotency keys.
//!
//! | offset | size | field                                                         |
//! |--------|------|---------------------------------------------------------------|
//! | 0      | 1    | image format version (`1`)                                    |
//! | 1      | n    | postcard encoding of the image (below)                        |
//!
//! Each shard was captured at its own moment, so each carries its own covered LSN: replay
//! applies a record to shard `s` only if its LSN is above shard `s`'s covered LSN. The `wal`
//! crate wraps this payload in its checksummed snapshot file.

use serde::{Deserialize, Serialize};

use super::journal::IdempotencyRecord;
use crate::identity::directory::Directory;
use crate::shard::state::Shard;
use crate::values::error::{encode_versioned, DecodeError, EncodeError};

/// Version byte at the start of an image.
pub const IMAGE_FORMAT_VERSION: u8 = 1;

/// What [`encode`] writes. The byte strings go out with `serialize_bytes` (a varint length and
/// the bytes), which is what postcard also writes for a `Vec<u8>` as a sequence of `u8`; so
/// images written either way read the same.
#[derive(Serialize)]
struct Image<'a> {
    shards: Vec<ShardImage<'a>>,
    #[serde(with = "raw_bytes")]
    directory: &'a [u8],
    idempotency: &'a [IdempotencyRecord],
}

#[derive(Serialize)]
struct ShardImage<'a> {
    covered_lsn: u64,
    #[serde(with = "raw_bytes")]
    state: &'a [u8],
}

/// What [`decode`] reads: the same layout, the byte strings borrowed from the image instead of
/// copied out of it a `u8` at a time (the shards' states are most of a snapshot: that copy was
/// 16 % of a 1M-wallet restart).
#[derive(Deserialize)]
struct ImageRef<'a> {
    #[serde(borrow)]
    shards: Vec<ShardImageRef<'a>>,
    directory: &'a [u8],
    idempotency: Vec<IdempotencyRecord>,
}

#[derive(Deserialize)]
struct ShardImageRef<'a> {
    covered_lsn: u64,
    state: &'a [u8],
}

mod raw_bytes {
    pub(super) fn serialize<S: serde::Serializer>(
        bytes: &&[u8],
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }
}

/// A decoded image.
pub struct Decoded {
    /// Per shard, in shard order: the LSN it covers and its state.
    pub shards: Vec<(u64, Shard)>,
    /// Hosted by shard 0 and captured with it.
    pub directory: Directory,
    pub idempotency: Vec<IdempotencyRecord>,
}

/// Encodes captured shards and keys, or says which part could not be encoded (the snapshot then
/// fails before it is kept).
pub fn encode(
    captures: &[(u64, Shard)],
    directory: &Directory,
    keys: &[IdempotencyRecord],
) -> Result<Vec<u8>, EncodeError> {
    let mut states = Vec::with_capacity(captures.len());
    for (covered_lsn, shard) in captures {
        states.push((*covered_lsn, shard.snapshot_bytes()?));
    }
    let directory = directory.to_bytes()?;
    let image = Image {
        shards: states
            .iter()
            .map(|(covered_lsn, state)| ShardImage {
                covered_lsn: *covered_lsn,
                state,
            })
            .collect(),
        directory: &directory,
        idempotency: keys,
    };
    encode_versioned(&image, &[IMAGE_FORMAT_VERSION], "snapshot image")
}

/// Decodes an image. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if *version != IMAGE_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(*version));
    }
    let (image, rest): (ImageRef<'_>, &[u8]) = postcard::take_from_bytes(body)
        .map_err(|error| DecodeError::Malformed(error.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    let mut shards = Vec::with_capacity(image.shards.len());
    for shard in image.shards {
        shards.push((shard.covered_lsn, Shard::from_snapshot_bytes(shard.state)?));
    }
    Ok(Decoded {
        shards,
        directory: Directory::from_bytes(image.directory)?,
        idempotency: image.idempotency,
    })
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde::Serialize;

    use super::{decode, encode, IMAGE_FORMAT_VERSION};
    use crate::identity::directory::Directory;
    use crate::runtime::journal::IdempotencyRecord;
    use crate::shard::state::Shard;
    use crate::values::error::encode_versioned;

    /// The image's layout before its byte strings were written as bytes: owned `Vec<u8>`s,
    /// which postcard writes as a sequence of `u8`.
    #[derive(Serialize)]
    struct OwnedImage {
        shards: Vec<OwnedShardImage>,
        directory: Vec<u8>,
        idempotency: Vec<IdempotencyRecord>,
    }

    #[derive(Serialize)]
    struct OwnedShardImage {
        covered_lsn: u64,
        state: Vec<u8>,
    }

    /// Images written before and after the byte strings were borrowed are the same bytes, and
    /// such an image decodes to the shards, directory and keys it holds.
    #[test]
    fn byte_strings_keep_the_image_layout() {
        let shards: Vec<(u64, Shard)> = (0..2)
            .map(|index| (10 + u64::from(index), Shard::new(index, 2).unwrap()))
            .collect();
        let directory = Directory::new();
        let keys = vec![IdempotencyRecord {
            caller: "customer:7".into(),
            key: "k-1".into(),
            fingerprint: [3; 32],
            at_ms: 1_700_000_000_000,
            route: 4,
            response: Some(b"{\"ok\":true}".to_vec()),
            transfer_uuid: None,
        }];
        let owned = OwnedImage {
            shards: shards
                .iter()
                .map(|(covered_lsn, shard)| OwnedShardImage {
                    covered_lsn: *covered_lsn,
                    state: shard.snapshot_bytes().unwrap(),
                })
                .collect(),
            directory: directory.to_bytes().unwrap(),
            idempotency: keys.clone(),
        };
        let before = encode_versioned(&owned, &[IMAGE_FORMAT_VERSION], "image").unwrap();
        let now = encode(&shards, &directory, &keys).unwrap();
        assert_eq!(before, now);
        let decoded = decode(&before).unwrap();
        assert_eq!(
            decoded
                .shards
                .iter()
                .map(|(lsn, shard)| (*lsn, shard.snapshot_bytes().unwrap()))
                .collect::<Vec<_>>(),
            owned
                .shards
                .iter()
                .map(|image| (image.covered_lsn, image.state.clone()))
                .collect::<Vec<_>>()
        );
        assert_eq!(decoded.directory.to_bytes().unwrap(), owned.directory);
        assert_eq!(decoded.idempotency, keys);
    }
}
