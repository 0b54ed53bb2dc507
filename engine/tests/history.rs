//! History on disk: what the store shows equals what the shards hold, after a seeded mix of every
//! ledger command (deposits, withdrawals, transfers on one shard and across two, holds placed,
//! captured and released, refunds, reversals), after a clean reopen, and after the store is lost
//! and refiled from the log.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use engine::ledger::view::{EntryView, HoldView, TransactionView};
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::history::STORE_DIR;
use engine::runtime::{Engine, EngineConfig, Renderer};
use engine::shard::command::{
    CaptureHold, CreateWallet, Details, MoneyMove, PlaceHold, Refund, TransferArgs,
};
use engine::{Command, Currency, Outcome, Page, Paged, Rejection, Uuid, WalletId};
use rust_decimal::Decimal;

struct NoRenderer;

impl Renderer for NoRenderer {
    fn render(&self, _: u16, _: &Result<Outcome, Rejection>) -> Vec<u8> {
        Vec::new()
    }
}

fn open(dir: &std::path::Path, clock: Arc<SeededClock>) -> Engine {
    let mut config = EngineConfig::new(dir);
    config.shard_count = 2;
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.snapshot_every_records = 0;
    Engine::open(config, clock, Arc::new(NoRenderer)).unwrap().0
}

fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

/// A small deterministic generator (the test's only source of choices).
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn amount(&mut self) -> Decimal {
        Decimal::new(i64::try_from(1 + self.below(5_000)).unwrap(), 2)
    }
}

fn money(wallet_id: WalletId, amount: Decimal) -> MoneyMove {
    MoneyMove {
        wallet_id,
        amount,
        currency: None,
        details: Details::default(),
    }
}

/// A customer's primary YER wallet.
async fn create_wallet(engine: &Engine, owner_id: u64) -> WalletId {
    create_owned_wallet(engine, OwnerType::Customer, owner_id, 1).await
}

/// A primary YER wallet of `owner_type` `owner_id` in business `business_id`.
async fn create_owned_wallet(
    engine: &Engine,
    owner_type: OwnerType,
    owner_id: u64,
    business_id: u64,
) -> WalletId {
    let created = engine
        .execute(Command::CreateWallet(CreateWallet {
            owner_type,
            owner_id,
            currency: yer(),
            wallet_type: WalletType::Primary,
            business_id,
            branch_id: 0,
            meta: None,
        }))
        .await
        .unwrap();
    let Outcome::Wallet(wallet) = created else {
        panic!("{created:?}")
    };
    wallet.id
}

/// Runs `steps` seeded commands; refusals (insufficient funds, closed holds) are part of the mix.
async fn workload(
    engine: &Engine,
    clock: &SeededClock,
    seed: u64,
    first_owner: u64,
    steps: usize,
) -> Vec<WalletId> {
    let mut rng = Rng(seed);
    let mut wallets = Vec::new();
    for owner in first_owner..first_owner + 8 {
        wallets.push(create_wallet(engine, owner).await);
    }
    let mut debits: Vec<Uuid> = Vec::new();
    let mut holds: Vec<Uuid> = Vec::new();
    for _ in 0..steps {
        clock.advance_ms(1_000);
        let a = wallets[rng.below(8) as usize];
        let b = wallets[rng.below(8) as usize];
        let command = match rng.below(9) {
            0 | 1 => Command::Deposit(money(a, rng.amount() * Decimal::from(10))),
            2 => Command::Withdraw(money(a, rng.amount())),
            3 | 4 if a != b => Command::Transfer(TransferArgs {
                source_wallet_id: a,
                target_wallet_id: b,
                amount: rng.amount(),
                currency: yer(),
                details: Details::default(),
            }),
            5 => Command::PlaceHold(PlaceHold {
                wallet_id: a,
                amount: rng.amount(),
                currency: yer(),
                reason: Some("test".into()),
                expiry_minutes: Some(60),
            }),
            6 if !holds.is_empty() => {
                let hold_uuid = holds[rng.below(holds.len() as u64) as usize];
                if rng.below(2) == 0 {
                    Command::ReleaseHold { hold_uuid }
                } else {
                    Command::CaptureHold(CaptureHold {
                        hold_uuid,
                        amount: None,
                        counter_wallet_id: None,
                        details: Details::default(),
                    })
                }
            }
            7 if !debits.is_empty() => Command::Refund(Refund {
                original_transaction_uuid: debits[rng.below(debits.len() as u64) as usize],
                amount: Decimal::new(1, 2),
                reason: None,
                details: Details::default(),
            }),
            8 if !debits.is_empty() => Command::Reverse {
                transaction_uuid: debits[rng.below(debits.len() as u64) as usize],
                reason: "test".into(),
            },
            _ => Command::Deposit(money(b, rng.amount())),
        };
        match engine.execute(command).await {
            Ok(Outcome::Transaction(t)) if t.direction.as_str() == "debit" => debits.push(t.uuid),
            Ok(Outcome::Hold(hold)) => holds.push(hold.uuid),
            Ok(_) | Err(engine::runtime::EngineError::Rejected(_)) => {}
            Err(other) => panic!("{other}"),
        }
    }
    wallets
}

