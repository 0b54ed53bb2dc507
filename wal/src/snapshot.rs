//! Snapshot files: an opaque blob tagged with the LSN it covers.
//!
//! # Format
//!
//! A snapshot is named `{lsn:020}.snap` and holds a 40-byte header followed by the payload:
//!
//! | offset | size | field          | meaning                                               |
//! |--------|------|----------------|-------------------------------------------------------|
//! | 0      | 8    | magic          | `WLTDSNP\0`                                           |
//! | 8      | 4    | format_version | `1`                                                   |
//! | 12     | 4    | reserved       | zero                                                  |
//! | 16     | 8    | lsn            | the state covers every record up to and including it  |
//! | 24     | 8    | payload_len    | bytes of payload after the header                     |
//! | 32     | 4    | crc            | CRC32C of bytes 0..32 followed by the payload         |
//! | 36     | 4    | reserved       | zero                                                  |
//!
//! It is written under `{lsn:020}.snap.tmp`, synced, renamed into place, and the directory is
//! synced, so a crash leaves either the previous snapshots alone or the new one complete. Loading
//! takes the newest snapshot that checks out; a corrupt newest one is reported loudly and the
//! previous one is used, which is why two are kept.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::FileSystem;

/// Magic at the start of every snapshot.
pub const SNAPSHOT_MAGIC: [u8; 8] = *b"WLTDSNP\0";
/// Version of the snapshot format.
pub const SNAPSHOT_VERSION: u32 = 1;
/// Bytes in a snapshot header.
pub const SNAPSHOT_HEADER_BYTES: usize = 40;

/// A loaded snapshot.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Snapshot {
    /// The state covers every record up to and including this LSN.
    pub lsn: u64,
    pub payload: Vec<u8>,
    pub path: PathBuf,
}

fn file_name(lsn: u64) -> String {
    format!("{lsn:020}.snap")
}

fn parse_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".snap")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Encodes a snapshot file's bytes.
pub fn encode(lsn: u64, payload: &[u8]) -> Vec<u8> {
    let mut bytes = Vec::with_capacity(SNAPSHOT_HEADER_BYTES + payload.len());
    bytes.extend_from_slice(&SNAPSHOT_MAGIC);
    bytes.extend_from_slice(&SNAPSHOT_VERSION.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(&lsn.to_le_bytes());
    bytes.extend_from_slice(&(payload.len() as u64).to_le_bytes());
    let crc = crc32c::crc32c_append(crc32c::crc32c(&bytes), payload);
    bytes.extend_from_slice(&crc.to_le_bytes());
    bytes.extend_from_slice(&0u32.to_le_bytes());
    bytes.extend_from_slice(payload);
    bytes
}

/// Decodes a snapshot file's bytes into (lsn, payload), or says why they are not one.
/// Never panics, whatever the bytes.
pub fn decode(bytes: &[u8]) -> Result<(u64, &[u8]), String> {
    let word32 = |at: usize| -> u32 {
        let mut w = [0u8; 4];
        if let Some(src) = bytes.get(at..at + 4) {
            w.copy_from_slice(src);
        }
        u32::from_le_bytes(w)
    };
    let word64 = |at: usize| -> u64 {
        let mut w = [0u8; 8];
        if let Some(src) = bytes.get(at..at + 8) {
            w.copy_from_slice(src);
        }
        u64::from_le_bytes(w)
    };
    if bytes.len() < SNAPSHOT_HEADER_BYTES {
        return Err(format!(
            "{} bytes is shorter than a snapshot header",
            bytes.len()
        ));
    }
    if bytes.get(0..8) != Some(&SNAPSHOT_MAGIC[..]) {
        return Err("bad snapshot magic".into());
    }
    let version = word32(8);
    if version != SNAPSHOT_VERSION {
        return Err(format!("unsupported snapshot version {version}"));
    }
    if word32(12) != 0 || word32(36) != 0 {
        return Err("reserved snapshot header bytes are not zero".into());
    }
    let lsn = word64(16);
    let payload_len = word64(24);
    let Some(payload) = usize::try_from(payload_len)
        .ok()
        .and_then(|len| bytes.get(SNAPSHOT_HEADER_BYTES..SNAPSHOT_HEADER_BYTES.checked_add(len)?))
    else {
        return Err(format!(
            "payload length {payload_len} runs past the end of the file"
        ));
    };
    if bytes.len() != SNAPSHOT_HEADER_BYTES + payload.len() {
        return Err("trailing bytes after the snapshot payload".into());
    }
    let crc = crc32c::crc32c_append(
        crc32c::crc32c(bytes.get(0..32).unwrap_or_default()),
        payload,
    );
    if crc != word32(32) {
        return Err("snapshot checksum mismatch".into());
    }
    Ok((lsn, payload))
}

/// Writes a snapshot atomically: temp file, fsync, rename, directory fsync.
pub fn write(fs: &dyn FileSystem, dir: &Path, lsn: u64, payload: &[u8]) -> Result<PathBuf> {
    let path = dir.join(file_name(lsn));
    let temp = dir.join(format!("{}.tmp", file_name(lsn)));
    let context = |what: &str| format!("{what} snapshot {}", path.display());
    let bytes = encode(lsn, payload);
    let file = fs
        .create(&temp)
        .map_err(|e| Error::io(context("create"), e))?;
    file.write_all_at(&bytes, 0)
        .map_err(|e| Error::io(context("write"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(context("sync"), e))?;
    drop(file);
    fs.rename(&temp, &path)
        .map_err(|e| Error::io(context("rename"), e))?;
    fs.sync_dir(dir)
        .map_err(|e| Error::io(context("sync the directory of"), e))?;
    tracing::info!(snapshot = %path.display(), lsn, bytes = bytes.len(), "wrote snapshot");
    Ok(path)
}

/// Snapshot files in `dir`, newest first.
pub fn list(fs: &dyn FileSystem, dir: &Path) -> Result<Vec<(u64, PathBuf)>> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("list snapshots in {}", dir.display()), e))?;
    let mut found: Vec<(u64, PathBuf)> = names
        .iter()
        .filter_map(|name| Some((parse_file_name(name.to_str()?)?, dir.join(name))))
        .collect();
    found.sort_by_key(|(lsn, _)| std::cmp::Reverse(*lsn));
    Ok(found)
}

