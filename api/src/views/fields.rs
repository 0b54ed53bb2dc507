//! Formatting of values every view shares: exact amounts at their currency's scale, ISO 8601
//! UTC timestamps and dates, client JSON passed through.

use engine::values::money::to_currency_scale;
use engine::Currency;
use rust_decimal::Decimal;
use serde_json::{Map, Value};

use crate::json::Number;
use serde_json::value::RawValue;

/// An exact amount at the currency's scale.
pub fn amount(value: Decimal, currency: Currency) -> Number {
    Number(to_currency_scale(value, currency))
}

/// ISO 8601 UTC with milliseconds, from unix milliseconds (proleptic Gregorian, no leap seconds).
pub fn timestamp(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        // Outside four-digit years: the general (slower) path, same layout.
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            in_day / 3_600_000,
            in_day / 60_000 % 60,
            in_day / 1000 % 60,
            in_day % 1000
        );
    }
    // Digits by hand: two timestamps are in every response, and `format!` was ~1% of the
    // server's CPU under load.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: i64| {
        for i in (at..at + width).rev() {
            if let Some(slot) = out.get_mut(i) {
                // 0..=9 after the remainder, so the cast cannot truncate.
                *slot = b'0' + (value % 10) as u8;
            }
            value /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, i64::from(month));
    put(8, 2, i64::from(day));
    put(11, 2, in_day / 3_600_000);
    put(14, 2, in_day / 60_000 % 60);
    put(17, 2, in_day / 1000 % 60);
    put(20, 3, in_day % 1000);
    String::from_utf8_lossy(&out).into_owned()
}

/// The date (YYYY-MM-DD) of unix milliseconds.
pub fn date(ms: i64) -> String {
    let (year, month, day) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{year:04}-{month:02}-{day:02}")
}

/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix milliseconds of the start of a YYYY-MM-DD date (UTC), if it is one.
pub fn parse_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let year: i64 = text.get(0..4)?.parse().ok()?;
    let month: i64 = text.get(5..7)?.parse().ok()?;
    let day: i64 = text.get(8..10)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // days_from_civil
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // Reject dates like 2026-02-31 by round-tripping.
    (date(days * 86_400_000) == text).then_some(days * 86_400_000)
}

pub(crate) fn meta_value(meta: Option<&str>) -> Value {
    meta.and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| Value::Object(Map::new()))
}

// Responses are typed structs serialized straight to bytes: a `serde_json::Value` would turn
// the exact decimal amounts into binary floats (serde_json keeps numbers as f64 without the
// graph-wide `arbitrary_precision` feature), so `json!` is never used where an amount appears.

/// Client JSON text as a raw JSON value; `None` when absent (or, defensively, not JSON).
pub(crate) fn raw_json(text: Option<&str>) -> Option<Box<RawValue>> {
    text.and_then(|text| RawValue::from_string(text.to_owned()).ok())
}

/// Replaces the first occurrence of `from` by `to` in `body`, if any.
pub(crate) fn splice_first(body: &mut Vec<u8>, from: &[u8], to: &[u8]) {
    if let Some(at) = body.windows(from.len()).position(|window| window == from) {
        body.splice(at..at + from.len(), to.iter().copied());
    }
}
