//! The setup phase: log in the platform admin, register customers (each gets a primary YER
//! wallet and a token), fund every wallet, and read the balances back as the audit's start.
//! Also the read-back the audit uses at the end.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::args::{ClientKind, LoadArgs};
use super::audit::Balance;
use super::client::{connect, Conn, Request, Response, Target};
use super::mix::Rng;
use super::{cents_text, parse_cents};

/// A customer's wallet and the customer's token.
#[derive(Clone, Debug)]
pub struct Wallet {
    pub id: u64,
    pub token: Arc<str>,
}

/// What the run needs from the setup.
pub struct Setup {
    pub admin: Arc<str>,
    pub wallets: Vec<Wallet>,
    /// Balances after funding, in the order of `wallets`.
    pub base: Vec<Balance>,
    /// Distinguishes this run's phones and idempotency keys from earlier runs'.
    pub nonce: u64,
}

impl Setup {
    /// Stand-ins for the baseline server, which answers anything.
    pub fn baseline(wallets: usize, nonce: u64) -> Setup {
        let token: Arc<str> = "baseline".into();
        Setup {
            admin: token.clone(),
            wallets: (1..=wallets as u64)
                .map(|id| Wallet {
                    id,
                    token: token.clone(),
                })
                .collect(),
            base: Vec::new(),
            nonce,
        }
    }
}

#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
}

#[derive(Deserialize)]
struct TokenData {
    token: String,
}

#[derive(Deserialize)]
struct RegisterData {
    token: String,
    wallet: Option<WalletData>,
}

#[derive(Deserialize)]
struct WalletData {
    id: u64,
}

#[derive(Deserialize)]
struct BalanceData<'a> {
    #[serde(borrow)]
    balance: &'a RawValue,
    #[serde(borrow)]
    held_balance: &'a RawValue,
    #[serde(borrow)]
    available_balance: &'a RawValue,
}

#[derive(Deserialize)]
struct ErrorBody {
    error: Option<ErrorDetail>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    code: String,
}

/// The `error.code` of an error answer, or `-`.
pub fn error_code(body: &[u8]) -> String {
    serde_json::from_slice::<ErrorBody>(body)
        .ok()
        .and_then(|b| b.error)
        .map_or_else(|| "-".into(), |e| e.code)
}

/// Parses a balance answer.
pub fn parse_balance(body: &[u8]) -> Option<Balance> {
    let envelope: Envelope<BalanceData<'_>> = serde_json::from_slice(body).ok()?;
    Some(Balance {
        balance: parse_cents(envelope.data.balance.get())?,
        held: parse_cents(envelope.data.held_balance.get())?,
        available: parse_cents(envelope.data.available_balance.get())?,
    })
}

/// A connection that reconnects once when a request fails without an answer. For setup and
/// read-back only, where every request is either idempotent (reads) or checked afterwards.
pub struct Caller {
    kind: ClientKind,
    target: Target,
    timeout: Duration,
    conn: Option<Conn>,
}

impl Caller {
    pub fn new(kind: ClientKind, target: Target, timeout: Duration) -> Caller {
        Caller {
            kind,
            target,
            timeout,
            conn: None,
        }
    }

    pub async fn call(&mut self, request: &Request) -> Result<Response, String> {
        let mut last_error = String::new();
        for _ in 0..2 {
            if self.conn.is_none() {
                match connect(self.kind, &self.target, self.timeout).await {
                    Ok(conn) => self.conn = Some(conn),
                    Err(error) => {
                        last_error = format!("connect to {}: {error}", self.target.addr);
                        continue;
                    }
                }
            }
            let Some(conn) = self.conn.as_mut() else {
                continue;
            };
            match tokio::time::timeout(self.timeout, conn.send(request)).await {
                Ok(Ok(response)) => {
                    if conn.closing() {
                        self.conn = None;
                    }
                    return Ok(response);
                }
                Ok(Err(error)) => {
                    self.conn = None;
                    last_error = format!("{} {}: {error}", method_name(request), request.path);
                }
                Err(_) => {
                    self.conn = None;
                    last_error = format!("{} {}: timed out", method_name(request), request.path);
                }
            }
        }
        Err(last_error)
    }
}

