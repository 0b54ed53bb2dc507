//! The shard: one executor's wallets, system accounts and commerce records as a deterministic state
//! machine, the commands it takes, the events it logs and its snapshots.
//!
//! ```text
//! Shard::decide(&self, &Command, &Context) -> Result<Vec<Event>, Rejection>   pure
//! encode(&events) -> one WAL record
//! Shard::apply(&mut self, &Event) -> Result<(), ApplyError>                  deterministic
//! ```
//!
//! * [`state`]: the [`Shard`] itself, its indexes, invariants and memory budget.
//! * [`command`]: what callers send ([`Command`], [`Context`]) and get back ([`Outcome`]).
//! * [`event`]: the events and their binary codec.
//! * [`ledger`]: deciding, applying and checking wallets, deposits, withdrawals, transfers, holds,
//!   refunds and reversals, and the posting builder every money movement goes through.
//! * [`commerce`]: the same for payments, links and QR, payouts, settlements, and the commerce
//!   queries and reports.
//! * [`execute`]: decide + apply + read-back for callers that apply at once.
//! * [`cold`]: where the shard finds records that left its memory (the history store).
//! * [`moves`]: cross-shard moves in flight in memory, finished ones in the store, and the
//!   in-transit totals.
//! * [`snapshot`]: the shard's image and its digest.
//!
//! May use: [`crate::values`], [`crate::ledger`], [`crate::commerce`]. `shard::commerce` may use
//! `shard::ledger` (every payment posts through it); never the other way round.

pub mod cold;
pub mod command;
pub mod commerce;
pub mod event;
mod execute;
pub(crate) mod ledger;
pub mod moves;
pub(crate) mod snapshot;
pub(crate) mod state;

pub use command::{Command, Context, Outcome, Page, Paged};
pub use event::{decode, encode, Event};
pub use snapshot::SNAPSHOT_FORMAT_VERSION;
pub use state::{Presence, Shard, IDLE_WALLET_BYTES_BUDGET};
