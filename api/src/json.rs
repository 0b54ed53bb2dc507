//! Exact decimal JSON numbers, without serde_json's graph-wide `arbitrary_precision`.
//!
//! Amounts arrive as JSON numbers and must never pass through a binary float: `0.1` must stay
//! `0.1`, and `12345678901234567890.123456789` must either be taken exactly or refused. We read the
//! number's raw text (serde_json `RawValue`) and parse it with `Decimal::from_str_exact`; on the way
//! out we write the decimal's text as a raw JSON number. Strings are refused, even `"10.00"`
//! (decisions.md §6). See shared/notes/dependencies.md §3, "Option A".

use std::str::FromStr;

use rust_decimal::Decimal;
use serde::de::Error as _;
use serde::{Deserialize, Deserializer, Serializer};
use serde_json::value::RawValue;

/// Why a JSON value is not an acceptable amount.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum NumberError {
    NotANumber,
    Inexact,
}

impl std::fmt::Display for NumberError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            NumberError::NotANumber => f.write_str("must be a JSON number (not a string)"),
            NumberError::Inexact => {
                f.write_str("is not a decimal number that can be represented exactly")
            }
        }
    }
}

/// Parses the raw text of a JSON value as an exact decimal.
pub fn parse_decimal(raw: &str) -> Result<Decimal, NumberError> {
    let text = raw.trim();
    let first = text.bytes().next().ok_or(NumberError::NotANumber)?;
    if !(first == b'-' || first.is_ascii_digit()) {
        return Err(NumberError::NotANumber);
    }
    if text.contains(['e', 'E']) {
        // Scientific notation: exact through from_scientific, refused when it cannot be.
        return Decimal::from_scientific(text).map_err(|_| NumberError::Inexact);
    }
    Decimal::from_str_exact(text).map_err(|_| NumberError::Inexact)
}

/// Deserializes a required exact decimal from a JSON number.
pub fn deserialize_decimal<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Decimal, D::Error> {
    let raw: &RawValue = Deserialize::deserialize(deserializer)?;
    parse_decimal(raw.get()).map_err(D::Error::custom)
}

/// Deserializes an optional exact decimal (absent or null is `None`).
pub fn deserialize_optional_decimal<'de, D: Deserializer<'de>>(
    deserializer: D,
) -> Result<Option<Decimal>, D::Error> {
    let raw: Option<&RawValue> = Deserialize::deserialize(deserializer)?;
    match raw {
        None => Ok(None),
        Some(raw) if raw.get().trim() == "null" => Ok(None),
        Some(raw) => parse_decimal(raw.get()).map(Some).map_err(D::Error::custom),
    }
}

/// Serializes a decimal as a JSON number with its exact digits.
pub fn serialize_decimal<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
    let raw = RawValue::from_string(value.to_string()).map_err(serde::ser::Error::custom)?;
    serde::Serialize::serialize(&raw, serializer)
}

/// Serializes an optional decimal (`None` as null).
pub fn serialize_optional_decimal<S: Serializer>(
    value: &Option<Decimal>,
    serializer: S,
) -> Result<S::Ok, S::Error> {
    match value {
        Some(value) => serialize_decimal(value, serializer),
        None => serializer.serialize_none(),
    }
}

/// A decimal that serializes as an exact JSON number; for building responses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Number(pub Decimal);

impl serde::Serialize for Number {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serialize_decimal(&self.0, serializer)
    }
}

impl FromStr for Number {
    type Err = NumberError;
    fn from_str(s: &str) -> Result<Self, Self::Err> {
        parse_decimal(s).map(Number)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[derive(Deserialize)]
    struct Body {
        #[serde(deserialize_with = "deserialize_decimal")]
        amount: Decimal,
    }

    fn amount(json: &str) -> Result<Decimal, serde_json::Error> {
        serde_json::from_str::<Body>(json).map(|b| b.amount)
    }

    #[test]
    fn numbers_keep_their_exact_digits() {
        assert_eq!(amount(r#"{"amount": 0.10}"#).unwrap().to_string(), "0.10");
        assert_eq!(
            amount(r#"{"amount": 12345678901234567890.123456789}"#)
                .unwrap()
                .to_string(),
            "12345678901234567890.123456789"
        );
        assert_eq!(amount(r#"{"amount": 1e2}"#).unwrap(), Decimal::from(100));
        assert_eq!(amount(r#"{"amount": -5}"#).unwrap(), Decimal::from(-5));
    }

    #[test]
    fn strings_and_inexact_numbers_are_refused() {
        assert!(amount(r#"{"amount": "10.00"}"#).is_err());
        assert!(amount(r#"{"amount": true}"#).is_err());
        assert!(amount(r#"{"amount": null}"#).is_err());
        assert!(amount(r#"{"amount": 1e400}"#).is_err());
        assert!(amount(r#"{"amount": 0.1234567890123456789012345678901}"#).is_err());
    }

    #[test]
    fn serialization_writes_a_number_not_a_string() {
        let text =
            serde_json::to_string(&Number(Decimal::from_str_exact("10.50").unwrap())).unwrap();
        assert_eq!(text, "10.50");
    }
}
