//! walletd's own WAL counters (`GET /metrics`), read at the start and the end of the measured
//! window: how many group commits the run caused, how many records each carried, and how long
//! the fsyncs took. They tell a throughput limit set by the disk from one set by CPU.

use std::time::Duration;

use serde::Serialize;

use super::args::ClientKind;
use super::client::{Request, Target};
use super::setup::Caller;

/// The WAL counters at one moment.
#[derive(Copy, Clone, Debug, Default, PartialEq)]
pub struct WalCounters {
    pub fsyncs: f64,
    pub fsync_seconds: f64,
    pub records: f64,
    pub bytes: f64,
}

/// What the WAL did over the measured window.
#[derive(Clone, Debug, Serialize)]
pub struct WalSummary {
    pub fsyncs_per_s: f64,
    pub records_per_fsync: f64,
    pub bytes_per_fsync: f64,
    pub mean_fsync_us: f64,
    /// Fraction of the window the writer spent inside fdatasync.
    pub fsync_busy: f64,
}

impl WalSummary {
    pub fn between(before: WalCounters, after: WalCounters, seconds: f64) -> WalSummary {
        let fsyncs = (after.fsyncs - before.fsyncs).max(0.0);
        let per_fsync = |value: f64| if fsyncs > 0.0 { value / fsyncs } else { 0.0 };
        let fsync_seconds = (after.fsync_seconds - before.fsync_seconds).max(0.0);
        WalSummary {
            fsyncs_per_s: fsyncs / seconds.max(1e-9),
            records_per_fsync: per_fsync(after.records - before.records),
            bytes_per_fsync: per_fsync(after.bytes - before.bytes),
            mean_fsync_us: per_fsync(fsync_seconds) * 1e6,
            fsync_busy: fsync_seconds / seconds.max(1e-9),
        }
    }
}

/// Parses the `walletd_wal_*` counters out of Prometheus text.
pub fn parse(text: &str) -> Option<WalCounters> {
    let mut counters = WalCounters::default();
    let mut seen = 0;
    for line in text.lines().filter(|l| !l.starts_with('#')) {
        let Some((name, value)) = line.split_once(' ') else {
            continue;
        };
        let Ok(value) = value.trim().parse::<f64>() else {
            continue;
        };
        let slot = match name {
            "walletd_wal_fsyncs_total" => &mut counters.fsyncs,
            "walletd_wal_fsync_seconds_total" => &mut counters.fsync_seconds,
            "walletd_wal_records_total" => &mut counters.records,
            "walletd_wal_bytes_total" => &mut counters.bytes,
            _ => continue,
        };
        *slot = value;
        seen += 1;
    }
    (seen == 4).then_some(counters)
}

/// Reads walletd's WAL counters; `None` if /metrics is not there or lacks them.
pub async fn scrape(kind: ClientKind, target: &Target, timeout: Duration) -> Option<WalCounters> {
    let mut caller = Caller::new(kind, target.clone(), timeout);
    let response = caller
        .call(&Request::get("/metrics".into(), None))
        .await
        .ok()?;
    if response.status != 200 {
        return None;
    }
    parse(&String::from_utf8_lossy(&response.body))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counters_parse_and_subtract() {
        let text = "# HELP x\nwalletd_wal_fsyncs_total 10\nwalletd_wal_fsync_seconds_total 0.002\nwalletd_wal_records_total 500\nwalletd_wal_bytes_total 100000\nwalletd_wal_last_lsn 7\n";
        let after = parse(text).unwrap();
        assert_eq!(after.records, 500.0);
        let summary = WalSummary::between(WalCounters::default(), after, 2.0);
        assert_eq!(summary.fsyncs_per_s, 5.0);
        assert_eq!(summary.records_per_fsync, 50.0);
        assert!((summary.mean_fsync_us - 200.0).abs() < 1e-6);
        assert!(parse("walletd_wal_fsyncs_total 1\n").is_none());
    }
}
