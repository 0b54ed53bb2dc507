//! Recovery drills (`--survive-restart SECONDS`): the load generator outlives its server being
//! SIGKILLed and restarted, then audits the restarted server.
//!
//! When a request fails with a connection error (refused, reset, closed mid-answer), the run
//! stops issuing load: every connection loop ends after its current request, which counts as an
//! unknown outcome (it may have been made durable before the kill, or not). Then it polls
//! `GET /v1/health` on the same URL, with a short backoff, until it answers 200 (waiting on an
//! external process: a poll is the only way to see it come back), and the audit runs against the
//! restarted server as it would against the original one. Tokens survive a restart (the JWT
//! secret lives in the data dir); a 401 on the read-back logs in again.
//!
//! Whether a restart was observed is told from two signs: `/v1/health` refused at least once
//! while waiting, or walletd's per-process WAL counter (`walletd_wal_records_total`) lower after
//! the wait than before the load (a new process counts from zero).

use std::io;
use std::time::{Duration, Instant};

use serde::Serialize;

use super::args::ClientKind;
use super::client::{connect, Request, Target};

/// Whether an I/O error from sending a request means the connection (or the server) is gone,
/// as opposed to a slow server (a timeout) or a malformed answer.
pub fn is_connection_error(kind: io::ErrorKind) -> bool {
    !matches!(
        kind,
        io::ErrorKind::TimedOut
            | io::ErrorKind::WouldBlock
            | io::ErrorKind::InvalidData
            | io::ErrorKind::InvalidInput
            | io::ErrorKind::OutOfMemory
    )
}

/// The delays between health probes: 50 ms doubling up to 500 ms.
pub fn backoff(attempt: u32) -> Duration {
    Duration::from_millis((50u64 << attempt.min(4)).min(500))
}

/// What waiting for the server to come back saw.
#[derive(Clone, Copy, Debug, Default)]
pub struct Comeback {
    /// Probes that got no answer or a non-200 answer before the first 200.
    pub failed_probes: u32,
    pub waited: Duration,
}

/// Polls `GET /v1/health` until it answers 200, for at most `within`.
pub async fn wait_healthy(
    kind: ClientKind,
    target: &Target,
    within: Duration,
) -> Result<Comeback, String> {
    let started = Instant::now();
    let deadline = started + within;
    let mut comeback = Comeback::default();
    loop {
        let probe_timeout = Duration::from_secs(2)
            .min(deadline.saturating_duration_since(Instant::now()))
            .max(Duration::from_millis(10));
        let last = match probe(kind, target, probe_timeout).await {
            Ok(()) => {
                comeback.waited = started.elapsed();
                return Ok(comeback);
            }
            Err(what) => what,
        };
        comeback.failed_probes += 1;
        let pause = backoff(comeback.failed_probes.saturating_sub(1));
        if Instant::now() + pause >= deadline {
            return Err(format!(
                "the server at {} did not answer GET /v1/health with 200 within {:.1} s ({} probes; last: {last})",
                target.addr,
                within.as_secs_f64(),
                comeback.failed_probes
            ));
        }
        tokio::time::sleep(pause).await;
    }
}

/// One health probe on a fresh connection.
async fn probe(kind: ClientKind, target: &Target, timeout: Duration) -> Result<(), String> {
    let mut conn = connect(kind, target, timeout)
        .await
        .map_err(|e| format!("connect: {e}"))?;
    let request = Request::get("/v1/health".into(), None);
    match tokio::time::timeout(timeout, conn.send(&request)).await {
        Ok(Ok(response)) if response.status == 200 => Ok(()),
        Ok(Ok(response)) => Err(format!("HTTP {}", response.status)),
        Ok(Err(error)) => Err(format!("GET /v1/health: {error}")),
        Err(_) => Err("GET /v1/health: timed out".into()),
    }
}

