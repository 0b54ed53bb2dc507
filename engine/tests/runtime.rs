//! The engine at run time: durability across reopen, snapshots, recovery of interrupted
//! cross-shard transfers, concurrency across shards, idempotency and hold expiry across restarts.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, EngineError, IdempotencyKey, Renderer};
use engine::shard::command::{CreateWallet, Details, MoneyMove, PlaceHold, TransferArgs};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;

struct DebugRenderer;

impl Renderer for DebugRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        match result {
            Ok(Outcome::Transaction(t)) => {
                format!("{route}:ok:{}:{}", t.uuid, t.amount).into_bytes()
            }
            Ok(other) => format!("{route}:ok:{other:?}").into_bytes(),
            Err(rejection) => format!("{route}:err:{}", rejection.code()).into_bytes(),
        }
    }
}

fn config(dir: &std::path::Path, shards: u32) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.shard_count = shards;
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.snapshot_every_records = 0;
    config
}

fn open(dir: &std::path::Path, shards: u32, clock: Arc<SeededClock>) -> Engine {
    Engine::open(config(dir, shards), clock, Arc::new(DebugRenderer))
        .unwrap()
        .0
}

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

fn amount(text: &str) -> Decimal {
    Decimal::from_str_exact(text).unwrap()
}

async fn create_wallet(engine: &Engine, owner_id: u64) -> WalletId {
    let command = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id,
        currency: yer(),
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: None,
    });
    match engine.execute(command).await.unwrap() {
        Outcome::Wallet(wallet) => wallet.id,
        other => panic!("{other:?}"),
    }
}

async fn create_wallets(engine: &Engine, count: u64) -> Vec<WalletId> {
    let mut wallets = Vec::new();
    for owner in 1..=count {
        wallets.push(create_wallet(engine, owner).await);
    }
    wallets
}

fn money(wallet_id: WalletId, value: &str) -> MoneyMove {
    MoneyMove {
        wallet_id,
        amount: amount(value),
        currency: None,
        details: Details::default(),
    }
}

async fn balance(engine: &Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

/// The shards' state digests once everything filed has left memory: the hot state, which a
/// replay rebuilds byte for byte (what stays in memory between filings depends on timing).
async fn digests(engine: &Engine) -> Vec<String> {
    engine.evict_filed().await.unwrap();
    engine
        .read_all(|s| s.state_digest().to_hex())
        .await
        .unwrap()
}

async fn pending_transfers(engine: &Engine) -> usize {
    engine
        .read_all(|s| s.pending_outgoing_transfers().len())
        .await
        .unwrap()
        .iter()
        .sum()
}

fn transfer(source: WalletId, target: WalletId, value: &str) -> Command {
    Command::Transfer(TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: amount(value),
        currency: yer(),
        details: Details::default(),
    })
}

