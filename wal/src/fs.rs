//! A small file-system seam so tests can inject failures (after raft-engine's `src/env/mod.rs`).
//!
//! The log touches files only through [`FileSystem`] and [`WalFile`]. [`StdFs`] is the real thing;
//! [`FaultyFs`] wraps it and fails the N-th `sync_data` or write, which is how the tests prove that
//! an fsync failure poisons the log instead of being retried. Methods are sorted alphabetically.

use std::fs::{File, OpenOptions};
use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Condvar, Mutex, MutexGuard};

/// One open file of the log: positioned reads and writes only, so no shared cursor exists.
pub trait WalFile: Send + Sync {
    /// Current length in bytes.
    fn len(&self) -> io::Result<u64>;
    /// True when the file has no bytes.
    fn is_empty(&self) -> io::Result<bool> {
        Ok(self.len()? == 0)
    }
    /// Fills `buf` from `offset`; a short file is an `UnexpectedEof` error.
    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()>;
    /// Sets the length, zero-filling when it grows.
    fn set_len(&self, len: u64) -> io::Result<()>;
    /// Flushes data (and the metadata needed to read it back) to the device: `fdatasync`.
    fn sync_data(&self) -> io::Result<()>;
    /// Writes all of `buf` at `offset`.
    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()>;
}

/// The directory operations the log needs.
pub trait FileSystem: Send + Sync {
    /// Creates (or truncates) a file for reading and writing.
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;
    /// Creates the directory and its parents (owner only: a log holds whatever its records hold).
    fn create_dir_all(&self, path: &Path) -> io::Result<()>;
    /// Gives the file at `original` a second name, `link` (same file system only: another one
    /// fails with [`io::ErrorKind::CrossesDevices`]); an existing `link` fails with
    /// [`io::ErrorKind::AlreadyExists`].
    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()>;
    /// Lists the entries of a directory (file names only, unsorted).
    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>>;
    /// Opens an existing file for reading and writing.
    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>>;
    /// Reads a whole file.
    fn read(&self, path: &Path) -> io::Result<Vec<u8>>;
    /// Removes a file.
    fn remove(&self, path: &Path) -> io::Result<()>;
    /// Renames a file, replacing any target.
    fn rename(&self, from: &Path, to: &Path) -> io::Result<()>;
    /// Makes the directory's entries (creations, renames, removals) durable.
    fn sync_dir(&self, dir: &Path) -> io::Result<()>;
}

/// The real file system.
#[derive(Debug, Default, Clone, Copy)]
pub struct StdFs;

struct StdFile(File);

