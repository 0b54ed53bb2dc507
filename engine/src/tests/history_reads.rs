//! History reads wait for what their wallet's records need, and nothing more
//! (`Engine::holder_for_history`, docs/history.md "Reading").

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use rust_decimal::Decimal;

use super::runtime_hardening::{
    create_wallet, created_wallet, customer_wallet, DebugRenderer, START_MS,
};
use super::{deposit, park_shard};
use crate::runtime::clock::SeededClock;
use crate::runtime::{Engine, EngineConfig};
use crate::shard::command::Page;
use crate::WalletId;

fn open(dir: &std::path::Path, clock: Arc<SeededClock>) -> Engine {
    let mut config = EngineConfig::new(dir);
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    Engine::open(config, clock, Arc::new(DebugRenderer))
        .unwrap()
        .0
}

/// Deposits into `wallet` and waits until the indexer has filed it.
async fn deposit_and_file(engine: &Engine, wallet: WalletId, amount: &str) {
    engine.execute(deposit(wallet, amount)).await.unwrap();
    engine
        .history()
        .caught_up(engine.wal_last_lsn())
        .await
        .unwrap();
}

/// The first page of `wallet`'s statement, failing with `why` if it takes a minute (a read
/// that waits for what it must not never finishes while filing is held or a shard parked).
async fn statement_within_a_minute(
    engine: &Engine,
    wallet: WalletId,
    why: &str,
) -> crate::shard::command::Paged<crate::ledger::view::EntryView> {
    tokio::time::timeout(
        std::time::Duration::from_secs(60),
        engine.ledger_page(wallet, Page::default(), None, None),
    )
    .await
    .expect(why)
    .unwrap()
    .unwrap()
}

/// A history read of a wallet waits for the newest record that created the wallet or changed
/// its history, and for no later one: with the indexer held back, a quiet wallet's statement is
/// served at once, while a wallet on the same shard with an acknowledged but unfiled deposit is
/// bound to that deposit's record (a wallet created meanwhile, to its creation), and its
/// statement shows the deposit once filing resumes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_history_read_waits_for_its_own_wallets_records_only() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(22, START_MS));
    let engine = open(dir.path(), clock);
    let quiet = customer_wallet(&engine, 1).await;
    let mut owner = 2;
    let busy = loop {
        let wallet = customer_wallet(&engine, owner).await;
        if engine.shard_of_wallet(wallet) == engine.shard_of_wallet(quiet) {
            break wallet;
        }
        owner += 1;
    };
    for wallet in [quiet, busy] {
        engine.execute(deposit(wallet, "1.00")).await.unwrap();
    }
    engine.evict_filed().await.unwrap();
    // The first read of a wallet asks its shard (and remembers the wallet's scope); the second
    // finds the bound without the shard (`HistoryBounds`): both must agree.
    let bound = |wallet: WalletId| {
        let engine = engine.clone();
        async move {
            let asked = engine.holder_for_history(wallet).await.unwrap();
            let remembered = engine.holder_for_history(wallet).await.unwrap();
            assert_eq!(asked, remembered, "wallet {wallet:?}");
            asked.1
        }
    };

    let held = engine.history().hold_filing();
    let indexed = engine.history().progress().indexed_lsn;
    engine.execute(deposit(busy, "2.50")).await.unwrap();
    let deposit_lsn = engine.wal_last_lsn();
    assert!(deposit_lsn > indexed);
    assert_eq!(
        engine.history().progress().indexed_lsn,
        indexed,
        "filing is held"
    );
    assert_eq!(bound(busy).await, deposit_lsn);
    assert!(bound(quiet).await <= indexed);
    // A wallet created meanwhile is bound to its creation: its facts are shown only once that
    // record is durable (filed).
    let fresh = customer_wallet(&engine, owner + 1).await;
    let created_lsn = engine.wal_last_lsn();
    assert!(created_lsn > deposit_lsn);
    assert_eq!(bound(fresh).await, created_lsn);
    // Served while the deposit is unfiled; before, the read waited for the durable LSN and this
    // never finished while filing was held (the timeout turns that into a failure).
    let page = statement_within_a_minute(
        &engine,
        quiet,
        "a quiet wallet's statement waits for no other wallet's records",
    )
    .await;
    assert_eq!(page.total, 1);

    drop(held);
    let page = engine
        .ledger_page(busy, Page::default(), None, None)
        .await
        .unwrap()
        .unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(page.records[0].amount, Decimal::new(250, 2));
    engine.shutdown().unwrap();
}

