//! EMVCo merchant-presented QR payloads (EMV QRCPS, "Merchant-Presented Mode") and their CRC.
//!
//! A payload is a run of TLV data objects, each `ID (2 digits) · length (2 digits) · value`, in
//! this order here:
//!
//! | ID | value |
//! |----|-------|
//! | 00 | payload format indicator `01` (so every payload begins `000201`) |
//! | 01 | point of initiation: `11` static (no amount), `12` dynamic (amount given) |
//! | 26 | merchant account information template: `00` globally unique id [`GUID`], `01` wallet account number, `02` branch id (when given) |
//! | 52 | merchant category code `0000` (placeholder) |
//! | 53 | transaction currency, ISO 4217 numeric, 3 digits |
//! | 54 | transaction amount at the currency's scale (only when given; at most 13 characters) |
//! | 58 | country code `YE` |
//! | 59 | merchant name (placeholder `MERCHANT {business id}`) |
//! | 60 | merchant city (placeholder [`MERCHANT_CITY`]) |
//! | 62 | additional data template: `05` reference label (`QR{id}`) |
//! | 63 | CRC: `6304` then 4 upper-case hex digits of CRC-16/CCITT-FALSE over every byte before them, `6304` included |
//!
//! CRC-16/CCITT-FALSE: polynomial 0x1021, initial value 0xFFFF, no reflection, no final XOR; its
//! check value (CRC of the ASCII string `123456789`) is 0x29B1.

use crate::values::error::Rejection;

/// Globally unique id of the merchant account template (reverse domain name, EMVCo style).
pub const GUID: &str = "com.walletd";
/// Country of the service.
pub const COUNTRY_CODE: &str = "YE";
/// Placeholder merchant city (the directory keeps no addresses).
pub const MERCHANT_CITY: &str = "SANAA";
/// Longest amount field (tag 54) EMVCo allows.
pub const AMOUNT_CHARS_MAX: usize = 13;

/// CRC-16/CCITT-FALSE of `bytes` (see the module docs).
#[must_use]
pub fn crc16_ccitt_false(bytes: &[u8]) -> u16 {
    let mut crc: u16 = 0xFFFF;
    for byte in bytes {
        crc ^= u16::from(*byte) << 8;
        for _ in 0..8 {
            crc = if crc & 0x8000 != 0 {
                (crc << 1) ^ 0x1021
            } else {
                crc << 1
            };
        }
    }
    crc
}

/// What goes into one merchant payload.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MerchantQr<'a> {
    pub account_number: &'a str,
    /// 0 = no branch.
    pub branch_id: u64,
    pub currency_numeric: u16,
    /// The amount already formatted at the currency's scale ("10.50"), when the payload fixes it.
    pub amount: Option<&'a str>,
    pub merchant_name: &'a str,
    pub reference_label: &'a str,
}

fn push_tlv(out: &mut String, id: &str, value: &str) -> Result<(), Rejection> {
    if value.is_empty() || value.len() > 99 || !value.is_ascii() {
        return Err(Rejection::InvalidRequest(
            "QR field must be 1 to 99 ASCII characters",
        ));
    }
    out.push_str(id);
    out.push_str(&format!("{:02}", value.len()));
    out.push_str(value);
    Ok(())
}

/// Builds the payload (layout in the module docs).
pub fn merchant_payload(qr: &MerchantQr<'_>) -> Result<String, Rejection> {
    let mut account = String::new();
    push_tlv(&mut account, "00", GUID)?;
    push_tlv(&mut account, "01", qr.account_number)?;
    if qr.branch_id != 0 {
        push_tlv(&mut account, "02", &qr.branch_id.to_string())?;
    }
    let mut additional = String::new();
    push_tlv(&mut additional, "05", qr.reference_label)?;

    let mut out = String::with_capacity(160);
    push_tlv(&mut out, "00", "01")?;
    push_tlv(
        &mut out,
        "01",
        if qr.amount.is_some() { "12" } else { "11" },
    )?;
    push_tlv(&mut out, "26", &account)?;
    push_tlv(&mut out, "52", "0000")?;
    push_tlv(&mut out, "53", &format!("{:03}", qr.currency_numeric))?;
    if let Some(amount) = qr.amount {
        if amount.len() > AMOUNT_CHARS_MAX {
            return Err(Rejection::InvalidAmount(
                "amount too long for a QR payload (13 characters)",
            ));
        }
        push_tlv(&mut out, "54", amount)?;
    }
    push_tlv(&mut out, "58", COUNTRY_CODE)?;
    push_tlv(&mut out, "59", qr.merchant_name)?;
    push_tlv(&mut out, "60", MERCHANT_CITY)?;
    push_tlv(&mut out, "62", &additional)?;
    out.push_str("6304");
    let crc = crc16_ccitt_false(out.as_bytes());
    out.push_str(&format!("{crc:04X}"));
    Ok(out)
}

/// Whether `payload` is a well-formed merchant payload: begins `000201`, parses as TLVs, ends with
/// a `63` CRC object whose value is the CRC of everything before it.
#[must_use]
pub fn verify(payload: &str) -> bool {
    if !payload.is_ascii() || !payload.starts_with("000201") || payload.len() < 8 {
        return false;
    }
    let (body, crc_text) = payload.split_at(payload.len() - 4);
    let crc_ok = u16::from_str_radix(crc_text, 16).is_ok_and(|crc| {
        crc_text.bytes().all(|b| !b.is_ascii_lowercase())
            && crc == crc16_ccitt_false(body.as_bytes())
    });
    crc_ok
        && parse(payload).is_some_and(|objects| objects.last().is_some_and(|(id, _)| *id == "63"))
}

/// Splits a payload into its top-level `(id, value)` objects; `None` if it does not parse.
#[must_use]
pub fn parse(payload: &str) -> Option<Vec<(&str, &str)>> {
    let mut objects = Vec::new();
    let mut rest = payload;
    while !rest.is_empty() {
        let id = rest.get(..2)?;
        let length: usize = rest.get(2..4)?.parse().ok()?;
        let value = rest.get(4..4 + length)?;
        objects.push((id, value));
        rest = rest.get(4 + length..)?;
    }
    Some(objects)
}
