//! Sealed uuids (`values::sealed`): a transaction's or hold's uuid opens, under its shard's
//! key, to the record, so the history store keeps no uuid index entry for it; the shard finds
//! the record by opening the uuid and comparing the record's own. Uuids derived before the key
//! (a log of an older release) keep their index entries and are found through them.

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{customer_wallet, DebugRenderer, START_MS};
use super::{dec, transfer, Harness};
use crate::ledger::view::HoldView;
use crate::runtime::clock::SeededClock;
use crate::runtime::history::filing::{file_batch, ChainHeads, Filed};
use crate::runtime::history::HistoryStore;
use crate::shard::cold::Recall;
use crate::shard::command::{Details, MoneyMove, PlaceHold};
use crate::values::ids::UuidKind;
use crate::{Command, Event, Outcome, Rejection, Shard, Uuid, WalletId};

fn place(wallet_id: WalletId) -> Command {
    Command::PlaceHold(PlaceHold {
        wallet_id,
        amount: dec("5"),
        currency: super::cur("USD"),
        reason: None,
        expiry_minutes: None,
    })
}

fn transaction_uuid(outcome: Outcome) -> Uuid {
    match outcome {
        Outcome::Transaction(view) => view.uuid,
        other => panic!("unexpected {other:?}"),
    }
}

fn hold_uuid(outcome: Outcome) -> Uuid {
    match outcome {
        Outcome::Hold(HoldView { uuid, .. }) => uuid,
        other => panic!("unexpected {other:?}"),
    }
}

/// Files `events` as WAL record `lsn` of shard 0, by an indexer that starts with nothing in
/// memory (as after a restart: it reads the keys it needs from the store).
fn file_by_a_fresh_indexer(store: &HistoryStore, lsn: u64, events: Vec<Event>) {
    file_batch(
        store,
        &[Filed::events(lsn, events)],
        &mut ChainHeads::default(),
    )
    .unwrap();
}

/// The shard reads records that left memory from `store`.
fn evict_to(h: &mut Harness, store: &Arc<HistoryStore>) {
    h.shard.set_recall(Recall::Store(store.clone()));
    h.shard.evict_all();
    assert!(h.shard.index.transactions.is_empty() && h.shard.index.holds.is_empty());
}

#[test]
fn records_with_sealed_uuids_are_found_without_an_index_entry() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
    let mut h = Harness::new();
    let a = h.create(1, "USD");
    let b = h.create(2, "USD");
    h.deposit(a, "100");
    let sent = transaction_uuid(h.ok(Command::Transfer(transfer(a, b, "10", "USD"))));
    let hold = hold_uuid(h.ok(place(a)));
    // A released hold leaves memory like any record (an active one is hot state).
    h.ok(Command::ReleaseHold { hold_uuid: hold });
    let key = h.shard.uuid_key.expect("the first deposit chose the key");
    let (sent_wallet, sent_id) = key.open_as(UuidKind::Transaction, sent).unwrap();
    assert_eq!(sent_wallet, a.0, "the transfer's debit is a's");

    file_by_a_fresh_indexer(&store, 1, h.log.clone());
    assert_eq!(
        store.uuid_index_len().unwrap(),
        (0, 0),
        "no uuid was filed to an index"
    );
    evict_to(&mut h, &store);

    assert_eq!(
        h.shard.locate_transaction(sent).unwrap(),
        Some((a, crate::TransactionId(sent_id)))
    );
    assert_eq!(h.shard.transaction_view(sent).unwrap().uuid, sent);
    assert_eq!(h.shard.hold_view(hold).unwrap().uuid, hold);

    // A uuid that opens to no record finds nothing: an id not minted yet, another wallet's
    // id, a changed bit (it fails the check bits).
    let unminted = key
        .seal(UuidKind::Transaction, a.0, sent_id + 1_000)
        .unwrap();
    let elsewhere = key.seal(UuidKind::Transaction, b.0, sent_id).unwrap();
    let mut flipped = sent;
    flipped.0[15] ^= 1;
    for forged in [unminted, elsewhere, flipped] {
        assert_eq!(h.shard.locate_transaction(forged).unwrap(), None);
        assert_eq!(
            h.shard.transaction_view(forged),
            Err(Rejection::NotFound("transaction"))
        );
    }
    assert_eq!(h.shard.locate_hold(sent).unwrap(), None);

    // Commands that name a record by uuid find it in the store.
    h.ok(Command::Reverse {
        transaction_uuid: sent,
        reason: "sent twice".into(),
    });
    assert_eq!(h.balance(a), dec("100"));
    assert_eq!(
        h.reject(Command::ReleaseHold { hold_uuid: hold }),
        Rejection::InvalidState("hold is no longer active")
    );
}

