//! The `walletd` command line: `serve` (default), and the offline tools `replay [--verify]`,
//! `wal inspect`, `snapshot` (decisions.md §1). Every setting is a flag with an environment twin.

use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::Arc;
use std::time::Instant;

use anyhow::{bail, Context as _};
use clap::{Args, Parser, Subcommand, ValueEnum};
use engine::runtime::clock::SystemClock;
use engine::runtime::{Engine, EngineConfig, OpenError};

use crate::app::App;
use crate::auth::password::Hasher;
use crate::auth::token::TokenKey;
use crate::fees::FeeSchedule;
use crate::views::ApiRenderer;

#[derive(Parser, Debug)]
#[command(
    name = "walletd",
    version,
    about = "A wallet and payments service with a durable in-memory ledger"
)]
pub struct Cli {
    #[command(subcommand)]
    pub command: Option<Command>,
}

// Parsed once at start: the size of the serve variant costs nothing.
#[allow(clippy::large_enum_variant)]
#[derive(Subcommand, Debug)]
pub enum Command {
    /// Serve the HTTP API (the default).
    Serve(ServeArgs),
    /// Recovery drill on a stopped data dir: rebuild state from snapshot + WAL, print counts and
    /// time; with --verify check every invariant and exit non-zero on a violation.
    Replay(ReplayArgs),
    /// Inspect the write-ahead log.
    Wal {
        #[command(subcommand)]
        command: WalCommand,
    },
    /// Take a snapshot of a stopped data dir (bounds how much WAL the next start replays).
    Snapshot(DataArgs),
}

#[derive(Subcommand, Debug)]
pub enum WalCommand {
    /// Print WAL records as JSON lines, from an LSN.
    Inspect(InspectArgs),
}

#[derive(Args, Debug, Clone)]
pub struct DataArgs {
    /// Where the WAL and snapshots live.
    #[arg(long, env = "WALLETD_DATA_DIR", default_value = "./data")]
    pub data_dir: PathBuf,
    /// Shard actors; fixed for the life of a data dir, which records it (`data/shards`). Left
    /// out: the recorded count, or 1 for a new data dir. Another count than the recorded one is
    /// refused.
    #[arg(long, env = "WALLETD_SHARDS")]
    pub shards: Option<u32>,
}

#[derive(Args, Debug, Clone)]
pub struct ReplayArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// Check every invariant after replay; exit non-zero on the first violation.
    #[arg(long)]
    pub verify: bool,
    /// The full recovery drill: rebuild the hot state and the history store from LSN 1, reading
    /// the archived segments in DIR (`serve --wal-archive DIR`) and then the live log, ignoring
    /// snapshots. The existing `history/` is moved aside to `history.before-rebuild-<unix
    /// seconds>/`, not deleted.
    #[arg(long, value_name = "DIR")]
    pub from_archive: Option<PathBuf>,
}

