//! Idempotency answers live in the history store, memory holds only the keys in flight
//! (issue 14, item 7): a retry is answered from the store, across restarts and snapshots, for
//! the retention window and not after it.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;
use std::time::Duration;

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, EngineError, IdempotencyKey, LegacyRequest, Renderer};
use engine::shard::command::{CreateWallet, Details, MoneyMove, Refund, TransferArgs};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;

const HOUR_MS: i64 = 60 * 60 * 1000;

/// Renders what a retry must see again verbatim: the transaction's uuid makes every answer
/// unique.
struct UuidRenderer;

impl Renderer for UuidRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        match result {
            Ok(Outcome::Transaction(t)) => format!("{route}:ok:{}:{}", t.uuid, t.amount),
            Ok(other) => format!("{route}:ok:{other:?}"),
            Err(rejection) => format!("{route}:err:{}", rejection.code()),
        }
        .into_bytes()
    }
}

fn open(dir: &std::path::Path, shards: u32, clock: Arc<SeededClock>) -> Engine {
    let mut config = EngineConfig::new(dir);
    config.shard_count = shards;
    config.snapshot_every_records = 0;
    config.idempotency_retention = Duration::from_secs(3600);
    // Every indexer batch is a checkpoint, so expired answers are purged at once.
    config.history.checkpoint_every = Duration::ZERO;
    Engine::open(config, clock, Arc::new(UuidRenderer))
        .unwrap()
        .0
}

async fn wallets(engine: &Engine, count: u64) -> Vec<WalletId> {
    let mut out = Vec::new();
    for owner_id in 1..=count {
        let created = engine
            .execute(Command::CreateWallet(CreateWallet {
                owner_type: OwnerType::Customer,
                owner_id,
                currency: Currency::from_code("YER").unwrap(),
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
        out.push(wallet.id);
    }
    out
}

fn deposit(wallet_id: WalletId, amount: i64) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id,
        amount: Decimal::from(amount),
        currency: None,
        details: Details::default(),
    })
}

fn key(name: &str, fingerprint: u8) -> IdempotencyKey {
    IdempotencyKey {
        caller: "customer:1".into(),
        key: name.into(),
        fingerprint: [fingerprint; 32],
        legacy: None,
        route: 4,
    }
}

async fn balance(engine: &Engine, wallet_id: WalletId) -> Decimal {
    engine
        .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
        .await
        .unwrap()
}

/// Waits until the indexer has filed everything logged so far (and so dropped its answers).
async fn filed(engine: &Engine) {
    engine.evict_filed().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_leave_memory_once_filed_and_retries_replay_them_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(41, 1_700_000_000_000));
    let engine = open(dir.path(), 2, clock.clone());
    let ws = wallets(&engine, 4).await;
    let mut first = Vec::new();
    for i in 0..300u32 {
        let wallet = ws[i as usize % ws.len()];
        let reply = engine
            .execute_idempotent(deposit(wallet, 1), key(&format!("d-{i}"), 1))
            .await
            .unwrap();
        assert!(!reply.replayed);
        first.push(reply.response);
    }
    filed(&engine).await;
    assert_eq!(
        engine.idempotency_keys_held(),
        0,
        "300 answered keys, none left in memory once filed"
    );
    for (i, response) in first.iter().enumerate() {
        let again = engine
            .execute_idempotent(deposit(ws[i % ws.len()], 1), key(&format!("d-{i}"), 1))
            .await
            .unwrap();
        assert!(again.replayed, "key d-{i}");
        assert_eq!(&again.response, response, "key d-{i}");
    }
    assert_eq!(
        engine
            .execute_idempotent(deposit(ws[0], 2), key("d-0", 2))
            .await,
        Err(EngineError::IdempotencyKeyReused),
        "another request under a filed key"
    );
    for wallet in &ws {
        assert_eq!(
            balance(&engine, *wallet).await,
            Decimal::from(75),
            "no retry ran twice"
        );
    }
    assert_eq!(
        engine.idempotency_keys_held(),
        0,
        "retries and refusals leave no claim"
    );

    // A snapshot holds hot keys only; after a restart the answers still come from the store.
    engine.snapshot().await.unwrap();
    engine.shutdown().unwrap();
    let engine = open(dir.path(), 2, clock);
    assert_eq!(
        engine.idempotency_keys_held(),
        0,
        "restart brings no answer back into memory"
    );
    for (i, response) in first.iter().enumerate().step_by(7) {
        let again = engine
            .execute_idempotent(deposit(ws[i % ws.len()], 1), key(&format!("d-{i}"), 1))
            .await
            .unwrap();
        assert!(again.replayed, "key d-{i} after restart");
        assert_eq!(&again.response, response);
    }
    for wallet in &ws {
        assert_eq!(balance(&engine, *wallet).await, Decimal::from(75));
    }
    engine.shutdown().unwrap();
}

