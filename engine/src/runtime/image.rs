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

#[derive(Serialize, Deserialize)]
struct Image {
    shards: Vec<ShardImage>,
    directory: Vec<u8>,
    idempotency: Vec<IdempotencyRecord>,
}

#[derive(Serialize, Deserialize)]
struct ShardImage {
    covered_lsn: u64,
    state: Vec<u8>,
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
    let mut shards = Vec::with_capacity(captures.len());
    for (covered_lsn, shard) in captures {
        shards.push(ShardImage {
            covered_lsn: *covered_lsn,
            state: shard.snapshot_bytes()?,
        });
    }
    let image = Image {
        shards,
        directory: directory.to_bytes()?,
        idempotency: keys.to_vec(),
    };
    encode_versioned(&image, &[IMAGE_FORMAT_VERSION], "snapshot image")
}

/// Decodes an image. Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<Decoded, DecodeError> {
    let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if *version != IMAGE_FORMAT_VERSION {
        return Err(DecodeError::UnsupportedVersion(*version));
    }
    let (image, rest): (Image, &[u8]) = postcard::take_from_bytes(body)
        .map_err(|error| DecodeError::Malformed(error.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    let mut shards = Vec::with_capacity(image.shards.len());
    for shard in image.shards {
        shards.push((shard.covered_lsn, Shard::from_snapshot_bytes(&shard.state)?));
    }
    Ok(Decoded {
        shards,
        directory: Directory::from_bytes(&image.directory)?,
        idempotency: image.idempotency,
    })
}