#[derive(Args, Debug, Clone)]
pub struct InspectArgs {
    #[command(flatten)]
    pub data: DataArgs,
    /// First LSN to print.
    #[arg(long, default_value_t = 1)]
    pub from: u64,
    /// Most records to print.
    #[arg(long)]
    pub limit: Option<u64>,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Fsync {
    Always,
    Never,
}

#[derive(Copy, Clone, Debug, PartialEq, Eq, ValueEnum)]
pub enum Switch {
    On,
    Off,
}

#[derive(Args, Debug, Clone)]
pub struct ServeArgs {
    /// Address to listen on (port 0 picks a free port; the chosen address is printed).
    #[arg(long, env = "WALLETD_LISTEN", default_value = "127.0.0.1:8080")]
    pub listen: SocketAddr,
    #[command(flatten)]
    pub data: DataArgs,
    /// HS256 key for bearer tokens. Absent: generated once and kept in the data dir (mode 0600).
    #[arg(long, env = "WALLETD_JWT_SECRET", hide_env_values = true)]
    pub jwt_secret: Option<String>,
    /// `never` acknowledges writes before they are durable: for benchmarks only.
    #[arg(long, env = "WALLETD_FSYNC", value_enum, default_value = "always")]
    pub fsync: Fsync,
    #[arg(long, env = "WALLETD_RATE_LIMITS", value_enum, default_value = "on")]
    pub rate_limits: Switch,
    /// HMAC key of inbound provider webhooks. Absent: generated once and kept in the data dir
    /// (`webhook-secret`, mode 0600).
    #[arg(long, env = "WALLETD_WEBHOOK_SECRET", hide_env_values = true)]
    pub webhook_secret: Option<String>,
    /// Payment fees: `CUR:PERCENT[+FIXED]` entries, comma-separated, `*` for the others
    /// (e.g. `YER:2.5+1,USD:2.9+0.30`). Empty: no fees.
    #[arg(long, env = "WALLETD_FEE_SCHEDULE", default_value = "")]
    pub fee_schedule: String,
    /// Base URL clients reach this service at, for the links it hands out (payment links).
    /// Absent: `http://` and the address it listens on.
    #[arg(long, env = "WALLETD_PUBLIC_URL")]
    pub public_url: Option<String>,
    /// Email of the platform admin created on first start.
    #[arg(
        long,
        env = "WALLETD_ADMIN_EMAIL",
        default_value = "admin@walletd.local"
    )]
    pub admin_email: String,
    /// Password of that admin; absent: a random one is printed once on stderr.
    #[arg(long, env = "WALLETD_ADMIN_PASSWORD", hide_env_values = true)]
    pub admin_password: Option<String>,
    /// Argon2id memory in KiB (19456 = OWASP). Lower only for tests.
    #[arg(
        long,
        env = "WALLETD_PASSWORD_HASH_MEMORY_KIB",
        default_value_t = 19_456,
        hide = true
    )]
    pub password_hash_memory_kib: u32,
    /// Log filter: error, warn, info, debug or trace.
    #[arg(long, env = "WALLETD_LOG", default_value = "info")]
    pub log: String,
    /// Take a snapshot after this many commands logged (a record holding several counts each,
    /// a batch each of its items; 0: never automatically).
    #[arg(long, env = "WALLETD_SNAPSHOT_EVERY", default_value_t = 1_000_000)]
    pub snapshot_every: u64,
    /// How much a periodic snapshot's thread lowers its priority (nice, 0 to 19; 0: none): under
    /// load it then takes the CPU the requests leave. A stop's snapshot keeps walletd's priority.
    #[arg(long, env = "WALLETD_SNAPSHOT_NICE", default_value_t = engine::runtime::SNAPSHOT_NICE, value_parser = clap::value_parser!(i32).range(0..=19))]
    pub snapshot_nice: i32,
    /// Move WAL segments that the snapshots and the history store no longer need into DIR (same
    /// file name; created with mode 0700 when missing) instead of deleting them, so
    /// `walletd replay --from-archive DIR` can rebuild everything from LSN 1. Give each data
    /// directory its own archive.
    #[arg(long, env = "WALLETD_WAL_ARCHIVE", value_name = "DIR")]
    pub wal_archive: Option<PathBuf>,
    /// Size of each WAL segment file in bytes (at least 64 KiB). A record must fit in one
    /// segment, so below 16 MiB it also lowers the largest record a transfer batch may need
    /// (larger records already logged are still read). Smaller than the default only for tests
    /// and drills that want segments retired quickly.
    #[arg(long, env = "WALLETD_WAL_SEGMENT_BYTES", default_value_t = 64 << 20, value_parser = clap::value_parser!(u64).range(SEGMENT_BYTES_MIN..=(1 << 30)))]
    pub wal_segment_bytes: u64,
    /// How long an idempotency key's answer is kept after it was decided: a number with `s`, `m`,
    /// `h` or `d` (e.g. `24h`, `90m`). A retry after it runs as a new request.
    #[arg(long, env = "WALLETD_IDEMPOTENCY_RETENTION", default_value = "24h", value_parser = parse_retention)]
    pub idempotency_retention: std::time::Duration,
    /// How long a token from a login stays valid: a number with `s`, `m` or `h`, from 1m to 1h
    /// (tokens are checked to live at most an hour). Shorter limits what a leaked token can do;
    /// clients log in again before `expires_in` passes.
    #[arg(long, env = "WALLETD_TOKEN_TTL", default_value = "1h", value_parser = parse_token_ttl)]
    pub token_ttl: std::time::Duration,
    /// At most this many commands a shard decided back to back share one WAL record, appended
    /// once the shard's queue is drained; 1 logs every command alone.
    #[arg(long, env = "WALLETD_COALESCE_MAX", default_value_t = engine::runtime::config::COALESCE_MAX_DEFAULT, value_parser = clap::builder::RangedU64ValueParser::<usize>::new().range(1..=1024))]
    pub coalesce_max: usize,
    /// Connections one client address may hold open at once; beyond it new ones are answered
    /// 429 and closed (the global cap is 4096).
    #[arg(long, env = "WALLETD_CONNECTIONS_PER_ADDRESS", default_value_t = crate::app::CONNECTIONS_PER_ADDRESS_MAX)]
    pub connections_per_address: usize,
    /// Longest wait in milliseconds for a request body once its headers are in: then 408.
    #[arg(long, env = "WALLETD_BODY_READ_TIMEOUT_MS", default_value_t = 30_000)]
    pub body_read_timeout_ms: u64,
    /// Longest a handler may take in milliseconds before its client is answered 503 `timeout`
    /// (the handler itself runs to its end).
    #[arg(long, env = "WALLETD_HANDLER_TIMEOUT_MS", default_value_t = 30_000)]
    pub handler_timeout_ms: u64,
}

/// The smallest `--wal-segment-bytes`.
const SEGMENT_BYTES_MIN: u64 = 64 << 10;

/// `24h`, `90m`, `3600s`, `7d`: at least a second, at most 400 days.
fn parse_retention(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(text, 1, 400 * 86_400, "1s..=400d")
}

/// `1h`, `15m`, `300s`: at least a minute, at most [`crate::auth::token::LIFETIME_MAX_SECS`].
fn parse_token_ttl(text: &str) -> Result<std::time::Duration, String> {
    parse_duration(
        text,
        60,
        crate::auth::token::LIFETIME_MAX_SECS.unsigned_abs(),
        "1m..=1h",
    )
}

/// A whole number and a unit (`s`, `m`, `h`, `d`), from `min` to `max` seconds (`range` names
/// them in the error).
fn parse_duration(
    text: &str,
    min: u64,
    max: u64,
    range: &str,
) -> Result<std::time::Duration, String> {
    let split = text
        .find(|c: char| !c.is_ascii_digit())
        .ok_or_else(|| format!("`{text}` needs a unit: s, m, h or d (e.g. 24h)"))?;
    let (number, unit) = text.split_at(split);
    let number: u64 = number
        .parse()
        .map_err(|_| format!("`{text}` does not start with a whole number"))?;
    let seconds_per = match unit {
        "s" => 1,
        "m" => 60,
        "h" => 3_600,
        "d" => 86_400,
        _ => {
            return Err(format!(
                "unknown unit `{unit}` in `{text}`: use s, m, h or d"
            ))
        }
    };
    let seconds = number.saturating_mul(seconds_per);
    if !(min..=max).contains(&seconds) {
        return Err(format!("`{text}` is outside {range}"));
    }
    Ok(std::time::Duration::from_secs(seconds))
}

