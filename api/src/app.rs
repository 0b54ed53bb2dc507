//! Everything a request handler can reach: the engine, the token key, limiters, counters.

use std::sync::Arc;
use std::time::{Duration, Instant};

use dashmap::DashMap;
use engine::runtime::Engine;

use crate::auth::lockout::FailedLogins;
use crate::auth::password::Hasher;
use crate::auth::token::TokenKey;
use crate::auth::verified::VerifiedTokens;
use crate::auth::{Principal, Subject};
use crate::fees::FeeSchedule;
use crate::metrics::Metrics;
use crate::ratelimit::RateLimiter;
use crate::routes::Router;

/// Default of the connections one client address may hold open at once: beyond it a new
/// connection is answered 429 and closed, so one client cannot take the global slots.
pub const CONNECTIONS_PER_ADDRESS_MAX: usize = 256;
/// Default wait for a request body once its headers are in (slow-body clients): then 408.
pub const BODY_READ_TIMEOUT: Duration = Duration::from_secs(30);
/// Default time a handler may take before its client is answered 503 `timeout`.
pub const HANDLER_TIMEOUT: Duration = Duration::from_secs(30);

/// Most verified tokens remembered, about: a generation opens every half of it, and tokens used
/// in neither of the two newest are forgotten then ([`VerifiedTokens`]).
pub const VERIFIED_TOKENS_MAX: usize = 100_000;

/// Shared state of the server.
pub struct App {
    pub engine: Engine,
    pub tokens: TokenKey,
    /// Token lifetime in seconds.
    pub token_ttl_secs: i64,
    pub hasher: Hasher,
    pub limiter: RateLimiter,
    pub rate_limits: bool,
    pub router: Router,
    pub metrics: Metrics,
    /// Subjects known to exist (a token for an unknown subject is refused), filled on demand.
    pub known_subjects: DashMap<Subject, Principal>,
    /// Tokens already verified (signature, issuer, audience), with their principal and expiry:
    /// verifying costs a base64 decode, an HMAC and a JSON parse on every request otherwise.
    pub verified_tokens: VerifiedTokens,
    pub started_at: Instant,
    /// False while draining on shutdown: `/health` then answers 503.
    pub ready: std::sync::atomic::AtomicBool,
    /// Payment fees per currency (`--fee-schedule`).
    pub fees: FeeSchedule,
    /// HMAC key of provider webhooks (`--webhook-secret`).
    pub webhook_secret: Vec<u8>,
    /// Recent failed logins per account (decisions.md §2).
    pub failed_logins: FailedLogins,
    /// Connections one client address may hold open at once (`--connections-per-address`).
    pub connections_per_address: usize,
    /// Longest wait for a request body once its headers are in (`--body-read-timeout-ms`): 408.
    pub body_read_timeout: std::time::Duration,
    /// Longest a handler may take before the client is answered 503 (`--handler-timeout-ms`);
    /// the handler itself runs on to its end (a command is never cut in half).
    pub handler_timeout: std::time::Duration,
}

pub type SharedApp = Arc<App>;

impl App {
    pub fn new(
        engine: Engine,
        tokens: TokenKey,
        hasher: Hasher,
        rate_limits: bool,
    ) -> Result<Self, String> {
        Ok(App {
            engine,
            tokens,
            token_ttl_secs: crate::auth::token::LIFETIME_MAX_SECS,
            hasher,
            limiter: RateLimiter::new(),
            rate_limits,
            router: Router::new()?,
            metrics: Metrics::new(),
            known_subjects: DashMap::new(),
            verified_tokens: VerifiedTokens::new(VERIFIED_TOKENS_MAX),
            started_at: Instant::now(),
            ready: std::sync::atomic::AtomicBool::new(true),
            fees: FeeSchedule::default(),
            webhook_secret: Vec::new(),
            failed_logins: FailedLogins::new(),
            connections_per_address: CONNECTIONS_PER_ADDRESS_MAX,
            body_read_timeout: BODY_READ_TIMEOUT,
            handler_timeout: HANDLER_TIMEOUT,
        })
    }

    /// Unix seconds now, from the engine's clock.
    pub fn now_secs(&self) -> i64 {
        self.engine.clock().now_ms().div_euclid(1000)
    }

    pub fn now_ms(&self) -> i64 {
        self.engine.clock().now_ms()
    }
}