/// A wallet whose scope the engine remembers (a request's permission check looked it up) is
/// given its history bound without a message to its shard: with the shard's actor parked, so
/// that any message to it would wait, the bound of an acknowledged deposit is answered, and the
/// statement shows the deposit once it is filed. Before, every history read asked the shard,
/// behind every command queued there: under a transfer load that round trip was a statement
/// page's whole p99.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_remembered_wallets_history_read_sends_nothing_to_its_shard() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), Arc::new(SeededClock::new(24, START_MS)));
    // In a branch, so that every fact a page shows of its wallet is told apart from a default.
    let create = create_wallet(crate::ledger::wallet::OwnerType::Customer, 5, (3, 7));
    let wallet = created_wallet(&engine, create).await;
    engine.execute(deposit(wallet, "1.00")).await.unwrap();
    assert!(engine.wallet_scope(wallet).await.unwrap().is_some());
    let facts = engine
        .peek_shard(engine.shard_of_wallet(wallet), move |s| {
            s.wallet(wallet).map(crate::ledger::view::Holder::from)
        })
        .await
        .unwrap()
        .unwrap();
    assert_eq!((facts.business_id, facts.branch_id), (3, 7));

    let held = engine.history().hold_filing();
    engine.execute(deposit(wallet, "2.50")).await.unwrap();
    let deposit_lsn = engine.wal_last_lsn();
    assert!(engine.history().progress().indexed_lsn < deposit_lsn);
    // The shard forgets only bounds the indexer has filed.
    let shard = engine.shard_of_wallet(wallet);
    let addr = engine.addr(shard).unwrap();
    addr.send(crate::runtime::actor::EvictFiled).await.unwrap();
    assert_eq!(engine.inner.history_bounds.bound(wallet.0), deposit_lsn);
    let (release, parked) = park_shard(&engine, shard).await;
    let within = std::time::Duration::from_secs(60);
    let (holder, bound) = tokio::time::timeout(within, engine.holder_for_history(wallet))
        .await
        .expect("a remembered wallet's bound is answered while its shard is parked")
        .unwrap();
    assert_eq!(
        holder.unwrap(),
        facts,
        "the wallet's facts, as its shard has them"
    );
    assert_eq!(bound, deposit_lsn, "bound to the acknowledged deposit");

    drop(held);
    let page = statement_within_a_minute(
        &engine,
        wallet,
        "a remembered wallet's statement is served while its shard is parked",
    )
    .await;
    assert_eq!(page.total, 2);
    assert_eq!(page.records[0].amount, Decimal::new(250, 2));
    release.send(()).unwrap();
    parked.await.unwrap();
    // Once filed, every bound is forgotten: the map holds wallets with unfiled changes only.
    engine.evict_filed().await.unwrap();
    assert_eq!(engine.inner.history_bounds.len(), 0);
    engine.shutdown().unwrap();
}