/// Runs the command line; returns the process exit code.
pub fn main() -> anyhow::Result<()> {
    // Before anything creates a file (snapshots of the offline tools included): owner only.
    rustix::process::umask(rustix::fs::Mode::from_raw_mode(0o077));
    let cli = Cli::parse();
    match cli.command {
        None => match Cli::parse_from(["walletd", "serve"]).command {
            Some(Command::Serve(args)) => serve(args),
            _ => bail!("no command"),
        },
        Some(Command::Serve(args)) => serve(args),
        Some(Command::Replay(args)) => replay(&args),
        Some(Command::Wal {
            command: WalCommand::Inspect(args),
        }) => inspect(&args),
        Some(Command::Snapshot(args)) => snapshot(&args),
    }
}

fn init_logging(level: &str) {
    let level = level
        .parse::<tracing::Level>()
        .unwrap_or(tracing::Level::INFO);
    let _ = tracing_subscriber::fmt()
        .with_max_level(level)
        .with_writer(std::io::stderr)
        .with_target(false)
        .try_init();
}

fn engine_config(
    data: &DataArgs,
    fsync: Fsync,
    snapshot_every: u64,
) -> anyhow::Result<EngineConfig> {
    let mut config = EngineConfig::new(&data.data_dir);
    config.shard_count = match data.shards {
        Some(count) => count,
        None => engine::runtime::recorded_shard_count(&data.data_dir)?.unwrap_or(1),
    };
    config.snapshot_every_records = snapshot_every;
    config.wal.fsync = match fsync {
        Fsync::Always => wal::FsyncPolicy::Always,
        Fsync::Never => wal::FsyncPolicy::Never,
    };
    Ok(config)
}

/// Segments of `bytes`; the largest record shrinks to fit one when it would not.
fn set_segment_bytes(config: &mut EngineConfig, bytes: u64) {
    config.wal.segment_bytes = bytes;
    let room = bytes.saturating_sub(
        (wal::record::SEGMENT_HEADER_BYTES + wal::record::RECORD_HEADER_BYTES) as u64,
    );
    if u64::from(config.wal.record_bytes_max) > room {
        config.wal.record_bytes_max = u32::try_from(room).unwrap_or(u32::MAX);
    }
}

/// The WAL archive directory: created with mode 0700 when missing; one that exists must be a
/// directory, and a warning says so when others can read it (it holds what the WAL holds:
/// password hashes and personal data).
fn private_archive_dir(dir: &Path) -> anyhow::Result<PathBuf> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(dir)
        .with_context(|| format!("create the WAL archive directory {}", dir.display()))?;
    let metadata = std::fs::metadata(dir)
        .with_context(|| format!("read the WAL archive directory {}", dir.display()))?;
    if !metadata.is_dir() {
        bail!("--wal-archive {} is not a directory", dir.display());
    }
    if metadata.permissions().mode() & 0o077 != 0 {
        tracing::warn!(archive = %dir.display(), mode = format!("{:o}", metadata.permissions().mode() & 0o7777), "the WAL archive directory is open to other users; it holds what the log holds (password hashes, personal data): consider chmod 700");
    }
    Ok(dir.to_path_buf())
}

fn open_engine(config: EngineConfig) -> anyhow::Result<(Engine, engine::runtime::RecoveryReport)> {
    let dir = config.data_dir.clone();
    match Engine::open(config, Arc::new(SystemClock), Arc::new(ApiRenderer)) {
        Ok(opened) => Ok(opened),
        Err(OpenError::Wal(wal::Error::Locked { .. })) => bail!(
            "the data directory {} is in use by another walletd process; stop it first, or use a copy of the directory",
            dir.display()
        ),
        Err(error) => Err(error).with_context(|| format!("open the data directory {}", dir.display())),
    }
}

/// The token key: given, or generated once into the data dir with mode 0600.
fn token_key(data_dir: &Path, given: Option<&str>) -> anyhow::Result<TokenKey> {
    if let Some(secret) = given {
        if secret.len() < 32 {
            bail!("WALLETD_JWT_SECRET must be at least 32 bytes");
        }
        return Ok(TokenKey::new(secret.as_bytes().to_vec()));
    }
    Ok(TokenKey::new(kept_secret(
        data_dir,
        "jwt-secret",
        "token signing key",
    )?))
}

/// Bytes of a kept key.
const KEPT_KEY_BYTES: usize = 32;

/// A kept key file's text: exactly 64 hex characters, optionally one trailing newline.
/// Anything else (a truncated, hand-edited or short key) refuses to start rather than signing
/// with a weak key (decisions.md §2).
fn parse_kept_key(text: &str) -> Option<Vec<u8>> {
    let hex_text = text.strip_suffix('\n').unwrap_or(text);
    let hex_text = hex_text.strip_suffix('\r').unwrap_or(hex_text);
    if hex_text.len() != KEPT_KEY_BYTES * 2 {
        return None;
    }
    let mut key = vec![0u8; KEPT_KEY_BYTES];
    hex::decode_to_slice(hex_text, &mut key).ok()?;
    Some(key)
}

