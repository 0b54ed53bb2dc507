//! In-process engine throughput, durable and not, beside the disk's and the WAL's own limits
//! measured in the same run, as plain tables for BENCHMARKS.md.
//!
//! Usage: `cargo run --release -p walletd-benches --bin engine_throughput [SECONDS] [WALLETS]
//! [CALLERS] [ONLY]` (defaults 3 s per timed run, 100000 wallets, 256 callers; `ONLY` such as
//! `s2-always`, or a comma-separated list, runs just those points, e.g. under `perf record`).
//!
//! Each point opens a fresh engine (shards 1 or 2, fsync always or never, no automatic
//! snapshot; `s1-always-alone` is `s1-always` with every command in a record of its own,
//! `--coalesce-max 1`, the baseline of coalesced records), creates WALLETS customer wallets, deposits into each once (timed: "deposit, every
//! wallet"), then runs CALLERS closed-loop callers (async tasks on a 2-worker tokio runtime, each
//! awaiting `Engine::execute` before its next command) for SECONDS doing deposits into random
//! wallets, then transfers between random wallets (with 2 shards about half of those are
//! cross-shard: three WAL records each instead of one), then, with 2 shards, transfers between
//! random wallets of the same shard only and of different shards only; then transfers between
//! random wallets in batches of 100 and of 1,000 (`Engine::execute_batch`, not atomic), and of
//! 1,000 atomic (with 2 shards: reserved on both, then credited, finalized and closed), from
//! [`BATCH_CALLERS`] callers: one actor message and one WAL record per shard and step instead of
//! one per transfer (issue 15). Batch rows count transfers, not batches, in every per-op column.
//!
//! Baselines from the same run: raw 4 KiB pwrite + fdatasync on one thread (the disk), and the
//! bare WAL with 256 async appenders of records the size the engine's records had (the log alone,
//! no engine), fsync always and never.

use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::runtime::batch::BatchItem;
use engine::runtime::config::COALESCE_MAX_DEFAULT;
use engine::runtime::{Engine, EngineError};
use engine::shard::command::BatchItemResult;
use engine::WalletId;
use walletd_benches::engine_load::{
    caller_runtime, closed_loop, create_wallets, deposit_command, engine_config, open_engine,
    print_header, process_cpu_seconds, transfer_args, transfer_command, Rng, Run,
};
use walletd_benches::{run_async_appenders, scratch_dir, wal_options, RawSync};

const RAW_FILE_BYTES: u64 = 16 << 20;
/// How long each per-point baseline runs.
const BASELINE_RUN: Duration = Duration::from_secs(1);
/// Bytes of a deposit's WAL record (measured: the "WAL B/op" column of the deposit rows).
const DEPOSIT_RECORD_BYTES: usize = 357;
/// Closed-loop callers of the batch rows (the HTTP bench's batch rows use 8 connections).
const BATCH_CALLERS: usize = 8;
/// Transfers per batch in the batch rows, and whether the batch is atomic (with 2 shards an
/// atomic batch of random pairs spans both: the two-phase protocol of `runtime::atomic_batch`).
const BATCH_ROWS: [(usize, bool); 3] = [(100, false), (1_000, false), (1_000, true)];

/// Which pairs of wallets a transfer run picks.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Pairs {
    Random,
    SameShard,
    CrossShard,
}

struct Row {
    point: String,
    /// Raw 4 KiB pwrite + fdatasync syncs/s and bare-WAL records/s (same fsync policy, 256 async
    /// appenders of this point's deposit record size) measured just before this point.
    raw_syncs_per_second: f64,
    bare_wal_per_second: f64,
    workload: String,
    run: Run,
    /// Transfers one operation carries (1, or the batch size): per-op columns count transfers.
    items_per_op: u64,
    /// CPU seconds the whole process used during the run (all threads).
    cpu_seconds: f64,
    syncs: u64,
    sync_nanos: u64,
    wal_bytes: u64,
}

