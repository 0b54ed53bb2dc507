//! The public handle: open (with recovery), append, wait for durability, checkpoint, close.
//!
//! # Invariants
//! - LSNs are contiguous: every append gets `previous + 1`, assigned under one lock together with
//!   the channel send, so the writer sees records in LSN order.
//! - `durable_lsn ≤ last_lsn`, and every record at or below `durable_lsn` has been written and
//!   (with [`FsyncPolicy::Always`]) fdatasync'ed.
//! - An [`Append`] resolves `Ok` only once its LSN is at or below `durable_lsn`; after poisoning
//!   every unresolved append resolves `Err`.

use std::collections::BinaryHeap;
use std::future::Future;
use std::path::{Path, PathBuf};
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex, MutexGuard};
use std::task::{Context, Poll, Wake, Waker};
use std::thread::JoinHandle;
use std::time::Duration;

use crossbeam_channel::Sender;

use crate::budget::{record_cost, Budget, Room};
use crate::error::{Error, Result};
use crate::fs::{FileSystem, StdFs};
use crate::record::{RecordRef, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::recovery::{self, DirScan, Mode};
use crate::snapshot::{self, Snapshot};
use crate::writer::{create_segment, ActiveSegment, Pending, Writer};

/// When the writer calls `fdatasync`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum FsyncPolicy {
    /// After every write, before acknowledging it. The only durable choice.
    #[default]
    Always,
    /// Never: acknowledgements mean "written to the page cache". For benchmarks only.
    Never,
}

/// Settings of a log.
#[derive(Debug, Clone)]
pub struct Options {
    /// Size of each preallocated segment file.
    pub segment_bytes: u64,
    /// Largest payload accepted by [`Wal::append`].
    pub record_bytes_max: u32,
    /// Most bytes the writer puts into one write + fdatasync.
    pub batch_bytes_max: usize,
    /// Records that may wait for the writer before appenders block (back-pressure).
    pub queue_records_max: usize,
    /// Bytes of records (payloads, and 48 bytes each beside them) that may wait for the writer
    /// before appenders block. With records of up to `record_bytes_max`, a bound in records
    /// alone let the queue hold up to `queue_records_max` x `record_bytes_max` (256 GiB by
    /// default) while the disk fell behind; this bounds what a stall can cost in memory. A
    /// record larger than the whole budget waits until the queue is empty, then goes alone.
    pub queue_bytes_max: usize,
    pub fsync: FsyncPolicy,
    /// Snapshots kept by [`Wal::checkpoint`]; segments wholly below the oldest kept are deleted
    /// (or archived, see `archive_dir`).
    pub snapshots_kept: usize,
    /// Where retired segments go instead of being deleted: moved there under the same name,
    /// durably named there before they leave the log (see [`crate::archive`]). Created (owner
    /// only) when missing. `None`: retired segments are deleted.
    pub archive_dir: Option<PathBuf>,
    /// Where the writer hands every record once it is durable, in LSN order, batch by batch (the
    /// payloads are moved, not copied), on a [`crate::tap::channel`]. Its byte budget is the
    /// consumer's back-pressure: once the consumer holds that much unread, the writer waits, so a
    /// slow consumer slows appends instead of growing memory. If the consumer hangs up, the log
    /// is poisoned: nothing may become durable unseen.
    pub durable_tap: Option<crate::tap::TapSender>,
}

/// A record handed to [`Options::durable_tap`] after its sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DurableRecord {
    pub lsn: u64,
    pub payload: Vec<u8>,
}

impl Default for Options {
    fn default() -> Self {
        Options {
            segment_bytes: 64 << 20,
            record_bytes_max: 4 << 20,
            batch_bytes_max: 1 << 20,
            queue_records_max: 64 * 1024,
            queue_bytes_max: 64 << 20,
            fsync: FsyncPolicy::Always,
            snapshots_kept: 2,
            archive_dir: None,
            durable_tap: None,
        }
    }
}

