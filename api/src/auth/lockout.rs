//! Failed logins per account (decisions.md §2): after [`FAILURES_MAX`] failures within
//! [`WINDOW`], that account's logins answer 429 with `Retry-After` until the oldest failure
//! leaves the window, the right password included (otherwise the lock would tell a guesser
//! when it guessed right).
//!
//! The per-address `pay_api` class bounds how fast one client guesses; this bounds how fast
//! many clients together guess one account. Accounts are keyed by what the login names (phone,
//! or business and email/phone), known or not, so the lock does not reveal which accounts exist.
//! Memory: at most [`FAILURES_MAX`] instants per account with a recent failure; idle accounts are
//! swept with the rate limiter, and the table is bounded by [`ACCOUNTS_MAX`].

use std::collections::VecDeque;
use std::time::{Duration, Instant};

use dashmap::DashMap;

/// Failures an account may have in [`WINDOW`] before its logins are refused.
pub const FAILURES_MAX: usize = 10;
/// The window failures are counted over.
pub const WINDOW: Duration = Duration::from_secs(15 * 60);
/// Most accounts tracked; beyond it the idle ones are swept, then the oldest entries dropped.
pub const ACCOUNTS_MAX: usize = 100_000;

/// Recent failed logins per account.
#[derive(Default)]
pub struct FailedLogins {
    accounts: DashMap<String, VecDeque<Instant>>,
}

impl FailedLogins {
    pub fn new() -> Self {
        FailedLogins::default()
    }

    /// `Some(seconds)` until the account may log in again when it is locked, else `None`.
    pub fn locked_for(&self, account: &str, now: Instant) -> Option<u64> {
        let mut failures = self.accounts.get_mut(account)?;
        while failures
            .front()
            .is_some_and(|&t| now.saturating_duration_since(t) >= WINDOW)
        {
            failures.pop_front();
        }
        if failures.len() < FAILURES_MAX {
            return None;
        }
        let oldest = *failures.front()?;
        let free_at = oldest + WINDOW;
        Some((free_at.saturating_duration_since(now).as_secs_f64().ceil() as u64).max(1))
    }

    /// Counts a failed login of `account` at `now`.
    pub fn record_failure(&self, account: &str, now: Instant) {
        if self.accounts.len() >= ACCOUNTS_MAX && !self.accounts.contains_key(account) {
            self.sweep(now);
            if self.accounts.len() >= ACCOUNTS_MAX {
                // Still full of live entries: forget one to stay bounded.
                let victim = self.accounts.iter().next().map(|e| e.key().clone());
                if let Some(victim) = victim {
                    self.accounts.remove(&victim);
                }
            }
        }
        let mut failures = self.accounts.entry(account.to_owned()).or_default();
        failures.push_back(now);
        while failures.len() > FAILURES_MAX {
            failures.pop_front();
        }
    }

    /// Forgets accounts whose failures have all left the window.
    pub fn sweep(&self, now: Instant) {
        self.accounts.retain(|_, failures| {
            failures
                .back()
                .is_some_and(|&t| now.saturating_duration_since(t) < WINDOW)
        });
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn ten_failures_lock_the_account_until_the_oldest_leaves_the_window() {
        let logins = FailedLogins::new();
        let start = Instant::now();
        for i in 0..FAILURES_MAX as u64 {
            assert_eq!(logins.locked_for("customer:+1", start), None, "{i}");
            logins.record_failure("customer:+1", start + Duration::from_secs(i));
        }
        let at = start + Duration::from_secs(20);
        assert_eq!(logins.locked_for("customer:+1", at), Some(15 * 60 - 20));
        assert_eq!(logins.locked_for("customer:+2", at), None);
        assert_eq!(logins.locked_for("customer:+1", start + WINDOW), None);
        logins.sweep(start + WINDOW + Duration::from_secs(10));
        assert!(logins.accounts.is_empty());
    }
}
