//! Reading the log without opening it for writing: for `walletd wal inspect`, recovery drills on
//! a copy of a data directory, and tests. Nothing is repaired; a torn tail is reported, not cut.

use std::path::Path;

use crate::error::{Error, Result};
use crate::fs::{FileSystem, StdFs};
use crate::record::RecordRef;
use crate::recovery::{self, DirScan, Mode};

/// Visits every record with LSN ≥ `from_lsn` in order, checking the whole log as recovery does.
/// Returns what the scan found (segments, first and next LSN, any torn tail).
pub fn read_from(
    dir: &Path,
    record_bytes_max: u32,
    from_lsn: u64,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<DirScan> {
    read_from_with(&StdFs, dir, record_bytes_max, from_lsn, visit)
}

/// [`read_from`] on any file system.
pub fn read_from_with(
    fs: &dyn FileSystem,
    dir: &Path,
    record_bytes_max: u32,
    from_lsn: u64,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<DirScan> {
    let scan = recovery::scan_dir(fs, dir, record_bytes_max, Mode::ReadOnly, from_lsn, visit)?;
    if from_lsn < scan.first_lsn && !scan.segments.is_empty() {
        return Err(Error::Unavailable {
            requested: from_lsn,
            first_available: scan.first_lsn,
        });
    }
    Ok(scan)
}

/// Visits, in order, every record with `from_lsn ≤ LSN ≤ until_lsn`, and stops there: for
/// readers that run beside a live writer (a background snapshot replays up to the durable LSN
/// while new records are being appended). Records up to `until_lsn` must be intact and
/// contiguous; anything past it is not looked at.
pub fn read_range(
    dir: &Path,
    record_bytes_max: u32,
    from_lsn: u64,
    until_lsn: u64,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<()> {
    use crate::record::{decode_segment_header, parse_record, Parsed, SEGMENT_HEADER_BYTES};
    if until_lsn < from_lsn {
        return Ok(());
    }
    let fs = StdFs;
    let (segments, _) = recovery::list_segments(&fs, dir)?;
    if let Some((first, _)) = segments.first() {
        if from_lsn < *first {
            return Err(Error::Unavailable {
                requested: from_lsn,
                first_available: *first,
            });
        }
    }
    let mut expected = None::<u64>;
    for (index, (first_lsn, path)) in segments.iter().enumerate() {
        let next_first = segments.get(index + 1).map(|(lsn, _)| *lsn);
        // Skip segments wholly before the range; stop after the one holding `until_lsn`.
        if next_first.is_some_and(|next| next <= from_lsn) {
            continue;
        }
        if *first_lsn > until_lsn {
            break;
        }
        let bytes = fs
            .read(path)
            .map_err(|e| Error::io(format!("read segment {}", path.display()), e))?;
        let header_lsn =
            decode_segment_header(&bytes).map_err(|reason| Error::corruption(path, 0, reason))?;
        if header_lsn != *first_lsn || expected.is_some_and(|e| e != header_lsn) {
            return Err(Error::corruption(
                path,
                0,
                "segment does not continue the log",
            ));
        }
        let mut offset = SEGMENT_HEADER_BYTES;
        let mut lsn = header_lsn;
        loop {
            if lsn > until_lsn {
                return Ok(());
            }
            match parse_record(
                &bytes,
                offset,
                crate::record::read_bytes_max(record_bytes_max, bytes.len()),
            ) {
                Parsed::Record(record) if record.lsn == lsn => {
                    if lsn >= from_lsn {
                        visit(record)?;
                    }
                    offset += record.bytes();
                    lsn += 1;
                }
                Parsed::End if next_first == Some(lsn) => break,
                Parsed::End => {
                    return Err(Error::Unavailable {
                        requested: until_lsn,
                        first_available: lsn,
                    })
                }
                Parsed::Record(_) | Parsed::Invalid(_) => {
                    return Err(Error::corruption(
                        path,
                        offset as u64,
                        format!("record {lsn} is damaged, but it was reported durable"),
                    ))
                }
            }
        }
        expected = Some(lsn);
    }
    match expected {
        Some(next) if next > until_lsn => Ok(()),
        _ => Err(Error::Unavailable {
            requested: until_lsn,
            first_available: expected.unwrap_or(from_lsn),
        }),
    }
}
