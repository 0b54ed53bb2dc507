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
//! written and synced, then the next segment is put in place, so at any moment at most one write
//! is not yet durable: the recovery rules in [`crate::recovery`] rely on it.
//!
//! Zero-filling a 64 MiB segment takes ~100 ms; done at rotation it stalled every appender that
//! long. A preallocator thread therefore keeps one spare segment ready (`next.spare`, zero-filled
//! and synced); rotation only writes the header into it, syncs, renames it to its final name and
//! syncs the directory, then asks for the next spare.
//!
//! Any failed write, sync or rotation poisons the log: the error is recorded, every waiter fails,
//! and the thread stops. Nothing is retried (STYLE.md §12).

use std::path::{Path, PathBuf};
use std::sync::Arc;

use crossbeam_channel::{Receiver, Sender, TryRecvError};

use crate::budget::{record_cost, Budget};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, WalFile};
use crate::log::Shared;
use crate::record::{
    encode_record, encode_segment_header, record_bytes, segment_file_name, SEGMENT_HEADER_BYTES,
};
use crate::{DurableRecord, FsyncPolicy, Options};

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
    pub queue: Queue,
    pub spares: Spares,
    /// LSN of the last record written (for the records-per-sync counter).
    pub flushed_lsn: u64,
}

/// The writer's end of the appenders' queue: the records it takes off give their room back to
/// the byte budget ([`crate::Options::queue_bytes_max`]) once per batch ([`Queue::give_back`]),
/// and the budget is closed when the writer stops (dropped with it), so no appender waits for
/// room that cannot appear.
pub(crate) struct Queue {
    rx: Receiver<Pending>,
    budget: Arc<Budget>,
    /// Room of the records taken off since the last [`Queue::give_back`].
    taken: usize,
}

impl Queue {
    pub(crate) fn new(rx: Receiver<Pending>, budget: Arc<Budget>) -> Self {
        Queue {
            rx,
            budget,
            taken: 0,
        }
    }

    fn taken(&mut self, pending: Pending) -> Pending {
        self.taken += record_cost(pending.payload.len());
        pending
    }

    fn recv(&mut self) -> Option<Pending> {
        let pending = self.rx.recv().ok()?;
        Some(self.taken(pending))
    }

    fn try_recv(&mut self) -> std::result::Result<Pending, TryRecvError> {
        let pending = self.rx.try_recv()?;
        Ok(self.taken(pending))
    }

    /// Gives back the room of every record taken off since the last call: once a batch, not
    /// once a record (a lock and possibly a wake-up each).
    fn give_back(&mut self) {
        if self.taken > 0 {
            self.budget.release(std::mem::take(&mut self.taken));
        }
    }
}

impl Drop for Queue {
    fn drop(&mut self) {
        // Shut before any room is given back, so that room lets no waiting appender in; but
        // woken only after, so that an appender refused here finds `Wal::queued_bytes` at 0
        // (a close first let the refused one read the room not yet given back).
        self.budget.shut();
        // Records the writer never took are dropped with the channel: their room goes too, so
        // `Wal::queued_bytes` reads 0 once the writer is gone.
        while let Ok(pending) = self.rx.try_recv() {
            self.taken(pending);
        }
        self.give_back();
        self.budget.close();
    }
}

/// The writer's end of the preallocator: ask for a spare, take it when rotating.
pub(crate) struct Spares {
    ask: Option<Sender<()>>,
    ready: Receiver<std::io::Result<Box<dyn WalFile>>>,
    asked: bool,
    /// Joined on drop, so no spare is still being written once the log is closed (a later
    /// opener of the directory would otherwise inspect a file another thread is filling).
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Drop for Spares {
    fn drop(&mut self) {
        // Hanging up ends the preallocator's loop once its current spare (if any) is done.
        self.ask = None;
        if let Some(thread) = self.thread.take() {
            if thread.join().is_err() {
                tracing::error!("the segment preallocator thread panicked");
            }
        }
    }
}

/// Name of the spare segment being prepared (no header yet; recovery inspects a stale one and
/// reuses or removes it, see [`inspect_spare`]).
pub(crate) const SPARE_NAME: &str = "next.spare";

impl Spares {
    /// Starts the preallocator thread and asks it for the first spare.
    ///
    /// `prepared` is a spare recovery found intact ([`inspect_spare`]): it is handed over as the
    /// first spare instead of writing a new one.
    pub fn start(
        fs: Arc<dyn FileSystem>,
        dir: PathBuf,
        segment_bytes: u64,
        prepared: Option<Box<dyn WalFile>>,
    ) -> std::io::Result<Self> {
        let (ask, asks) = crossbeam_channel::bounded::<()>(1);
        let (done, ready) = crossbeam_channel::bounded(1);
        let reused = match prepared {
            // The channel is empty and holds one: this send cannot block.
            Some(file) => done.send(Ok(file)).is_ok(),
            None => false,
        };
        let thread = std::thread::Builder::new()
            .name("wal-prealloc".into())
            .spawn(move || {
                while asks.recv().is_ok() {
                    let path = dir.join(SPARE_NAME);
                    let prepared = fs.create(&path).and_then(|file| {
                        zero_fill(file.as_ref(), 0, segment_bytes)?;
                        file.sync_data()?;
                        Ok(file)
                    });
                    if done.send(prepared).is_err() {
                        return;
                    }
                }
            })?;
        let mut spares = Spares {
            ask: Some(ask),
            ready,
            asked: reused,
            thread: Some(thread),
        };
        if !reused {
            spares.request();
        }
        Ok(spares)
    }

