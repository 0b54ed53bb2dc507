//! Statistics of a run: latency histograms (HDR, microseconds) and statuses per request kind,
//! the live progress line, the final table, the JSON summary and the CSV row.

use std::collections::BTreeMap;
use std::io::Write as _;
use std::path::Path;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex, PoisonError};
use std::time::{Duration, Instant};

use hdrhistogram::Histogram;
use serde::Serialize;

use super::audit::{AuditReport, Model};
use super::mix::Kind;

/// Latencies from 1 us to 60 s at 3 significant digits.
pub fn histogram() -> Histogram<u64> {
    match Histogram::new_with_bounds(1, 60_000_000, 3) {
        Ok(histogram) => histogram,
        Err(error) => unreachable!("constant histogram bounds are valid: {error}"),
    }
}

/// What one connection (and, merged, the run) saw inside the measured window.
pub struct Stats {
    pub latency: Vec<Histogram<u64>>,
    /// Non-2xx answers by (kind, status, error code).
    pub statuses: BTreeMap<(Kind, u16, String), u64>,
    /// Requests without an answer, by (kind, what happened). Counted over the whole run.
    pub transport: BTreeMap<(Kind, String), u64>,
}

impl Stats {
    pub fn new() -> Stats {
        Stats {
            latency: (0..Kind::COUNT).map(|_| histogram()).collect(),
            statuses: BTreeMap::new(),
            transport: BTreeMap::new(),
        }
    }

    pub fn record(&mut self, kind: Kind, micros: u64) {
        if let Some(histogram) = self.latency.get_mut(kind.index()) {
            histogram.saturating_record(micros.max(1));
        }
    }

    pub fn merge(&mut self, other: &Stats) {
        for (mine, theirs) in self.latency.iter_mut().zip(&other.latency) {
            let _ = mine.add(theirs);
        }
        for (key, count) in &other.statuses {
            *self.statuses.entry(key.clone()).or_default() += count;
        }
        for (key, count) in &other.transport {
            *self.transport.entry(key.clone()).or_default() += count;
        }
    }

    pub fn all(&self) -> Histogram<u64> {
        let mut all = histogram();
        for histogram in &self.latency {
            let _ = all.add(histogram);
        }
        all
    }
}

impl Default for Stats {
    fn default() -> Self {
        Stats::new()
    }
}

/// Counters the progress line reads while the run goes on.
pub struct Live {
    pub answers: AtomicU64,
    pub non_2xx: AtomicU64,
    pub transport_errors: AtomicU64,
    /// All measured latencies so far (one uncontended lock per answer on 1-2 threads).
    pub latency: Mutex<Histogram<u64>>,
}

impl Live {
    pub fn new() -> Live {
        Live {
            answers: AtomicU64::new(0),
            non_2xx: AtomicU64::new(0),
            transport_errors: AtomicU64::new(0),
            latency: Mutex::new(histogram()),
        }
    }

    pub fn answer(&self, status: u16, micros: Option<u64>) {
        self.answers.fetch_add(1, Ordering::Relaxed);
        if !(200..300).contains(&status) {
            self.non_2xx.fetch_add(1, Ordering::Relaxed);
        }
        if let Some(micros) = micros {
            self.latency
                .lock()
                .unwrap_or_else(PoisonError::into_inner)
                .saturating_record(micros.max(1));
        }
    }
}

impl Default for Live {
    fn default() -> Self {
        Live::new()
    }
}

/// Prints one line per second on stderr until `deadline`.
pub async fn progress(live: Arc<Live>, started: Instant, measure_from: Instant, deadline: Instant) {
    let mut tick = tokio::time::interval_at(
        tokio::time::Instant::from_std(started + Duration::from_secs(1)),
        Duration::from_secs(1),
    );
    let mut last_answers = 0u64;
    let mut last_at = started;
    loop {
        tick.tick().await;
        let now = Instant::now();
        let answers = live.answers.load(Ordering::Relaxed);
        let rate = (answers - last_answers) as f64 / (now - last_at).as_secs_f64().max(1e-9);
        last_answers = answers;
        last_at = now;
        let (p50, p99) = {
            let histogram = live.latency.lock().unwrap_or_else(PoisonError::into_inner);
            if histogram.is_empty() {
                (None, None)
            } else {
                (
                    Some(histogram.value_at_quantile(0.50)),
                    Some(histogram.value_at_quantile(0.99)),
                )
            }
        };
        let phase = if now < measure_from { " warm-up" } else { "" };
        eprintln!(
            "[{:>5.1}s{phase}] {:>8.0} req/s | non-2xx {} | io errors {} | p50 {} | p99 {} (so far)",
            (now - started).as_secs_f64(),
            rate,
            live.non_2xx.load(Ordering::Relaxed),
            live.transport_errors.load(Ordering::Relaxed),
            p50.map_or("-".into(), ms),
            p99.map_or("-".into(), ms),
        );
        if now >= deadline {
            return;
        }
    }
}

