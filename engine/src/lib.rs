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
//! * [`currency`], [`money`], [`ids`]: values: ISO 4217 table, amount rules and the `Decimal` serde
//!   adapter, numeric ids with the shard formula (`shard_of(id) = id mod shard_count`), uuids.
//! * [`wallet`], [`ledger`], [`hold`], [`transfer`]: records: the hot wallet and its boxed history,
//!   transactions and hash-chained entries, holds, cross-shard transfers (protocol in [`transfer`]).
//! * Commerce: [`payment`] (payments, links, QR payloads, the cross-shard payment protocol),
//!   [`payout`] (payouts and settlements), [`fee`] (fee rules and the exact fee split), [`emvco`]
//!   (QR payloads and their CRC); `commerce` holds them in the shard; [`commerce_view`] and
//!   [`query_commerce`] read them, [`report`] sums them for the report routes.
//! * [`event`]: the events and their binary codec ([`encode`]/[`decode`]).
//! * [`command`], [`view`]: what callers send and get back.
//! * `shard` ([`Shard`], its invariants and memory budget), `decide`, `decide_hold`, `reversal`,
//!   `decide_payment`, `decide_payment_move`, `decide_link`, `decide_payout`, `posting`:
//!   deciding; `apply`, `apply_commerce`: applying; `execute`, `execute_commerce`; `invariants`,
//!   `invariants_commerce`; `event_commerce` (commerce event rules); `snapshot` (+ digest).
//! * [`error`]: [`Rejection`] (stable codes, numeric precedence), [`ApplyError`], [`DecodeError`],
//!   [`InvariantViolation`].
//! * [`directory`]: identities (businesses, employees with roles, customers), event-sourced too.
//! * [`runtime`]: the one part that does I/O and threads: shard actors on actix Arbiters, the
//!   write-ahead log, idempotency, snapshots and recovery. Everything above stays pure.
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

mod apply;
mod apply_commerce;
pub mod chunked;
pub mod command;
mod commerce;
pub mod commerce_view;
pub mod currency;
mod decide;
mod decide_hold;
mod decide_link;
mod decide_payment;
mod decide_payment_move;
mod decide_payout;
pub mod directory;
pub mod emvco;
pub mod error;
pub mod event;
mod event_commerce;
mod execute;
mod execute_commerce;
pub mod fee;
pub mod hold;
pub mod ids;
mod invariants;
mod invariants_commerce;
pub mod ledger;
pub mod money;
pub mod payment;
pub mod payout;
mod posting;
pub mod query_commerce;
pub mod report;
mod reversal;
pub mod runtime;
mod shard;
mod snapshot;
pub mod transfer;
pub mod view;
pub mod wallet;

pub use command::{Command, Context, Outcome, Page, Paged};
pub use currency::Currency;
pub use error::{ApplyError, DecodeError, ExecuteError, InvariantViolation, Rejection};
pub use event::{decode, encode, Event};
pub use ids::{
    shard_of, EntryId, HoldId, PaymentId, PaymentLinkId, PayoutId, QrId, SettlementId,
    TransactionId, Uuid, WalletId,
};
pub use shard::{Shard, IDLE_WALLET_BYTES_BUDGET};
pub use snapshot::SNAPSHOT_FORMAT_VERSION;

#[cfg(test)]
mod tests;
