//! Durable append throughput of the write-ahead log as a plain table, for BENCHMARKS.md.
//!
//! Usage: `cargo run --release -p walletd-benches --bin wal_throughput [SECONDS] [REPEATS] [ONLY]`
//! (defaults: 2 seconds per repeat, 3 repeats per point; `ONLY` such as `256x256` runs just that
//! point, for profiling).
//!
//! For 1, 16 and 256 request-response appenders (each waits for its record to be durable before
//! appending the next) × 64 B, 256 B and 4 KiB records, with fsync always, it prints records/s
//! (median of the repeats, and their spread), MB/s of payload, write+fdatasync rounds per second,
//! mean records per round (the group-commit factor) and the mean fdatasync time, all from
//! `Wal::stats()` deltas. Since this machine's disk speed drifts by about 30% within minutes and
//! has slow phases of ~4 ms per flush, it also measures the raw 4 KiB pwrite + fdatasync rate of
//! the same disk before and after the whole run, and for 0.5 s just before each point: that
//! point's own baseline, printed beside it with the point's rate divided by it.
//!
//! Two diagnostic row sets follow the main table, both with 256 B records: async appenders
//! (tasks awaiting `Append` on one executor thread, as an async HTTP server's handlers would),
//! which shows what the log sustains when waking an appender is cheap; and thread appenders with
//! fsync off, the ceiling of the CPU path alone.

use std::time::{Duration, Instant};

use walletd_benches::{
    run_async_appenders, scratch_dir, scratch_root, wal_options, Appenders, RawSync,
};

const APPENDERS: [usize; 3] = [1, 16, 256];
const RECORD_BYTES: [usize; 3] = [64, 256, 4096];
/// Async appender counts, on one executor thread, 256 B records.
const ASYNC_TASKS: [usize; 3] = [16, 256, 1024];
/// How long the raw baseline runs just before each point.
const RAW_PROBE: Duration = Duration::from_millis(500);
/// Size of the preallocated raw baseline file (writes wrap around in it).
const RAW_FILE_BYTES: u64 = 16 << 20;
const WARM_UP: Duration = Duration::from_millis(500);

/// How the appenders run.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Clients {
    /// One OS thread per appender, blocking in `Append::wait`.
    Threads,
    /// Async tasks on one executor thread, awaiting `Append`.
    Async,
}

struct Point {
    clients: Clients,
    appenders: usize,
    record_bytes: usize,
    fsync: wal::FsyncPolicy,
    /// Records/s of each repeat, sorted.
    rates: Vec<f64>,
    syncs_per_second: f64,
    records_per_sync: f64,
    sync_us_mean: f64,
    /// Raw 4 KiB pwrite + fdatasync rate measured just before this point (its own baseline).
    raw_syncs_per_second: f64,
}

impl Point {
    fn median(&self) -> f64 {
        self.rates[self.rates.len() / 2]
    }
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(2.0);
    let repeats: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(3).max(1);
    let only = args.next();
    let wanted = |appenders: usize, record_bytes: usize| {
        only.as_deref()
            .is_none_or(|o| o == format!("{appenders}x{record_bytes}"))
    };
    let run = Duration::from_secs_f64(seconds);
    println!(
        "wal_throughput: {repeats} x {seconds} s per point, scratch dir {}, {} CPUs",
        scratch_root().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );

    let mut raw = RawSync::new(RAW_FILE_BYTES).expect("create the raw sync file");
    let raw_before = [raw_rate(&mut raw, 4096, run), raw_rate(&mut raw, 256, run)];

    let mut points = Vec::new();
    for appenders in APPENDERS {
        for record_bytes in RECORD_BYTES {
            if !wanted(appenders, record_bytes) {
                continue;
            }
            let point = measure(
                Clients::Threads,
                appenders,
                record_bytes,
                wal::FsyncPolicy::Always,
                run,
                repeats,
                &mut raw,
            );
            print_point(&point);
            points.push(point);
        }
    }
    let mut extra = Vec::new();
    for tasks in ASYNC_TASKS.into_iter().filter(|&a| wanted(a, 256)) {
        let point = measure(
            Clients::Async,
            tasks,
            256,
            wal::FsyncPolicy::Always,
            run,
            repeats,
            &mut raw,
        );
        print_point(&point);
        extra.push(point);
    }
    for appenders in APPENDERS.into_iter().filter(|&a| wanted(a, 256)) {
        let point = measure(
            Clients::Threads,
            appenders,
            256,
            wal::FsyncPolicy::Never,
            run,
            repeats,
            &mut raw,
        );
        print_point(&point);
        extra.push(point);
    }

    let raw_after = [raw_rate(&mut raw, 4096, run), raw_rate(&mut raw, 256, run)];

    println!();
    println!("raw pwrite + fdatasync, one thread, preallocated file (syncs/s), before / after:");
    println!(
        "  4 KiB: {:>8.0} / {:>8.0}    256 B: {:>8.0} / {:>8.0}",
        raw_before[0], raw_after[0], raw_before[1], raw_after[1]
    );
    println!();
    print_table(&points, &extra);

