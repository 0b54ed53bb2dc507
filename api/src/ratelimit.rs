//! Per-caller rate limits by class (contract part 8; decisions.md §5, §6).
//!
//! The rule is exact: a class of N per minute accepts at most N requests from one caller in *any*
//! 60-second window. A GCRA limiter (governor) allows a burst on top of its steady rate, so over
//! some 60 s windows it admits nearly 2N; hence a sliding log here: the timestamps of the last N
//! accepted requests per (caller, class). A request is accepted when fewer than N were accepted in
//! the last 60 s. Memory is bounded by N timestamps per active (caller, class), and idle entries
//! are swept.

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dashmap::DashMap;

/// The named rate classes of the contract.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum RateClass {
    /// 60 requests per minute (reads and merchant queries).
    PerMinute60,
    /// 20 requests per minute (creations and approvals).
    PerMinute20,
    /// `pay_api`: 30 per minute (login, register, payment cancel).
    PayApi,
    /// `public`: 120 per minute (health).
    Public,
    /// Provider webhooks: 300 per minute per client address (unauthenticated until the signature
    /// verifies, so keyed by address like every public route).
    Webhook,
    /// Requests that scan every shard (reports, an employee's `GET /wallets`): 30 per minute,
    /// on top of the route's own class.
    Scan,
}

impl RateClass {
    pub fn limit(self) -> u32 {
        match self {
            RateClass::PerMinute60 => 60,
            RateClass::PerMinute20 => 20,
            RateClass::PayApi => 30,
            RateClass::Public => 120,
            RateClass::Webhook => 300,
            RateClass::Scan => 30,
        }
    }

    pub fn name(self) -> &'static str {
        match self {
            RateClass::PerMinute60 => "60/min",
            RateClass::PerMinute20 => "20/min",
            RateClass::PayApi => "pay_api",
            RateClass::Public => "public",
            RateClass::Webhook => "webhook",
            RateClass::Scan => "scan",
        }
    }
}

/// The window every class counts over.
pub const WINDOW: Duration = Duration::from_secs(60);

/// The verdict for one request, with what the `RateLimit-*` headers report.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Decision {
    pub allowed: bool,
    pub limit: u32,
    pub remaining: u32,
    /// Seconds until a slot frees up (the oldest counted request leaves the window).
    pub reset_secs: u64,
}

/// Sliding-log limiter keyed by (caller, class).
#[derive(Default)]
pub struct RateLimiter {
    logs: DashMap<(String, RateClass), VecDeque<Instant>>,
}

impl RateLimiter {
    pub fn new() -> Self {
        RateLimiter::default()
    }

    /// Counts a request from `caller` in `class` at `now`, if the class has room.
    pub fn check(&self, caller: &str, class: RateClass, now: Instant) -> Decision {
        let limit = class.limit();
        let mut log = self.logs.entry((caller.to_owned(), class)).or_default();
        while log
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= WINDOW)
        {
            log.pop_front();
        }
        let reset_after = |log: &VecDeque<Instant>| {
            log.front().map_or(0, |&oldest| {
                let free_at = oldest + WINDOW;
                free_at.saturating_duration_since(now).as_secs_f64().ceil() as u64
            })
        };
        if log.len() >= limit as usize {
            return Decision {
                allowed: false,
                limit,
                remaining: 0,
                reset_secs: reset_after(&log).max(1),
            };
        }
        log.push_back(now);
        Decision {
            allowed: true,
            limit,
            remaining: limit - log.len() as u32,
            reset_secs: reset_after(&log),
        }
    }

    /// Drops logs whose every entry has left the window (call periodically).
    pub fn sweep(&self, now: Instant) {
        self.logs.retain(|_, log| {
            log.back()
                .is_some_and(|&t| now.saturating_duration_since(t) < WINDOW)
        });
    }

    /// Number of (caller, class) logs held.
    pub fn tracked(&self) -> usize {
        self.logs.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn at_most_n_in_any_sixty_second_window() {
        let limiter = RateLimiter::new();
        let start = Instant::now();
        // 20 requests spread over the first 30 s are all accepted.
        for i in 0..20 {
            let d = limiter.check(
                "c",
                RateClass::PerMinute20,
                start + Duration::from_millis(i * 1500),
            );
            assert!(d.allowed, "request {i}");
            assert_eq!(d.remaining, 19 - i as u32);
        }
        // The 21st inside the window is refused, with a reset hint.
        let refused = limiter.check("c", RateClass::PerMinute20, start + Duration::from_secs(59));
        assert!(!refused.allowed);
        assert_eq!(refused.reset_secs, 1);
        // Once the first leaves the window, exactly one slot opens.
        assert!(
            limiter
                .check("c", RateClass::PerMinute20, start + Duration::from_secs(60))
                .allowed
        );
        assert!(
            !limiter
                .check("c", RateClass::PerMinute20, start + Duration::from_secs(60))
                .allowed
        );
        // Callers and classes do not share budgets.
        assert!(
            limiter
                .check("d", RateClass::PerMinute20, start + Duration::from_secs(59))
                .allowed
        );
        assert!(
            limiter
                .check("c", RateClass::PayApi, start + Duration::from_secs(59))
                .allowed
        );
    }

    #[test]
    fn sweep_forgets_idle_callers() {
        let limiter = RateLimiter::new();
        let start = Instant::now();
        limiter.check("c", RateClass::Public, start);
        limiter.sweep(start + Duration::from_secs(61));
        assert_eq!(limiter.tracked(), 0);
    }
}