/// The drill part of the summary (present with `--survive-restart`).
#[derive(Clone, Debug, Default, Serialize)]
pub struct RestartReport {
    /// The `--survive-restart` budget.
    pub survive_restart_s: f64,
    /// A restart was seen: health refused while waiting, or the WAL counters started over.
    pub observed: bool,
    /// Seconds from the start of the load to the first connection error that stopped it.
    pub load_stopped_at_s: Option<f64>,
    /// Seconds from then until `/v1/health` answered 200.
    pub back_after_s: Option<f64>,
    /// Health probes refused or failed while waiting.
    pub failed_health_probes: u32,
    /// `walletd_wal_records_total` went down (a new process); `None` when not readable.
    pub wal_counters_reset: Option<bool>,
    /// Re-logins after a 401 from the restarted server.
    pub relogins: u32,
}

impl RestartReport {
    /// Records a wait for the server (the load stopped, or the read-back lost it).
    pub fn came_back(&mut self, comeback: Comeback) {
        self.failed_health_probes += comeback.failed_probes;
        if self.back_after_s.is_none() {
            self.back_after_s = Some(comeback.waited.as_secs_f64());
        }
        self.decide();
    }

    pub fn counters(&mut self, before: Option<f64>, after: Option<f64>) {
        self.wal_counters_reset = before.zip(after).map(|(before, after)| after < before);
        self.decide();
    }

    fn decide(&mut self) {
        self.observed = self.failed_health_probes > 0 || self.wal_counters_reset == Some(true);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn connection_errors_are_told_from_slow_or_odd_answers() {
        for kind in [
            io::ErrorKind::ConnectionRefused,
            io::ErrorKind::ConnectionReset,
            io::ErrorKind::ConnectionAborted,
            io::ErrorKind::BrokenPipe,
            io::ErrorKind::UnexpectedEof,
            io::ErrorKind::NotConnected,
            io::ErrorKind::Other,
        ] {
            assert!(is_connection_error(kind), "{kind:?}");
        }
        for kind in [io::ErrorKind::TimedOut, io::ErrorKind::InvalidData] {
            assert!(!is_connection_error(kind), "{kind:?}");
        }
    }

    #[test]
    fn the_backoff_is_short_and_bounded() {
        let delays: Vec<u64> = (0..8).map(|a| backoff(a).as_millis() as u64).collect();
        assert_eq!(delays, [50, 100, 200, 400, 500, 500, 500, 500]);
    }

    #[test]
    fn a_restart_is_observed_from_either_sign() {
        let mut report = RestartReport::default();
        report.came_back(Comeback {
            failed_probes: 0,
            waited: Duration::from_millis(3),
        });
        assert!(!report.observed);
        report.counters(Some(900.0), Some(1200.0));
        assert!(!report.observed);
        report.counters(Some(900.0), Some(4.0));
        assert!(report.observed);
        let mut report = RestartReport::default();
        report.counters(None, Some(4.0));
        assert_eq!(report.wal_counters_reset, None);
        report.came_back(Comeback {
            failed_probes: 3,
            waited: Duration::from_millis(700),
        });
        assert!(report.observed);
        assert_eq!(report.back_after_s, Some(0.7));
    }

    #[tokio::test]
    async fn waiting_for_a_server_that_never_comes_gives_up_in_time() {
        // A port nobody listens on: bind one, note it, close it.
        let port = match std::net::TcpListener::bind("127.0.0.1:0") {
            Ok(listener) => listener.local_addr().map(|a| a.port()).unwrap_or(1),
            Err(_) => 1,
        };
        let target = Target::parse(&format!("http://127.0.0.1:{port}")).unwrap();
        let started = Instant::now();
        let error = wait_healthy(ClientKind::Raw, &target, Duration::from_millis(400))
            .await
            .unwrap_err();
        assert!(started.elapsed() < Duration::from_secs(2), "{error}");
        assert!(error.contains("did not answer"), "{error}");
    }
}
