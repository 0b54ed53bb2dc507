//! Issue 14's statement target: a page of the ledger of a wallet with 1M entries, read from the
//! history store while a transfer load runs, p50/p99/max per kind of page.
//!
//! Usage: `cargo run --release -p walletd-benches --bin statement_page [ENTRIES] [SECONDS]
//! [CALLERS]` (defaults 1000000 entries, 30 s of measuring, 64 load callers).
//!
//! 1. One shard, fsync never: two "hot" wallets A and B exchange ENTRIES transfers (each gives
//!    both one ledger entry), and 1,000 load wallets are created and funded.
//! 2. The engine is shut down and reopened with fsync always (the served default), so the load
//!    below is the durable one the service runs.
//! 3. For SECONDS, CALLERS callers post transfers among the load wallets while one reader reads
//!    A's ledger one page after another (50 entries a page): alternately the newest page, and a
//!    page drawn uniformly from all of them (seeded, logged), and the first page of a period a
//!    tenth of the fill's time long, placed uniformly in it (`from`/`to`: the page and the
//!    period's count, ~100k entries). Each read is `Engine::ledger_page`, which first waits
//!    until the history indexer has filed the newest record that changed A's history (the rule
//!    every history read follows; A is quiet during the load, so that wait is short), and runs
//!    on the engine while the load's commands queue on the same shard.
//! 4. Before each page the reader also times a bare round trip to that shard
//!    (`Engine::peek_shard`): the wait behind the queued commands that every history read paid
//!    until reads found their bound without the shard (BENCHMARKS.md, "A statement page
//!    without the shard's mailbox").
//!
//! It prints the transfer rate during the reads beside the rate of the same load without the
//! reader (measured first, same process), and a latency table per kind of page, with the round
//! trips as the last row.

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::runtime::Engine;
use engine::{Page, WalletId};
use hdrhistogram::Histogram;
use walletd_benches::engine_load::{
    caller_runtime, closed_loop, create_wallets, deposit_command, engine_config, open_engine,
    print_header, transfer_command, Rng,
};
use walletd_benches::scratch_dir;

const PER_PAGE: u32 = 50;
const LOAD_WALLETS: u64 = 1_000;
const FILL_CALLERS: usize = 256;
const READER_SEED: u64 = 14;

