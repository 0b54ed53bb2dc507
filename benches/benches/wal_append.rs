//! Durable append throughput of the write-ahead log, against the disk's raw fdatasync rate.
//!
//! `wal_append/{appenders}x{bytes}B`: 1, 16 and 256 threads, each appending one record and
//! waiting for it to be durable (fsync always) before the next, like request-response clients.
//! One iteration is one record; criterion reports records/s and bytes/s.
//!
//! `raw_fdatasync/{bytes}B`: one thread doing `pwrite` + `fdatasync` into a preallocated file.
//! One iteration is one sync. Read the WAL rows against these rows from the same run.
//!
//! Run: `cargo bench -p walletd-benches --bench wal_append`. For a plain table with mean records
//! per sync, run the `wal_throughput` binary instead.

use std::time::Duration;

use criterion::{
    criterion_group, criterion_main, BenchmarkId, Criterion, SamplingMode, Throughput,
};
use walletd_benches::{scratch_dir, wal_options, Appenders, RawSync};

const APPENDERS: [usize; 3] = [1, 16, 256];
const RECORD_BYTES: [usize; 3] = [64, 256, 4096];

fn wal_append(c: &mut Criterion) {
    let mut group = c.benchmark_group("wal_append");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for appenders in APPENDERS {
        for record_bytes in RECORD_BYTES {
            let dir = scratch_dir("wal-append").expect("create a scratch dir");
            let (log, _) = wal::Wal::open(dir.path(), wal_options(wal::FsyncPolicy::Always))
                .expect("open the log");
            let pool = Appenders::start(&log, appenders, record_bytes);
            group.throughput(Throughput::ElementsAndBytes {
                elements: 1,
                bytes: record_bytes as u64,
            });
            group.bench_function(
                BenchmarkId::from_parameter(format!("{appenders}x{record_bytes}B")),
                |b| b.iter_custom(|records| pool.run_records(records)),
            );
            drop(pool);
            log.close().expect("close the log");
        }
    }
    group.finish();
}

fn raw_fdatasync(c: &mut Criterion) {
    let mut group = c.benchmark_group("raw_fdatasync");
    group
        .sample_size(10)
        .sampling_mode(SamplingMode::Flat)
        .warm_up_time(Duration::from_secs(1))
        .measurement_time(Duration::from_secs(5));
    for record_bytes in [4096usize, 256] {
        let mut raw = RawSync::new(64 << 20).expect("create the raw sync file");
        let buf = vec![0x5Au8; record_bytes];
        group.throughput(Throughput::ElementsAndBytes {
            elements: 1,
            bytes: record_bytes as u64,
        });
        group.bench_function(
            BenchmarkId::from_parameter(format!("{record_bytes}B")),
            |b| b.iter(|| raw.write_and_sync(&buf).expect("pwrite + fdatasync")),
        );
    }
    group.finish();
}

criterion_group!(benches, raw_fdatasync, wal_append);
criterion_main!(benches);
