//! A real `walletd serve` process for black-box tests over loopback HTTP.
//!
//! # Finding the binary
//!
//! `env!("CARGO_BIN_EXE_walletd")` only exists in tests of the package that owns the binary
//! (`api`), and this package's tests are in `walletd-tests`. So the harness finds the binary the
//! way cargo lays out a target directory: the running test executable is
//! `<target>/debug/deps/<test>-<hash>`, so `walletd` is `<target>/debug/walletd`. Once per test
//! process it runs `cargo build --workspace --bin walletd` against that target directory: a
//! no-op when the binary is fresh, so a change in `api`, `engine` or `wal` is never tested stale.
//! `--workspace` resolves features as a plain `cargo build` does (and, dev-dependencies aside,
//! `cargo test --workspace`), so the build shares their artifacts instead of compiling a second
//! feature set of hyper and friends, as `-p api` would. When that build fails (someone's
//! half-edited tree) but a binary is there, the harness says so on stderr and tests that binary.
//! `WALLETD_BIN=/path/to/walletd` skips all of this.
//!
//! Each black-box test file shares one server among its tests where they do not interfere (a
//! `static OnceLock<Server>`), with its own customers per test; tests that restart or kill a
//! server, or turn rate limits on, start their own.
//!
//! # Starting and stopping
//!
//! [`Server::start`] runs `walletd serve --listen 127.0.0.1:0 --data-dir <fresh temp dir>` with a
//! fast Argon2 (64 KiB), a known admin password and JWT secret, warn-level logs and rate limits off
//! (unless [`Options::rate_limits`]), then reads stdout until the `walletd listening on
//! http://127.0.0.1:PORT` line: the port is known the moment the server accepts, with no sleeps.
//! [`Server::kill_hard`] is SIGKILL (a crash), [`Server::stop`] SIGTERM (a graceful stop; returns
//! the exit status), [`Server::restart`] starts again on the same data dir.
//!
//! A server kept in a `static` is never dropped, so every server also gets a *guardian*: a `sh`
//! that blocks reading a pipe held by the test process and SIGKILLs the server when that pipe
//! closes, which the kernel does whenever the test process ends, even by a panic or abort; it
//! then removes the data dir too. No server outlives its test run.

use std::io::{BufRead, BufReader};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::process::{Child, ChildStdin, Command, ExitStatus, Stdio};
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{mpsc, Arc, Mutex, OnceLock};
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use serde_json::{json, Value};

use rust_decimal::Decimal;

use crate::http::{self, Response};

/// Password of the platform admin every test server creates on first start.
pub const ADMIN_PASSWORD: &str = "admin-password-for-tests";
/// Email of that admin (the server's default).
pub const ADMIN_EMAIL: &str = "admin@walletd.local";
/// The HS256 key every test server signs tokens with (`WALLETD_JWT_SECRET`).
pub const JWT_SECRET: &str = "walletd-test-jwt-secret-0123456789abcdef";
/// Password of every customer and employee the helpers create.
pub const PASSWORD: &str = "correct horse battery";
/// The platform business (customer wallets belong to it).
pub const PLATFORM_BUSINESS_ID: u64 = 1;
/// The payment fee schedule every test server runs with (`WALLETD_FEE_SCHEDULE`,
/// docs/commerce-api.md): YER 2.5 % + 1.00, USD 2.9 % + 0.30, SAR free.
pub const FEE_SCHEDULE: &str = "YER:2.5+1,USD:2.9+0.30,SAR:0";
/// The provider webhook HMAC key every test server runs with (`WALLETD_WEBHOOK_SECRET`).
pub const WEBHOOK_SECRET: &str = "test-webhook-secret-0123456789";
/// How long a server may take to print its listening line.
const START_TIMEOUT: Duration = Duration::from_secs(60);

