//! Shared pieces of walletd's benchmarks: a scratch directory on a real disk, a pool of
//! request-response appenders for the write-ahead log, and the raw `pwrite` + `fdatasync`
//! baseline every WAL number must be read against (see `shared/notes/machine-limits.md`: the
//! disk's speed moves by about 30% within minutes, so only a baseline from the same run counts).
//!
//! # Layout
//! - [`scratch_dir`]: a temp dir where fsync means something (never tmpfs).
//! - [`Appenders`]: N threads that each append one record and wait for it to be durable before
//!   the next, like N clients each waiting for its HTTP response.
//! - [`RawSync`]: one preallocated file, written sequentially, one `fdatasync` per write.
//! - [`engine_load`]: the engine in process: open, create and fund wallets, closed-loop callers.

pub mod engine_load;
pub mod load;

use std::fs::File;
use std::io;
use std::os::unix::fs::FileExt;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, AtomicI64, AtomicU64, Ordering};
use std::sync::{Arc, Barrier};
use std::thread::JoinHandle;
use std::time::{Duration, Instant};

/// Where benchmarks put their files: `WALLETD_BENCH_DIR` if set, else the system temp dir unless
/// it is a RAM file system (where fsync costs nothing and measures nothing), else
/// `target/bench-scratch` of this workspace.
pub fn scratch_root() -> PathBuf {
    if let Some(dir) = std::env::var_os("WALLETD_BENCH_DIR") {
        return PathBuf::from(dir);
    }
    let temp = std::env::temp_dir();
    if !is_ram_fs(&temp) {
        return temp;
    }
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .join("..")
        .join("target")
        .join("bench-scratch")
}

/// A fresh temp dir under [`scratch_root`], removed when dropped.
pub fn scratch_dir(label: &str) -> io::Result<tempfile::TempDir> {
    let root = scratch_root();
    std::fs::create_dir_all(&root)?;
    tempfile::Builder::new()
        .prefix(&format!("walletd-bench-{label}-"))
        .tempdir_in(root)
}

/// True when `path` is on tmpfs or ramfs, judged by the longest matching mount in /proc/mounts.
pub fn is_ram_fs(path: &Path) -> bool {
    let path = path.canonicalize().unwrap_or_else(|_| path.to_path_buf());
    let Ok(mounts) = std::fs::read_to_string("/proc/mounts") else {
        return false;
    };
    mounts
        .lines()
        .filter_map(|line| {
            let mut fields = line.split_whitespace();
            let _device = fields.next()?;
            let mount_point = fields.next()?.replace("\\040", " ");
            let fs_type = fields.next()?;
            path.starts_with(&mount_point)
                .then(|| (mount_point.len(), fs_type.to_string()))
        })
        .max_by_key(|(len, _)| *len)
        .is_some_and(|(_, fs_type)| fs_type == "tmpfs" || fs_type == "ramfs")
}

/// Log options for the benchmarks: the defaults (64 MiB preallocated segments, fsync always),
/// with the chosen fsync policy.
pub fn wal_options(fsync: wal::FsyncPolicy) -> wal::Options {
    wal::Options {
        fsync,
        ..wal::Options::default()
    }
}

/// `appenders` threads appending `record_bytes`-byte records to one log, each waiting for its
/// record to be durable before appending the next. Threads are started once and reused for every
/// run, so runs time appends, not thread creation.
pub struct Appenders {
    threads: Vec<JoinHandle<()>>,
    control: Arc<Control>,
}

struct Control {
    start: Barrier,
    end: Barrier,
    /// Records still to append in this run; appenders stop at zero.
    remaining: AtomicI64,
    /// Set to end a timed run early.
    halt: AtomicBool,
    /// Set (before `start`) to make the threads exit.
    shutdown: AtomicBool,
    /// Records made durable, over all runs.
    durable: AtomicU64,
}

