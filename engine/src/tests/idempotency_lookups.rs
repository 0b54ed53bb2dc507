//! Idempotency lookups of the store, and the runtime workers they run on
//! (`Engine::filed_answer`).
//!
//! fjall holds a keyspace's version lock while it syncs a flush's or a compaction's version
//! file, and every lookup in that keyspace waits: 50 to 150 ms on a busy disk. The API has two
//! tokio workers; when both sat in such a lookup, walletd answered nothing. The seam
//! `answers::in_answer_lookup` holds chosen lookups the same way.

#![allow(clippy::unwrap_used, clippy::expect_used)]

use std::sync::mpsc;
use std::sync::Arc;
use std::time::Duration;

use rust_decimal::Decimal;

use super::runtime_hardening::{balance, deposit, wallet, DebugRenderer, START_MS};
use crate::runtime::clock::SeededClock;
use crate::runtime::history::answers::in_answer_lookup;
use crate::runtime::{Engine, EngineConfig, EngineError, IdempotencyKey, Reply};
use crate::WalletId;

/// Bounds the test's running time when the behaviour is broken (a request that should be
/// answered at once would wait for ever): it fails instead of hanging.
const ANSWERED_WITHIN: Duration = Duration::from_secs(60);

/// How long a lookup that must wait is given to start anyway: one that did not wait would start
/// within microseconds; this only bounds the test's running time.
const MUST_NOT_START_WITHIN: Duration = Duration::from_millis(300);

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: "customer:lookups".into(),
        key: name.into(),
        fingerprint: [3; 32],
        legacy: None,
        route: 1,
    }
}

/// Holds the next store lookup of `name` until the returned sender is used or dropped; the
/// receiver hears when the lookup is being held.
fn hold_lookup(name: &str) -> (mpsc::Sender<()>, mpsc::Receiver<()>) {
    let (entered_tx, entered_rx) = mpsc::channel();
    let (release_tx, release_rx) = mpsc::channel::<()>();
    in_answer_lookup::set(
        "customer:lookups",
        name,
        Box::new(move || {
            entered_tx.send(()).unwrap();
            let _ = release_rx.recv();
        }),
    );
    (release_tx, entered_rx)
}

/// An engine with one customer wallet, on a fresh data dir (kept while the guard lives).
async fn open_with_wallet() -> (tempfile::TempDir, Engine, WalletId) {
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.snapshot_every_records = 0;
    let clock = Arc::new(SeededClock::new(11, START_MS));
    let (engine, _) = Engine::open(config, clock, Arc::new(DebugRenderer)).unwrap();
    let wallet_id = wallet(&engine).await;
    (dir, engine, wallet_id)
}

/// A deposit of 5 into `wallet_id` under the key `name`, as its own task on the runtime.
fn keyed(
    engine: &Engine,
    wallet_id: WalletId,
    name: &'static str,
) -> tokio::task::JoinHandle<Result<Reply, EngineError>> {
    let engine = engine.clone();
    tokio::spawn(async move {
        engine
            .execute_idempotent(deposit(wallet_id, None), key(name))
            .await
    })
}

/// Two keyed requests held in the store's lookup (one inline on a worker, one in the blocking
/// pool) leave a worker free: a request that needs no lookup is answered meanwhile, a third
/// keyed request waits for its turn without holding a thread, and all three keyed requests are
/// answered once the lookups are let go.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_lookups_held_in_the_store_leave_a_worker_to_answer_others() {
    let (_dir, engine, wallet_id) = open_with_wallet().await;
    let keyed = |name: &'static str| keyed(&engine, wallet_id, name);
    // Each held lookup starts on a worker, and the next is started only once the one before
    // is being held (in the code before, each one held its worker).
    let (release_first, first_entered) = hold_lookup("held-1");
    let first = keyed("held-1");
    first_entered.recv_timeout(ANSWERED_WITHIN).unwrap();
    let (release_second, second_entered) = hold_lookup("held-2");
    let second = keyed("held-2");
    second_entered.recv_timeout(ANSWERED_WITHIN).unwrap();
    let third = keyed("waits-its-turn");

    // This thread is not one of the runtime's workers: it waits here while a request with no
    // key runs on them.
    let (answered_tx, answered_rx) = mpsc::channel();
    tokio::spawn({
        let engine = engine.clone();
        async move {
            let _ = answered_tx.send(engine.execute(deposit(wallet_id, None)).await);
        }
    });
    let answered = answered_rx.recv_timeout(ANSWERED_WITHIN);
    // Let the held lookups go whatever happened, so that a failure does not hang the engine.
    drop((release_first, release_second));
    answered
        .expect("a request with no key is answered while two lookups are held")
        .unwrap();

    let answers = [
        ("held-1", first.await.unwrap().unwrap()),
        ("held-2", second.await.unwrap().unwrap()),
        ("waits-its-turn", third.await.unwrap().unwrap()),
    ];
    assert!(answers.iter().all(|(_, answer)| !answer.replayed));
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(20));
    // And each key answers its first answer again.
    for (name, answer) in &answers {
        let again = engine
            .execute_idempotent(deposit(wallet_id, None), key(name))
            .await
            .unwrap();
        assert!(again.replayed, "{name}");
        assert_eq!(again.response, answer.response, "{name}");
    }
    assert_eq!(balance(&engine, wallet_id).await, Decimal::from(20));
}

/// A keyed request whose caller stops waiting during the store's lookup (a client that hangs
/// up) releases its key: a retry is not refused as in flight, and runs once. Its lookup keeps
/// the pool's turn until it ends, so lookups still run two at a time at most.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_request_dropped_during_its_lookup_frees_its_key_but_not_the_turn() {
    let (_dir, engine, wallet_id) = open_with_wallet().await;
    // An inline lookup held, so that the next one takes the pool's turn.
    let (release_inline, inline_entered) = hold_lookup("inline");
    let inline = keyed(&engine, wallet_id, "inline");
    inline_entered.recv_timeout(ANSWERED_WITHIN).unwrap();
    let (release_dropped, dropped_entered) = hold_lookup("dropped");
    let dropped = keyed(&engine, wallet_id, "dropped");
    dropped_entered.recv_timeout(ANSWERED_WITHIN).unwrap();
    dropped.abort();
    assert!(dropped.await.unwrap_err().is_cancelled());

    // The retry's lookup only says when it starts.
    let (retry_started_tx, retry_started) = mpsc::channel();
    in_answer_lookup::set(
        "customer:lookups",
        "dropped",
        Box::new(move || retry_started_tx.send(()).unwrap()),
    );
    let retry = keyed(&engine, wallet_id, "dropped");
    let started_early = retry_started.recv_timeout(MUST_NOT_START_WITHIN);
    // The dropped request's lookup ends: its turn passes to the retry.
    drop(release_dropped);
    assert!(
        started_early.is_err(),
        "the retry's lookup waits for the turn the dropped one's still holds"
    );
    retry_started.recv_timeout(ANSWERED_WITHIN).unwrap();
    drop(release_inline);
    let retry = retry.await.unwrap().unwrap();
    assert!(
        !retry.replayed,
        "the dropped request left nothing under its key"
    );
    assert!(!inline.await.unwrap().unwrap().replayed);
    assert_eq!(
        balance(&engine, wallet_id).await,
        Decimal::from(10),
        "the inline request and the retry, once each"
    );
}
