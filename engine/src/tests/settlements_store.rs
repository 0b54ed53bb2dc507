//! Settlements leave memory once final and filed (issue 14, item 1; ARCHITECTURE.md invariant
//! 10): an executed settlement's claims on its payment credits leave the shard's
//! settled-transaction index with it and are kept by the store, which the next settlement's
//! decision reads, so a payment is never settled twice; the settlement itself is read back from
//! the store (by id, in the list, by a transition that is refused because it is final). A store
//! written before settlements were filed gets the shards' on its first open.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::commerce_support::{approve_settlement, create_settlement, day_of, CHECKER, MAKER};
use super::payments_upgrade::pay;
use super::runtime_hardening::{open, owned_wallet, wallet, START_MS};
use crate::commerce::payout::{SettlementStatus, DAY_MS};
use crate::ledger::wallet::OwnerType;
use crate::runtime::clock::SeededClock;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::runtime::{Engine, EngineError};
use crate::shard::command::{Details, MoneyMove, Page};
use crate::shard::commerce::query::SettlementFilter;
use crate::{Command, Outcome, Rejection, SettlementId, WalletId};

/// A funded payer and a merchant wallet (merchant 7), YER.
pub(super) struct Shop {
    pub(super) merchant: WalletId,
    pub(super) payer: WalletId,
}

pub(super) async fn shop(engine: &Engine) -> Shop {
    let payer = wallet(engine).await;
    let merchant = owned_wallet(engine, OwnerType::Merchant, 7, 7).await;
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id: payer,
            amount: Decimal::from(1_000),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    Shop { merchant, payer }
}

/// A completed payment of 10 from the payer to the merchant.
async fn paid(engine: &Engine, shop: &Shop) {
    let payment_uuid = pay(engine, shop.merchant, shop.payer).await;
    engine
        .execute(Command::ConfirmPayment { payment_uuid })
        .await
        .unwrap();
}

/// Settles the merchant's unsettled payment credits of the days around the clock's start:
/// the settlement's id and its item count.
async fn settle(engine: &Engine, merchant: WalletId) -> Result<(SettlementId, usize), Rejection> {
    let day = day_of(START_MS);
    settle_days(engine, merchant, (day - DAY_MS, day + DAY_MS)).await
}

/// Settles the merchant's unsettled payment credits of the days `first..=last` (day starts).
async fn settle_days(
    engine: &Engine,
    merchant: WalletId,
    (first, last): (i64, i64),
) -> Result<(SettlementId, usize), Rejection> {
    match engine
        .execute(create_settlement(merchant, first, last))
        .await
    {
        Ok(Outcome::Settlement(view)) => Ok((view.id, view.items.len())),
        Ok(other) => panic!("not a settlement: {other:?}"),
        Err(EngineError::Rejected(rejection)) => Err(rejection),
        Err(error) => panic!("{error}"),
    }
}

async fn execute(engine: &Engine, settlement_id: SettlementId) {
    engine
        .execute(approve_settlement(settlement_id, CHECKER))
        .await
        .unwrap();
    engine
        .execute(Command::ExecuteSettlement {
            settlement_id,
            by: CHECKER,
        })
        .await
        .unwrap();
}

/// (settlements, settled-transaction index entries) in the shards' memory, once everything
/// executed so far is filed and evicted.
async fn in_memory(engine: &Engine) -> (usize, usize) {
    engine.evict_filed().await.unwrap();
    let counts = engine
        .read_all(|s| (s.settlements_in_memory(), s.settled_in_memory()))
        .await
        .unwrap();
    counts
        .into_iter()
        .fold((0, 0), |(a, b), (c, d)| (a + c, b + d))
}

async fn status(engine: &Engine, id: SettlementId) -> SettlementStatus {
    let shard = crate::values::ids::shard_of(id.0, engine.shard_count());
    engine
        .read_shard(shard, move |s| s.settlement_view(id))
        .await
        .unwrap()
        .unwrap()
        .status
}