/// The wall clock, unix milliseconds (the engine stamps its entries with it).
fn unix_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |since| since.as_millis() as i64)
}

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let entries: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let seconds: u64 = args.get(2).and_then(|s| s.parse().ok()).unwrap_or(30);
    let callers: usize = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(64);
    print_header("statement_page");
    println!(
        "{entries} entries in the read wallet, {seconds} s of reads, {callers} load callers, \
         {PER_PAGE} entries a page, reader seed {READER_SEED}"
    );
    let dir = scratch_dir("statement-page").expect("scratch dir");

    // 1. Fill.
    let started = Instant::now();
    let fill_from_ms = unix_ms();
    let (hot, load) = {
        let (engine, _) = open_engine(engine_config(dir.path(), 1, wal::FsyncPolicy::Never));
        let runtime = caller_runtime();
        let (hot, _) = create_wallets(&runtime, &engine, 1, 2, 2);
        let (load, _) = create_wallets(&runtime, &engine, 3, LOAD_WALLETS, FILL_CALLERS);
        for &wallet in hot.iter().chain(&load) {
            runtime
                .block_on(engine.execute(deposit_command(wallet, 100_000_000)))
                .expect("fund a wallet");
        }
        let (a, b) = (hot[0], hot[1]);
        let fill = {
            let engine = engine.clone();
            closed_loop(
                &runtime,
                FILL_CALLERS,
                Some(entries),
                Duration::MAX,
                move |_, n| {
                    let engine = engine.clone();
                    let (from, to) = if n % 2 == 0 { (a, b) } else { (b, a) };
                    async move {
                        engine.execute(transfer_command(from, to, 1)).await?;
                        Ok(())
                    }
                },
            )
        };
        eprintln!(
            "  filled {entries} transfers between the hot wallets in {:.1?} ({:.0}/s)",
            started.elapsed(),
            fill.per_second()
        );
        drop(runtime);
        engine.shutdown().expect("shut the engine down");
        (a, load)
    };
    let fill_span_ms = (unix_ms() - fill_from_ms).max(10);

    // 2. Reopen, durable.
    let reopened = Instant::now();
    let (engine, _) = open_engine(engine_config(dir.path(), 1, wal::FsyncPolicy::Always));
    eprintln!("  reopened in {:.1?}", reopened.elapsed());
    let runtime = caller_runtime();
    let first = runtime
        .block_on(engine.ledger_page(hot, page(1), None, None))
        .expect("the engine answers")
        .expect("the hot wallet exists");
    let total = first.total;
    assert!(total >= entries, "the hot wallet has {total} entries");
    let pages = total.div_ceil(u64::from(PER_PAGE));

    // 3a. The load alone, for the baseline rate.
    let load = Arc::new(load);
    let transfers = |engine: Engine, load: Arc<Vec<WalletId>>| {
        move |caller: usize, n: u64| {
            let mut rng = Rng::new((caller as u64) << 32 | n);
            let (source, target) = rng.two_of(&load);
            let engine = engine.clone();
            async move {
                engine.execute(transfer_command(source, target, 1)).await?;
                Ok(())
            }
        }
    };
    let alone = closed_loop(
        &runtime,
        callers,
        None,
        Duration::from_secs(seconds.min(10)),
        transfers(engine.clone(), load.clone()),
    );

    // 3b. The load with the reader.
    let stop = Arc::new(AtomicBool::new(false));
    let reader = {
        let (engine, stop) = (engine.clone(), stop.clone());
        std::thread::spawn(move || {
            let reader_runtime = tokio::runtime::Builder::new_current_thread()
                .enable_time()
                .build()
                .expect("reader runtime");
            let mut newest = Histogram::<u64>::new(3).expect("histogram");
            let mut anywhere = Histogram::<u64>::new(3).expect("histogram");
            let mut dated = Histogram::<u64>::new(3).expect("histogram");
            let mut peeks = Histogram::<u64>::new(3).expect("histogram");
            let mut dated_total = 0u64;
            let mut rng = Rng::new(READER_SEED);
            let mut n = 0u64;
            while !stop.load(Ordering::Relaxed) {
                // Before each page, a bare round trip to the wallet's shard (what a page's
                // wait for its bound starts with), for scale.
                let started = Instant::now();
                let found = reader_runtime
                    .block_on(engine.peek_shard(0, move |s| s.wallet(hot).is_some()))
                    .expect("the engine answers");
                assert!(found, "the hot wallet exists");
                let micros = started.elapsed().as_micros() as u64;
                peeks.record(micros.max(1)).expect("record a latency");
                let kind = n % 3;
                let number = if kind == 1 {
                    1 + rng.below(pages) as u32
                } else {
                    1
                };
                let period = (kind == 2).then(|| {
                    let length = fill_span_ms / 10;
                    let from = fill_from_ms + rng.below((fill_span_ms - length) as u64) as i64;
                    (from, from + length)
                });
                let started = Instant::now();
                let read = reader_runtime
                    .block_on(engine.ledger_page(
                        hot,
                        page(number),
                        period.map(|(from, _)| from),
                        period.map(|(_, to)| to),
                    ))
                    .expect("the engine answers")
                    .expect("the hot wallet exists");
                let micros = started.elapsed().as_micros() as u64;
                let before = u64::from(number - 1) * u64::from(PER_PAGE);
                let expected = read.total.saturating_sub(before).min(u64::from(PER_PAGE));
                assert_eq!(read.records.len() as u64, expected, "page {number}");
                let histogram = match kind {
                    0 => &mut newest,
                    1 => &mut anywhere,
                    _ => {
                        dated_total += read.total;
                        &mut dated
                    }
                };
                histogram.record(micros.max(1)).expect("record a latency");
                n += 1;
            }
            let periods = dated.len().max(1);
            (newest, anywhere, dated, dated_total / periods, peeks)
        })
    };
    let with_reader = closed_loop(
        &runtime,
        callers,
        None,
        Duration::from_secs(seconds),
        transfers(engine.clone(), load.clone()),
    );
    stop.store(true, Ordering::Relaxed);
    let (newest, anywhere, dated, period_entries, peeks) =
        reader.join().expect("the reader thread");
    drop(runtime);
    engine.shutdown().expect("shut the engine down");

    println!(
        "transfers/s: {:.0} with the reader, {:.0} without (first {} s); {total} entries, {pages} pages",
        with_reader.per_second(),
        alone.per_second(),
        seconds.min(10)
    );
    println!("| page | reads | p50 | p99 | max |");
    println!("|---|---:|---:|---:|---:|");
    let period_row =
        format!("first page of a period, a tenth of the history (~{period_entries} entries)");
    for (name, histogram) in [
        ("newest (page 1)", &newest),
        ("uniform over all pages", &anywhere),
        (period_row.as_str(), &dated),
        ("(a round trip to the shard, before each page)", &peeks),
    ] {
        println!(
            "| {name} | {} | {:.2} ms | {:.2} ms | {:.2} ms |",
            histogram.len(),
            histogram.value_at_quantile(0.5) as f64 / 1000.0,
            histogram.value_at_quantile(0.99) as f64 / 1000.0,
            histogram.max() as f64 / 1000.0
        );
    }
}

fn page(number: u32) -> Page {
    Page::new(number, PER_PAGE).expect("a valid page")
}
