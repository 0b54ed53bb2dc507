//! Payment links and QR payloads leave memory once filed (issue 14, item 1; ARCHITECTURE.md
//! invariant 10): they are read back from the store when asked for (a view, a payment on the
//! link), and a link's one change (used by a completed payment) recalls it into memory until
//! that change is filed too. A store written before they were filed gets the shards' on open.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{open, START_MS};
use super::settlements_store::{shop, Shop};
use crate::commerce::payment::{PaymentLinkStatus, PaymentProvider};
use crate::commerce::view::{PaymentLinkView, QrView};
use crate::runtime::clock::SeededClock;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::runtime::{Engine, EngineError};
use crate::shard::command::{CreatePaymentLink, CreateQr, InitiatePayment};
use crate::values::fee::FeeRule;
use crate::{Command, Currency, Outcome, Rejection, Uuid};

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

async fn created(engine: &Engine, shop: &Shop) -> (PaymentLinkView, QrView) {
    let link = engine
        .execute(Command::CreatePaymentLink(CreatePaymentLink {
            merchant_wallet_id: shop.merchant,
            amount: Decimal::from(10),
            currency: yer(),
            description: Some("invoice 9".into()),
            expires_in_minutes: Some(60),
        }))
        .await
        .unwrap();
    let Outcome::PaymentLink(link) = link else {
        panic!("{link:?}")
    };
    let qr = engine
        .execute(Command::CreateQr(CreateQr {
            merchant_wallet_id: shop.merchant,
            amount: None,
            currency: yer(),
            branch_id: None,
            expires_in_minutes: None,
        }))
        .await
        .unwrap();
    let Outcome::Qr(qr) = qr else {
        panic!("{qr:?}")
    };
    (link, qr)
}

/// Initiates a payment of 10 on `link` and confirms it.
async fn pay_on(engine: &Engine, shop: &Shop, link: Uuid) -> Result<(), Rejection> {
    let initiated = engine
        .execute(Command::InitiatePayment(InitiatePayment {
            merchant_id: 7,
            merchant_wallet_id: shop.merchant,
            payer_wallet_id: shop.payer,
            amount: Decimal::from(10),
            currency: yer(),
            fee: FeeRule::FREE,
            provider: PaymentProvider::Wallet,
            description: None,
            metadata: None,
            idempotency_key: None,
            payment_link_uuid: Some(link),
        }))
        .await;
    let payment_uuid = match initiated {
        Ok(Outcome::Payment(payment)) => payment.uuid,
        Err(EngineError::Rejected(rejection)) => return Err(rejection),
        other => panic!("{other:?}"),
    };
    engine
        .execute(Command::ConfirmPayment { payment_uuid })
        .await
        .unwrap();
    Ok(())
}

/// Payment links and QR payloads in the shards' memory once everything executed so far is
/// filed and evicted.
async fn in_memory(engine: &Engine) -> usize {
    engine.evict_filed().await.unwrap();
    engine
        .read_all(|s| s.links_in_memory())
        .await
        .unwrap()
        .into_iter()
        .sum()
}

async fn views(engine: &Engine, shop: &Shop, link: Uuid, qr: Uuid) -> (PaymentLinkView, QrView) {
    let now_ms = START_MS;
    engine
        .read_wallet(shop.merchant, move |s| {
            (
                s.payment_link_view(link, now_ms).unwrap(),
                s.qr_view(qr).unwrap(),
            )
        })
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_and_qr_payloads_leave_memory_once_filed_and_a_used_link_is_recalled() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let shop = shop(&engine).await;
    let (link, qr) = created(&engine, &shop).await;
    assert_eq!(in_memory(&engine).await, 0, "both left memory once filed");
    let (shown_link, shown_qr) = views(&engine, &shop, link.uuid, qr.uuid).await;
    assert_eq!(shown_qr, qr, "the QR payload, from the store");
    assert_eq!(shown_link.status, PaymentLinkStatus::Active);

    // Paying on the link reads it from the store; completing recalls it to mark it used.
    pay_on(&engine, &shop, link.uuid).await.unwrap();
    assert_eq!(in_memory(&engine).await, 0, "the used link left again");
    let (used, _) = views(&engine, &shop, link.uuid, qr.uuid).await;
    assert_eq!(used.status, PaymentLinkStatus::Used);
    assert!(used.used_by_payment_uuid.is_some());
    assert_eq!(
        pay_on(&engine, &shop, link.uuid).await,
        Err(Rejection::InvalidState("payment link already used")),
        "a used link that left memory is still used"
    );
    engine.check_invariants().await.unwrap();

    engine.shutdown().unwrap();
    let engine = open(dir.path(), &clock);
    assert_eq!(in_memory(&engine).await, 0);
    assert_eq!(
        views(&engine, &shop, link.uuid, qr.uuid).await,
        (used, qr),
        "the same after a restart"
    );
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn links_missing_from_an_older_store_are_filed_from_memory_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let shop = shop(&engine).await;
    let (link, qr) = created(&engine, &shop).await;
    let (used, _) = created(&engine, &shop).await;
    pay_on(&engine, &shop, used.uuid).await.unwrap();
    let before = (
        views(&engine, &shop, link.uuid, qr.uuid).await,
        views(&engine, &shop, used.uuid, qr.uuid).await,
    );
    engine.shutdown().unwrap();

    // A store of the previous release: every record filed but no link and no QR payload.
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    store.forget_links().unwrap();
    assert!(!store.commerce_complete().unwrap());
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    let store = engine.history().store();
    assert!(store.commerce_complete().unwrap(), "marked once filed");
    assert!(store.payment_link(used.uuid).unwrap().is_some());
    assert_eq!(in_memory(&engine).await, 0);
    let after = (
        views(&engine, &shop, link.uuid, qr.uuid).await,
        views(&engine, &shop, used.uuid, qr.uuid).await,
    );
    assert_eq!(
        after, before,
        "no link or QR payload lost, the used one still used"
    );
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}