/// A 32-byte random key kept hex-encoded in `data_dir/name` (mode 0600): read when it exists
/// (and refused unless it is exactly that), else drawn once and written to a temporary name,
/// synced, renamed into place and the directory synced, so a crash never leaves a torn key.
fn kept_secret(data_dir: &Path, name: &str, what: &str) -> anyhow::Result<Vec<u8>> {
    let path = data_dir.join(name);
    match std::fs::read_to_string(&path) {
        Ok(existing) => {
            return parse_kept_key(&existing).ok_or_else(|| {
                anyhow::anyhow!(
                    "the {what} in {} is not 32 bytes in hex (64 hex characters); refusing to start: restore it, or remove it to draw a new key (tokens or signatures made with the old key stop verifying)",
                    path.display()
                )
            });
        }
        Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
        Err(error) => {
            return Err(error).with_context(|| format!("read the {what} in {}", path.display()))
        }
    }
    let mut key = [0u8; KEPT_KEY_BYTES];
    getrandom::getrandom(&mut key).map_err(|e| anyhow::anyhow!("draw a random {what}: {e}"))?;
    use std::io::Write as _;
    use std::os::unix::fs::OpenOptionsExt as _;
    let temporary = data_dir.join(format!("{name}.tmp"));
    let _ = std::fs::remove_file(&temporary);
    let mut file = std::fs::OpenOptions::new()
        .write(true)
        .create_new(true)
        .mode(0o600)
        .open(&temporary)
        .with_context(|| format!("create {}", temporary.display()))?;
    file.write_all(hex::encode(key).as_bytes())
        .and_then(|()| file.sync_all())
        .with_context(|| format!("write {}", temporary.display()))?;
    drop(file);
    std::fs::rename(&temporary, &path)
        .with_context(|| format!("rename {} to {}", temporary.display(), path.display()))?;
    std::fs::File::open(data_dir)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("sync the directory {}", data_dir.display()))?;
    tracing::info!(path = %path.display(), "generated a {what}");
    Ok(key.to_vec())
}

/// The webhook key: given (at least 16 bytes), or kept in the data dir like the token key.
fn webhook_secret(data_dir: &Path, given: Option<&str>) -> anyhow::Result<Vec<u8>> {
    match given {
        Some(secret) if secret.len() < 16 => {
            bail!("WALLETD_WEBHOOK_SECRET must be at least 16 bytes")
        }
        Some(secret) => Ok(secret.as_bytes().to_vec()),
        None => kept_secret(data_dir, "webhook-secret", "webhook signing key"),
    }
}

/// Makes the data dir readable by its owner only (decisions.md §2: the WAL holds password
/// hashes and personal data). The process umask becomes 0o077 before anything creates a file,
/// so whatever walletd or a library creates later is 0600 (directories 0700) whatever the
/// umask it was started with; the data dir is created 0700, and what an older walletd left
/// more open in it is narrowed (logged).
pub(crate) fn private_data_dir(data_dir: &Path) -> anyhow::Result<()> {
    use std::os::unix::fs::{DirBuilderExt as _, PermissionsExt as _};
    std::fs::DirBuilder::new()
        .recursive(true)
        .mode(0o700)
        .create(data_dir)
        .with_context(|| format!("create the data directory {}", data_dir.display()))?;
    let mut pending = vec![data_dir.to_path_buf()];
    while let Some(path) = pending.pop() {
        let metadata = std::fs::symlink_metadata(&path)
            .with_context(|| format!("read the mode of {}", path.display()))?;
        let wanted = if metadata.is_dir() {
            0o700
        } else if metadata.is_file() {
            0o600
        } else {
            continue;
        };
        if metadata.permissions().mode() & 0o7777 != wanted {
            std::fs::set_permissions(&path, std::fs::Permissions::from_mode(wanted))
                .with_context(|| format!("make {} private", path.display()))?;
            if path != data_dir {
                tracing::warn!(path = %path.display(), mode = format!("{wanted:o}"), "narrowed the mode of a file in the data directory");
            }
        }
        if metadata.is_dir() {
            for entry in
                std::fs::read_dir(&path).with_context(|| format!("list {}", path.display()))?
            {
                pending.push(entry?.path());
            }
        }
    }
    Ok(())
}

/// Exit code of a fail-stop (EX_SOFTWARE): the process found itself unusable and stopped; a
/// supervisor restarts it and recovery rebuilds the state from the log.
pub const FAIL_STOP_EXIT_CODE: i32 = 70;

/// How often the watchdog looks for a failed log or shard.
const WATCHDOG_EVERY: std::time::Duration = std::time::Duration::from_millis(50);

/// Logs `reason` loudly and exits with [`FAIL_STOP_EXIT_CODE`], without draining: the log holds
/// every acknowledged operation, and nothing more may be answered.
fn fail_stop(reason: &str) -> ! {
    tracing::error!(
        reason,
        "fail-stop: the engine is unusable; exiting for a restart"
    );
    eprintln!("walletd: fail-stop: {reason}; exiting with {FAIL_STOP_EXIT_CODE} for a restart");
    std::process::exit(FAIL_STOP_EXIT_CODE)
}

/// A panic anywhere (a handler, a shard's actor, the log's writer) stops the process: logged,
/// then aborted, so no thread is left serving half a service. The release profile aborts on
/// panic too (`panic = "abort"`); the hook makes every build do so, with a message first.
fn install_panic_hook() {
    let default = std::panic::take_hook();
    std::panic::set_hook(Box::new(move |info| {
        let thread = std::thread::current();
        let name = thread.name().unwrap_or("unnamed");
        tracing::error!(thread = name, panic = %info, "fail-stop: a thread panicked; aborting");
        default(info);
        eprintln!("walletd: fail-stop: thread '{name}' panicked; aborting for a restart");
        std::process::abort();
    }));
}

