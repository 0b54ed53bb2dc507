//! serde adapters for owned byte strings that go out as bytes, not as a sequence of `u8`.
//!
//! serde writes a `Vec<u8>` as a sequence, so postcard encodes and decodes it one `u8` at a
//! time. For postcard a sequence of `u8` and a byte string are the same bytes (a varint length,
//! then the bytes), so a field that switches to these adapters reads every record written
//! before the switch, and older binaries read what it writes
//! (`a_byte_string_is_the_bytes_of_a_sequence_of_u8`). Decoding also takes a sequence, for
//! formats that write one differently (JSON's array of numbers).

use std::fmt;

use serde::de::{Deserializer, SeqAccess, Visitor};
use serde::{Deserialize, Serialize, Serializer};

/// `#[serde(with = "crate::values::bytes::owned")]` for a `Vec<u8>` field.
pub mod owned {
    use super::{Deserializer, Serializer};

    pub fn serialize<S: Serializer>(bytes: &[u8], serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_bytes(bytes)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Vec<u8>, D::Error> {
        deserializer.deserialize_byte_buf(super::BytesVisitor)
    }
}

/// `#[serde(with = "crate::values::bytes::owned_opt")]` for an `Option<Vec<u8>>` field.
pub mod owned_opt {
    use super::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(transparent)]
    struct Wrapped(#[serde(with = "super::owned")] Vec<u8>);

    #[derive(Serialize)]
    #[serde(transparent)]
    struct Borrowed<'a>(#[serde(with = "super::owned")] &'a [u8]);

    pub fn serialize<S: Serializer>(
        bytes: &Option<Vec<u8>>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        bytes.as_deref().map(Borrowed).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Vec<u8>>, D::Error> {
        Ok(Option::<Wrapped>::deserialize(deserializer)?.map(|wrapped| wrapped.0))
    }
}

struct BytesVisitor;

impl<'de> Visitor<'de> for BytesVisitor {
    type Value = Vec<u8>;

    fn expecting(&self, formatter: &mut fmt::Formatter<'_>) -> fmt::Result {
        formatter.write_str("a byte string")
    }

    fn visit_bytes<E: serde::de::Error>(self, bytes: &[u8]) -> Result<Vec<u8>, E> {
        Ok(bytes.to_vec())
    }

    fn visit_byte_buf<E: serde::de::Error>(self, bytes: Vec<u8>) -> Result<Vec<u8>, E> {
        Ok(bytes)
    }

    fn visit_seq<A: SeqAccess<'de>>(self, mut seq: A) -> Result<Vec<u8>, A::Error> {
        // The hint comes from the input: capped, so a forged length cannot reserve gigabytes.
        let mut bytes = Vec::with_capacity(seq.size_hint().unwrap_or(0).min(4096));
        while let Some(byte) = seq.next_element::<u8>()? {
            bytes.push(byte);
        }
        Ok(bytes)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use serde::{Deserialize, Serialize};

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct AsSequence {
        body: Vec<u8>,
        maybe: Option<Vec<u8>>,
        after: u32,
    }

    #[derive(Debug, PartialEq, Serialize, Deserialize)]
    struct AsBytes {
        #[serde(with = "super::owned")]
        body: Vec<u8>,
        #[serde(with = "super::owned_opt")]
        maybe: Option<Vec<u8>>,
        after: u32,
    }

    /// The adapters write exactly what a `Vec<u8>` wrote, and read it back: records logged
    /// before and after the switch are the same bytes.
    #[test]
    fn a_byte_string_is_the_bytes_of_a_sequence_of_u8() {
        let long: Vec<u8> = (0..=255u8).cycle().take(700).collect();
        for (body, maybe) in [
            (Vec::new(), None),
            (vec![0, 1, 255], Some(Vec::new())),
            (long.clone(), Some(long.clone())),
        ] {
            let old = AsSequence {
                body: body.clone(),
                maybe: maybe.clone(),
                after: 7,
            };
            let new = AsBytes {
                body,
                maybe,
                after: 7,
            };
            let old_bytes = postcard::to_allocvec(&old).unwrap();
            assert_eq!(postcard::to_allocvec(&new).unwrap(), old_bytes);
            assert_eq!(postcard::from_bytes::<AsBytes>(&old_bytes).unwrap(), new);
            assert_eq!(postcard::from_bytes::<AsSequence>(&old_bytes).unwrap(), old);
        }
    }

    /// A length past the input is an error, not an allocation of that length.
    #[test]
    fn a_forged_length_is_refused() {
        // varint 2^35, then three bytes.
        let forged = [0x80, 0x80, 0x80, 0x80, 0x80, 0x01, 1, 2, 3, 9];
        assert!(postcard::from_bytes::<AsBytes>(&forged).is_err());
    }

    /// JSON writes bytes as an array of numbers; the adapters read that too.
    #[test]
    fn json_arrays_read_as_bytes() {
        let value: AsBytes =
            serde_json::from_str(r#"{"body":[1,2,3],"maybe":[4],"after":5}"#).unwrap();
        assert_eq!(value.body, vec![1, 2, 3]);
        assert_eq!(value.maybe, Some(vec![4]));
    }
}
