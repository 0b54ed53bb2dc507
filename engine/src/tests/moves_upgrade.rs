//! A history store written before cross-shard moves were filed (no `moves_since`): recovery
//! refiles the moves of the records it replays that the store already covers, so a finished
//! move that leaves memory is still found there: a repeated credit of one from before the upgrade
//! is answered, not run twice.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{customer_wallet, DebugRenderer, START_MS};
use crate::runtime::clock::SeededClock;
use crate::runtime::history::moves::MOVES_SINCE;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::runtime::{Engine, EngineConfig};
use crate::shard::command::{Details, MoneyMove, TransferArgs, TransferCredit};
use crate::shard::moves::MoveRecord;
use crate::{Command, Currency, Outcome};

fn open(dir: &std::path::Path, seed: u64) -> Engine {
    let mut config = EngineConfig::new(dir);
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    let clock = Arc::new(SeededClock::new(seed, START_MS));
    Engine::open(config, clock, Arc::new(DebugRenderer))
        .unwrap()
        .0
}

fn filed(store: &HistoryStore) -> Vec<MoveRecord> {
    let mut records = Vec::new();
    store
        .for_each_move(&mut |record| records.push(record))
        .unwrap();
    records
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn moves_missing_from_an_older_store_are_refiled_from_the_log_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 1);
    let a = customer_wallet(&engine, 1).await;
    let b = customer_wallet(&engine, 2).await;
    assert_ne!(engine.shard_of_wallet(a), engine.shard_of_wallet(b));
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id: a,
            amount: Decimal::from(100),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    for value in [3, 4, 5] {
        engine
            .execute(Command::Transfer(TransferArgs {
                source_wallet_id: a,
                target_wallet_id: b,
                amount: Decimal::from(value),
                currency: Currency::from_code("YER").unwrap(),
                details: Details::default(),
            }))
            .await
            .unwrap();
    }
    engine.evict_filed().await.unwrap();
    let before = filed(engine.history().store());
    assert_eq!(before.len(), 6, "three transfers, each filed on both sides");
    engine.shutdown().unwrap();

    // Make it look like a store of the previous release: every record filed, no move.
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    store
        .with(|open| {
            let mut writes = open.db.batch();
            for item in open.moves.iter() {
                writes.remove(&open.moves, item.key()?.to_vec());
            }
            writes.remove(&open.meta, MOVES_SINCE);
            writes.commit()?;
            Ok(())
        })
        .unwrap();
    assert!(filed(&store).is_empty());
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), 2);
    assert_eq!(
        engine.history().store().moves_since().unwrap(),
        Some(0),
        "after the refiling the store holds every move it covers"
    );
    assert_eq!(filed(engine.history().store()), before);
    engine.evict_filed().await.unwrap();
    let in_memory: usize = engine
        .read_all(crate::Shard::moves_in_memory)
        .await
        .unwrap()
        .iter()
        .sum();
    assert_eq!(in_memory, 0);
    // A repeated credit of a transfer from before the upgrade is answered from the store.
    let Some(MoveRecord::Outgoing(first)) = before.first().cloned() else {
        panic!("{before:?}")
    };
    let again = engine
        .execute(Command::TransferCredit(TransferCredit::for_transfer(
            &first,
        )))
        .await
        .unwrap();
    assert!(
        matches!(
            again,
            Outcome::TransferCredited {
                duplicate: true,
                ..
            }
        ),
        "{again:?}"
    );
    let held = engine
        .read_wallet(b, move |s| s.balance(b).unwrap().balance)
        .await
        .unwrap();
    assert_eq!(held, Decimal::from(12));
    engine.check_invariants().await.unwrap();
    assert!(engine.verify_history().await.unwrap().is_ok());
    engine.shutdown().unwrap();
}
