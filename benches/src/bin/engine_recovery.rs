//! Recovery and memory of the engine: replay rate, restart time with and without a fresh
//! snapshot, and resident bytes per idle wallet, as plain tables for BENCHMARKS.md.
//!
//! Usage: `cargo run --release -p walletd-benches --bin engine_recovery [EVENTS] [IDLE_WALLETS]
//! [SHARDS]` (defaults 1000000 events, 1000000 idle wallets, 1 shard; `0` skips a part).
//!
//! Replay: builds a data directory holding about EVENTS events (100k wallets, or
//! `ENGINE_RECOVERY_WALLETS`, created and each funded
//! once, then transfers between random wallets; generated with fsync never, which changes how
//! fast the log is written, not what replay reads), shuts the engine down, then opens it in a
//! fresh process three times with no snapshot (the whole log replayed), takes a snapshot, and
//! opens it three times more (snapshot loaded, nothing to replay). Every open runs in its own
//! process (this binary re-executed as `engine_recovery open DIR SHARDS`), so each one starts
//! with an empty heap; the page cache is warm (the files were just written or read).
//!
//! With `ENGINE_RECOVERY_KEEP=1` the replay directory is kept and its path printed, so one open
//! can be profiled alone: `perf record -g target/release/engine_recovery open DIR SHARDS`.
//!
//! Memory: in a fresh process, RSS (/proc/self/statm) before and after creating IDLE_WALLETS
//! wallets through the engine (fsync never), divided by the wallet count; then the same after a
//! restart from a snapshot of those wallets (in a fresh process: RSS after open minus before).

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use walletd_benches::engine_load::{
    caller_runtime, closed_loop, create_wallets, deposit_command, engine_config, open_engine,
    print_header, process_cpu_seconds, rss_bytes, transfer_command, Rng,
};
use walletd_benches::scratch_dir;

const CALLERS: usize = 256;
/// Wallets of the replay part, unless `ENGINE_RECOVERY_WALLETS` says otherwise (issue 14's
/// restart target is 1M wallets with 10M events: `ENGINE_RECOVERY_WALLETS=1000000
/// engine_recovery 10000000 0`).
const REPLAY_WALLETS: u64 = 100_000;

fn replay_wallets() -> u64 {
    std::env::var("ENGINE_RECOVERY_WALLETS")
        .ok()
        .and_then(|s| s.parse().ok())
        .filter(|&n| n >= 2)
        .unwrap_or(REPLAY_WALLETS)
}
const OPENS: usize = 3;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    if args.get(1).map(String::as_str) == Some("open") {
        let dir = args.get(2).expect("open DIR SHARDS");
        let shards = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
        open_once(Path::new(dir), shards);
        return;
    }
    let events: u64 = args
        .get(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let idle_wallets: u64 = args
        .get(2)
        .and_then(|s| s.parse().ok())
        .unwrap_or(1_000_000);
    let shards: u32 = args.get(3).and_then(|s| s.parse().ok()).unwrap_or(1);
    print_header("engine_recovery");
    if events > 0 {
        replay(events, shards);
    }
    if idle_wallets > 0 {
        memory(idle_wallets, shards);
    }
}

/// One open, measured in this process: prints `OPENED <ms> <records> <events> <snapshot?>
/// <wallets> <rss delta bytes> <cpu ms>`.
fn open_once(dir: &Path, shards: u32) {
    let rss_before = rss_bytes();
    let cpu_before = process_cpu_seconds();
    let started = Instant::now();
    let (engine, report) = open_engine(engine_config(dir, shards, wal::FsyncPolicy::Never));
    let elapsed = started.elapsed();
    let cpu = process_cpu_seconds() - cpu_before;
    let rss_after = rss_bytes();
    println!(
        "OPENED {} {} {} {} {} {} {}",
        elapsed.as_secs_f64() * 1000.0,
        report.records_replayed,
        report.events_replayed,
        u8::from(report.snapshot_lsn.is_some()),
        report.wallets,
        rss_after.saturating_sub(rss_before),
        cpu * 1000.0
    );
    engine.shutdown().expect("shut the engine down");
}

struct Opened {
    ms: f64,
    records: u64,
    events: u64,
    from_snapshot: bool,
    wallets: u64,
    rss_delta: u64,
    cpu_ms: f64,
}

