//! fjall vs redb as walletd's on-disk history store (issue 14), as a plain table for BENCHMARKS.md.
//!
//! Usage: `cargo run --release -p walletd-benches --features store-compare --bin history_store --
//! [--transfers 2000000] [--wallets 1000,100000] [--batches 100,1000,10000] [--engines fjall,redb]`
//! (`--help` lists the rest).
//!
//! Each transfer is what the indexer would file for it: 1 `tx` row (a postcard-encoded
//! `engine::ledger::Transaction`), 2 `wallet_entries` rows (postcard `LedgerEntry`, one per side,
//! with its hash) and 1 `tx_by_uuid` row, between a random pair of wallets; every batch also
//! rewrites the `meta` LSN row. For each engine × wallet count × batch size it:
//!
//! 1. ingests `--transfers` transfers, one write transaction / write batch per batch, with the
//!    store's own durability off and a durable checkpoint (fsync) every `--checkpoint` transfers
//!    and at the end; only the store calls are timed (records are encoded before the clock
//!    starts); prints rows/s, transfers/s, the p99 batch commit time and the bytes on disk;
//! 2. reads with the writer idle: a transaction by id, by uuid, the newest 50 entries of a random
//!    wallet, and 50 entries before a random cursor in that wallet (p50/p99 µs, each read a
//!    fresh read transaction / iterator, as a request would);
//! 3. reads pages from a second thread while the writer ingests `--concurrent` more transfers;
//! 4. reopens the store in a fresh child process (restart time, warm page cache);
//! 5. lets a child process write `--crash` transfers without a checkpoint and `abort()`, then
//!    reopens it in another child: open time after the crash, and how many transfers the store
//!    lost (which the indexer would refill from the WAL from the store's LSN on).

#[path = "history_store/stores.rs"]
mod stores;

use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::time::{Duration, Instant};

use anyhow::{bail, Context as _, Result};
use clap::Parser;
use engine::ledger::{
    Direction, EntryRef, Hash, LedgerEntry, Transaction, TransactionStatus, TransactionText,
    TransactionType,
};
use engine::{EntryId, TransactionId, Uuid, WalletId};
use hdrhistogram::Histogram;
use rust_decimal::Decimal;
use stores::{Batch, Store};
use walletd_benches::scratch_dir;

#[derive(Parser, Debug, Clone)]
#[command(about = "fjall vs redb as the on-disk history store (issue 14)")]
struct Args {
    /// Transfers ingested per run (each: 1 tx + 2 entry + 1 uuid rows).
    #[arg(long, default_value_t = 2_000_000)]
    transfers: u64,
    /// Wallet counts the random transfer pairs are drawn from.
    #[arg(long, value_delimiter = ',', default_value = "1000,100000")]
    wallets: Vec<u64>,
    /// Transfers per write transaction / write batch.
    #[arg(long, value_delimiter = ',', default_value = "100,1000,10000")]
    batches: Vec<u64>,
    #[arg(long, value_delimiter = ',', default_value = "fjall,redb")]
    engines: Vec<String>,
    /// A durable checkpoint (fsync) every this many transfers, rounded up to whole batches.
    #[arg(long, default_value_t = 100_000)]
    checkpoint: u64,
    /// Reads of each kind after the ingest.
    #[arg(long, default_value_t = 20_000)]
    reads: u64,
    /// Transfers ingested while a second thread reads pages (0: skip).
    #[arg(long, default_value_t = 200_000)]
    concurrent: u64,
    /// Transfers a child writes without a checkpoint before it aborts (0: skip the crash test).
    #[arg(long, default_value_t = 100_000)]
    crash: u64,
    /// Block/page cache of each engine, MiB.
    #[arg(long, default_value_t = 256)]
    cache_mib: u64,
    /// fjall: journal size past which memtables are flushed (bounds replay on reopen), MiB (≥ 64).
    #[arg(long, default_value_t = 64)]
    fjall_journal_mib: u64,
    /// Internal: run as a child (`open ENGINE DIR` or `crash ENGINE DIR WALLETS BATCH FROM N`).
    #[arg(long, hide = true, num_args = 1.., allow_hyphen_values = true)]
    child: Vec<String>,
}

const PAGE: usize = 50;
const SEED: u64 = 0x5eed_1d5e_11e7_da7a;