/// A key answered by the release before the canonical fingerprint (its answer carries that
/// release's digest) still replays, from memory and from the store, for a retry whose key
/// carries the request as that release saw it ([`LegacyRequest`]); another request under the
/// key is refused, and nothing runs twice.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_key_answered_under_the_legacy_fingerprint_replays_from_memory_and_from_the_store() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(43, 1_700_000_000_000));
    let engine = open(dir.path(), 1, clock);
    let ws = wallets(&engine, 1).await;
    let legacy = LegacyRequest {
        operation: "deposit",
        params: vec![("walletId".into(), ws[0].0.to_string())],
    };
    let retry = |name: &str| IdempotencyKey {
        legacy: Some(legacy.clone()),
        ..key(name, 1)
    };
    let mut answers = Vec::new();
    for name in ["in-memory", "in-store"] {
        // What the previous release stored: its own digest as the answer's fingerprint.
        let old = IdempotencyKey {
            fingerprint: legacy.fingerprint(&deposit(ws[0], 5)),
            ..key(name, 0)
        };
        let reply = engine
            .execute_idempotent(deposit(ws[0], 5), old)
            .await
            .unwrap();
        assert!(!reply.replayed);
        answers.push(reply.response);
        if name == "in-memory" {
            let again = engine
                .execute_idempotent(deposit(ws[0], 5), retry(name))
                .await
                .unwrap();
            assert!(again.replayed, "{name}");
            assert_eq!(again.response, answers[0]);
        }
    }
    filed(&engine).await;
    assert_eq!(engine.idempotency_keys_held(), 0);
    let again = engine
        .execute_idempotent(deposit(ws[0], 5), retry("in-store"))
        .await
        .unwrap();
    assert!(again.replayed, "from the store");
    assert_eq!(again.response, answers[1]);
    for name in ["in-memory", "in-store"] {
        assert_eq!(
            engine
                .execute_idempotent(deposit(ws[0], 6), retry(name))
                .await,
            Err(EngineError::IdempotencyKeyReused),
            "{name}: another amount under the key"
        );
    }
    assert_eq!(
        balance(&engine, ws[0]).await,
        Decimal::from(10),
        "nothing ran twice"
    );
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_retry_after_the_retention_window_runs_as_new_and_expired_answers_are_purged() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(43, 1_700_000_000_000));
    let engine = open(dir.path(), 1, clock.clone());
    let ws = wallets(&engine, 1).await;
    let wallet = ws[0];
    let first = engine
        .execute_idempotent(deposit(wallet, 10), key("late", 1))
        .await
        .unwrap();
    engine
        .execute_idempotent(deposit(wallet, 10), key("forgotten", 1))
        .await
        .unwrap();
    filed(&engine).await;

    // Inside the window (its last millisecond): a replay.
    clock.advance_ms(HOUR_MS - 1);
    let inside = engine
        .execute_idempotent(deposit(wallet, 10), key("late", 1))
        .await
        .unwrap();
    assert!(inside.replayed);
    assert_eq!(inside.response, first.response);
    assert_eq!(balance(&engine, wallet).await, Decimal::from(20));

    // Past it: the same request runs again, as documented.
    clock.advance_ms(2);
    let after = engine
        .execute_idempotent(deposit(wallet, 10), key("late", 1))
        .await
        .unwrap();
    assert!(!after.replayed);
    assert_ne!(after.response, first.response);
    assert_eq!(balance(&engine, wallet).await, Decimal::from(30));

    // The checkpoint that filed it also purged what expired: the untouched key is gone from the
    // store, the reused one holds its new answer.
    filed(&engine).await;
    let store = engine.history().store();
    assert_eq!(store.answer("customer:1", "forgotten").unwrap(), None);
    let kept = store.answer("customer:1", "late").unwrap().unwrap();
    assert_eq!(kept.response, after.response);
    let again = engine
        .execute_idempotent(deposit(wallet, 10), key("late", 1))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, after.response);
    engine.shutdown().unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cross_shard_transfer_key_replays_from_the_store_after_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(47, 1_700_000_000_000));
    let engine = open(dir.path(), 4, clock.clone());
    let ws = wallets(&engine, 8).await;
    let source = ws[0];
    let target = *ws
        .iter()
        .find(|w| engine.shard_of_wallet(**w) != engine.shard_of_wallet(source))
        .unwrap();
    engine.execute(deposit(source, 9)).await.unwrap();
    let transfer = || {
        Command::Transfer(TransferArgs {
            source_wallet_id: source,
            target_wallet_id: target,
            amount: Decimal::from(2),
            currency: Currency::from_code("YER").unwrap(),
            details: Details::default(),
        })
    };
    let first = engine
        .execute_idempotent(transfer(), key("t-1", 9))
        .await
        .unwrap();
    filed(&engine).await;
    assert_eq!(
        engine.idempotency_keys_held(),
        0,
        "the pending key ended with the answer"
    );
    engine.shutdown().unwrap();
    let engine = open(dir.path(), 4, clock);
    let again = engine
        .execute_idempotent(transfer(), key("t-1", 9))
        .await
        .unwrap();
    assert!(again.replayed);
    assert_eq!(again.response, first.response);
    assert_eq!(balance(&engine, target).await, Decimal::from(2));
    engine.shutdown().unwrap();
}

