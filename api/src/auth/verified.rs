//! Bearer tokens already verified, so that a request with a token seen lately costs a map lookup
//! instead of a base64 decode, an HMAC and a JSON parse.
//!
//! Bounded by tokens, and forgetful by generations rather than all at once: every half of the
//! bound's worth of tokens remembered opens a new generation, and entries of neither the new
//! generation nor the one before are dropped then. A token used again is moved into the current
//! generation (once per generation), so a token in use is never forgotten for being old; an
//! expired one is dropped at the next turn. The first version cleared the whole map at 100,000
//! tokens, after which every token in use paid the full check again, all at once
//! (BENCHMARKS.md, "A new wallet's first records read nothing").

use std::sync::atomic::{AtomicU64, Ordering};

use dashmap::DashMap;

use super::Principal;

/// Verified tokens (see the module docs).
pub struct VerifiedTokens {
    map: DashMap<String, Verified>,
    /// Tokens remembered or moved into a newer generation since the start: a new generation
    /// opens at each multiple of `half`.
    counted: AtomicU64,
    generation: AtomicU64,
    half: u64,
}

struct Verified {
    principal: Principal,
    expires_at: i64,
    generation: u64,
}

impl VerifiedTokens {
    /// A memory of at most about `bound` tokens.
    pub fn new(bound: usize) -> Self {
        VerifiedTokens {
            map: DashMap::new(),
            counted: AtomicU64::new(0),
            generation: AtomicU64::new(0),
            half: (bound as u64 / 2).max(1),
        }
    }

    /// The principal of `token` if it was verified and has not expired at `now` (Unix seconds).
    pub fn get(&self, token: &str, now: i64) -> Option<Principal> {
        let current = self.generation.load(Ordering::Acquire);
        let (principal, expires_at, stale) = {
            let verified = self.map.get(token)?;
            if verified.expires_at <= now {
                return None;
            }
            (
                verified.principal.clone(),
                verified.expires_at,
                verified.generation != current,
            )
        };
        if stale {
            // The turn this takes may itself drop the token: then it is remembered anew.
            let generation = self.turn(now);
            self.map
                .entry(token.to_owned())
                .and_modify(|verified| verified.generation = generation)
                .or_insert_with(|| Verified {
                    principal: principal.clone(),
                    expires_at,
                    generation,
                });
        }
        Some(principal)
    }

    /// Remembers `token` as verified for `principal` until `expires_at` (Unix seconds).
    pub fn insert(&self, token: &str, principal: Principal, expires_at: i64, now: i64) {
        let generation = self.turn(now);
        self.map.insert(
            token.to_owned(),
            Verified {
                principal,
                expires_at,
                generation,
            },
        );
    }

    /// Counts one token into the current generation, opening a new one (and dropping what is
    /// older than the one before it, or expired) at each `half`; the generation to tag it with.
    fn turn(&self, now: i64) -> u64 {
        let counted = self.counted.fetch_add(1, Ordering::AcqRel) + 1;
        if !counted.is_multiple_of(self.half) {
            return self.generation.load(Ordering::Acquire);
        }
        let generation = self.generation.fetch_add(1, Ordering::AcqRel) + 1;
        self.map.retain(|_, verified| {
            verified.generation + 1 >= generation && verified.expires_at > now
        });
        generation
    }

    /// Whether `token` is in memory at all, expired or not.
    #[cfg(test)]
    fn holds(&self, token: &str) -> bool {
        self.map.contains_key(token)
    }

    /// Tokens remembered.
    #[cfg(test)]
    fn len(&self) -> usize {
        self.map.len()
    }
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

    /// A new generation drops the tokens of neither of the last two generations, keeps a token
    /// used since, and never holds more than the bound.
    #[test]
    fn tokens_are_forgotten_by_generations_and_a_used_one_stays() {
        let tokens = VerifiedTokens::new(8);
        let now = 100;
        for (n, token) in ["a", "b", "c", "d"].iter().enumerate() {
            tokens.insert(token, principal(n as u64), 1_000, now);
        }
        // "d" opened generation 1; "a" is used again and moves into it.
        assert_eq!(tokens.len(), 4);
        assert!(tokens.get("a", now).is_some());
        tokens.insert("e", principal(5), 1_000, now);
        tokens.insert("f", principal(6), 1_000, now);
        // "g" opens generation 2: b and c (generation 0, unused since) are forgotten.
        tokens.insert("g", principal(7), 1_000, now);
        for gone in ["b", "c"] {
            assert!(!tokens.holds(gone), "{gone} was forgotten");
        }
        for kept in ["a", "d", "e", "f", "g"] {
            assert!(tokens.holds(kept), "{kept} is remembered");
        }
        for n in 0..40u64 {
            tokens.insert(&format!("t{n}"), principal(n), 1_000, now);
            assert!(tokens.len() <= 8, "bounded after {n}: {}", tokens.len());
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