fn splitmix(mut x: u64) -> u64 {
    x = x.wrapping_add(0x9e37_79b9_7f4a_7c15);
    x = (x ^ (x >> 30)).wrapping_mul(0xbf58_476d_1ce4_e5b9);
    x = (x ^ (x >> 27)).wrapping_mul(0x94d0_49bb_1331_11eb);
    x ^ (x >> 31)
}

/// The uuid of transfer `t`, derivable again for the read phase.
fn uuid_of(t: u64) -> [u8; 16] {
    let mut b = [0u8; 16];
    b[..8].copy_from_slice(&splitmix(t ^ SEED).to_le_bytes());
    b[8..].copy_from_slice(&splitmix(!t ^ SEED).to_le_bytes());
    Uuid::from_random_bytes(b).0
}

struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(1);
        splitmix(self.0)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

/// Makes the rows of consecutive transfers, as the indexer would from the WAL records.
struct Generator {
    rng: Rng,
    wallets: u64,
    /// Next entry sequence of each wallet.
    seq: Vec<u64>,
    /// Next transfer number (transaction id = t + 1).
    next: u64,
    idem: String,
    description: Box<str>,
}

impl Generator {
    fn new(wallets: u64, seed: u64, seq_base: u64) -> Result<Self> {
        Ok(Self {
            rng: Rng(seed),
            wallets,
            seq: vec![seq_base; usize::try_from(wallets)?],
            next: 0,
            idem: String::new(),
            description: "invoice 2026-11 #000123".into(),
        })
    }

    fn fill(&mut self, batch: &mut Batch, transfers: u64) -> Result<()> {
        batch.clear();
        for _ in 0..transfers {
            self.push(batch)?;
        }
        batch.lsn = self.next;
        Ok(())
    }

    fn push(&mut self, batch: &mut Batch) -> Result<()> {
        use std::fmt::Write as _;
        let t = self.next;
        self.next += 1;
        let from = self.rng.below(self.wallets);
        let mut to = self.rng.below(self.wallets - 1);
        if to >= from {
            to += 1;
        }
        let (fi, ti) = (usize::try_from(from)?, usize::try_from(to)?);
        let (from_seq, to_seq) = (self.seq[fi], self.seq[ti]);
        self.seq[fi] += 1;
        self.seq[ti] += 1;
        let amount = Decimal::new(i64::try_from(self.rng.below(10_000_000))? + 1, 2);
        let balance = Decimal::new(i64::try_from(self.rng.below(1_000_000_000))?, 2);
        let now_ms = 1_795_000_000_000 + i64::try_from(t)?;
        let uuid = uuid_of(t);
        self.idem.clear();
        let r = self.rng.next();
        write!(self.idem, "{:016x}-{:016x}-pay", r, splitmix(r))?;
        let idem: Box<str> = self.idem.as_str().into();
        let tx_id = t + 1;
        let tx = Transaction {
            id: TransactionId(tx_id),
            uuid: Uuid(uuid),
            transaction_type: TransactionType::Transfer,
            direction: Direction::Debit,
            status: TransactionStatus::Completed,
            amount,
            fee_amount: Decimal::ZERO,
            net_amount: amount,
            counterparty_wallet_id: Some(WalletId(to)),
            reference_transaction_id: None,
            transfer_uuid: None,
            text: TransactionText {
                description: Some(self.description.clone()),
                external_reference: None,
                idempotency_key: Some(idem.clone()),
                meta: None,
            },
            legs: vec![
                EntryRef {
                    wallet_id: WalletId(from),
                    entry_id: EntryId(2 * t + 1),
                },
                EntryRef {
                    wallet_id: WalletId(to),
                    entry_id: EntryId(2 * t + 2),
                },
            ],
            refunded_amount: Decimal::ZERO,
            reversed_by_transaction_id: None,
            created_at_ms: now_ms,
            completed_at_ms: now_ms,
            reversed_at_ms: None,
        };
        batch.txs.push((tx_id, postcard::to_allocvec(&tx)?));
        for (side, (wallet, seq, direction)) in [
            (from, from_seq, Direction::Debit),
            (to, to_seq, Direction::Credit),
        ]
        .into_iter()
        .enumerate()
        {
            let mut hash = [0u8; 32];
            for (i, chunk) in hash.chunks_mut(8).enumerate() {
                chunk.copy_from_slice(&splitmix(r ^ (i as u64) << 8 ^ side as u64).to_le_bytes());
            }
            let entry = LedgerEntry {
                id: EntryId(2 * t + 1 + side as u64),
                uuid: Uuid(uuid_of(t ^ (1 << 62) ^ side as u64)),
                transaction_id: TransactionId(tx_id),
                direction,
                entry_type: TransactionType::Transfer,
                amount,
                balance_after: balance,
                reverses_entry_id: None,
                reversed_by_entry_id: None,
                description: Some(self.description.clone()),
                idempotency_key: Some(idem.clone()),
                created_at_ms: now_ms,
                hash: Hash(hash),
            };
            batch
                .entries
                .push((wallet, seq, postcard::to_allocvec(&entry)?));
        }
        batch.uuids.push((uuid, tx_id));
        Ok(())
    }
}

