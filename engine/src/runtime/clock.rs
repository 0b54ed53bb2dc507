//! Where time and chance come from. Both are decided once, here, and then logged in events.
//!
//! [`SystemClock`] reads the wall clock and the OS random source. [`SeededClock`] is for tests and
//! simulations: a logical clock the test moves, and a seeded generator, so a seed reproduces a run.

use std::sync::atomic::{AtomicI64, AtomicU64, Ordering};

use crate::shard::command::Context;

/// The source of `now` and of per-command entropy.
pub trait Clock: Send + Sync + 'static {
    /// Fresh 32 random bytes for one command.
    fn entropy(&self) -> [u8; 32];
    /// Unix milliseconds.
    fn now_ms(&self) -> i64;

    /// The context of one command.
    fn context(&self) -> Context {
        Context::new(self.now_ms(), self.entropy())
    }
}

/// The wall clock and the OS random source (through [`random_bytes`]).
#[derive(Debug, Default, Clone, Copy)]
pub struct SystemClock;

/// Outputs drawn from one seed before a thread reseeds from the OS.
const RESEED_EVERY: u64 = 1 << 20;

/// Per-thread generator state: a 32-byte secret key from the OS and a counter.
struct HashDrbg {
    key: [u8; 32],
    counter: u64,
}

thread_local! {
    static DRBG: std::cell::RefCell<Option<HashDrbg>> = const { std::cell::RefCell::new(None) };
}

fn os_random() -> [u8; 32] {
    let mut bytes = [0u8; 32];
    if getrandom::getrandom(&mut bytes).is_err() {
        // The OS random source failing is not recoverable for a payments service: ids would
        // collide. Refuse loudly rather than invent weak randomness.
        tracing::error!("the operating system's random source failed");
        std::process::abort();
    }
    bytes
}

/// 32 fresh, unpredictable bytes: SHA-256(key ‖ counter) in counter mode over a per-thread key
/// drawn from the OS (reseeded every 2^20 outputs). A command's uuids are derived from these, and
/// some uuids are capabilities (payment links), so they must be unguessable; one `getrandom`
/// syscall per command and per request id was measurable CPU on the request path, this is not.
#[must_use]
pub fn random_bytes() -> [u8; 32] {
    use sha2::{Digest, Sha256};
    DRBG.with(|cell| {
        let mut state = cell.borrow_mut();
        let drbg = match &mut *state {
            Some(drbg) if drbg.counter < RESEED_EVERY => drbg,
            slot => slot.insert(HashDrbg {
                key: os_random(),
                counter: 0,
            }),
        };
        drbg.counter += 1;
        let mut hasher = Sha256::new();
        hasher.update(b"walletd-drbg-v1");
        hasher.update(drbg.key);
        hasher.update(drbg.counter.to_le_bytes());
        hasher.finalize().into()
    })
}

impl Clock for SystemClock {
    fn entropy(&self) -> [u8; 32] {
        random_bytes()
    }

    fn now_ms(&self) -> i64 {
        let now = std::time::SystemTime::now()
            .duration_since(std::time::UNIX_EPOCH)
            .unwrap_or_default();
        i64::try_from(now.as_millis()).unwrap_or(i64::MAX)
    }
}

/// A logical clock and a seeded generator (splitmix64), for deterministic tests.
#[derive(Debug)]
pub struct SeededClock {
    now_ms: AtomicI64,
    state: AtomicU64,
}

impl SeededClock {
    #[must_use]
    pub fn new(seed: u64, start_ms: i64) -> Self {
        SeededClock {
            now_ms: AtomicI64::new(start_ms),
            state: AtomicU64::new(seed),
        }
    }

    /// Moves the logical clock forward.
    pub fn advance_ms(&self, ms: i64) {
        self.now_ms.fetch_add(ms, Ordering::SeqCst);
    }

    fn next(&self) -> u64 {
        let mut z = self
            .state
            .fetch_add(0x9E37_79B9_7F4A_7C15, Ordering::SeqCst)
            .wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
}

impl Clock for SeededClock {
    fn entropy(&self) -> [u8; 32] {
        let mut bytes = [0u8; 32];
        for chunk in bytes.chunks_exact_mut(8) {
            chunk.copy_from_slice(&self.next().to_le_bytes());
        }
        bytes
    }

    fn now_ms(&self) -> i64 {
        self.now_ms.load(Ordering::SeqCst)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn random_bytes_do_not_repeat_within_or_across_threads() {
        let mut seen = std::collections::HashSet::new();
        for _ in 0..1000 {
            assert!(seen.insert(random_bytes()));
        }
        let other = std::thread::spawn(|| (0..1000).map(|_| random_bytes()).collect::<Vec<_>>())
            .join()
            .unwrap_or_default();
        assert_eq!(other.len(), 1000);
        for bytes in other {
            assert!(seen.insert(bytes));
        }
    }
}
