//! The engine routes commerce commands to their shards and runs cross-shard payments: confirm and
//! refund between wallets of different shards move the same money as on one shard, a repeat
//! confirm is refused, and recovery finishes a payment step a crash interrupted.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use engine::commerce::payment::PaymentStatus;
use engine::ledger::wallet::OwnerType;
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, IdempotencyKey, Renderer};
use engine::shard::command::{CreatePayout, Details, MoneyMove, PaymentReserve, RefundPayment};
use engine::values::fee::FeeRule;
use engine::{Command, Outcome, Rejection, Uuid, WalletId};
use rust_decimal::Decimal;

mod common;
use common::{amount, config, wallet, yer};

struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        match result {
            Ok(Outcome::Payment(p)) => format!("{route}:ok:{}:{}", p.uuid, p.status.as_str()),
            Ok(other) => format!("{route}:ok:{other:?}"),
            Err(rejection) => format!("{route}:err:{}", rejection.code()),
        }
        .into_bytes()
    }
}

fn open(dir: &std::path::Path, shards: u32, seed: u64) -> Engine {
    common::open(dir, shards, seed, Arc::new(DebugRenderer))
}

async fn balance(engine: &Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

/// A merchant wallet (merchant 7) and a funded payer on another shard of a 4-shard engine.
async fn merchant_and_remote_payer(engine: &Engine) -> (WalletId, WalletId) {
    let merchant = wallet(engine, OwnerType::Merchant, 7, 7).await;
    let mut owner = 100;
    let payer = loop {
        owner += 1;
        let payer = wallet(engine, OwnerType::Customer, owner, 1).await;
        if engine.shard_of_wallet(payer) != engine.shard_of_wallet(merchant) {
            break payer;
        }
    };
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id: payer,
            amount: amount("500.00"),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    (merchant, payer)
}

async fn initiate(engine: &Engine, merchant: WalletId, payer: WalletId, value: &str) -> Uuid {
    let fee = FeeRule {
        percent: amount("2.5"),
        fixed: amount("1"),
    };
    common::initiate(engine, merchant, payer, value, fee).await
}

fn status(outcome: &Outcome) -> PaymentStatus {
    match outcome {
        Outcome::Payment(payment) => payment.status,
        other => panic!("{other:?}"),
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cross_shard_confirm_and_refund_move_money_once() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 4, 1);
    let (merchant, payer) = merchant_and_remote_payer(&engine).await;
    let payment = initiate(&engine, merchant, payer, "100.00").await;

    let confirmed = engine
        .execute(Command::ConfirmPayment {
            payment_uuid: payment,
        })
        .await
        .unwrap();
    assert_eq!(status(&confirmed), PaymentStatus::Completed);
    assert_eq!(balance(&engine, payer).await, amount("400.00"));
    // fee = 2.5 % of 100.00 + 1 = 3.50.
    assert_eq!(balance(&engine, merchant).await, amount("96.50"));

    // A second confirm is refused and moves nothing.
    let again = engine
        .execute(Command::ConfirmPayment {
            payment_uuid: payment,
        })
        .await
        .unwrap_err();
    assert!(again.to_string().contains("not pending"), "{again}");
    assert_eq!(balance(&engine, payer).await, amount("400.00"));

    let refund = |value: &str| {
        Command::RefundPayment(RefundPayment {
            payment_uuid: payment,
            amount: Some(amount(value)),
            reason: None,
        })
    };
    let partial = engine.execute(refund("30.00")).await.unwrap();
    assert_eq!(status(&partial), PaymentStatus::PartiallyRefunded);
    assert_eq!(balance(&engine, payer).await, amount("430.00"));
    assert_eq!(balance(&engine, merchant).await, amount("66.50"));
    let over = engine.execute(refund("70.01")).await.unwrap_err();
    assert!(over.to_string().contains("exceed"), "{over}");
    // The merchant kept the fee's worth less: refunding the rest needs its spendable to cover it.
    let short = engine.execute(refund("70.00")).await.unwrap_err();
    assert!(short.to_string().contains("insufficient"), "{short}");
    assert_eq!(balance(&engine, payer).await, amount("430.00"));
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id: merchant,
            amount: amount("10.00"),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    let rest = engine.execute(refund("70.00")).await.unwrap();
    assert_eq!(status(&rest), PaymentStatus::Refunded);
    assert_eq!(balance(&engine, payer).await, amount("500.00"));
    assert_eq!(balance(&engine, merchant).await, amount("6.50"));
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_cross_shard_confirm_replays_its_answer_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 4, 2);
    let (merchant, payer) = merchant_and_remote_payer(&engine).await;
    let payment = initiate(&engine, merchant, payer, "10.00").await;
    let key = || IdempotencyKey {
        caller: "customer:1".into(),
        key: "confirm-1".into(),
        fingerprint: [7; 32],
        legacy: None,
        route: 3,
    };
    let confirm = || Command::ConfirmPayment {
        payment_uuid: payment,
    };
    let first = engine.execute_idempotent(confirm(), key()).await.unwrap();
    assert!(!first.replayed);
    let text = String::from_utf8(first.response.clone()).unwrap();
    assert_eq!(text, format!("3:ok:{payment}:completed"));
    engine.shutdown().unwrap();

    let engine = open(dir.path(), 4, 3);
    let again = engine.execute_idempotent(confirm(), key()).await.unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, first.response);
    assert_eq!(balance(&engine, payer).await, amount("490.00"));
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_finishes_a_cross_shard_confirm_interrupted_after_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 4, 4);
    let (merchant, payer) = merchant_and_remote_payer(&engine).await;
    let payment = initiate(&engine, merchant, payer, "40.00").await;
    let view = engine
        .read_wallet(merchant, move |s| s.payment_view(payment).unwrap())
        .await
        .unwrap();
    // The crash: step 1 is durable, steps 2 and 3 never ran.
    engine
        .execute(Command::PaymentReserve(PaymentReserve::for_payment(&view)))
        .await
        .unwrap();
    assert_eq!(balance(&engine, payer).await, amount("460.00"));
    assert_eq!(balance(&engine, merchant).await, amount("0"));
    engine.shutdown().unwrap();

    let clock = Arc::new(SeededClock::new(5, 1_700_000_100_000));
    let (engine, report) =
        Engine::open(config(dir.path(), 4), clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.payment_moves_completed, 1);
    // fee = 2.5 % of 40.00 + 1 = 2.00.
    assert_eq!(balance(&engine, merchant).await, amount("38.00"));
    assert_eq!(balance(&engine, payer).await, amount("460.00"));
    let status = engine
        .read_wallet(merchant, move |s| s.payment_view(payment).unwrap().status)
        .await
        .unwrap();
    assert_eq!(status, PaymentStatus::Completed);
    let pending: usize = engine
        .read_all(|s| s.pending_payment_reservations().len())
        .await
        .unwrap()
        .iter()
        .sum();
    assert_eq!(pending, 0);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn payouts_are_routed_by_their_id_to_their_wallet_shard() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 4, 6);
    let (_, payer) = merchant_and_remote_payer(&engine).await;
    let created = engine
        .execute(Command::CreatePayout(CreatePayout {
            wallet_id: payer,
            amount: amount("50.00"),
            currency: yer(),
            payout_method: "bank".into(),
            payout_destination: None,
            description: None,
            idempotency_key: None,
            created_by: 11,
        }))
        .await
        .unwrap();
    let Outcome::Payout(payout) = created else {
        panic!("{created:?}")
    };
    assert_eq!(
        engine::values::ids::shard_of(payout.id.0, 4),
        engine.shard_of_wallet(payer)
    );
    let four_eyes = engine
        .execute(Command::ApprovePayout {
            payout_id: payout.id,
            by: 11,
            notes: None,
        })
        .await
        .unwrap_err();
    assert!(four_eyes.to_string().contains("four"), "{four_eyes}");
    for command in [
        Command::ApprovePayout {
            payout_id: payout.id,
            by: 12,
            notes: None,
        },
        Command::ExecutePayout {
            payout_id: payout.id,
            by: 13,
        },
    ] {
        engine.execute(command).await.unwrap();
    }
    assert_eq!(balance(&engine, payer).await, amount("450.00"));
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

