//! Recovery: scan every segment in LSN order, check it, and decide where the log ends.
//!
//! Rules (STYLE.md §23; ARCHITECTURE.md invariant 8):
//! - An I/O error fails recovery.
//! - Each segment's header must be intact, its name must match its first LSN, and it must start
//!   exactly where the previous one ended: LSNs are contiguous across the whole log.
//! - Inside a segment, records follow each other with contiguous LSNs until an all-zero header;
//!   after it, the rest of the segment must be zeros.
//! - Anything else is *damage* at some offset X. Damage in any segment but the last is corruption:
//!   recovery refuses, naming the file and X.
//! - Damage in the last segment is a *torn tail* when nothing after X contradicts it, and it is cut
//!   off (the file is truncated at X, re-extended with zeros, and synced). The writer makes each
//!   write durable before it issues the next and syncs a segment before it creates the next one,
//!   so only the last write can be torn, and every record of that write has the same
//!   `lsn - batch_pos`. So if a valid record after X belongs to a *later* write
//!   (`lsn - batch_pos` greater than the LSN expected at X), the bytes at X were once durable:
//!   that is corruption, and recovery refuses.
//! - Records are never skipped, reordered or invented. Running recovery twice gives the same log.
//!
//! - A tear cannot reach further than one write: non-zero bytes more than
//!   [`crate::record::write_bytes_max`] past the damage are corruption too.
//!
//! What this cannot tell apart: a bit flip inside the very last write of the log looks exactly
//! like a torn write, and is cut. That write was the newest; whether it was acknowledged depends
//! on whether its fsync returned before the damage, which no format can know without a second
//! copy.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::record::{
    decode_segment_header, parse_record, parse_segment_file_name, Parsed, RecordRef,
    SEGMENT_HEADER_BYTES,
};

/// How a segment's written data ends.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Tail {
    /// Zeros (or the end of the file) follow the last record.
    Clean,
    /// A torn write starts at `offset`; `reason` says what was found there.
    Torn { offset: u64, reason: String },
}

/// The result of scanning one segment.
#[derive(Debug, Clone)]
pub struct SegmentScan {
    pub path: PathBuf,
    pub first_lsn: u64,
    /// LSN after the last valid record (the next LSN to write).
    pub next_lsn: u64,
    /// Byte offset just past the last valid record.
    pub end_offset: u64,
    pub tail: Tail,
}

/// Whether recovery may repair a torn tail or only report it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Mode {
    /// Truncate a torn tail (the writer is about to append there).
    Repair,
    /// Change nothing (for `wal inspect` and drills on a copy).
    ReadOnly,
}

/// What a scan of the whole directory found.
#[derive(Debug, Clone)]
pub struct DirScan {
    /// Segments in LSN order.
    pub segments: Vec<SegmentScan>,
    /// LSN of the first record present (equals `next_lsn` when the log is empty).
    pub first_lsn: u64,
    /// The next LSN to assign.
    pub next_lsn: u64,
    /// Bytes cut off a torn tail, when one was found (and, in repair mode, removed).
    pub torn: Option<(PathBuf, u64, String)>,
    /// Stale temporary files found (removed in repair mode, except the preallocator's spare,
    /// which opening the log inspects).
    pub stale_temp_files: Vec<PathBuf>,
}

/// Segment files as (first LSN from the name, path), in LSN order.
pub(crate) type SegmentList = Vec<(u64, PathBuf)>;

/// Lists segment paths in LSN order, with the temp files found beside them.
pub(crate) fn list_segments(
    fs: &dyn FileSystem,
    dir: &Path,
) -> Result<(SegmentList, Vec<PathBuf>)> {
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("list log directory {}", dir.display()), e))?;
    let mut segments = Vec::new();
    let mut temps = Vec::new();
    for name in names {
        let Some(text) = name.to_str() else { continue };
        if let Some(lsn) = parse_segment_file_name(text) {
            segments.push((lsn, dir.join(&name)));
        } else if text.ends_with(".wal.tmp") || text.ends_with(".spare") {
            temps.push(dir.join(&name));
        }
    }
    segments.sort();
    Ok((segments, temps))
}

