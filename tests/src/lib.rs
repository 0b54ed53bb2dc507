//! Helpers shared by walletd's cross-crate tests and their helper binaries.
//!
//! # Layout
//! - [`crash`]: the payload format that `wal_crash_child` appends and `tests/wal_crash.rs`
//!   verifies after killing it, plus the tiny seeded RNG both use.

pub mod crash;
