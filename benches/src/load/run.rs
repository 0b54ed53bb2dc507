//! The run: setup (or baseline stand-ins), `--connections` closed-loop request loops for the
//! warm-up plus `--duration`, then the audit read-back and the report.

use std::sync::atomic::Ordering;
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;

use super::args::{ClientKind, LoadArgs};
use super::audit::{self, Effect, Model};
use super::cents_text;
use super::client::{connect, Conn, Request, Response, Target};
use super::metrics;
use super::mix::{Kind, Mix, Op, Rng};
use super::report::{self, Header, Live, Stats};
use super::setup::{self, error_code, Setup, Wallet};

/// Runs the load described by `args`; returns the process exit code (0 ok, 1 audit failed,
/// 2 the run could not be done).
pub fn main(args: LoadArgs) -> i32 {
    let seed = args.seed.unwrap_or_else(random_seed);
    eprintln!("walletd-load: seed {seed} (rerun with --seed {seed})");
    let runtime = if args.threads <= 1 {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
    } else {
        tokio::runtime::Builder::new_multi_thread()
            .worker_threads(args.threads)
            .enable_all()
            .thread_name("load")
            .build()
    };
    let runtime = match runtime {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("walletd-load: start the runtime: {error}");
            return 2;
        }
    };
    match runtime.block_on(run(args, seed)) {
        Ok(code) => code,
        Err(error) => {
            eprintln!("walletd-load: {error}");
            2
        }
    }
}

fn random_seed() -> u64 {
    let nanos = std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .map_or(0, |d| d.as_nanos() as u64);
    Rng::new(nanos ^ u64::from(std::process::id()).rotate_left(32)).next_u64()
}

/// Everything the connection loops share.
struct Shared {
    target: Target,
    client: ClientKind,
    timeout: Duration,
    mix: Mix,
    seed: u64,
    nonce: u64,
    idempotency: bool,
    admin: Arc<str>,
    wallets: Vec<Wallet>,
    measure_from: Instant,
    deadline: Instant,
    live: Arc<Live>,
}

