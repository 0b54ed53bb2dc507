//! Bearer tokens already verified, so that a request with a token seen lately costs a map lookup
//! instead of a base64 decode, an HMAC and a JSON parse.
//!
//! Bounded by tokens, and forgetful by generations rather than all at once
//! ([`engine::runtime::Forgetful`]): every half of the bound's worth of tokens remembered opens a
//! new generation, and entries of neither the new generation nor the one before are dropped
//! then. A token used again is moved into the current generation (once per generation), so a
//! token in use is never forgotten for being old; an expired one is never served and is dropped
//! at the next turn. The first version cleared the whole map at 100,000 tokens, after which
//! every token in use paid the full check again, all at once (BENCHMARKS.md, "A new wallet's
//! first records read nothing").

use engine::runtime::Forgetful;

use super::Principal;

/// Verified tokens (see the module docs).
pub struct VerifiedTokens {
    memory: Forgetful<String, Verified>,
}

#[derive(Clone)]
struct Verified {
    principal: Principal,
    expires_at: i64,
}

impl VerifiedTokens {
    /// A memory of at most about `bound` tokens.
    pub fn new(bound: usize) -> Self {
        VerifiedTokens {
            memory: Forgetful::new(bound),
        }
    }

    /// The principal of `token` if it was verified and has not expired at `now` (Unix seconds).
    pub fn get(&self, token: &str, now: i64) -> Option<Principal> {
        self.memory
            .get(token, unexpired(now), unexpired(now))
            .map(|verified| verified.principal)
    }

    /// Remembers `token` as verified for `principal` until `expires_at` (Unix seconds).
    pub fn insert(&self, token: &str, principal: Principal, expires_at: i64, now: i64) {
        self.memory.insert(
            token.to_owned(),
            Verified {
                principal,
                expires_at,
            },
            unexpired(now),
        );
    }

    /// Whether `token` is in memory at all, expired or not.
    #[cfg(test)]
    fn holds(&self, token: &str) -> bool {
        self.memory.holds(token)
    }
}

/// A token is served, and kept when a generation opens, only until it expires.
fn unexpired(now: i64) -> impl Fn(&Verified) -> bool {
    move |verified| verified.expires_at > now
}

#[cfg(test)]
mod tests {
    use super::VerifiedTokens;
    use crate::auth::{Principal, Subject};

    fn principal(id: u64) -> Principal {
        Principal {
            subject: Subject::Customer(id),
            business_id: 1,
            roles: Vec::new(),
        }
    }

    /// A used token whose move into the current generation is the count that opens the next
    /// one (and so drops its old generation) stays, with its own principal and expiry.
    #[test]
    fn a_token_moved_by_the_turn_that_drops_its_generation_stays() {
        let tokens = VerifiedTokens::new(8);
        for (n, token) in ["a", "b", "c", "d", "e", "f", "g"].iter().enumerate() {
            tokens.insert(token, principal(n as u64), 1_000, 100);
        }
        // Generation 1 holds d to g; a is generation 0. Using it is count 8: generation 2
        // opens and keeps generations 1 and 2 only.
        let principal_a = tokens.get("a", 100).expect("a is remembered");
        assert_eq!(principal_a.subject, principal(0).subject);
        assert!(tokens.holds("a"), "a stays");
        assert!(!tokens.holds("b") && !tokens.holds("c"), "b and c are gone");
        assert_eq!(
            tokens.get("a", 999).map(|p| p.subject),
            Some(principal(0).subject)
        );
        assert!(tokens.get("a", 1_000).is_none(), "its expiry came with it");
    }

    /// An expired token is never served, and the next generation drops it from memory
    /// whatever its generation.
    #[test]
    fn an_expired_token_is_not_served_and_is_dropped() {
        let tokens = VerifiedTokens::new(8);
        tokens.insert("old", principal(1), 500, 100);
        tokens.insert("new", principal(2), 5_000, 100);
        assert!(tokens.get("old", 499).is_some());
        assert!(tokens.get("old", 500).is_none(), "expired at 500");
        assert!(tokens.holds("old"), "still held until a generation opens");
        tokens.insert("x", principal(3), 5_000, 600);
        tokens.insert("y", principal(4), 5_000, 600);
        assert!(!tokens.holds("old"), "dropped when generation 1 opened");
        assert!(tokens.holds("new"));
    }
}