fn main() {
    let mut args = std::env::args().skip(1);
    let seconds: f64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(3.0);
    let wallets: u64 = args.next().and_then(|s| s.parse().ok()).unwrap_or(100_000);
    let callers: usize = args.next().and_then(|s| s.parse().ok()).unwrap_or(256);
    let only = args.next();
    let run_time = Duration::from_secs_f64(seconds);
    print_header("engine_throughput");
    println!(
        "{wallets} wallets, {callers} closed-loop callers on a 2-worker tokio runtime, {seconds} s \
         per timed run"
    );

    let mut raw = RawSync::new(RAW_FILE_BYTES).expect("create the raw sync file");
    let raw_before = raw_rate(&mut raw, 4096, Duration::from_secs(1));
    eprintln!("raw 4 KiB pwrite+fdatasync: {raw_before:.0}/s");

    let mut rows = Vec::new();
    // `s1-always-alone`: the same point with every command logged alone (`coalesce_max` 1),
    // the baseline of coalesced records (`runtime::actor`, "Coalesced records").
    let points = [
        (1u32, wal::FsyncPolicy::Always, COALESCE_MAX_DEFAULT, ""),
        (1, wal::FsyncPolicy::Always, 1, "-alone"),
        (1, wal::FsyncPolicy::Never, COALESCE_MAX_DEFAULT, ""),
        (2, wal::FsyncPolicy::Always, COALESCE_MAX_DEFAULT, ""),
        (2, wal::FsyncPolicy::Never, COALESCE_MAX_DEFAULT, ""),
    ];
    for (shards, fsync, coalesce_max, suffix) in points {
        let point = format!("s{shards}-{}{suffix}", fsync_name(fsync));
        if only
            .as_deref()
            .is_some_and(|only| !only.split(',').any(|one| one == point))
        {
            continue;
        }
        // This point's own baselines: the disk and the bare log, just before it.
        let raw_syncs_per_second = raw_rate(&mut raw, 4096, BASELINE_RUN);
        let bare_wal_per_second = bare_wal_rate(fsync, callers, DEPOSIT_RECORD_BYTES);
        eprintln!(
            "  {point}: raw {raw_syncs_per_second:.0} syncs/s, bare WAL \
             {bare_wal_per_second:.0} records/s"
        );
        let mut measured = measure(
            (shards, fsync, coalesce_max),
            wallets,
            callers,
            run_time,
            &point,
        );
        for row in &mut measured {
            row.raw_syncs_per_second = raw_syncs_per_second;
            row.bare_wal_per_second = bare_wal_per_second;
        }
        rows.extend(measured);
    }
    let raw_after = raw_rate(&mut raw, 4096, Duration::from_secs(1));

    println!();
    println!(
        "raw 4 KiB pwrite + fdatasync, one thread, preallocated file: {raw_before:.0} syncs/s \
         at start, {raw_after:.0} at end"
    );
    println!(
        "CPU us/op: CPU time of the whole process (all threads: callers, shards, WAL) per \
         operation; cores busy: that CPU time over the wall time (2 is all of this machine); \
         sync mean: the WAL's mean fdatasync time during the run, the disk's speed \
         then (0 with fsync never); syncs/s counts the WAL's write rounds, synced or not"
    );
    println!(
        "baselines per point, measured just before it: raw = 4 KiB pwrite+fdatasync syncs/s (one \
         thread); bare WAL = records/s of {callers} async appenders of {DEPOSIT_RECORD_BYTES} B \
         records (a deposit's record size) on the bare log, same fsync policy"
    );
    println!();
    println!(
        "| point     | workload                     |    ops/s | CPU us/op | cores busy | syncs/s | ops/sync | sync mean | WAL B/op | raw syncs/s | bare WAL rec/s | ops/s ÷ bare WAL |"
    );
    println!(
        "|-----------|------------------------------|---------:|----------:|-----------:|--------:|---------:|----------:|---------:|------------:|---------------:|-----------------:|"
    );
    for row in &rows {
        let rate = row.run.per_second() * row.items_per_op as f64;
        let ops = (row.run.accepted + row.run.rejected) * row.items_per_op;
        let secs = row.run.elapsed.as_secs_f64();
        println!(
            "| {:<9} | {:<28} | {rate:>8.0} | {:>9.1} | {:>10.2} | {:>7.0} | {:>8.1} | {:>6.0} us | {:>8.0} | {:>11.0} | {:>14.0} | {:>16.2} |",
            row.point,
            row.workload,
            row.cpu_seconds * 1e6 / ops.max(1) as f64,
            row.cpu_seconds / secs,
            row.syncs as f64 / secs,
            ops as f64 / row.syncs.max(1) as f64,
            row.sync_nanos as f64 / row.syncs.max(1) as f64 / 1000.0,
            row.wal_bytes as f64 / ops.max(1) as f64,
            row.raw_syncs_per_second,
            row.bare_wal_per_second,
            rate / row.bare_wal_per_second.max(1.0),
        );
        assert_eq!(
            row.run.rejected, 0,
            "{} {}: rejections",
            row.point, row.workload
        );
    }
}