    let point_256b = |appenders: usize| {
        points
            .iter()
            .find(|p| {
                p.clients == Clients::Threads && p.appenders == appenders && p.record_bytes == 256
            })
            .map(|p| (p.median(), p.median() / p.raw_syncs_per_second.max(1.0)))
    };
    if let (Some((single, single_vs_raw)), Some((many, many_vs_raw))) =
        (point_256b(1), point_256b(256))
    {
        let ratio = many / single.max(1.0);
        println!();
        println!(
            "256 appenders x 256 B: {many:.0} durable records/s = {ratio:.1}x the 1-appender rate \
             ({single:.0}/s); {:.1}x when each is first divided by its own raw baseline",
            many_vs_raw / single_vs_raw.max(f64::MIN_POSITIVE)
        );
        println!(
            "targets: >= 100x the 1-appender rate: {}; >= 500000 durable records/s: {}",
            verdict(ratio >= 100.0),
            verdict(many >= 500_000.0)
        );
    }
}

fn verdict(met: bool) -> &'static str {
    if met {
        "met"
    } else {
        "NOT met"
    }
}

/// Runs one point on a fresh log: a warm-up, then `repeats` timed runs.
fn measure(
    clients: Clients,
    appenders: usize,
    record_bytes: usize,
    fsync: wal::FsyncPolicy,
    run: Duration,
    repeats: usize,
    raw: &mut RawSync,
) -> Point {
    let dir = scratch_dir("wal-throughput").expect("create a scratch dir");
    let (log, _) = wal::Wal::open(dir.path(), wal_options(fsync)).expect("open the log");
    let pool =
        (clients == Clients::Threads).then(|| Appenders::start(&log, appenders, record_bytes));
    let run_for = |duration| match &pool {
        Some(pool) => pool.run_for(duration),
        None => run_async_appenders(&log, appenders, record_bytes, duration),
    };
    let raw_syncs_per_second = raw_rate(raw, 4096, RAW_PROBE);
    run_for(WARM_UP);

    let stats_before = log.stats();
    let mut rates = Vec::with_capacity(repeats);
    let mut records_total = 0u64;
    let mut elapsed_total = Duration::ZERO;
    for _ in 0..repeats {
        let (records, elapsed) = run_for(run);
        rates.push(records as f64 / elapsed.as_secs_f64());
        records_total += records;
        elapsed_total += elapsed;
    }
    let stats_after = log.stats();
    drop(pool);
    log.close().expect("close the log");

    rates.sort_by(f64::total_cmp);
    let syncs = stats_after.syncs - stats_before.syncs;
    let sync_nanos = stats_after.sync_nanos - stats_before.sync_nanos;
    Point {
        clients,
        appenders,
        record_bytes,
        fsync,
        rates,
        syncs_per_second: syncs as f64 / elapsed_total.as_secs_f64(),
        records_per_sync: records_total as f64 / syncs.max(1) as f64,
        sync_us_mean: sync_nanos as f64 / syncs.max(1) as f64 / 1000.0,
        raw_syncs_per_second,
    }
}

/// pwrite + fdatasync of `record_bytes` for `run` after a warm-up, one thread; returns syncs per
/// second.
fn raw_rate(raw: &mut RawSync, record_bytes: usize, run: Duration) -> f64 {
    let buf = vec![0x5Au8; record_bytes];
    let warm_up = Instant::now();
    while warm_up.elapsed() < WARM_UP {
        raw.write_and_sync(&buf).expect("pwrite + fdatasync");
    }
    let started = Instant::now();
    let mut syncs = 0u64;
    while started.elapsed() < run {
        raw.write_and_sync(&buf).expect("pwrite + fdatasync");
        syncs += 1;
    }
    syncs as f64 / started.elapsed().as_secs_f64()
}

fn print_point(point: &Point) {
    eprintln!(
        "  measured {:?} {:>4} x {:>4} B fsync {:?}: {:.0} records/s",
        point.clients,
        point.appenders,
        point.record_bytes,
        point.fsync,
        point.median()
    );
}

fn print_table(points: &[Point], extra: &[Point]) {
    println!(
        "| fsync  | clients | appenders | record | records/s (median) | spread (min-max)  |  MB/s  | syncs/s | records/sync | fdatasync mean | raw 4K syncs/s just before | records/s ÷ raw |"
    );
    println!(
        "|--------|---------|----------:|-------:|-------------------:|-------------------|-------:|--------:|-------------:|---------------:|---------------------------:|----------------:|"
    );
    for point in points.iter().chain(extra) {
        let median = point.median();
        let spread = format!(
            "{:.0}-{:.0}",
            point.rates.first().copied().unwrap_or(0.0),
            point.rates.last().copied().unwrap_or(0.0)
        );
        let fsync = match point.fsync {
            wal::FsyncPolicy::Always => "always",
            wal::FsyncPolicy::Never => "never",
        };
        let clients = match point.clients {
            Clients::Threads => "threads",
            Clients::Async => "async",
        };
        println!(
            "| {fsync:<6} | {clients:<7} | {:>9} | {:>4} B | {:>18.0} | {:<17} | {:>6.1} | {:>7.0} | {:>12.1} | {:>11.0} us | {:>26.0} | {:>14.1}x |",
            point.appenders,
            point.record_bytes,
            median,
            spread,
            median * point.record_bytes as f64 / 1e6,
            point.syncs_per_second,
            point.records_per_sync,
            point.sync_us_mean,
            point.raw_syncs_per_second,
            median / point.raw_syncs_per_second.max(1.0),
        );
    }
}
