//! Opening from a WAL archive: the full recovery drill over all history
//! (`walletd replay --from-archive DIR`, issue 14 item 6).
//!
//! The archive (where `--wal-archive` moved retired segments, see [`wal::archive`]) and the live
//! log in `data_dir/wal` are read as one log from LSN 1: the archive's records first, then the
//! live log's from the LSN after the archive's last record (the two may overlap; a hole between
//! them is refused, naming it). Every snapshot is ignored: the shards are rebuilt from empty
//! state, and the history store, which must be empty, is filed from the first record. After that
//! the open goes on as any other (the same checks that the store covers exactly the log, the
//! same completion of half-done cross-shard moves), so the engine it returns serves.
//!
//! Why a reader over two directories rather than staging the archived segments into `wal/` (by
//! hard link or copy) and opening as usual: staging would change the live log directory, leave
//! segments behind there when interrupted (which the next checkpoint would archive again), cost a
//! full copy when the archive is on another file system, and still need a way to ignore the
//! snapshots. Reading the archive in place changes nothing in it and nothing in `wal/` except
//! what recovery always does (cutting a torn tail).

use std::path::PathBuf;
use std::sync::Arc;

use super::clock::Clock;
use super::config::{EngineConfig, Renderer};
use super::engine::Engine;
use super::recovery::{OpenError, RecoveryReport};

/// Where the archive is, and who hears about progress.
pub struct ArchiveReplay {
    /// The archive directory (`--wal-archive` of the server that wrote it).
    pub dir: PathBuf,
    /// Called with the LSN of every record replayed, archive and live log alike, in order (for a
    /// progress line on long work). It runs on the replaying thread: keep it cheap.
    pub progress: Option<Box<dyn FnMut(u64) + Send>>,
}

impl std::fmt::Debug for ArchiveReplay {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.debug_struct("ArchiveReplay")
            .field("dir", &self.dir)
            .finish_non_exhaustive()
    }
}

impl Engine {
    /// Opens the data directory by replaying the archive and the live log from LSN 1 into empty
    /// shards and an empty history store (see this module's docs). Fails with
    /// [`OpenError::History`] when the store is not empty, and with a [`wal::Error::Gap`] naming
    /// the missing LSNs when the archive and the log do not form one run from LSN 1.
    pub fn open_from_archive(
        config: EngineConfig,
        clock: Arc<dyn Clock>,
        renderer: Arc<dyn Renderer>,
        archive: ArchiveReplay,
    ) -> Result<(Engine, RecoveryReport), OpenError> {
        super::recovery::open(config, clock, renderer, Some(archive))
    }
}