/// Records/s of `callers` async appenders of `record_bytes` on a fresh bare log.
fn bare_wal_rate(fsync: wal::FsyncPolicy, callers: usize, record_bytes: usize) -> f64 {
    let dir = scratch_dir("engine-throughput-wal").expect("scratch dir");
    let (log, _) = wal::Wal::open(dir.path(), wal_options(fsync)).expect("open the log");
    run_async_appenders(&log, callers, record_bytes, Duration::from_millis(200));
    let (records, elapsed) = run_async_appenders(&log, callers, record_bytes, BASELINE_RUN);
    log.close().expect("close the log");
    records as f64 / elapsed.as_secs_f64()
}

fn fsync_name(fsync: wal::FsyncPolicy) -> &'static str {
    match fsync {
        wal::FsyncPolicy::Always => "always",
        wal::FsyncPolicy::Never => "never",
    }
}

fn measure(
    (shards, fsync, coalesce_max): (u32, wal::FsyncPolicy, usize),
    wallets: u64,
    callers: usize,
    run_time: Duration,
    point: &str,
) -> Vec<Row> {
    let dir = scratch_dir("engine-throughput").expect("scratch dir");
    let mut config = engine_config(dir.path(), shards, fsync);
    config.coalesce_max = coalesce_max;
    let (engine, _) = open_engine(config);
    let runtime = caller_runtime();
    let mut rows = Vec::new();
    let mut row = |workload: &str, items_per_op: u64, engine: &Engine, run: &dyn Fn() -> Run| {
        let before = engine.wal_stats();
        let cpu_before = process_cpu_seconds();
        let run = run();
        let cpu_seconds = process_cpu_seconds() - cpu_before;
        let after = engine.wal_stats();
        eprintln!(
            "  {point} {workload}: {:.0} ops/s ({} rejected)",
            run.per_second() * items_per_op as f64,
            run.rejected
        );
        rows.push(Row {
            point: point.to_string(),
            workload: workload.to_string(),
            run,
            items_per_op,
            cpu_seconds,
            raw_syncs_per_second: 0.0,
            bare_wal_per_second: 0.0,
            syncs: after.syncs - before.syncs,
            sync_nanos: after.sync_nanos - before.sync_nanos,
            wal_bytes: after.bytes - before.bytes,
        });
    };

    let started = Instant::now();
    let ids = std::cell::RefCell::new(Vec::new());
    row("create wallet", 1, &engine, &|| {
        let (created, run) = create_wallets(&runtime, &engine, 1, wallets, callers);
        *ids.borrow_mut() = created;
        run
    });
    eprintln!(
        "  {point}: created {wallets} wallets in {:.1?}",
        started.elapsed()
    );
    let ids = Arc::new(ids.into_inner());
    {
        let (engine_c, ids_c) = (engine.clone(), ids.clone());
        let next = Arc::new(std::sync::atomic::AtomicU64::new(0));
        row("deposit, every wallet once", 1, &engine, &|| {
            let (engine, ids, next) = (engine_c.clone(), ids_c.clone(), next.clone());
            closed_loop(
                &runtime,
                callers,
                Some(ids.len() as u64),
                Duration::MAX,
                move |_, _| {
                    let index = next.fetch_add(1, std::sync::atomic::Ordering::Relaxed);
                    let (engine, wallet) = (engine.clone(), ids[index as usize]);
                    async move {
                        engine.execute(deposit_command(wallet, 1_000_000)).await?;
                        Ok(())
                    }
                },
            )
        });
    }
    {
        let (engine_c, ids_c) = (engine.clone(), ids.clone());
        row("deposit, random wallet", 1, &engine, &|| {
            let (engine, ids) = (engine_c.clone(), ids_c.clone());
            closed_loop(&runtime, callers, None, run_time, move |caller, counter| {
                let mut rng = Rng::new((caller as u64) << 32 | counter);
                let wallet = ids[rng.below(ids.len() as u64) as usize];
                let engine = engine.clone();
                async move {
                    engine
                        .execute(deposit_command(wallet, 1 + rng.below(10_000) as i64))
                        .await?;
                    Ok(())
                }
            })
        });
    }
    let pair_kinds: &[Pairs] = if shards == 1 {
        &[Pairs::Random]
    } else {
        &[Pairs::Random, Pairs::SameShard, Pairs::CrossShard]
    };
    for &pairs in pair_kinds {
        let by_shard: Arc<Vec<Vec<WalletId>>> = Arc::new(
            (0..shards)
                .map(|s| {
                    ids.iter()
                        .copied()
                        .filter(|w| engine.shard_of_wallet(*w) == s)
                        .collect()
                })
                .collect(),
        );
        let workload = match pairs {
            Pairs::Random => "transfer, random pair",
            Pairs::SameShard => "transfer, same-shard pair",
            Pairs::CrossShard => "transfer, cross-shard pair",
        };
        let (engine_c, ids_c) = (engine.clone(), ids.clone());
        row(workload, 1, &engine, &|| {
            let (engine, ids, by_shard) = (engine_c.clone(), ids_c.clone(), by_shard.clone());
            closed_loop(&runtime, callers, None, run_time, move |caller, counter| {
                let mut rng = Rng::new((caller as u64) << 32 | counter | 1 << 63);
                let (source, target) = pick_pair(&mut rng, &ids, &by_shard, pairs);
                let engine = engine.clone();
                async move {
                    engine
                        .execute(transfer_command(source, target, 1 + rng.below(100) as i64))
                        .await?;
                    Ok(())
                }
            })
        });
    }
    for (size, atomic) in BATCH_ROWS {
        let workload = if atomic {
            format!("transfer batch x{size}, random, atomic")
        } else {
            format!("transfer batch x{size}, random")
        };
        let (engine_c, ids_c) = (engine.clone(), ids.clone());
        row(&workload, size as u64, &engine, &|| {
            let (engine, ids) = (engine_c.clone(), ids_c.clone());
            closed_loop(
                &runtime,
                BATCH_CALLERS.min(callers),
                None,
                run_time,
                move |caller, counter| {
                    let mut rng = Rng::new((caller as u64) << 32 | counter | 1 << 62);
                    let items = (0..size)
                        .map(|_| {
                            let (source, target) = rng.two_of(&ids);
                            BatchItem::Transfer(transfer_args(
                                source,
                                target,
                                1 + rng.below(100) as i64,
                            ))
                        })
                        .collect();
                    let engine = engine.clone();
                    async move {
                        let answer = engine.execute_batch(items, atomic).await?;
                        // A refused item fails the run (the row asserts none): every wallet
                        // holds far more than a run can move out of it.
                        match answer.items.into_iter().find_map(|item| match item {
                            BatchItemResult::Rejected(rejection) => Some(rejection),
                            _ => None,
                        }) {
                            Some(rejection) => Err(EngineError::Rejected(rejection)),
                            None => Ok(()),
                        }
                    }
                },
            )
        });
    }
    drop(runtime);
    engine.shutdown().expect("shut the engine down");
    rows
}

