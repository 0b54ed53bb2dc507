//! Helpers shared by walletd's cross-crate tests and their helper binaries.
//!
//! # Layout
//! - [`crash`]: the payload format that `wal_crash_child` appends and `tests/wal_crash.rs`
//!   verifies after killing it, plus the tiny seeded RNG both use.
//! - [`engine_drill`]: how `engine_crash_child` and `tests/engine_crash.rs` open the engine, and
//!   the lines the child prints for the parent to check after a SIGKILL.
//! - [`server`]: a real `walletd serve` process on a temp data dir for the black-box tests
//!   (`tests/api_*.rs`): start, SIGKILL, SIGTERM, restart, and helpers that register customers and
//!   create businesses and employees.
//! - [`http`]: the tiny blocking HTTP/1.1 client those tests speak with.

pub mod acks;
pub mod crash;
pub mod engine_drill;
pub mod http;
pub mod server;