fn disk_bytes(path: &Path) -> Result<u64> {
    let mut total = 0;
    for entry in std::fs::read_dir(path)? {
        let entry = entry?;
        let meta = entry.metadata()?;
        total += if meta.is_dir() {
            disk_bytes(&entry.path())?
        } else {
            meta.len()
        };
    }
    Ok(total)
}

fn hist() -> Histogram<u64> {
    // 1 ns .. 100 s
    Histogram::new_with_bounds(1, 100_000_000_000, 3)
        .unwrap_or_else(|_| unreachable!("valid histogram bounds"))
}

fn record(h: &mut Histogram<u64>, since: Instant) {
    h.saturating_record(u64::try_from(since.elapsed().as_nanos()).unwrap_or(u64::MAX));
}

/// p50/p99 in µs.
fn pct(h: &Histogram<u64>) -> String {
    format!(
        "{:.1} / {:.1}",
        h.value_at_quantile(0.5) as f64 / 1e3,
        h.value_at_quantile(0.99) as f64 / 1e3
    )
}

struct IngestResult {
    seconds: f64,
    rows: u64,
    transfers: u64,
    batch_p99_ms: f64,
    checkpoint_ms_mean: f64,
}

/// Ingests `transfers` transfers in batches of `batch`, a durable one every `every` batches and
/// the last one durable.
fn ingest(
    store: &dyn Store,
    gen: &mut Generator,
    transfers: u64,
    batch_size: u64,
    every: u64,
) -> Result<IngestResult> {
    let mut batch = Batch::default();
    let mut timed = Duration::ZERO;
    let mut rows = 0u64;
    let mut commits = hist();
    let (mut checkpoints, mut checkpoint_time) = (0u32, Duration::ZERO);
    let batches = transfers.div_ceil(batch_size);
    for i in 0..batches {
        let n = batch_size.min(transfers - i * batch_size);
        gen.fill(&mut batch, n)?;
        let durable = (i + 1) % every == 0 || i + 1 == batches;
        rows += batch.rows() as u64;
        let start = Instant::now();
        store.write(&batch, durable)?;
        let took = start.elapsed();
        record(&mut commits, start);
        timed += took;
        if durable {
            checkpoints += 1;
            checkpoint_time += took;
        }
    }
    Ok(IngestResult {
        seconds: timed.as_secs_f64(),
        rows,
        transfers,
        batch_p99_ms: commits.value_at_quantile(0.99) as f64 / 1e6,
        checkpoint_ms_mean: checkpoint_time.as_secs_f64() * 1e3 / f64::from(checkpoints.max(1)),
    })
}

struct Reads {
    by_id: Histogram<u64>,
    by_uuid: Histogram<u64>,
    newest: Histogram<u64>,
    deep: Histogram<u64>,
}

fn reads(store: &dyn Store, gen: &Generator, n: u64, seed: u64) -> Result<Reads> {
    let mut rng = Rng(seed);
    let mut r = Reads {
        by_id: hist(),
        by_uuid: hist(),
        newest: hist(),
        deep: hist(),
    };
    let transfers = gen.next;
    for _ in 0..n {
        let t = rng.below(transfers);
        let start = Instant::now();
        let len = store.tx(t + 1)?;
        record(&mut r.by_id, start);
        if len == 0 {
            bail!("transaction {} missing", t + 1);
        }
        let uuid = uuid_of(rng.below(transfers));
        let start = Instant::now();
        let found = store.tx_by_uuid(&uuid)?;
        record(&mut r.by_uuid, start);
        if found.is_none() {
            bail!("uuid missing");
        }
        let wallet = rng.below(gen.wallets);
        let end = gen.seq[usize::try_from(wallet)?];
        let start = Instant::now();
        let (got, _) = store.page(wallet, u64::MAX, PAGE)?;
        record(&mut r.newest, start);
        if got != PAGE.min(usize::try_from(end)?) {
            bail!("wallet {wallet}: page of {got} entries, expected up to {PAGE} of {end}");
        }
        let cursor = rng.below(end.max(1)).max(1);
        let start = Instant::now();
        store.page(wallet, cursor, PAGE)?;
        record(&mut r.deep, start);
    }
    Ok(r)
}