type Pages = (
    Paged<TransactionView>,
    Paged<EntryView>,
    Paged<EntryView>,
    Paged<HoldView>,
);

/// Every page of one wallet as the store shows it.
async fn from_store(engine: &Engine, wallet: WalletId, page: Page, day: (i64, i64)) -> Pages {
    (
        engine
            .transactions_page(wallet, page)
            .await
            .unwrap()
            .unwrap(),
        engine
            .ledger_page(wallet, page, None, None)
            .await
            .unwrap()
            .unwrap(),
        engine
            .ledger_page(wallet, page, Some(day.0), Some(day.1))
            .await
            .unwrap()
            .unwrap(),
        engine.holds_page(wallet, page).await.unwrap().unwrap(),
    )
}

/// The whole history as a reference: shards that keep every record in memory (no store), rebuilt
/// from the engine's log. The engine's own shards keep hot state only.
fn reference(dir: &std::path::Path) -> Vec<engine::Shard> {
    let mut shards: Vec<engine::Shard> =
        (0..2).map(|i| engine::Shard::new(i, 2).unwrap()).collect();
    wal::reader::read_from(&dir.join("wal"), 256 * 1024, 1, &mut |record| {
        let entry = engine::runtime::journal::JournalEntry::decode(record.payload).unwrap();
        shards[entry.shard as usize]
            .apply_all(&entry.events)
            .unwrap();
        Ok(())
    })
    .unwrap();
    for shard in &shards {
        shard.check_invariants().unwrap();
    }
    shards
}

/// The same pages from the reference's memory.
fn from_reference(
    shards: &[engine::Shard],
    wallet: WalletId,
    page: Page,
    day: (i64, i64),
) -> Pages {
    let s = shards.iter().find(|s| s.owns(wallet)).unwrap();
    (
        s.transactions_page(wallet, page).unwrap(),
        s.ledger_page(wallet, page, None, None).unwrap(),
        s.ledger_page(wallet, page, Some(day.0), Some(day.1))
            .unwrap(),
        s.holds_page(wallet, page).unwrap(),
    )
}

/// A window over the middle of the first wallet's ledger, to exercise the date index.
async fn middle_window(engine: &Engine, wallet: WalletId) -> (i64, i64) {
    let all = engine
        .ledger_page(wallet, Page::new(1, 100).unwrap(), None, None)
        .await
        .unwrap()
        .unwrap();
    let times: Vec<i64> = all.records.iter().map(|e| e.created_at_ms).collect();
    let (low, high) = (times[times.len() * 3 / 4], times[times.len() / 4]);
    assert!(low < high, "the clock moves between commands");
    (low, high)
}