async fn run(args: LoadArgs, seed: u64) -> Result<i32, String> {
    let baseline = args.baseline.is_some();
    let url = args.baseline.clone().unwrap_or_else(|| args.url.clone());
    let target = Target::parse(&url)?;
    let timeout = Duration::from_secs_f64(args.timeout.max(0.001));
    // Setup (password hashing), read-backs and metrics get at least 30 s whatever --timeout says.
    let setup_timeout = timeout.max(Duration::from_secs(30));
    if args.connections == 0 {
        return Err("--connections must be at least 1".into());
    }
    if args.mix.has(Op::Transfer) && args.wallets < 2 {
        return Err("transfers need --wallets 2 or more".into());
    }
    let nonce = random_seed();
    let setup = if baseline {
        Setup::baseline(args.wallets.max(2), nonce)
    } else {
        setup::prepare(&args, &target, seed, nonce, setup_timeout).await?
    };

    let live = Arc::new(Live::new());
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup.max(0.0));
    let deadline = measure_from + Duration::from_secs_f64(args.duration.max(0.0));
    let shared = Arc::new(Shared {
        target: target.clone(),
        client: args.client,
        timeout,
        mix: args.mix.clone(),
        seed,
        nonce,
        idempotency: args.idempotency,
        admin: setup.admin.clone(),
        wallets: setup.wallets.clone(),
        measure_from,
        deadline,
        live: live.clone(),
    });
    let progress = tokio::spawn(report::progress(
        live.clone(),
        started,
        measure_from,
        deadline,
    ));
    let server_pid = args.server_pid;
    let cpu_start = tokio::spawn(async move {
        tokio::time::sleep_until(tokio::time::Instant::from_std(measure_from)).await;
        (
            report::cpu_seconds(None),
            server_pid.and_then(|pid| report::cpu_seconds(Some(pid))),
        )
    });
    let wal_start = (!baseline).then(|| {
        let target = target.clone();
        let client = args.client;
        tokio::spawn(async move {
            tokio::time::sleep_until(tokio::time::Instant::from_std(measure_from)).await;
            metrics::scrape(client, &target, setup_timeout).await
        })
    });
    let loops: Vec<_> = (0..args.connections)
        .map(|index| tokio::spawn(connection_loop(shared.clone(), index)))
        .collect();
    let mut stats = Stats::new();
    let mut model = Model::new(setup.wallets.len());
    for handle in loops {
        let (their_stats, their_model) = handle
            .await
            .map_err(|e| format!("a connection loop failed: {e}"))?;
        stats.merge(&their_stats);
        model.merge(&their_model);
    }
    let ended = Instant::now();
    progress.abort();
    let seconds = ended.saturating_duration_since(measure_from).as_secs_f64();
    let cpu_end = (
        report::cpu_seconds(None),
        server_pid.and_then(|pid| report::cpu_seconds(Some(pid))),
    );
    let cpu_start = cpu_start.await.unwrap_or((None, None));
    let wal = match wal_start {
        Some(started) => {
            let before = started.await.ok().flatten();
            let after = metrics::scrape(args.client, &target, setup_timeout).await;
            before
                .zip(after)
                .map(|(before, after)| metrics::WalSummary::between(before, after, seconds))
        }
        None => None,
    };

    let audit = if baseline {
        None
    } else {
        let ids: Vec<u64> = setup.wallets.iter().map(|w| w.id).collect();
        let actual = setup::read_balances(
            args.client,
            &target,
            &setup.admin,
            &ids,
            args.setup_connections,
            setup_timeout,
        )
        .await
        .map_err(|e| format!("audit: {e}"))?;
        Some(audit::check(&ids, &setup.base, &model, &actual))
    };
    let mut summary = report::summarize(
        Header {
            label: args.label.clone(),
            target: if baseline { "baseline" } else { "walletd" },
            url,
            client: format!("{:?}", args.client).to_lowercase(),
            threads: args.threads.max(1),
            seed,
            mix: args.mix.to_string(),
            connections: args.connections,
            wallets: setup.wallets.len(),
            idempotency: args.idempotency,
            warmup_s: args.warmup.max(0.0),
        },
        seconds,
        &stats,
        &model,
        audit,
    );
    summary.wal = wal;
    let answered = summary.total.requests.max(1) as f64;
    if let (Some(before), Some(after)) = (cpu_start.0, cpu_end.0) {
        summary.cpu.client_cores = Some((after - before) / seconds.max(1e-9));
        summary.cpu.client_us_per_request = Some((after - before) * 1e6 / answered);
    }
    if let (Some(before), Some(after)) = (cpu_start.1, cpu_end.1) {
        summary.cpu.server_cores = Some((after - before) / seconds.max(1e-9));
        summary.cpu.server_us_per_request = Some((after - before) * 1e6 / answered);
    }
    let printed = if args.json {
        report::print_table(&summary, &mut std::io::stderr())
    } else {
        report::print_table(&summary, &mut std::io::stdout())
    };
    printed.map_err(|e| format!("print the report: {e}"))?;
    if args.json {
        let text = serde_json::to_string_pretty(&summary).map_err(|e| e.to_string())?;
        println!("{text}");
    }
    if let Some(path) = &args.csv {
        report::append_csv(path, &summary)
            .map_err(|e| format!("append to {}: {e}", path.display()))?;
    }
    if summary.total.requests == 0 {
        eprintln!("walletd-load: no request was answered in the measured window");
        return Ok(2);
    }
    Ok(match &summary.audit {
        Some(audit) if !audit.ok => 1,
        _ => 0,
    })
}

/// The outcome of one request.
enum Answer {
    /// 2xx.
    Ok(Response),
    /// 4xx: the request was refused and had no effect.
    Refused,
    /// No answer (or 5xx): it may or may not have been applied.
    Unknown,
}

