//! A fault hook for black-box tests only: `WALLETD_FAULT_INJECTION=poison-wal-on-sigusr1` runs
//! the log on [`wal::fs::FaultyFs`], and a `SIGUSR1` then makes every later log sync fail, which
//! poisons the log in a real process (`tests/tests/api_failstop.rs`). Unset (always, outside
//! tests), nothing changes. Any other value refuses to start, so a typo never goes unnoticed.
//! Setting it needs the same access as killing the process, so it opens no new way in.

use std::sync::Arc;

use anyhow::bail;
use engine::runtime::{EngineConfig, WalFileSystem};
use wal::fs::FaultyFs;

/// The environment variable that arms the hook.
pub const FAULT_INJECTION_ENV: &str = "WALLETD_FAULT_INJECTION";
/// Its one accepted value.
pub const POISON_WAL_ON_SIGUSR1: &str = "poison-wal-on-sigusr1";

/// Arms the hook when the environment asks for it: the log's file system becomes a
/// [`FaultyFs`], returned so [`poison_on_sigusr1`] can trip it.
pub fn arm(config: &mut EngineConfig) -> anyhow::Result<Option<FaultyFs>> {
    let Some(value) = std::env::var_os(FAULT_INJECTION_ENV) else {
        return Ok(None);
    };
    if value != POISON_WAL_ON_SIGUSR1 {
        bail!("{FAULT_INJECTION_ENV} must be unset or {POISON_WAL_ON_SIGUSR1} (a test-only fault hook); refusing to start");
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
