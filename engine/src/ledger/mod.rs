//! The ledger's records: wallets and their balances, transactions and hash-chained entries, holds
//! and cross-shard transfers, with the read-only views callers get of them.
//!
//! These are data and their own rules (how an entry is hashed, how a hold's life cycle runs, the
//! cross-shard transfer protocol in [`transfer`]); deciding and applying commands on them is the
//! shard's work (`crate::shard::ledger`).
//!
//! May use: [`crate::values`].

pub mod hold;
pub mod recent;
pub mod transaction;
pub mod transfer;
pub mod view;
pub mod wallet;
