//! Fault hooks for black-box tests only, armed by `WALLETD_FAULT_INJECTION`. Unset (always,
//! outside tests), nothing changes. Any other value than the two below refuses to start, so a
//! typo never goes unnoticed. Setting it needs the same access as killing the process, so it
//! opens no new way in.
//!
//! * `poison-wal-on-sigusr1` runs the log on [`wal::fs::FaultyFs`], and a `SIGUSR1` then makes
//!   every later log sync fail, which poisons the log in a real process
//!   (`tests/tests/api_failstop.rs`).
//! * `sigkill-before:OP:N:NAME` runs the log on [`KillingFs`]: the process sends itself SIGKILL
//!   just before the N-th (from 1) `OP` on a path whose file name contains `NAME`, where `OP` is
//!   one of `create`, `rename` (the source is matched), `remove`, `hard-link` (the original is
//!   matched) or `sync-dir`. The log's file system carries segments, snapshots and the archive,
//!   so this is a real crash at an exact step of writing a snapshot or of removing or archiving
//!   a segment (`tests/tests/api_crash_points.rs`), where a kill from outside lands there only
//!   by chance.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use anyhow::{bail, Context as _};
use engine::runtime::{EngineConfig, WalFileSystem};
use wal::fs::{FaultyFs, FileSystem, StdFs, WalFile};

/// The environment variable that arms a hook.
pub const FAULT_INJECTION_ENV: &str = "WALLETD_FAULT_INJECTION";
/// The value that poisons the log on SIGUSR1.
pub const POISON_WAL_ON_SIGUSR1: &str = "poison-wal-on-sigusr1";
/// The prefix of the value that kills the process at one file-system step.
pub const SIGKILL_BEFORE: &str = "sigkill-before:";

/// Arms the hook the environment asks for. `poison-wal-on-sigusr1`: the log's file system
/// becomes a [`FaultyFs`], returned so [`poison_on_sigusr1`] can trip it. `sigkill-before:..`:
/// it becomes a [`KillingFs`], which needs nothing more.
pub fn arm(config: &mut EngineConfig) -> anyhow::Result<Option<FaultyFs>> {
    let Some(value) = std::env::var_os(FAULT_INJECTION_ENV) else {
        return Ok(None);
    };
    let text = value.to_string_lossy();
    if let Some(spec) = text.strip_prefix(SIGKILL_BEFORE) {
        let killing =
            KillingFs::parse(spec).with_context(|| format!("{FAULT_INJECTION_ENV}={text}"))?;
        tracing::warn!("{FAULT_INJECTION_ENV}={text}: the process will SIGKILL itself at that step (test-only fault hook)");
        config.file_system = WalFileSystem(Arc::new(killing));
        return Ok(None);
    }
    if value != POISON_WAL_ON_SIGUSR1 {
        bail!("{FAULT_INJECTION_ENV} must be unset, {POISON_WAL_ON_SIGUSR1} or {SIGKILL_BEFORE}OP:N:NAME (test-only fault hooks); refusing to start");
    }
    tracing::warn!("{FAULT_INJECTION_ENV}={POISON_WAL_ON_SIGUSR1}: a SIGUSR1 will poison the write-ahead log (test-only fault hook)");
    let fs = FaultyFs::new();
    config.file_system = WalFileSystem(Arc::new(fs.clone()));
    Ok(Some(fs))
}

/// Waits for SIGUSR1, then fails every later data sync of the log (the next append poisons it).
pub async fn poison_on_sigusr1(fs: FaultyFs) {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut usr1) = signal(SignalKind::user_defined1()) else {
        tracing::error!("cannot listen for SIGUSR1; the fault hook stays inert");
        return;
    };
    if usr1.recv().await.is_some() {
        fs.fail_sync_after(0);
        eprintln!("walletd: fault injection: SIGUSR1 received, every later log sync fails");
    }
}

/// The file-system calls [`KillingFs`] can stop before.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
enum Step {
    Create,
    Rename,
    Remove,
    HardLink,
    SyncDir,
}

/// [`StdFs`] that SIGKILLs its own process just before the N-th call of one kind on a matching
/// path (see the module docs).
#[derive(Debug)]
pub struct KillingFs {
    step: Step,
    name: String,
    /// Matching calls still allowed before the kill.
    left: AtomicU64,
}

