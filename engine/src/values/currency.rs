//! Currencies: a built-in ISO 4217 table with minor units and numeric codes.
//!
//! [`Currency`] is a 4-byte `Copy` value (code + minor unit) so that it can sit in every wallet and
//! entry without a pointer. It can only be made from the table, so a `Currency` in memory or in a
//! decoded event is always one the service supports, with the table's minor unit: deserialisation
//! looks the code up again rather than trusting a stored minor unit.

use std::fmt;

use serde::{Deserialize, Deserializer, Serialize, Serializer};

/// ISO 4217 codes, minor units (number of fraction digits) and numeric codes, sorted by code for
/// binary search.
const TABLE: &[(&str, u8, u16)] = &[
    ("AED", 2, 784),
    ("AFN", 2, 971),
    ("ALL", 2, 8),
    ("AMD", 2, 51),
    ("ARS", 2, 32),
    ("AUD", 2, 36),
    ("AZN", 2, 944),
    ("BDT", 2, 50),
    ("BGN", 2, 975),
    ("BHD", 3, 48),
    ("BRL", 2, 986),
    ("CAD", 2, 124),
    ("CHF", 2, 756),
    ("CLP", 0, 152),
    ("CNY", 2, 156),
    ("COP", 2, 170),
    ("CZK", 2, 203),
    ("DJF", 0, 262),
    ("DKK", 2, 208),
    ("DZD", 2, 12),
    ("EGP", 2, 818),
    ("ETB", 2, 230),
    ("EUR", 2, 978),
    ("GBP", 2, 826),
    ("GNF", 0, 324),
    ("HKD", 2, 344),
    ("HUF", 2, 348),
    ("IDR", 2, 360),
    ("ILS", 2, 376),
    ("INR", 2, 356),
    ("IQD", 3, 368),
    ("IRR", 2, 364),
    ("ISK", 0, 352),
    ("JOD", 3, 400),
    ("JPY", 0, 392),
    ("KES", 2, 404),
    ("KMF", 0, 174),
    ("KRW", 0, 410),
    ("KWD", 3, 414),
    ("KZT", 2, 398),
    ("LBP", 2, 422),
    ("LKR", 2, 144),
    ("LYD", 3, 434),
    ("MAD", 2, 504),
    ("MXN", 2, 484),
    ("MYR", 2, 458),
    ("NGN", 2, 566),
    ("NOK", 2, 578),
    ("NZD", 2, 554),
    ("OMR", 3, 512),
    ("PHP", 2, 608),
    ("PKR", 2, 586),
    ("PLN", 2, 985),
    ("PYG", 0, 600),
    ("QAR", 2, 634),
    ("RON", 2, 946),
    ("RUB", 2, 643),
    ("RWF", 0, 646),
    ("SAR", 2, 682),
    ("SDG", 2, 938),
    ("SEK", 2, 752),
    ("SGD", 2, 702),
    ("SOS", 2, 706),
    ("SYP", 2, 760),
    ("THB", 2, 764),
    ("TND", 3, 788),
    ("TRY", 2, 949),
    ("TWD", 2, 901),
    ("UAH", 2, 980),
    ("UGX", 0, 800),
    ("USD", 2, 840),
    ("UYU", 2, 858),
    ("VND", 0, 704),
    ("XAF", 0, 950),
    ("XOF", 0, 952),
    ("YER", 2, 886),
    ("ZAR", 2, 710),
];

/// A code that is not in the ISO 4217 table (`Rejection::UnknownCurrency` where a command meets it).
#[derive(Clone, Copy, Debug, PartialEq, Eq, thiserror::Error)]
#[error("unknown currency code")]
pub struct UnknownCurrency;

/// A supported currency: its ISO 4217 code and minor unit.
#[derive(Clone, Copy, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub struct Currency {
    code: [u8; 3],
    minor_units: u8,
}

const _: () = assert!(std::mem::size_of::<Currency>() == 4);

impl Currency {
    /// Looks up an exact, upper-case ISO 4217 code ("USD"; not "usd", not " USD").
    pub fn from_code(code: &str) -> Result<Self, UnknownCurrency> {
        let index = TABLE
            .binary_search_by(|(known, _, _)| (*known).cmp(code))
            .map_err(|_| UnknownCurrency)?;
        let (known, minor_units, _) = TABLE.get(index).ok_or(UnknownCurrency)?;
        let bytes = known.as_bytes();
        match bytes {
            [a, b, c] => Ok(Self {
                code: [*a, *b, *c],
                minor_units: *minor_units,
            }),
            _ => Err(UnknownCurrency),
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

    /// The code and minor unit in one number, equal exactly when the currencies are (for hashing).
    #[must_use]
    pub(crate) fn packed(&self) -> u32 {
        let [a, b, c] = self.code;
        u32::from_be_bytes([a, b, c, self.minor_units])
    }

    /// The ISO 4217 numeric code (YER 886, USD 840), as EMVCo QR payloads carry it (tag 53).
    #[must_use]
    pub fn numeric_code(&self) -> u16 {
        TABLE
            .binary_search_by(|(known, _, _)| known.as_bytes().cmp(&self.code[..]))
            .ok()
            .and_then(|index| TABLE.get(index))
            .map_or(0, |(_, _, numeric)| *numeric)
    }

    /// Every supported currency, in code order.
    pub fn all() -> impl Iterator<Item = Currency> {
        TABLE
            .iter()
            .filter_map(|(code, _, _)| Self::from_code(code).ok())
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
    type Err = UnknownCurrency;

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
