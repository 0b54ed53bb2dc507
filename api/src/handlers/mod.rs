//! Request handlers. Each does five things (STYLE.md "A thin API layer"): decode the request
//! into a typed command, check the caller against the route's tier and the resource's scope,
//! send one message to the engine, map its error in one place ([`engine_error`]), render.
//!
//! The helpers here keep every handler to those steps: JSON decoding with the 400/422 split,
//! path and query parsing, idempotency keys, and running a command with or without one.

//!
//! [`call`] holds those helpers, [`dispatch`] maps each operation to its handler; one file per
//! concern holds the handlers.

pub mod batch;
pub mod call;
mod dispatch;
pub mod identity;
pub mod merchants;
pub mod money;
pub mod payments;
pub mod payouts;
pub mod reports;
pub mod system;
pub mod wallets;
pub mod webhooks;

pub use call::{Call, Handled};
pub use dispatch::dispatch;