async fn assert_store_matches_shards(
    engine: &Engine,
    dir: &std::path::Path,
    wallets: &[WalletId],
    moment: &str,
) {
    let compared = engine.verify_history().await.unwrap();
    assert!(
        compared.as_ref().is_ok_and(|count| *count > 0),
        "{moment}: {compared:?}"
    );
    let reference = reference(dir);
    let day = middle_window(engine, wallets[0]).await;
    for &wallet in wallets {
        for (number, per_page) in [(1, 100), (2, 7), (3, 5)] {
            let page = Page::new(number, per_page).unwrap();
            let stored = from_store(engine, wallet, page, day).await;
            let whole = from_reference(&reference, wallet, page, day);
            assert_eq!(
                stored, whole,
                "{moment}: wallet {wallet:?}, page {number} of {per_page}"
            );
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_store_shows_what_the_shards_hold_through_reopen_and_refiling() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(11, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let wallets = workload(&engine, &clock, 0x9E37_79B9_7F4A_7C15, 1, 600).await;
    let entries: u64 = {
        let w = wallets[0];
        engine
            .ledger_page(w, Page::new(1, 1).unwrap(), None, None)
            .await
            .unwrap()
            .unwrap()
            .total
    };
    assert!(entries > 10, "the workload posted to wallet 1 ({entries})");
    // The mix reached every kind of change the store must mirror.
    let (mut reversed, mut refunded, mut closed_holds, mut in_day) = (0, 0, 0, 0);
    let day = middle_window(&engine, wallets[0]).await;
    for &wallet in &wallets {
        let (transactions, _, dated, holds) =
            from_store(&engine, wallet, Page::new(1, 100).unwrap(), day).await;
        reversed += transactions
            .records
            .iter()
            .filter(|t| t.reversed_by_transaction_id.is_some())
            .count();
        refunded += transactions
            .records
            .iter()
            .filter(|t| t.refunded_amount > Decimal::ZERO)
            .count();
        closed_holds += holds
            .records
            .iter()
            .filter(|h| h.closed_at_ms.is_some())
            .count();
        in_day += dated.records.len();
    }
    assert!(
        reversed > 0 && refunded > 0 && closed_holds > 0 && in_day > 0,
        "reversed {reversed}, refunded {refunded}, closed holds {closed_holds}, dated {in_day}"
    );
    assert_store_matches_shards(&engine, dir.path(), &wallets, "live").await;
    // What the indexer filed leaves memory: the shards keep hot state only (invariant 10).
    let total: u64 = engine
        .read_all(|s| {
            s.wallets()
                .map(|w| {
                    let c = w.counts();
                    c.transactions + c.entries + c.holds
                })
                .sum::<u64>()
        })
        .await
        .unwrap()
        .into_iter()
        .sum();
    let held = engine.evict_filed().await.unwrap();
    let active_holds: usize = engine
        .read_all(|s| s.active_hold_count())
        .await
        .unwrap()
        .into_iter()
        .sum();
    assert_eq!(
        held, active_holds,
        "of {total} records, only the active holds stay in memory once filed"
    );
    engine.shutdown().unwrap();

    // A clean reopen: the store is as the indexer left it at its last checkpoint.
    let engine = open(dir.path(), clock.clone());
    assert_store_matches_shards(&engine, dir.path(), &wallets, "after reopen").await;
    let more = workload(&engine, &clock, 77, 100, 200).await;
    assert_store_matches_shards(&engine, dir.path(), &more, "after more work").await;
    engine.shutdown().unwrap();

    // The store lost entirely: refiled from the log on open.
    std::fs::remove_dir_all(dir.path().join(STORE_DIR)).unwrap();
    let engine = open(dir.path(), clock);
    assert_store_matches_shards(&engine, dir.path(), &wallets, "after refiling").await;
    assert_store_matches_shards(&engine, dir.path(), &more, "after refiling").await;
    engine.shutdown().unwrap();
}

/// Pages deep in a wallet's history come through the store's page directory (one key per 1,024
/// records, `runtime::history::pages`): every page of a wallet with more than two blocks of
/// transactions, entries and holds equals the reference's, across block boundaries and at
/// page sizes that do not divide a block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deep_pages_across_directory_blocks_equal_the_reference() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(12, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    const DEPOSITS: i64 = 2_100;
    const HOLDS: i64 = 2_050;
    for cents in 1..=DEPOSITS {
        deposit(&engine, &clock, wallet, cents).await;
    }
    for cents in 1..=HOLDS {
        engine
            .execute(Command::PlaceHold(PlaceHold {
                wallet_id: wallet,
                amount: Decimal::new(cents, 4).round_dp(2).max(Decimal::new(1, 2)),
                currency: yer(),
                reason: None,
                expiry_minutes: Some(60),
            }))
            .await
            .unwrap();
    }
    let reference = reference(dir.path());
    let day = middle_window(&engine, wallet).await;
    let mut pages_compared = 0;
    for per_page in [100, 37] {
        let last = (DEPOSITS as u32).div_ceil(per_page) + 1;
        for number in 1..=last {
            let page = Page::new(number, per_page).unwrap();
            let stored = from_store(&engine, wallet, page, day).await;
            let whole = from_reference(&reference, wallet, page, day);
            assert_eq!(stored, whole, "page {number} of {per_page}");
            pages_compared += 1;
        }
    }
    let (transactions, entries, _, holds) =
        from_store(&engine, wallet, Page::new(1, 1).unwrap(), day).await;
    assert_eq!(
        (transactions.total, entries.total, holds.total),
        (DEPOSITS as u64, DEPOSITS as u64, HOLDS as u64)
    );
    assert_eq!(pages_compared, 22 + 58, "every page of both sizes");
    engine.shutdown().unwrap();
}

async fn deposit(engine: &Engine, clock: &SeededClock, wallet: WalletId, cents: i64) {
    clock.advance_ms(10);
    engine
        .execute(Command::Deposit(money(wallet, Decimal::new(cents, 2))))
        .await
        .unwrap();
}

/// After a reopen the indexer knows no wallet's counts: a page read derives them from the page
/// directory (and remembers them, `pages::count_for_read`), and the indexer then numbers the
/// wallet's next records, and the directory key of the block they start, from that memory.
/// Every page across the old and new blocks equals the reference, and `verify_history` finds
/// the counts and the directory right: a remembered count one off misplaces block 2's key.
/// (That reads remember at all is `pages.rs`'s unit test; this one checks what the indexer
/// files after them.)
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn records_filed_after_a_reopen_and_a_read_are_numbered_right() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(13, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    const BEFORE: i64 = 1_030;
    const AFTER: i64 = 1_100;
    for cents in 1..=BEFORE {
        deposit(&engine, &clock, wallet, cents).await;
    }
    engine.shutdown().unwrap();

    let engine = open(dir.path(), clock.clone());
    let day = middle_window(&engine, wallet).await;
    let (transactions, entries, _, holds) =
        from_store(&engine, wallet, Page::new(1, 10).unwrap(), day).await;
    assert_eq!(
        (transactions.total, entries.total, holds.total),
        (BEFORE as u64, BEFORE as u64, 0)
    );
    for cents in 1..=AFTER {
        deposit(&engine, &clock, wallet, BEFORE + cents).await;
    }
    let compared = engine.verify_history().await.unwrap();
    assert!(compared.is_ok(), "{compared:?}");
    let reference = reference(dir.path());
    let total = (BEFORE + AFTER) as u64;
    let per_page = 100;
    for number in 1..=(total as u32).div_ceil(per_page) {
        let page = Page::new(number, per_page).unwrap();
        let stored = from_store(&engine, wallet, page, day).await;
        let whole = from_reference(&reference, wallet, page, day);
        assert_eq!(stored, whole, "page {number} of {per_page}");
    }
    let (transactions, entries, _, _) =
        from_store(&engine, wallet, Page::new(1, 1).unwrap(), day).await;
    assert_eq!((transactions.total, entries.total), (total, total));
    engine.shutdown().unwrap();
}

/// A clean shutdown writes the store's memtables out: the next open replays none of the store's
/// own journal (which was most of a restart after a minute of load), and the history is there.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_clean_shutdown_leaves_no_store_journal_to_replay() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(13, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    for cents in 1..=300 {
        engine
            .execute(Command::Deposit(money(wallet, Decimal::new(cents, 2))))
            .await
            .unwrap();
    }
    engine.shutdown().unwrap();
    let store =
        engine::runtime::history::HistoryStore::open(&dir.path().join(STORE_DIR), 1 << 20).unwrap();
    assert_eq!(
        store.memory().unwrap().memtables,
        0,
        "the reopened store replayed journal into its memtables"
    );
    assert_eq!(store.counts(wallet).unwrap().entries, 300);
}

