//! The engine in process: commands per second through `Engine::execute`, durable and not.
//!
//! `engine/{deposit,transfer}/{callers}c/{fsync}`: one iteration is one command; a batch of
//! iterations is spread over `callers` closed-loop async callers (a 2-worker tokio runtime), each
//! awaiting its answer before the next, over 10 000 funded wallets on one shard. criterion
//! reports commands/s. For the full table (100k wallets, 2 shards, baselines from the same run)
//! run the `engine_throughput` binary instead.
//!
//! `engine_parts/...` (the replay line is timed once and printed, not sampled): the pieces of one command, each alone on one thread, to see where a
//! command's time goes: `Shard::execute` of a deposit or transfer over 100 000 funded wallets
//! (decide + apply + outcome view, no I/O), the WAL record's encoding and decoding
//! (`JournalEntry`), replaying one record (decode + apply, what recovery does per record), and
//! `SystemClock::context` (the per-command entropy from getrandom).
//!
//! Run: `cargo bench -p walletd-benches --bench engine` (or `-- engine_parts` for the parts only).

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;
use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BatchSize, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use engine::runtime::clock::{Clock, SeededClock, SystemClock};
use engine::runtime::journal::JournalEntry;
use engine::{Outcome, Shard, WalletId};
use walletd_benches::engine_load::{
    caller_runtime, closed_loop, create_wallet_command, create_wallets, deposit_command,
    engine_config, open_engine, transfer_command, Rng,
};
use walletd_benches::scratch_dir;

const WALLETS: u64 = 10_000;
const CALLERS: [usize; 2] = [1, 256];

fn engine_commands(c: &mut Criterion) {
    let mut group = c.benchmark_group("engine");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(4))
        .throughput(Throughput::Elements(1));
    for fsync in [wal::FsyncPolicy::Always, wal::FsyncPolicy::Never] {
        let fsync_name = match fsync {
            wal::FsyncPolicy::Always => "always",
            wal::FsyncPolicy::Never => "never",
        };
        let dir = scratch_dir("engine-bench").expect("scratch dir");
        let (engine, _) = open_engine(engine_config(dir.path(), 1, fsync));
        let runtime = caller_runtime();
        let (ids, _) = create_wallets(&runtime, &engine, 1, WALLETS, 256);
        let ids = Arc::new(ids);
        let seed = Arc::new(AtomicU64::new(0));
        {
            let (engine, ids) = (engine.clone(), ids.clone());
            closed_loop(&runtime, 256, Some(WALLETS), Duration::MAX, move |_, _| {
                let index = seed.fetch_add(1, Ordering::Relaxed);
                let (engine, wallet) = (engine.clone(), ids[index as usize]);
                async move {
                    engine.execute(deposit_command(wallet, 1_000_000)).await?;
                    Ok(())
                }
            });
        }
        for callers in CALLERS {
            for kind in ["deposit", "transfer"] {
                let id = BenchmarkId::new(kind, format!("{callers}c/{fsync_name}"));
                group.bench_function(id, |b| {
                    b.iter_custom(|iterations| {
                        let (engine, ids) = (engine.clone(), ids.clone());
                        let run = closed_loop(
                            &runtime,
                            callers,
                            Some(iterations),
                            Duration::MAX,
                            move |caller, counter| {
                                let mut rng = Rng::new((caller as u64) << 32 | counter);
                                let pick =
                                    |rng: &mut Rng| ids[rng.below(ids.len() as u64) as usize];
                                let command = if kind == "deposit" {
                                    deposit_command(pick(&mut rng), 100)
                                } else {
                                    let source = pick(&mut rng);
                                    let mut target = pick(&mut rng);
                                    while target == source {
                                        target = pick(&mut rng);
                                    }
                                    transfer_command(source, target, 1)
                                };
                                let engine = engine.clone();
                                async move {
                                    engine.execute(command).await?;
                                    Ok(())
                                }
                            },
                        );
                        run.elapsed
                    })
                });
            }
        }
        drop(runtime);
        engine.shutdown().expect("shut the engine down");
    }
    group.finish();
}

