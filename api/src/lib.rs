//! walletd's HTTP/JSON interface: thin over the engine.
//!
//! # Layout
//! - [`server`]: accept loop, graceful shutdown, the per-request pipeline.
//! - [`routes`]: the one table of operations (method, path, operationId, tier, rate class).
//! - [`handlers`]: one function per operation: decode, authorize, one engine call, render; one
//!   file per concern over `handlers::call` (what they share), with `handlers::dispatch` on top.
//! - [`auth`]: bearer tokens (HS256), Argon2id passwords, tiers and scopes.
//! - [`views`]: the contract's JSON shapes, one file per concern over `views::fields` and
//!   `views::envelope`, and the idempotent-answer renderer (`views::outcome`) on top.
//! - [`request_id`]: one id per request, in error bodies, logs and tokens.
//! - [`json`]: exact decimal JSON numbers. [`error`]: the error envelope and status mapping.
//! - [`ratelimit`], [`metrics`]: per-caller limits, Prometheus text.
//! - [`cli`]: the `walletd` binary's commands (`serve`, `replay`, `wal inspect`, `snapshot`).
//! - [`fault`]: a test-only fault hook (`WALLETD_FAULT_INJECTION`) that poisons the log.

// Bad input never panics the server: no unwrap or expect outside tests.
#![cfg_attr(not(test), deny(clippy::unwrap_used, clippy::expect_used))]

pub mod app;
pub mod auth;
pub mod cli;
pub mod error;
pub mod fault;
pub mod fees;
pub mod handlers;
pub mod json;
pub mod metrics;
pub mod qr_svg;
pub mod ratelimit;
pub mod request_id;
pub mod routes;
pub mod server;
pub mod views;