/// `Engine::verify_integrity` checks the entries the store holds off the shard's thread and the
/// rest on it: every entry is counted once, whether it was filed and evicted, filed and still in
/// memory, or not filed yet, and the balance recomputed from all of them is the wallet's.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn verify_integrity_counts_filed_and_unfiled_entries_once() {
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(14, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let wallet = create_wallet(&engine, 1).await;
    let verify = |engine: Engine| async move {
        match engine.verify_integrity(wallet).await.unwrap() {
            Outcome::Integrity(report) => report,
            other => panic!("{other:?}"),
        }
    };
    for cents in 1..=50 {
        engine
            .execute(Command::Deposit(money(wallet, Decimal::new(cents, 2))))
            .await
            .unwrap();
    }
    engine.evict_filed().await.unwrap();
    let report = verify(engine.clone()).await;
    assert!(report.valid, "{report:?}");
    assert_eq!(report.entries_checked, 50);
    assert_eq!(report.ledger_balance, Some(Decimal::new(1275, 2)));
    for cents in 51..=75 {
        engine
            .execute(Command::Deposit(money(wallet, Decimal::new(cents, 2))))
            .await
            .unwrap();
    }
    let report = verify(engine.clone()).await;
    assert!(report.valid, "{report:?}");
    assert_eq!(report.entries_checked, 75);
    assert_eq!(report.ledger_balance, Some(Decimal::new(2850, 2)));
    assert_eq!(report.cached_balance, Decimal::new(2850, 2));
    assert!(matches!(
        engine.verify_integrity(WalletId(999_999)).await,
        Err(engine::runtime::EngineError::Rejected(Rejection::NotFound(
            _
        )))
    ));
    engine.shutdown().unwrap();
}