/// How to start a server.
#[derive(Debug, Clone, Default)]
pub struct Options {
    /// `WALLETD_RATE_LIMITS=on` instead of `off`.
    pub rate_limits: bool,
    /// `WALLETD_SHARDS` (fixed for the life of a data dir); `None` is the server's default, 1.
    pub shards: Option<u32>,
    /// Extra environment, set after (so over) the defaults above, e.g.
    /// `("WALLETD_CONNECTIONS_PER_ADDRESS", "8")`.
    pub env: Vec<(&'static str, String)>,
    /// Start under this umask (through `sh -c 'umask ..; exec walletd ..'`).
    pub umask: Option<u32>,
    /// No `WALLETD_JWT_SECRET` and `WALLETD_WEBHOOK_SECRET`: the server keeps its keys in the
    /// data dir (`jwt-secret`, `webhook-secret`).
    pub kept_keys: bool,
}

/// The `walletd` binary (built or found once per process; see the module docs).
pub fn walletd_binary() -> PathBuf {
    static BINARY: OnceLock<PathBuf> = OnceLock::new();
    BINARY.get_or_init(locate_binary).clone()
}

fn locate_binary() -> PathBuf {
    if let Some(given) = std::env::var_os("WALLETD_BIN") {
        return PathBuf::from(given);
    }
    let exe = std::env::current_exe().expect("the test executable's path");
    // <target>/debug/deps/<test>-<hash>
    let profile_dir = exe
        .parent()
        .and_then(Path::parent)
        .expect("the test executable lives in <target>/<profile>/deps");
    let target_dir = profile_dir
        .parent()
        .expect("the profile directory lives in the target directory");
    let binary = profile_dir.join("walletd");
    let workspace = Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .expect("the tests crate lives in the workspace");
    let cargo = std::env::var_os("CARGO").unwrap_or_else(|| "cargo".into());
    let built = Command::new(cargo)
        .args(["build", "--quiet", "--workspace", "--bin", "walletd"])
        .current_dir(workspace)
        .env("CARGO_TARGET_DIR", target_dir)
        .stdin(Stdio::null())
        .output();
    match built {
        Ok(output) if output.status.success() => {}
        Ok(output) if binary.exists() => eprintln!(
            "walletd-tests: `cargo build --workspace --bin walletd` failed; testing the existing {}\n{}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
        Ok(output) => panic!(
            "`cargo build --workspace --bin walletd` failed and there is no {}:\n{}",
            binary.display(),
            String::from_utf8_lossy(&output.stderr)
        ),
        Err(error) if binary.exists() => eprintln!(
            "walletd-tests: could not run cargo ({error}); testing the existing {}",
            binary.display()
        ),
        Err(error) => panic!("could not run cargo to build walletd: {error}"),
    }
    assert!(binary.exists(), "{} was not built", binary.display());
    binary
}

/// A directory under the system temp dir, removed on drop.
#[derive(Debug)]
pub struct TempDir {
    path: PathBuf,
}

impl TempDir {
    pub fn new(label: &str) -> TempDir {
        static NEXT: AtomicU64 = AtomicU64::new(0);
        let nanos = SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(0, |d| d.subsec_nanos());
        let path = std::env::temp_dir().join(format!(
            "walletd-{label}-{}-{}-{nanos}",
            std::process::id(),
            NEXT.fetch_add(1, Ordering::Relaxed)
        ));
        std::fs::create_dir_all(&path).expect("create a temp dir");
        TempDir { path }
    }

    pub fn path(&self) -> &Path {
        &self.path
    }
}

impl Drop for TempDir {
    fn drop(&mut self) {
        let _ = std::fs::remove_dir_all(&self.path);
    }
}

/// Unique per process: phones, emails and keys the helpers make up.
pub fn unique() -> u64 {
    static NEXT: AtomicU64 = AtomicU64::new(1);
    NEXT.fetch_add(1, Ordering::Relaxed)
}

/// A registered customer.
#[derive(Debug, Clone)]
pub struct Customer {
    pub id: u64,
    pub phone: String,
    pub token: String,
    /// The primary YER wallet created at registration.
    pub wallet_id: u64,
}

/// An employee created by the platform admin, logged in.
#[derive(Debug, Clone)]
pub struct Employee {
    pub id: u64,
    pub business_id: u64,
    pub email: String,
    pub token: String,
}

/// A running (or stopped) `walletd serve` on its own data directory.
pub struct Server {
    options: Options,
    data: TempDir,
    child: Option<Child>,
    guardian: Option<(Child, ChildStdin)>,
    address: SocketAddr,
    /// Everything the server wrote on stderr so far (for failure messages).
    stderr: Arc<Mutex<String>>,
    admin_token: Mutex<Option<String>>,
}

impl Server {
    /// A server with rate limits off, on a fresh data directory.
    pub fn start() -> Server {
        Server::start_with(Options::default())
    }

    pub fn start_with(options: Options) -> Server {
        let data = TempDir::new("data");
        let mut server = Server {
            options,
            data,
            child: None,
            guardian: None,
            address: SocketAddr::from(([127, 0, 0, 1], 0)),
            stderr: Arc::new(Mutex::new(String::new())),
            admin_token: Mutex::new(None),
        };
        server.launch();
        server
    }

    /// The command line of `walletd serve` on this server's data dir (not started).
    pub fn serve_command(&self) -> Command {
        let mut command = match self.options.umask {
            None => Command::new(walletd_binary()),
            Some(mask) => {
                let mut wrapped = Command::new("sh");
                wrapped
                    .arg("-c")
                    .arg(format!("umask {mask:03o}; exec \"$0\" \"$@\""))
                    .arg(walletd_binary());
                wrapped
            }
        };
        command
            .args(["serve", "--listen", "127.0.0.1:0", "--data-dir"])
            .arg(self.data.path())
            .env("WALLETD_PASSWORD_HASH_MEMORY_KIB", "64")
            .env("WALLETD_ADMIN_PASSWORD", ADMIN_PASSWORD)
            .env("WALLETD_JWT_SECRET", JWT_SECRET)
            .env("WALLETD_LOG", "warn")
            .env("WALLETD_FEE_SCHEDULE", FEE_SCHEDULE)
            .env("WALLETD_WEBHOOK_SECRET", WEBHOOK_SECRET)
            .env(
                "WALLETD_RATE_LIMITS",
                if self.options.rate_limits {
                    "on"
                } else {
                    "off"
                },
            )
            .env_remove("WALLETD_LISTEN")
            .env_remove("WALLETD_DATA_DIR")
            .env_remove("WALLETD_SHARDS")
            .env_remove("WALLETD_ADMIN_EMAIL")
            .env_remove("WALLETD_FSYNC")
            .stdin(Stdio::null());
        if let Some(shards) = self.options.shards {
            command.env("WALLETD_SHARDS", shards.to_string());
        }
        if self.options.kept_keys {
            command
                .env_remove("WALLETD_JWT_SECRET")
                .env_remove("WALLETD_WEBHOOK_SECRET");
        }
        for (name, value) in &self.options.env {
            command.env(name, value);
        }
        command
    }

    /// Runs `command` (a `walletd serve` expected to refuse to start) to its exit, killing it and
    /// failing the test if it is still running after `limit` (it started when it should not have).
    pub fn run_to_exit(command: &mut Command, limit: std::time::Duration) -> std::process::Output {
        let child = command
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn walletd");
        let pid = child.id();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let _ = done.send(child.wait_with_output());
        });
        match finished.recv_timeout(limit) {
            Ok(output) => output.expect("wait for walletd"),
            Err(_) => {
                let _ = Command::new("kill")
                    .args(["-KILL", &pid.to_string()])
                    .status();
                panic!("walletd kept running where it should have refused to start");
            }
        }
    }

