//! The engine's write-ahead-log record: everything one command changed, on one shard.
//!
//! The `wal` crate stores opaque bytes; this module gives them meaning. A record holds one
//! command, or several commands a shard decided back to back and logged together
//! (`runtime::actor`, "Coalesced records"): either way its events, and the idempotency entries
//! that remember the answers, become durable together or not at all.
//!
//! | offset | size | field                                                               |
//! |--------|------|---------------------------------------------------------------------|
//! | 0      | 1    | journal format version: the newest event format its events need     |
//! | 1      | n    | postcard encoding of [`JournalEntry`]                               |
//!
//! [`JournalEntry::events`] are the shard's domain events (see [`crate::event`]).
//! [`JournalEntry::idempotency`] remembers the rendered answer to each request that carried an
//! idempotency key, so a retry after a restart gets the same answer.

use serde::{Deserialize, Serialize};

use crate::identity::directory::DirectoryEvent;
use crate::shard::event::Event;
use crate::values::error::{encode_versioned, DecodeError, EncodeError};

/// Newest version byte at the start of a journal entry. An entry is written with the lowest
/// version that can hold its events (the newest of their [`Event::format_version`]s), so a
/// binary that predates the commerce events still reads every record without them and refuses
/// the others by their version, naming it, instead of failing to parse them.
pub const JOURNAL_FORMAT_VERSION: u8 = 7;

/// The version every entry is written with at least: its postings are stamped no earlier than
/// any entry before them on the shard (`Shard::posted_at_floor_ms`), so the history store needs
/// no date index of their entries (`runtime::history::dated`). Entries of lower versions may
/// not be in time order, and the store keeps a date index of theirs. A binary before it refuses
/// these entries by their version, as it must: it would post out of order after them.
pub const POSTED_AT_FLOOR_VERSION: u8 = 7;

/// The version of an entry holding more than one idempotency entry (a coalesced record): a
/// binary that reads only version 5 would otherwise fail on it as a malformed option tag.
const COALESCED_KEYS_VERSION: u8 = 6;

/// Who asked, under which key, for what, and what they were answered.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct IdempotencyRecord {
    /// The caller's identity as the API names it (`customer:7`, `employee:3`, a client address).
    pub caller: String,
    /// The client's idempotency key.
    pub key: String,
    /// Digest of what was asked (route, target, body): a retry must match it.
    pub fingerprint: [u8; 32],
    /// When the answer was decided, unix milliseconds (keys are kept at least 24 h after it).
    pub at_ms: i64,
    /// Which operation asked, so the [`super::Renderer`] can render its answer (also at recovery).
    pub route: u16,
    /// The rendered answer, opaque to the engine; `None` while a multi-step command is unfinished.
    /// Written as a byte string: the same bytes as a sequence of `u8` ([`crate::values::bytes`]).
    #[serde(with = "crate::values::bytes::owned_opt")]
    pub response: Option<Vec<u8>>,
    /// The cross-shard transfer whose first step logged this key as pending (recovery finishes
    /// the transfer and records the answer).
    pub transfer_uuid: Option<crate::values::ids::Uuid>,
}

/// Everything one command, or one run of commands logged together, wrote on one shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct JournalEntry {
    /// The shard whose state the events change.
    pub shard: u32,
    /// The commands' events, in the order they were decided and applied.
    pub events: Vec<Event>,
    /// Identity events; only shard 0 hosts the directory.
    pub directory: Vec<DirectoryEvent>,
    /// One entry per keyed command of the record, in order. Versions 1 to 5 wrote an
    /// `Option` here: postcard encodes `None` and `Some(x)` exactly as a sequence of zero or one
    /// (a length byte 0 or 1, then the item), so every older record reads as it was written and
    /// an entry with at most one key is still written as older binaries expect
    /// (`an_entry_with_one_key_encodes_as_the_optional_key_did`).
    pub idempotency: Vec<IdempotencyRecord>,
}

impl JournalEntry {
    /// Encodes the entry as one WAL record, or says why it could not (a bug): the caller fails
    /// the command instead of appending an empty record that replay would refuse.
    pub fn encode(&self) -> Result<Vec<u8>, EncodeError> {
        encode_versioned(
            self,
            &[self.format_version().max(POSTED_AT_FLOOR_VERSION)],
            "journal entry",
        )
    }

    /// The version this entry is written with: 1 unless an event, or more than one key, needs
    /// a newer format.
    #[must_use]
    pub fn format_version(&self) -> u8 {
        let keys = if self.idempotency.len() > 1 {
            COALESCED_KEYS_VERSION
        } else {
            1
        };
        self.events
            .iter()
            .map(Event::format_version)
            .max()
            .unwrap_or(1)
            .max(keys)
    }

    /// Decodes and validates a WAL record. Never panics, whatever the bytes.
    pub fn decode(bytes: &[u8]) -> Result<Self, DecodeError> {
        let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
        if !(1..=JOURNAL_FORMAT_VERSION).contains(version) {
            return Err(DecodeError::UnsupportedVersion(*version));
        }
        let (entry, rest): (JournalEntry, &[u8]) = postcard::take_from_bytes(body)
            .map_err(|error| DecodeError::Malformed(error.to_string()))?;
        if !rest.is_empty() {
            return Err(DecodeError::TrailingBytes(rest.len()));
        }
        // A version 1 entry cannot hold what version 2 added (the writer picks the version).
        if entry.format_version() > *version {
            return Err(DecodeError::Malformed(format!(
                "a version {version} journal entry holds what version {} added",
                entry.format_version()
            )));
        }
        for event in &entry.events {
            event.validate().map_err(DecodeError::Invalid)?;
        }
        Ok(entry)
    }
}
