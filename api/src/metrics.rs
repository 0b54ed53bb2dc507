//! Prometheus metrics, written by hand: a few counters and histograms do not justify the
//! exporter crates' build time on 2 cores (notes/dependencies.md §5).
//!
//! - `walletd_http_requests_total{operation,status}`
//! - `walletd_http_request_duration_seconds{operation}` (histogram)
//! - `walletd_wal_*`: fsyncs (group commits), fsync seconds, records, bytes, last and durable
//!   LSN; the mean batch is `walletd_wal_records_total / walletd_wal_fsyncs_total`
//! - `walletd_shard_queue_depth{shard}`: commands queued at or running on each shard
//! - `walletd_quarantined_moves`: cross-shard moves recovery could not finish (left reserved)
//! - `walletd_idempotency_keys_in_memory`: keys in flight or answered but not yet filed in the
//!   history store (flat under load; the answers themselves live in the store)
//! - `walletd_history_memory_bytes{part}`: what the history store holds in memory
//!   (`memtables`, `block_cache`, `pinned_filters`, `pinned_indexes`), and
//!   `walletd_history_tables`, its tables on disk: which part of RSS is the store, and whether
//!   one grows with history; `walletd_history_answer_generations`, the idempotency answers'
//!   generations on disk (about five, whatever the history)
//! - `walletd_snapshots_total{result}` (`written`, `failed`), `walletd_snapshot_running`,
//!   `walletd_snapshot_seconds_total` and `walletd_snapshot_cpu_seconds_total` (wall and CPU
//!   time of the background snapshots), and of the newest one written
//!   `walletd_snapshot_last_{seconds,cpu_seconds,bytes,lsn}`: what periodic snapshots cost
//!   beside the load, and whether they keep succeeding (a failing one keeps the log's segments)
//! - `walletd_webhook_events_total{provider,result}`: provider events by what they did
//!   (`applied`, `not_applied`, `duplicate`, `refused`: bad signature, stale or invalid)

use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::Duration;

use dashmap::DashMap;

/// Upper bounds of the latency buckets, in seconds.
const BUCKETS: [f64; 12] = [
    0.0005, 0.001, 0.002, 0.005, 0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 5.0,
];

#[derive(Default)]
struct Histogram {
    buckets: [AtomicU64; BUCKETS.len()],
    count: AtomicU64,
    sum_micros: AtomicU64,
}

/// The type line of a metric without labels.
#[derive(Clone, Copy)]
enum Kind {
    Counter,
    Gauge,
}

/// Writes one metric without labels: its help, its type and its value.
fn scalar(out: &mut String, name: &str, kind: Kind, help: &str, value: &dyn std::fmt::Display) {
    let kind = match kind {
        Kind::Counter => "counter",
        Kind::Gauge => "gauge",
    };
    let _ = writeln!(
        out,
        "# HELP {name} {help}\n# TYPE {name} {kind}\n{name} {value}"
    );
}

/// Where the log and the history indexer stand.
#[derive(Debug, Clone, Copy, Default)]
pub struct LogGauges {
    /// Newest LSN appended.
    pub last_lsn: u64,
    /// Newest durable LSN.
    pub durable_lsn: u64,
    /// Newest LSN filed in the history store (`durable_lsn` minus this is the indexer's lag).
    pub indexed_lsn: u64,
    /// Total time the indexer waited for the store's flushes.
    pub memtable_wait: Duration,
    /// The store reads made on a request's path (idempotency lookups, a shard's recall).
    pub foreground_reads: engine::runtime::history::ForegroundReadStats,
    /// What the history store holds in memory (`None` when it could not be read: not served).
    pub store_memory: Option<engine::runtime::history::StoreMemory>,
    /// What the snapshots since the engine opened cost.
    pub snapshots: engine::runtime::SnapshotStats,
}

/// Request counters and latency histograms.
#[derive(Default)]
pub struct Metrics {
    requests: DashMap<(&'static str, u16), AtomicU64>,
    latency: DashMap<&'static str, Histogram>,
    webhooks: DashMap<(&'static str, &'static str), AtomicU64>,
}

impl Metrics {
    pub fn new() -> Self {
        Metrics::default()
    }

    pub fn observe(&self, operation: &'static str, status: u16, took: Duration) {
        self.requests
            .entry((operation, status))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
        let histogram = self.latency.entry(operation).or_default();
        let seconds = took.as_secs_f64();
        for (bound, bucket) in BUCKETS.iter().zip(&histogram.buckets) {
            if seconds <= *bound {
                bucket.fetch_add(1, Ordering::Relaxed);
            }
        }
        histogram.count.fetch_add(1, Ordering::Relaxed);
        histogram.sum_micros.fetch_add(
            u64::try_from(took.as_micros()).unwrap_or(u64::MAX),
            Ordering::Relaxed,
        );
    }

    /// Counts one provider event by what it did.
    pub fn webhook(&self, provider: &'static str, result: &'static str) {
        self.webhooks
            .entry((provider, result))
            .or_default()
            .fetch_add(1, Ordering::Relaxed);
    }

