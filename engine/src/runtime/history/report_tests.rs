//! The report aggregates against the reports a whole-history shard (`Recall::Keep`) computes from
//! its records: random commerce runs on 1, 2 and 4 shards over several days, their logs
//! interleaved into one store in random batches; every report over every day, the whole span and
//! random sub-ranges, per business and currency, must be equal, after reopening the store,
//! after an upgrade (a store without aggregates, built from the records), and in a store filed
//! by an indexer that remembers two wallets (which verify also checks record by record).

use proptest::prelude::*;

use super::filing::{file_batch, ChainHeads, Filed};
use super::{HistoryStore, Recount};
use crate::commerce::payout::DAY_MS;
use crate::shard::commerce::report::{
    fee_rows, merge_fee_rows, merge_status_rows, merge_transaction_rows, status_rows_of,
    transaction_rows_of, ReportKind, ReportRange, PAYOUT_STATUSES, SETTLEMENT_STATUSES,
};
use crate::tests::commerce_model::{ops, Op, Run};
use crate::tests::commerce_support::MERCHANT;
use crate::tests::cur;
use crate::{Event, Shard};

/// A small deterministic generator (splitmix64).
struct Draws(u64);

impl Draws {
    fn below(&mut self, n: u64) -> u64 {
        self.0 = self.0.wrapping_add(0x9e37_79b9_7f4a_7c15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
        (z ^ (z >> 31)) % n.max(1)
    }
}

/// The runs' logs interleaved (each shard's in order) into records of a few events each.
fn interleave(logs: &[Vec<Event>], draws: &mut Draws) -> Vec<Filed> {
    let mut next = vec![0usize; logs.len()];
    let mut records = Vec::new();
    loop {
        let open: Vec<usize> = (0..logs.len())
            .filter(|&shard| next[shard] < logs[shard].len())
            .collect();
        if open.is_empty() {
            return records;
        }
        let shard = open[draws.below(open.len() as u64) as usize];
        let take = 1 + draws.below(30) as usize;
        let end = (next[shard] + take).min(logs[shard].len());
        let events = logs[shard][next[shard]..end].to_vec();
        next[shard] = end;
        records.push(Filed::events(records.len() as u64 + 1, events).on_shard(shard as u32));
    }
}

/// Files the records in batches of 1 to 6.
fn file_all(store: &HistoryStore, records: &[Filed], heads: &mut ChainHeads, draws: &mut Draws) {
    let mut at = 0;
    while at < records.len() {
        let end = (at + 1 + draws.below(6) as usize).min(records.len());
        file_batch(store, &records[at..end], heads).unwrap();
        at = end;
    }
}

/// Every report of `range` from the aggregates equals the one merged from the shards' records.
fn assert_reports(store: &HistoryStore, shards: &[&Shard], range: ReportRange) {
    let days = range.whole_days().unwrap();
    let rows = |kind| {
        store
            .report_rows(kind, range.business_id, range.currency, days)
            .unwrap()
    };
    assert_eq!(
        fee_rows(rows(ReportKind::Fees)),
        merge_fee_rows(shards.iter().map(|s| s.fee_report(&range).unwrap())),
        "fees {range:?}"
    );
    assert_eq!(
        status_rows_of(&PAYOUT_STATUSES, rows(ReportKind::Payouts)).unwrap(),
        merge_status_rows(shards.iter().map(|s| s.payout_report(&range).unwrap())),
        "payouts {range:?}"
    );
    assert_eq!(
        status_rows_of(&SETTLEMENT_STATUSES, rows(ReportKind::Settlements)).unwrap(),
        merge_status_rows(shards.iter().map(|s| s.settlement_report(&range))),
        "settlements {range:?}"
    );
    assert_eq!(
        transaction_rows_of(rows(ReportKind::Transactions)).unwrap(),
        merge_transaction_rows(shards.iter().map(|s| s.transaction_report(&range).unwrap())),
        "transactions {range:?}"
    );
}

/// Every single day, the whole span and some random ranges, for several scopes.
fn assert_all_reports(
    store: &HistoryStore,
    shards: &[&Shard],
    span: (i64, i64),
    draws: &mut Draws,
) {
    let mut ranges = vec![span];
    ranges.extend((span.0..=span.1).map(|day| (day, day)));
    for _ in 0..4 {
        let from = span.0 + draws.below((span.1 - span.0 + 1) as u64) as i64;
        let to = from + draws.below((span.1 - from + 1) as u64) as i64;
        ranges.push((from, to));
    }
    let businesses = [None, Some(1), Some(MERCHANT), Some(MERCHANT + 1)];
    let currencies = [None, Some(cur("USD")), Some(cur("JPY")), Some(cur("EUR"))];
    for (from, to) in ranges {
        for business_id in businesses {
            for currency in currencies {
                let range = ReportRange {
                    from_ms: from * DAY_MS,
                    to_ms: (to + 1) * DAY_MS - 1,
                    business_id,
                    currency,
                };
                assert_reports(store, shards, range);
            }
        }
    }
}

fn recount(store: &HistoryStore, shards: &[&Shard]) -> Recount {
    let mut recount = Recount::default();
    for shard in shards {
        recount.shard(shard).unwrap();
    }
    store.recount_filed(&mut recount).unwrap();
    recount
}

fn check(shard_count: u32, runs: &[Vec<Op>], seed: u64) {
    let mut draws = Draws(seed);
    let mut all = Vec::new();
    for (index, ops) in runs.iter().take(shard_count as usize).enumerate() {
        let mut run = Run::on_shard(Shard::new(index as u32, shard_count).unwrap());
        for (step, op) in ops.iter().enumerate() {
            // Several days, whatever the draw: a day passes every 12 steps.
            if step % 12 == 11 {
                run.step(&Op::Tick(1440));
            }
            run.step(op);
        }
        all.push(run);
    }
    let shards: Vec<&Shard> = all.iter().map(|run| &run.h.shard).collect();
    let logs: Vec<Vec<Event>> = all.iter().map(|run| run.h.log.clone()).collect();
    let first = all.iter().map(|run| run.h.now_ms).min().unwrap_or(0);
    let span = (
        1_700_000_000_000i64.div_euclid(DAY_MS) - 1,
        all.iter()
            .map(|run| run.h.now_ms)
            .max()
            .unwrap_or(first)
            .div_euclid(DAY_MS)
            + 1,
    );
    let records = interleave(&logs, &mut draws);

    let dir = tempfile::tempdir().unwrap();
    let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
    file_all(&store, &records, &mut ChainHeads::default(), &mut draws);
    assert_all_reports(&store, &shards, span, &mut draws);
    assert!(store
        .verify_reports(&recount(&store, &shards))
        .unwrap()
        .is_ok());

    // Filed by an indexer that remembers two wallets (it forgets the older half of its memory
    // after every batch, and reads chain heads, report subjects and date markers back from the
    // store), the store holds the same history and the same aggregates.
    let forgetful = tempfile::tempdir().unwrap();
    let other = std::sync::Arc::new(HistoryStore::open(forgetful.path(), 1 << 20).unwrap());
    file_all(&other, &records, &mut ChainHeads::bounded(2), &mut draws);
    assert_all_reports(&other, &shards, span, &mut draws);
    for shard in &shards {
        super::reads::compare_shard(shard, &other).unwrap();
    }
    other.close();

    // Reopened, the store serves the same.
    store.close();
    let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
    assert_all_reports(&store, &shards, span, &mut draws);

    // An older store: filed partly with aggregates, partly without (a store written before them
    // knows nothing of them), then built from the records; reports are refused until then.
    let older = tempfile::tempdir().unwrap();
    let store = HistoryStore::open(older.path(), 1 << 20).unwrap();
    let cut = draws.below(records.len() as u64 + 1) as usize;
    let mut heads = ChainHeads::default();
    file_all(&store, &records[..cut], &mut heads, &mut draws);
    store.forget_reports().unwrap();
    file_all(&store, &records[cut..], &mut heads, &mut draws);
    assert!(store
        .report_rows(ReportKind::Fees, None, None, span)
        .is_err());
    store.close();
    let store = HistoryStore::open(older.path(), 1 << 20).unwrap();
    assert!(!store.reports_ready().unwrap());
    store.build_reports(recount(&store, &shards)).unwrap();
    assert_all_reports(&store, &shards, span, &mut draws);
    assert!(store
        .verify_reports(&recount(&store, &shards))
        .unwrap()
        .is_ok());
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 24, ..ProptestConfig::default() })]

    #[test]
    fn report_aggregates_equal_the_reports_of_whole_history_shards(
        shard_count in prop_oneof![Just(1u32), Just(2), Just(4)],
        runs in proptest::collection::vec(ops(), 4),
        seed in any::<u64>(),
    ) {
        check(shard_count, &runs, seed);
    }
}