impl KillingFs {
    /// Parses `OP:N:NAME`.
    fn parse(spec: &str) -> anyhow::Result<Self> {
        let mut parts = spec.splitn(3, ':');
        let (Some(op), Some(n), Some(name)) = (parts.next(), parts.next(), parts.next()) else {
            bail!("expected {SIGKILL_BEFORE}OP:N:NAME");
        };
        let step = match op {
            "create" => Step::Create,
            "rename" => Step::Rename,
            "remove" => Step::Remove,
            "hard-link" => Step::HardLink,
            "sync-dir" => Step::SyncDir,
            other => {
                bail!("unknown step {other:?}: one of create, rename, remove, hard-link, sync-dir")
            }
        };
        let n: u64 = n
            .parse()
            .ok()
            .filter(|n| *n >= 1)
            .with_context(|| format!("N must be a whole number from 1, not {n:?}"))?;
        if name.is_empty() {
            bail!("NAME must not be empty");
        }
        Ok(Self {
            step,
            name: name.to_owned(),
            left: AtomicU64::new(n - 1),
        })
    }

    /// Kills the process if this is the chosen call.
    fn before(&self, step: Step, path: &Path) {
        let matches = step == self.step
            && path
                .file_name()
                .is_some_and(|name| name.to_string_lossy().contains(&self.name));
        if !matches {
            return;
        }
        let last = self
            .left
            .fetch_update(Ordering::SeqCst, Ordering::SeqCst, |left| {
                left.checked_sub(1)
            });
        if last.is_err() {
            eprintln!(
                "walletd: fault injection: SIGKILL before {step:?} of {}",
                path.display()
            );
            let _ = rustix::process::kill_process(
                rustix::process::getpid(),
                rustix::process::Signal::KILL,
            );
        }
    }
}

impl FileSystem for KillingFs {
    fn create(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        self.before(Step::Create, path);
        StdFs.create(path)
    }

    fn create_dir_all(&self, path: &Path) -> io::Result<()> {
        StdFs.create_dir_all(path)
    }

    fn hard_link(&self, original: &Path, link: &Path) -> io::Result<()> {
        self.before(Step::HardLink, original);
        StdFs.hard_link(original, link)
    }

    fn list(&self, dir: &Path) -> io::Result<Vec<PathBuf>> {
        StdFs.list(dir)
    }

    fn open(&self, path: &Path) -> io::Result<Box<dyn WalFile>> {
        StdFs.open(path)
    }

    fn read(&self, path: &Path) -> io::Result<Vec<u8>> {
        StdFs.read(path)
    }

    fn remove(&self, path: &Path) -> io::Result<()> {
        self.before(Step::Remove, path);
        StdFs.remove(path)
    }

    fn rename(&self, from: &Path, to: &Path) -> io::Result<()> {
        self.before(Step::Rename, from);
        StdFs.rename(from, to)
    }

    fn sync_dir(&self, dir: &Path) -> io::Result<()> {
        self.before(Step::SyncDir, dir);
        StdFs.sync_dir(dir)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_kill_spec_names_a_known_step_a_count_from_1_and_a_name() {
        let parsed = KillingFs::parse("rename:3:.snap.tmp").expect("a valid spec");
        assert_eq!(parsed.step, Step::Rename);
        assert_eq!(parsed.name, ".snap.tmp");
        assert_eq!(parsed.left.load(Ordering::SeqCst), 2);
        for bad in [
            "",
            "rename",
            "rename:3",
            "rename:3:",
            "rename:0:.wal",
            "rename:x:.wal",
            "truncate:1:.wal",
        ] {
            assert!(KillingFs::parse(bad).is_err(), "{bad:?} was accepted");
        }
    }

    #[test]
    fn calls_before_the_chosen_one_and_other_steps_or_names_pass_through() {
        let dir = tempfile::tempdir().expect("a temp dir");
        let fs = KillingFs::parse("remove:3:.wal").expect("a valid spec");
        for name in ["a.wal", "b.wal", "c.snap"] {
            let path = dir.path().join(name);
            std::fs::write(&path, b"x").expect("write");
            fs.sync_dir(dir.path()).expect("another step passes");
            fs.remove(&path).expect("not the third matching remove");
        }
        assert_eq!(
            fs.left.load(Ordering::SeqCst),
            0,
            "two matching removes counted"
        );
    }
}
