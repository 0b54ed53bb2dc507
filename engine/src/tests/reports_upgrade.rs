//! A history store written before the report aggregates existed (no `reports_complete`): the
//! engine counts them on open from the records, serves reports from them, and `verify_reports`
//! agrees; until then the store refuses report reads rather than answering wrong numbers.

use std::sync::Arc;

use super::runtime_hardening::{deposit, open, wallet, START_MS};
use crate::commerce::payout::DAY_MS;
use crate::ledger::transaction::TransactionType;
use crate::runtime::clock::SeededClock;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::shard::commerce::report::{merge_transaction_rows, ReportKind, ReportRange};

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reports_of_a_store_written_before_aggregates_are_built_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(7, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    for _ in 0..5 {
        engine.execute(deposit(wallet_id, None)).await.unwrap();
    }
    engine.shutdown().unwrap();

    let day = START_MS.div_euclid(DAY_MS);
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    // A store of the release before aggregates: it filed no payments and payouts either.
    store.forget_reports().unwrap();
    store.forget_commerce().unwrap();
    assert!(store
        .report_rows(ReportKind::Transactions, None, None, (day, day))
        .is_err());
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    assert!(engine.history().store().reports_ready().unwrap());
    let range = ReportRange {
        from_ms: (day - 1) * DAY_MS,
        to_ms: (day + 2) * DAY_MS - 1,
        business_id: None,
        currency: None,
    };
    let rows = engine.transaction_report(&range).await.unwrap();
    let deposits = rows
        .iter()
        .find(|row| row.transaction_type == TransactionType::Deposit)
        .unwrap();
    assert_eq!(deposits.count, 5);
    let reference = engine
        .read_all(move |shard| shard.transaction_report(&range).unwrap())
        .await
        .unwrap();
    assert_eq!(rows, merge_transaction_rows(reference));
    assert!(engine.verify_reports().await.unwrap().is_ok());
    // A range that splits a day is refused, not answered approximately.
    let partial = ReportRange {
        to_ms: range.to_ms - 1,
        ..range
    };
    assert!(engine.transaction_report(&partial).await.is_err());
    engine.shutdown().unwrap();
}

/// A store that files payments and payouts but holds no aggregates (an upgrade interrupted
/// after filing them, before counting the aggregates) opens and gets them counted, from the
/// store for what left memory (`engine/tests/history.rs` checks the recount of payments and
/// payouts that left memory against the aggregates).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn aggregates_missing_beside_filed_payments_are_counted_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    engine.execute(deposit(wallet_id, None)).await.unwrap();
    engine.shutdown().unwrap();

    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    assert!(store.commerce_complete().unwrap());
    store.forget_reports().unwrap();
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    assert!(engine.history().store().reports_ready().unwrap());
    assert!(engine.verify_reports().await.unwrap().is_ok());
    engine.shutdown().unwrap();
}
