//! Currencies: a built-in ISO 4217 table with minor units.
//!
//! [`Currency`] is a 4-byte `Copy` value (code + minor unit) so that it can sit in every wallet and
//! entry without a pointer. It can only be made from the table, so a `Currency` in memory or in a
//! decoded event is always one the service supports, with the table's minor unit: deserialisation
//! looks the code up again rather than trusting a stored minor unit.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

use crate::error::Rejection;

/// ISO 4217 codes and minor units (number of fraction digits), sorted by code for binary search.
const TABLE: &[(&str, u8)] = &[
    ("AED", 2),
    ("AFN", 2),
    ("ALL", 2),
    ("AMD", 2),
    ("ARS", 2),
    ("AUD", 2),
    ("AZN", 2),
    ("BDT", 2),
    ("BGN", 2),
    ("BHD", 3),
    ("BRL", 2),
    ("CAD", 2),
    ("CHF", 2),
    ("CLP", 0),
    ("CNY", 2),
    ("COP", 2),
    ("CZK", 2),
    ("DJF", 0),
    ("DKK", 2),
    ("DZD", 2),
    ("EGP", 2),
    ("ETB", 2),
    ("EUR", 2),
    ("GBP", 2),
    ("GNF", 0),
    ("HKD", 2),
    ("HUF", 2),
    ("IDR", 2),
    ("ILS", 2),
    ("INR", 2),
    ("IQD", 3),
    ("IRR", 2),
    ("ISK", 0),
    ("JOD", 3),
    ("JPY", 0),
    ("KES", 2),
    ("KMF", 0),
    ("KRW", 0),
    ("KWD", 3),
    ("KZT", 2),
    ("LBP", 2),
    ("LKR", 2),
    ("LYD", 3),
    ("MAD", 2),
    ("MXN", 2),
    ("MYR", 2),
    ("NGN", 2),
    ("NOK", 2),
    ("NZD", 2),
    ("OMR", 3),
    ("PHP", 2),
    ("PKR", 2),
    ("PLN", 2),
    ("PYG", 0),
    ("QAR", 2),
    ("RON", 2),
    ("RUB", 2),
    ("RWF", 0),
    ("SAR", 2),
    ("SDG", 2),
    ("SEK", 2),
    ("SGD", 2),
    ("SOS", 2),
    ("SYP", 2),
    ("THB", 2),
    ("TND", 3),
    ("TRY", 2),
    ("TWD", 2),
    ("UAH", 2),
    ("UGX", 0),
    ("USD", 2),
    ("UYU", 2),
    ("VND", 0),
    ("XAF", 0),
    ("XOF", 0),
    ("YER", 2),
    ("ZAR", 2),
];

/// A supported currency: its ISO 4217 code and minor unit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: [u8; 3],
    minor_units: u8,
}

const _: () = assert!(std::mem::size_of::<Currency>() == 4);

impl Currency {
    /// Looks up an exact, upper-case ISO 4217 code ("USD"; not "usd", not " USD").
    pub fn from_code(code: &str) -> Result<Self, Rejection> {
        let index = TABLE
            .binary_search_by(|(known, _)| (*known).cmp(code))
            .map_err(|_| Rejection::UnknownCurrency)?;
        let (known, minor_units) = TABLE.get(index).ok_or(Rejection::UnknownCurrency)?;
        let bytes = known.as_bytes();
        match bytes {
            [a, b, c] => Ok(Self {
                code: [*a, *b, *c],
                minor_units: *minor_units,
            }),
            _ => Err(Rejection::UnknownCurrency),
        }
    }

    /// The three-letter code.
    #[must_use]
    pub fn code(&self) -> &str {
        // Always ASCII: only built from TABLE.
        std::str::from_utf8(&self.code).unwrap_or("XXX")
    }

    /// Fraction digits of the currency (USD 2, JPY 0, KWD 3).
    #[must_use]
    pub fn minor_units(&self) -> u32 {
        u32::from(self.minor_units)
    }

    /// Every supported currency, in code order.
    pub fn all() -> impl Iterator<Item = Currency> {
        TABLE
            .iter()
            .filter_map(|(code, _)| Self::from_code(code).ok())
    }
}

impl fmt::Display for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl fmt::Debug for Currency {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.code())
    }
}

impl std::str::FromStr for Currency {
    type Err = Rejection;

    fn from_str(code: &str) -> Result<Self, Self::Err> {
        Self::from_code(code)
    }
}

impl Serialize for Currency {
    fn serialize<S: Serializer>(&self, serializer: S) -> Result<S::Ok, S::Error> {
        serializer.serialize_str(self.code())
    }
}

impl<'de> Deserialize<'de> for Currency {
    fn deserialize<D: Deserializer<'de>>(deserializer: D) -> Result<Self, D::Error> {
        struct CodeVisitor;
        impl serde::de::Visitor<'_> for CodeVisitor {
            type Value = Currency;
            fn expecting(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str("an ISO 4217 currency code")
            }
            fn visit_str<E: serde::de::Error>(self, code: &str) -> Result<Currency, E> {
                Currency::from_code(code).map_err(|_| E::custom("unknown currency code"))
            }
        }
        deserializer.deserialize_str(CodeVisitor)
    }
}