/// Rewrites a log as a release before sealed uuids wrote it: no key, derived uuids.
fn as_an_older_release(log: &[Event]) -> Vec<Event> {
    let entropy = [42u8; 32];
    log.iter()
        .filter(|event| !matches!(event, Event::UuidKeyChosen { .. }))
        .cloned()
        .map(|mut event| {
            match &mut event {
                Event::TransactionRecorded { transaction, .. } => {
                    transaction.uuid =
                        Uuid::derive(&entropy, 0, UuidKind::Transaction, transaction.id.0);
                }
                Event::HoldPlaced { hold, .. } => {
                    hold.uuid = Uuid::derive(&entropy, 0, UuidKind::Hold, hold.id.0);
                }
                _ => {}
            }
            event
        })
        .collect()
}

#[test]
fn uuids_derived_before_the_key_are_found_through_the_index() {
    let dir = tempfile::tempdir().unwrap();
    let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
    let mut before = Harness::new();
    let a = before.create(1, "USD");
    before.deposit(a, "100");
    let hold = hold_uuid(before.ok(place(a)));
    before.ok(Command::ReleaseHold { hold_uuid: hold });
    let old_log = as_an_older_release(&before.log);
    let mut shard = Shard::new(0, 1).unwrap();
    shard.apply_all(&old_log).unwrap();
    assert!(shard.uuid_key.is_none());
    let (old_deposit, old_hold) = {
        let wallet = shard.wallet(a).unwrap();
        (
            wallet.transactions().first().unwrap().uuid,
            wallet.holds().first().unwrap().uuid,
        )
    };
    file_by_a_fresh_indexer(&store, 1, old_log);
    assert_eq!(store.uuid_index_len().unwrap(), (1, 1));

    // This release on that state: the next transaction chooses the key and is sealed. Each
    // batch is filed by a fresh indexer, as after a restart: the first learns the key from the
    // event, the second reads it back from the store.
    let mut h = Harness::with_shard(shard);
    h.deposit(a, "1000");
    let first = h.log.clone();
    assert!(first
        .iter()
        .any(|event| matches!(event, Event::UuidKeyChosen { .. })));
    file_by_a_fresh_indexer(&store, 2, first);
    let mark = h.log.len();
    let newest = transaction_uuid(h.ok(super::withdraw(a, "2")));
    file_by_a_fresh_indexer(&store, 3, h.log[mark..].to_vec());
    assert_eq!(
        store.uuid_index_len().unwrap(),
        (1, 1),
        "only the derived uuids are indexed"
    );

    evict_to(&mut h, &store);
    assert_eq!(
        h.shard.transaction_view(old_deposit).unwrap().uuid,
        old_deposit
    );
    assert_eq!(h.shard.hold_view(old_hold).unwrap().uuid, old_hold);
    assert_eq!(h.shard.transaction_view(newest).unwrap().uuid, newest);
    // The key seals (a, the old deposit's id) to a uuid that opens to that record, whose own
    // uuid is the derived one: the comparison refuses it.
    let key = h.shard.uuid_key.unwrap();
    let (_, old_id) = h.shard.locate_transaction(old_deposit).unwrap().unwrap();
    let sealed_for_old = key.seal(UuidKind::Transaction, a.0, old_id.0).unwrap();
    assert_ne!(sealed_for_old, old_deposit);
    assert_eq!(h.shard.locate_transaction(sealed_for_old).unwrap(), None);
    h.ok(Command::Reverse {
        transaction_uuid: old_deposit,
        reason: "old".into(),
    });
}

