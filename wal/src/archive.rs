//! The WAL archive: where retired segments go instead of being deleted, and how the archive and
//! the live log are read back as one log from LSN 1.
//!
//! # Moving a segment ([`archive_segment`])
//! A segment is retired only once it is full, synced and not the active one, so its bytes never
//! change again. It is moved into the archive under the same file name, and at every instant it
//! is in the log, in the archive, or in both: never in neither. The steps, and what a crash after
//! each leaves:
//!
//! | step | crash after it leaves |
//! |---|---|
//! | 1. name it in the archive: a hard link (same file system), else a copy to `NAME.tmp`, fdatasync, rename to `NAME` | the log's copy, maybe an archive copy or a `.tmp` (ignored by readers, overwritten by the next attempt) |
//! | 2. fsync the archive directory | both copies, durably |
//! | 3. remove it from the log | the archive's copy durably, maybe the log's too |
//! | 4. fsync the log directory (once, after all segments of a round) | the archive's copy only |
//!
//! So the archive's entry is durable (step 2) before the log's is even removed (step 3). A
//! hard link rather than a rename for step 1 gives that order explicitly: a rename across two
//! directories is one atomic step on the journaling file systems Linux uses, but its durability
//! then rests on both directories reaching the disk in one journal transaction; link, fsync,
//! unlink, fsync does not depend on that.
//!
//! A segment already in the archive (a crash between steps 1 and 3, or a failed step 2 or 3) is
//! compared byte for byte with the log's: the same bytes go on with step 2 (the entry may not be
//! durable yet), different bytes refuse (the archive belongs to another log), and nothing is
//! removed from the log.
//!
//! # Reading it back ([`replay_archived`])
//! The archive's segments, in LSN order, must start at LSN 1 and follow each other without a
//! gap; each is checked as recovery checks a segment that is not the last (any damage is
//! corruption: an archived segment is complete). The live log must then start at or before the
//! LSN after the archive's last record; the two may overlap (a segment in both places). A missing
//! range is refused with [`Error::Gap`], naming it.

use std::path::{Path, PathBuf};

use crate::error::{Error, Result};
use crate::fs::FileSystem;
use crate::record::RecordRef;
use crate::recovery::{self, SegmentSpec};

/// Bytes copied per read and write when a segment is copied into the archive.
const COPY_CHUNK_BYTES: u64 = 1 << 20;

/// Creates the archive directory when missing (owner only) and makes its own entry durable, so
/// the first segment archived is never named in a directory a crash could lose.
pub fn prepare(fs: &dyn FileSystem, archive_dir: &Path) -> Result<()> {
    fs.create_dir_all(archive_dir).map_err(|e| {
        Error::io(
            format!("create the WAL archive directory {}", archive_dir.display()),
            e,
        )
    })?;
    if let Some(parent) = archive_dir.parent().filter(|p| !p.as_os_str().is_empty()) {
        fs.sync_dir(parent).map_err(|e| {
            Error::io(
                format!("sync {} (the archive directory's parent)", parent.display()),
                e,
            )
        })?;
    }
    fs.sync_dir(archive_dir)
        .map_err(|e| Error::io(format!("sync {}", archive_dir.display()), e))
}

/// Moves one retired segment (`segment`, in the directory `log_dir`) into `archive_dir` under
/// the same name: steps 1 to 3 of the module docs. The caller syncs `log_dir` afterwards (step 4).
pub fn archive_segment(fs: &dyn FileSystem, segment: &Path, archive_dir: &Path) -> Result<()> {
    let name = segment
        .file_name()
        .ok_or_else(|| Error::InvalidOptions(format!("{} has no file name", segment.display())))?;
    let target = archive_dir.join(name);
    // 1. Name it in the archive.
    if exists(fs, &target)? {
        same_bytes(fs, segment, &target)?;
    } else {
        match fs.hard_link(segment, &target) {
            Ok(()) => {}
            Err(e) if e.kind() == std::io::ErrorKind::AlreadyExists => {
                same_bytes(fs, segment, &target)?;
            }
            // Another file system, or one without hard links: copy.
            Err(e)
                if matches!(
                    e.kind(),
                    std::io::ErrorKind::CrossesDevices
                        | std::io::ErrorKind::Unsupported
                        | std::io::ErrorKind::PermissionDenied
                ) =>
            {
                copy_durably(fs, segment, &target)?;
            }
            Err(e) => {
                return Err(Error::io(
                    format!("link {} into {}", segment.display(), archive_dir.display()),
                    e,
                ))
            }
        }
    }
    // 2. The archive's entry is durable before the log's goes.
    fs.sync_dir(archive_dir).map_err(|e| {
        Error::io(
            format!("sync the WAL archive directory {}", archive_dir.display()),
            e,
        )
    })?;
    // 3. Remove it from the log.
    fs.remove(segment).map_err(|e| {
        Error::io(
            format!("remove archived segment {} from the log", segment.display()),
            e,
        )
    })
}