/// A wallet of `wallets` on another shard than `source`.
fn elsewhere(engine: &Engine, wallets: &[WalletId], source: WalletId) -> WalletId {
    *wallets
        .iter()
        .find(|w| engine.shard_of_wallet(**w) != engine.shard_of_wallet(source))
        .unwrap()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn acknowledged_commands_survive_reopen_and_rebuild_the_same_state() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(7, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let a = create_wallet(&engine, 1).await;
    let b = create_wallet(&engine, 2).await;
    engine
        .execute(Command::Deposit(money(a, "100.50")))
        .await
        .unwrap();
    engine.execute(transfer(a, b, "40.25")).await.unwrap();
    engine
        .execute(Command::Withdraw(money(b, "0.25")))
        .await
        .unwrap();
    let before = digests(&engine).await;
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();

    let (engine, report) =
        Engine::open(config(dir.path(), 2), clock, Arc::new(DebugRenderer)).unwrap();
    assert!(report.records_replayed > 0);
    assert_eq!(
        digests(&engine).await,
        before,
        "replay rebuilds the same state byte for byte"
    );
    assert_eq!(balance(&engine, a).await, amount("60.25"));
    assert_eq!(balance(&engine, b).await, amount("40.00"));
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn snapshot_plus_log_tail_gives_the_same_state_as_the_log_alone() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(11, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let wallets = create_wallets(&engine, 6).await;
    for (i, wallet) in wallets.iter().enumerate() {
        engine
            .execute(Command::Deposit(money(*wallet, &format!("{}.00", 100 + i))))
            .await
            .unwrap();
    }
    let covered = engine.snapshot().await.unwrap();
    assert!(covered > 0);
    for pair in wallets.windows(2) {
        engine
            .execute(transfer(pair[0], pair[1], "3.00"))
            .await
            .unwrap();
    }
    let before = digests(&engine).await;
    engine.shutdown().unwrap();

    let (engine, report) =
        Engine::open(config(dir.path(), 2), clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.snapshot_lsn, Some(covered));
    assert_eq!(digests(&engine).await, before);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_finishes_a_cross_shard_transfer_interrupted_after_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(3, 1_700_000_000_000));
    let engine = open(dir.path(), 4, clock.clone());
    let wallets = create_wallets(&engine, 8).await;
    let source = wallets[0];
    let target = elsewhere(&engine, &wallets, source);
    engine
        .execute(Command::Deposit(money(source, "50.00")))
        .await
        .unwrap();
    // The crash: step 1 of the protocol is durable, steps 2 and 3 never ran.
    let reserve = Command::TransferReserve(TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: amount("20.00"),
        currency: yer(),
        details: Details::default(),
    });
    engine.execute(reserve).await.unwrap();
    assert_eq!(balance(&engine, source).await, amount("30.00"));
    assert_eq!(balance(&engine, target).await, amount("0"));
    engine.shutdown().unwrap();

    let (engine, report) =
        Engine::open(config(dir.path(), 4), clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.transfers_completed, 1);
    assert_eq!(balance(&engine, source).await, amount("30.00"));
    assert_eq!(
        balance(&engine, target).await,
        amount("20.00"),
        "both legs posted"
    );
    assert_eq!(pending_transfers(&engine).await, 0);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();

    // Recovery is idempotent: a second restart finds nothing to finish.
    let clock = Arc::new(SeededClock::new(4, 1_700_000_100_000));
    let (engine, report) =
        Engine::open(config(dir.path(), 4), clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.transfers_completed, 0);
    assert_eq!(balance(&engine, target).await, amount("20.00"));
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refused_cross_shard_credit_releases_the_reserve() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(5, 1_700_000_000_000));
    let engine = open(dir.path(), 4, clock);
    let wallets = create_wallets(&engine, 8).await;
    let source = wallets[0];
    let target = elsewhere(&engine, &wallets, source);
    engine
        .execute(Command::Deposit(money(source, "10.00")))
        .await
        .unwrap();
    engine
        .execute(Command::FreezeWallet { wallet_id: target })
        .await
        .unwrap();
    let refused = engine.execute(transfer(source, target, "4.00")).await;
    assert_eq!(refused, Err(EngineError::Rejected(Rejection::WalletFrozen)));
    assert_eq!(
        balance(&engine, source).await,
        amount("10.00"),
        "the reserve was released"
    );
    assert_eq!(pending_transfers(&engine).await, 0);
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrent_transfers_both_ways_across_four_shards_conserve_money() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(9, 1_700_000_000_000));
    let engine = open(dir.path(), 4, clock);
    let wallets = create_wallets(&engine, 8).await;
    for wallet in &wallets {
        engine
            .execute(Command::Deposit(money(*wallet, "100.00")))
            .await
            .unwrap();
    }
    let mut tasks = Vec::new();
    for worker in 0..16usize {
        let engine = engine.clone();
        let wallets = wallets.clone();
        tasks.push(tokio::spawn(async move {
            let mut accepted = 0;
            for step in 0..40usize {
                let source = wallets[(worker + step) % wallets.len()];
                let target = wallets[(worker * 3 + step * 5 + 1) % wallets.len()];
                if source == target {
                    continue;
                }
                match engine.execute(transfer(source, target, "7.00")).await {
                    Ok(_) => accepted += 1,
                    Err(EngineError::Rejected(Rejection::InsufficientFunds)) => {}
                    Err(other) => panic!("{other}"),
                }
            }
            accepted
        }));
    }
    let mut accepted = 0;
    for task in tasks {
        accepted += task.await.unwrap();
    }
    assert!(accepted > 100, "most transfers went through: {accepted}");
    let mut total = Decimal::ZERO;
    for wallet in &wallets {
        let b = balance(&engine, *wallet).await;
        assert!(b >= Decimal::ZERO);
        total += b;
    }
    assert_eq!(total, amount("800.00"), "money is conserved");
    assert_eq!(
        pending_transfers(&engine).await,
        0,
        "no transfer is left half-done"
    );
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotency_replays_the_first_answer_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(13, 1_700_000_000_000));
    let engine = open(dir.path(), 1, clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    let key = |name: &str, fingerprint: u8| IdempotencyKey {
        caller: "employee:1".into(),
        key: name.into(),
        fingerprint: [fingerprint; 32],
        legacy: None,
        route: 7,
    };
    let first = engine
        .execute_idempotent(Command::Deposit(money(wallet, "5.00")), key("deposit-1", 1))
        .await
        .unwrap();
    assert!(!first.replayed);
    let again = engine
        .execute_idempotent(Command::Deposit(money(wallet, "5.00")), key("deposit-1", 1))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, first.response);
    assert_eq!(
        balance(&engine, wallet).await,
        amount("5.00"),
        "no second effect"
    );
    engine.shutdown().unwrap();

    let engine = open(dir.path(), 1, clock.clone());
    let after_restart = engine
        .execute_idempotent(Command::Deposit(money(wallet, "5.00")), key("deposit-1", 1))
        .await
        .unwrap();
    assert!(after_restart.replayed);
    assert_eq!(after_restart.response, first.response);
    let reused = engine
        .execute_idempotent(Command::Deposit(money(wallet, "6.00")), key("deposit-1", 2))
        .await;
    assert_eq!(reused, Err(EngineError::IdempotencyKeyReused));
    // A rejection is an answer too, and replays the same way, also from a snapshot.
    let refused = engine
        .execute_idempotent(
            Command::Withdraw(money(wallet, "500.00")),
            key("withdraw-1", 3),
        )
        .await
        .unwrap();
    assert!(String::from_utf8_lossy(&refused.response).contains("insufficient_funds"));
    engine.snapshot().await.unwrap();
    engine.shutdown().unwrap();

    let engine = open(dir.path(), 1, clock);
    let replayed = engine
        .execute_idempotent(
            Command::Withdraw(money(wallet, "500.00")),
            key("withdraw-1", 3),
        )
        .await
        .unwrap();
    assert!(replayed.replayed);
    assert_eq!(replayed.response, refused.response);
    assert_eq!(balance(&engine, wallet).await, amount("5.00"));
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn idempotent_cross_shard_transfer_answers_once_and_replays() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(23, 1_700_000_000_000));
    let engine = open(dir.path(), 4, clock.clone());
    let wallets = create_wallets(&engine, 8).await;
    let source = wallets[0];
    let target = elsewhere(&engine, &wallets, source);
    engine
        .execute(Command::Deposit(money(source, "9.00")))
        .await
        .unwrap();
    let key = IdempotencyKey {
        caller: "customer:1".into(),
        key: "t-1".into(),
        fingerprint: [5; 32],
        legacy: None,
        route: 3,
    };
    let first = engine
        .execute_idempotent(transfer(source, target, "2.00"), key.clone())
        .await
        .unwrap();
    assert!(
        String::from_utf8_lossy(&first.response).starts_with("3:ok:"),
        "{:?}",
        String::from_utf8_lossy(&first.response)
    );
    engine.shutdown().unwrap();
    let engine = open(dir.path(), 4, clock);
    let again = engine
        .execute_idempotent(transfer(source, target, "2.00"), key)
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, first.response);
    assert_eq!(balance(&engine, target).await, amount("2.00"));
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn holds_expire_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(17, 1_700_000_000_000));
    let engine = open(dir.path(), 1, clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    engine
        .execute(Command::Deposit(money(wallet, "20.00")))
        .await
        .unwrap();
    let placed = engine
        .execute(Command::PlaceHold(PlaceHold {
            wallet_id: wallet,
            amount: amount("15.00"),
            currency: yer(),
            reason: None,
            expiry_minutes: Some(1),
        }))
        .await
        .unwrap();
    let Outcome::Hold(hold) = placed else {
        panic!("{placed:?}")
    };
    let held = engine
        .read_wallet(wallet, move |s| s.balance(wallet).unwrap())
        .await
        .unwrap();
    assert_eq!(held.available_balance, amount("5.00"));
    engine.shutdown().unwrap();

    clock.advance_ms(2 * 60 * 1000);
    let engine = open(dir.path(), 1, clock.clone());
    assert_eq!(engine.expire_holds().await.unwrap(), 1);
    let after = engine
        .read_wallet(wallet, move |s| s.balance(wallet).unwrap())
        .await
        .unwrap();
    assert_eq!(
        after.available_balance,
        amount("20.00"),
        "an expired hold frees its funds"
    );
    let status = engine
        .read_wallet(wallet, move |s| s.hold_view(hold.uuid).unwrap().status)
        .await
        .unwrap();
    assert_eq!(status.as_str(), "expired");
    engine.shutdown().unwrap();

    // The expiry itself is durable.
    let engine = open(dir.path(), 1, clock);
    assert_eq!(engine.expire_holds().await.unwrap(), 0);
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn registered_customers_keep_their_primary_wallet_across_restarts() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(19, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let (customer, wallet) = engine
        .register_customer(
            "Sam".into(),
            "+967700000001".into(),
            None,
            "hash".into(),
            yer(),
        )
        .await
        .unwrap();
    assert_eq!(wallet.owner_id, customer.id);
    assert_eq!(wallet.currency, yer());
    let duplicate = engine
        .register_customer(
            "Sam".into(),
            "+967700000001".into(),
            None,
            "hash".into(),
            yer(),
        )
        .await;
    assert_eq!(
        duplicate,
        Err(EngineError::Rejected(Rejection::Duplicate(
            "customer phone"
        )))
    );
    engine.snapshot().await.unwrap();
    engine.shutdown().unwrap();

    let engine = open(dir.path(), 2, clock);
    let found = engine
        .read_directory(|d| d.customer_by_phone("+967700000001").map(|c| c.id))
        .await
        .unwrap();
    assert_eq!(found, Some(customer.id));
    assert_eq!(balance(&engine, wallet.id).await, Decimal::ZERO);
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn dropping_the_engine_releases_the_data_dir_and_keeps_acknowledged_work() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(29, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    engine
        .execute(Command::Deposit(money(wallet, "12.34")))
        .await
        .unwrap();
    drop(engine);
    let engine = open(dir.path(), 2, clock);
    assert_eq!(balance(&engine, wallet).await, amount("12.34"));
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_restart_replays_only_the_log_written_after_the_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(31, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let wallets = create_wallets(&engine, 4).await;
    for _ in 0..25 {
        for wallet in &wallets {
            engine
                .execute(Command::Deposit(money(*wallet, "1.00")))
                .await
                .unwrap();
        }
    }
    let covered = engine.snapshot().await.unwrap();
    // Traffic goes on while (and after) the snapshot is built from the log.
    for wallet in &wallets {
        engine
            .execute(Command::Deposit(money(*wallet, "2.00")))
            .await
            .unwrap();
    }
    let (last, _) = engine.lsns();
    let before = digests(&engine).await;
    engine.shutdown().unwrap();

    let (engine, report) =
        Engine::open(config(dir.path(), 2), clock, Arc::new(DebugRenderer)).unwrap();
    assert_eq!(report.snapshot_lsn, Some(covered));
    assert_eq!(
        report.records_replayed,
        last - covered,
        "only the tail after the snapshot is replayed"
    );
    assert_eq!(digests(&engine).await, before);
    engine.shutdown().unwrap();
}

/// Wallets are placed on shards by id, so a data dir keeps the shard count it was created with:
/// another count is refused before anything is replayed, the recorded one opens it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_data_dir_refuses_another_shard_count_than_it_was_created_with() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(37, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let wallets = create_wallets(&engine, 3).await;
    for wallet in &wallets {
        engine
            .execute(Command::Deposit(money(*wallet, "5.00")))
            .await
            .unwrap();
    }
    engine.shutdown().unwrap();
    assert_eq!(
        engine::runtime::recorded_shard_count(dir.path()).unwrap(),
        Some(2)
    );

    for other in [1, 4] {
        let error = Engine::open(
            config(dir.path(), other),
            clock.clone(),
            Arc::new(DebugRenderer),
        )
        .expect_err("another shard count is refused");
        let message = error.to_string();
        assert!(
            matches!(error, engine::runtime::OpenError::Config(_))
                && message.contains("created with 2 shards"),
            "{message}"
        );
    }

    let engine = open(dir.path(), 2, clock);
    for wallet in &wallets {
        assert_eq!(balance(&engine, *wallet).await, amount("5.00"));
    }
    engine.shutdown().unwrap();
}