fn ms(micros: u64) -> String {
    format!("{:.3} ms", micros as f64 / 1000.0)
}

/// Latency and throughput of one request kind (or all).
#[derive(Clone, Debug, Serialize)]
pub struct KindSummary {
    pub requests: u64,
    pub rps: f64,
    pub mean_us: f64,
    pub p50_us: u64,
    pub p90_us: u64,
    pub p99_us: u64,
    pub p999_us: u64,
    pub max_us: u64,
}

impl KindSummary {
    pub fn of(histogram: &Histogram<u64>, seconds: f64) -> KindSummary {
        let requests = histogram.len();
        let q = |quantile: f64| {
            if requests == 0 {
                0
            } else {
                histogram.value_at_quantile(quantile)
            }
        };
        KindSummary {
            requests,
            rps: requests as f64 / seconds.max(1e-9),
            mean_us: if requests == 0 { 0.0 } else { histogram.mean() },
            p50_us: q(0.50),
            p90_us: q(0.90),
            p99_us: q(0.99),
            p999_us: q(0.999),
            max_us: if requests == 0 { 0 } else { histogram.max() },
        }
    }
}

#[derive(Clone, Debug, Serialize)]
pub struct StatusCount {
    pub kind: &'static str,
    pub status: u16,
    pub code: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct TransportCount {
    pub kind: &'static str,
    pub error: String,
    pub count: u64,
}

#[derive(Clone, Debug, Serialize)]
pub struct UnknownCount {
    pub kind: &'static str,
    pub count: u64,
    pub amount: String,
}

/// The machine-readable summary (`--json`).
#[derive(Clone, Debug, Serialize)]
pub struct Summary {
    pub label: String,
    /// `walletd` or `baseline`.
    pub target: &'static str,
    pub url: String,
    pub client: String,
    pub threads: usize,
    pub seed: u64,
    pub mix: String,
    pub connections: usize,
    pub wallets: usize,
    pub idempotency: bool,
    pub warmup_s: f64,
    /// The measured window, from the end of the warm-up to the last answer.
    pub duration_s: f64,
    pub total: KindSummary,
    pub ops: BTreeMap<&'static str, KindSummary>,
    pub non_2xx: Vec<StatusCount>,
    pub transport_errors: Vec<TransportCount>,
    pub unknown: Vec<UnknownCount>,
    pub audit: Option<AuditReport>,
    /// CPU used in the measured window, from /proc (100 Hz ticks: read it over seconds).
    pub cpu: Cpu,
    /// walletd's WAL over the measured window (from its /metrics; walletd target only; absent
    /// when the server restarted in between).
    pub wal: Option<super::metrics::WalSummary>,
    /// With `--survive-restart`: whether a restart was observed, and when.
    pub restart: Option<super::drill::RestartReport>,
}

/// CPU time of the load generator and (with `--server-pid`) the server over the measured window.
#[derive(Clone, Debug, Default, Serialize)]
pub struct Cpu {
    /// Cores busy on average (CPU seconds per wall second).
    pub client_cores: Option<f64>,
    pub client_us_per_request: Option<f64>,
    pub server_cores: Option<f64>,
    pub server_us_per_request: Option<f64>,
}

/// User + system CPU seconds of a process (`None`: this process), from `/proc/PID/stat`.
pub fn cpu_seconds(pid: Option<u32>) -> Option<f64> {
    let path = match pid {
        Some(pid) => format!("/proc/{pid}/stat"),
        None => "/proc/self/stat".to_owned(),
    };
    let text = std::fs::read_to_string(path).ok()?;
    // Fields after the command name, which is in parentheses and may contain spaces.
    let rest = text.rsplit_once(')')?.1;
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let user: u64 = fields.get(11)?.parse().ok()?;
    let system: u64 = fields.get(12)?.parse().ok()?;
    // USER_HZ is 100 on every Linux build that matters here.
    Some((user + system) as f64 / 100.0)
}

impl Summary {
    pub fn non_2xx_total(&self) -> u64 {
        self.non_2xx.iter().map(|s| s.count).sum()
    }

    pub fn transport_total(&self) -> u64 {
        self.transport_errors.iter().map(|s| s.count).sum()
    }

