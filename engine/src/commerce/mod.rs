//! Commerce records: payments, payment links and QR payloads ([`payment`], with the cross-shard
//! payment protocol), payouts and settlements ([`payout`]), the shard's table of them
//! ([`state`]) and the views callers get of them ([`view`]).
//!
//! Deciding, applying, checking and querying them is the shard's work (`crate::shard::commerce`).
//!
//! May use: [`crate::values`], [`crate::ledger`].

pub mod payment;
pub mod payout;
pub(crate) mod state;
pub mod view;