/// The merchant transaction list read from the store off the shard's thread
/// (`Engine::merchant_transactions_page`: one wallet through the page directory, several merged
/// by id) equals the shard's own list over memory and store, page by page, for a merchant with
/// two wallets, with records filed and evicted, records still in memory, and another
/// merchant's records beside them.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merchant_transactions_from_the_store_equal_the_shards_list() {
    use engine::ledger::wallet::WalletType;
    use engine::shard::command::{CreateWallet, Page};

    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 2, 31);
    let yer_wallet = wallet(&engine, OwnerType::Merchant, 7, 7).await;
    let created = engine
        .execute(Command::CreateWallet(CreateWallet {
            owner_type: OwnerType::Merchant,
            owner_id: 7,
            currency: engine::Currency::from_code("USD").unwrap(),
            wallet_type: WalletType::Primary,
            business_id: 7,
            branch_id: 0,
            meta: None,
        }))
        .await
        .unwrap();
    let Outcome::Wallet(usd_wallet) = created else {
        panic!("{created:?}")
    };
    let other = wallet(&engine, OwnerType::Merchant, 8, 8).await;
    let deposit = |wallet_id: WalletId, cents: i64| {
        Command::Deposit(MoneyMove {
            wallet_id,
            amount: Decimal::new(cents, 2),
            currency: None,
            details: Details::default(),
        })
    };
    for round in 0..3i64 {
        for n in 1..=40i64 {
            let target = match n % 3 {
                0 => yer_wallet,
                1 => usd_wallet.id,
                _ => other,
            };
            engine
                .execute(deposit(target, n + round * 100))
                .await
                .unwrap();
        }
        if round < 2 {
            engine.evict_filed().await.unwrap();
        }
    }
    for merchant in [7, 8, 9] {
        let shard = engine::runtime::owner_shard(merchant, engine.shard_count());
        for per_page in [1u32, 7, 50] {
            let mut number = 1;
            loop {
                let page = Page::new(number, per_page).unwrap();
                let from_store = engine
                    .merchant_transactions_page(merchant, page)
                    .await
                    .unwrap();
                let reference = engine
                    .read_shard(shard, move |s| s.merchant_transactions_page(merchant, page))
                    .await
                    .unwrap()
                    .unwrap();
                assert_eq!(from_store.total, reference.total);
                assert_eq!(
                    from_store.records, reference.records,
                    "merchant {merchant}, page {number} of {per_page}"
                );
                if from_store.records.is_empty() {
                    break;
                }
                number += 1;
            }
        }
    }
    let all = engine
        .merchant_transactions_page(7, Page::new(1, 100).unwrap())
        .await
        .unwrap();
    assert_eq!(all.total, 81); // 27 of every 40 deposits, three rounds
    assert!(all.records.windows(2).all(|pair| pair[0].id > pair[1].id));
    engine.shutdown().unwrap();
}