/// A keyed command that cannot read a filed record changes nothing and keeps nothing: it is
/// refused as unavailable, the claim is released and no answer is logged, so a retry once the
/// store reads again runs it (a kept 503 would be replayed for the whole window).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_unreadable_filed_record_is_not_kept_as_the_keys_answer() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(53, 1_700_000_000_000));
    let engine = open(dir.path(), 1, clock);
    let ws = wallets(&engine, 1).await;
    engine.execute(deposit(ws[0], 10)).await.unwrap();
    let withdrawn = engine
        .execute(Command::Withdraw(MoneyMove {
            wallet_id: ws[0],
            amount: Decimal::from(4),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
    let Outcome::Transaction(withdrawal) = withdrawn else {
        panic!("{withdrawn:?}")
    };
    filed(&engine).await;
    let (logged_before, _) = engine.lsns();
    // The store stops answering reads (as a failing disk would).
    engine.history().store().close();
    let refund = engine
        .execute_idempotent(
            Command::Refund(Refund {
                original_transaction_uuid: withdrawal.uuid,
                amount: Decimal::from(1),
                reason: None,
                details: Details::default(),
            }),
            key("refund-1", 7),
        )
        .await;
    assert!(
        matches!(refund, Err(EngineError::Unavailable(_))),
        "{refund:?}"
    );
    assert_eq!(engine.idempotency_keys_held(), 0, "the claim is released");
    assert_eq!(engine.lsns().0, logged_before, "nothing was logged");
    assert_eq!(balance(&engine, ws[0]).await, Decimal::from(6));
}