/// Every payment list and the fee report of every shard: what the engine's shards show (memory
/// and store merged) against the whole-history reference.
async fn assert_payments_match(engine: &Engine, dir: &std::path::Path, merchants: &[WalletId]) {
    use engine::commerce::payment::PaymentStatus;
    use engine::shard::commerce::query::PaymentFilter;
    use engine::shard::commerce::report::ReportRange;
    let compared = engine.verify_history().await.unwrap();
    assert!(compared.is_ok(), "{compared:?}");
    // The report aggregates recounted from the records, most of the payments and payouts only
    // in the store by now (`replay --verify` runs the same check).
    let recounted = engine.verify_reports().await.unwrap();
    assert!(recounted.is_ok(), "{recounted:?}");
    let reference = reference(dir);
    let mut filters = vec![PaymentFilter::default()];
    for status in [
        PaymentStatus::Pending,
        PaymentStatus::Completed,
        PaymentStatus::PartiallyRefunded,
        PaymentStatus::Refunded,
        PaymentStatus::Cancelled,
        PaymentStatus::Failed,
    ] {
        filters.push(PaymentFilter {
            status: Some(status),
            ..PaymentFilter::default()
        });
    }
    for &merchant in merchants {
        filters.push(PaymentFilter {
            merchant_wallet_id: Some(merchant),
            ..PaymentFilter::default()
        });
    }
    filters.push(PaymentFilter {
        merchant_id: Some(7),
        status: Some(PaymentStatus::Completed),
        ..PaymentFilter::default()
    });
    for filter in filters {
        for (number, per_page) in [(1, 100), (2, 7), (5, 3)] {
            let page = Page::new(number, per_page).unwrap();
            let live = engine
                .read_all(move |s| s.payments_page(&filter, page).unwrap())
                .await
                .unwrap();
            let whole: Vec<_> = reference
                .iter()
                .map(|s| s.payments_page(&filter, page).unwrap())
                .collect();
            assert_eq!(live, whole, "{filter:?}, page {number} of {per_page}");
        }
    }
    let range = ReportRange {
        from_ms: 1_700_000_000_000,
        to_ms: 1_800_000_000_000,
        business_id: Some(7),
        currency: None,
    };
    let live = engine
        .read_all(move |s| s.fee_report(&range).unwrap())
        .await
        .unwrap();
    let whole: Vec<_> = reference
        .iter()
        .map(|s| s.fee_report(&range).unwrap())
        .collect();
    assert_eq!(live, whole, "fee report");
    assert!(whole.iter().any(|rows| !rows.is_empty()), "fees collected");
    assert_payouts_match(engine, &reference, merchants).await;
}

