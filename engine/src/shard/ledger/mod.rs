//! Deciding, applying and checking the ledger's commands on a [`crate::shard::Shard`]: wallets,
//! deposits, withdrawals and transfers ([`decide`]), holds ([`hold`]), refunds and reversals
//! ([`reversal`]), the posting builder every money movement goes through ([`posting`]), applying
//! events ([`apply`]) and the shard's invariants ([`invariants`]).
//!
//! `decide`, `apply` and `invariants` also dispatch the commerce commands and events to
//! `crate::shard::commerce` (through `Shard`'s methods; nothing here imports commerce logic).
//!
//! May use: [`crate::values`], [`crate::ledger`], the commerce records, and the shard's
//! state, commands and events.

pub(crate) mod apply;
pub(crate) mod checks;
pub(crate) mod decide;
pub(crate) mod hold;
pub(crate) mod invariants;
pub(crate) mod posting;
pub(crate) mod reversal;
