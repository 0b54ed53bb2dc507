//! The setup phase: log in the platform admin, register customers (each gets a primary YER
//! wallet and a token), fund every wallet, create the merchant when the mix has payments, and
//! read the balances back as the audit's start. Also the read-back the audit uses at the end,
//! and the logins it repeats when a restarted server answers 401.

use std::sync::Arc;
use std::time::Duration;

use serde::Deserialize;
use serde_json::value::RawValue;

use super::args::{ClientKind, LoadArgs};
use super::audit::Balance;
use super::client::{connect, Conn, Request, Response, Target};
use super::mix::{Op, Rng};
use super::{cents_text, parse_cents};

/// A customer's wallet, the customer's token and the phone the customer logs in with.
#[derive(Clone, Debug)]
pub struct Wallet {
    pub id: u64,
    pub token: Arc<str>,
    pub phone: String,
}

/// The run's merchant (mixes with payments): a business with `is_merchant: true`, one employee
/// of it with the roles operator, finance, merchant and merchant_finance, and its YER wallet.
#[derive(Clone, Debug)]
pub struct Merchant {
    pub business_id: u64,
    pub wallet_id: u64,
    pub email: String,
    pub password: String,
    /// The employee's token: creates the wallet, refunds payments, reads the wallet back.
    pub token: Arc<str>,
}

/// What the run needs from the setup.
pub struct Setup {
    pub admin: Arc<str>,
    pub wallets: Vec<Wallet>,
    pub merchant: Option<Merchant>,
    /// Balances after funding, in the order of [`Setup::audited`].
    pub base: Vec<Balance>,
    /// Distinguishes this run's phones and idempotency keys from earlier runs'.
    pub nonce: u64,
    /// When the setup's first token was issued and how long walletd said it is accepted
    /// (`None` for the baseline, whose tokens never expire): every other token of the setup was
    /// issued later, so all are good until `issued + lifetime`.
    pub tokens: Option<Issued>,
}

/// When tokens were issued, and for how long walletd accepts them.
#[derive(Clone, Copy, Debug)]
pub struct Issued {
    pub at: std::time::Instant,
    pub lifetime: Duration,
}

impl Issued {
    /// Seconds of `expires_in` as a lifetime (at least one second).
    pub fn new(at: std::time::Instant, expires_in: i64) -> Issued {
        Issued {
            at,
            lifetime: Duration::from_secs(expires_in.max(1) as u64),
        }
    }
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
                    phone: String::new(),
                })
                .collect(),
            merchant: None,
            base: Vec::new(),
            nonce,
            tokens: None,
        }
    }

    /// The wallets the audit reads, each with the token that may read it: the customers' (with
    /// the platform admin's token) in order, then the merchant's (with its employee's token, as
    /// the platform admin may not read another business's wallet). The merchant's index in the
    /// audit model is therefore `wallets.len()`.
    pub fn audited(&self) -> Vec<(u64, Arc<str>)> {
        let mut audited: Vec<(u64, Arc<str>)> = self
            .wallets
            .iter()
            .map(|w| (w.id, self.admin.clone()))
            .collect();
        if let Some(merchant) = &self.merchant {
            audited.push((merchant.wallet_id, merchant.token.clone()));
        }
        audited
    }
}

#[derive(Deserialize)]
struct Envelope<T> {
    data: T,
}

/// A token and how long walletd says it is accepted.
pub struct Login {
    pub token: Arc<str>,
    /// `expires_in`, in seconds.
    pub expires_in: i64,
}