fn method_name(request: &Request) -> &'static str {
    match request.method {
        super::client::Method::Get => "GET",
        super::client::Method::Post => "POST",
    }
}

/// Explains an unexpected answer.
fn unexpected(what: &str, response: &Response) -> String {
    let hint = match response.status {
        429 => " (walletd is rate limiting: start it with WALLETD_RATE_LIMITS=off for load)",
        401 => " (wrong admin email or password? set WALLETD_ADMIN_PASSWORD or --admin-password)",
        _ => "",
    };
    format!(
        "{what}: HTTP {} {}{hint}",
        response.status,
        String::from_utf8_lossy(&response.body)
            .chars()
            .take(300)
            .collect::<String>()
    )
}

/// Logs in the admin, registers and funds `args.wallets` customers, reads their balances.
pub async fn prepare(
    args: &LoadArgs,
    target: &Target,
    seed: u64,
    nonce: u64,
    timeout: Duration,
) -> Result<Setup, String> {
    let password = args.admin_password.clone().ok_or(
        "no admin password: set WALLETD_ADMIN_PASSWORD (the one walletd was started with) or pass --admin-password",
    )?;
    if args.wallets < 2 {
        return Err("--wallets must be at least 2 (transfers need two wallets)".into());
    }
    let mut caller = Caller::new(args.client, target.clone(), timeout);
    let login = Request::post(
        "/v1/auth/employee/login".into(),
        None,
        serde_json::json!({"business_id": 1, "email": args.admin_email, "password": password})
            .to_string(),
    );
    let response = caller.call(&login).await?;
    if response.status != 200 {
        return Err(unexpected("log in the platform admin", &response));
    }
    let admin: Arc<str> = serde_json::from_slice::<Envelope<TokenData>>(&response.body)
        .map_err(|e| format!("log in the platform admin: unexpected answer: {e}"))?
        .data
        .token
        .into();

    let started = std::time::Instant::now();
    let workers = args.setup_connections.clamp(1, args.wallets);
    let mut tasks = Vec::with_capacity(workers);
    for worker in 0..workers {
        let indices: Vec<usize> = (worker..args.wallets).step_by(workers).collect();
        let mut caller = Caller::new(args.client, target.clone(), timeout);
        let admin = admin.clone();
        let fund = args.fund;
        tasks.push(tokio::spawn(async move {
            let mut made = Vec::with_capacity(indices.len());
            for index in indices {
                let wallet = register(&mut caller, seed, nonce, index).await?;
                let deposit = Request::post(
                    format!("/v1/wallets/{}/deposit", wallet.id),
                    Some(admin.clone()),
                    format!(
                        "{{\"amount\":{},\"description\":\"walletd-load funding\"}}",
                        cents_text(fund)
                    ),
                );
                let response = caller.call(&deposit).await?;
                if response.status != 200 {
                    return Err(unexpected(&format!("fund wallet {}", wallet.id), &response));
                }
                made.push((index, wallet));
            }
            Ok::<_, String>(made)
        }));
    }
    let mut wallets: Vec<Option<Wallet>> = vec![None; args.wallets];
    for task in tasks {
        let made = task
            .await
            .map_err(|e| format!("a setup task failed: {e}"))??;
        for (index, wallet) in made {
            if let Some(slot) = wallets.get_mut(index) {
                *slot = Some(wallet);
            }
        }
    }
    let wallets: Vec<Wallet> = wallets.into_iter().flatten().collect();
    eprintln!(
        "setup: registered and funded {} customers ({} YER each) in {:.1} s",
        wallets.len(),
        cents_text(args.fund),
        started.elapsed().as_secs_f64()
    );
    let ids: Vec<u64> = wallets.iter().map(|w| w.id).collect();
    let base = read_balances(args.client, target, &admin, &ids, workers, timeout).await?;
    Ok(Setup {
        admin,
        wallets,
        base,
        nonce,
    })
}

