//! A history store written before idempotency answers were filed (it has no `answers_since`):
//! recovery files the answers of the records it replays, so a retry of a key answered before the
//! upgrade is still a replay and not a second run.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{balance, deposit, open, wallet, START_MS};
use crate::runtime::clock::SeededClock;
use crate::runtime::history::answers::ANSWERS_SINCE;
use crate::runtime::history::{HistoryStore, STORE_DIR};
use crate::runtime::IdempotencyKey;

fn key(name: &str) -> IdempotencyKey {
    IdempotencyKey {
        caller: "customer:1".into(),
        key: name.into(),
        fingerprint: [3; 32],
        legacy: None,
        route: 2,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn answers_missing_from_an_older_store_are_filed_from_the_log_on_open() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(5, START_MS));
    let engine = open(dir.path(), &clock);
    let wallet_id = wallet(&engine).await;
    let mut answers = Vec::new();
    for i in 0..5 {
        let reply = engine
            .execute_idempotent(deposit(wallet_id, None), key(&format!("k{i}")))
            .await
            .unwrap();
        answers.push(reply.response);
    }
    engine.shutdown().unwrap();

    // Make it look like a store of the previous release: every record filed, no answer.
    let store = HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    let covered = store.indexed_lsn().unwrap();
    assert!(covered > 5, "the store covers the keyed records");
    store
        .with(|open| {
            let mut writes = open.db.batch();
            for keyspace in &open.generations.keyspaces() {
                for item in keyspace.iter() {
                    writes.remove(keyspace, item.key()?.to_vec());
                }
            }
            writes.remove(&open.meta, ANSWERS_SINCE);
            writes.commit()?;
            Ok(())
        })
        .unwrap();
    assert_eq!(store.answer("customer:1", "k0").unwrap(), None);
    store.persist().unwrap();
    store.close();
    drop(store);

    let engine = open(dir.path(), &clock);
    assert_eq!(
        engine.history().store().answers_since().unwrap(),
        Some(0),
        "after the backfill the store holds every answer it covers"
    );
    for (i, first) in answers.iter().enumerate() {
        let again = engine
            .execute_idempotent(deposit(wallet_id, None), key(&format!("k{i}")))
            .await
            .unwrap();
        assert!(again.replayed, "k{i}");
        assert_eq!(&again.response, first);
    }
    assert_eq!(
        balance(&engine, wallet_id).await,
        Decimal::from(25),
        "no retry ran twice"
    );
    engine.shutdown().unwrap();
}

/// Answers filed outside the indexer (an older snapshot's) never replace an answer the store
/// holds for the same key that was decided later (the key reused after its window).
#[test]
fn an_older_answer_filed_at_open_keeps_the_newer_one() {
    use crate::runtime::journal::IdempotencyRecord;
    let dir = tempfile::tempdir().unwrap();
    let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
    let answer = |at_ms: i64, text: &str| IdempotencyRecord {
        caller: "customer:1".into(),
        key: "k".into(),
        fingerprint: [1; 32],
        at_ms,
        route: 2,
        response: Some(text.as_bytes().to_vec()),
        transfer_uuid: None,
    };
    store.file_answers(&[(9, answer(2_000, "new"))]).unwrap();
    store.file_answers(&[(0, answer(1_000, "old"))]).unwrap();
    let held = store.answer("customer:1", "k").unwrap().unwrap();
    assert_eq!(
        (held.at_ms, held.response.as_slice()),
        (2_000, b"new".as_slice())
    );
    // A newer one does replace an older one.
    store
        .file_answers(&[(12, answer(3_000, "newest"))])
        .unwrap();
    let held = store.answer("customer:1", "k").unwrap().unwrap();
    assert_eq!(held.response, b"newest");
}
