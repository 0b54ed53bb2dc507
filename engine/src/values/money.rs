//! Money amounts: validation, normalisation and (de)serialisation of [`Decimal`].
//!
//! Amounts are exact decimals (`rust_decimal`, 96-bit mantissa); binary floats never appear. An
//! amount a client sends is accepted when it is > 0, ≤ [`AMOUNT_MAX`] (1e12) and has no more
//! *significant* fraction digits than the currency's minor unit: for USD `10.5`, `10.50` and `10.500`
//! are all ten and a half, `10.505` is rejected (dropping the `5` would silently change the amount).
//! Accepted amounts are rescaled to exactly the currency's minor unit (`10.5` → `10.50`), and every
//! stored amount and balance keeps that scale, so equal values have equal bytes: the hash chain and
//! the state digest rely on it.
//!
//! Arithmetic on stored balances uses `checked_*` only: `Decimal`'s operators panic on overflow.
//!
//! The serde adapters [`decimal`] and [`decimal_opt`] write the 16-byte `Decimal::serialize()` form
//! in binary formats (postcard events and snapshots) and a decimal string in human-readable ones
//! (serde_json, for `wal inspect`). Decoding refuses non-canonical bytes (unused flag bits set, scale
//! above 28), so a decoded value re-encodes to the same bytes.

use rust_decimal::Decimal;

use crate::values::currency::Currency;
use crate::values::error::Rejection;

/// The largest amount one command may move: 1e12 (decisions.md §3).
pub const AMOUNT_MAX: Decimal = Decimal::from_parts(0xD4A5_1000, 0xE8, 0, false, 0);

const _: () = assert!(AMOUNT_MAX.mantissa() == 1_000_000_000_000);

/// Validates a client amount for `currency` and returns it rescaled to the currency's minor unit.
pub fn validate_amount(amount: Decimal, currency: Currency) -> Result<Decimal, Rejection> {
    if amount <= Decimal::ZERO {
        return Err(Rejection::InvalidAmount("amount must be greater than zero"));
    }
    if amount > AMOUNT_MAX {
        return Err(Rejection::InvalidAmount("amount must be at most 1e12"));
    }
    if amount.normalize().scale() > currency.minor_units() {
        return Err(Rejection::InvalidAmount(
            "amount has more fraction digits than the currency's minor unit",
        ));
    }
    Ok(to_currency_scale(amount, currency))
}

/// `amount` rescaled to the currency's minor unit. Exact for any amount that passed
/// [`validate_amount`] and for sums of such amounts.
#[must_use]
pub fn to_currency_scale(mut amount: Decimal, currency: Currency) -> Decimal {
    amount.rescale(currency.minor_units());
    amount
}

/// Zero at the currency's scale ("0.00" for USD).
#[must_use]
pub fn zero(currency: Currency) -> Decimal {
    to_currency_scale(Decimal::ZERO, currency)
}

/// Canonical bytes of a decimal for hashing: mantissa (i128 LE) then scale, so the representation of
/// zero's sign cannot leak into a hash.
#[must_use]
pub fn canonical_bytes(value: Decimal) -> [u8; 17] {
    let mut out = [0u8; 17];
    for (slot, byte) in out.iter_mut().zip(value.mantissa().to_le_bytes()) {
        *slot = byte;
    }
    out[16] = u8::try_from(value.scale()).unwrap_or(u8::MAX);
    out
}

/// `Decimal` from its 16-byte form, refusing bytes that would not re-encode identically.
pub fn decimal_from_bytes(bytes: [u8; 16]) -> Option<Decimal> {
    let value = Decimal::deserialize(bytes);
    (value.serialize() == bytes).then_some(value)
}

/// serde adapter for `Decimal` fields: `#[serde(with = "crate::values::money::decimal")]`.
pub mod decimal {
    use rust_decimal::Decimal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    pub fn serialize<S: Serializer>(value: &Decimal, serializer: S) -> Result<S::Ok, S::Error> {
        if serializer.is_human_readable() {
            serializer.collect_str(value)
        } else {
            value.serialize().serialize(serializer)
        }
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(deserializer: D) -> Result<Decimal, D::Error> {
        if deserializer.is_human_readable() {
            let text = <std::borrow::Cow<'de, str>>::deserialize(deserializer)?;
            Decimal::from_str_exact(&text).map_err(serde::de::Error::custom)
        } else {
            let bytes = <[u8; 16]>::deserialize(deserializer)?;
            super::decimal_from_bytes(bytes)
                .ok_or_else(|| serde::de::Error::custom("non-canonical decimal bytes"))
        }
    }
}

/// serde adapter for `Option<Decimal>` fields.
pub mod decimal_opt {
    use rust_decimal::Decimal;
    use serde::{Deserialize, Deserializer, Serialize, Serializer};

    #[derive(Serialize, Deserialize)]
    #[serde(transparent)]
    struct Wrapped(#[serde(with = "super::decimal")] Decimal);

    pub fn serialize<S: Serializer>(
        value: &Option<Decimal>,
        serializer: S,
    ) -> Result<S::Ok, S::Error> {
        value.map(Wrapped).serialize(serializer)
    }

    pub fn deserialize<'de, D: Deserializer<'de>>(
        deserializer: D,
    ) -> Result<Option<Decimal>, D::Error> {
        Ok(Option::<Wrapped>::deserialize(deserializer)?.map(|wrapped| wrapped.0))
    }
}