impl WalFile for StdFile {
    fn len(&self) -> io::Result<u64> {
        Ok(self.0.metadata()?.len())
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::read_exact_at(&self.0, buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.0.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        self.0.sync_data()
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        std::os::unix::fs::FileExt::write_all_at(&self.0, buf, offset)
    }
}

impl FileSystem for StdFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .open(path)?;
        Ok(Box::new(StdFile(file)))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        use std::os::unix::fs::DirBuilderExt as _;
        std::fs::DirBuilder::new()
            .recursive(true)
            .mode(0o700)
            .create(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        std::fs::hard_link(original, link)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        let mut names = Vec::new();
        for entry in std::fs::read_dir(dir)? {
            names.push(PathBuf::from(entry?.file_name()));
        }
        Ok(names)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        let file = OpenOptions::new().read(true).write(true).open(path)?;
        Ok(Box::new(StdFile(file)))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        std::fs::read(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        std::fs::remove_file(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        std::fs::rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        File::open(dir)?.sync_all()
    }
}

/// Wraps [`StdFs`] and fails or holds back chosen operations, for tests of error handling and
/// of what may happen before a record is durable.
///
/// `fail_sync_after(n)` lets `n` data syncs succeed, then fails every later one;
/// `fail_write_after(n)` does the same for writes, `fail_dir_sync_after(n)` for directory syncs,
/// `fail_link_after(n)`, `fail_remove_after(n)` and `fail_rename_after(n)` for those calls.
/// `links_cross_devices(true)` makes every hard link fail as if its two paths were on different
/// file systems (so callers take their copy path). `hold_segment_syncs(true)` makes every data
/// sync of a segment file wait until `hold_segment_syncs(false)` (the preallocator's spare and
/// snapshots are not held). Counters are shared by every file it opens.
#[derive(Clone)]
pub struct FaultyFs {
    faults: Arc<Faults>,
}

impl Default for FaultyFs {
    fn default() -> Self {
        Self::new()
    }
}

struct Faults {
    syncs_left: AtomicU64,
    writes_left: AtomicU64,
    syncs_seen: AtomicU64,
    dir_syncs_left: AtomicU64,
    dir_syncs_seen: AtomicU64,
    links_left: AtomicU64,
    removes_left: AtomicU64,
    renames_left: AtomicU64,
    links_cross_devices: std::sync::atomic::AtomicBool,
    gate: Mutex<Gate>,
    gate_changed: Condvar,
}

#[derive(Default)]
struct Gate {
    held: bool,
    /// Segment syncs waiting at the gate now.
    waiting: usize,
}

impl Faults {
    fn pass_gate(&self) {
        let mut gate = lock_gate(&self.gate);
        gate.waiting += 1;
        self.gate_changed.notify_all();
        while gate.held {
            gate = self
                .gate_changed
                .wait(gate)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
        gate.waiting -= 1;
    }
}

fn lock_gate(gate: &Mutex<Gate>) -> MutexGuard<'_, Gate> {
    gate.lock()
        .unwrap_or_else(std::sync::PoisonError::into_inner)
}

impl FaultyFs {
    /// A file system that fails nothing until told to.
    pub fn new() -> Self {
        let faults = Faults {
            syncs_left: AtomicU64::new(u64::MAX),
            writes_left: AtomicU64::new(u64::MAX),
            syncs_seen: AtomicU64::new(0),
            dir_syncs_left: AtomicU64::new(u64::MAX),
            dir_syncs_seen: AtomicU64::new(0),
            links_left: AtomicU64::new(u64::MAX),
            removes_left: AtomicU64::new(u64::MAX),
            renames_left: AtomicU64::new(u64::MAX),
            links_cross_devices: std::sync::atomic::AtomicBool::new(false),
            gate: Mutex::new(Gate::default()),
            gate_changed: Condvar::new(),
        };
        FaultyFs {
            faults: Arc::new(faults),
        }
    }

    /// Lets `n` more data syncs succeed, then fails every later one.
    pub fn fail_sync_after(&self, n: u64) {
        self.faults.syncs_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more writes succeed, then fails every later one.
    pub fn fail_write_after(&self, n: u64) {
        self.faults.writes_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more directory syncs succeed, then fails every later one.
    pub fn fail_dir_sync_after(&self, n: u64) {
        self.faults.dir_syncs_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more hard links succeed, then fails every later one.
    pub fn fail_link_after(&self, n: u64) {
        self.faults.links_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more file removals succeed, then fails every later one.
    pub fn fail_remove_after(&self, n: u64) {
        self.faults.removes_left.store(n, Ordering::SeqCst);
    }

    /// Lets `n` more renames succeed, then fails every later one.
    pub fn fail_rename_after(&self, n: u64) {
        self.faults.renames_left.store(n, Ordering::SeqCst);
    }

    /// While set, every hard link fails with [`io::ErrorKind::CrossesDevices`].
    pub fn links_cross_devices(&self, cross: bool) {
        self.faults
            .links_cross_devices
            .store(cross, Ordering::SeqCst);
    }

    /// How many directory syncs were attempted (failed ones included).
    pub fn dir_syncs_seen(&self) -> u64 {
        self.faults.dir_syncs_seen.load(Ordering::SeqCst)
    }

    /// How many data syncs were attempted (failed ones included).
    pub fn syncs_seen(&self) -> u64 {
        self.faults.syncs_seen.load(Ordering::SeqCst)
    }

    /// While `held`, every data sync of a segment file waits; releasing lets them all through.
    pub fn hold_segment_syncs(&self, held: bool) {
        lock_gate(&self.faults.gate).held = held;
        self.faults.gate_changed.notify_all();
    }

    /// Blocks until a segment sync is waiting at the gate (see [`FaultyFs::hold_segment_syncs`]).
    pub fn wait_for_a_held_sync(&self) {
        let mut gate = lock_gate(&self.faults.gate);
        while gate.waiting == 0 {
            gate = self
                .faults
                .gate_changed
                .wait(gate)
                .unwrap_or_else(std::sync::PoisonError::into_inner);
        }
    }

    fn wrap(&self, path: &Path, file: Box<dyn WalFile>) -> Box<dyn WalFile> {
        // `N.wal`, and `N.wal.tmp` while the first segment is prepared.
        let segment = path
            .file_name()
            .is_some_and(|name| name.to_string_lossy().contains(".wal"));
        Box::new(FaultyFile {
            file,
            faults: self.faults.clone(),
            segment,
        })
    }
}

fn take(counter: &AtomicU64) -> bool {
    counter
        .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |n| n.checked_sub(1))
        .is_ok()
}

struct FaultyFile {
    file: Box<dyn WalFile>,
    faults: Arc<Faults>,
    segment: bool,
}

impl WalFile for FaultyFile {
    fn len(&self) -> io::Result<u64> {
        self.file.len()
    }

    fn read_exact_at(&self, buf: &mut [u8], offset: u64) -> io::Result<()> {
        self.file.read_exact_at(buf, offset)
    }

    fn set_len(&self, len: u64) -> io::Result<()> {
        self.file.set_len(len)
    }

    fn sync_data(&self) -> io::Result<()> {
        if self.segment {
            self.faults.pass_gate();
        }
        self.faults.syncs_seen.fetch_add(1, Ordering::SeqCst);
        if !take(&self.faults.syncs_left) {
            return Err(io::Error::other("injected fdatasync failure"));
        }
        self.file.sync_data()
    }

    fn write_all_at(&self, buf: &[u8], offset: u64) -> io::Result<()> {
        if !take(&self.faults.writes_left) {
            return Err(io::Error::other("injected write failure"));
        }
        self.file.write_all_at(buf, offset)
    }
}

impl FileSystem for FaultyFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(self.wrap(path, StdFs.create(path)?))
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdFs.create_dir_all(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        if self.faults.links_cross_devices.load(Ordering::SeqCst) {
            return Err(io::Error::from(io::ErrorKind::CrossesDevices));
        }
        if !take(&self.faults.links_left) {
            return Err(io::Error::other("injected hard link failure"));
        }
        StdFs.hard_link(original, link)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        StdFs.list(dir)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        Ok(self.wrap(path, StdFs.open(path)?))
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdFs.read(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        if !take(&self.faults.removes_left) {
            return Err(io::Error::other("injected remove failure"));
        }
        StdFs.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        if !take(&self.faults.renames_left) {
            return Err(io::Error::other("injected rename failure"));
        }
        StdFs.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.faults.dir_syncs_seen.fetch_add(1, Ordering::SeqCst);
        if !take(&self.faults.dir_syncs_left) {
            return Err(io::Error::other("injected directory fsync failure"));
        }
        StdFs.sync_dir(dir)
    }
}
