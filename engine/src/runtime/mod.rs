//! The engine at run time: shard actors, the write-ahead log, recovery and snapshots.
//!
//! # Layout
//! - [`Engine`] (`engine`): the handle the API holds. Sends each command to the shard that owns it
//!   ([`routing`]), runs the cross-shard protocols ([`cross_shard`]), keeps idempotency, takes
//!   snapshots ([`snapshot`]). [`config`]: its settings and errors.
//! - [`actor`]: the shard actor (one per actix Arbiter thread) that owns one [`Shard`].
//! - [`journal`]: the WAL record of one command. [`idempotency`]: the key table.
//! - [`recovery`]: open = load the newest snapshot, replay the log after it, finish half-done
//!   cross-shard transfers. [`image`]: the snapshot payload. [`archive`]: open from a WAL archive
//!   and the live log, from LSN 1 (the full recovery drill).
//! - [`clock`]: where time and randomness come from (logged, never recomputed).
//! - [`Forgetful`]: the bounded concurrent memory of lookups made on a request's path (wallet
//!   scopes here, verified tokens in the API), forgetting by generations.
//!
//! # Threads
//! The WAL writer is its own thread. Each shard actor runs on its own Arbiter (a current-thread
//! tokio runtime). Every request the API submits is spawned onto the Arbiter of the shard it
//! concerns and runs to its end there even if the HTTP client goes away: actix skips a queued
//! message whose requester has dropped its reply channel (notes/dependencies.md §1), and a
//! transfer must never stop halfway, nor an idempotency key stay claimed, because a client hung
//! up. Spawning on the shard's own thread (rather than one shared orchestrator thread) keeps the
//! hop to the actor thread-local and lets shards orchestrate in parallel.
//!
//! # Cross-shard transfers
//! With one shard (the default) a transfer is one command and one WAL record: atomic. When the
//! two wallets live on different shards the transfer takes durable steps:
//! 1. *reserve* on the source shard: the source is debited into the shard's in-transit account
//!    and the transfer is recorded as reserved (with the request's idempotency key, pending);
//! 2. *credit* on the target shard: the target is credited from its in-transit account; the
//!    target records the transfer's uuid, so a repeated credit is a no-op;
//! 3. *finalize* on the source shard (with the request's answer), or, if the target refused the
//!    credit (frozen, wrong currency), *release*: the source is credited back.
//!
//! Recovery finishes every transfer found reserved and not settled: it repeats the credit (a
//! no-op if it had happened) and finalizes, or releases if the target refuses. So after any crash
//! every transfer has posted both legs or none (ARCHITECTURE.md invariant 4).
//!
//! An atomic transfer batch across shards ([`atomic_batch`]) reserves all its items first, one
//! record per source shard, and is committed once every such record is durable; recovery
//! completes or releases each open batch as a whole.

pub mod actor;
pub mod archive;
pub(crate) mod atomic_batch;
pub mod batch;
pub mod clock;
pub mod config;
mod cross_shard;
pub(crate) mod engine;
pub mod fingerprint;
mod forgetful;
pub mod history;
pub mod idempotency;
pub mod image;
pub mod journal;
pub mod recovery;
mod routing;
pub(crate) mod snapshot;

pub use self::archive::ArchiveReplay;
pub use self::config::{
    EngineConfig, EngineError, IdempotencyKey, LegacyRequest, Renderer, Reply, WalFileSystem,
    RECORD_BYTES_MAX,
};
pub use self::engine::{Engine, WalletScope};
pub use self::forgetful::Forgetful;
pub use self::recovery::{
    recorded_shard_count, OpenError, QuarantinedMove, RecoveryReport, SHARDS_FILE,
};
pub use self::snapshot::{SnapshotCost, SnapshotStats, SNAPSHOT_NICE};
pub use crate::values::ids::owner_shard;
