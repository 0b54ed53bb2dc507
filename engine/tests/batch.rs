//! Transfer batches through the engine (issue 15): one actor message and one WAL record per
//! shard, each item's events exactly a single transfer's, atomic batches all or nothing, and
//! recovery rebuilding the same balances.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::batch::BatchItem;
use engine::runtime::clock::SeededClock;
use engine::runtime::journal::JournalEntry;
use engine::runtime::{Engine, EngineConfig, Renderer};
use engine::shard::command::{BatchItemResult, CreateWallet, Details, MoneyMove, TransferArgs};
use engine::{Command, Currency, Event, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;

struct NoRenderer;

impl Renderer for NoRenderer {
    fn render(&self, _: u16, _: &Result<Outcome, Rejection>) -> Vec<u8> {
        Vec::new()
    }
}

fn config(dir: &std::path::Path) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.snapshot_every_records = 0;
    config
}

fn open(dir: &std::path::Path) -> Engine {
    let clock = Arc::new(SeededClock::new(15, 1_700_000_000_000));
    Engine::open(config(dir), clock, Arc::new(NoRenderer))
        .unwrap()
        .0
}

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

async fn funded_wallet(engine: &Engine, owner_id: u64, cents: i64) -> WalletId {
    let command = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id,
        currency: yer(),
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: None,
    });
    let Outcome::Wallet(wallet) = engine.execute(command).await.unwrap() else {
        panic!("not a wallet")
    };
    if cents > 0 {
        let deposit = Command::Deposit(MoneyMove {
            wallet_id: wallet.id,
            amount: Decimal::new(cents, 2),
            currency: None,
            details: Details::default(),
        });
        engine.execute(deposit).await.unwrap();
    }
    wallet.id
}

fn transfer(from: WalletId, to: WalletId, cents: i64) -> TransferArgs {
    TransferArgs {
        source_wallet_id: from,
        target_wallet_id: to,
        amount: Decimal::new(cents, 2),
        currency: yer(),
        details: Details::default(),
    }
}

async fn balance(engine: &Engine, wallet: WalletId) -> Decimal {
    engine
        .read_wallet(wallet, move |s| s.wallet(wallet).unwrap().balance())
        .await
        .unwrap()
}

/// The journal entries with LSN ≥ `from`, decoded.
fn entries(dir: &std::path::Path, from: u64) -> Vec<JournalEntry> {
    let mut found = Vec::new();
    wal::reader::read_from(&dir.join("wal"), 4 << 20, from, &mut |record| {
        found.push(JournalEntry::decode(record.payload).unwrap());
        Ok(())
    })
    .unwrap();
    found
}

fn kinds(events: &[Event]) -> Vec<String> {
    events
        .iter()
        .map(|e| {
            format!("{e:?}")
                .split(['(', ' ', '{'])
                .next()
                .unwrap()
                .to_owned()
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_is_one_record_of_single_transfers_events() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let payer = funded_wallet(&engine, 1, 100_000).await;
    let payee = funded_wallet(&engine, 2, 0).await;
    // One single transfer, for the shape of its record.
    let before_single = engine.lsns().0;
    engine
        .execute(Command::Transfer(transfer(payer, payee, 100)))
        .await
        .unwrap();
    let before = engine.lsns().0;
    let items: Vec<BatchItem> = (0..50)
        .map(|_| BatchItem::Transfer(transfer(payer, payee, 100)))
        .collect();
    let answer = engine.execute_batch(items, false).await.unwrap();
    assert_eq!(answer.items.len(), 50);
    assert!(answer
        .items
        .iter()
        .all(|item| matches!(item, BatchItemResult::Posted(_))));
    assert_eq!(
        engine.lsns().0,
        before + 1,
        "one record for the whole batch"
    );
    assert_eq!(
        balance(&engine, payer).await,
        Decimal::new(100_000 - 5_100, 2)
    );
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();

    let records = entries(dir.path(), before_single + 1);
    let single = kinds(&records[0].events);
    let batch = kinds(&records[1].events);
    assert_eq!(batch.len(), single.len() * 50);
    for chunk in batch.chunks(single.len()) {
        assert_eq!(chunk, single.as_slice());
    }
    // Replay rebuilds the same balances.
    let engine = open(dir.path());
    assert_eq!(
        balance(&engine, payer).await,
        Decimal::new(100_000 - 5_100, 2)
    );
    assert_eq!(balance(&engine, payee).await, Decimal::new(5_100, 2));
    engine.check_invariants().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_atomic_batch_that_fails_leaves_the_money_where_it_was() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path());
    let payer = funded_wallet(&engine, 1, 10_000).await;
    let payee = funded_wallet(&engine, 2, 0).await;
    let items = vec![
        BatchItem::Transfer(transfer(payer, payee, 4_000)),
        BatchItem::Transfer(transfer(payer, payee, 4_000)),
        BatchItem::Transfer(transfer(payer, payee, 4_000)),
    ];
    let answer = engine.execute_batch(items, true).await.unwrap();
    assert_eq!(answer.failed, Some(2));
    assert_eq!(
        answer.items[2],
        BatchItemResult::Rejected(Rejection::InsufficientFunds)
    );
    assert_eq!(answer.items[0], BatchItemResult::NotPosted);
    assert_eq!(balance(&engine, payer).await, Decimal::new(10_000, 2));
    assert_eq!(balance(&engine, payee).await, Decimal::ZERO);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
    let engine = open(dir.path());
    assert_eq!(balance(&engine, payer).await, Decimal::new(10_000, 2));
    engine.check_invariants().await.unwrap();
}
