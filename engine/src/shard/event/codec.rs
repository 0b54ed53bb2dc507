//! The binary codec of an event batch (layout in the module docs of `super`).

use crate::shard::event::types::{Event, EVENT_FORMAT_VERSION, EVENT_FORMAT_VERSION_MIN};
use crate::values::error::DecodeError;

/// Encodes one command's events as one record (layout in the module docs).
///
/// Cannot fail in practice: every event type serialises infallibly into postcard's growable vector
/// (no unknown-length sequences, no custom serialisation errors); should it ever fail, the output is
/// empty, which [`decode`] refuses loudly rather than mis-reading.
#[must_use]
pub fn encode(events: &[Event]) -> Vec<u8> {
    postcard::to_extend(events, vec![EVENT_FORMAT_VERSION]).unwrap_or_default()
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