/// Creates a payout of `wallet` and takes it a seeded way through its life cycle: left pending,
/// approved, rejected, cancelled, executed, then paid or failed.
async fn payout_step(engine: &Engine, rng: &mut Rng, wallet: WalletId) {
    use engine::shard::command::{CreatePayout, PayoutProviderResult};
    let created = engine
        .execute(Command::CreatePayout(CreatePayout {
            wallet_id: wallet,
            amount: rng.amount(),
            currency: yer(),
            payout_method: "bank".into(),
            payout_destination: None,
            description: None,
            idempotency_key: None,
            created_by: 1,
        }))
        .await
        .unwrap();
    let Outcome::Payout(payout) = created else {
        panic!("{created:?}")
    };
    let payout_id = payout.id;
    let fate = rng.below(7);
    let mut steps = Vec::new();
    match fate {
        0 => {}
        1 => steps.push(Command::RejectPayout {
            payout_id,
            by: 2,
            reason: "no".into(),
        }),
        2 => steps.push(Command::CancelPayout { payout_id, by: 2 }),
        _ => steps.push(Command::ApprovePayout {
            payout_id,
            by: 2,
            notes: None,
        }),
    }
    if fate >= 4 {
        steps.push(Command::ExecutePayout { payout_id, by: 2 });
    }
    if fate >= 5 {
        steps.push(Command::PayoutProviderResult(PayoutProviderResult {
            payout_id,
            succeeded: fate == 5,
            provider_ref: None,
        }));
    }
    for step in steps {
        engine.execute(step).await.unwrap();
    }
}

/// Every payout list and the payout report of every shard against the reference.
async fn assert_payouts_match(engine: &Engine, reference: &[engine::Shard], wallets: &[WalletId]) {
    use engine::shard::commerce::query::PayoutFilter;
    use engine::shard::commerce::report::{ReportRange, PAYOUT_STATUSES};
    let mut filters = vec![PayoutFilter::default()];
    for status in PAYOUT_STATUSES {
        filters.push(PayoutFilter {
            status: Some(status),
            ..PayoutFilter::default()
        });
    }
    for &wallet in wallets {
        filters.push(PayoutFilter {
            wallet_id: Some(wallet),
            business_id: Some(7),
            ..PayoutFilter::default()
        });
    }
    for filter in filters {
        for (number, per_page) in [(1, 100), (2, 7)] {
            let page = Page::new(number, per_page).unwrap();
            let live = engine
                .read_all(move |s| s.payouts_page(&filter, page).unwrap())
                .await
                .unwrap();
            let whole: Vec<_> = reference
                .iter()
                .map(|s| s.payouts_page(&filter, page).unwrap())
                .collect();
            assert_eq!(live, whole, "{filter:?}, page {number} of {per_page}");
            // The engine's list over every shard, read from the store: the shards' whole
            // lists merged newest first (as the API merged them before).
            let mut merged: Vec<_> = reference
                .iter()
                .flat_map(|s| {
                    s.payouts_page(&filter, Page::first(10_000))
                        .unwrap()
                        .records
                })
                .collect();
            merged.sort_by_key(|view| std::cmp::Reverse((view.created_at_ms, view.id.0)));
            let from_store = engine.payouts_page(filter, page).await.unwrap();
            assert_eq!(from_store.total, merged.len() as u64, "{filter:?}");
            assert_eq!(
                from_store.records,
                merged
                    .into_iter()
                    .skip(page.offset())
                    .take(per_page as usize)
                    .collect::<Vec<_>>(),
                "{filter:?}, page {number} of {per_page}, from the store"
            );
        }
    }
    let range = ReportRange {
        from_ms: 1_700_000_000_000,
        to_ms: 1_800_000_000_000,
        business_id: None,
        currency: None,
    };
    let live = engine
        .read_all(move |s| s.payout_report(&range).unwrap())
        .await
        .unwrap();
    let whole: Vec<_> = reference
        .iter()
        .map(|s| s.payout_report(&range).unwrap())
        .collect();
    assert_eq!(live, whole, "payout report");
}