/// Where a segment sits in the log and what the scan of it should do.
pub(crate) struct SegmentSpec<'a> {
    pub path: &'a Path,
    /// First LSN according to the file name.
    pub name_lsn: u64,
    /// Where the previous segment ended (`None` for the first segment).
    pub expected_first_lsn: Option<u64>,
    pub payload_bytes_max: u32,
    /// Only the last segment may have a torn tail.
    pub is_last: bool,
    /// Records below this LSN are checked but not visited.
    pub visit_from_lsn: u64,
}

/// Scans one segment's bytes, calling `visit` for every valid record from `visit_from_lsn`.
pub(crate) fn scan_segment(
    spec: &SegmentSpec<'_>,
    bytes: &[u8],
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<SegmentScan> {
    let SegmentSpec {
        path,
        name_lsn,
        expected_first_lsn,
        payload_bytes_max,
        is_last,
        visit_from_lsn,
    } = *spec;
    // Whole records longer than the append limit are read (`record::read_bytes_max`); what a
    // torn tail may span is still judged by the append limit, so damage beyond it stays
    // corruption (a tear of a longer record refuses to open rather than being cut).
    let append_max = payload_bytes_max;
    let payload_bytes_max = crate::record::read_bytes_max(payload_bytes_max, bytes.len());
    let first_lsn =
        decode_segment_header(bytes).map_err(|reason| Error::corruption(path, 0, reason))?;
    if first_lsn != name_lsn {
        return Err(Error::corruption(
            path,
            0,
            format!("header says first LSN {first_lsn} but the file name says {name_lsn}"),
        ));
    }
    if let Some(expected) = expected_first_lsn {
        if first_lsn != expected {
            return Err(Error::corruption(
                path,
                0,
                format!("segment starts at LSN {first_lsn}, but the previous segment ends before LSN {expected}"),
            ));
        }
    }

    let mut offset = SEGMENT_HEADER_BYTES;
    let mut next_lsn = first_lsn;
    let damage = loop {
        match parse_record(bytes, offset, payload_bytes_max) {
            Parsed::Record(record) if record.lsn == next_lsn => {
                if record.lsn >= visit_from_lsn {
                    visit(record)?;
                }
                offset += record.bytes();
                next_lsn += 1;
            }
            Parsed::Record(record) => {
                break Some(format!(
                    "record has LSN {} where {next_lsn} was expected",
                    record.lsn
                ))
            }
            Parsed::End => {
                let rest = bytes.get(offset..).unwrap_or_default();
                if rest.iter().all(|&b| b == 0) {
                    break None;
                }
                break Some("non-zero bytes after the end-of-data marker".to_string());
            }
            Parsed::Invalid(reason) => break Some(reason),
        }
    };

    let tail = match damage {
        None => Tail::Clean,
        Some(reason) if !is_last => return Err(Error::corruption(path, offset as u64, reason)),
        Some(reason) => {
            let reach = offset.saturating_add(crate::record::write_bytes_max(append_max));
            if let Some(far) = bytes
                .get(reach..)
                .and_then(|rest| rest.iter().position(|&b| b != 0))
            {
                return Err(Error::corruption(
                    path,
                    offset as u64,
                    format!(
                        "{reason}; non-zero bytes at offset {} lie beyond the longest possible write, so this is not a torn tail",
                        reach + far
                    ),
                ));
            }
            if let Some((at, later)) = find_later_write(bytes, offset, next_lsn, payload_bytes_max)
            {
                return Err(Error::corruption(
                    path,
                    offset as u64,
                    format!(
                        "{reason}; a record of a later write (LSN {}) follows at offset {at}, so this is not a torn tail",
                        later.lsn
                    ),
                ));
            }
            Tail::Torn {
                offset: offset as u64,
                reason,
            }
        }
    };
    Ok(SegmentScan {
        path: path.to_path_buf(),
        first_lsn,
        next_lsn,
        end_offset: offset as u64,
        tail,
    })
}

/// Looks past damage at `from` for a valid record that cannot belong to the torn final write:
/// one from a later write, or one that repeats an LSN already present.
fn find_later_write(
    bytes: &[u8],
    from: usize,
    expected_lsn: u64,
    payload_bytes_max: u32,
) -> Option<(usize, RecordRef<'_>)> {
    let mut at = from + 1;
    while at < bytes.len() {
        // Every record has a non-zero byte among its first 24 (its LSN is at least 1), so no
        // record starts more than 23 bytes before the next non-zero byte: jump over zero runs.
        if bytes.get(at) == Some(&0) {
            let skip = bytes
                .get(at..)
                .and_then(|rest| rest.iter().position(|&b| b != 0))?;
            at = at.max((at + skip).saturating_sub(crate::record::RECORD_HEADER_BYTES - 1));
        }
        if let Parsed::Record(record) = parse_record(bytes, at, payload_bytes_max) {
            if record.write_first_lsn() > expected_lsn || record.lsn < expected_lsn {
                return Some((at, record));
            }
            // A later record of the same torn write: consistent with a tear. Skip past it.
            at += record.bytes();
            continue;
        }
        at += 1;
    }
    None
}

/// Scans every segment of `dir` in order, checking continuity, and visits records from
/// `visit_from_lsn`. In [`Mode::Repair`] a torn tail is cut off and stale temp files removed.
pub fn scan_dir(
    fs: &dyn FileSystem,
    dir: &Path,
    payload_bytes_max: u32,
    mode: Mode,
    visit_from_lsn: u64,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<DirScan> {
    let (segments, temps) = list_segments(fs, dir)?;
    if mode == Mode::Repair {
        // The preallocator's spare is not removed here: opening the log inspects it and either
        // reuses it or removes it, saying why (`crate::writer::inspect_spare`).
        for temp in temps
            .iter()
            .filter(|t| t.extension().is_none_or(|e| e != "spare"))
        {
            tracing::warn!(path = %temp.display(), "removing a segment file left half-created by a crash");
            fs.remove(temp)
                .map_err(|e| Error::io(format!("remove stale temp file {}", temp.display()), e))?;
        }
    }

    let mut scans: Vec<SegmentScan> = Vec::with_capacity(segments.len());
    let mut torn = None;
    let count = segments.len();
    for (index, (name_lsn, path)) in segments.iter().enumerate() {
        let bytes = fs
            .read(path)
            .map_err(|e| Error::io(format!("read segment {}", path.display()), e))?;
        let expected = scans.last().map(|s| s.next_lsn);
        let spec = SegmentSpec {
            path,
            name_lsn: *name_lsn,
            expected_first_lsn: expected,
            payload_bytes_max,
            is_last: index + 1 == count,
            visit_from_lsn,
        };
        let scan = scan_segment(&spec, &bytes, visit)?;
        if let Tail::Torn { offset, reason } = &scan.tail {
            tracing::warn!(
                segment = %path.display(),
                offset,
                reason = %reason,
                "cutting off a torn write at the tail of the log (a crash interrupted it before it was durable)"
            );
            torn = Some((path.clone(), *offset, reason.clone()));
            if mode == Mode::Repair {
                cut_tail(fs, path, *offset, bytes.len() as u64)?;
            }
        }
        scans.push(scan);
    }

    let first_lsn = scans.first().map_or(1, |s| s.first_lsn);
    let next_lsn = scans.last().map_or(1, |s| s.next_lsn);
    Ok(DirScan {
        segments: scans,
        first_lsn,
        next_lsn,
        torn,
        stale_temp_files: temps,
    })
}

/// Overwrites a torn tail with zeros and syncs. Writing zeros (rather than truncating and
/// re-extending) keeps the segment's blocks allocated, so later fdatasyncs stay cheap.
fn cut_tail(fs: &dyn FileSystem, path: &Path, offset: u64, len: u64) -> Result<()> {
    let context = || format!("cut the torn tail of {} at offset {offset}", path.display());
    let file = fs.open(path).map_err(|e| Error::io(context(), e))?;
    crate::writer::zero_fill(file.as_ref(), offset, len).map_err(|e| Error::io(context(), e))?;
    file.sync_data().map_err(|e| Error::io(context(), e))?;
    Ok(())
}
