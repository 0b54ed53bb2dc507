//! ARCHITECTURE.md invariants 1 and 2 at the engine's edge, with the log's fdatasync held back by
//! a gate in the file system under the WAL:
//!
//! - a command whose record is written but not yet synced is not answered (invariant 1);
//! - a read of the wallet it changed is not answered either, because what it would show is not
//!   durable (invariant 2);
//! - once the sync is let through, both answer, and the read shows the change.
//!
//! The gate is `wal::fs::FaultyFs::hold_segment_syncs`. The shards answer with the result sealed
//! with its WAL ticket (`actor::Durable`), and the caller awaits the ticket; this test is what
//! fails if any path hands a result out before it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::Duration;

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, Renderer, WalFileSystem};
use engine::shard::command::{CreateWallet, Details, MoneyMove};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;
use wal::fs::FaultyFs;

/// How long an answer that must not come is given to come anyway. A premature answer would be
/// ready microseconds after its record is written; this only bounds the test's running time.
const MUST_NOT_ANSWER_WITHIN: Duration = Duration::from_millis(300);

/// Lets held syncs through when dropped, so a failing assertion does not leave the log's writer
/// (and the engine's shutdown after it) waiting for ever.
struct ReleaseOnDrop(FaultyFs);

impl Drop for ReleaseOnDrop {
    fn drop(&mut self) {
        self.0.hold_segment_syncs(false);
    }
}

struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        format!("{route}:{result:?}").into_bytes()
    }
}

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

async fn balance(engine: Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn nothing_is_answered_or_shown_before_its_record_is_synced() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let mut config = EngineConfig::new(dir.path());
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.snapshot_every_records = 0;
    config.file_system = WalFileSystem(Arc::new(fs.clone()));
    let clock = Arc::new(SeededClock::new(5, 1_700_000_000_000));
    let engine = Engine::open(config, clock, Arc::new(DebugRenderer))
        .unwrap()
        .0;
    let created = engine
        .execute(Command::CreateWallet(CreateWallet {
            owner_type: OwnerType::Customer,
            owner_id: 1,
            currency: yer(),
            wallet_type: WalletType::Primary,
            business_id: 1,
            branch_id: 0,
            meta: None,
        }))
        .await
        .unwrap();
    let Outcome::Wallet(wallet) = created else {
        panic!("{created:?}")
    };
    let wallet_id = wallet.id;
    assert_eq!(balance(engine.clone(), wallet_id).await, Decimal::ZERO);

    fs.hold_segment_syncs(true);
    let _release = ReleaseOnDrop(fs.clone());
    let mut deposit = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .execute(Command::Deposit(MoneyMove {
                    wallet_id,
                    amount: Decimal::from_str_exact("10.00").unwrap(),
                    currency: None,
                    details: Details::default(),
                }))
                .await
        }
    });
    // The deposit is applied in memory and its record written; its sync waits at the gate.
    let waiting = fs.clone();
    tokio::task::spawn_blocking(move || waiting.wait_for_a_held_sync())
        .await
        .unwrap();
    let mut read = tokio::spawn(balance(engine.clone(), wallet_id));

    assert!(
        tokio::time::timeout(MUST_NOT_ANSWER_WITHIN, &mut deposit)
            .await
            .is_err(),
        "the deposit was answered before its record was synced"
    );
    assert!(
        tokio::time::timeout(MUST_NOT_ANSWER_WITHIN, &mut read)
            .await
            .is_err(),
        "a read showed the deposit before its record was synced"
    );

    fs.hold_segment_syncs(false);
    match deposit.await.unwrap().unwrap() {
        Outcome::Transaction(transaction) => {
            assert_eq!(
                transaction.amount,
                Decimal::from_str_exact("10.00").unwrap()
            );
        }
        other => panic!("{other:?}"),
    }
    assert_eq!(
        read.await.unwrap(),
        Decimal::from_str_exact("10.00").unwrap()
    );
}