fn serve(args: ServeArgs) -> anyhow::Result<()> {
    init_logging(&args.log);
    install_panic_hook();
    if let Some(password) = &args.admin_password {
        crate::handlers::identity::check_password(password).map_err(|_| {
            anyhow::anyhow!("WALLETD_ADMIN_PASSWORD must be 8 to 128 characters, like every password; refusing to start")
        })?;
    }
    private_data_dir(&args.data.data_dir)?;
    let tokens = token_key(&args.data.data_dir, args.jwt_secret.as_deref())?;
    let webhook_secret = webhook_secret(&args.data.data_dir, args.webhook_secret.as_deref())?;
    let fees = FeeSchedule::parse(&args.fee_schedule)
        .map_err(|reason| anyhow::anyhow!("WALLETD_FEE_SCHEDULE: {reason}"))?;
    let mut config = engine_config(&args.data, args.fsync, args.snapshot_every)?;
    config.idempotency_retention = args.idempotency_retention;
    config.coalesce_max = args.coalesce_max;
    config.snapshot_nice = args.snapshot_nice;
    set_segment_bytes(&mut config, args.wal_segment_bytes);
    if let Some(archive) = &args.wal_archive {
        config.wal.archive_dir = Some(private_archive_dir(archive)?);
    }
    let fault = crate::fault::arm(&mut config)?;
    let (engine, report) = open_engine(config)?;
    tracing::info!(
        records = report.records_replayed,
        events = report.events_replayed,
        wallets = report.wallets,
        snapshot_lsn = ?report.snapshot_lsn,
        transfers_completed = report.transfers_completed,
        payment_moves_completed = report.payment_moves_completed,
        batches_completed = report.batches_completed,
        batches_released = report.batches_released,
        batch_keys_answered = report.batch_keys_answered,
        took_ms = report.elapsed.as_millis() as u64,
        "recovered"
    );
    if args.fsync == Fsync::Never {
        tracing::warn!(
            "--fsync never: acknowledged requests can be lost on power failure; benchmarks only"
        );
    }
    let params = argon2::Params::new(args.password_hash_memory_kib, 2, 1, None)
        .map_err(|e| anyhow::anyhow!("password hash parameters: {e}"))?;
    let hasher = Hasher::new(2, params);
    let runtime = tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_all()
        .thread_name("http")
        .build()
        .context("start the HTTP runtime")?;
    let result = runtime.block_on(async {
        if let Some(password) = crate::handlers::identity::bootstrap(
            &engine,
            &hasher,
            &args.admin_email,
            args.admin_password.clone(),
        )
        .await
        .map_err(|e| anyhow::anyhow!("create the platform admin: {}", e.message))?
        {
            eprintln!(
                "created the platform admin {} with password: {password}",
                args.admin_email
            );
        }
        let listener = tokio::net::TcpListener::bind(args.listen)
            .await
            .with_context(|| format!("listen on {}", args.listen))?;
        let address = listener.local_addr()?;
        crate::views::set_public_url(
            args.public_url
                .as_deref()
                .unwrap_or(&format!("http://{address}")),
        );
        let mut app = App::new(
            engine.clone(),
            tokens,
            hasher,
            args.rate_limits == Switch::On,
        )
        .map_err(anyhow::Error::msg)?;
        app.fees = fees;
        // At most LIFETIME_MAX_SECS (3,600): parse_token_ttl bounds it.
        app.token_ttl_secs = i64::try_from(args.token_ttl.as_secs())
            .unwrap_or(crate::auth::token::LIFETIME_MAX_SECS);
        app.webhook_secret = webhook_secret;
        app.connections_per_address = args.connections_per_address.max(1);
        app.body_read_timeout = std::time::Duration::from_millis(args.body_read_timeout_ms.max(1));
        app.handler_timeout = std::time::Duration::from_millis(args.handler_timeout_ms.max(1));
        let app = Arc::new(app);
        let sweeper = {
            let app = app.clone();
            tokio::spawn(async move {
                let mut tick = tokio::time::interval(std::time::Duration::from_secs(60));
                loop {
                    tick.tick().await;
                    app.limiter.sweep(Instant::now());
                    app.failed_logins.sweep(Instant::now());
                }
            })
        };
        // Fail-stop (ARCHITECTURE.md invariant 11): a poisoned log or a failed shard stops the
        // process with a clear message and FAIL_STOP_EXIT_CODE, for the supervisor to restart it;
        // recovery then rebuilds every acknowledged operation from the log.
        let watchdog = {
            let engine = engine.clone();
            tokio::spawn(async move {
                let reason = engine.watch_failure(WATCHDOG_EVERY).await;
                fail_stop(&reason);
            })
        };
        let fault = fault.map(|fs| tokio::spawn(crate::fault::poison_on_sigusr1(fs)));
        println!("walletd listening on http://{address}");
        tracing::info!(%address, data_dir = %args.data.data_dir.display(), "serving");
        crate::server::serve(listener, app, shutdown_signal()).await;
        shutdown_snapshot(&engine).await;
        sweeper.abort();
        watchdog.abort();
        if let Some(fault) = fault {
            fault.abort();
        }
        anyhow::Ok(())
    });
    runtime.shutdown_timeout(std::time::Duration::from_secs(5));
    engine
        .shutdown()
        .map_err(|e| anyhow::anyhow!("flush the log on shutdown: {e}"))?;
    tracing::info!("stopped");
    result
}