#[derive(Deserialize)]
struct LoginData {
    token: String,
    expires_in: i64,
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
struct Created {
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
    /// The payment envelope of a refused payment request carries the code in `data`.
    data: Option<PaymentRefusal>,
}

#[derive(Deserialize)]
struct ErrorDetail {
    code: String,
}

#[derive(Deserialize)]
struct PaymentRefusal {
    error_code: Option<String>,
}

/// The `error.code` of an error answer (`data.error_code` of a refused payment), or `-`.
pub fn error_code(body: &[u8]) -> String {
    let Ok(body) = serde_json::from_slice::<ErrorBody>(body) else {
        return "-".into();
    };
    body.error
        .map(|e| e.code)
        .or_else(|| body.data.and_then(|d| d.error_code))
        .filter(|code| !code.is_empty())
        .unwrap_or_else(|| "-".into())
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

/// Logs in an employee.
async fn login_employee(
    caller: &mut Caller,
    business_id: u64,
    email: &str,
    password: &str,
    who: &str,
) -> Result<Login, String> {
    let body =
        serde_json::json!({"business_id": business_id, "email": email, "password": password});
    login(caller, "/v1/auth/employee/login", body, who).await
}

/// Logs in a customer of this run with the phone it registered.
pub async fn login_customer(caller: &mut Caller, phone: &str, nonce: u64) -> Result<Login, String> {
    let body = serde_json::json!({"phone": phone, "password": customer_password(nonce)});
    login(caller, "/v1/auth/customer/login", body, "a customer").await
}

/// The password of every customer this run registers.
fn customer_password(nonce: u64) -> String {
    format!("load-password-{nonce:x}")
}

async fn login(
    caller: &mut Caller,
    path: &str,
    body: serde_json::Value,
    who: &str,
) -> Result<Login, String> {
    let response = caller
        .call(&Request::post(path.into(), None, body.to_string()))
        .await?;
    if response.status != 200 {
        return Err(unexpected(&format!("log in {who}"), &response));
    }
    let data = serde_json::from_slice::<Envelope<LoginData>>(&response.body)
        .map_err(|e| format!("log in {who}: unexpected answer: {e}"))?
        .data;
    Ok(Login {
        token: data.token.into(),
        expires_in: data.expires_in,
    })
}

/// Logs in the platform admin (business 1) with `--admin-email` and the admin password.
pub async fn login_admin(args: &LoadArgs, caller: &mut Caller) -> Result<Login, String> {
    let password = args.admin_password.clone().ok_or(
        "no admin password: set WALLETD_ADMIN_PASSWORD (the one walletd was started with) or pass --admin-password",
    )?;
    login_employee(
        caller,
        1,
        &args.admin_email,
        &password,
        "the platform admin",
    )
    .await
}

/// Logs the merchant's employee in again (a restarted server that answers 401).
pub async fn login_merchant(merchant: &Merchant, caller: &mut Caller) -> Result<Login, String> {
    login_employee(
        caller,
        merchant.business_id,
        &merchant.email,
        &merchant.password,
        "the merchant's employee",
    )
    .await
}

/// A POST that must answer 201 `{data: {id}}`; returns the id.
async fn create(
    caller: &mut Caller,
    what: &str,
    path: &str,
    token: &Arc<str>,
    body: serde_json::Value,
) -> Result<u64, String> {
    let response = caller
        .call(&Request::post(
            path.into(),
            Some(token.clone()),
            body.to_string(),
        ))
        .await?;
    if response.status != 201 {
        return Err(unexpected(what, &response));
    }
    Ok(serde_json::from_slice::<Envelope<Created>>(&response.body)
        .map_err(|e| format!("{what}: unexpected answer: {e}"))?
        .data
        .id)
}

/// Creates the run's merchant through the platform admin: the business, its employee (roles
/// operator, finance, merchant, merchant_finance), the employee's login, the YER wallet.
pub async fn prepare_merchant(
    caller: &mut Caller,
    admin: &Arc<str>,
    nonce: u64,
) -> Result<Merchant, String> {
    let business_id = create(
        caller,
        "create the merchant business",
        "/v1/admin/businesses",
        admin,
        serde_json::json!({"name": format!("walletd-load merchant {nonce:x}"), "is_merchant": true}),
    )
    .await?;
    let email = format!("load-{nonce:x}@merchant.example");
    let password = format!("merchant-password-{nonce:x}");
    create(
        caller,
        "create the merchant's employee",
        "/v1/admin/employees",
        admin,
        serde_json::json!({
            "business_id": business_id,
            "name": format!("load merchant {nonce:x}"),
            "email": email,
            "password": password,
            "roles": ["operator", "finance", "merchant", "merchant_finance"],
        }),
    )
    .await?;
    let token = login_employee(
        caller,
        business_id,
        &email,
        &password,
        "the merchant's employee",
    )
    .await?
    .token;
    let wallet_id = create(
        caller,
        "create the merchant's YER wallet",
        "/v1/merchant-wallets",
        &token,
        serde_json::json!({"merchant_id": business_id, "currency_code": "YER"}),
    )
    .await?;
    eprintln!("setup: merchant business {business_id}, its YER wallet {wallet_id}");
    Ok(Merchant {
        business_id,
        wallet_id,
        email,
        password,
        token,
    })
}

/// Logs in the admin, registers and funds `args.wallets` customers, creates the merchant (mixes
/// with payments), reads their balances.
pub async fn prepare(
    args: &LoadArgs,
    target: &Target,
    seed: u64,
    nonce: u64,
    timeout: Duration,
) -> Result<Setup, String> {
    if args.wallets < 2 {
        return Err("--wallets must be at least 2 (transfers need two wallets)".into());
    }
    let mut caller = Caller::new(args.client, target.clone(), timeout);
    let issued = std::time::Instant::now();
    let login = login_admin(args, &mut caller).await?;
    let admin = login.token;
    let merchant = if args.mix.has(Op::Payment) {
        Some(prepare_merchant(&mut caller, &admin, nonce).await?)
    } else {
        None
    };

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
    let mut setup = Setup {
        admin,
        wallets,
        merchant,
        base: Vec::new(),
        nonce,
        tokens: Some(Issued::new(issued, login.expires_in)),
    };
    setup.base = read_balances(args.client, target, &setup.audited(), workers, timeout)
        .await
        .map_err(|failure| failure.message)?;
    Ok(setup)
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
        let phone = format!("+9677{number:011}");
        let body = serde_json::json!({
            "name": format!("load {nonce:x} {index}"),
            "phone": phone,
            "password": customer_password(nonce),
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
                    phone,
                });
            }
            409 => number = rng.next_u64() % 100_000_000_000,
            _ => return Err(unexpected("register a customer", &response)),
        }
    }
    Err("register a customer: five phones in a row were taken".into())
}

