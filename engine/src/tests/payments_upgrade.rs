//! A history store written before payments and payouts were filed (it has no
//! `commerce_complete`): recovery keeps every one in memory while it replays, files them, and
//! only then lets final ones leave, so none is lost and a refund of an older completed payment
//! still works.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{open, owned_wallet, wallet, START_MS};
use crate::commerce::payment::{PaymentProvider, PaymentStatus};
use crate::ledger::wallet::OwnerType;
use crate::runtime::clock::SeededClock;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::shard::command::{Details, InitiatePayment, MoneyMove, RefundPayment};
use crate::shard::commerce::query::PaymentFilter;
use crate::values::fee::FeeRule;
use crate::{Command, Currency, Outcome, Page, Uuid};

pub(super) async fn pay(
    engine: &crate::runtime::Engine,
    merchant: crate::WalletId,
    payer: crate::WalletId,
) -> Uuid {
    let initiated = engine
        .execute(Command::InitiatePayment(InitiatePayment {
            merchant_id: 7,
            merchant_wallet_id: merchant,
            payer_wallet_id: payer,
            amount: Decimal::from(10),
            currency: Currency::from_code("YER").unwrap(),
            fee: FeeRule::FREE,
            provider: PaymentProvider::Wallet,
            description: None,
            metadata: None,
            idempotency_key: None,
            payment_link_uuid: None,
        }))
        .await
        .unwrap();
    let Outcome::Payment(payment) = initiated else {
        panic!("{initiated:?}")
    };
    payment.uuid
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payments_and_payouts_missing_from_an_older_store_are_filed_from_memory_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let engine = open(dir.path(), &clock);
    let payer = wallet(&engine).await;
    let merchant = owned_wallet(&engine, OwnerType::Merchant, 7, 7).await;
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id: payer,
            amount: Decimal::from(100),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    let completed = pay(&engine, merchant, payer).await;
    engine
        .execute(Command::ConfirmPayment {
            payment_uuid: completed,
        })
        .await
        .unwrap();
    let cancelled = pay(&engine, merchant, payer).await;
    engine
        .execute(Command::CancelPayment {
            payment_uuid: cancelled,
        })
        .await
        .unwrap();
    let pending = pay(&engine, merchant, payer).await;
    let payout = engine
        .execute(Command::CreatePayout(crate::shard::command::CreatePayout {
            wallet_id: payer,
            amount: Decimal::from(1),
            currency: Currency::from_code("YER").unwrap(),
            payout_method: "bank".into(),
            payout_destination: None,
            description: None,
            idempotency_key: None,
            created_by: 1,
        }))
        .await
        .unwrap();
    let Outcome::Payout(payout) = payout else {
        panic!("{payout:?}")
    };
    engine
        .execute(Command::CancelPayout {
            payout_id: payout.id,
            by: 1,
        })
        .await
        .unwrap();
    let listed = |engine: &crate::runtime::Engine| {
        let engine = engine.clone();
        async move {
            engine
                .read_wallet(merchant, move |s| {
                    s.payments_page(&PaymentFilter::default(), Page::default())
                        .unwrap()
                })
                .await
                .unwrap()
        }
    };
    let before = listed(&engine).await;
    assert_eq!(before.total, 3);
    engine.shutdown().unwrap();

    // Make it look like a store of the previous release: every record filed, no payment.
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    store.forget_commerce().unwrap();
    store.forget_reports().unwrap();
    assert_eq!(store.payment(completed).unwrap(), None);
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    let store = engine.history().store();
    assert!(store.commerce_complete().unwrap(), "marked once filed");
    for uuid in [completed, cancelled, pending] {
        assert!(store.payment(uuid).unwrap().is_some(), "{uuid} filed");
    }
    assert_eq!(listed(&engine).await, before, "no payment lost");
    assert!(store.payout(payout.id).unwrap().is_some(), "payout filed");
    engine.evict_filed().await.unwrap();
    let held: usize = engine
        .read_all(|s| s.payments_in_memory())
        .await
        .unwrap()
        .into_iter()
        .sum();
    assert_eq!(held, 1, "only the pending payment stays in memory");
    let payouts: usize = engine
        .read_all(|s| s.payouts_in_memory())
        .await
        .unwrap()
        .into_iter()
        .sum();
    assert_eq!(payouts, 0, "the cancelled payout left memory");
    let refunded = engine
        .execute(Command::RefundPayment(RefundPayment {
            payment_uuid: completed,
            amount: None,
            reason: None,
        }))
        .await
        .unwrap();
    let Outcome::Payment(refunded) = refunded else {
        panic!("{refunded:?}")
    };
    assert_eq!(refunded.status, PaymentStatus::Refunded);
    engine.shutdown().unwrap();
}
