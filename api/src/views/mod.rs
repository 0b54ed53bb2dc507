//! JSON shapes of the contract (part 2), built from the engine's views, and the renderer that
//! turns a command's result into the bytes an idempotent retry gets back.
//!
//! Every amount is written as an exact JSON number at its currency's scale; every timestamp as
//! ISO 8601 UTC with milliseconds. Fields the contract types without "or null" are never null
//! (decisions.md §6).
//!
//! One file per concern ([`ledger`], [`payments`], [`payouts`], [`webhooks`]) over two shared
//! ones ([`fields`], [`envelope`]); [`outcome`] sits on top and picks the view for a command's
//! result by route.

mod batch;
mod envelope;
mod fields;
mod ledger;
mod outcome;
mod payments;
mod payouts;
#[cfg(test)]
mod tests;
mod webhooks;

pub use batch::*;
pub use envelope::*;
pub use fields::*;
pub use ledger::*;
pub use outcome::*;
pub use payments::*;
pub use payouts::*;
pub use webhooks::*;
