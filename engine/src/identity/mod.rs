//! Identities: businesses, their employees with roles, and customers ([`directory`]), event-sourced
//! like the ledger and kept on the lead shard's log.
//!
//! May use: [`crate::values`].

pub mod directory;