    /// Runs an offline `walletd` tool (`replay`, `wal inspect`, `snapshot`) on this server's data
    /// dir with its shard count, to completion; returns status, stdout and stderr.
    pub fn run_tool(&self, args: &[&str]) -> (ExitStatus, String, String) {
        let mut command = Command::new(walletd_binary());
        command
            .args(args)
            .arg("--data-dir")
            .arg(self.data.path())
            .env_remove("WALLETD_DATA_DIR")
            .env_remove("WALLETD_SHARDS")
            .stdin(Stdio::null());
        if let Some(shards) = self.options.shards {
            command.env("WALLETD_SHARDS", shards.to_string());
        }
        let output = command.output().expect("run walletd");
        (
            output.status,
            String::from_utf8_lossy(&output.stdout).into_owned(),
            String::from_utf8_lossy(&output.stderr).into_owned(),
        )
    }

    fn launch(&mut self) {
        assert!(self.child.is_none(), "the server is already running");
        let mut child = self
            .serve_command()
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .expect("spawn walletd serve");
        let stdout = child.stdout.take().expect("piped stdout");
        let stderr = child.stderr.take().expect("piped stderr");
        self.guardian = Some(guardian(child.id(), self.data.path()));
        {
            let log = self.stderr.clone();
            std::thread::spawn(move || {
                let mut reader = BufReader::new(stderr);
                let mut line = String::new();
                while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                    if let Ok(mut log) = log.lock() {
                        log.push_str(&line);
                    }
                    line.clear();
                }
            });
        }
        // Stdout: report the listening line, then keep draining so the pipe never fills.
        let (found, listening) = mpsc::channel();
        std::thread::spawn(move || {
            let mut reader = BufReader::new(stdout);
            let mut line = String::new();
            let mut found = Some(found);
            while matches!(reader.read_line(&mut line), Ok(n) if n > 0) {
                if let Some(rest) = line.trim().strip_prefix("walletd listening on http://") {
                    if let Some(found) = found.take() {
                        let _ = found.send(rest.to_owned());
                    }
                }
                line.clear();
            }
        });
        let address = match listening.recv_timeout(START_TIMEOUT) {
            Ok(address) => address,
            Err(_) => {
                let status = child.try_wait().ok().flatten();
                let _ = child.kill();
                let _ = child.wait();
                panic!(
                    "walletd did not print its listening line (exit: {status:?}); stderr:\n{}",
                    self.stderr_text()
                );
            }
        };
        self.address = address
            .parse()
            .unwrap_or_else(|_| panic!("bad listening address {address:?}"));
        self.child = Some(child);
    }

    /// The server's address.
    pub fn address(&self) -> SocketAddr {
        self.address
    }

    /// The data directory (kept across restarts).
    pub fn data_dir(&self) -> &Path {
        self.data.path()
    }

    /// What the server printed on stderr so far.
    pub fn stderr_text(&self) -> String {
        self.stderr.lock().map(|s| s.clone()).unwrap_or_default()
    }

    /// The server's process id, while running.
    pub fn pid(&self) -> Option<u32> {
        self.child.as_ref().map(Child::id)
    }

    fn disarm_guardian(&mut self) {
        if let Some((mut guardian, stdin)) = self.guardian.take() {
            let _ = guardian.kill();
            let _ = guardian.wait();
            drop(stdin);
        }
    }

    /// SIGKILL: a crash. Waits for the process to be gone.
    pub fn kill_hard(&mut self) {
        self.disarm_guardian();
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }

    /// SIGTERM: a graceful stop. Returns the exit status.
    pub fn stop(&mut self) -> ExitStatus {
        self.disarm_guardian();
        let child = self.child.take().expect("the server is running");
        let sent = Command::new("kill")
            .args(["-TERM", &child.id().to_string()])
            .status()
            .expect("run kill -TERM");
        assert!(sent.success(), "kill -TERM failed");
        self.wait_for(child, "SIGTERM")
    }

    /// Waits for the server to exit by itself (a fail-stop), up to the start timeout; returns
    /// the exit status.
    pub fn wait_for_exit(&mut self) -> ExitStatus {
        self.disarm_guardian();
        let child = self.child.take().expect("the server is running");
        self.wait_for(child, "its failure")
    }

    /// Sends `signal` (`USR1`, `TERM`, ...) to the running server.
    pub fn signal(&self, signal: &str) {
        let pid = self.pid().expect("the server is running");
        let sent = Command::new("kill")
            .args([format!("-{signal}"), pid.to_string()])
            .status()
            .expect("run kill");
        assert!(sent.success(), "kill -{signal} failed");
    }

    fn wait_for(&self, mut child: Child, after: &str) -> ExitStatus {
        let (done, finished) = mpsc::channel();
        let pid = child.id();
        let waiter = std::thread::spawn(move || {
            let status = child.wait();
            let _ = done.send(());
            status
        });
        if finished.recv_timeout(START_TIMEOUT).is_err() {
            let _ = Command::new("kill")
                .args(["-KILL", &pid.to_string()])
                .status();
            panic!(
                "walletd did not stop within {START_TIMEOUT:?} of {after}; stderr:\n{}",
                self.stderr_text()
            );
        }
        waiter
            .join()
            .expect("the waiter thread")
            .expect("wait for walletd")
    }

    /// Leaves the environment variable `name` out of later starts (e.g. a fault hook, before the
    /// restart that recovers from it).
    pub fn remove_env(&mut self, name: &str) {
        self.options.env.retain(|(set, _)| *set != name);
    }

    /// Starts the server again on the same data dir (after [`Server::stop`] or
    /// [`Server::kill_hard`]), on a new port.
    pub fn restart(&mut self) {
        *self.admin_token.lock().expect("token lock") = None;
        self.launch();
    }

    /// Sends a request; panics when the server does not answer.
    pub fn request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> Response {
        self.try_request(method, path, token, headers, body)
            .unwrap_or_else(|error| {
                panic!(
                    "{method} {path}: no response ({error}); server stderr:\n{}",
                    self.stderr_text()
                )
            })
    }

    /// Sends a request; an I/O error when the server does not answer.
    pub fn try_request(
        &self,
        method: &str,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: Option<&[u8]>,
    ) -> std::io::Result<Response> {
        let authorization = token.map(|t| format!("Bearer {t}"));
        let mut all: Vec<(&str, &str)> = headers.to_vec();
        if let Some(value) = &authorization {
            all.push(("Authorization", value));
        }
        http::send(self.address, method, path, &all, body)
    }

    pub fn get(&self, path: &str, token: Option<&str>) -> Response {
        self.request("GET", path, token, &[], None)
    }

    /// POST with a JSON body given as text (so tests control the exact bytes and digits).
    pub fn post(&self, path: &str, token: Option<&str>, body: &str) -> Response {
        self.request("POST", path, token, &[], Some(body.as_bytes()))
    }

    /// POST with an `Idempotency-Key`.
    pub fn post_idempotent(&self, path: &str, token: &str, key: &str, body: &str) -> Response {
        self.request(
            "POST",
            path,
            Some(token),
            &[("Idempotency-Key", key)],
            Some(body.as_bytes()),
        )
    }

    /// POST that must answer `status`; returns the body as JSON.
    pub fn post_expect(&self, path: &str, token: Option<&str>, body: &str, status: u16) -> Value {
        let response = self.post(path, token, body);
        assert_eq!(
            response.status,
            status,
            "POST {path} {body}: {}",
            response.text()
        );
        response.json()
    }

    /// GET that must answer 200; returns the body as JSON.
    pub fn get_ok(&self, path: &str, token: &str) -> Value {
        let response = self.get(path, Some(token));
        assert_eq!(response.status, 200, "GET {path}: {}", response.text());
        response.json()
    }

    /// The platform admin's token (logged in once per server start).
    pub fn admin_token(&self) -> String {
        let mut cached = self.admin_token.lock().expect("token lock");
        if let Some(token) = cached.as_ref() {
            return token.clone();
        }
        let body = json!({"business_id": PLATFORM_BUSINESS_ID, "email": ADMIN_EMAIL, "password": ADMIN_PASSWORD});
        let data = self.post_expect("/v1/auth/employee/login", None, &body.to_string(), 200);
        let token = data["data"]["token"]
            .as_str()
            .expect("admin token")
            .to_owned();
        *cached = Some(token.clone());
        token
    }

    /// Registers a new customer with a unique phone; returns it logged in.
    pub fn register_customer(&self) -> Customer {
        let phone = format!("+9677{:08}", unique() % 100_000_000);
        let body = json!({"name": "Test Customer", "phone": phone, "password": PASSWORD});
        let data = self.post_expect("/v1/auth/customer/register", None, &body.to_string(), 201);
        Customer {
            id: data["data"]["customer"]["id"]
                .as_u64()
                .expect("customer id"),
            phone,
            token: data["data"]["token"]
                .as_str()
                .expect("customer token")
                .to_owned(),
            wallet_id: data["data"]["wallet"]["id"].as_u64().expect("wallet id"),
        }
    }

    /// Creates a business (as the platform admin); returns its id.
    pub fn create_business(&self, is_merchant: bool) -> u64 {
        let body = json!({"name": format!("Business {}", unique()), "is_merchant": is_merchant});
        let data = self.post_expect(
            "/v1/admin/businesses",
            Some(&self.admin_token()),
            &body.to_string(),
            201,
        );
        data["data"]["id"].as_u64().expect("business id")
    }

    /// Creates an employee of `business_id` with `roles` (as the platform admin) and logs in.
    pub fn create_employee(&self, business_id: u64, roles: &[&str]) -> Employee {
        let email = format!("employee{}@walletd.test", unique());
        let body = json!({
            "business_id": business_id,
            "name": "Test Employee",
            "email": email,
            "password": PASSWORD,
            "roles": roles,
        });
        let data = self.post_expect(
            "/v1/admin/employees",
            Some(&self.admin_token()),
            &body.to_string(),
            201,
        );
        let id = data["data"]["id"].as_u64().expect("employee id");
        let login = json!({"business_id": business_id, "email": email, "password": PASSWORD});
        let data = self.post_expect("/v1/auth/employee/login", None, &login.to_string(), 200);
        Employee {
            id,
            business_id,
            email,
            token: data["data"]["token"]
                .as_str()
                .expect("employee token")
                .to_owned(),
        }
    }

    /// Deposits `amount` (JSON number text) into `wallet_id`; must answer 200.
    pub fn deposit(&self, token: &str, wallet_id: u64, amount: &str) -> Value {
        self.post_expect(
            &format!("/v1/wallets/{wallet_id}/deposit"),
            Some(token),
            &format!(r#"{{"amount": {amount}}}"#),
            200,
        )
    }

    /// The wallet as JSON (`data` of getWallet).
    pub fn wallet(&self, token: &str, wallet_id: u64) -> Value {
        self.get_ok(&format!("/v1/wallets/{wallet_id}"), token)["data"].clone()
    }

    /// The raw body of `GET /v1/wallets/{id}/balance` (for exact digits) and its JSON.
    pub fn balance(&self, token: &str, wallet_id: u64) -> (String, Value) {
        let response = self.get(&format!("/v1/wallets/{wallet_id}/balance"), Some(token));
        assert_eq!(response.status, 200, "balance: {}", response.text());
        (response.text(), response.json())
    }

    /// The exact balances of a wallet (`GET /v1/wallets/{id}/balance`, digits as sent).
    pub fn balances(&self, token: &str, wallet_id: u64) -> Balances {
        let response = self.get(&format!("/v1/wallets/{wallet_id}/balance"), Some(token));
        assert_eq!(response.status, 200, "balance: {}", response.text());
        let data = &exact_json(&response.body)["data"];
        Balances {
            balance: decimal(&data["balance"]),
            available: decimal(&data["available_balance"]),
            held: decimal(&data["held_balance"]),
            pending: decimal(&data["pending_balance"]),
        }
    }

    /// POST with extra headers (and a bearer token when given).
    pub fn post_with_headers(
        &self,
        path: &str,
        token: Option<&str>,
        headers: &[(&str, &str)],
        body: &str,
    ) -> Response {
        self.request("POST", path, token, headers, Some(body.as_bytes()))
    }

    /// `POST /v1/payments/initiate` as the payer (`token`, owner of `wallet_id`) to `merchant_id`
    /// for `amount` of `currency`; `extra` adds body fields (e.g. `, "payment_link_uuid": "…"`).
    /// Must answer 201; returns the payment's uuid (`transaction_id`).
    pub fn initiate_payment(
        &self,
        token: &str,
        wallet_id: u64,
        merchant_id: u64,
        amount: &str,
        currency: &str,
        extra: &str,
    ) -> String {
        let body = format!(
            r#"{{"merchant_id": {merchant_id}, "wallet_id": {wallet_id}, "amount": {amount}, "currency_code": "{currency}"{extra}}}"#
        );
        let response = self.post("/v1/payments/initiate", Some(token), &body);
        assert_eq!(response.status, 201, "initiate: {}", response.text());
        response.json()["data"]["transaction_id"]
            .as_str()
            .expect("transaction_id")
            .to_owned()
    }

    /// A YER payment from `payer`'s primary wallet to `merchant_id`, initiated and confirmed; must
    /// complete. Returns its uuid.
    pub fn complete_payment(
        &self,
        payer: &Customer,
        merchant_id: u64,
        amount: &str,
        extra: &str,
    ) -> String {
        let uuid = self.initiate_payment(
            &payer.token,
            payer.wallet_id,
            merchant_id,
            amount,
            "YER",
            extra,
        );
        let confirmed = self.post(
            &format!("/v1/payments/{uuid}/confirm"),
            Some(&payer.token),
            "",
        );
        assert_eq!(confirmed.status, 200, "confirm: {}", confirmed.text());
        assert_eq!(
            confirmed.json()["data"]["status"],
            json!("completed"),
            "confirm: {}",
            confirmed.text()
        );
        uuid
    }

    /// `POST /v1/merchant-wallets` as `token` (an operator of `merchant_id`); must answer 201;
    /// returns the Wallet (`data`).
    pub fn create_merchant_wallet(&self, token: &str, merchant_id: u64, currency: &str) -> Value {
        let body = json!({"merchant_id": merchant_id, "currency_code": currency});
        self.post_expect("/v1/merchant-wallets", Some(token), &body.to_string(), 201)["data"]
            .clone()
    }

    /// `POST /v1/webhooks/{provider}` with `body` signed by [`WEBHOOK_SECRET`] at `timestamp`
    /// (unix seconds).
    pub fn post_webhook_at(&self, provider: &str, body: &str, timestamp: u64) -> Response {
        let timestamp = timestamp.to_string();
        let signature = sign_webhook(WEBHOOK_SECRET, &timestamp, body);
        self.post_with_headers(
            &format!("/v1/webhooks/{provider}"),
            None,
            &[
                ("X-Webhook-Timestamp", &timestamp),
                ("X-Webhook-Signature", &signature),
            ],
            body,
        )
    }

    /// `POST /v1/webhooks/{provider}` with `body` signed by [`WEBHOOK_SECRET`] now.
    pub fn post_webhook(&self, provider: &str, body: &str) -> Response {
        self.post_webhook_at(provider, body, unix_now())
    }
}