/// Loads the newest snapshot that checks out. A corrupt one is logged (naming the file) and the
/// next older is tried. When snapshots exist but none is valid, that is an error: the log before
/// them may already be gone, so starting from nothing could silently lose history.
pub fn load_newest(fs: &dyn FileSystem, dir: &Path) -> Result<Option<Snapshot>> {
    let candidates = list(fs, dir)?;
    let mut first_error = None;
    for (name_lsn, path) in &candidates {
        let bytes = fs
            .read(path)
            .map_err(|e| Error::io(format!("read snapshot {}", path.display()), e))?;
        match decode(&bytes) {
            Ok((lsn, payload)) if lsn == *name_lsn => {
                return Ok(Some(Snapshot {
                    lsn,
                    payload: payload.to_vec(),
                    path: path.clone(),
                }))
            }
            Ok((lsn, _)) => {
                let reason = format!("header says LSN {lsn} but the file name says {name_lsn}");
                tracing::error!(snapshot = %path.display(), reason = %reason, "skipping a corrupt snapshot; falling back to an older one");
                first_error.get_or_insert(Error::corruption(path, 0, reason));
            }
            Err(reason) => {
                tracing::error!(snapshot = %path.display(), reason = %reason, "skipping a corrupt snapshot; falling back to an older one");
                first_error.get_or_insert(Error::corruption(path, 0, reason));
            }
        }
    }
    match first_error {
        Some(error) => Err(error),
        None => Ok(None),
    }
}

/// Whether the snapshot file at `path`, named for `name_lsn`, checks out (header, length,
/// checksum, and the LSN its name gives); the reason when it does not.
fn check(fs: &dyn FileSystem, path: &Path, name_lsn: u64) -> Result<Result<(), String>> {
    let bytes = fs
        .read(path)
        .map_err(|e| Error::io(format!("read snapshot {}", path.display()), e))?;
    Ok(match decode(&bytes) {
        Ok((lsn, _)) if lsn == name_lsn => Ok(()),
        Ok((lsn, _)) => Err(format!(
            "header says LSN {lsn} but the file name says {name_lsn}"
        )),
        Err(reason) => Err(reason),
    })
}

/// Removes stale temp files and every valid snapshot older than the newest `keep` *valid* ones.
/// Returns the LSN of the oldest valid snapshot kept, if any: only that may release log segments.
///
/// Each snapshot is checked (header, checksum, LSN) before it counts toward `keep`, so a corrupt
/// newer snapshot never costs the last valid one. A corrupt snapshot is logged, never counted
/// and never relied on; one newer than the oldest kept valid snapshot is left in place for an
/// operator to look at (loading skips it, loudly), one older is removed with the old ones.
pub fn prune(fs: &dyn FileSystem, dir: &Path, keep: usize) -> Result<Option<u64>> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("list snapshots in {}", dir.display()), e))?;
    for name in names {
        if name.to_str().is_some_and(|n| n.ends_with(".snap.tmp")) {
            let path = dir.join(&name);
            fs.remove(&path).map_err(|e| {
                Error::io(
                    format!("remove stale snapshot temp file {}", path.display()),
                    e,
                )
            })?;
        }
    }
    let mut kept: Vec<u64> = Vec::with_capacity(keep);
    for (lsn, path) in list(fs, dir)? {
        if kept.len() >= keep {
            // Older than every kept valid snapshot: valid or not, nothing needs it.
            tracing::info!(snapshot = %path.display(), "removing a snapshot older than the newest valid ones");
            fs.remove(&path)
                .map_err(|e| Error::io(format!("remove old snapshot {}", path.display()), e))?;
            continue;
        }
        match check(fs, &path, lsn)? {
            Ok(()) => kept.push(lsn),
            Err(reason) => {
                tracing::error!(snapshot = %path.display(), reason = %reason, "a snapshot is corrupt: it does not count toward the snapshots kept, and older valid ones stay");
            }
        }
    }
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("sync snapshot directory {}", dir.display()), e))?;
    Ok(kept.last().copied())
}