impl Options {
    fn validate(&self) -> Result<()> {
        let room = self
            .segment_bytes
            .saturating_sub((SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES) as u64);
        if u64::from(self.record_bytes_max) > room {
            return Err(Error::InvalidOptions(format!(
                "record_bytes_max {} does not fit a segment of {} bytes",
                self.record_bytes_max, self.segment_bytes
            )));
        }
        if self.batch_bytes_max > crate::record::BATCH_BYTES_LIMIT {
            return Err(Error::InvalidOptions(format!(
                "batch_bytes_max {} exceeds the format's limit of {}",
                self.batch_bytes_max,
                crate::record::BATCH_BYTES_LIMIT
            )));
        }
        if self.queue_records_max == 0
            || self.queue_bytes_max == 0
            || self.batch_bytes_max == 0
            || self.snapshots_kept == 0
        {
            return Err(Error::InvalidOptions(
                "queue_records_max, queue_bytes_max, batch_bytes_max and snapshots_kept must be positive".into(),
            ));
        }
        Ok(())
    }
}

/// What recovery found when the log was opened.
#[derive(Debug, Clone)]
pub struct Recovered {
    /// First LSN still in the log.
    pub first_lsn: u64,
    /// Last LSN in the log (0 when empty): the next append gets `last_lsn + 1`.
    pub last_lsn: u64,
    /// Records passed to the replay visitor.
    pub records_replayed: u64,
    /// Segment files found.
    pub segments: usize,
    /// A torn tail that was cut off: segment, offset, reason.
    pub torn_tail: Option<(PathBuf, u64, String)>,
    /// What was done with a spare segment an earlier run left.
    pub spare: crate::writer::SpareVerdict,
}

/// Counters the writer keeps, for metrics.
#[derive(Debug, Default)]
pub struct Stats {
    syncs: AtomicU64,
    sync_nanos: AtomicU64,
    slow_syncs: AtomicU64,
    bytes: AtomicU64,
    records: AtomicU64,
    tap_wait_nanos: AtomicU64,
}

/// An fdatasync at least this long is counted as slow ([`StatsSnapshot::slow_syncs`]).
pub const SLOW_SYNC: Duration = Duration::from_millis(50);

/// A copy of [`Stats`] at one moment.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct StatsSnapshot {
    /// Write + sync rounds completed.
    pub syncs: u64,
    /// Total time spent in fdatasync, in nanoseconds.
    pub sync_nanos: u64,
    /// Bytes written.
    pub bytes: u64,
    /// Records written (records / syncs is the mean group-commit batch).
    pub records: u64,
    /// Syncs that took at least [`SLOW_SYNC`]: every append waiting on one waits that long.
    pub slow_syncs: u64,
    /// Time the writer spent waiting for room in
    /// [`Options::durable_tap`](crate::Options::durable_tap)'s byte budget, in nanoseconds: while
    /// it waits, nothing new is written or synced (the consumer's back-pressure on the log).
    pub tap_wait_nanos: u64,
}

impl Stats {
    pub(crate) fn record_sync(&self, took: Duration, bytes: usize, records: u64) {
        self.records.fetch_add(records, Ordering::Relaxed);
        self.syncs.fetch_add(1, Ordering::Relaxed);
        if took >= SLOW_SYNC {
            self.slow_syncs.fetch_add(1, Ordering::Relaxed);
        }
        self.sync_nanos.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
        self.bytes.fetch_add(bytes as u64, Ordering::Relaxed);
    }