/// A wallet's balances as exact decimals.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Balances {
    pub balance: Decimal,
    pub available: Decimal,
    pub held: Decimal,
    pub pending: Decimal,
}

/// `v1=<hex HMAC-SHA256(secret, "{timestamp}.{body}")>`: the `X-Webhook-Signature` of a provider
/// webhook (docs/commerce-api.md).
pub fn sign_webhook(secret: &str, timestamp: &str, body: &str) -> String {
    use hmac::{Hmac, Mac};
    let mut mac = Hmac::<sha2::Sha256>::new_from_slice(secret.as_bytes()).expect("any key length");
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body.as_bytes());
    let digest = mac.finalize().into_bytes();
    let mut text = String::with_capacity(3 + digest.len() * 2);
    text.push_str("v1=");
    for byte in digest {
        const HEX: &[u8; 16] = b"0123456789abcdef";
        text.push(char::from(HEX[usize::from(byte >> 4)]));
        text.push(char::from(HEX[usize::from(byte & 0x0f)]));
    }
    text
}

/// Seconds since the Unix epoch, now.
pub fn unix_now() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_secs())
}

/// A JSON body parsed with every number kept as its exact text (a JSON string), so amounts are
/// compared as decimals, never through f64. Ids come out as strings too: read them from
/// [`Response::json`].
pub fn exact_json(body: &[u8]) -> Value {
    let text = std::str::from_utf8(body).expect("a UTF-8 body");
    let mut quoted = String::with_capacity(text.len() + 64);
    let mut chars = text.chars().peekable();
    let mut in_string = false;
    while let Some(c) = chars.next() {
        if in_string {
            quoted.push(c);
            match c {
                '\\' => {
                    if let Some(escaped) = chars.next() {
                        quoted.push(escaped);
                    }
                }
                '"' => in_string = false,
                _ => {}
            }
        } else if c == '"' {
            in_string = true;
            quoted.push(c);
        } else if c == '-' || c.is_ascii_digit() {
            quoted.push('"');
            quoted.push(c);
            while let Some(&next) = chars.peek() {
                if next.is_ascii_digit() || matches!(next, '.' | 'e' | 'E' | '+' | '-') {
                    quoted.push(next);
                    chars.next();
                } else {
                    break;
                }
            }
            quoted.push('"');
        } else {
            quoted.push(c);
        }
    }
    serde_json::from_str(&quoted).unwrap_or_else(|error| panic!("not JSON ({error}): {text}"))
}

