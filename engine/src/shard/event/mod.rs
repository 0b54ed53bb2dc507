//! Events: every change of state, and their binary codec.
//!
//! `Shard::decide` turns a command into a list of events; `Shard::apply` performs one event. Events
//! are facts, not requests: each carries every id, uuid, timestamp, `balance_after` and hash that
//! `decide` computed, so `apply` only stores them and replay never generates or recomputes a value.
//! `apply` still checks that an event fits (ids in sequence, records exist, balances add up) and
//! refuses one that does not with [`crate::ApplyError`].
//!
//! # Codec
//!
//! All events of one command are encoded together and written as ONE WAL record, so a command is
//! durable entirely or not at all. Layout of [`encode`]'s output:
//!
//! ```text
//! byte 0     EVENT_FORMAT_VERSION (5; 1 to 4 are still read)
//! bytes 1..  postcard encoding of the event list: varint count, then each event
//!            (varint variant index, then its fields in declaration order; integers as varints,
//!            i64 zig-zag; Decimal as its 16-byte `Decimal::serialize()` form; uuid 16 raw bytes;
//!            hash 32 raw bytes; currency as a length-prefixed 3-byte code; Option as 0/1 + value)
//! ```
//!
//! Adding a field or variant changes the format: bump the version and keep a decoder for the old one.
//! Version 2 appended the commerce events (payments, links, QR, payouts, settlements, cross-shard
//! payment steps) and the commerce transaction types; variants were only appended, so a version 1
//! batch decodes unchanged with the same decoder, which refuses a version 1 batch that holds
//! anything version 2 added ([`Event::format_version`]). Version 3 appended
//! `PaymentCreditRefused` the same way, version 4 `UuidKeyChosen` (`values::sealed`), and version 5
//! `TransferBatchPrepared` and `TransferBatchClosed` (`runtime::atomic_batch`).
//! [`decode`] never panics, refuses trailing bytes, non-canonical decimals, unknown currencies and
//! variants, and validates each event's self-contained rules ([`Event::validate`]) — the pair of the
//! checks `decide` made before encoding. serde_json gives a readable form for `wal inspect`
//! (decimals as strings, uuids hyphenated, hashes hex).

mod codec;
mod commerce;
mod rules;
mod types;

pub use codec::{decode, encode};
pub use types::{Event, WalletCreated, EVENT_FORMAT_VERSION, EVENT_FORMAT_VERSION_MIN};