/// A shutdown checkpoint, as PostgreSQL takes one: once connections are drained, a snapshot of
/// everything logged since the last one, so the next start loads it instead of replaying up to
/// `--snapshot-every` records. Skipped when nothing was logged since the last snapshot or the
/// engine has failed (then recovery must replay the log); a failure is logged and changes
/// nothing, because the log still holds every record.
async fn shutdown_snapshot(engine: &Engine) {
    if let Some(reason) = engine.failure() {
        tracing::warn!(%reason, "no shutdown snapshot: the engine has failed");
        return;
    }
    let records = engine.records_since_snapshot();
    if records == 0 {
        return;
    }
    tracing::info!(
        records,
        "taking a shutdown snapshot, so the next start need not replay these records"
    );
    let started = Instant::now();
    // A periodic snapshot may be running: wait for it, then cover what it did not.
    match engine.snapshot_when_free().await {
        Ok(Some(lsn)) => tracing::info!(
            covered_lsn = lsn,
            took_ms = started.elapsed().as_millis() as u64,
            "shutdown snapshot written"
        ),
        Ok(None) => tracing::info!(
            took_ms = started.elapsed().as_millis() as u64,
            "the periodic snapshot that was running covers everything; no shutdown snapshot needed"
        ),
        Err(error) => tracing::warn!(
            %error,
            "no shutdown snapshot; the next start replays the log since the last one"
        ),
    }
}

async fn shutdown_signal() {
    use tokio::signal::unix::{signal, SignalKind};
    let Ok(mut term) = signal(SignalKind::terminate()) else {
        let _ = tokio::signal::ctrl_c().await;
        return;
    };
    tokio::select! {
        _ = term.recv() => tracing::info!("SIGTERM: draining"),
        _ = tokio::signal::ctrl_c() => tracing::info!("SIGINT: draining"),
    }
}

fn replay(args: &ReplayArgs) -> anyhow::Result<()> {
    init_logging("warn");
    let started = Instant::now();
    let config = engine_config(&args.data, Fsync::Always, 0)?;
    let (engine, report) = match &args.from_archive {
        None => open_engine(config)?,
        Some(archive) => rebuild_from_archive(config, archive)?,
    };
    let seconds = started.elapsed().as_secs_f64();
    let rate = report.events_replayed as f64 / report.elapsed.as_secs_f64().max(1e-9);
    println!(
        "replayed {} records ({} events) onto snapshot LSN {}; {} wallets; last LSN {}; {:.3} s ({:.0} events/s)",
        report.records_replayed,
        report.events_replayed,
        report.snapshot_lsn.map_or("none".into(), |l| l.to_string()),
        report.wallets,
        report.last_lsn,
        seconds,
        rate
    );
    if let Some(archive) = &args.from_archive {
        println!(
            "rebuilt the hot state and the history store from LSN 1: {} records from the archive {}, {} from the log",
            report.records_from_archive,
            archive.display(),
            report.records_replayed - report.records_from_archive
        );
    }
    if let Some(torn) = &report.torn_tail {
        println!("cut a torn tail: {torn}");
    }
    if report.transfers_completed > 0 {
        println!(
            "finished {} interrupted cross-shard transfers",
            report.transfers_completed
        );
    }
    if report.payment_moves_completed > 0 {
        println!(
            "finished {} interrupted cross-shard payment steps",
            report.payment_moves_completed
        );
    }
    if report.batches_completed + report.batches_released > 0 {
        println!(
            "settled {} interrupted atomic transfer batches: {} completed, {} released",
            report.batches_completed + report.batches_released,
            report.batches_completed,
            report.batches_released
        );
    }
    if report.confirm_keys_answered > 0 {
        println!(
            "answered {} keys of repeated payment confirms interrupted after their reserve: invalid_state",
            report.confirm_keys_answered
        );
    }
    if report.batch_keys_answered > 0 {
        println!(
            "answered {} keys of transfer batches interrupted before their answer: batch_interrupted",
            report.batch_keys_answered
        );
    }
    for moved in &report.quarantined {
        println!("QUARANTINED (left reserved, money in transit; needs an operator): {moved}");
    }
    if !args.verify {
        engine.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
        return Ok(());
    }
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let verdict = runtime.block_on(async {
        engine
            .check_invariants()
            .await
            .map_err(|v| anyhow::anyhow!("invariant violated: {v}"))?;
        let compared = engine
            .verify_history()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .map_err(|difference| anyhow::anyhow!("invariant violated: history store: {difference}"))?;
        println!("history store: {compared} records agree with the shards");
        let rows = engine
            .verify_reports()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?
            .map_err(|difference| anyhow::anyhow!("invariant violated: report aggregates: {difference}"))?;
        println!("report aggregates: {rows} day rows agree with a recount of the records");
        let pending = engine
            .pending_cross_shard_moves()
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        // Quarantined moves are reported above and stay reserved on purpose; any other is a bug.
        let quarantined: usize = report.quarantined.iter().map(|moved| moved.moves).sum();
        let unreported = pending.saturating_sub(quarantined);
        if unreported > 0 {
            bail!("invariant violated: {unreported} cross-shard moves are still half-done after recovery");
        }
        let digests = engine
            .read_all(|s| s.state_digest().to_hex())
            .await
            .map_err(|e| anyhow::anyhow!("{e}"))?;
        anyhow::Ok(digests)
    });
    engine.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
    let first = verdict?;
    // Determinism: a second replay of the same log rebuilds exactly the same state. After a
    // rebuild from the archive the second one is an ordinary open (newest snapshot, the log after
    // it, the rebuilt store): the whole history and the snapshot must agree.
    let (again, _) = open_engine(engine_config(&args.data, Fsync::Always, 0)?)?;
    let second = runtime
        .block_on(again.read_all(|s| s.state_digest().to_hex()))
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    again.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
    if first != second {
        if args.from_archive.is_some() {
            bail!("invariant violated: the state rebuilt from LSN 1 differs from the state an ordinary open (snapshot + log) rebuilds ({first:?} vs {second:?})");
        }
        bail!("invariant violated: replaying the same log twice gave different states ({first:?} vs {second:?})");
    }
    if args.from_archive.is_some() {
        println!("verified: the state rebuilt from LSN 1 equals the state the newest snapshot and the log rebuild");
    }
    println!("verified: double entry per currency, cached balances, holds, spendable >= 0, hash chains, the history store, no half-done transfer or payment across shards, deterministic replay");
    Ok(())
}