    fn request(&mut self) {
        if let Some(ask) = &self.ask {
            self.asked = ask.try_send(()).is_ok();
        }
    }

    /// The prepared spare, waiting for it if it is still being written; `None` if none was asked
    /// for or preparing it failed (the caller then creates a segment itself).
    fn take(&mut self) -> Option<Box<dyn WalFile>> {
        if !self.asked {
            return None;
        }
        self.asked = false;
        match self.ready.recv() {
            Ok(Ok(file)) => Some(file),
            Ok(Err(error)) => {
                tracing::warn!(%error, "preparing a spare segment failed; creating the next segment inline");
                None
            }
            Err(_) => None,
        }
    }
}

impl Writer {
    /// Runs until every sender is gone (clean close) or a failure poisons the log.
    pub fn run(mut self) {
        let mut buf: Vec<u8> = Vec::with_capacity(self.options.batch_bytes_max + 64 * 1024);
        while let Some(first) = self.queue.recv() {
            let mut batch = vec![first];
            let mut bytes = record_bytes(batch.first().map_or(0, |p| p.payload.len()));
            while bytes < self.options.batch_bytes_max {
                match self.queue.try_recv() {
                    Ok(next) => {
                        bytes += record_bytes(next.payload.len());
                        batch.push(next);
                    }
                    Err(TryRecvError::Empty | TryRecvError::Disconnected) => break,
                }
            }
            self.queue.give_back();
            if let Err(error) = self.write_batch(&batch, &mut buf) {
                tracing::error!(error = %error, "write-ahead log failed; poisoning it, every later append fails");
                self.shared.poison(error.to_string());
                return;
            }
            if let Some(tap) = &self.options.durable_tap {
                let durable = batch
                    .into_iter()
                    .map(|pending| DurableRecord {
                        lsn: pending.lsn,
                        payload: pending.payload,
                    })
                    .collect();
                let handed = std::time::Instant::now();
                let sent = tap.send(durable);
                self.shared.stats.record_tap_wait(handed.elapsed());
                if sent.is_err() {
                    tracing::error!("the consumer of durable records stopped; poisoning the log");
                    self.shared
                        .poison("the consumer of durable records stopped".into());
                    return;
                }
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
        let batch_records = last_lsn.saturating_sub(self.flushed_lsn);
        self.flushed_lsn = last_lsn;
        buf.clear();
        if self.options.fsync == FsyncPolicy::Always {
            let started = std::time::Instant::now();
            segment
                .file
                .sync_data()
                .map_err(|e| Error::io(format!("fdatasync {}", segment.path.display()), e))?;
            self.shared
                .stats
                .record_sync(started.elapsed(), batch_bytes, batch_records);
        } else {
            self.shared
                .stats
                .record_sync(std::time::Duration::ZERO, batch_bytes, batch_records);
        }
        self.shared.publish_durable(last_lsn);
        Ok(())
    }

    /// Closes the full segment and starts a new one whose first record is `first_lsn`.
    fn rotate(&mut self, first_lsn: u64) -> Result<()> {
        let segment = match self.spares.take() {
            Some(spare) => install_spare(self.fs.as_ref(), &self.dir, spare, first_lsn)?,
            None => create_segment(self.fs.as_ref(), &self.dir, first_lsn, &self.options)?,
        };
        self.spares.request();
        tracing::debug!(segment = %segment.path.display(), first_lsn, "rotated to a new segment");
        self.shared.add_segment(first_lsn, segment.path.clone());
        self.segment = segment;
        Ok(())
    }
}

/// What recovery decided about a `next.spare` found in the log directory.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SpareVerdict {
    /// No spare was there.
    Absent,
    /// The spare is exactly what the preallocator leaves (`segment_bytes` of zeros, or zeros
    /// under a segment header that a rotation wrote before a crash stopped its rename); it was
    /// synced and is reused as the first spare.
    Reused,
    /// The spare was removed; the reason says what was wrong with it.
    Removed(String),
}

/// Inspects a spare segment left in `dir` by an earlier run. The preallocator leaves either a
/// file still being zero-filled (a crash cut it short), or `segment_bytes` of zeros, synced; a
/// rotation then writes a segment header into it and renames it, so a crash between the two
/// leaves a header over zeros. A complete spare is synced (its zeros may have been only in the
/// page cache) and reused; anything else is removed, with the reason logged.
pub(crate) fn inspect_spare(
    fs: &dyn FileSystem,
    dir: &Path,
    segment_bytes: u64,
) -> Result<(SpareVerdict, Option<Box<dyn WalFile>>)> {
    let path = dir.join(SPARE_NAME);
    let context = |what: &str| format!("{what} the spare segment {}", path.display());
    let names = fs
        .list(dir)
        .map_err(|e| Error::io(format!("list log directory {}", dir.display()), e))?;
    if !names.iter().any(|name| name.as_os_str() == SPARE_NAME) {
        return Ok((SpareVerdict::Absent, None));
    }
    let file = fs.open(&path).map_err(|e| Error::io(context("open"), e))?;
    let problem =
        spare_problem(file.as_ref(), segment_bytes).map_err(|e| Error::io(context("read"), e))?;
    match problem {
        None => {
            file.sync_data()
                .map_err(|e| Error::io(context("sync"), e))?;
            tracing::info!(path = %path.display(), "reusing the spare segment an earlier run prepared");
            Ok((SpareVerdict::Reused, Some(file)))
        }
        Some(reason) => {
            drop(file);
            tracing::warn!(path = %path.display(), reason = %reason, "removing a spare segment that is not as the preallocator leaves one; a new one is prepared");
            fs.remove(&path)
                .map_err(|e| Error::io(context("remove"), e))?;
            fs.sync_dir(dir)
                .map_err(|e| Error::io(format!("sync log directory {}", dir.display()), e))?;
            Ok((SpareVerdict::Removed(reason), None))
        }
    }
}

/// Why a spare is not reusable, or `None` when it is.
fn spare_problem(file: &dyn WalFile, segment_bytes: u64) -> std::io::Result<Option<String>> {
    let len = file.len()?;
    if len != segment_bytes {
        return Ok(Some(format!(
            "it is {len} bytes where a spare is {segment_bytes} (preallocation was interrupted, or the segment size changed)"
        )));
    }
    let mut chunk = vec![0u8; 1 << 20];
    let mut at = 0u64;
    while at < len {
        let n = (len - at).min(chunk.len() as u64) as usize;
        let Some(buf) = chunk.get_mut(..n) else { break };
        file.read_exact_at(buf, at)?;
        let body = if at == 0 {
            let header = buf.get(..SEGMENT_HEADER_BYTES).unwrap_or_default();
            if header.iter().any(|&b| b != 0) {
                if let Err(reason) = crate::record::decode_segment_header(header) {
                    return Ok(Some(format!(
                        "its first bytes are neither zeros nor a segment header: {reason}"
                    )));
                }
            }
            buf.get(SEGMENT_HEADER_BYTES..).unwrap_or_default()
        } else {
            buf
        };
        if let Some(offset) = body.iter().position(|&b| b != 0) {
            let base = if at == 0 {
                SEGMENT_HEADER_BYTES as u64
            } else {
                at
            };
            return Ok(Some(format!(
                "it holds non-zero bytes at offset {} where a spare holds only zeros",
                base + offset as u64
            )));
        }
        at += n as u64;
    }
    Ok(None)
}

/// Writes zeros over `[from, to)` of `file`, extending it if needed.
pub(crate) fn zero_fill(file: &dyn WalFile, from: u64, to: u64) -> std::io::Result<()> {
    let zeros = vec![0u8; 1 << 20];
    let mut at = from;
    while at < to {
        let n = (to - at).min(zeros.len() as u64) as usize;
        file.write_all_at(zeros.get(..n).unwrap_or_default(), at)?;
        at += n as u64;
    }
    Ok(())
}

/// Turns a prepared spare into the segment starting at `first_lsn`: header, sync, rename, sync
/// the directory. A crash before the rename leaves only a spare, which recovery inspects.
fn install_spare(
    fs: &dyn FileSystem,
    dir: &Path,
    file: Box<dyn WalFile>,
    first_lsn: u64,
) -> Result<ActiveSegment> {
    let path = dir.join(segment_file_name(first_lsn));
    let context = |what: &str| format!("{what} new segment {}", path.display());
    file.write_all_at(&encode_segment_header(first_lsn), 0)
        .map_err(|e| Error::io(context("write the header of"), e))?;
    file.sync_data()
        .map_err(|e| Error::io(context("sync"), e))?;
    fs.rename(&dir.join(SPARE_NAME), &path)
        .map_err(|e| Error::io(context("rename the spare into"), e))?;
    fs.sync_dir(dir)
        .map_err(|e| Error::io(context("sync the directory of"), e))?;
    Ok(ActiveSegment {
        file,
        path,
        first_lsn,
        offset: SEGMENT_HEADER_BYTES as u64,
    })
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