    pub(crate) fn record_tap_wait(&self, took: Duration) {
        self.tap_wait_nanos.fetch_add(
            u64::try_from(took.as_nanos()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    fn snapshot(&self) -> StatsSnapshot {
        StatsSnapshot {
            syncs: self.syncs.load(Ordering::Relaxed),
            sync_nanos: self.sync_nanos.load(Ordering::Relaxed),
            bytes: self.bytes.load(Ordering::Relaxed),
            records: self.records.load(Ordering::Relaxed),
            slow_syncs: self.slow_syncs.load(Ordering::Relaxed),
            tap_wait_nanos: self.tap_wait_nanos.load(Ordering::Relaxed),
        }
    }
}

struct Waiter {
    lsn: u64,
    waker: Waker,
}

impl PartialEq for Waiter {
    fn eq(&self, other: &Self) -> bool {
        self.lsn == other.lsn
    }
}
impl Eq for Waiter {}
impl PartialOrd for Waiter {
    fn partial_cmp(&self, other: &Self) -> Option<std::cmp::Ordering> {
        Some(self.cmp(other))
    }
}
impl Ord for Waiter {
    // Reversed: BinaryHeap is a max-heap and we want the lowest LSN on top.
    fn cmp(&self, other: &Self) -> std::cmp::Ordering {
        other.lsn.cmp(&self.lsn)
    }
}

/// Waiters ordered by LSN, so a sync wakes exactly those it made durable: no thundering herd.
#[derive(Default)]
struct Waiters {
    wakers: BinaryHeap<Waiter>,
}

/// Wakes a thread blocked in [`Append::wait`].
struct Unpark(std::thread::Thread);

impl Wake for Unpark {
    fn wake(self: Arc<Self>) {
        self.0.unpark();
    }

    fn wake_by_ref(self: &Arc<Self>) {
        self.0.unpark();
    }
}

thread_local! {
    static THREAD_WAKER: Waker = Waker::from(Arc::new(Unpark(std::thread::current())));
}

/// State shared by the handle, the writer thread and outstanding appends.
pub(crate) struct Shared {
    durable_lsn: AtomicU64,
    last_lsn: AtomicU64,
    poisoned: AtomicBool,
    closed: AtomicBool,
    poison_reason: Mutex<Option<String>>,
    waiters: Mutex<Waiters>,
    segments: Mutex<Vec<(u64, PathBuf)>>,
    /// See [`Wal::set_retention_floor`]; `u64::MAX` while unset.
    retention_floor: AtomicU64,
    pub(crate) stats: Stats,
    /// Hands large batches of ready wakers to the notifier thread, so the writer's next write
    /// does not wait for one `unpark` syscall per appender (they measured ~1 ms a round at 256
    /// appenders). Small batches are woken inline (see [`INLINE_WAKES_MAX`]).
    notifier: Option<crossbeam_channel::Sender<Vec<Waker>>>,
}

/// Most wakers the writer wakes itself after a sync; more go to the notifier thread. Under HTTP
/// load a sync makes ~10 tasks durable and waking a tokio task is a queue push (one unpark at
/// most), so the handoff to the notifier cost more than it saved: ~2 µs of server CPU per
/// request (BENCHMARKS.md, "Where the time goes").
const INLINE_WAKES_MAX: usize = 32;

fn lock<T>(mutex: &Mutex<T>) -> MutexGuard<'_, T> {
    // A panic while holding one of these locks cannot leave the data half-updated (each critical
    // section is a push, pop or store), so a poisoned mutex is still safe to use.
    mutex
        .lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl Shared {
    pub(crate) fn publish_durable(&self, lsn: u64) {
        self.durable_lsn.fetch_max(lsn, Ordering::Release);
        self.wake(lsn);
    }

    pub(crate) fn poison(&self, reason: String) {
        *lock(&self.poison_reason) = Some(reason);
        self.poisoned.store(true, Ordering::Release);
        self.wake(u64::MAX);
    }

    fn mark_closed(&self) {
        self.closed.store(true, Ordering::Release);
        self.wake(u64::MAX);
    }

    fn wake(&self, up_to: u64) {
        let mut ready = Vec::new();
        {
            let mut waiters = lock(&self.waiters);
            while waiters.wakers.peek().is_some_and(|w| w.lsn <= up_to) {
                if let Some(waiter) = waiters.wakers.pop() {
                    ready.push(waiter.waker);
                }
            }
        }
        if ready.is_empty() {
            return;
        }
        // Wake outside the lock. A few wakers are woken here: that costs less than handing them
        // to another thread. Many (thread-parking appenders pay a syscall each) go to the
        // notifier thread when it has room, so the next write need not wait for them.
        let inline = ready.len() <= INLINE_WAKES_MAX;
        let ready = match &self.notifier {
            Some(notifier) if !inline => match notifier.try_send(ready) {
                Ok(()) => return,
                Err(
                    crossbeam_channel::TrySendError::Full(ready)
                    | crossbeam_channel::TrySendError::Disconnected(ready),
                ) => ready,
            },
            _ => ready,
        };
        for waker in ready {
            waker.wake();
        }
    }

    pub(crate) fn add_segment(&self, first_lsn: u64, path: PathBuf) {
        lock(&self.segments).push((first_lsn, path));
    }

    fn poison_error(&self) -> Error {
        let reason = lock(&self.poison_reason).clone().unwrap_or_default();
        Error::Poisoned { reason }
    }

    /// The outcome for `lsn` if it is decided.
    fn outcome(&self, lsn: u64) -> Option<Result<u64>> {
        if self.durable_lsn.load(Ordering::Acquire) >= lsn {
            return Some(Ok(lsn));
        }
        if self.poisoned.load(Ordering::Acquire) {
            return Some(Err(self.poison_error()));
        }
        if self.closed.load(Ordering::Acquire) {
            return Some(Err(Error::Closed));
        }
        None
    }
}

/// A record handed to the log: resolves once it is durable.
///
/// Await it from async code, or call [`Append::wait`] from a thread. Dropping it does not cancel
/// the record: it is already in the log's order and will be written. A clone waits for the same
/// record (several callers whose answers one record carries each await their own).
#[must_use = "an append is durable only once its ticket resolves"]
#[derive(Clone)]
pub struct Append {
    lsn: u64,
    shared: Arc<Shared>,
}

impl Append {
    /// The LSN the record was given.
    pub fn lsn(&self) -> u64 {
        self.lsn
    }

    /// Blocks the calling thread until the record is durable (or the log fails).
    ///
    /// The thread parks with a waker in the same LSN-ordered heap as futures, so the writer
    /// unparks it only when its own record is durable.
    pub fn wait(mut self) -> Result<u64> {
        if let Some(outcome) = self.shared.outcome(self.lsn) {
            return outcome;
        }
        THREAD_WAKER.with(|waker| {
            let mut cx = Context::from_waker(waker);
            loop {
                if let Poll::Ready(outcome) = Pin::new(&mut self).poll(&mut cx) {
                    return outcome;
                }
                // A spurious unpark only costs another poll.
                std::thread::park();
            }
        })
    }
}

impl Future for Append {
    type Output = Result<u64>;

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<Self::Output> {
        if let Some(outcome) = self.shared.outcome(self.lsn) {
            return Poll::Ready(outcome);
        }
        let mut waiters = lock(&self.shared.waiters);
        // Check again under the lock: the writer publishes, then takes this lock to wake.
        if let Some(outcome) = self.shared.outcome(self.lsn) {
            return Poll::Ready(outcome);
        }
        waiters.wakers.push(Waiter {
            lsn: self.lsn,
            waker: cx.waker().clone(),
        });
        Poll::Pending
    }
}

struct Submit {
    next_lsn: u64,
    tx: Option<Sender<Pending>>,
}

struct Inner {
    dir: PathBuf,
    fs: Arc<dyn FileSystem>,
    options: Options,
    shared: Arc<Shared>,
    submit: Mutex<Submit>,
    /// Room in the writer's queue, in bytes ([`Options::queue_bytes_max`]): taken under
    /// `submit`, in LSN order; the writer gives it back as it takes records off.
    queued: Arc<Budget>,
    writer: Mutex<Option<JoinHandle<()>>>,
    /// Held while segments are retired, so two checkpoints never retire the same one.
    retiring: Mutex<()>,
    /// Held until the log is closed: a second opener of the directory fails with `Locked`.
    lock_file: Mutex<Option<std::fs::File>>,
}

impl Drop for Inner {
    fn drop(&mut self) {
        self.shutdown();
    }
}

impl Inner {
    fn shutdown(&self) {
        lock(&self.submit).tx = None;
        if let Some(handle) = lock(&self.writer).take() {
            if handle.join().is_err() {
                tracing::error!("the write-ahead log writer thread panicked");
            }
        }
        self.shared.mark_closed();
        // Release the directory only after the writer has stopped writing to it.
        lock(&self.lock_file).take();
    }
}

/// A segmented, checksummed, group-committed write-ahead log. Cheap to clone; all clones share
/// one writer. See the crate docs for the format and the guarantees.
#[derive(Clone)]
pub struct Wal {
    inner: Arc<Inner>,
}

impl std::fmt::Debug for Wal {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("Wal")
            .field("dir", &self.inner.dir)
            .field("last_lsn", &self.last_lsn())
            .field("durable_lsn", &self.durable_lsn())
            .finish()
    }
}

impl Wal {
    /// Opens (creating if needed) the log in `dir` on the real file system, recovering it.
    pub fn open(dir: impl AsRef<Path>, options: Options) -> Result<(Wal, Recovered)> {
        Self::open_with(Arc::new(StdFs), dir, options, u64::MAX, &mut |_| Ok(()))
    }

    /// Opens the log, recovers it, and passes every record with LSN ≥ `replay_from_lsn` to
    /// `visit`, in order, before any append can happen. One pass over the disk does both.
    ///
    /// Fails with [`Error::Unavailable`] when `replay_from_lsn` is older than the log's first
    /// record (a snapshot older than the retained log).
    pub fn open_with(
        fs: Arc<dyn FileSystem>,
        dir: impl AsRef<Path>,
        options: Options,
        replay_from_lsn: u64,
        visit: &mut dyn FnMut(RecordRef<'_>) -> Result<()>,
    ) -> Result<(Wal, Recovered)> {
        options.validate()?;
        let dir = dir.as_ref().to_path_buf();
        fs.create_dir_all(&dir)
            .map_err(|e| Error::io(format!("create log directory {}", dir.display()), e))?;
        let lock_file = lock_dir(&dir)?;
        if let Some(archive_dir) = &options.archive_dir {
            crate::archive::prepare(fs.as_ref(), archive_dir)?;
            let canonical = |path: &Path| std::fs::canonicalize(path).ok();
            if canonical(archive_dir).is_some_and(|a| Some(a) == canonical(&dir)) {
                return Err(Error::InvalidOptions(format!(
                    "the archive directory {} is the log directory itself; give it a directory of its own",
                    archive_dir.display()
                )));
            }
        }
        if options.fsync == FsyncPolicy::Never {
            tracing::warn!(dir = %dir.display(), "fsync is OFF: acknowledged records can be lost on power failure; use only for benchmarks");
        }

        let mut replayed = 0u64;
        let mut count = |record: RecordRef<'_>| {
            replayed += 1;
            visit(record)
        };
        let scan: DirScan = recovery::scan_dir(
            fs.as_ref(),
            &dir,
            options.record_bytes_max,
            Mode::Repair,
            replay_from_lsn,
            &mut count,
        )?;
        if replay_from_lsn != u64::MAX
            && replay_from_lsn < scan.first_lsn
            && !scan.segments.is_empty()
        {
            return Err(Error::Unavailable {
                requested: replay_from_lsn,
                first_available: scan.first_lsn,
            });
        }

        // Nothing is published as durable before it is: after a kill during a sync, the tail
        // read back may sit only in the page cache, and a segment's or a rename's directory
        // entry may not be on disk. Every segment is synced, then the directory, and only then
        // is `durable_lsn` set to the last record read (a failure here fails the open).
        if options.fsync == FsyncPolicy::Always {
            sync_recovered(fs.as_ref(), &dir, &scan)?;
        }
        let (spare_verdict, spare) =
            crate::writer::inspect_spare(fs.as_ref(), &dir, options.segment_bytes)?;

        let segment = match scan.segments.last() {
            Some(last) => {
                let file = fs
                    .open(&last.path)
                    .map_err(|e| Error::io(format!("open segment {}", last.path.display()), e))?;
                let len = file
                    .len()
                    .map_err(|e| Error::io(format!("stat segment {}", last.path.display()), e))?;
                if len < options.segment_bytes {
                    // Zeros, not `set_len`: a hole would make every later fdatasync slower.
                    crate::writer::zero_fill(file.as_ref(), len, options.segment_bytes).map_err(
                        |e| Error::io(format!("extend segment {}", last.path.display()), e),
                    )?;
                    file.sync_data().map_err(|e| {
                        Error::io(format!("sync segment {}", last.path.display()), e)
                    })?;
                }
                ActiveSegment {
                    file,
                    path: last.path.clone(),
                    first_lsn: last.first_lsn,
                    offset: last.end_offset,
                }
            }
            None => create_segment(fs.as_ref(), &dir, scan.next_lsn, &options)?,
        };

        let mut segments: Vec<(u64, PathBuf)> = scan
            .segments
            .iter()
            .map(|s| (s.first_lsn, s.path.clone()))
            .collect();
        if segments.is_empty() {
            segments.push((segment.first_lsn, segment.path.clone()));
        }
        let last_lsn = scan.next_lsn - 1;
        let (notify_tx, notify_rx) = crossbeam_channel::bounded::<Vec<Waker>>(64);
        std::thread::Builder::new()
            .name("wal-notifier".into())
            .spawn(move || {
                // Ends when the shared state (and with it the sender) is dropped.
                while let Ok(ready) = notify_rx.recv() {
                    for waker in ready {
                        waker.wake();
                    }
                }
            })
            .map_err(|e| Error::io("spawn the log notifier thread", e))?;
        let shared = Arc::new(Shared {
            durable_lsn: AtomicU64::new(last_lsn),
            last_lsn: AtomicU64::new(last_lsn),
            poisoned: AtomicBool::new(false),
            closed: AtomicBool::new(false),
            poison_reason: Mutex::new(None),
            waiters: Mutex::new(Waiters::default()),
            segments: Mutex::new(segments),
            retention_floor: AtomicU64::new(u64::MAX),
            stats: Stats::default(),
            notifier: Some(notify_tx),
        });
        let (tx, rx) = crossbeam_channel::bounded(options.queue_records_max);
        let queued = Arc::new(Budget::new(options.queue_bytes_max));
        let spares =
            crate::writer::Spares::start(fs.clone(), dir.clone(), options.segment_bytes, spare)
                .map_err(|e| Error::io("spawn the segment preallocator thread", e))?;
        // Only the writer holds the tap: once it stops (close or poison), the consumer sees the
        // channel close.
        let mut options = options;
        let tap = options.durable_tap.take();
        let writer = Writer {
            fs: fs.clone(),
            dir: dir.clone(),
            options: Options {
                durable_tap: tap,
                ..options.clone()
            },
            shared: shared.clone(),
            segment,
            queue: crate::writer::Queue::new(rx, queued.clone()),
            spares,
            flushed_lsn: last_lsn,
        };
        let handle = std::thread::Builder::new()
            .name("wal-writer".into())
            .spawn(move || writer.run())
            .map_err(|e| Error::io("spawn the log writer thread", e))?;

        let recovered = Recovered {
            first_lsn: scan.first_lsn,
            last_lsn,
            records_replayed: replayed,
            segments: scan.segments.len(),
            torn_tail: scan.torn,
            spare: spare_verdict,
        };
        let inner = Inner {
            dir,
            fs,
            options,
            shared,
            submit: Mutex::new(Submit {
                next_lsn: scan.next_lsn,
                tx: Some(tx),
            }),
            queued,
            writer: Mutex::new(Some(handle)),
            retiring: Mutex::new(()),
            lock_file: Mutex::new(Some(lock_file)),
        };
        Ok((
            Wal {
                inner: Arc::new(inner),
            },
            recovered,
        ))
    }

    /// Appends one record and returns its ticket. The LSN is fixed now; durability comes when the
    /// ticket resolves. Blocks the calling thread while the writer's queue is full.
    pub fn append(&self, payload: Vec<u8>) -> Result<Append> {
        let max = self.inner.options.record_bytes_max;
        if payload.len() > max as usize {
            return Err(Error::RecordTooLarge {
                len: payload.len(),
                max,
            });
        }
        let shared = &self.inner.shared;
        if shared.poisoned.load(Ordering::Acquire) {
            return Err(shared.poison_error());
        }
        let mut submit = lock(&self.inner.submit);
        let lsn = submit.next_lsn;
        let Some(tx) = submit.tx.as_ref() else {
            return Err(Error::Closed);
        };
        // Room is taken in LSN order (under `submit`), and the writer gives it back as it takes
        // records off the queue: a writer that stopped closes the budget, so this never waits
        // for room that cannot appear.
        let cost = record_cost(payload.len());
        let stopped = match self.inner.queued.take_room(cost, true) {
            Room::Taken => {
                let failed = tx.send(Pending { lsn, payload }).is_err();
                if failed {
                    self.inner.queued.release(cost);
                }
                failed
            }
            Room::Full | Room::Closed => true,
        };
        if stopped {
            // The writer stopped: it was poisoned (it says why) or the log was closed.
            return Err(shared
                .outcome(u64::MAX)
                .and_then(Result::err)
                .unwrap_or(Error::Closed));
        }
        submit.next_lsn += 1;
        shared.last_lsn.store(lsn, Ordering::Release);
        drop(submit);
        Ok(Append {
            lsn,
            shared: shared.clone(),
        })
    }

    /// Bytes of records waiting for the writer (each counted with 48 bytes beside its payload):
    /// at most [`Options::queue_bytes_max`], or one record larger than that alone.
    pub fn queued_bytes(&self) -> usize {
        self.inner.queued.held_bytes()
    }

    /// Whether an appender is waiting for room in the writer's queue now (0 or 1: it waits
    /// holding the append order, and appenders behind it wait for that, uncounted).
    pub fn appenders_waiting(&self) -> usize {
        self.inner.queued.waiting()
    }

    /// LSN of the newest record appended (durable or not); 0 for an empty log.
    pub fn last_lsn(&self) -> u64 {
        self.inner.shared.last_lsn.load(Ordering::Acquire)
    }

    /// Every record at or below this LSN is durable.
    pub fn durable_lsn(&self) -> u64 {
        self.inner.shared.durable_lsn.load(Ordering::Acquire)
    }

    /// A ticket that resolves once everything appended so far is durable.
    pub fn sync(&self) -> Append {
        self.wait_for(self.last_lsn())
    }

    /// A ticket that resolves once every record up to `lsn` is durable. A reader uses it to hold
    /// back an answer computed from state that includes records not yet durable.
    pub fn wait_for(&self, lsn: u64) -> Append {
        Append {
            lsn: lsn.min(self.last_lsn()),
            shared: self.inner.shared.clone(),
        }
    }

    /// True once a write or fsync failed.
    pub fn is_poisoned(&self) -> bool {
        self.inner.shared.poisoned.load(Ordering::Acquire)
    }

    /// Writer counters, for metrics.
    pub fn stats(&self) -> StatsSnapshot {
        self.inner.shared.stats.snapshot()
    }

    /// The directory of this log.
    pub fn dir(&self) -> &Path {
        &self.inner.dir
    }

    /// Writes a snapshot of state covering every record up to `lsn` (which must already be
    /// durable: a snapshot never holds state the log could lose), keeps the newest
    /// `snapshots_kept`, and deletes segments whose records all precede the oldest kept snapshot.
    pub fn checkpoint(&self, lsn: u64, payload: &[u8]) -> Result<PathBuf> {
        if self.inner.shared.closed.load(Ordering::Acquire) {
            return Err(Error::Closed);
        }
        if lsn > self.durable_lsn() {
            return Err(Error::InvalidOptions(format!(
                "snapshot LSN {lsn} is beyond the durable LSN {}",
                self.durable_lsn()
            )));
        }
        let fs = self.inner.fs.as_ref();
        let path = snapshot::write(fs, &self.inner.dir, lsn, payload)?;
        if let Some(oldest_kept) =
            snapshot::prune(fs, &self.inner.dir, self.inner.options.snapshots_kept)?
        {
            let floor = self.inner.shared.retention_floor.load(Ordering::Acquire);
            self.remove_segments_through(oldest_kept.min(floor))?;
        }
        Ok(path)
    }

    /// Keeps every segment holding a record above `lsn` when a later [`Wal::checkpoint`] prunes:
    /// for a reader other than the snapshot that must still see them (the history store covers
    /// records up to `lsn`). Unset, only the snapshots decide.
    pub fn set_retention_floor(&self, lsn: u64) {
        self.inner
            .shared
            .retention_floor
            .store(lsn, Ordering::Release);
    }

    /// Loads the newest valid snapshot in the log's directory (see [`snapshot::load_newest`]).
    pub fn load_snapshot(&self) -> Result<Option<Snapshot>> {
        snapshot::load_newest(self.inner.fs.as_ref(), &self.inner.dir)
    }

    /// Retires every segment, except the active one, whose records all have LSN ≤ `lsn`: deletes
    /// it, or moves it into [`Options::archive_dir`]. Oldest first; a segment leaves the list only
    /// once it has left the directory, so after a failure the next checkpoint tries it again.
    /// The list's lock is not held during file I/O (a copy into an archive on another file system
    /// takes a while, and the writer takes that lock to add a segment when it rotates).
    fn remove_segments_through(&self, lsn: u64) -> Result<()> {
        let _retiring = lock(&self.inner.retiring);
        let retired: Vec<(u64, PathBuf)> = {
            let segments = lock(&self.inner.shared.segments);
            // A segment's records end just before the next segment's first LSN.
            let removable = segments
                .windows(2)
                .take_while(|pair| matches!(pair, [_, next] if next.0 <= lsn + 1))
                .count();
            segments.iter().take(removable).cloned().collect()
        };
        if retired.is_empty() {
            return Ok(());
        }
        let fs = self.inner.fs.as_ref();
        let archive_dir = self.inner.options.archive_dir.as_deref();
        let mut outcome = Ok(());
        let mut done = 0;
        for (first_lsn, path) in &retired {
            let step = match archive_dir {
                Some(archive_dir) => {
                    tracing::info!(segment = %path.display(), first_lsn, archive = %archive_dir.display(), "archiving a segment covered by snapshots and the history store");
                    crate::archive::archive_segment(fs, path, archive_dir)
                }
                None => {
                    tracing::info!(segment = %path.display(), first_lsn, "removing a segment covered by snapshots");
                    fs.remove(path)
                        .map_err(|e| Error::io(format!("remove segment {}", path.display()), e))
                }
            };
            if let Err(error) = step {
                outcome = Err(error);
                break;
            }
            done += 1;
        }
        if done > 0 {
            lock(&self.inner.shared.segments).drain(..done);
            let synced = fs.sync_dir(&self.inner.dir).map_err(|e| {
                Error::io(
                    format!("sync log directory {}", self.inner.dir.display()),
                    e,
                )
            });
            outcome = outcome.and(synced);
        }
        outcome
    }

    /// Makes everything appended durable, stops the writer and releases the directory lock.
    /// Other clones of this handle stop working (their appends fail with `Closed`), so the
    /// directory can be opened again at once even while stray clones are still alive.
    pub fn close(self) -> Result<()> {
        let synced = self.sync().wait();
        self.inner.shutdown();
        synced.map(|_| ())
    }
}

/// Syncs every recovered segment (data) and then the log directory (their entries), so what
/// recovery is about to publish as durable is durable.
fn sync_recovered(fs: &dyn FileSystem, dir: &Path, scan: &DirScan) -> Result<()> {
    for segment in &scan.segments {
        let path = &segment.path;
        let file = fs
            .open(path)
            .map_err(|e| Error::io(format!("open segment {} to sync it", path.display()), e))?;
        file.sync_data()
            .map_err(|e| Error::io(format!("sync recovered segment {}", path.display()), e))?;
    }
    fs.sync_dir(dir)
        .map_err(|e| Error::io(format!("sync log directory {}", dir.display()), e))?;
    tracing::debug!(
        segments = scan.segments.len(),
        "synced the recovered log before publishing it as durable"
    );
    Ok(())
}

/// Takes the directory's lock file (`LOCK`), exclusively, without blocking.
fn lock_dir(dir: &Path) -> Result<std::fs::File> {
    let path = dir.join("LOCK");
    let file = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&path)
        .map_err(|e| Error::io(format!("open lock file {}", path.display()), e))?;
    match file.try_lock() {
        Ok(()) => Ok(file),
        Err(std::fs::TryLockError::WouldBlock) => Err(Error::Locked {
            dir: dir.to_path_buf(),
            lock: path,
        }),
        Err(std::fs::TryLockError::Error(e)) => {
            Err(Error::io(format!("lock {}", path.display()), e))
        }
    }
}
