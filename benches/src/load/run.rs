//! The run: setup (or baseline stand-ins), `--connections` closed-loop request loops for the
//! warm-up plus `--duration` (or until the server goes away, with `--survive-restart`), then the
//! audit read-back and the report.

use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use serde::Deserialize;
use serde_json::value::RawValue;

use super::args::{ClientKind, LoadArgs};
use super::audit::{self, Balance, Effect, Model};
use super::client::{connect, Conn, Request, Response, Target};
use super::drill::{self, RestartReport};
use super::metrics;
use super::mix::{Kind, Mix, Op, Rng, REFUND_ONE_IN};
use super::report::{self, Header, Live, Stats};
use super::setup::{self, error_code, Caller, Setup, Wallet};
use super::tokens::{self, Renewal, Renewed, Tokens};
use super::{cents_text, parse_cents};

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
    /// `--batch`: transfers per request.
    batch: u32,
    /// The tokens to send, renewed while the load runs.
    tokens: Arc<Tokens>,
    wallets: Vec<Wallet>,
    /// The merchant payments go to (mixes with payments).
    merchant: Option<MerchantTarget>,
    started: Instant,
    measure_from: Instant,
    deadline: Instant,
    live: Arc<Live>,
    /// `--survive-restart`: a connection error stops the load.
    survive: bool,
    /// Set by the first connection error under `--survive-restart`: issue nothing more.
    stop: AtomicBool,
    /// Microseconds from `started` to that error (+1, so 0 means "not yet").
    stopped_at_us: AtomicU64,
}

/// What a payment needs of the merchant.
#[derive(Clone)]
struct MerchantTarget {
    business_id: u64,
    /// The merchant wallet's index in the audit model (after the customers').
    index: usize,
}

impl Shared {
    fn stopping(&self) -> bool {
        self.stop.load(Ordering::Relaxed)
    }

    /// A connection error under `--survive-restart`: stop the load (the first one says when).
    fn connection_lost(&self) {
        if self.survive && !self.stop.swap(true, Ordering::SeqCst) {
            let micros = self.started.elapsed().as_micros() as u64;
            self.stopped_at_us.store(micros + 1, Ordering::SeqCst);
            eprintln!(
                "walletd-load: connection error at {:.2} s: stopping the load (requests in flight count as unknown)",
                micros as f64 / 1e6
            );
        }
    }

    fn stopped_at_s(&self) -> Option<f64> {
        match self.stopped_at_us.load(Ordering::SeqCst) {
            0 => None,
            micros => Some((micros - 1) as f64 / 1e6),
        }
    }
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
    if baseline && args.mix.has(Op::Payment) {
        return Err("payments need walletd: the baseline cannot initiate or confirm them".into());
    }
    if baseline && args.survive_restart.is_some() {
        return Err("--survive-restart drills walletd, not the baseline".into());
    }
    let nonce = random_seed();
    let mut setup = if baseline {
        Setup::baseline(args.wallets.max(2), nonce)
    } else {
        setup::prepare(&args, &target, seed, nonce, setup_timeout).await?
    };
    let survive = args.survive_restart.map(Duration::from_secs_f64);
    // A restarted walletd counts its WAL records from zero: remember where this one stands.
    let records_before = match survive {
        Some(_) => metrics::scrape(args.client, &target, setup_timeout)
            .await
            .map(|c| c.records),
        None => None,
    };

