//! The binary codec of an event batch (layout in the module docs of `super`).

use crate::shard::event::types::{Event, EVENT_FORMAT_VERSION, EVENT_FORMAT_VERSION_MIN};
use crate::values::error::{encode_versioned, DecodeError, EncodeError};

/// Encodes one command's events as one record (layout in the module docs).
///
/// Every event type serialises infallibly into postcard's growable vector today; should that ever
/// change, the error is returned so the caller fails the command instead of writing an empty record.
pub fn encode(events: &[Event]) -> Result<Vec<u8>, EncodeError> {
    encode_versioned(events, &[EVENT_FORMAT_VERSION], "event batch")
}

/// Decodes and validates a record written by [`encode`]. Never panics.
pub fn decode(bytes: &[u8]) -> Result<Vec<Event>, DecodeError> {
    let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
    if !(EVENT_FORMAT_VERSION_MIN..=EVENT_FORMAT_VERSION).contains(version) {
        return Err(DecodeError::UnsupportedVersion(*version));
    }
    let (events, rest): (Vec<Event>, &[u8]) = postcard::take_from_bytes(body)
        .map_err(|error| DecodeError::Malformed(error.to_string()))?;
    if !rest.is_empty() {
        return Err(DecodeError::TrailingBytes(rest.len()));
    }
    for event in &events {
        if event.format_version() > *version {
            return Err(DecodeError::Invalid(
                "event newer than the batch's format version",
            ));
        }
        event.validate().map_err(DecodeError::Invalid)?;
    }
    Ok(events)
}
