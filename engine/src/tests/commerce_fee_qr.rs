//! Fee arithmetic (exact, banker's rounding, capped), the EMVCo CRC and payload, numeric codes.

use proptest::prelude::*;
use rust_decimal::Decimal;

use super::commerce_support::{fee, merchant_wallet, qr, qr_of, MERCHANT};
use super::{cur, dec, Harness};
use crate::values::emvco::{crc16_ccitt_false, merchant_payload, parse, verify, MerchantQr};
use crate::values::fee::{FeeRule, FeeSplit};
use crate::{Currency, Rejection};

fn split(amount: &str, currency: &str, percent: &str, fixed: &str) -> (Decimal, Decimal) {
    let FeeSplit {
        fee_amount,
        net_amount,
    } = fee(percent, fixed)
        .split(
            crate::values::money::validate_amount(dec(amount), cur(currency)).unwrap(),
            cur(currency),
        )
        .unwrap();
    (fee_amount, net_amount)
}

#[test]
fn fee_examples_round_half_to_even_and_cap_at_the_amount() {
    assert_eq!(
        split("100", "USD", "2.5", "0.30"),
        (dec("2.80"), dec("97.20"))
    );
    // 12.5 % of 1.00 = 0.125 -> 0.12 (even); 13.5 % -> 0.135 -> 0.14 (even).
    assert_eq!(split("1", "USD", "12.5", "0"), (dec("0.12"), dec("0.88")));
    assert_eq!(split("1", "USD", "13.5", "0"), (dec("0.14"), dec("0.86")));
    // JPY has no minor unit: 2.5 -> 2, 3.5 -> 4.
    assert_eq!(split("250", "JPY", "1", "0"), (dec("2"), dec("248")));
    assert_eq!(split("350", "JPY", "1", "0"), (dec("4"), dec("346")));
    // KWD has three.
    assert_eq!(split("1", "KWD", "0.05", "0"), (dec("0.000"), dec("1.000")));
    assert_eq!(
        split("10", "KWD", "0.015", "0.001"),
        (dec("0.003"), dec("9.997"))
    );
    // The fixed part alone may exceed a small amount: capped, net zero.
    assert_eq!(
        split("0.10", "USD", "0", "0.30"),
        (dec("0.10"), dec("0.00"))
    );
    assert_eq!(split("5", "USD", "100", "1"), (dec("5.00"), dec("0.00")));
    assert_eq!(split("5", "USD", "0", "0"), (dec("0.00"), dec("5.00")));
    // Scales are the currency's.
    let (fee_amount, net_amount) = split("7", "USD", "3", "0");
    assert_eq!((fee_amount.scale(), net_amount.scale()), (2, 2));
}

#[test]
fn fee_rules_are_validated() {
    let usd = cur("USD");
    for (percent, fixed) in [
        ("100.01", "0"),
        ("-1", "0"),
        ("0.0000001", "0"),
        ("1", "-0.01"),
        ("1", "0.001"),
        ("1", "1000000000000.01"),
    ] {
        assert_eq!(
            fee(percent, fixed).validate(usd).unwrap_err().code(),
            "invalid_request",
            "{percent} {fixed}"
        );
    }
    assert!(fee("100", "1000000000000").validate(usd).is_ok());
    assert!(FeeRule::FREE.validate(cur("JPY")).is_ok());
    assert!(fee("0", "0.5").validate(cur("JPY")).is_err());
}

/// Reference fee in integer minor units: round_half_even(a × p / 10^8) + f, capped at a, where
/// `p` is the percent × 10^6.
fn reference_fee(minor_amount: i128, percent_micro: i128, minor_fixed: i128) -> i128 {
    let numerator = minor_amount * percent_micro;
    let denominator = 100 * 1_000_000;
    let (quotient, remainder) = (numerator / denominator, numerator % denominator);
    let rounded = match (2 * remainder).cmp(&denominator) {
        std::cmp::Ordering::Less => quotient,
        std::cmp::Ordering::Greater => quotient + 1,
        std::cmp::Ordering::Equal => quotient + (quotient % 2),
    };
    (rounded + minor_fixed).min(minor_amount)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 2000, ..ProptestConfig::default() })]

    #[test]
    fn fee_plus_net_is_the_amount_exactly(
        code in prop::sample::select(vec!["USD", "JPY", "KWD", "YER"]),
        minor_amount in 1i64..=100_000_000_000_000,
        percent_micro in 0i64..=100_000_000,
        minor_fixed in 0i64..=100_000,
    ) {
        let currency: Currency = cur(code);
        let scale = currency.minor_units();
        let amount = Decimal::new(minor_amount, scale);
        prop_assume!(amount <= crate::values::money::AMOUNT_MAX);
        let rule = FeeRule {
            percent: Decimal::new(percent_micro, 6),
            fixed: Decimal::new(minor_fixed, scale),
        };
        let FeeSplit { fee_amount, net_amount } = rule.split(amount, currency).unwrap();
        prop_assert_eq!(fee_amount + net_amount, amount);
        prop_assert!(net_amount >= Decimal::ZERO && fee_amount >= Decimal::ZERO);
        prop_assert_eq!((fee_amount.scale(), net_amount.scale()), (scale, scale));
        let expected = reference_fee(
            i128::from(minor_amount),
            i128::from(percent_micro),
            i128::from(minor_fixed),
        );
        prop_assert_eq!(fee_amount.mantissa(), expected);
    }
}