    let live = Arc::new(Live::new());
    let started = Instant::now();
    let measure_from = started + Duration::from_secs_f64(args.warmup.max(0.0));
    let deadline = measure_from + Duration::from_secs_f64(args.duration.max(0.0));
    let tokens = Arc::new(Tokens::new(&setup));
    let renewed = Arc::new(std::sync::RwLock::new(Renewed::default()));
    let renewal = setup.tokens.map(|issued| {
        tokio::spawn(tokens::renew_until(
            tokens.clone(),
            Arc::new(Renewal {
                args: args.clone(),
                target: target.clone(),
                timeout: setup_timeout,
                nonce,
                wallets: setup.wallets.clone(),
                merchant: setup.merchant.clone(),
            }),
            issued,
            deadline,
            renewed.clone(),
        ))
    });
    let shared = Arc::new(Shared {
        target: target.clone(),
        client: args.client,
        timeout,
        mix: args.mix.clone(),
        seed,
        nonce,
        idempotency: args.idempotency,
        batch: args.batch,
        tokens: tokens.clone(),
        wallets: setup.wallets.clone(),
        merchant: setup.merchant.as_ref().map(|m| MerchantTarget {
            business_id: m.business_id,
            index: setup.wallets.len(),
        }),
        started,
        measure_from,
        deadline,
        live: live.clone(),
        survive: survive.is_some(),
        stop: AtomicBool::new(false),
        stopped_at_us: AtomicU64::new(0),
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
    eprintln!(
        "load: started {} connections for {:.1} s warm-up + {:.1} s{}",
        args.connections,
        args.warmup.max(0.0),
        args.duration.max(0.0),
        match args.survive_restart {
            Some(seconds) => format!(", surviving a server restart (up to {seconds} s)"),
            None => String::new(),
        }
    );
    let loops: Vec<_> = (0..args.connections)
        .map(|index| tokio::spawn(connection_loop(shared.clone(), index)))
        .collect();
    let mut stats = Stats::new();
    let audited = setup.audited().len();
    let mut model = Model::new(audited);
    for handle in loops {
        let (their_stats, their_model) = handle
            .await
            .map_err(|e| format!("a connection loop failed: {e}"))?;
        stats.merge(&their_stats);
        model.merge(&their_model);
    }
    let ended = Instant::now();
    progress.abort();
    if let Some(renewal) = renewal {
        renewal.abort();
    }
    let renewed = *renewed
        .read()
        .unwrap_or_else(|poisoned| poisoned.into_inner());
    if renewed.rounds > 0 {
        eprintln!(
            "walletd-load: token renewals during the load: {} rounds, {} tokens, {} logins failed",
            renewed.rounds, renewed.tokens, renewed.failed
        );
    }
    tokens.store_into(&mut setup);
    let mut restart = survive.map(|within| RestartReport {
        survive_restart_s: within.as_secs_f64(),
        load_stopped_at_s: shared.stopped_at_s(),
        ..RestartReport::default()
    });
    if let (Some(within), Some(report)) = (survive, restart.as_mut()) {
        if shared.stopping() {
            eprintln!(
                "walletd-load: waiting up to {:.0} s for {url}/v1/health to answer 200",
                within.as_secs_f64()
            );
            let comeback = drill::wait_healthy(args.client, &target, within).await?;
            eprintln!(
                "walletd-load: the server answered again after {:.2} s ({} failed probes)",
                comeback.waited.as_secs_f64(),
                comeback.failed_probes
            );
            report.came_back(comeback);
        }
    }
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
            if let Some(report) = restart.as_mut() {
                report.counters(records_before, after.map(|c| c.records));
            }
            before
                .zip(after)
                .filter(|(before, after)| after.records >= before.records)
                .map(|(before, after)| metrics::WalSummary::between(before, after, seconds))
        }
        None => None,
    };

