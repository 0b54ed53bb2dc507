//! `walletd-load`: a closed-loop HTTP/1.1 load generator for walletd, with a ledger audit, and
//! the bare hyper server it is measured against.
//!
//! # Why it looks like this
//! - **Closed loop, keep-alive.** Each of `--connections` connections sends one request, waits
//!   for the answer, then sends the next, like a pool of clients each waiting for its payment to
//!   be acknowledged. Latencies are therefore service times under that concurrency; a closed
//!   loop under-reports the tail a fixed-rate open loop would see (coordinated omission), which
//!   is fine for comparing walletd with the bare server under the same loop.
//! - **A hand-written HTTP/1.1 client** ([`client::RawConn`]) by default: one `write` per
//!   request and an `httparse` of the answer head. On 2 shared cores every cycle the client
//!   burns is taken from the server; `--client hyper` switches to hyper's own client
//!   connection so the two can be compared (see the script's output and the report).
//! - **The audit** ([`audit`]) models what every acknowledged (2xx) request implies for each
//!   wallet, keeps the effect of requests with an unknown outcome (timeouts, broken
//!   connections, 5xx) as a per-wallet bound, and compares that with what walletd reads back.
//! - **The baseline** ([`baseline`]) is hyper 1.x with the same runtime shape as walletd (http1,
//!   2 workers, TCP_NODELAY) answering a fixed deposit-sized JSON body: the ceiling of what
//!   walletd could reach on this machine, measured in the same run (shared/notes/machine-limits.md:
//!   only a baseline from the same run counts).
//!
//! # Layout
//! - [`args`]: the command line.
//! - [`mix`]: operations, the weighted mix and the seeded RNG.
//! - [`client`]: the raw and hyper HTTP/1.1 client connections.
//! - [`setup`]: admin login, customer registration and funding, the merchant of payments.
//! - [`run`]: the timed request loops.
//! - [`tokens`]: the tokens the loops send, renewed before walletd stops accepting them.
//! - [`audit`]: the ledger model (payments and refunds included) and the read-back comparison.
//! - [`drill`]: `--survive-restart`: outliving a SIGKILLed and restarted server, then auditing it.
//! - [`metrics`]: walletd's WAL counters (group commits, records per fsync) over the window.
//! - [`report`]: histograms, the live progress line, the final table, JSON and CSV.
//! - [`baseline`]: the bare hyper server.

pub mod args;
pub mod audit;
pub mod baseline;
pub mod client;
pub mod drill;
pub mod metrics;
pub mod mix;
pub mod report;
pub mod run;
pub mod setup;
pub mod tokens;

/// Formats minor units (cents) as an exact JSON number with two fraction digits.
pub fn cents_text(cents: i64) -> String {
    let sign = if cents < 0 { "-" } else { "" };
    let magnitude = cents.unsigned_abs();
    format!("{sign}{}.{:02}", magnitude / 100, magnitude % 100)
}

/// Parses an exact decimal JSON number (at most 2 fraction digits) into minor units.
pub fn parse_cents(text: &str) -> Option<i64> {
    let text = text.trim();
    let (negative, digits) = match text.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, text),
    };
    let (whole, fraction) = digits.split_once('.').unwrap_or((digits, ""));
    if whole.is_empty()
        || fraction.len() > 2
        || !whole
            .bytes()
            .chain(fraction.bytes())
            .all(|b| b.is_ascii_digit())
    {
        return None;
    }
    let whole: i64 = whole.parse().ok()?;
    let mut fraction_cents: i64 = if fraction.is_empty() {
        0
    } else {
        fraction.parse().ok()?
    };
    if fraction.len() == 1 {
        fraction_cents *= 10;
    }
    let cents = whole.checked_mul(100)?.checked_add(fraction_cents)?;
    Some(if negative { -cents } else { cents })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cents_round_trip_through_text() {
        for cents in [0, 1, 10, 99, 100, 12345, -5, -12345, 1_000_000_000] {
            assert_eq!(parse_cents(&cents_text(cents)), Some(cents), "{cents}");
        }
        assert_eq!(parse_cents("12.5"), Some(1250));
        assert_eq!(parse_cents("7"), Some(700));
        assert_eq!(parse_cents("1.234"), None);
        assert_eq!(parse_cents("1e2"), None);
        assert_eq!(parse_cents("\"1.00\""), None);
    }
}