fn exists(fs: &dyn FileSystem, path: &Path) -> Result<bool> {
    match fs.open(path) {
        Ok(_) => Ok(true),
        Err(e) if e.kind() == std::io::ErrorKind::NotFound => Ok(false),
        Err(e) => Err(Error::io(format!("look for {}", path.display()), e)),
    }
}

/// Copies `from` to `to` through `to.tmp`: written, fdatasync'ed, renamed. The caller syncs the
/// directory.
fn copy_durably(fs: &dyn FileSystem, from: &Path, to: &Path) -> Result<()> {
    let mut temporary = to.as_os_str().to_owned();
    temporary.push(".tmp");
    let temporary = PathBuf::from(temporary);
    let context = || format!("copy {} to {}", from.display(), temporary.display());
    let source = fs.open(from).map_err(|e| Error::io(context(), e))?;
    let len = source.len().map_err(|e| Error::io(context(), e))?;
    let copy = fs.create(&temporary).map_err(|e| Error::io(context(), e))?;
    let mut buf = Vec::new();
    let mut offset = 0u64;
    while offset < len {
        let chunk = (len - offset).min(COPY_CHUNK_BYTES);
        buf.resize(usize::try_from(chunk).unwrap_or(usize::MAX), 0);
        source
            .read_exact_at(&mut buf, offset)
            .map_err(|e| Error::io(context(), e))?;
        copy.write_all_at(&buf, offset)
            .map_err(|e| Error::io(context(), e))?;
        offset += chunk;
    }
    copy.sync_data().map_err(|e| Error::io(context(), e))?;
    fs.rename(&temporary, to).map_err(|e| {
        Error::io(
            format!("rename {} to {}", temporary.display(), to.display()),
            e,
        )
    })
}

/// Succeeds when `archived` holds exactly the bytes of `segment`; otherwise refuses, naming both.
fn same_bytes(fs: &dyn FileSystem, segment: &Path, archived: &Path) -> Result<()> {
    let read = |path: &Path| {
        fs.read(path)
            .map_err(|e| Error::io(format!("read {}", path.display()), e))
    };
    if read(segment)? == read(archived)? {
        tracing::info!(segment = %segment.display(), archived = %archived.display(), "the segment is already in the archive (an earlier move was interrupted); finishing the move");
        return Ok(());
    }
    Err(Error::corruption(
        archived,
        0,
        format!(
            "the archive already holds a segment of this name with other bytes than {}: the \
             archive directory belongs to another log; give this data directory its own archive",
            segment.display()
        ),
    ))
}

/// What [`replay_archived`] read.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ArchiveScan {
    /// Segments read from the archive.
    pub segments: usize,
    /// Records visited from the archive.
    pub records: u64,
    /// The LSN after the archive's last record (1 for an empty archive): where the live log's
    /// replay takes over.
    pub next_lsn: u64,
}

/// Visits every record of the archive in `archive_dir` from LSN 1, in order, and checks that the
/// live log in `log_dir` continues it (see the module docs). Changes nothing on disk. Returns
/// where the live log's replay must start.
pub fn replay_archived(
    fs: &dyn FileSystem,
    archive_dir: &Path,
    log_dir: &Path,
    record_bytes_max: u32,
    visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
) -> Result<ArchiveScan> {
    let gap = |first_missing: u64, next_present: Option<u64>| Error::Gap {
        first_missing,
        next_present,
        archive: archive_dir.to_path_buf(),
        log: log_dir.to_path_buf(),
    };
    let (archived, _) = recovery::list_segments(fs, archive_dir)?;
    let (live, _) = recovery::list_segments(fs, log_dir)?;
    let mut next_lsn = 1u64;
    let mut records = 0u64;
    for (name_lsn, path) in &archived {
        if *name_lsn > next_lsn {
            return Err(gap(next_lsn, Some(*name_lsn)));
        }
        let bytes = fs
            .read(path)
            .map_err(|e| Error::io(format!("read archived segment {}", path.display()), e))?;
        let spec = SegmentSpec {
            path,
            name_lsn: *name_lsn,
            expected_first_lsn: Some(next_lsn),
            payload_bytes_max: record_bytes_max,
            is_last: false,
            visit_from_lsn: 1,
        };
        let mut count = |record: RecordRef<'_>| {
            records += 1;
            visit(record)
        };
        let scan = recovery::scan_segment(&spec, &bytes, &mut count)?;
        next_lsn = scan.next_lsn;
    }
    match live.first() {
        Some((first, _)) if *first > next_lsn => Err(gap(next_lsn, Some(*first))),
        None if next_lsn > 1 => Err(gap(next_lsn, None)),
        _ => Ok(ArchiveScan {
            segments: archived.len(),
            records,
            next_lsn,
        }),
    }
}