/// Why a read-back failed.
#[derive(Clone, Debug)]
pub struct ReadFailure {
    /// A 401: the token is no longer accepted (log in again and retry).
    pub unauthorized: bool,
    /// No answer at all (the server is down or restarting: wait for it and retry).
    pub no_answer: bool,
    pub message: String,
}

impl ReadFailure {
    fn other(message: String) -> ReadFailure {
        ReadFailure {
            unauthorized: false,
            no_answer: false,
            message,
        }
    }
}

/// Reads every wallet's balance with the token given beside it, `connections` at a time.
pub async fn read_balances(
    kind: ClientKind,
    target: &Target,
    wallets: &[(u64, Arc<str>)],
    connections: usize,
    timeout: Duration,
) -> Result<Vec<Balance>, ReadFailure> {
    let connections = connections.clamp(1, wallets.len().max(1));
    let mut tasks = Vec::with_capacity(connections);
    for worker in 0..connections {
        let mine: Vec<(usize, (u64, Arc<str>))> = wallets
            .iter()
            .cloned()
            .enumerate()
            .skip(worker)
            .step_by(connections)
            .collect();
        let mut caller = Caller::new(kind, target.clone(), timeout);
        tasks.push(tokio::spawn(async move {
            let mut read = Vec::with_capacity(mine.len());
            for (index, (id, token)) in mine {
                let request = Request::get(format!("/v1/wallets/{id}/balance"), Some(token));
                let response = caller.call(&request).await.map_err(|message| ReadFailure {
                    unauthorized: false,
                    no_answer: true,
                    message,
                })?;
                if response.status != 200 {
                    return Err(ReadFailure {
                        unauthorized: response.status == 401,
                        no_answer: false,
                        message: unexpected(&format!("read wallet {id}'s balance"), &response),
                    });
                }
                let balance = parse_balance(&response.body).ok_or_else(|| {
                    ReadFailure::other(format!(
                        "read wallet {id}'s balance: unexpected answer {}",
                        String::from_utf8_lossy(&response.body)
                    ))
                })?;
                read.push((index, balance));
            }
            Ok::<_, ReadFailure>(read)
        }));
    }
    let mut balances = vec![Balance::default(); wallets.len()];
    for task in tasks {
        for (index, balance) in task
            .await
            .map_err(|e| ReadFailure::other(format!("a read-back task failed: {e}")))??
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
        assert_eq!(
            error_code(
                br#"{"success":false,"data":{"success":false,"status":"refused","error_code":"refund_exceeds_original"}}"#
            ),
            "refund_exceeds_original"
        );
        assert_eq!(
            error_code(br#"{"success":true,"data":{"status":"completed","error_code":""}}"#),
            "-"
        );
    }
}