impl Appenders {
    pub fn start(log: &wal::Wal, appenders: usize, record_bytes: usize) -> Self {
        let control = Arc::new(Control {
            start: Barrier::new(appenders + 1),
            end: Barrier::new(appenders + 1),
            remaining: AtomicI64::new(0),
            halt: AtomicBool::new(false),
            shutdown: AtomicBool::new(false),
            durable: AtomicU64::new(0),
        });
        let threads = (0..appenders)
            .map(|index| {
                let log = log.clone();
                let control = control.clone();
                let payload = vec![index as u8; record_bytes];
                std::thread::Builder::new()
                    .name(format!("appender-{index}"))
                    .spawn(move || appender(&log, &control, &payload))
                    .expect("spawn an appender thread")
            })
            .collect();
        Appenders { threads, control }
    }

    /// Appends `records` records in total, spread over the threads as they ask for work, and
    /// returns the wall time until the last one was durable.
    pub fn run_records(&self, records: u64) -> Duration {
        let control = &self.control;
        control.remaining.store(
            i64::try_from(records).unwrap_or(i64::MAX),
            Ordering::Release,
        );
        control.halt.store(false, Ordering::Release);
        let started = Instant::now();
        control.start.wait();
        control.end.wait();
        started.elapsed()
    }

    /// Appends for about `duration`, then returns the records made durable and the wall time
    /// until the last in-flight one was.
    pub fn run_for(&self, duration: Duration) -> (u64, Duration) {
        let control = &self.control;
        control.remaining.store(i64::MAX, Ordering::Release);
        control.halt.store(false, Ordering::Release);
        let before = control.durable.load(Ordering::Acquire);
        let started = Instant::now();
        control.start.wait();
        std::thread::sleep(duration);
        control.halt.store(true, Ordering::Release);
        control.end.wait();
        let elapsed = started.elapsed();
        (control.durable.load(Ordering::Acquire) - before, elapsed)
    }
}

impl Drop for Appenders {
    fn drop(&mut self) {
        self.control.shutdown.store(true, Ordering::Release);
        self.control.start.wait();
        for thread in self.threads.drain(..) {
            if thread.join().is_err() {
                eprintln!("an appender thread panicked");
            }
        }
    }
}

fn appender(log: &wal::Wal, control: &Control, payload: &[u8]) {
    loop {
        control.start.wait();
        if control.shutdown.load(Ordering::Acquire) {
            return;
        }
        while !control.halt.load(Ordering::Acquire)
            && control.remaining.fetch_sub(1, Ordering::AcqRel) > 0
        {
            let durable = log.append(payload.to_vec()).and_then(wal::Append::wait);
            if let Err(error) = durable {
                // A panic here would leave the other threads waiting at the barrier forever.
                eprintln!("append failed: {error}");
                std::process::exit(1);
            }
            control.durable.fetch_add(1, Ordering::Relaxed);
        }
        control.end.wait();
    }
}

/// The disk's own speed: sequential `pwrite`s into one preallocated file, each followed by
/// `fdatasync`, as a log that syncs every record by itself would do.
pub struct RawSync {
    file: File,
    file_bytes: u64,
    offset: u64,
    _dir: tempfile::TempDir,
}

impl RawSync {
    /// Creates and zero-fills (for real, not sparse) a file of `file_bytes`, and syncs it.
    pub fn new(file_bytes: u64) -> io::Result<Self> {
        let dir = scratch_dir("raw")?;
        let file = File::options()
            .read(true)
            .write(true)
            .create_new(true)
            .open(dir.path().join("raw.dat"))?;
        let zeros = vec![0u8; 1 << 20];
        let mut at = 0;
        while at < file_bytes {
            let n = (file_bytes - at).min(zeros.len() as u64);
            file.write_all_at(&zeros[..n as usize], at)?;
            at += n;
        }
        file.sync_all()?;
        Ok(RawSync {
            file,
            file_bytes,
            offset: 0,
            _dir: dir,
        })
    }

    /// Writes `buf` after the previous write (wrapping at the end of the file) and fdatasyncs.
    pub fn write_and_sync(&mut self, buf: &[u8]) -> io::Result<()> {
        if self.offset + buf.len() as u64 > self.file_bytes {
            self.offset = 0;
        }
        self.file.write_all_at(buf, self.offset)?;
        self.file.sync_data()?;
        self.offset += buf.len() as u64;
        Ok(())
    }
}