/// Through the engine on two shards: each shard chooses its own key; a cross-shard transfer's
/// debit and credit are sealed by the shards of their wallets and found there after they left
/// memory; the keys survive a restart from a snapshot, so uuids sealed before it still open and
/// no shard chooses another key.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sealed_uuids_open_on_their_own_shard_across_a_restart_from_a_snapshot() {
    use crate::runtime::{Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(8, START_MS));
    let open = |clock: &Arc<SeededClock>| {
        let mut config = EngineConfig::new(dir.path());
        config.shard_count = 2;
        config.snapshot_every_records = 0;
        Engine::open(config, clock.clone(), Arc::new(DebugRenderer))
            .unwrap()
            .0
    };
    let engine = open(&clock);
    let payer = customer_wallet(&engine, 1).await;
    let mut owner = 2;
    let payee = loop {
        let wallet = customer_wallet(&engine, owner).await;
        if engine.shard_of_wallet(wallet) != engine.shard_of_wallet(payer) {
            break wallet;
        }
        owner += 1;
    };
    let deposit = Command::Deposit(MoneyMove {
        wallet_id: payer,
        amount: Decimal::from(50),
        currency: None,
        details: Details::default(),
    });
    let deposited = transaction_uuid(engine.execute(deposit).await.unwrap());
    let mut args = transfer(payer, payee, "7", "YER");
    args.currency = super::cur("YER");
    let debit = transaction_uuid(engine.execute(Command::Transfer(args)).await.unwrap());
    // Newest first, from memory or the store: the indexer may already have filed the credit
    // and the shard dropped it from memory.
    let credit = engine
        .transactions_page(payee, crate::Page::new(1, 1).unwrap())
        .await
        .unwrap()
        .unwrap()
        .records[0]
        .uuid;
    let keys = engine.read_all(|s| s.uuid_key).await.unwrap();
    assert!(
        keys.iter().all(Option::is_some) && keys[0] != keys[1],
        "one key per shard"
    );
    engine.snapshot().await.unwrap();
    engine.shutdown().unwrap();

    let engine = open(&clock);
    assert_eq!(engine.read_all(|s| s.uuid_key).await.unwrap(), keys);
    let more = Command::Deposit(MoneyMove {
        wallet_id: payee,
        amount: Decimal::from(5),
        currency: None,
        details: Details::default(),
    });
    let later = transaction_uuid(engine.execute(more).await.unwrap());
    assert_eq!(engine.read_all(|s| s.uuid_key).await.unwrap(), keys);
    engine.evict_filed().await.unwrap();
    for (wallet, uuid) in [
        (payer, deposited),
        (payer, debit),
        (payee, credit),
        (payee, later),
    ] {
        let found = engine
            .read_wallet(wallet, move |s| s.transaction_view(uuid))
            .await
            .unwrap()
            .unwrap();
        assert_eq!((found.uuid, found.wallet_id), (uuid, wallet));
        let elsewhere = engine
            .read_wallet(if wallet == payer { payee } else { payer }, move |s| {
                s.locate_transaction(uuid)
            })
            .await
            .unwrap()
            .unwrap();
        assert_eq!(elsewhere, None, "the other shard's key does not open it");
    }
    assert_eq!(engine.history().store().uuid_index_len().unwrap(), (0, 0));
    engine.check_invariants().await.unwrap();
    engine.shutdown().unwrap();
}
