//! Issue 16, item 3: a poisoned log is reported as the engine's failure, which the watchdog
//! (`walletd serve`) turns into a fail-stop exit and `GET /v1/health` into 503. Before, the log
//! stopped but nothing reported it: the process kept answering 503 to commands and 200 to health.
//! A restart then recovers every acknowledged operation from the log.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::Arc;
use std::time::Duration;

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, EngineError, Renderer, WalFileSystem};
use engine::shard::command::{CreateWallet, Details, MoneyMove};
use engine::{Command, Currency, Outcome, Rejection};
use rust_decimal::Decimal;
use wal::fs::FaultyFs;

struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        format!("{route}:{result:?}").into_bytes()
    }
}

fn config(dir: &std::path::Path, fs: &FaultyFs) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.snapshot_every_records = 0;
    config.file_system = WalFileSystem(Arc::new(fs.clone()));
    config
}

fn deposit(wallet_id: engine::WalletId) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id,
        amount: Decimal::from(5),
        currency: None,
        details: Details::default(),
    })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn issue_16_a_poisoned_log_is_the_engines_failure_and_a_restart_recovers_the_acks() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let clock = Arc::new(SeededClock::new(7, 1_700_000_000_000));
    let engine = Engine::open(
        config(dir.path(), &fs),
        clock.clone(),
        Arc::new(DebugRenderer),
    )
    .unwrap()
    .0;
    let Outcome::Wallet(wallet) = engine
        .execute(Command::CreateWallet(CreateWallet {
            owner_type: OwnerType::Customer,
            owner_id: 1,
            currency: Currency::from_code("YER").unwrap(),
            wallet_type: WalletType::Primary,
            business_id: 1,
            branch_id: 0,
            meta: None,
        }))
        .await
        .unwrap()
    else {
        panic!("not a wallet")
    };
    let mut acknowledged = 0u32;
    for _ in 0..3 {
        engine.execute(deposit(wallet.id)).await.unwrap();
        acknowledged += 1;
    }
    assert_eq!(engine.failure(), None);

    fs.fail_sync_after(0);
    let failed = engine.execute(deposit(wallet.id)).await;
    assert!(
        matches!(failed, Err(EngineError::Unavailable(_))),
        "{failed:?}"
    );
    let reason = tokio::time::timeout(
        Duration::from_secs(10),
        engine.watch_failure(Duration::from_millis(1)),
    )
    .await
    .expect("the watchdog sees the failure");
    assert!(reason.contains("poisoned"), "{reason}");
    assert_eq!(engine.failure(), Some(reason));
    let _ = engine.shutdown();

    // The restart (what the supervisor does after the fail-stop exit) recovers every
    // acknowledged deposit from the log.
    let healthy = FaultyFs::new();
    let engine = Engine::open(config(dir.path(), &healthy), clock, Arc::new(DebugRenderer))
        .unwrap()
        .0;
    assert_eq!(engine.failure(), None);
    let wallet_id = wallet.id;
    let balance = engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap();
    assert!(
        balance >= Decimal::from(5 * acknowledged),
        "{balance} lost acknowledged deposits"
    );
    let _ = engine.shutdown();
}