/// How often `replay --from-archive` reports progress on stderr.
const PROGRESS_EVERY: std::time::Duration = std::time::Duration::from_secs(3);

/// `replay --from-archive`: moves the history store aside (never deletes it), then opens the
/// engine from the archive and the live log from LSN 1 (`Engine::open_from_archive`),
/// reporting progress on stderr. If that fails, the store that was there is put back (the
/// partial one is kept beside it) and the error says why.
fn rebuild_from_archive(
    config: EngineConfig,
    archive: &Path,
) -> anyhow::Result<(Engine, engine::runtime::RecoveryReport)> {
    let metadata = std::fs::metadata(archive)
        .with_context(|| format!("read the WAL archive directory {}", archive.display()))?;
    if !metadata.is_dir() {
        bail!("--from-archive {} is not a directory", archive.display());
    }
    let data_dir = config.data_dir.clone();
    let wal_dir = config.wal_dir();
    if !wal_dir.is_dir() {
        bail!(
            "{} holds no log ({} is missing): --from-archive reads the archive and then the live log of a data directory",
            data_dir.display(),
            wal_dir.display()
        );
    }
    // No walletd may be running on the data dir while its store is moved: take the log's lock
    // (the same `flock` a running walletd holds) for the move, and release it just before the
    // engine takes it again.
    let lock_path = wal_dir.join("LOCK");
    let lock = std::fs::OpenOptions::new()
        .create(true)
        .truncate(false)
        .write(true)
        .open(&lock_path)
        .with_context(|| format!("open {}", lock_path.display()))?;
    match lock.try_lock() {
        Ok(()) => {}
        Err(std::fs::TryLockError::WouldBlock) => bail!(
            "the data directory {} is in use by another walletd process; stop it first",
            data_dir.display()
        ),
        Err(std::fs::TryLockError::Error(error)) => {
            return Err(error).with_context(|| format!("lock {}", lock_path.display()))
        }
    }
    let store = data_dir.join(engine::runtime::history::STORE_DIR);
    let seconds = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_secs());
    let aside = if store.exists() {
        let aside = unused_path(
            &data_dir,
            &format!(
                "{}.before-rebuild-{seconds}",
                engine::runtime::history::STORE_DIR
            ),
        );
        move_durably(&store, &aside, &data_dir)?;
        eprintln!(
            "moved the history store {} aside to {} (kept, not deleted); rebuilding it from LSN 1",
            store.display(),
            aside.display()
        );
        Some(aside)
    } else {
        None
    };
    drop(lock);

    let mut replayed = 0u64;
    let mut reported = Instant::now();
    let progress = move |lsn: u64| {
        replayed += 1;
        if replayed.is_multiple_of(4096) && reported.elapsed() >= PROGRESS_EVERY {
            reported = Instant::now();
            eprintln!("replayed {replayed} records so far (at LSN {lsn})");
        }
    };
    let opened = Engine::open_from_archive(
        config,
        Arc::new(SystemClock),
        Arc::new(ApiRenderer),
        engine::runtime::ArchiveReplay {
            dir: archive.to_path_buf(),
            progress: Some(Box::new(progress)),
        },
    );
    match opened {
        Ok(opened) => Ok(opened),
        Err(error) => {
            let error = match error {
                OpenError::Wal(wal::Error::Locked { .. }) => anyhow::anyhow!(
                    "the data directory {} is in use by another walletd process; stop it first",
                    data_dir.display()
                ),
                other => anyhow::Error::new(other).context(format!(
                    "rebuild {} from the archive {}",
                    data_dir.display(),
                    archive.display()
                )),
            };
            if let Some(aside) = aside {
                let mut kept = String::new();
                if store.exists() {
                    let failed = unused_path(
                        &data_dir,
                        &format!(
                            "{}.failed-rebuild-{seconds}",
                            engine::runtime::history::STORE_DIR
                        ),
                    );
                    move_durably(&store, &failed, &data_dir).context(format!("{error:#}"))?;
                    kept = format!(" (the partial rebuild is in {})", failed.display());
                }
                move_durably(&aside, &store, &data_dir).context(format!("{error:#}"))?;
                eprintln!(
                    "the rebuild failed: put the history store back in {}{kept}",
                    store.display()
                );
            }
            Err(error)
        }
    }
}

/// `dir/name`, or `dir/name-2`, `-3`, ... when taken.
fn unused_path(dir: &Path, name: &str) -> PathBuf {
    let mut path = dir.join(name);
    let mut next = 2;
    while path.exists() {
        path = dir.join(format!("{name}-{next}"));
        next += 1;
    }
    path
}