    let audit = if baseline {
        None
    } else {
        let actual = read_back(&args, &target, &mut setup, setup_timeout, restart.as_mut()).await?;
        let ids: Vec<u64> = setup.audited().iter().map(|(id, _)| *id).collect();
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
    summary.restart = restart;
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
    // In a drill the server may be killed before the measured window starts; the audit decides.
    if summary.total.requests == 0 && !shared.stopping() {
        eprintln!("walletd-load: no request was answered in the measured window");
        return Ok(2);
    }
    Ok(match &summary.audit {
        Some(audit) if !audit.ok => 1,
        _ => 0,
    })
}

/// Reads back every audited wallet. A 401 (a restarted server that no longer takes a token)
/// logs the admin and the merchant's employee in again; with `--survive-restart`, a server that
/// does not answer is waited for. Either is retried a few times.
async fn read_back(
    args: &LoadArgs,
    target: &Target,
    setup: &mut Setup,
    timeout: Duration,
    mut restart: Option<&mut RestartReport>,
) -> Result<Vec<Balance>, String> {
    let mut retries = 0;
    loop {
        let failure = match setup::read_balances(
            args.client,
            target,
            &setup.audited(),
            args.setup_connections,
            timeout,
        )
        .await
        {
            Ok(balances) => return Ok(balances),
            Err(failure) => failure,
        };
        retries += 1;
        if retries > 3 {
            return Err(format!("audit: {}", failure.message));
        }
        if failure.unauthorized {
            eprintln!("walletd-load: audit read-back answered 401: logging in again");
            let mut caller = Caller::new(args.client, target.clone(), timeout);
            setup.admin = setup::login_admin(args, &mut caller).await?.token;
            if let Some(merchant) = setup.merchant.as_mut() {
                merchant.token = setup::login_merchant(merchant, &mut caller).await?.token;
            }
            if let Some(report) = restart.as_deref_mut() {
                report.relogins += 1;
            }
        } else if let (true, Some(report), Some(seconds)) = (
            failure.no_answer,
            restart.as_deref_mut(),
            args.survive_restart,
        ) {
            eprintln!(
                "walletd-load: audit read-back got no answer ({}): waiting up to {seconds:.0} s for the server",
                failure.message
            );
            let comeback =
                drill::wait_healthy(args.client, target, Duration::from_secs_f64(seconds)).await?;
            report.came_back(comeback);
        } else {
            return Err(format!("audit: {}", failure.message));
        }
    }
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
    while Instant::now() < worker.shared.deadline && !worker.shared.stopping() {
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

#[derive(Deserialize)]
struct PaymentAnswer {
    data: PaymentData,
}

#[derive(Deserialize)]
struct PaymentData {
    transaction_id: String,
    net_amount: Option<Box<RawValue>>,
}

/// A payment answer's `transaction_id` (checked to be a UUID-like path segment) and exact
/// `net_amount` in cents (`None` when absent or not an exact amount).
fn parse_payment(body: &[u8]) -> Option<(String, Option<i64>)> {
    let answer: PaymentAnswer = serde_json::from_slice(body).ok()?;
    let id = answer.data.transaction_id;
    let uuid_like =
        (1..=64).contains(&id.len()) && id.bytes().all(|b| b.is_ascii_hexdigit() || b == b'-');
    if !uuid_like {
        return None;
    }
    let net = answer
        .data
        .net_amount
        .and_then(|raw| parse_cents(raw.get()))
        .filter(|cents| *cents >= 0);
    Some((id, net))
}

/// What `POST /v1/transfers/batch` answers per item.
#[derive(serde::Deserialize)]
struct BatchAnswer {
    data: BatchData,
}

#[derive(serde::Deserialize)]
struct BatchData {
    results: Vec<BatchResult>,
}

#[derive(serde::Deserialize)]
struct BatchResult {
    status: bool,
}

impl Worker {
    /// `--batch N`: N transfers from wallet `pick` to others in one request; the model learns
    /// each item's effect from its own result.
    async fn transfer_batch(&mut self, pick: usize, rng: &mut Rng) {
        let wallets = self.shared.wallets.len();
        let mut items = Vec::with_capacity(self.shared.batch as usize);
        let mut body = String::from("{\"transfers\":[");
        for index in 0..self.shared.batch {
            let mut other = rng.below(wallets as u64 - 1) as usize;
            if other >= pick {
                other += 1;
            }
            let cents = rng.between(100, 5_000);
            if index > 0 {
                body.push(',');
            }
            body.push_str(&format!(
                "{{\"from_wallet_id\":{},\"to_wallet_id\":{},\"amount\":{},\"currency_code\":\"YER\"}}",
                self.wallet_id(pick),
                self.wallet_id(other),
                cents_text(cents)
            ));
            items.push((other, cents));
        }
        body.push_str("]}");
        let token = self.token(pick);
        let request = self.write("/v1/transfers/batch".into(), token, body);
        let answer = self.exchange(Kind::Transfer, &request).await;
        let posted: Option<Vec<bool>> = match &answer {
            Answer::Ok(response) => serde_json::from_slice::<BatchAnswer>(&response.body)
                .ok()
                .map(|a| a.data.results.iter().map(|r| r.status).collect())
                .filter(|posted: &Vec<bool>| posted.len() == items.len()),
            _ => None,
        };
        if matches!(answer, Answer::Ok(_)) && posted.is_none() {
            self.odd_answer(Kind::Transfer, "batch answer without one result per item");
        }
        for (index, (other, cents)) in items.into_iter().enumerate() {
            let effect = match (&answer, &posted) {
                (Answer::Ok(_), Some(posted)) if posted.get(index) == Some(&true) => {
                    Effect::Applied
                }
                (Answer::Ok(_), Some(_)) | (Answer::Refused, _) => Effect::None,
                _ => Effect::Unknown,
            };
            self.model.transfer(pick, other, cents, effect);
        }
    }

    async fn step(&mut self, op: Op, rng: &mut Rng) {
        let wallets = self.shared.wallets.len();
        let pick = rng.below(wallets as u64) as usize;
        match op {
            Op::Deposit => {
                let cents = rng.between(100, 10_000);
                let request = self.write(
                    format!("/v1/wallets/{}/deposit", self.wallet_id(pick)),
                    self.shared.tokens.admin(),
                    format!("{{\"amount\":{}}}", cents_text(cents)),
                );
                let answer = self.exchange(Kind::Deposit, &request).await;
                self.model.deposit(pick, cents, answer.effect());
            }
            Op::Withdraw => {
                let cents = rng.between(100, 5_000);
                let request = self.write(
                    format!("/v1/wallets/{}/withdraw", self.wallet_id(pick)),
                    self.shared.tokens.admin(),
                    format!("{{\"amount\":{}}}", cents_text(cents)),
                );
                let answer = self.exchange(Kind::Withdraw, &request).await;
                self.model.withdraw(pick, cents, answer.effect());
            }
            Op::Transfer if self.shared.batch > 1 => self.transfer_batch(pick, rng).await,
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
                    self.shared.tokens.admin(),
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
                    self.odd_answer(Kind::HoldPlace, "answer without data.uuid");
                    return;
                };
                let (kind, verb) = if capture {
                    (Kind::HoldCapture, "capture")
                } else {
                    (Kind::HoldRelease, "release")
                };
                let request = self.write(
                    format!("/v1/wallets/holds/{}/{verb}", hold.data.uuid),
                    self.shared.tokens.admin(),
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
            Op::Payment => {
                // Every draw first, so the stream of choices does not depend on the answers.
                let cents = rng.between(100, 5_000);
                let refund = rng.below(REFUND_ONE_IN) == 0;
                let refund_pick = rng.next_u64();
                self.payment(pick, cents, refund.then_some(refund_pick))
                    .await;
            }
        }
    }

    /// A customer (`payer`) pays the merchant `cents`: initiate, confirm, and with
    /// `refund_pick` a partial refund by the merchant.
    async fn payment(&mut self, payer: usize, cents: i64, refund_pick: Option<u64>) {
        let Some(merchant) = self.shared.merchant.clone() else {
            return;
        };
        let request = self.write(
            "/v1/payments/initiate".into(),
            self.token(payer),
            format!(
                r#"{{"merchant_id":{},"wallet_id":{},"amount":{},"currency_code":"YER"}}"#,
                merchant.business_id,
                self.wallet_id(payer),
                cents_text(cents)
            ),
        );
        let answer = self.exchange(Kind::PaymentInitiate, &request).await;
        self.model.initiate_payment(cents, answer.effect());
        let Answer::Ok(initiated) = answer else {
            return;
        };
        let Some((uuid, initiated_net)) = parse_payment(&initiated.body) else {
            self.odd_answer(Kind::PaymentInitiate, "answer without data.transaction_id");
            return;
        };
        let request = self.write(
            format!("/v1/payments/{uuid}/confirm"),
            self.token(payer),
            "{}".into(),
        );
        let answer = self.exchange(Kind::PaymentConfirm, &request).await;
        // What the merchant nets: the confirm's own answer when it has one; for an unknown
        // outcome, the split the initiate answer announced (it is fixed at initiation).
        let net = match &answer {
            Answer::Ok(confirmed) => {
                let net = parse_payment(&confirmed.body).and_then(|(_, net)| net);
                if net.is_none() {
                    self.odd_answer(Kind::PaymentConfirm, "answer without data.net_amount");
                }
                net
            }
            _ => initiated_net,
        };
        self.model
            .confirm_payment(payer, merchant.index, cents, net, answer.effect());
        let (Answer::Ok(_), Some(pick), Some(net)) = (&answer, refund_pick, net) else {
            return;
        };
        let Some(refund) = audit::partial_refund(cents, net, pick) else {
            return;
        };
        let request = self.write(
            format!("/v1/payments/{uuid}/refund"),
            self.shared
                .tokens
                .merchant()
                .unwrap_or_else(|| self.shared.tokens.admin()),
            format!(r#"{{"amount":{}}}"#, cents_text(refund)),
        );
        let answer = self.exchange(Kind::PaymentRefund, &request).await;
        self.model
            .refund_payment(payer, merchant.index, refund, answer.effect());
    }

    /// A 2xx answer the run cannot use (counted with the transport errors).
    fn odd_answer(&mut self, kind: Kind, what: &str) {
        *self.stats.transport.entry((kind, what.into())).or_default() += 1;
    }

    fn wallet_id(&self, index: usize) -> u64 {
        self.shared.wallets.get(index).map_or(0, |w| w.id)
    }

    fn token(&self, index: usize) -> Arc<str> {
        self.shared.tokens.customer(index)
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
    /// (up to 3 tries), so the replayed answer settles its outcome. Under `--survive-restart`,
    /// once the load is stopping nothing more is sent: a request already sent is unknown, one
    /// not sent had no effect.
    async fn exchange(&mut self, kind: Kind, request: &Request) -> Answer {
        let tries = if request.idempotency_key.is_some() {
            3
        } else {
            1
        };
        let mut sent = false;
        for attempt in 0..tries {
            if self.shared.stopping() {
                break;
            }
            if self.conn.is_none() {
                match connect(self.shared.client, &self.shared.target, self.shared.timeout).await {
                    Ok(conn) => self.conn = Some(conn),
                    Err(error) => {
                        self.transport_error(kind, format!("connect: {}", error.kind()));
                        if error.kind() != std::io::ErrorKind::TimedOut {
                            self.shared.connection_lost();
                        }
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
                    if drill::is_connection_error(error.kind()) {
                        self.shared.connection_lost();
                    }
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