async fn listed(engine: &Engine) -> Vec<(SettlementId, SettlementStatus)> {
    let paged = engine
        .settlements_page(SettlementFilter::default(), Page::default())
        .await
        .unwrap();
    assert_eq!(paged.total as usize, paged.records.len());
    paged
        .records
        .iter()
        .map(|view| (view.id, view.status))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_settlements_leave_memory_and_their_claims_are_kept_by_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let shop = shop(&engine).await;
    for _ in 0..3 {
        paid(&engine, &shop).await;
    }
    // Rejected: claims nothing, so the next settlement takes the same three credits.
    let (rejected, items) = settle(&engine, shop.merchant).await.unwrap();
    assert_eq!(items, 3);
    engine
        .execute(Command::RejectSettlement {
            settlement_id: rejected,
            by: CHECKER,
            reason: "wrong period".into(),
        })
        .await
        .unwrap();
    let (executed, items) = settle(&engine, shop.merchant).await.unwrap();
    assert_eq!(items, 3, "a rejected settlement frees its items");
    execute(&engine, executed).await;
    assert_eq!(
        in_memory(&engine).await,
        (0, 0),
        "final settlements and their claims left memory"
    );

    // The claims now come from the store: nothing left to settle, then only the new credit.
    assert_eq!(
        settle(&engine, shop.merchant).await,
        Err(Rejection::NothingToSettle)
    );
    paid(&engine, &shop).await;
    let (pending, items) = settle(&engine, shop.merchant).await.unwrap();
    assert_eq!(items, 1, "only the credit no executed settlement claimed");
    assert_eq!(in_memory(&engine).await, (1, 1), "a pending one stays hot");

    // Read back from the store: by id, in the list, and a transition refused as before.
    assert_eq!(status(&engine, executed).await, SettlementStatus::Executed);
    assert_eq!(status(&engine, rejected).await, SettlementStatus::Rejected);
    let expected = vec![
        (pending, SettlementStatus::Pending),
        (executed, SettlementStatus::Executed),
        (rejected, SettlementStatus::Rejected),
    ];
    assert_eq!(listed(&engine).await, expected);
    let refused = engine
        .execute(Command::CancelSettlement {
            settlement_id: executed,
            by: MAKER,
        })
        .await;
    assert!(
        matches!(
            refused,
            Err(EngineError::Rejected(Rejection::InvalidState(_)))
        ),
        "{refused:?}"
    );

    // After a restart: the same answers, only the pending settlement in memory.
    engine.shutdown().unwrap();
    let engine = open(dir.path(), &clock);
    assert_eq!(in_memory(&engine).await, (1, 1));
    assert_eq!(listed(&engine).await, expected);
    engine
        .execute(approve_settlement(pending, CHECKER))
        .await
        .unwrap();
    engine
        .execute(Command::CancelSettlement {
            settlement_id: pending,
            by: MAKER,
        })
        .await
        .unwrap();
    let (last, items) = settle(&engine, shop.merchant).await.unwrap();
    assert_eq!(
        items, 1,
        "the cancelled settlement's credit, not the executed ones"
    );
    execute(&engine, last).await;
    assert_eq!(in_memory(&engine).await, (0, 0));
    engine.check_invariants().await.unwrap();

    // `replay --verify` checks the claims: all there, then one removed is named.
    let store = engine.history().store();
    assert_eq!(store.verify_settled_items().unwrap(), Ok(4));
    let executed_view = engine
        .read_shard(0, move |s| s.settlement_view(executed))
        .await
        .unwrap()
        .unwrap();
    let lost = executed_view.items[0].transaction_id;
    store.forget_claim(lost).unwrap();
    let named = store.verify_settled_items().unwrap().unwrap_err();
    assert!(named.contains(&lost.0.to_string()), "{named}");
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn settlements_missing_from_an_older_store_are_filed_from_memory_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let shop = shop(&engine).await;
    for _ in 0..2 {
        paid(&engine, &shop).await;
    }
    let (executed, _) = settle(&engine, shop.merchant).await.unwrap();
    execute(&engine, executed).await;
    paid(&engine, &shop).await;
    let (pending, _) = settle(&engine, shop.merchant).await.unwrap();
    let before = listed(&engine).await;
    engine.shutdown().unwrap();

    // A store of the previous release: every record filed but no settlement and no claim.
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    store.forget_settlements().unwrap();
    assert!(!store.commerce_complete().unwrap());
    assert_eq!(store.settlement(executed).unwrap(), None);
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    let store = engine.history().store();
    assert!(store.commerce_complete().unwrap(), "marked once filed");
    assert!(store.settlement(pending).unwrap().is_some());
    assert_eq!(listed(&engine).await, before, "no settlement lost");
    assert_eq!(
        in_memory(&engine).await,
        (1, 1),
        "the executed one left memory"
    );
    assert_eq!(
        settle(&engine, shop.merchant).await,
        Err(Rejection::NothingToSettle),
        "the executed settlement's claims were filed with it"
    );
    engine.shutdown().unwrap();
}

/// A settlement reads its period's credits through the store's date index, not the merchant
/// wallet's whole history: with credits on three days, all filed and out of memory, each
/// period gets exactly its own days' credits.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_settlement_gathers_only_its_periods_credits_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let shop = shop(&engine).await;
    let day = day_of(START_MS);
    paid(&engine, &shop).await;
    clock.advance_ms(DAY_MS);
    paid(&engine, &shop).await;
    paid(&engine, &shop).await;
    clock.advance_ms(DAY_MS);
    paid(&engine, &shop).await;
    in_memory(&engine).await;
    let held: usize = engine
        .read_all(|s| s.wallets().map(|w| w.transactions().len()).sum::<usize>())
        .await
        .unwrap()
        .into_iter()
        .sum();
    assert_eq!(held, 0, "every credit is read from the store");

    let middle = (day + DAY_MS, day + DAY_MS);
    assert_eq!(
        settle_days(&engine, shop.merchant, middle).await.unwrap().1,
        2
    );
    let (_, items) = settle_days(&engine, shop.merchant, (day, day + 2 * DAY_MS))
        .await
        .unwrap();
    assert_eq!(
        items, 2,
        "the first and last days' credits; the middle ones are claimed"
    );
    let later = (day + 3 * DAY_MS, day + 9 * DAY_MS);
    assert_eq!(
        settle_days(&engine, shop.merchant, later).await,
        Err(Rejection::NothingToSettle)
    );
    engine.shutdown().unwrap();
}