/// Payouts in the shards' memory, and how many of them are not final.
async fn payouts_held(engine: &Engine) -> (usize, u64) {
    use engine::commerce::payout::PayoutStatus;
    use engine::shard::commerce::query::PayoutFilter;
    let held: usize = engine
        .read_all(|s| s.payouts_in_memory())
        .await
        .unwrap()
        .into_iter()
        .sum();
    let open: u64 = engine
        .read_all(|s| {
            [
                PayoutStatus::Pending,
                PayoutStatus::Approved,
                PayoutStatus::Executed,
            ]
            .into_iter()
            .map(|status| {
                let filter = PayoutFilter {
                    status: Some(status),
                    ..PayoutFilter::default()
                };
                s.payouts_page(&filter, Page::new(1, 1).unwrap())
                    .unwrap()
                    .total
            })
            .sum::<u64>()
        })
        .await
        .unwrap()
        .into_iter()
        .sum();
    (held, open)
}

/// Payments in the shards' memory, and how many of them are pending.
async fn payments_held(engine: &Engine) -> (usize, u64) {
    use engine::commerce::payment::PaymentStatus;
    use engine::shard::commerce::query::PaymentFilter;
    let held: usize = engine
        .read_all(|s| s.payments_in_memory())
        .await
        .unwrap()
        .into_iter()
        .sum();
    let pending: u64 = engine
        .read_all(|s| {
            let filter = PaymentFilter {
                status: Some(PaymentStatus::Pending),
                ..PaymentFilter::default()
            };
            s.payments_page(&filter, Page::new(1, 1).unwrap())
                .unwrap()
                .total
        })
        .await
        .unwrap()
        .into_iter()
        .sum();
    (held, pending)
}

