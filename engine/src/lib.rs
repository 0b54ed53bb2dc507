//! walletd's money domain: wallets, ledger, holds, transfers, payments, payouts and settlements as a
//! deterministic state machine.
//!
//! # Design
//!
//! The engine does no I/O, starts no threads, reads no clock and draws no random numbers. A
//! [`Shard`] owns a disjoint set of wallets (plus its per-currency system accounts) and changes only
//! through events:
//!
//! ```text
//! Shard::decide(&self, &Command, &Context) -> Result<Vec<Event>, Rejection>   pure
//! encode(&events) -> one WAL record                                          (the lead's WAL)
//! Shard::apply(&mut self, &Event) -> Result<(), ApplyError>                  deterministic
//! ```
//!
//! Time and entropy enter only through [`Context`] and end up *in* the events (ids, uuids,
//! timestamps, balances after, hashes), so replaying a snapshot plus the WAL rebuilds byte-for-byte
//! the same state ([`Shard::state_digest`]) without recomputing any generated value. Tests drive it
//! with a logical clock (TigerBeetle VOPR / toydb style). [`Shard::execute`] is decide + apply +
//! read-back for callers that apply at once.
//!
//! # Layout
//!
//! One folder per concern; the arrows run one way (a folder uses only those above it here):
//!
//! ```text
//! values      currency, money, ids, fees, EMVCo, rejection codes and errors
//!   ^
//! ledger      records: wallets, transactions and hash-chained entries, holds, transfers, views
//!   ^
//! commerce    records: payments, links, QR, payouts, settlements, views
//!   ^                                               identity   businesses, employees, customers
//! shard       the Shard, its commands and events (+ codec), snapshots;            ^
//!             shard::ledger decides/applies/checks ledger commands,               |
//!             shard::commerce the commerce ones (and may use shard::ledger)       |
//!   ^                                                                             |
//! runtime     the one part with I/O and threads: shard actors, the WAL, idempotency,
//!             routing, cross-shard protocols, snapshots, recovery
//! ```
//!
//! * [`values`]: [`Rejection`] (stable codes, numeric precedence), [`ApplyError`],
//!   [`DecodeError`], [`InvariantViolation`] live in `values::error`.
//! * [`ledger`] and [`commerce`] hold data and its own rules; deciding and applying commands on
//!   them is the shard's ([`shard`]), so records never depend on the state machine that owns them.
//! * [`identity`]: identities, event-sourced on the lead shard's log.
//! * [`runtime`]: everything above stays pure.
//!
//! # Invariants (checked by [`Shard::check_invariants`], see [`Shard`])
//!
//! 1. Per currency, all entries of a shard (system accounts included) sum to zero.
//! 2. Each wallet's cached balance equals its ledger; held equals its active holds.
//! 3. `available = balance − held ≥ 0` for every customer/merchant wallet.
//! 4. Every wallet's hash chain is valid and ends at its chain head.
//! 5. In-transit accounts match the outgoing/incoming cross-shard transfers and payment steps.
//! 6. Same events → same state (`state_digest`), snapshots round-trip exactly.
//! 7. Commerce records agree with the money: fee + net = amount, refunded totals match the refund
//!    postings, payout holds follow the payout's state, no transaction is settled twice.

#![deny(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
#![cfg_attr(
    test,
    allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)
)]

pub mod commerce;
pub mod identity;
pub mod ledger;
pub mod runtime;
pub mod shard;
pub mod values;

pub use shard::{
    decode, encode, Command, Context, Event, Outcome, Page, Paged, Presence, Shard,
    IDLE_WALLET_BYTES_BUDGET, SNAPSHOT_FORMAT_VERSION,
};
pub use values::currency::Currency;
pub use values::error::{
    ApplyError, DecodeError, EncodeError, ExecuteError, InvariantViolation, Rejection,
};
pub use values::ids::{
    shard_of, EntryId, HoldId, PaymentId, PaymentLinkId, PayoutId, QrId, SettlementId,
    TransactionId, Uuid, WalletId,
};

#[cfg(test)]
mod tests;