/// `tasks` async appenders on one executor thread, for about `duration`: each task appends a
/// `record_bytes`-byte record and awaits its [`wal::Append`] before the next, as request handlers
/// on an async server would. Returns the records made durable and the wall time.
///
/// The executor is deliberately tiny (a ready queue and `thread::park`), so a sync that makes
/// hundreds of records durable costs the writer hundreds of queue pushes and at most one
/// `unpark`, instead of one futex wake per blocked thread as with [`Appenders`].
pub fn run_async_appenders(
    log: &wal::Wal,
    tasks: usize,
    record_bytes: usize,
    duration: Duration,
) -> (u64, Duration) {
    use std::future::Future;
    use std::pin::Pin;
    use std::sync::Mutex;
    use std::task::{Context, Poll, Wake, Waker};

    struct Ready {
        queue: Mutex<Vec<usize>>,
        sleeping: AtomicBool,
        executor: std::thread::Thread,
    }
    struct TaskWaker {
        id: usize,
        ready: Arc<Ready>,
    }
    impl Wake for TaskWaker {
        fn wake(self: Arc<Self>) {
            self.wake_by_ref();
        }
        fn wake_by_ref(self: &Arc<Self>) {
            self.ready
                .queue
                .lock()
                .unwrap_or_else(std::sync::PoisonError::into_inner)
                .push(self.id);
            if self.ready.sleeping.swap(false, Ordering::SeqCst) {
                self.ready.executor.unpark();
            }
        }
    }

    let halt = Arc::new(AtomicBool::new(false));
    let durable = Arc::new(AtomicU64::new(0));
    let started = Instant::now();
    let executor = {
        let (log, halt, durable) = (log.clone(), halt.clone(), durable.clone());
        std::thread::spawn(move || {
            let ready = Arc::new(Ready {
                queue: Mutex::new((0..tasks).collect()),
                sleeping: AtomicBool::new(false),
                executor: std::thread::current(),
            });
            type Task = Pin<Box<dyn Future<Output = ()> + Send>>;
            let mut live: Vec<Option<(Task, Waker)>> = (0..tasks)
                .map(|id| {
                    let (log, halt, durable) = (log.clone(), halt.clone(), durable.clone());
                    let payload = vec![id as u8; record_bytes];
                    let task: Task = Box::pin(async move {
                        while !halt.load(Ordering::Acquire) {
                            let ticket = match log.append(payload.clone()) {
                                Ok(ticket) => ticket,
                                Err(error) => {
                                    eprintln!("append failed: {error}");
                                    std::process::exit(1);
                                }
                            };
                            if let Err(error) = ticket.await {
                                eprintln!("append failed: {error}");
                                std::process::exit(1);
                            }
                            durable.fetch_add(1, Ordering::Relaxed);
                        }
                    });
                    let waker = Waker::from(Arc::new(TaskWaker {
                        id,
                        ready: ready.clone(),
                    }));
                    Some((task, waker))
                })
                .collect();
            let mut remaining = tasks;
            while remaining > 0 {
                let batch = std::mem::take(
                    &mut *ready
                        .queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner),
                );
                if batch.is_empty() {
                    ready.sleeping.store(true, Ordering::SeqCst);
                    let empty = ready
                        .queue
                        .lock()
                        .unwrap_or_else(std::sync::PoisonError::into_inner)
                        .is_empty();
                    if empty {
                        std::thread::park();
                    }
                    ready.sleeping.store(false, Ordering::SeqCst);
                    continue;
                }
                for id in batch {
                    let Some(Some((task, waker))) = live.get_mut(id) else {
                        continue;
                    };
                    if task.as_mut().poll(&mut Context::from_waker(waker)) == Poll::Ready(()) {
                        live[id] = None;
                        remaining -= 1;
                    }
                }
            }
        })
    };
    std::thread::sleep(duration);
    halt.store(true, Ordering::Release);
    executor.join().expect("the executor thread does not panic");
    (durable.load(Ordering::Acquire), started.elapsed())
}