/// Routing by uuid: the shard that holds the record wins over one whose store could not tell,
/// which in turn wins over the default (so a command there is refused as unavailable, not as
/// not found).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn routing_by_uuid_prefers_the_holder_to_a_shard_that_could_not_tell() {
    use crate::Presence;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), Arc::new(SeededClock::new(23, START_MS)));
    let uuid = crate::Uuid([5; 16]);
    let found = |has: fn(&crate::Shard, crate::Uuid) -> Presence| {
        let engine = engine.clone();
        async move { engine.find(uuid, has).await.unwrap() }
    };
    let holder_after_unknown = |s: &crate::Shard, _| match s.shard_index() {
        0 => Presence::Unknown,
        _ => Presence::Here,
    };
    assert_eq!(found(holder_after_unknown).await, 1);
    let unknown_only = |s: &crate::Shard, _| match s.shard_index() {
        1 => Presence::Unknown,
        _ => Presence::Absent,
    };
    assert_eq!(found(unknown_only).await, 1);
    assert_eq!(found(|_, _| Presence::Absent).await, 0);
    engine.shutdown().unwrap();
}

/// `verify_history` checks the page directory the counts now come from: a wallet whose
/// directory lost a block's key is reported (its count still reads right, by a longer scan),
/// and the store passes again once the key is back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_a_page_directory_that_lost_a_block() {
    use crate::runtime::history::pages::{directory_key, Paged};
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(29, START_MS));
    let engine = open(dir.path(), clock);
    let wallet = customer_wallet(&engine, 1).await;
    for _ in 0..3 {
        engine.execute(deposit(wallet, "1.00")).await.unwrap();
    }
    assert!(engine.verify_history().await.unwrap().is_ok());
    let key = directory_key(wallet.0, Paged::Entry, 0);
    let store = engine.history().store();
    let id = store
        .with(|open| {
            let id = open.pages.get(key)?.unwrap();
            open.pages.remove(key)?;
            Ok(id)
        })
        .unwrap();
    assert_eq!(store.counts(wallet).unwrap().entries, 3);
    let reported = engine.verify_history().await.unwrap().unwrap_err();
    assert!(
        reported.contains("lacks blocks of its entries"),
        "{reported}"
    );
    store.with(|open| Ok(open.pages.insert(key, id)?)).unwrap();
    assert!(engine.verify_history().await.unwrap().is_ok());
    engine.shutdown().unwrap();
}

/// `verify_history` checks what the directory keys name, not only that the blocks are there:
/// a page or a period's search trusts them. A fine key naming another entry than the 64th is
/// reported; the right one put back passes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_reports_a_fine_directory_key_that_names_another_entry() {
    use crate::runtime::history::pages::fine_key;
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), Arc::new(SeededClock::new(30, START_MS)));
    let wallet = customer_wallet(&engine, 1).await;
    for _ in 0..70 {
        engine.execute(deposit(wallet, "1.00")).await.unwrap();
    }
    assert!(engine.verify_history().await.unwrap().is_ok());
    let key = fine_key(wallet.0, 64);
    let store = engine.history().store();
    let right = store.with(|open| Ok(open.pages.get(key)?)).unwrap();
    let right = right.expect("the 64th entry's fine key");
    let wrong = u64::from_be_bytes(right.as_ref().try_into().unwrap()) + 1;
    store
        .with(|open| Ok(open.pages.insert(key, wrong.to_be_bytes())?))
        .unwrap();
    let reported = engine.verify_history().await.unwrap().unwrap_err();
    assert!(
        reported.contains("fine directory key for entry 64"),
        "{reported}"
    );
    store
        .with(|open| Ok(open.pages.insert(key, right)?))
        .unwrap();
    assert!(engine.verify_history().await.unwrap().is_ok());
    engine.shutdown().unwrap();
}

