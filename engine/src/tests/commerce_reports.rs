//! Report queries on one shard, and the merge of two shards' rows.

use super::commerce_support::{initiate, merchant_wallet, pay, pay_now, refund, MERCHANT};
use super::{cur, dec, Harness};
use crate::ledger::transaction::TransactionType;
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::commerce::report::{
    merge_balance_rows, merge_fee_rows, merge_status_rows, merge_transaction_rows, BalanceRow,
    FeeRow, ReportRange, StatusRow, TransactionRow,
};
use crate::Shard;

fn range(h: &Harness) -> ReportRange {
    ReportRange {
        from_ms: h.now_ms - 1000,
        to_ms: h.now_ms,
        business_id: None,
        currency: None,
    }
}

#[test]
fn reports_of_one_shard() {
    let mut h = Harness::new();
    let payer = h.create(1, "USD");
    h.deposit(payer, "500");
    let business = h.create_typed(OwnerType::Business, 9, "USD", WalletType::Primary);
    h.deposit(business, "1");
    let merchant = merchant_wallet(&mut h, MERCHANT, "USD");
    let first = pay_now(&mut h, merchant, payer, "100");
    pay_now(&mut h, merchant, payer, "10");
    pay(&mut h, initiate(merchant, payer, "20", "USD"));
    h.ok(refund(first.uuid, Some("5")));
    let fees = h.shard.fee_report(&range(&h)).unwrap();
    assert_eq!(
        fees,
        [FeeRow {
            currency: cur("USD"),
            total_fees: dec("3.35"),
            count: 2
        }]
    );
    let other_merchant = ReportRange {
        business_id: Some(MERCHANT + 1),
        ..range(&h)
    };
    assert!(h.shard.fee_report(&other_merchant).unwrap().is_empty());
    let before = ReportRange {
        from_ms: 0,
        to_ms: h.now_ms - 1,
        ..range(&h)
    };
    assert!(h.shard.fee_report(&before).unwrap().is_empty());

    let summary = h.shard.balance_summary(None, None);
    assert_eq!(summary.len(), 1);
    // The customer and the merchant; not the business wallet, not the system accounts.
    assert_eq!(summary[0].wallet_count, 2);
    assert_eq!(
        summary[0].total_balance,
        h.balance(payer) + h.balance(merchant)
    );
    assert_eq!(
        h.shard.balance_summary(Some(MERCHANT), None)[0].wallet_count,
        1
    );
    assert!(h.shard.balance_summary(None, Some(cur("EUR"))).is_empty());

    let transactions = h.shard.transaction_report(&range(&h)).unwrap();
    let payment_rows: Vec<(TransactionType, u64)> = transactions
        .iter()
        .map(|row| (row.transaction_type, row.count))
        .collect();
    assert_eq!(
        payment_rows,
        [
            (TransactionType::Deposit, 2),
            (TransactionType::Payment, 4),
            (TransactionType::PaymentRefund, 2),
        ]
    );
    let payments = transactions
        .iter()
        .find(|row| row.transaction_type == TransactionType::Payment)
        .unwrap();
    assert_eq!(payments.total_amount, dec("220.00"));
}

#[test]
fn rows_of_several_shards_merge_by_key() {
    let usd = cur("USD");
    let eur = cur("EUR");
    let fee = |currency, total: &str, count| FeeRow {
        currency,
        total_fees: dec(total),
        count,
    };
    assert_eq!(
        merge_fee_rows([
            vec![fee(usd, "1", 1)],
            vec![fee(eur, "2", 1), fee(usd, "3", 2)]
        ]),
        [fee(eur, "2", 1), fee(usd, "4", 3)]
    );
    let status = |status: u8, total: &str| StatusRow {
        status,
        currency: usd,
        count: 1,
        total_amount: dec(total),
    };
    let merged = merge_status_rows([vec![status(1, "5")], vec![status(1, "6"), status(0, "1")]]);
    assert_eq!(merged.len(), 2);
    assert_eq!((merged[1].count, merged[1].total_amount), (2, dec("11")));
    let balance = |count| BalanceRow {
        currency: usd,
        wallet_count: count,
        total_balance: dec("1"),
        total_held: dec("0"),
        total_pending: dec("0"),
    };
    assert_eq!(
        merge_balance_rows([vec![balance(2)], vec![balance(3)]])[0].wallet_count,
        5
    );
    let transactions = |count| TransactionRow {
        transaction_type: TransactionType::Payment,
        currency: usd,
        count,
        total_amount: dec("2"),
    };
    let merged = merge_transaction_rows([vec![transactions(1)], vec![transactions(4)]]);
    assert_eq!((merged[0].count, merged[0].total_amount), (5, dec("4")));
    // The same query on two empty shards merges to nothing.
    let shards = [Shard::new(0, 2).unwrap(), Shard::new(1, 2).unwrap()];
    let range = ReportRange {
        from_ms: 0,
        to_ms: i64::MAX,
        business_id: None,
        currency: None,
    };
    assert!(merge_fee_rows(shards.iter().map(|s| s.fee_report(&range).unwrap())).is_empty());
}