fn open_in_child(dir: &Path, shards: u32) -> Opened {
    let output = Command::new(std::env::current_exe().expect("own path"))
        .arg("open")
        .arg(dir)
        .arg(shards.to_string())
        .output()
        .expect("run the open child");
    let text = String::from_utf8_lossy(&output.stdout);
    let line = text
        .lines()
        .find(|l| l.starts_with("OPENED "))
        .unwrap_or_else(|| {
            panic!(
                "open child failed: {text} {}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    let words: Vec<&str> = line.split(' ').collect();
    Opened {
        ms: words[1].parse().expect("ms"),
        records: words[2].parse().expect("records"),
        events: words[3].parse().expect("events"),
        from_snapshot: words[4] == "1",
        wallets: words[5].parse().expect("wallets"),
        rss_delta: words[6].parse().expect("rss"),
        cpu_ms: words[7].parse().expect("cpu"),
    }
}

fn dir_bytes(dir: &Path, suffix: &str) -> u64 {
    std::fs::read_dir(dir.join("wal"))
        .map(|entries| {
            entries
                .filter_map(Result::ok)
                .filter(|e| e.file_name().to_string_lossy().ends_with(suffix))
                .filter_map(|e| e.metadata().ok())
                .map(|m| m.len())
                .sum()
        })
        .unwrap_or(0)
}

fn replay(events: u64, shards: u32) {
    let wallets = replay_wallets();
    let dir = scratch_dir("engine-recovery").expect("scratch dir");
    println!();
    println!("## replay: about {events} events, {shards} shard(s), {wallets} wallets");
    let started = Instant::now();
    {
        let (engine, _) = open_engine(engine_config(dir.path(), shards, wal::FsyncPolicy::Never));
        let runtime = caller_runtime();
        let (ids, _) = create_wallets(&runtime, &engine, 1, wallets, CALLERS);
        let ids = std::sync::Arc::new(ids);
        let next = std::sync::Arc::new(std::sync::atomic::AtomicU64::new(0));
        {
            let (engine, ids) = (engine.clone(), ids.clone());
            closed_loop(
                &runtime,
                CALLERS,
                Some(wallets),
                Duration::MAX,
                move |_, _| {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let (engine, wallet) = (engine.clone(), ids[index as usize]);
                    async move {
                        engine.execute(deposit_command(wallet, 10_000_000)).await?;
                        Ok(())
                    }
                },
            );
        }
        // Created: 1 event each; funded: 3 (transaction + 2 entries); a transfer: 4.
        let so_far = wallets * 4;
        let transfers = events.saturating_sub(so_far) / 4;
        let run = {
            let (engine, ids) = (engine.clone(), ids.clone());
            closed_loop(
                &runtime,
                CALLERS,
                Some(transfers),
                Duration::MAX,
                move |caller, n| {
                    let mut rng = Rng::new((caller as u64) << 32 | n);
                    let (source, target) = rng.two_of(&ids);
                    let engine = engine.clone();
                    async move {
                        engine
                            .execute(transfer_command(source, target, 1 + rng.below(100) as i64))
                            .await?;
                        Ok(())
                    }
                },
            )
        };
        eprintln!(
            "  generated in {:.1?} ({transfers} transfers at {:.0}/s)",
            started.elapsed(),
            run.per_second()
        );
        drop(runtime);
        engine.shutdown().expect("shut the engine down");
    }
    let log_bytes = dir_bytes(dir.path(), ".wal");
    if std::env::var_os("ENGINE_RECOVERY_KEEP").is_some() {
        let kept = dir.keep();
        println!("kept the log-only directory: {}", kept.display());
        let copy = kept.with_extension("snapshot");
        let status = Command::new("cp").arg("-r").arg(&kept).arg(&copy).status();
        assert!(status.is_ok_and(|s| s.success()), "copy the kept directory");
        return replay_measure(&copy, shards, log_bytes);
    }
    replay_measure(dir.path(), shards, log_bytes);
}

fn replay_measure(dir: &Path, shards: u32, log_bytes: u64) {
    let mut rows = Vec::new();
    for _ in 0..OPENS {
        rows.push(("log only", open_in_child(dir, shards)));
    }
    // A fresh snapshot, taken by an engine that replayed everything.
    let snapshot_ms = {
        let (engine, _) = open_engine(engine_config(dir, shards, wal::FsyncPolicy::Never));
        let runtime = caller_runtime();
        let started = Instant::now();
        runtime
            .block_on(engine.snapshot())
            .expect("take a snapshot");
        let ms = started.elapsed().as_secs_f64() * 1000.0;
        drop(runtime);
        engine.shutdown().expect("shut the engine down");
        ms
    };
    let snapshot_bytes = dir_bytes(dir, ".snap");
    for _ in 0..OPENS {
        rows.push(("fresh snapshot", open_in_child(dir, shards)));
    }
    println!(
        "log: {:.1} MiB in segments (preallocated sizes); snapshot: {:.1} MiB, taken in {snapshot_ms:.0} ms",
        log_bytes as f64 / (1 << 20) as f64,
        snapshot_bytes as f64 / (1 << 20) as f64
    );
    println!(
        "| open from      | open time | CPU time | records replayed | events replayed | events/s (wall) | events/s per CPU s | wallets | RSS after open |"
    );
    println!(
        "|----------------|----------:|---------:|-----------------:|----------------:|----------------:|-------------------:|--------:|---------------:|"
    );
    for (from, opened) in &rows {
        assert_eq!(opened.from_snapshot, *from != "log only");
        let (rate, cpu_rate) = if opened.events > 0 {
            (
                format!("{:.0}", opened.events as f64 / (opened.ms / 1000.0)),
                format!("{:.0}", opened.events as f64 / (opened.cpu_ms / 1000.0)),
            )
        } else {
            ("-".to_string(), "-".to_string())
        };
        println!(
            "| {from:<14} | {:>6.0} ms | {:>5.0} ms | {:>16} | {:>15} | {rate:>15} | {cpu_rate:>18} | {:>7} | {:>10.0} MiB |",
            opened.ms,
            opened.cpu_ms,
            opened.records,
            opened.events,
            opened.wallets,
            opened.rss_delta as f64 / (1 << 20) as f64
        );
    }
}

fn memory(wallets: u64, shards: u32) {
    println!();
    println!("## memory: {wallets} idle wallets, {shards} shard(s)");
    let dir = scratch_dir("engine-memory").expect("scratch dir");
    let rss_start = rss_bytes();
    let (engine, _) = open_engine(engine_config(dir.path(), shards, wal::FsyncPolicy::Never));
    let runtime = caller_runtime();
    // Warm up the runtime, the log and the shard's system accounts before the first reading.
    let _ = create_wallets(&runtime, &engine, 1, 1000, CALLERS);
    let rss_before = rss_bytes();
    let started = Instant::now();
    let (_, run) = create_wallets(&runtime, &engine, 1001, wallets, CALLERS);
    let rss_after = rss_bytes();
    eprintln!(
        "  created {wallets} wallets in {:.1?} ({:.0}/s)",
        started.elapsed(),
        run.per_second()
    );
    let snapshot_cpu_before = process_cpu_seconds();
    let snapshot_started = Instant::now();
    runtime
        .block_on(engine.snapshot())
        .expect("take a snapshot");
    let snapshot_wall = snapshot_started.elapsed();
    let snapshot_cpu = process_cpu_seconds() - snapshot_cpu_before;
    drop(runtime);
    engine.shutdown().expect("shut the engine down");
    let snapshot_bytes = dir_bytes(dir.path(), ".snap");
    let opened = open_in_child(dir.path(), shards);
    println!(
        "| measured                                   | RSS delta | wallets | bytes per wallet |"
    );
    println!(
        "|--------------------------------------------|----------:|--------:|-----------------:|"
    );
    println!(
        "| while creating them (same process)         | {:>5.0} MiB | {wallets:>7} | {:>16.0} |",
        rss_after.saturating_sub(rss_before) as f64 / (1 << 20) as f64,
        rss_after.saturating_sub(rss_before) as f64 / wallets as f64
    );
    println!(
        "| restart from a snapshot (fresh process)    | {:>5.0} MiB | {:>7} | {:>16.0} |",
        opened.rss_delta as f64 / (1 << 20) as f64,
        opened.wallets,
        opened.rss_delta as f64 / opened.wallets.max(1) as f64
    );
    println!(
        "snapshot of {wallets} wallets took {:.0} ms ({:.0} ms CPU of the whole process)",
        snapshot_wall.as_secs_f64() * 1000.0,
        snapshot_cpu * 1000.0
    );
    println!(
        "restart took {:.0} ms ({:.0} ms CPU; {} records replayed after the snapshot); snapshot \
         {:.1} MiB ({:.0} B per wallet); process RSS at start {:.0} MiB",
        opened.ms,
        opened.cpu_ms,
        opened.records,
        snapshot_bytes as f64 / (1 << 20) as f64,
        snapshot_bytes as f64 / opened.wallets.max(1) as f64,
        rss_start as f64 / (1 << 20) as f64
    );
}