fn pick_pair(
    rng: &mut Rng,
    ids: &[WalletId],
    by_shard: &[Vec<WalletId>],
    pairs: Pairs,
) -> (WalletId, WalletId) {
    let pick = |rng: &mut Rng, from: &[WalletId]| from[rng.below(from.len() as u64) as usize];
    loop {
        let (source, target) = match pairs {
            Pairs::Random => (pick(rng, ids), pick(rng, ids)),
            Pairs::SameShard => {
                let shard = &by_shard[rng.below(by_shard.len() as u64) as usize];
                (pick(rng, shard), pick(rng, shard))
            }
            Pairs::CrossShard => {
                let first = rng.below(by_shard.len() as u64) as usize;
                let second =
                    (first + 1 + rng.below(by_shard.len() as u64 - 1) as usize) % by_shard.len();
                (pick(rng, &by_shard[first]), pick(rng, &by_shard[second]))
            }
        };
        if source != target {
            return (source, target);
        }
    }
}

/// pwrite + fdatasync of `record_bytes` for `run`, one thread; syncs per second.
fn raw_rate(raw: &mut RawSync, record_bytes: usize, run: Duration) -> f64 {
    let buf = vec![0x5Au8; record_bytes];
    let started = Instant::now();
    let mut syncs = 0u64;
    while started.elapsed() < run {
        raw.write_and_sync(&buf).expect("pwrite + fdatasync");
        syncs += 1;
    }
    syncs as f64 / started.elapsed().as_secs_f64()
}