impl Answer {
    fn effect(&self) -> Effect {
        match self {
            Answer::Ok(_) => Effect::Applied,
            Answer::Refused => Effect::None,
            Answer::Unknown => Effect::Unknown,
        }
    }
}

/// One connection's loop state.
struct Worker {
    shared: Arc<Shared>,
    index: usize,
    conn: Option<Conn>,
    sequence: u64,
    stats: Stats,
    model: Model,
}

async fn connection_loop(shared: Arc<Shared>, index: usize) -> (Stats, Model) {
    let mut rng = Rng::stream(shared.seed, index as u64 + 1);
    let mut worker = Worker {
        model: Model::new(shared.wallets.len()),
        shared,
        index,
        conn: None,
        sequence: 0,
        stats: Stats::new(),
    };
    while Instant::now() < worker.shared.deadline {
        let op = worker.shared.mix.pick(&mut rng);
        worker.step(op, &mut rng).await;
    }
    (worker.stats, worker.model)
}

#[derive(Deserialize)]
struct HoldAnswer {
    data: HoldData,
}

#[derive(Deserialize)]
struct HoldData {
    uuid: String,
}

impl Worker {
    async fn step(&mut self, op: Op, rng: &mut Rng) {
        let wallets = self.shared.wallets.len();
        let pick = rng.below(wallets as u64) as usize;
        match op {
            Op::Deposit => {
                let cents = rng.between(100, 10_000);
                let request = self.write(
                    format!("/v1/wallets/{}/deposit", self.wallet_id(pick)),
                    self.shared.admin.clone(),
                    format!("{{\"amount\":{}}}", cents_text(cents)),
                );
                let answer = self.exchange(Kind::Deposit, &request).await;
                self.model.deposit(pick, cents, answer.effect());
            }
            Op::Withdraw => {
                let cents = rng.between(100, 5_000);
                let request = self.write(
                    format!("/v1/wallets/{}/withdraw", self.wallet_id(pick)),
                    self.shared.admin.clone(),
                    format!("{{\"amount\":{}}}", cents_text(cents)),
                );
                let answer = self.exchange(Kind::Withdraw, &request).await;
                self.model.withdraw(pick, cents, answer.effect());
            }
            Op::Transfer => {
                let mut other = rng.below(wallets as u64 - 1) as usize;
                if other >= pick {
                    other += 1;
                }
                let cents = rng.between(100, 5_000);
                let token = self.token(pick);
                let request = self.write(
                    "/v1/transfers".into(),
                    token,
                    format!(
                        "{{\"from_wallet_id\":{},\"to_wallet_id\":{},\"amount\":{},\"currency_code\":\"YER\"}}",
                        self.wallet_id(pick),
                        self.wallet_id(other),
                        cents_text(cents)
                    ),
                );
                let answer = self.exchange(Kind::Transfer, &request).await;
                self.model.transfer(pick, other, cents, answer.effect());
            }
            Op::Hold => {
                let cents = rng.between(100, 2_000);
                let capture = rng.coin();
                let request = self.write(
                    "/v1/wallets/hold".into(),
                    self.shared.admin.clone(),
                    format!(
                        "{{\"wallet_id\":{},\"amount\":{},\"currency_code\":\"YER\"}}",
                        self.wallet_id(pick),
                        cents_text(cents)
                    ),
                );
                let answer = self.exchange(Kind::HoldPlace, &request).await;
                self.model.place_hold(pick, cents, answer.effect());
                let Answer::Ok(placed) = answer else {
                    return;
                };
                let Ok(hold) = serde_json::from_slice::<HoldAnswer>(&placed.body) else {
                    *self
                        .stats
                        .transport
                        .entry((Kind::HoldPlace, "answer without data.uuid".into()))
                        .or_default() += 1;
                    return;
                };
                let (kind, verb) = if capture {
                    (Kind::HoldCapture, "capture")
                } else {
                    (Kind::HoldRelease, "release")
                };
                let request = self.write(
                    format!("/v1/wallets/holds/{}/{verb}", hold.data.uuid),
                    self.shared.admin.clone(),
                    "{}".into(),
                );
                let answer = self.exchange(kind, &request).await;
                self.model.close_hold(pick, cents, capture, answer.effect());
            }
            Op::Balance => {
                let request = Request::get(
                    format!("/v1/wallets/{}/balance", self.wallet_id(pick)),
                    Some(self.token(pick)),
                );
                let _ = self.exchange(Kind::Balance, &request).await;
            }
        }
    }