/// A store whose aggregates differ from the records is named by `verify_reports`.
#[test]
fn verify_names_an_aggregate_that_differs_from_the_records() {
    let mut run = Run::on_shard(Shard::new(0, 1).unwrap());
    run.step(&Op::Deposit(0, rust_decimal::Decimal::new(5, 0)));
    let dir = tempfile::tempdir().unwrap();
    let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
    let log = run.h.log.clone();
    file_batch(&store, &[Filed::events(1, log)], &mut ChainHeads::default()).unwrap();
    let shards = [&run.h.shard];
    assert!(store
        .verify_reports(&recount(&store, &shards))
        .unwrap()
        .is_ok());
    // One more deposit the store has not filed: its day row differs.
    run.step(&Op::Deposit(0, rust_decimal::Decimal::new(7, 0)));
    let mut recount = Recount::default();
    recount.shard(&run.h.shard).unwrap();
    let more: Vec<Event> = run.h.log.clone();
    let other = tempfile::tempdir().unwrap();
    let fuller = HistoryStore::open(other.path(), 1 << 20).unwrap();
    file_batch(
        &fuller,
        &[Filed::events(1, more)],
        &mut ChainHeads::default(),
    )
    .unwrap();
    fuller.recount_filed(&mut recount).unwrap();
    let difference = store.verify_reports(&recount).unwrap().unwrap_err();
    assert!(difference.contains("report row"), "{difference}");
}
