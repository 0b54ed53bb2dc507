//! Deciding, applying, checking and querying commerce on a [`crate::shard::Shard`]: payments
//! ([`payment`]) and their cross-shard steps ([`payment_move`]), payment links and QR
//! ([`link`]), payouts and settlements ([`payout`]), applying their events ([`apply`]), their
//! invariants ([`invariants`]), read-back after execution ([`execute`]), the list and detail
//! queries ([`query`]) and the fee and settlement reports ([`report`]).
//!
//! May use: everything in `crate::shard::ledger` (every payment posts through its posting
//! builder), the records of [`crate::ledger`] and [`crate::commerce`], and [`crate::values`].

pub(crate) mod apply;
pub(crate) mod execute;
pub(crate) mod invariants;
pub(crate) mod link;
pub(crate) mod payment;
pub(crate) mod payment_move;
pub(crate) mod payout;
pub mod query;
pub mod report;