/// Registers customer `index` with a phone unique to this run; retries a taken phone.
async fn register(
    caller: &mut Caller,
    seed: u64,
    nonce: u64,
    index: usize,
) -> Result<Wallet, String> {
    let mut rng = Rng::stream(seed ^ nonce, 1_000_000 + index as u64);
    // +9677 and 11 more digits: 15 digits, the most walletd accepts.
    let base = Rng::new(seed ^ nonce).next_u64() % 100_000_000_000;
    let mut number = (base + index as u64) % 100_000_000_000;
    for _ in 0..5 {
        let body = serde_json::json!({
            "name": format!("load {nonce:x} {index}"),
            "phone": format!("+9677{number:011}"),
            "password": format!("load-password-{nonce:x}"),
        });
        let response = caller
            .call(&Request::post(
                "/v1/auth/customer/register".into(),
                None,
                body.to_string(),
            ))
            .await?;
        match response.status {
            201 => {
                let data = serde_json::from_slice::<Envelope<RegisterData>>(&response.body)
                    .map_err(|e| format!("register a customer: unexpected answer: {e}"))?
                    .data;
                let wallet = data
                    .wallet
                    .ok_or("register a customer: the answer has no primary wallet")?;
                return Ok(Wallet {
                    id: wallet.id,
                    token: data.token.into(),
                });
            }
            409 => number = rng.next_u64() % 100_000_000_000,
            _ => return Err(unexpected("register a customer", &response)),
        }
    }
    Err("register a customer: five phones in a row were taken".into())
}

/// Reads every wallet's balance with the admin token, `connections` at a time.
pub async fn read_balances(
    kind: ClientKind,
    target: &Target,
    admin: &Arc<str>,
    ids: &[u64],
    connections: usize,
    timeout: Duration,
) -> Result<Vec<Balance>, String> {
    let connections = connections.clamp(1, ids.len().max(1));
    let mut tasks = Vec::with_capacity(connections);
    for worker in 0..connections {
        let mine: Vec<(usize, u64)> = ids
            .iter()
            .copied()
            .enumerate()
            .skip(worker)
            .step_by(connections)
            .collect();
        let mut caller = Caller::new(kind, target.clone(), timeout);
        let admin = admin.clone();
        tasks.push(tokio::spawn(async move {
            let mut read = Vec::with_capacity(mine.len());
            for (index, id) in mine {
                let request =
                    Request::get(format!("/v1/wallets/{id}/balance"), Some(admin.clone()));
                let response = caller.call(&request).await?;
                if response.status != 200 {
                    return Err(unexpected(
                        &format!("read wallet {id}'s balance"),
                        &response,
                    ));
                }
                let balance = parse_balance(&response.body).ok_or_else(|| {
                    format!(
                        "read wallet {id}'s balance: unexpected answer {}",
                        String::from_utf8_lossy(&response.body)
                    )
                })?;
                read.push((index, balance));
            }
            Ok::<_, String>(read)
        }));
    }
    let mut balances = vec![Balance::default(); ids.len()];
    for task in tasks {
        for (index, balance) in task
            .await
            .map_err(|e| format!("a read-back task failed: {e}"))??
        {
            if let Some(slot) = balances.get_mut(index) {
                *slot = balance;
            }
        }
    }
    Ok(balances)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn balances_parse_exactly() {
        let body = br#"{"status":true,"data":{"wallet_id":3,"currency_code":"YER","balance":10000.10,"available_balance":9990.10,"held_balance":10.00,"pending_balance":0.00,"as_of":"x"}}"#;
        let balance = parse_balance(body).unwrap();
        assert_eq!(
            balance,
            Balance {
                balance: 1_000_010,
                held: 1000,
                available: 999_010
            }
        );
        assert_eq!(
            error_code(br#"{"status":false,"message":"m","error":{"code":"insufficient_funds"}}"#),
            "insufficient_funds"
        );
        assert_eq!(error_code(b"nope"), "-");
    }
}