    fn wallet_id(&self, index: usize) -> u64 {
        self.shared.wallets.get(index).map_or(0, |w| w.id)
    }

    fn token(&self, index: usize) -> Arc<str> {
        self.shared
            .wallets
            .get(index)
            .map_or_else(|| self.shared.admin.clone(), |w| w.token.clone())
    }

    /// A POST with this run's next Idempotency-Key when `--idempotency` is on.
    fn write(&mut self, path: String, token: Arc<str>, body: String) -> Request {
        let mut request = Request::post(path, Some(token), body);
        if self.shared.idempotency {
            self.sequence += 1;
            request.idempotency_key = Some(format!(
                "load-{:x}-{}-{}",
                self.shared.nonce, self.index, self.sequence
            ));
        }
        request
    }

    /// Sends `request` (reconnecting as needed), records its latency and status, and says what
    /// its answer implies. With an Idempotency-Key a request that got no answer is sent again
    /// (up to 3 tries), so the replayed answer settles its outcome.
    async fn exchange(&mut self, kind: Kind, request: &Request) -> Answer {
        let tries = if request.idempotency_key.is_some() {
            3
        } else {
            1
        };
        let mut sent = false;
        for attempt in 0..tries {
            if self.conn.is_none() {
                match connect(self.shared.client, &self.shared.target, self.shared.timeout).await {
                    Ok(conn) => self.conn = Some(conn),
                    Err(error) => {
                        self.transport_error(kind, format!("connect: {}", error.kind()));
                        tokio::time::sleep(Duration::from_millis(50)).await;
                        continue;
                    }
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            sent = true;
            let started = Instant::now();
            let result = tokio::time::timeout(self.shared.timeout, conn.send(request)).await;
            let micros = started.elapsed().as_micros() as u64;
            let response = match result {
                Ok(Ok(response)) => {
                    if conn.closing() {
                        self.conn = None;
                    }
                    response
                }
                Ok(Err(error)) => {
                    self.conn = None;
                    self.transport_error(kind, format!("{}", error.kind()));
                    continue;
                }
                Err(_) => {
                    self.conn = None;
                    self.transport_error(kind, "timeout".into());
                    continue;
                }
            };
            let measured = started >= self.shared.measure_from;
            self.shared
                .live
                .answer(response.status, measured.then_some(micros));
            if measured {
                self.stats.record(kind, micros);
            }
            let status = response.status;
            if (200..300).contains(&status) {
                return Answer::Ok(response);
            }
            if measured {
                *self
                    .stats
                    .statuses
                    .entry((kind, status, error_code(&response.body)))
                    .or_default() += 1;
            }
            // A retry that finds the first try still running: wait for it and ask again.
            if status == 409 && attempt > 0 && error_code(&response.body) == "request_in_progress" {
                tokio::time::sleep(Duration::from_millis(20)).await;
                continue;
            }
            return if status >= 500 {
                Answer::Unknown
            } else {
                Answer::Refused
            };
        }
        if sent {
            Answer::Unknown
        } else {
            Answer::Refused
        }
    }

    fn transport_error(&mut self, kind: Kind, what: String) {
        self.shared
            .live
            .transport_errors
            .fetch_add(1, Ordering::Relaxed);
        *self.stats.transport.entry((kind, what)).or_default() += 1;
    }
}
