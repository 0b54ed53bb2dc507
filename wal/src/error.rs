//! Errors of the write-ahead log, classified by what the caller must do.
//!
//! `Corruption` is kept apart from `Io`: an I/O error may be the machine's fault and an operator can
//! retry after fixing it, while corruption means the bytes on disk are not what we wrote, and
//! recovery must refuse to guess. `Poisoned` is terminal for the process: after a failed write or
//! fsync the kernel may have dropped dirty pages, so no later fsync can prove anything (see
//! fjall's `Error::Poisoned` and the PostgreSQL "fsyncgate" discussion).

use std::path::PathBuf;

/// Everything that can go wrong in the log.
#[derive(Debug, thiserror::Error)]
#[non_exhaustive]
pub enum Error {
    /// An operating-system call failed. `context` says what we were doing, as a verb phrase.
    #[error("{context}: {source}")]
    Io {
        context: String,
        #[source]
        source: std::io::Error,
    },

    /// Bytes on disk fail their checksum or framing somewhere recovery cannot explain as a torn
    /// tail. Names the file and the byte offset so an operator can look at it.
    #[error("corruption in {}: offset {offset}: {reason}", path.display())]
    Corruption {
        path: PathBuf,
        offset: u64,
        reason: String,
    },

    /// A record larger than [`crate::Options::record_bytes_max`] was offered.
    #[error("record of {len} bytes exceeds the maximum of {max} bytes")]
    RecordTooLarge { len: usize, max: u32 },

    /// A previous write or fsync failed; the log accepts nothing more. Restart the process and let
    /// recovery decide what is durable.
    #[error("the log is poisoned by an earlier failure and accepts no more records: {reason}")]
    Poisoned { reason: String },

    /// The log was closed; its writer thread has stopped.
    #[error("the log is closed")]
    Closed,

    /// Another process (or another `Wal` in this process) holds the directory.
    #[error("the directory {} is in use by another process (lock file {})", dir.display(), lock.display())]
    Locked { dir: PathBuf, lock: PathBuf },

    /// Records before `first_available` were removed after a snapshot; the caller asked for older.
    #[error(
        "records from LSN {requested} are no longer in the log (it starts at {first_available})"
    )]
    Unavailable {
        requested: u64,
        first_available: u64,
    },

    /// The archive and the live log together do not hold one run of records from LSN 1: the
    /// records from `first_missing` up to (not including) `next_present` are in neither.
    #[error(
        "{}",
        gap_message(*first_missing, *next_present, archive, log)
    )]
    Gap {
        first_missing: u64,
        /// The first LSN found after the gap; `None` when nothing follows (no live segment).
        next_present: Option<u64>,
        archive: PathBuf,
        log: PathBuf,
    },

    /// The replay visitor refused a record (its payload does not make sense to the caller).
    #[error("replay stopped at LSN {lsn}: {reason}")]
    Replay { lsn: u64, reason: String },

    /// The options do not describe a usable log.
    #[error("invalid options: {0}")]
    InvalidOptions(String),
}

impl Error {
    pub(crate) fn io(context: impl Into<String>, source: std::io::Error) -> Self {
        Error::Io {
            context: context.into(),
            source,
        }
    }

    pub(crate) fn corruption(
        path: impl Into<PathBuf>,
        offset: u64,
        reason: impl Into<String>,
    ) -> Self {
        Error::Corruption {
            path: path.into(),
            offset,
            reason: reason.into(),
        }
    }

    /// True when the on-disk bytes themselves are wrong (as opposed to the machine failing).
    pub fn is_corruption(&self) -> bool {
        matches!(self, Error::Corruption { .. })
    }
}

fn gap_message(
    first_missing: u64,
    next_present: Option<u64>,
    archive: &std::path::Path,
    log: &std::path::Path,
) -> String {
    let range = match next_present {
        Some(next) => format!("LSN {first_missing} to {}", next.saturating_sub(1)),
        None => format!("LSN {first_missing} onwards (the log holds no segment)"),
    };
    format!(
        "records {range} are in neither the archive {} nor the log {}: the two must form one          run from LSN 1; restore the missing segments into the archive and run again",
        archive.display(),
        log.display()
    )
}

/// The log's result type.
pub type Result<T, E = Error> = std::result::Result<T, E>;
