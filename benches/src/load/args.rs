//! The command line of `walletd-load`.

use std::net::SocketAddr;
use std::path::PathBuf;

use clap::{Args, Parser, Subcommand, ValueEnum};

use super::mix::Mix;

#[derive(Parser, Debug, Clone)]
#[command(
    name = "walletd-load",
    about = "Closed-loop HTTP/1.1 load against walletd (or the bare hyper baseline), with a ledger audit",
    after_help = "walletd must run with WALLETD_RATE_LIMITS=off (or --rate-limits off) for load: \
                  otherwise the per-caller limits answer 429 within the first second.",
    args_conflicts_with_subcommands = true
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
    #[command(flatten)]
    pub load: LoadArgs,
}

#[derive(Subcommand, Debug, Clone)]
pub enum Command {
    /// Serve the bare hyper baseline: every request gets a fixed deposit-sized JSON answer.
    BaselineServer(BaselineArgs),
}

#[derive(Args, Debug, Clone)]
pub struct BaselineArgs {
    /// Address to listen on (port 0 picks one; the address is printed on stdout).
    #[arg(long, default_value = "127.0.0.1:0")]
    pub listen: SocketAddr,
    /// Tokio worker threads (walletd runs 2).
    #[arg(long, default_value_t = 2)]
    pub workers: usize,
}

/// Which HTTP/1.1 client implementation drives the connections.
#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum ClientKind {
    /// A minimal hand-written client over tokio's TcpStream (the default: leanest).
    Raw,
    /// hyper 1.x's client connection (`hyper::client::conn::http1`).
    Hyper,
}

#[derive(Args, Debug, Clone)]
pub struct LoadArgs {
    /// walletd's base URL (http only).
    #[arg(long, default_value = "http://127.0.0.1:8080")]
    pub url: String,
    /// Drive the bare baseline server at this URL instead: same mix, no setup, no audit.
    #[arg(long, value_name = "URL")]
    pub baseline: Option<String>,
    /// Seconds of measured load (after the warm-up).
    #[arg(long, default_value_t = 10.0)]
    pub duration: f64,
    /// Seconds of load before measuring starts (its requests count in the audit, not the stats).
    #[arg(long, default_value_t = 1.0)]
    pub warmup: f64,
    /// Keep-alive connections, each with one request in flight.
    #[arg(long, default_value_t = 64)]
    pub connections: usize,
    /// Customers (each with a primary YER wallet) registered and funded for the run.
    #[arg(long, default_value_t = 100)]
    pub wallets: usize,
    /// Weighted operations: deposit, withdraw, transfer, hold (place, then capture or release),
    /// balance, payment (a customer pays the run's merchant: initiate, then confirm; one in 4
    /// completed payments is then partly refunded by the merchant). With payments the setup
    /// creates a merchant business, its employee and its YER wallet, audited like the others.
    #[arg(long, default_value = "deposit=40,transfer=40,withdraw=10,hold=10", value_parser = Mix::parse)]
    pub mix: Mix,
    /// RNG seed (random if absent; always printed).
    #[arg(long)]
    pub seed: Option<u64>,
    /// Print a JSON summary on stdout (the human table goes to stderr then).
    #[arg(long)]
    pub json: bool,
    /// Append one CSV row of the summary to this file (header written when the file is new).
    #[arg(long, value_name = "FILE")]
    pub csv: Option<PathBuf>,
    /// Label of the run in the CSV row and the JSON summary.
    #[arg(long, default_value = "")]
    pub label: String,
    #[arg(long, default_value = "admin@walletd.local")]
    pub admin_email: String,
    #[arg(long, env = "WALLETD_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// Send an Idempotency-Key on every write (and resend it after a broken connection, which
    /// resolves the outcome instead of leaving it unknown).
    #[arg(long)]
    pub idempotency: bool,
    /// Transfers per request: above 1, each transfer of the mix is a `POST /v1/transfers/batch`
    /// of this many items from one wallet to others (the report's transfer rows then count
    /// batches; transfers/s is their rate times this).
    #[arg(long, default_value_t = 1, value_parser = clap::value_parser!(u32).range(1..=8190))]
    pub batch: u32,
    /// Amount deposited into each wallet during setup.
    #[arg(long, default_value = "10000.00", value_parser = parse_amount)]
    pub fund: i64,
    /// Per-request timeout in seconds; a timed-out request's effect is unknown.
    #[arg(long, default_value_t = 10.0)]
    pub timeout: f64,
    #[arg(long, value_enum, default_value = "raw")]
    pub client: ClientKind,
    /// Tokio worker threads of the load generator (1: a current-thread runtime).
    #[arg(long, default_value_t = 1)]
    pub threads: usize,
    /// The server's process id: report its CPU use over the measured window.
    #[arg(long)]
    pub server_pid: Option<u32>,
    /// Connections used for registration, funding and the audit read-back.
    #[arg(long, default_value_t = 8)]
    pub setup_connections: usize,
    /// Recovery drills: when requests fail with connection errors (the server was killed), stop
    /// issuing load (requests in flight count as unknown outcomes), wait up to SECONDS for
    /// GET /v1/health on the same URL to answer 200 again, log in again where a 401 says so,
    /// and run the audit against the restarted server. The exit code is the audit's.
    #[arg(long, value_name = "SECONDS", value_parser = parse_seconds)]
    pub survive_restart: Option<f64>,
}

fn parse_seconds(text: &str) -> Result<f64, String> {
    text.trim()
        .parse::<f64>()
        .ok()
        .filter(|s| s.is_finite() && *s > 0.0 && *s <= 86_400.0)
        .ok_or_else(|| format!("{text:?} is not a number of seconds (above 0, at most 86400)"))
}

fn parse_amount(text: &str) -> Result<i64, String> {
    super::parse_cents(text)
        .filter(|cents| *cents > 0)
        .ok_or_else(|| format!("{text:?} is not a positive amount with at most 2 decimals"))
}
