//! Tests of the views.

mod view_tests {
    #![allow(clippy::unwrap_used)]
    use engine::Currency;
    use hyper::StatusCode;
    use rust_decimal::Decimal;
    use serde::Serialize;
    use serde_json::{json, Value};

    use crate::json::Number;
    use crate::views::{amount, date, envelope, page, parse_date, timestamp, Rendered};

    #[test]
    fn timestamps_and_dates_are_iso_8601_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(timestamp(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(timestamp(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        assert_eq!(parse_date("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_date("2026-02-31"), None);
        assert_eq!(parse_date("2026-1-01"), None);
        assert_eq!(parse_date("1970-01-01"), Some(0));
    }

    #[test]
    fn pages_report_one_based_positions() {
        let p = serde_json::to_value(page(vec![1, 2], 7, 2, 2)).unwrap();
        assert_eq!(p["from"], json!(3));
        assert_eq!(p["to"], json!(4));
        assert_eq!(p["last_page"], json!(4));
        let empty = serde_json::to_value(page(Vec::<u8>::new(), 7, 9, 2)).unwrap();
        assert_eq!(empty["from"], Value::Null);
        assert_eq!(empty["total"], json!(7));
    }

    #[test]
    fn amounts_keep_their_currency_scale_through_the_envelope() {
        let currency = Currency::from_code("YER").unwrap();
        let text = String::from_utf8(
            Rendered::json(
                StatusCode::OK,
                &envelope(
                    json_amount(Decimal::from_str_exact("100.5").unwrap(), currency),
                    None,
                ),
            )
            .body,
        )
        .unwrap();
        assert_eq!(text, r#"{"status":true,"data":{"amount":100.50}}"#);
    }

    #[derive(Serialize)]
    struct AmountOnly {
        amount: Number,
    }

    fn json_amount(value: Decimal, currency: Currency) -> AmountOnly {
        AmountOnly {
            amount: amount(value, currency),
        }
    }

    #[test]
    fn stored_responses_round_trip() {
        let r = Rendered::json(StatusCode::CREATED, &json!({"a": 1}));
        assert_eq!(Rendered::from_stored(&r.to_stored()).unwrap(), r);
        assert!(Rendered::from_stored(&[1]).is_none());
    }
}

mod commerce_tests {
    #![allow(clippy::unwrap_used)]
    use engine::Rejection;
    use hyper::StatusCode;

    use crate::views::{mark_duplicate, payment_refusal, with_payment_uuid, Rendered};

    #[test]
    fn a_replay_flips_only_our_duplicate_flag() {
        let mut rendered = Rendered::json(
            StatusCode::OK,
            &serde_json::json!({"success": true, "data": {"is_duplicate": false,
                "metadata": {"is_duplicate": false}}}),
        );
        mark_duplicate(&mut rendered);
        let text = String::from_utf8(rendered.body).unwrap();
        assert_eq!(
            text,
            r#"{"data":{"is_duplicate":true,"metadata":{"is_duplicate":false}},"success":true}"#
        );
    }

    #[test]
    fn a_refusal_names_its_code_and_the_payment_of_the_path() {
        let mut rendered = payment_refusal(&Rejection::InsufficientFunds);
        assert_eq!(rendered.status, StatusCode::UNPROCESSABLE_ENTITY);
        let uuid: engine::Uuid = "5f0c8a4e-6f7b-4c1d-9a2b-3c4d5e6f7a8b".parse().unwrap();
        with_payment_uuid(&mut rendered, &uuid);
        let value: serde_json::Value = serde_json::from_slice(&rendered.body).unwrap();
        assert_eq!(value["success"], false);
        assert_eq!(value["data"]["error_code"], "insufficient_funds");
        assert_eq!(value["data"]["transaction_id"], uuid.to_string());
        assert_eq!(payment_refusal(&Rejection::NotFound("payment")).status, 404);
    }
}

/// The engine sizes a keyed batch's log records with `ITEM_ANSWER_BYTES` per posted item plus
/// six bytes per text byte (`engine::runtime::batch`): a rendered item, at its largest, stays
/// within that, else a batch could build a record the log refuses.
mod batch_answer_bound {
    #![allow(clippy::unwrap_used)]
    use engine::ledger::transaction::{Direction, TransactionStatus, TransactionType};
    use engine::ledger::view::TransactionView;
    use engine::ledger::wallet::OwnerType;
    use engine::runtime::batch::ITEM_ANSWER_BYTES;
    use engine::shard::command::{BatchAnswer, BatchItemResult, TEXT_BYTES_MAX};
    use engine::{Currency, TransactionId, Uuid, WalletId};
    use rust_decimal::Decimal;

    use crate::views::render_batch;

    fn largest(texts: bool) -> TransactionView {
        // A control character renders as a six-byte JSON escape, the worst case.
        let text = || texts.then(|| "\u{1}".repeat(TEXT_BYTES_MAX));
        let amount = Decimal::from_str_exact("999999999999.99").unwrap();
        TransactionView {
            id: TransactionId(u64::MAX),
            uuid: Uuid([0xff; 16]),
            wallet_id: WalletId(u64::MAX),
            owner_type: OwnerType::Business,
            owner_id: u64::MAX,
            transaction_type: TransactionType::Transfer,
            direction: Direction::Credit,
            status: TransactionStatus::Reversed,
            amount,
            currency: Currency::from_code("YER").unwrap(),
            fee_amount: amount,
            net_amount: amount,
            reference_type: Some("settlement"),
            reference_id: Some(u64::MAX),
            transfer_uuid: Some(Uuid([0xff; 16])),
            reference_uuid: Some(Uuid([0xff; 16])),
            counterparty_wallet_id: Some(WalletId(u64::MAX)),
            external_reference: text(),
            idempotency_key: text(),
            business_id: u64::MAX,
            branch_id: u64::MAX,
            description: text(),
            meta: text(),
            refunded_amount: amount,
            reversed_by_transaction_id: Some(TransactionId(u64::MAX)),
            completed_at_ms: i64::MIN,
            reversed_at_ms: Some(i64::MIN),
            created_at_ms: i64::MIN,
        }
    }

    fn rendered(items: usize, texts: bool) -> usize {
        let answer = BatchAnswer {
            atomic: false,
            items: (0..items)
                .map(|_| BatchItemResult::Posted(Box::new(largest(texts))))
                .collect(),
            failed: None,
        };
        render_batch(&answer).body.len()
    }

    #[test]
    fn a_posted_item_renders_within_the_engines_bound() {
        for texts in [false, true] {
            let bound = ITEM_ANSWER_BYTES + if texts { 6 * 4 * TEXT_BYTES_MAX } else { 0 };
            let one = rendered(1, texts);
            let per_item = rendered(2, texts) - one;
            assert!(per_item <= bound, "{per_item} bytes an item, bound {bound}");
            assert!(one <= bound + 1024, "{one} bytes for one item");
        }
    }
}
