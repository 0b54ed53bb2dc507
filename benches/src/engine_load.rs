//! Driving the engine in process for the engine benchmarks (`engine_throughput`,
//! `engine_recovery`, `benches/engine.rs`): opening it on a scratch directory, creating and
//! funding wallets, and closed-loop callers (async tasks on a tokio runtime, each awaiting its
//! command's answer before sending the next, like HTTP handlers waiting for the engine).

use std::future::Future;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SystemClock;
use engine::runtime::{Engine, EngineConfig, EngineError, RecoveryReport, Renderer};
use engine::shard::command::{CreateWallet, Details, MoneyMove, TransferArgs};
use engine::{Command, Currency, Outcome, Rejection, WalletId};
use rust_decimal::Decimal;

/// Renders nothing: the benchmarks send no idempotency keys.
pub struct NullRenderer;

impl Renderer for NullRenderer {
    fn render(&self, _route: u16, _result: &Result<Outcome, Rejection>) -> Vec<u8> {
        Vec::new()
    }
}

/// The engine's defaults (64 MiB segments, group commit) with the chosen shards and fsync policy,
/// and no automatic snapshot, so a snapshot never lands inside a timed run.
pub fn engine_config(dir: &Path, shards: u32, fsync: wal::FsyncPolicy) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.shard_count = shards;
    config.wal.fsync = fsync;
    config.snapshot_every_records = 0;
    config
}

/// Opens an engine with the system clock; panics with the reason if it cannot.
pub fn open_engine(config: EngineConfig) -> (Engine, RecoveryReport) {
    Engine::open(config, Arc::new(SystemClock), Arc::new(NullRenderer))
        .unwrap_or_else(|e| panic!("open the engine: {e}"))
}

/// The tokio runtime the callers run on: 2 workers, as on this 2-core machine.
pub fn caller_runtime() -> tokio::runtime::Runtime {
    tokio::runtime::Builder::new_multi_thread()
        .worker_threads(2)
        .enable_time()
        .build()
        .expect("build the caller runtime")
}

pub fn yer() -> Currency {
    Currency::from_code("YER").expect("YER is a known currency")
}

pub fn create_wallet_command(owner_id: u64) -> Command {
    Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id,
        currency: yer(),
        wallet_type: WalletType::Primary,
        business_id: 1,
        branch_id: 0,
        meta: None,
    })
}

pub fn deposit_command(wallet_id: WalletId, cents: i64) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id,
        amount: Decimal::new(cents, 2),
        currency: None,
        details: Details::default(),
    })
}

pub fn transfer_command(source: WalletId, target: WalletId, cents: i64) -> Command {
    Command::Transfer(transfer_args(source, target, cents))
}

/// A transfer of `cents` YER hundredths between two customer wallets, as a batch item carries it.
pub fn transfer_args(source: WalletId, target: WalletId, cents: i64) -> TransferArgs {
    TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: Decimal::new(cents, 2),
        currency: yer(),
        details: Details::default(),
    }
}

/// What a closed-loop run did.
#[derive(Debug, Clone, Copy, Default)]
pub struct Run {
    pub accepted: u64,
    pub rejected: u64,
    pub elapsed: Duration,
}

impl Run {
    pub fn per_second(&self) -> f64 {
        (self.accepted + self.rejected) as f64 / self.elapsed.as_secs_f64().max(f64::MIN_POSITIVE)
    }
}

/// `callers` tasks each running `op(caller, counter)` and awaiting it before the next, until
/// `total` operations were started (if given) or `duration` passed. Counts accepted and
/// rejected answers; any other error aborts the benchmark.
pub fn closed_loop<F, Fut>(
    runtime: &tokio::runtime::Runtime,
    callers: usize,
    total: Option<u64>,
    duration: Duration,
    op: F,
) -> Run
where
    F: Fn(usize, u64) -> Fut + Send + Sync + 'static,
    Fut: Future<Output = Result<(), EngineError>> + Send + 'static,
{
    let op = Arc::new(op);
    let started_ops = Arc::new(AtomicU64::new(0));
    let accepted = Arc::new(AtomicU64::new(0));
    let rejected = Arc::new(AtomicU64::new(0));
    let halt = Arc::new(AtomicBool::new(false));
    let limit = total.unwrap_or(u64::MAX);
    let started = Instant::now();
    runtime.block_on(async {
        let mut tasks = Vec::with_capacity(callers);
        for caller in 0..callers {
            let (op, started_ops, accepted, rejected, halt) = (
                op.clone(),
                started_ops.clone(),
                accepted.clone(),
                rejected.clone(),
                halt.clone(),
            );
            tasks.push(tokio::spawn(async move {
                let mut counter = 0u64;
                while !halt.load(Ordering::Relaxed) {
                    if started_ops.fetch_add(1, Ordering::Relaxed) >= limit {
                        break;
                    }
                    match op(caller, counter).await {
                        Ok(()) => accepted.fetch_add(1, Ordering::Relaxed),
                        Err(EngineError::Rejected(_)) => rejected.fetch_add(1, Ordering::Relaxed),
                        Err(error) => {
                            eprintln!("the engine failed: {error}");
                            std::process::exit(1);
                        }
                    };
                    counter += 1;
                }
            }));
        }
        let halt_after = halt.clone();
        let timer = tokio::spawn(async move {
            tokio::time::sleep(duration).await;
            halt_after.store(true, Ordering::Relaxed);
        });
        for task in tasks {
            task.await.expect("a caller task panicked");
        }
        timer.abort();
    });
    Run {
        accepted: accepted.load(Ordering::Relaxed),
        rejected: rejected.load(Ordering::Relaxed),
        elapsed: started.elapsed(),
    }
}

