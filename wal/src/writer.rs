//! The writer thread: the only code that writes segments.
//!
//! Appenders hand `(lsn, payload)` pairs over a bounded channel in LSN order. The thread takes the
//! first waiting record, drains whatever else is queued (up to `batch_bytes_max`), encodes the
//! lot into one buffer, issues one `pwrite` and one `fdatasync`, then raises the durable watermark
//! and wakes everyone waiting at or below it. While it syncs, new records pile up in the channel
//! and form the next batch: that is group commit, and it is what turns ~10k fsyncs/s into
//! hundreds of thousands of durable records/s (okaywal `log_file.rs`, raft-engine
//! `write_barrier.rs`).
//!
//! A write never spans two segments. When the next record does not fit, the current batch is
//! written and synced, then the next segment is created (temp name, zero-filled, synced, renamed,
//! directory synced), so at any moment at most one write is not yet durable: the recovery rules in
//! [`crate::recovery`] rely on it.
//!
//! Any failed write, sync or rotation poisons the log: the error is recorded, every waiter fails,
//! and the thread stops. Nothing is retried (STYLE.md §12).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{Receiver, TryRecvError};

use crate::error::{Error, Result};
use crate::fs::{FileSystem, WalFile};
use crate::log::Shared;
use crate::record::{
    encode_record, encode_segment_header, record_bytes, segment_file_name, SEGMENT_HEADER_BYTES,
};
use crate::{FsyncPolicy, Options};

/// A record on its way to the writer.
pub(crate) struct Pending {
    pub lsn: u64,
    pub payload: Vec<u8>,
}

/// The segment being appended to.
pub(crate) struct ActiveSegment {
    pub file: Box<dyn WalFile>,
    pub path: PathBuf,
    pub first_lsn: u64,
    /// Offset where the next record goes.
    pub offset: u64,
}

pub(crate) struct Writer {
    pub fs: Arc<dyn FileSystem>,
    pub dir: PathBuf,
    pub options: Options,
    pub shared: Arc<Shared>,
    pub segment: ActiveSegment,
    pub rx: Receiver<Pending>,
}

impl Writer {
    /// Runs until every sender is gone (clean close) or a failure poisons the log.
    pub fn run(mut self) {
        let mut buf: Vec<u8> = Vec::with_capacity(self.options.batch_bytes_max + 64 * 1024);
        while let Ok(first) = self.rx.recv() {
            let mut batch = vec![first];
            let mut bytes = record_bytes(batch.first().map_or(0, |p| p.payload.len()));
            while bytes < self.options.batch_bytes_max {
                match self.rx.try_recv() {
                    Ok(next) => {
                        bytes += record_bytes(next.payload.len());
                        batch.push(next);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            if let Err(error) = self.write_batch(&batch, &mut buf) {
                tracing::error!(error = %error, "write-ahead log failed; poisoning it, every later append fails");
                self.shared.poison(error.to_string());
                return;
            }
        }
        tracing::debug!("write-ahead log writer stopping: all appenders closed");
    }

    fn write_batch(&mut self, batch: &[Pending], buf: &mut Vec<u8>) -> Result<()> {
        buf.clear();
        let mut write_first_lsn = batch.first().map_or(0, |p| p.lsn);
        let mut last_lsn = 0;
        for pending in batch {
            let len = record_bytes(pending.payload.len()) as u64;
            if self.segment.offset + buf.len() as u64 + len > self.options.segment_bytes {
                self.flush(buf, last_lsn)?;
                self.rotate(pending.lsn)?;
                write_first_lsn = pending.lsn;
            }
            let batch_pos = u32::try_from(pending.lsn - write_first_lsn).unwrap_or(u32::MAX);
            encode_record(buf, pending.lsn, batch_pos, &pending.payload);
            last_lsn = pending.lsn;
        }
        self.flush(buf, last_lsn)
    }

    /// Writes `buf` at the segment's offset, syncs, and publishes `last_lsn` as durable.
    fn flush(&mut self, buf: &mut Vec<u8>, last_lsn: u64) -> Result<()> {
        if buf.is_empty() {
            return Ok(());
        }
        let segment = &mut self.segment;
        segment
            .file
            .write_all_at(buf, segment.offset)
            .map_err(|e| {
                Error::io(
                    format!(
                        "write {} bytes to {} at offset {}",
                        buf.len(),
                        segment.path.display(),
                        segment.offset
                    ),
                    e,
                )
            })?;
        segment.offset += buf.len() as u64;
        let batch_bytes = buf.len();
        buf.clear();
        if self.options.fsync == FsyncPolicy::Always {
            let started = std::time::Instant::now();
            segment
                .file
                .sync_data()
                .map_err(|e| Error::io(format!("fdatasync {}", segment.path.display()), e))?;
            self.shared
                .stats
                .record_sync(started.elapsed(), batch_bytes);
        } else {
            self.shared
                .stats
                .record_sync(std::time::Duration::ZERO, batch_bytes);
        }
        self.shared.publish_durable(last_lsn);
        Ok(())
    }

    /// Closes the full segment and starts a new one whose first record is `first_lsn`.
    fn rotate(&mut self, first_lsn: u64) -> Result<()> {
        let segment = create_segment(self.fs.as_ref(), &self.dir, first_lsn, &self.options)?;
        tracing::debug!(segment = %segment.path.display(), first_lsn, "rotated to a new segment");
        self.shared.add_segment(first_lsn, segment.path.clone());
        self.segment = segment;
        Ok(())
    }
}

/// Creates a segment durably: write header and zeros under a temp name, sync, rename, sync the
/// directory. A crash at any point leaves either no segment or a complete, empty one.
pub(crate) fn create_segment(
    fs: &dyn FileSystem,
    dir: &Path,
    first_lsn: u64,
    options: &Options,
) -> Result<ActiveSegment> {
    let path = dir.join(segment_file_name(first_lsn));
    let temp = dir.join(format!("{}.tmp", segment_file_name(first_lsn)));
    let context = |what: &str| format!("{what} new segment {}", path.display());
    let file = fs
        .create(&temp)
        .map_err(|e| Error::io(context("create"), e))?;
    // Zero-fill for real instead of `set_len`: a sparse file makes every later fdatasync also
    // allocate blocks and journal metadata (about twice the latency on this machine's disk).
    let zeros = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < options.segment_bytes {
        let n = (options.segment_bytes - at).min(zeros.len() as u64) as usize;
        file.write_all_at(zeros.get(..n).unwrap_or_default(), at)
            .map_err(|e| Error::io(context("preallocate"), e))?;
        at += n as u64;
    }
    file.write_all_at(&encode_segment_header(first_lsn), 0)
        .map_err(|e| Error::io(context("write the header of"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(context("sync"), e))?;
    fs.rename(&temp, &path)
        .map_err(|e| Error::io(context("rename"), e))?;
    fs.sync_dir(dir)
        .map_err(|e| Error::io(context("sync the directory of"), e))?;
    Ok(ActiveSegment {
        file,
        path,
        first_lsn,
        offset: SEGMENT_HEADER_BYTES as u64,
    })
}
