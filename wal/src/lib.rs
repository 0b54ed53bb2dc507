//! A segmented, checksummed, group-committed write-ahead log. It knows bytes, not money.
//!
//! # Layout
//! - [`record`]: the on-disk format of segments and records (a field table is in its docs).
//! - [`writer`] (private): the one thread that writes, batches and fsyncs (group commit).
//! - [`log`]: the [`Wal`] handle: open with recovery, [`Wal::append`], durable watermark, snapshots.
//! - [`recovery`]: the scan that decides where the log ends: torn tail versus corruption.
//! - [`reader`]: read-only scans for inspection and drills.
//! - [`archive`]: where retired segments go when [`Options::archive_dir`] is set, and reading
//!   the archive and the live log back as one log from LSN 1.
//! - [`snapshot`]: snapshot files (an opaque blob tagged with the LSN it covers).
//! - [`tap`]: the channel that hands durable records to their one consumer, bounded by bytes.
//! - `budget` (private): the byte budget both of the log's queues are bounded by.
//! - [`fs`]: the file-system seam, with a fault-injecting implementation for tests.
//! - [`error`]: typed errors; corruption is distinct from I/O.
//!
//! # Guarantees
//! - Every appended record gets the next LSN: contiguous from 1, never reused, also across restarts.
//! - An [`Append`] ticket resolves only after its record is written and fdatasync'ed (with the
//!   default [`FsyncPolicy::Always`]). Many concurrent appenders share one write and one fsync.
//! - The queue to the writer is bounded, in records and in bytes: appenders block when the disk
//!   falls behind.
//! - A failed write or fsync poisons the log: every pending and later append fails. Never retried.
//! - A retired segment (covered by the snapshots and the retention floor) is deleted, or with
//!   [`Options::archive_dir`] moved into the archive: durably named there before it leaves the
//!   log, so a crash never leaves it in neither place.
//! - Recovery cuts a torn tail (a crash mid-write) and refuses, naming file and offset, on damage
//!   anywhere else. It never skips, reorders or invents a record, and it is idempotent.
//!
//! Design sources: fjall's journal (layout, poisoning), okaywal and raft-engine (group commit,
//! recovery), toydb (truncation tests), TigerBeetle's TIGER_STYLE (limits, paired assertions).

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

pub mod archive;
mod budget;
pub mod error;
pub mod fs;
pub mod log;
pub mod reader;
pub mod record;
pub mod recovery;
pub mod snapshot;
pub mod tap;
mod writer;

#[cfg(test)]
mod tests;

pub use error::{Error, Result};
pub use log::{
    Append, DurableRecord, FsyncPolicy, Options, Recovered, StatsSnapshot, Wal, SLOW_SYNC,
};
pub use record::RecordRef;
pub use snapshot::Snapshot;
pub use writer::SpareVerdict;