/// Creates customer wallets for owners `first_owner..first_owner + count` with `callers`
/// concurrent callers; returns their ids in owner order and the run.
pub fn create_wallets(
    runtime: &tokio::runtime::Runtime,
    engine: &Engine,
    first_owner: u64,
    count: u64,
    callers: usize,
) -> (Vec<WalletId>, Run) {
    let ids = Arc::new(std::sync::Mutex::new(vec![WalletId(0); count as usize]));
    let next = Arc::new(AtomicU64::new(0));
    let run = {
        let (engine, ids, next) = (engine.clone(), ids.clone(), next.clone());
        closed_loop(runtime, callers, Some(count), Duration::MAX, move |_, _| {
            let (engine, ids) = (engine.clone(), ids.clone());
            let index = next.fetch_add(1, Ordering::Relaxed);
            async move {
                let outcome = engine
                    .execute(create_wallet_command(first_owner + index))
                    .await?;
                let Outcome::Wallet(wallet) = outcome else {
                    return Err(EngineError::Unavailable(format!(
                        "wallet creation answered {outcome:?}"
                    )));
                };
                ids.lock().expect("ids lock")[index as usize] = wallet.id;
                Ok(())
            }
        })
    };
    let ids = std::mem::take(&mut *ids.lock().expect("ids lock"));
    (ids, run)
}

/// xorshift64*, seeded per caller.
#[derive(Debug, Clone)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Self {
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        Rng((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n.max(1)
    }

    /// Two different wallets of `ids` (at least two), uniformly.
    pub fn two_of(&mut self, ids: &[WalletId]) -> (WalletId, WalletId) {
        let n = ids.len() as u64;
        let source = self.below(n);
        let target = (source + 1 + self.below(n - 1)) % n;
        (ids[source as usize], ids[target as usize])
    }
}

/// Resident set size of this process, from /proc/self/statm.
pub fn rss_bytes() -> u64 {
    let statm = std::fs::read_to_string("/proc/self/statm").unwrap_or_default();
    let pages: u64 = statm
        .split_whitespace()
        .nth(1)
        .and_then(|s| s.parse().ok())
        .unwrap_or(0);
    pages * 4096
}

/// CPU time this process used so far, all threads, user + system, in seconds (from
/// /proc/self/stat; 10 ms resolution, assuming the usual 100 clock ticks per second).
pub fn process_cpu_seconds() -> f64 {
    let stat = std::fs::read_to_string("/proc/self/stat").unwrap_or_default();
    // The command name is in parentheses and may hold spaces: count fields after the last ')'.
    let after = stat.rsplit_once(')').map_or("", |(_, rest)| rest);
    let fields: Vec<&str> = after.split_whitespace().collect();
    let ticks = |index: usize| -> f64 {
        fields
            .get(index)
            .and_then(|f| f.parse::<f64>().ok())
            .unwrap_or(0.0)
    };
    // Field 14 (utime) and 15 (stime) of proc(5); field 3 (state) is the first after the name.
    (ticks(14 - 3) + ticks(15 - 3)) / 100.0
}

/// The header every engine benchmark prints: command, date, machine.
pub fn print_header(name: &str) {
    let command: Vec<String> = std::env::args().collect();
    let date = std::process::Command::new("date")
        .arg("-u")
        .arg("+%Y-%m-%dT%H:%M:%SZ")
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_string())
        .unwrap_or_default();
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .unwrap_or_default()
        .lines()
        .find(|l| l.starts_with("model name"))
        .and_then(|l| l.split(':').nth(1))
        .map(|s| s.trim().to_string())
        .unwrap_or_default();
    let load = std::fs::read_to_string("/proc/loadavg").unwrap_or_default();
    println!("# {name}");
    println!("command: {}", command.join(" "));
    println!(
        "load average at start (other processes share these cores): {}",
        load.trim()
    );
    println!(
        "date: {date}; nproc: {}; cpu: {cpu}; scratch dir: {}",
        std::thread::available_parallelism().map_or(0, |n| n.get()),
        crate::scratch_root().display()
    );
}