/// The exact decimal of a number read by [`exact_json`] (or of decimal text); panics on anything
/// else, so a missing or null amount fails the test.
pub fn decimal(value: &Value) -> Decimal {
    let text = value
        .as_str()
        .unwrap_or_else(|| panic!("{value} is not a number read by exact_json"));
    dec(text)
}

/// Decimal text ("96.50") as an exact decimal.
pub fn dec(text: &str) -> Decimal {
    let parsed = if text.contains(['e', 'E']) {
        Decimal::from_scientific(text)
    } else {
        text.parse::<Decimal>()
    };
    parsed.unwrap_or_else(|error| panic!("{text:?} is not a decimal: {error}"))
}

/// The UTC date `days` from today (negative: in the past) as `YYYY-MM-DD`.
pub fn utc_date(days: i64) -> String {
    let today = i64::try_from(unix_now() / 86_400).expect("days since 1970 fit in i64");
    let (year, month, day) = civil_from_days(today + days);
    format!("{year:04}-{month:02}-{day:02}")
}

/// Unix seconds of an ISO 8601 UTC timestamp (`2024-05-01T12:00:00Z`, fraction ignored).
pub fn unix_seconds(timestamp: &str) -> i64 {
    let number = |range: std::ops::Range<usize>| -> i64 {
        timestamp
            .get(range)
            .and_then(|t| t.parse().ok())
            .unwrap_or_else(|| panic!("{timestamp:?} is not an ISO 8601 timestamp"))
    };
    let days = days_from_civil(number(0..4), number(5..7), number(8..10));
    days * 86_400 + number(11..13) * 3_600 + number(14..16) * 60 + number(17..19)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (H. Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let day_of_year = (153 * (month + if month > 2 { -3 } else { 9 }) + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// The date of a day count since 1970-01-01 (inverse of [`days_from_civil`]).
fn civil_from_days(days: i64) -> (i64, i64, i64) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let day_of_era = z - era * 146_097;
    let year_of_era =
        (day_of_era - day_of_era / 1_460 + day_of_era / 36_524 - day_of_era / 146_096) / 365;
    let day_of_year = day_of_era - (365 * year_of_era + year_of_era / 4 - year_of_era / 100);
    let mp = (5 * day_of_year + 2) / 153;
    let day = day_of_year - (153 * mp + 2) / 5 + 1;
    let month = if mp < 10 { mp + 3 } else { mp - 9 };
    let year = year_of_era + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

impl Drop for Server {
    fn drop(&mut self) {
        self.kill_hard();
    }
}

/// A `sh` that, once its stdin closes (when the test process ends, however), SIGKILLs `pid`,
/// waits for it to be gone, and removes `data_dir`: a server in a `static` is never dropped.
fn guardian(pid: u32, data_dir: &Path) -> (Child, ChildStdin) {
    const SCRIPT: &str = r#"while read -r _; do :; done
kill -KILL "$0" 2>/dev/null
i=0
while kill -0 "$0" 2>/dev/null && [ "$i" -lt 100 ]; do i=$((i+1)); sleep 0.05; done
rm -rf -- "$1""#;
    let mut child = Command::new("sh")
        .arg("-c")
        .arg(SCRIPT)
        .arg(pid.to_string())
        .arg(data_dir)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .spawn()
        .expect("spawn the guardian sh");
    let stdin = child.stdin.take().expect("piped stdin");
    (child, stdin)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn dates_round_trip_through_day_counts() {
        assert_eq!(days_from_civil(1970, 1, 1), 0);
        assert_eq!(civil_from_days(0), (1970, 1, 1));
        assert_eq!(days_from_civil(2000, 3, 1), 11_017);
        assert_eq!(civil_from_days(19_782), (2024, 2, 29));
        for days in [-1, 59, 10_957, 19_723, 20_000, 40_000] {
            let (y, m, d) = civil_from_days(days);
            assert_eq!(days_from_civil(y, m, d), days);
        }
        assert_eq!(unix_seconds("2024-02-29T01:02:03.456Z"), 1_709_168_523);
    }

    #[test]
    fn exact_json_keeps_every_digit() {
        let value = exact_json(br#"{"a": 0.10, "b": [-3.50, 1e2], "c": "x\"1.5", "d": null}"#);
        assert_eq!(value["a"], json!("0.10"));
        assert_eq!(value["b"], json!(["-3.50", "1e2"]));
        assert_eq!(value["c"], json!("x\"1.5"));
        assert_eq!(decimal(&value["b"][1]), dec("100"));
    }

    #[test]
    fn webhook_signatures_are_hex_hmac_sha256() {
        // Python: hmac.new(b"Jefe", b'1700000000.{"id":"evt"}', hashlib.sha256).hexdigest()
        assert_eq!(
            sign_webhook("Jefe", "1700000000", r#"{"id":"evt"}"#),
            "v1=c4f82447b40f27f9b6a91ac37f3d661520e3a4cf665a0ee3c1c6dd8018cf2d0e"
        );
    }
}