/// Runs this binary as a child and returns its stdout's last line.
fn child(args: &[String]) -> Result<String> {
    let exe = std::env::current_exe()?;
    let out = Command::new(exe).arg("--child").args(args).output()?;
    let stdout = String::from_utf8_lossy(&out.stdout).into_owned();
    if args.first().map(String::as_str) != Some("crash") && !out.status.success() {
        bail!(
            "child {args:?} failed: {}\n{}",
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    Ok(stdout.lines().last().unwrap_or_default().to_string())
}

fn child_main(args: &Args) -> Result<()> {
    let a = &args.child;
    let get = |i: usize| {
        a.get(i)
            .map(String::as_str)
            .context("child: missing argument")
    };
    let engine = get(1)?;
    let dir = PathBuf::from(get(2)?);
    let cache = args.cache_mib << 20;
    match get(0)? {
        "open" => {
            let start = Instant::now();
            let store = stores::open(engine, &dir, cache, args.fjall_journal_mib << 20)?;
            let lsn = store.lsn()?.context("no lsn")?;
            let opened = start.elapsed();
            store.page(0, u64::MAX, PAGE)?;
            println!("{} {lsn}", opened.as_secs_f64() * 1e3);
        }
        "crash" => {
            let wallets: u64 = get(3)?.parse()?;
            let batch_size: u64 = get(4)?.parse()?;
            let from: u64 = get(5)?.parse()?;
            let n: u64 = get(6)?.parse()?;
            let store = stores::open(engine, &dir, cache, args.fjall_journal_mib << 20)?;
            // Fresh sequences far above the existing ones, and transfer numbers after `from`.
            let mut gen = Generator::new(wallets, SEED ^ from, 1 << 40)?;
            gen.next = from;
            let mut batch = Batch::default();
            for _ in 0..n.div_ceil(batch_size) {
                gen.fill(&mut batch, batch_size)?;
                store.write(&batch, false)?;
            }
            println!("wrote {} up to lsn {}", n, gen.next);
            std::process::abort();
        }
        other => bail!("unknown child mode {other}"),
    }
    Ok(())
}

struct Row {
    engine: String,
    wallets: u64,
    batch: u64,
    ingest: IngestResult,
    disk: u64,
    reads: Reads,
    during: Option<(f64, Histogram<u64>)>,
    open_ms: f64,
    crash: Option<(f64, u64)>,
}

fn run(args: &Args, engine: &str, wallets: u64, batch: u64) -> Result<Row> {
    let dir = scratch_dir(&format!("history-{engine}"))?;
    let cache = args.cache_mib << 20;
    let every = args.checkpoint.div_ceil(batch).max(1);
    let store = stores::open(engine, dir.path(), cache, args.fjall_journal_mib << 20)?;
    let mut gen = Generator::new(wallets, SEED ^ wallets, 0)?;
    eprintln!("  {engine} {wallets} wallets, batch {batch}: ingest");
    let ingested = ingest(&*store, &mut gen, args.transfers, batch, every)?;
    let disk = disk_bytes(dir.path())?;
    eprintln!("  reads");
    let reads = reads(&*store, &gen, args.reads, SEED ^ 7)?;

    let during = if args.concurrent > 0 {
        eprintln!("  reads during ingest");
        let stop = AtomicBool::new(false);
        let known: Vec<u64> = gen.seq.clone();
        let (writer, pages) = std::thread::scope(|s| {
            let reader = s.spawn(|| -> Result<Histogram<u64>> {
                let mut rng = Rng(SEED ^ 11);
                let mut h = hist();
                while !stop.load(Ordering::Relaxed) {
                    let wallet = rng.below(wallets);
                    let start = Instant::now();
                    let (got, _) = store.page(wallet, u64::MAX, PAGE)?;
                    record(&mut h, start);
                    if got < PAGE.min(usize::try_from(known[usize::try_from(wallet)?])?) {
                        bail!("short page during ingest");
                    }
                }
                Ok(h)
            });
            let writer = ingest(&*store, &mut gen, args.concurrent, batch, every);
            stop.store(true, Ordering::Relaxed);
            let pages = reader
                .join()
                .unwrap_or_else(|_| Err(anyhow::anyhow!("reader panicked")));
            (writer, pages)
        });
        let writer = writer?;
        Some((writer.transfers as f64 / writer.seconds, pages?))
    } else {
        None
    };
    drop(store);

    let path = dir.path().display().to_string();
    let open = child(&["open".into(), engine.into(), path.clone()])?;
    let open_ms: f64 = open.split(' ').next().unwrap_or_default().parse()?;

    let crash = if args.crash > 0 {
        eprintln!("  crash");
        let wrote = child(&[
            "crash".into(),
            engine.into(),
            path.clone(),
            wallets.to_string(),
            batch.to_string(),
            gen.next.to_string(),
            args.crash.to_string(),
        ])?;
        eprintln!("    child: {wrote}");
        let reopened = child(&["open".into(), engine.into(), path])?;
        let mut it = reopened.split(' ');
        let ms: f64 = it.next().unwrap_or_default().parse()?;
        let lsn: u64 = it.next().unwrap_or_default().parse()?;
        let written = gen.next + args.crash.div_ceil(batch) * batch;
        Some((ms, written.saturating_sub(lsn)))
    } else {
        None
    };
    Ok(Row {
        engine: engine.into(),
        wallets,
        batch,
        ingest: ingested,
        disk,
        reads,
        during,
        open_ms,
        crash,
    })
}

fn main() -> Result<()> {
    let args = Args::parse();
    if !args.child.is_empty() {
        return child_main(&args);
    }
    println!(
        "history_store: {} transfers per run, checkpoint every {} transfers, {} reads of each kind, \
         cache {} MiB, scratch {}, {} CPUs",
        args.transfers,
        args.checkpoint,
        args.reads,
        args.cache_mib,
        walletd_benches::scratch_root().display(),
        std::thread::available_parallelism().map_or(0, |n| n.get())
    );
    {
        let mut gen = Generator::new(1000, 1, 0)?;
        let mut b = Batch::default();
        gen.fill(&mut b, 1000)?;
        let tx: usize = b.txs.iter().map(|(_, v)| v.len()).sum();
        let en: usize = b.entries.iter().map(|(_, _, v)| v.len()).sum();
        println!(
            "encoded sizes (postcard): Transaction {} B, LedgerEntry {} B (mean)",
            tx / b.txs.len(),
            en / b.entries.len()
        );
    }
    let mut rows = Vec::new();
    for engine in &args.engines {
        for &wallets in &args.wallets {
            for &batch in &args.batches {
                let row = run(&args, engine, wallets, batch)?;
                print_row(&row, rows.is_empty());
                rows.push(row);
            }
        }
    }
    Ok(())
}

fn print_row(r: &Row, header: bool) {
    if header {
        println!(
            "| engine | wallets | batch | rows/s | transfers/s | batch p99 ms | checkpoint ms | disk MiB \
             | tx by id p50/p99 µs | by uuid | newest 50 | 50 before cursor | page during ingest \
             | ingest with reader, transfers/s | reopen ms | after crash: open ms, transfers lost |"
        );
        println!("|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|---|");
    }
    let i = &r.ingest;
    let (during, during_rate) = r
        .during
        .as_ref()
        .map_or(("–".into(), "–".into()), |(rate, h)| {
            (pct(h), format!("{rate:.0}"))
        });
    let crash = r
        .crash
        .map_or("–".into(), |(ms, lost)| format!("{ms:.0} ms, {lost}"));
    println!(
        "| {} | {} | {} | {:.0} | {:.0} | {:.1} | {:.1} | {:.0} | {} | {} | {} | {} | {} | {} | {:.0} | {} |",
        r.engine,
        r.wallets,
        r.batch,
        i.rows as f64 / i.seconds,
        i.transfers as f64 / i.seconds,
        i.batch_p99_ms,
        i.checkpoint_ms_mean,
        r.disk as f64 / f64::from(1 << 20),
        pct(&r.reads.by_id),
        pct(&r.reads.by_uuid),
        pct(&r.reads.newest),
        pct(&r.reads.deep),
        during,
        during_rate,
        r.open_ms,
        crash
    );
}