    pub fn unknown_total(&self) -> u64 {
        self.unknown.iter().map(|s| s.count).sum()
    }
}

/// The parts of a summary the run fills in.
pub struct Header {
    pub label: String,
    pub target: &'static str,
    pub url: String,
    pub client: String,
    pub threads: usize,
    pub seed: u64,
    pub mix: String,
    pub connections: usize,
    pub wallets: usize,
    pub idempotency: bool,
    pub warmup_s: f64,
}

pub fn summarize(
    header: Header,
    seconds: f64,
    stats: &Stats,
    model: &Model,
    audit: Option<AuditReport>,
) -> Summary {
    let mut ops = BTreeMap::new();
    for kind in Kind::ALL {
        if let Some(histogram) = stats.latency.get(kind.index()) {
            if !histogram.is_empty() {
                ops.insert(kind.name(), KindSummary::of(histogram, seconds));
            }
        }
    }
    let non_2xx = stats
        .statuses
        .iter()
        .map(|((kind, status, code), count)| StatusCount {
            kind: kind.name(),
            status: *status,
            code: code.clone(),
            count: *count,
        })
        .collect();
    let transport_errors = stats
        .transport
        .iter()
        .map(|((kind, error), count)| TransportCount {
            kind: kind.name(),
            error: error.clone(),
            count: *count,
        })
        .collect();
    let unknown = Kind::ALL
        .iter()
        .filter(|kind| model.unknown[kind.index()] > 0)
        .map(|kind| UnknownCount {
            kind: kind.name(),
            count: model.unknown[kind.index()],
            amount: super::cents_text(model.unknown_cents[kind.index()]),
        })
        .collect();
    Summary {
        label: header.label,
        target: header.target,
        url: header.url,
        client: header.client,
        threads: header.threads,
        seed: header.seed,
        mix: header.mix,
        connections: header.connections,
        wallets: header.wallets,
        idempotency: header.idempotency,
        warmup_s: header.warmup_s,
        duration_s: seconds,
        total: KindSummary::of(&stats.all(), seconds),
        ops,
        non_2xx,
        transport_errors,
        unknown,
        audit,
        cpu: Cpu::default(),
        wal: None,
        restart: None,
    }
}

/// The human-readable report.
pub fn print_table(summary: &Summary, out: &mut dyn std::io::Write) -> std::io::Result<()> {
    writeln!(
        out,
        "\n{} {} | mix {} | {} connections | {} wallets | {:.1} s measured after {:.1} s warm-up | {} client, {} thread(s) | seed {}{}",
        summary.target,
        summary.url,
        summary.mix,
        summary.connections,
        summary.wallets,
        summary.duration_s,
        summary.warmup_s,
        summary.client,
        summary.threads,
        summary.seed,
        if summary.idempotency { " | Idempotency-Key on writes" } else { "" },
    )?;
    writeln!(
        out,
        "{:<16} {:>9} {:>10} {:>9} {:>9} {:>9} {:>9} {:>9}",
        "request", "count", "req/s", "p50 ms", "p90 ms", "p99 ms", "p99.9 ms", "max ms"
    )?;
    let row = |out: &mut dyn std::io::Write, name: &str, s: &KindSummary| {
        writeln!(
            out,
            "{:<16} {:>9} {:>10.1} {:>9.3} {:>9.3} {:>9.3} {:>9.3} {:>9.3}",
            name,
            s.requests,
            s.rps,
            s.p50_us as f64 / 1000.0,
            s.p90_us as f64 / 1000.0,
            s.p99_us as f64 / 1000.0,
            s.p999_us as f64 / 1000.0,
            s.max_us as f64 / 1000.0,
        )
    };
    for (name, s) in &summary.ops {
        row(out, name, s)?;
    }
    row(out, "all", &summary.total)?;
    let cpu = &summary.cpu;
    if let (Some(cores), Some(per)) = (cpu.client_cores, cpu.client_us_per_request) {
        write!(
            out,
            "cpu: load generator {cores:.2} cores, {per:.1} us/request"
        )?;
        if let (Some(cores), Some(per)) = (cpu.server_cores, cpu.server_us_per_request) {
            write!(out, "; server {cores:.2} cores, {per:.1} us/request")?;
        }
        writeln!(out)?;
    }
    if let Some(wal) = &summary.wal {
        writeln!(
            out,
            "wal: {:.0} fsyncs/s, {:.1} records and {:.0} bytes per fsync, mean fsync {:.0} us, writer in fdatasync {:.0}% of the time",
            wal.fsyncs_per_s,
            wal.records_per_fsync,
            wal.bytes_per_fsync,
            wal.mean_fsync_us,
            wal.fsync_busy * 100.0
        )?;
    }
    if summary.non_2xx.is_empty() {
        writeln!(out, "non-2xx answers: none")?;
    } else {
        writeln!(out, "non-2xx answers (4xx: refused, no effect, except a 409 request_in_progress to a resent request, which waits for the first; 5xx: outcome unknown):")?;
        for s in &summary.non_2xx {
            writeln!(
                out,
                "  {:<16} {} {:<28} {:>9}",
                s.kind, s.status, s.code, s.count
            )?;
        }
    }
    if summary.transport_errors.is_empty() {
        writeln!(out, "transport errors: none")?;
    } else {
        writeln!(out, "transport errors (no answer):")?;
        for s in &summary.transport_errors {
            writeln!(out, "  {:<16} {:<32} {:>9}", s.kind, s.error, s.count)?;
        }
    }
    if summary.unknown.is_empty() {
        writeln!(out, "writes with an unknown outcome: none")?;
    } else {
        writeln!(
            out,
            "writes with an unknown outcome (allowed for in the audit):"
        )?;
        for s in &summary.unknown {
            writeln!(
                out,
                "  {:<16} {:>9} requests, {} YER",
                s.kind, s.count, s.amount
            )?;
        }
    }
    if let Some(restart) = &summary.restart {
        match (restart.observed, restart.load_stopped_at_s) {
            (true, stopped) => writeln!(
                out,
                "restart: observed: {}; the server answered /v1/health again {}; {} failed health probes, WAL counters {}, {} re-logins",
                stopped.map_or("the read-back lost the server".into(), |s| format!(
                    "connection errors stopped the load at {s:.2} s"
                )),
                restart
                    .back_after_s
                    .map_or("-".into(), |s| format!("{s:.2} s later")),
                restart.failed_health_probes,
                match restart.wal_counters_reset {
                    Some(true) => "started over",
                    Some(false) => "kept counting",
                    None => "unread",
                },
                restart.relogins,
            )?,
            (false, Some(stopped)) => writeln!(
                out,
                "restart: none observed, but connection errors stopped the load at {stopped:.2} s (the server answered at once)"
            )?,
            (false, None) => writeln!(
                out,
                "restart: none observed (--survive-restart {} s)",
                restart.survive_restart_s
            )?,
        }
    }
    match &summary.audit {
        None => writeln!(out, "audit: not run (baseline target)")?,
        Some(audit) if audit.ok => writeln!(
            out,
            "audit: OK: {} wallets read back match the acknowledged requests; total {} YER (before the run {}, expected {} within [{}, {}]); {} unknown outcomes",
            audit.wallets,
            audit.total_actual,
            audit.total_before,
            audit.total_expected,
            audit.total_expected_low,
            audit.total_expected_high,
            audit.unknown_requests,
        )?,
        Some(audit) => {
            writeln!(
                out,
                "audit: FAILED: {} mismatches over {} wallets; total {} YER, expected {} within [{}, {}]",
                audit.mismatches.len(),
                audit.wallets,
                audit.total_actual,
                audit.total_expected,
                audit.total_expected_low,
                audit.total_expected_high,
            )?;
            for line in audit.mismatches.iter().take(50) {
                writeln!(out, "  {line}")?;
            }
            if audit.mismatches.len() > 50 {
                writeln!(out, "  ... and {} more", audit.mismatches.len() - 50)?;
            }
        }
    }
    Ok(())
}

const CSV_HEADER: &str = "label,target,mix,client,connections,wallets,duration_s,requests,rps,p50_us,p90_us,p99_us,p999_us,max_us,non_2xx,transport_errors,unknown,audit,client_cores,server_cores,server_us_per_request";

/// Appends one row (and the header if the file is new or empty).
pub fn append_csv(path: &Path, summary: &Summary) -> std::io::Result<()> {
    let fresh = std::fs::metadata(path).map_or(true, |m| m.len() == 0);
    let mut file = std::fs::OpenOptions::new()
        .create(true)
        .append(true)
        .open(path)?;
    if fresh {
        writeln!(file, "{CSV_HEADER}")?;
    }
    let t = &summary.total;
    let audit = match &summary.audit {
        None => "none",
        Some(a) if a.ok => "ok",
        Some(_) => "failed",
    };
    writeln!(
        file,
        "{},{},\"{}\",{},{},{},{:.3},{},{:.1},{},{},{},{},{},{},{},{},{},{},{},{}",
        summary.label.replace(',', ";"),
        summary.target,
        summary.mix,
        summary.client,
        summary.connections,
        summary.wallets,
        summary.duration_s,
        t.requests,
        t.rps,
        t.p50_us,
        t.p90_us,
        t.p99_us,
        t.p999_us,
        t.max_us,
        summary.non_2xx_total(),
        summary.transport_total(),
        summary.unknown_total(),
        audit,
        optional(summary.cpu.client_cores),
        optional(summary.cpu.server_cores),
        optional(summary.cpu.server_us_per_request),
    )
}

fn optional(value: Option<f64>) -> String {
    value.map_or_else(String::new, |v| format!("{v:.2}"))
}