    /// Prometheus text exposition, with the engine's WAL figures appended.
    pub fn render(
        &self,
        wal: wal::StatsSnapshot,
        log: LogGauges,
        queue_depths: &[u64],
        quarantined_moves: usize,
        idempotency_keys_in_memory: usize,
    ) -> String {
        let mut out = String::new();
        out.push_str("# HELP walletd_http_requests_total HTTP requests by operation and status.\n");
        out.push_str("# TYPE walletd_http_requests_total counter\n");
        let mut requests: Vec<_> = self
            .requests
            .iter()
            .map(|item| {
                (
                    item.key().0,
                    item.key().1,
                    item.value().load(Ordering::Relaxed),
                )
            })
            .collect();
        requests.sort();
        for (operation, status, count) in requests {
            let _ = writeln!(out, "walletd_http_requests_total{{operation=\"{operation}\",status=\"{status}\"}} {count}");
        }
        out.push_str("# HELP walletd_http_request_duration_seconds HTTP request latency.\n");
        out.push_str("# TYPE walletd_http_request_duration_seconds histogram\n");
        let mut operations: Vec<&'static str> =
            self.latency.iter().map(|item| *item.key()).collect();
        operations.sort_unstable();
        for operation in operations {
            let Some(histogram) = self.latency.get(operation) else {
                continue;
            };
            for (bound, bucket) in BUCKETS.iter().zip(&histogram.buckets) {
                let _ = writeln!(
                    out,
                    "walletd_http_request_duration_seconds_bucket{{operation=\"{operation}\",le=\"{bound}\"}} {}",
                    bucket.load(Ordering::Relaxed)
                );
            }
            let count = histogram.count.load(Ordering::Relaxed);
            let _ = writeln!(out, "walletd_http_request_duration_seconds_bucket{{operation=\"{operation}\",le=\"+Inf\"}} {count}");
            let _ = writeln!(
                out,
                "walletd_http_request_duration_seconds_sum{{operation=\"{operation}\"}} {}",
                histogram.sum_micros.load(Ordering::Relaxed) as f64 / 1e6
            );
            let _ = writeln!(
                out,
                "walletd_http_request_duration_seconds_count{{operation=\"{operation}\"}} {count}"
            );
        }
        let slow_help = format!(
            "fdatasync calls that took {} ms or more (every append waiting on one waited that long).",
            wal::SLOW_SYNC.as_millis()
        );
        let fsync_seconds = wal.sync_nanos as f64 / 1e9;
        let tap_wait_seconds = wal.tap_wait_nanos as f64 / 1e9;
        let memtable_wait_seconds = log.memtable_wait.as_secs_f64();
        let foreground_read_seconds = log.foreground_reads.nanos as f64 / 1e9;
        let slow_read_help = format!(
            "History store reads on a request's path that took {} ms or more (each one held an HTTP worker or a shard that long).",
            engine::runtime::history::SLOW_FOREGROUND_READ.as_millis()
        );
        let scalars: [(&str, Kind, &str, &dyn std::fmt::Display); 13] = [
            ("walletd_wal_fsyncs_total", Kind::Counter, "Write + fdatasync rounds of the WAL writer (group commits).", &wal.syncs),
            ("walletd_wal_fsync_seconds_total", Kind::Counter, "Time spent in fdatasync.", &fsync_seconds),
            ("walletd_wal_records_total", Kind::Counter, "Records written to the WAL (records / fsyncs = mean batch).", &wal.records),
            ("walletd_wal_bytes_total", Kind::Counter, "Bytes written to the WAL.", &wal.bytes),
            ("walletd_wal_slow_fsyncs_total", Kind::Counter, &slow_help, &wal.slow_syncs),
            ("walletd_wal_indexer_wait_seconds_total", Kind::Counter, "Time the WAL writer waited to hand durable records to the history indexer (its back-pressure: nothing is written meanwhile).", &tap_wait_seconds),
            ("walletd_history_indexed_lsn", Kind::Gauge, "Newest LSN filed in the history store.", &log.indexed_lsn),
            ("walletd_history_memtable_wait_seconds_total", Kind::Counter, "Time the history indexer waited for the store to flush full memtables.", &memtable_wait_seconds),
            ("walletd_history_foreground_reads_total", Kind::Counter, "History store reads on a request's path: idempotency lookups on the HTTP workers, a shard's recall of records that left its memory.", &log.foreground_reads.reads),
            ("walletd_history_foreground_read_seconds_total", Kind::Counter, "Time spent in history store reads on a request's path.", &foreground_read_seconds),
            ("walletd_history_slow_foreground_reads_total", Kind::Counter, &slow_read_help, &log.foreground_reads.slow),
            ("walletd_wal_last_lsn", Kind::Gauge, "Newest LSN appended.", &log.last_lsn),
            ("walletd_wal_durable_lsn", Kind::Gauge, "Newest durable LSN.", &log.durable_lsn),
        ];
        for (name, kind, help, value) in scalars {
            scalar(&mut out, name, kind, help, value);
        }
        if let Some(memory) = log.store_memory {
            let _ = writeln!(
                out,
                "# HELP walletd_history_memory_bytes What the history store holds in memory, by part.\n# TYPE walletd_history_memory_bytes gauge"
            );
            for (part, bytes) in [
                ("memtables", memory.memtables),
                ("block_cache", memory.block_cache),
                ("pinned_filters", memory.pinned_filters),
                ("pinned_indexes", memory.pinned_indexes),
            ] {
                let _ = writeln!(
                    out,
                    "walletd_history_memory_bytes{{part=\"{part}\"}} {bytes}"
                );
            }
            scalar(
                &mut out,
                "walletd_history_tables",
                Kind::Gauge,
                "Tables of the history store on disk, all keyspaces.",
                &memory.tables,
            );
            scalar(
                &mut out,
                "walletd_history_answer_generations",
                Kind::Gauge,
                "Generations of idempotency answers on disk: keyspaces of a quarter of the retention window each, deleted whole once their answers expired.",
                &memory.answer_generations,
            );
        }
        render_snapshots(&mut out, &log.snapshots);
        let _ = writeln!(
            out,
            "# HELP walletd_shard_queue_depth Commands queued at or running on a shard."
        );
        let _ = writeln!(out, "# TYPE walletd_shard_queue_depth gauge");
        for (shard, depth) in queue_depths.iter().enumerate() {
            let _ = writeln!(
                out,
                "walletd_shard_queue_depth{{shard=\"{shard}\"}} {depth}"
            );
        }
        let _ = writeln!(out, "# HELP walletd_quarantined_moves Cross-shard moves recovery could not finish and left reserved (see GET /v1/health).\n# TYPE walletd_quarantined_moves gauge\nwalletd_quarantined_moves {quarantined_moves}");
        let _ = writeln!(out, "# HELP walletd_idempotency_keys_in_memory Idempotency keys held in memory: in flight, or answered and not yet filed in the history store.\n# TYPE walletd_idempotency_keys_in_memory gauge\nwalletd_idempotency_keys_in_memory {idempotency_keys_in_memory}");
        let _ = writeln!(
            out,
            "# HELP walletd_webhook_events_total Provider events by result.\n# TYPE walletd_webhook_events_total counter"
        );
        let mut webhooks: Vec<_> = self
            .webhooks
            .iter()
            .map(|item| (*item.key(), item.value().load(Ordering::Relaxed)))
            .collect();
        webhooks.sort_unstable();
        for ((provider, result), count) in webhooks {
            let _ = writeln!(
                out,
                "walletd_webhook_events_total{{provider=\"{provider}\",result=\"{result}\"}} {count}"
            );
        }
        out
    }
}

/// The snapshot metrics: counts, totals, and the newest snapshot written (absent before one).
fn render_snapshots(out: &mut String, stats: &engine::runtime::SnapshotStats) {
    let _ = writeln!(
        out,
        "# HELP walletd_snapshots_total Background snapshots since walletd started, by result.\n# TYPE walletd_snapshots_total counter\nwalletd_snapshots_total{{result=\"written\"}} {}\nwalletd_snapshots_total{{result=\"failed\"}} {}",
        stats.written, stats.failed
    );
    let running = u8::from(stats.running);
    let wall = stats.wall_total.as_secs_f64();
    let cpu = stats.cpu_total.as_secs_f64();
    let totals: [(&str, Kind, &str, &dyn std::fmt::Display); 3] = [
        ("walletd_snapshot_running", Kind::Gauge, "1 while a snapshot is being built.", &running),
        ("walletd_snapshot_seconds_total", Kind::Counter, "Wall time of the snapshots that ended, written or failed.", &wall),
        ("walletd_snapshot_cpu_seconds_total", Kind::Counter, "CPU time of the snapshots that ended, written or failed (a snapshot's thread replays the log since the last one, then encodes and writes the image).", &cpu),
    ];
    for (name, kind, help, value) in totals {
        scalar(out, name, kind, help, value);
    }
    let Some(last) = stats.last else {
        return;
    };
    let (wall, cpu) = (last.wall.as_secs_f64(), last.cpu.as_secs_f64());
    let newest: [(&str, &str, &dyn std::fmt::Display); 4] = [
        (
            "walletd_snapshot_last_seconds",
            "Wall time of the newest snapshot written.",
            &wall,
        ),
        (
            "walletd_snapshot_last_cpu_seconds",
            "CPU time of the newest snapshot written.",
            &cpu,
        ),
        (
            "walletd_snapshot_last_bytes",
            "Size of the newest snapshot written.",
            &last.bytes,
        ),
        (
            "walletd_snapshot_last_lsn",
            "The LSN the newest snapshot written covers (a restart replays the log after it).",
            &last.covered_lsn,
        ),
    ];
    for (name, help, value) in newest {
        scalar(out, name, Kind::Gauge, help, value);
    }
}