#[test]
fn crc16_ccitt_false_known_vectors() {
    assert_eq!(crc16_ccitt_false(b"123456789"), 0x29B1);
    assert_eq!(crc16_ccitt_false(b""), 0xFFFF);
    // The merchant-presented example of the EMVCo QR specification (UTF-8 bytes), CRC A13A.
    let emvco = "00020101021229300012D156000000000510A93FO3230Q31280012D15600000001030812345678\
                 520441115802CN5914BEST TRANSPORT6007BEIJING64200002ZH0104最佳运输0202北京540523.7\
                 253031565502016233030412340603***0708A60086670902ME91320016A011223344998877070812\
                 3456786304";
    assert_eq!(crc16_ccitt_false(emvco.as_bytes()), 0xA13A);
}

#[test]
fn payload_layout_and_crc() {
    let payload = merchant_payload(&MerchantQr {
        account_number: "000000000012",
        branch_id: 4,
        currency_numeric: 886,
        amount: Some("150.00"),
        merchant_name: "MERCHANT 7",
        reference_label: "QR3",
    })
    .unwrap();
    assert!(payload.starts_with("000201010212"), "{payload}");
    assert!(verify(&payload));
    let objects = parse(&payload).unwrap();
    let ids: Vec<&str> = objects.iter().map(|(id, _)| *id).collect();
    assert_eq!(
        ids,
        ["00", "01", "26", "52", "53", "54", "58", "59", "60", "62", "63"]
    );
    let value = |id: &str| objects.iter().find(|(i, _)| *i == id).unwrap().1;
    assert_eq!(value("53"), "886");
    assert_eq!(value("54"), "150.00");
    assert_eq!(value("58"), "YE");
    assert_eq!(value("26"), "0011com.walletd011200000000001202014");
    let crc = value("63");
    assert_eq!(crc.len(), 4);
    assert!(crc
        .chars()
        .all(|c| c.is_ascii_digit() || c.is_ascii_uppercase()));
    let body = &payload[..payload.len() - 4];
    assert_eq!(format!("{:04X}", crc16_ccitt_false(body.as_bytes())), crc);
    // Any change breaks it.
    let tampered = payload.replacen("150.00", "750.00", 1);
    assert!(!verify(&tampered));
    assert!(!verify(&payload.to_lowercase()));
    assert!(!verify("0002"));

    // Static payload: no amount, point of initiation 11, no branch sub-tag.
    let fixed = merchant_payload(&MerchantQr {
        account_number: "000000000012",
        branch_id: 0,
        currency_numeric: 840,
        amount: None,
        merchant_name: "MERCHANT 7",
        reference_label: "QR4",
    })
    .unwrap();
    assert!(fixed.starts_with("000201010211"));
    assert!(parse(&fixed).unwrap().iter().all(|(id, _)| *id != "54"));
    assert!(verify(&fixed));
}

#[test]
fn currency_numeric_codes() {
    assert_eq!(cur("YER").numeric_code(), 886);
    assert_eq!(cur("USD").numeric_code(), 840);
    assert_eq!(cur("EUR").numeric_code(), 978);
    assert_eq!(cur("SAR").numeric_code(), 682);
    assert_eq!(cur("ALL").numeric_code(), 8);
    let mut codes: Vec<u16> = Currency::all().map(|c| c.numeric_code()).collect();
    assert!(codes.iter().all(|code| (1..1000).contains(code)));
    let count = codes.len();
    codes.sort_unstable();
    codes.dedup();
    assert_eq!(codes.len(), count, "numeric codes are unique");
}

#[test]
fn create_qr_stores_a_verified_payload() {
    let mut h = Harness::new();
    let merchant = merchant_wallet(&mut h, MERCHANT, "YER");
    let dynamic = qr_of(h.ok(qr(merchant, Some("1500"), "YER")));
    assert!(verify(&dynamic.payload));
    assert_eq!(dynamic.amount, Some(dec("1500.00")));
    assert_eq!(dynamic.branch_id, 3, "defaults to the wallet's branch");
    assert_eq!(dynamic.expires_at_ms, h.now_ms + 24 * 60 * 60_000);
    let objects = parse(&dynamic.payload).unwrap();
    assert!(objects.contains(&("54", "1500.00")));
    assert!(objects.contains(&("53", "886")));
    assert!(dynamic.payload.contains(&format!("{:012}", merchant.0)));
    assert_eq!(h.shard.qr_view(dynamic.uuid).unwrap(), dynamic);
    let open = qr_of(h.ok(qr(merchant, None, "YER")));
    assert!(open.payload.starts_with("000201010211"));
    assert_eq!(
        h.reject(qr(merchant, Some("1500"), "USD")),
        Rejection::CurrencyMismatch
    );
    assert_eq!(
        h.reject(qr(merchant, Some("0"), "YER")).code(),
        "invalid_amount"
    );
    // Longer than the 13 characters EMVCo allows for an amount.
    assert_eq!(
        h.reject(qr(merchant, Some("100000000000"), "YER")).code(),
        "invalid_amount"
    );
    let mut long = qr(merchant, None, "YER");
    if let crate::Command::CreateQr(request) = &mut long {
        request.expires_in_minutes = Some(43_201);
    }
    assert_eq!(h.reject(long).code(), "invalid_request");
}