/// A batch that files a wallet's transactions and entries counts those on top of the
/// directory and keeps the count of holds a reader derived and remembered before it, so the
/// next hold page does not scan again. (A reader that remembers a count while the batch runs,
/// after the batch read the shared counts, is kept by the batch storing only the kinds it
/// counted; a reader whose scan the batch staled is the next test's.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_keeps_the_count_a_reader_remembered_for_a_kind_it_did_not_file() {
    use crate::runtime::history::pages::counted;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(31, START_MS));
    let engine = open(dir.path(), clock.clone());
    let wallet = customer_wallet(&engine, 1).await;
    engine.execute(deposit(wallet, "1.00")).await.unwrap();
    engine.shutdown().unwrap();

    let engine = open(dir.path(), clock);
    let slots = |engine: &Engine| {
        engine
            .history()
            .store()
            .with(|open| Ok(counted(open).get(&wallet.0).copied()))
            .unwrap()
    };
    assert_eq!(
        slots(&engine),
        None,
        "nothing counted since the store opened"
    );
    let holds = engine
        .holds_page(wallet, Page::default())
        .await
        .unwrap()
        .unwrap();
    assert_eq!(holds.total, 0);
    assert_eq!(
        slots(&engine),
        Some([None, None, Some(0)]),
        "the reader's count"
    );

    deposit_and_file(&engine, wallet, "2.00").await;
    assert_eq!(
        slots(&engine),
        Some([Some(2), Some(2), Some(0)]),
        "the batch's transactions and entries beside the reader's holds"
    );
    engine.shutdown().unwrap();
}

/// A page read's count staled by a batch committed between its scan and its remember does not
/// last: the batch stores its own count of the wallet right after its commit, and the reader's
/// count only fills an empty slot (`pages::remember`). The test seam
/// `pages::between_scan_and_remember` holds the read there while a deposit into the same
/// wallet is acknowledged and filed. Were the reader's count to replace the batch's, the next
/// page would show the stale total, and the indexer would number the wallet's later records
/// from it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_count_staled_between_a_reads_scan_and_its_remember_does_not_last() {
    use crate::runtime::history::pages::between_scan_and_remember;
    const WAIT: std::time::Duration = std::time::Duration::from_secs(60);
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(37, START_MS));
    let engine = open(dir.path(), clock.clone());
    let wallet = customer_wallet(&engine, 1).await;
    for _ in 0..3 {
        engine.execute(deposit(wallet, "1.00")).await.unwrap();
    }
    engine.shutdown().unwrap();

    // After a reopen nothing is counted: the first page read derives the count, 3.
    let engine = open(dir.path(), clock);
    let (reached, at_remember) = std::sync::mpsc::channel();
    let (release, go) = std::sync::mpsc::channel::<()>();
    engine
        .history()
        .store()
        .with(|open| {
            between_scan_and_remember::set(
                open,
                wallet.0,
                Box::new(move || {
                    reached.send(()).unwrap();
                    go.recv_timeout(WAIT).expect("the test lets the read go on");
                }),
            );
            Ok(())
        })
        .unwrap();
    let reader = tokio::spawn({
        let engine = engine.clone();
        async move { engine.transactions_page(wallet, Page::default()).await }
    });
    tokio::task::spawn_blocking(move || at_remember.recv_timeout(WAIT))
        .await
        .unwrap()
        .expect("the read reached the seam between its scan and its remember");
    // The read has scanned 3 transactions and not remembered them yet: a fourth is filed.
    deposit_and_file(&engine, wallet, "2.00").await;
    release.send(()).unwrap();
    let raced = reader.await.unwrap().unwrap().unwrap();
    assert_eq!(raced.total, 3, "the read answers what it scanned");

    let page = |engine: Engine| async move {
        engine
            .transactions_page(wallet, Page::default())
            .await
            .unwrap()
            .unwrap()
    };
    assert_eq!(
        page(engine.clone()).await.total,
        4,
        "the batch's count stands"
    );
    engine.execute(deposit(wallet, "3.00")).await.unwrap();
    let last = page(engine.clone()).await;
    assert_eq!(last.total, 5, "numbered from the batch's count");
    assert_eq!(last.records.len(), 5);
    assert!(engine.verify_history().await.unwrap().is_ok());
    engine.shutdown().unwrap();
}