/// Renames `from` to `to` inside `dir` and fsyncs `dir`.
fn move_durably(from: &Path, to: &Path, dir: &Path) -> anyhow::Result<()> {
    std::fs::rename(from, to)
        .with_context(|| format!("move {} to {}", from.display(), to.display()))?;
    std::fs::File::open(dir)
        .and_then(|dir| dir.sync_all())
        .with_context(|| format!("sync the directory {}", dir.display()))
}

fn inspect(args: &InspectArgs) -> anyhow::Result<()> {
    use std::io::Write as _;
    let dir = args.data.data_dir.join("wal");
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    let mut printed = 0u64;
    let limit = args.limit.unwrap_or(u64::MAX);
    let result = wal::reader::read_from(
        &dir,
        engine::runtime::RECORD_BYTES_MAX,
        args.from,
        &mut |record| {
            if printed >= limit {
                return Ok(());
            }
            let line = match engine::runtime::journal::JournalEntry::decode(record.payload) {
                Ok(entry) => {
                    let mut value = serde_json::json!({
                        "lsn": record.lsn,
                        "shard": entry.shard,
                        "events": entry.events,
                        "directory": entry.directory,
                        // One per keyed command of the record (a coalesced record holds several).
                        "idempotency": entry.idempotency.iter().map(|k| serde_json::json!({"caller": k.caller, "key": k.key})).collect::<Vec<_>>(),
                    });
                    redact_secrets(&mut value);
                    value
                }
                Err(error) => {
                    serde_json::json!({"lsn": record.lsn, "undecodable": error.to_string(), "bytes": record.payload.len()})
                }
            };
            writeln!(out, "{line}").map_err(|e| wal::Error::Replay {
                lsn: record.lsn,
                reason: e.to_string(),
            })?;
            printed += 1;
            Ok(())
        },
    );
    out.flush()?;
    let scan = result.with_context(|| format!("read the log in {}", dir.display()))?;
    if let Some((path, offset, reason)) = scan.torn {
        eprintln!(
            "the log ends in a torn write at {} offset {offset}: {reason} (recovery will cut it)",
            path.display()
        );
    }
    Ok(())
}

/// Hides what `wal inspect` must not print: password hashes, and a shard's uuid key (with it,
/// anyone could open every sealed uuid to its wallet and record id, see
/// `engine/src/values/sealed.rs`).
fn redact_secrets(value: &mut serde_json::Value) {
    match value {
        serde_json::Value::Object(map) => {
            for (key, inner) in map.iter_mut() {
                if key == "password_hash" || key == "uuid_key_chosen" {
                    *inner = serde_json::Value::String("<redacted>".into());
                } else {
                    redact_secrets(inner);
                }
            }
        }
        serde_json::Value::Array(items) => items.iter_mut().for_each(redact_secrets),
        _ => {}
    }
}

fn snapshot(args: &DataArgs) -> anyhow::Result<()> {
    init_logging("warn");
    let (engine, _) = open_engine(engine_config(args, Fsync::Always, 0)?)?;
    let runtime = tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()?;
    let covered = runtime
        .block_on(engine.snapshot())
        .map_err(|e| anyhow::anyhow!("{e}"))?;
    engine.shutdown().map_err(|e| anyhow::anyhow!("{e}"))?;
    println!("snapshot written covering LSN {covered}");
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_retention_is_a_whole_number_and_a_unit() {
        let secs = |text: &str| parse_retention(text).map(|d| d.as_secs());
        assert_eq!(secs("24h"), Ok(86_400));
        assert_eq!(secs("90m"), Ok(5_400));
        assert_eq!(secs("1s"), Ok(1));
        assert_eq!(secs("400d"), Ok(400 * 86_400));
        for bad in [
            "", "24", "h", "0s", "401d", "1.5h", "-1h", "24 h", "24hours",
        ] {
            assert!(parse_retention(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn a_token_lifetime_is_a_minute_to_an_hour() {
        let secs = |text: &str| parse_token_ttl(text).map(|d| d.as_secs());
        assert_eq!(secs("1h"), Ok(3_600));
        assert_eq!(secs("15m"), Ok(900));
        assert_eq!(secs("60s"), Ok(60));
        for bad in ["59s", "61m", "2h", "1d", "0m", "15", "m"] {
            assert!(parse_token_ttl(bad).is_err(), "{bad:?}");
        }
    }

    #[test]
    fn inspect_hides_password_hashes_and_uuid_keys() {
        let key = engine::values::sealed::UuidKey([7; 32]);
        let mut value = serde_json::json!({
            "events": [engine::Event::UuidKeyChosen { key }],
            "directory": [{"customer_registered": {"id": 1, "password_hash": "$argon2id$x"}}],
        });
        let printed = value.to_string();
        assert!(printed.contains("uuid_key_chosen") && printed.contains("[7,7,"));
        redact_secrets(&mut value);
        let printed = value.to_string();
        assert!(
            !printed.contains("[7,7,") && !printed.contains("argon2"),
            "{printed}"
        );
        assert_eq!(printed.matches("<redacted>").count(), 2, "{printed}");
    }

    #[test]
    fn a_kept_key_is_exactly_64_hex_characters() {
        let hex64 = "ab".repeat(32);
        assert_eq!(parse_kept_key(&hex64).map(|k| k.len()), Some(32));
        assert!(parse_kept_key(&format!("{hex64}\n")).is_some());
        for bad in [
            String::new(),
            "ab".repeat(16),
            format!("{hex64}ab"),
            format!("{hex64}\n\n"),
            format!(" {hex64}"),
            "zz".repeat(32),
        ] {
            assert!(parse_kept_key(&bad).is_none(), "{bad:?}");
        }
    }
}