/// A shard with `wallets` customer wallets, each funded once.
fn funded_shard(wallets: u64, clock: &SeededClock) -> (Shard, Vec<WalletId>) {
    let mut shard = Shard::new(0, 1).expect("shard 0 of 1");
    let mut ids = Vec::with_capacity(wallets as usize);
    for owner in 1..=wallets {
        let (_, outcome) = shard
            .execute(&create_wallet_command(owner), &clock.context())
            .expect("create a wallet");
        let Outcome::Wallet(wallet) = outcome else {
            panic!("creation answered {outcome:?}");
        };
        shard
            .execute(&deposit_command(wallet.id, 1_000_000), &clock.context())
            .expect("fund a wallet");
        ids.push(wallet.id);
    }
    (shard, ids)
}

fn engine_parts(c: &mut Criterion) {
    const PART_WALLETS: u64 = 100_000;
    let mut group = c.benchmark_group("engine_parts");
    group
        .sample_size(20)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(3))
        .throughput(Throughput::Elements(1));
    let clock = SeededClock::new(7, 1_700_000_000_000);
    let (mut shard, ids) = funded_shard(PART_WALLETS, &clock);
    let mut rng = Rng::new(1);
    let mut pair = move || {
        let source = ids[rng.below(ids.len() as u64) as usize];
        let mut target = ids[rng.below(ids.len() as u64) as usize];
        while target == source {
            target = ids[rng.below(ids.len() as u64) as usize];
        }
        (source, target)
    };
    group.bench_function("shard_execute/deposit", |b| {
        b.iter_batched(
            || (deposit_command(pair().0, 100), clock.context()),
            |(command, context)| shard.execute(&command, &context).expect("deposit"),
            BatchSize::SmallInput,
        )
    });
    group.bench_function("shard_execute/transfer", |b| {
        b.iter_batched(
            || {
                let (source, target) = pair();
                (transfer_command(source, target, 1), clock.context())
            },
            |(command, context)| shard.execute(&command, &context).expect("transfer"),
            BatchSize::SmallInput,
        )
    });
    let (source, target) = pair();
    let (events, _) = shard
        .execute(&transfer_command(source, target, 1), &clock.context())
        .expect("transfer");
    let entry = JournalEntry {
        shard: 0,
        events,
        directory: Vec::new(),
        idempotency: Vec::new(),
    };
    let bytes = entry.encode().expect("encode");
    eprintln!(
        "a transfer's journal entry: {} events, {} bytes",
        entry.events.len(),
        bytes.len()
    );
    group.bench_function("journal/encode_transfer", |b| {
        b.iter(|| entry.encode().expect("encode"))
    });
    group.bench_function("journal/decode_transfer", |b| {
        b.iter(|| JournalEntry::decode(&bytes).expect("decode"))
    });
    // Replay: decode and apply a stream of transfer records on a shard that has their wallets.
    let (mut replica, _) = funded_shard(PART_WALLETS, &SeededClock::new(7, 1_700_000_000_000));
    let mut records = Vec::new();
    let (mut source_shard, source_ids) =
        funded_shard(PART_WALLETS, &SeededClock::new(7, 1_700_000_000_000));
    let mut rng = Rng::new(2);
    for _ in 0..200_000 {
        let source = source_ids[rng.below(source_ids.len() as u64) as usize];
        let mut target = source_ids[rng.below(source_ids.len() as u64) as usize];
        while target == source {
            target = source_ids[rng.below(source_ids.len() as u64) as usize];
        }
        let (events, _) = source_shard
            .execute(&transfer_command(source, target, 1), &clock.context())
            .expect("transfer");
        records.push(
            JournalEntry {
                shard: 0,
                events,
                directory: Vec::new(),
                idempotency: Vec::new(),
            }
            .encode()
            .expect("encode"),
        );
    }
    drop(source_shard);
    // Timed once, outside criterion: a record can be applied only once.
    let started = std::time::Instant::now();
    let mut events = 0usize;
    for record in &records {
        let entry = JournalEntry::decode(record).expect("decode");
        events += entry.events.len();
        replica.apply_all(&entry.events).expect("apply");
    }
    let elapsed = started.elapsed();
    eprintln!(
        "engine_parts/replay/decode_apply_transfer: {} records ({events} events) in {elapsed:.2?}: \
         {:.0} records/s, {:.0} events/s, {:.2} us per record",
        records.len(),
        records.len() as f64 / elapsed.as_secs_f64(),
        events as f64 / elapsed.as_secs_f64(),
        elapsed.as_secs_f64() * 1e6 / records.len() as f64
    );
    let system = SystemClock;
    group.bench_function("clock/system_context", |b| b.iter(|| system.context()));
    group.finish();
}

criterion_group!(benches, engine_commands, engine_parts);
criterion_main!(benches);
