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