/// Final payments and payouts leave memory once filed (issue 14): after a seeded mix of payments
/// confirmed on one shard and across two, cancelled, failed, refunded in part and in whole, and
/// left pending, and of payouts through every state, only pending payments and open payouts
/// stay in the shards; every payment and payout list, the fee report and the payout report
/// equal a whole-history reference, live and after a reopen; and a refund of a completed payment
/// that left memory recalls it from the store, live and after a reopen.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn final_payments_leave_memory_and_lists_equal_the_reference() {
    use engine::commerce::payment::{PaymentProvider, PaymentStatus};
    use engine::shard::command::{InitiatePayment, RefundPayment};
    use engine::values::fee::FeeRule;
    let dir = tempfile::tempdir().unwrap();
    let clock = Arc::new(SeededClock::new(5, 1_700_000_000_000));
    let engine = open(dir.path(), clock.clone());
    let mut merchants = Vec::new();
    let mut payers = Vec::new();
    // Merchants funded too, so that refunds (the fee is not returned to them) never lack money.
    for (owner, kind, business) in (0..3)
        .map(|n| (700 + n, OwnerType::Merchant, 7))
        .chain((1..=4).map(|n| (n, OwnerType::Customer, 1)))
    {
        let wallet = create_owned_wallet(&engine, kind, owner, business).await;
        engine
            .execute(Command::Deposit(money(wallet, Decimal::from(100_000))))
            .await
            .unwrap();
        if kind == OwnerType::Merchant {
            merchants.push(wallet);
        } else {
            payers.push(wallet);
        }
    }
    assert!(
        merchants
            .iter()
            .any(|m| engine.shard_of_wallet(*m) != engine.shard_of_wallet(payers[0])),
        "some payments cross shards"
    );
    let mut rng = Rng(0x0005_EED0_F9A7);
    let mut completed: Vec<Uuid> = Vec::new();
    let fee = FeeRule {
        percent: Decimal::new(25, 1),
        fixed: Decimal::ONE,
    };
    for step in 0..160 {
        clock.advance_ms(1_000);
        let merchant = merchants[rng.below(3) as usize];
        let payer = payers[rng.below(4) as usize];
        let sandbox = step % 9 == 0;
        let initiated = engine
            .execute(Command::InitiatePayment(InitiatePayment {
                merchant_id: 7,
                merchant_wallet_id: merchant,
                payer_wallet_id: payer,
                amount: rng.amount() + Decimal::from(2),
                currency: yer(),
                fee,
                provider: if sandbox {
                    PaymentProvider::Sandbox
                } else {
                    PaymentProvider::Wallet
                },
                description: Some(format!("order {step}")),
                metadata: None,
                idempotency_key: None,
                payment_link_uuid: None,
            }))
            .await
            .unwrap();
        let Outcome::Payment(payment) = initiated else {
            panic!("{initiated:?}")
        };
        let uuid = payment.uuid;
        let command = match (rng.below(10), sandbox) {
            (0, _) => None,
            (1, _) => Some(Command::CancelPayment { payment_uuid: uuid }),
            (2, _) => Some(Command::FailPayment { payment_uuid: uuid }),
            (_, true) => Some(Command::PaymentProviderResult(
                engine::shard::command::PaymentProviderResult {
                    payment_uuid: uuid,
                    succeeded: true,
                    provider_ref: None,
                },
            )),
            (_, false) => Some(Command::ConfirmPayment { payment_uuid: uuid }),
        };
        if let Some(command) = command {
            let done = engine.execute(command).await.unwrap();
            if let Outcome::Payment(p) = &done {
                if p.status == PaymentStatus::Completed {
                    completed.push(uuid);
                }
            }
        }
        // Refunds of earlier payments, most of which have left memory by now.
        if step % 4 == 3 && !completed.is_empty() {
            let pick = completed[rng.below(completed.len() as u64) as usize];
            let part = rng.below(2) == 0;
            let refunded = engine
                .execute(Command::RefundPayment(RefundPayment {
                    payment_uuid: pick,
                    amount: part.then_some(Decimal::ONE),
                    reason: None,
                }))
                .await;
            // A payment refunded in whole refuses another refund.
            if let Err(error) = &refunded {
                assert!(error.to_string().contains("refund"), "{error}");
            }
        }
        if step % 3 == 1 {
            payout_step(&engine, &mut rng, merchant).await;
        }
        if step % 16 == 0 {
            engine.evict_filed().await.unwrap();
        }
    }
    assert!(completed.len() > 50, "completed {}", completed.len());
    engine.evict_filed().await.unwrap();
    let (held, pending) = payments_held(&engine).await;
    assert!(pending > 0, "some payments stay pending");
    assert_eq!(
        held as u64, pending,
        "only pending payments stay in memory once filed"
    );
    let (held, unfinished) = payouts_held(&engine).await;
    assert!(unfinished > 0, "some payouts stay open");
    assert_eq!(
        held as u64, unfinished,
        "only open payouts stay in memory once filed"
    );
    assert_payments_match(&engine, dir.path(), &merchants).await;

    // A completed payment that left memory is refunded in whole: recalled from the store.
    let mut refunded_whole = None;
    for &uuid in &completed {
        let view = engine
            .execute(Command::RefundPayment(RefundPayment {
                payment_uuid: uuid,
                amount: None,
                reason: Some("returned".into()),
            }))
            .await;
        if let Ok(Outcome::Payment(view)) = view {
            assert_eq!(view.status, PaymentStatus::Refunded);
            refunded_whole = Some(uuid);
            break;
        }
    }
    let refunded_whole = refunded_whole.expect("a completed payment to refund");
    engine.evict_filed().await.unwrap();
    let (held, pending) = payments_held(&engine).await;
    assert_eq!(held as u64, pending, "the recalled payment left again");
    assert_payments_match(&engine, dir.path(), &merchants).await;
    engine.shutdown().unwrap();

    // After a reopen: the same lists, the refund is kept, and memory holds pending ones only.
    let engine = open(dir.path(), clock.clone());
    let (held, pending) = payments_held(&engine).await;
    assert_eq!(held as u64, pending, "after reopen");
    let (held, unfinished) = payouts_held(&engine).await;
    assert_eq!(held as u64, unfinished, "open payouts after reopen");
    let mut status = None;
    for index in 0..engine.shard_count() {
        let found = engine
            .read_shard(index, move |s| {
                s.payment(refunded_whole).unwrap().map(|p| p.status)
            })
            .await
            .unwrap();
        status = status.or(found);
    }
    assert_eq!(status, Some(PaymentStatus::Refunded));
    assert_payments_match(&engine, dir.path(), &merchants).await;
    engine.shutdown().unwrap();

    // The store lost entirely: refiled from the log, payments included.
    std::fs::remove_dir_all(dir.path().join(STORE_DIR)).unwrap();
    let engine = open(dir.path(), clock);
    assert_payments_match(&engine, dir.path(), &merchants).await;
    engine.shutdown().unwrap();
}
