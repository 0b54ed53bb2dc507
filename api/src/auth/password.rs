//! Password hashing: Argon2id with the OWASP parameters argon2 0.5 defaults to (m = 19 MiB,
//! t = 2, p = 1). Hashing is deliberately slow (tens of milliseconds), so it runs on tokio's
//! blocking pool behind a semaphore, never on the async workers that serve requests.
//!
//! The queue in front of the semaphore is bounded ([`QUEUE_MAX`]): a flood of logins is refused
//! at once with 503 `busy` and `Retry-After: 1` instead of piling up behind the permits, where
//! every real login would wait out the flood (issue 17).

use std::sync::atomic::{AtomicUsize, Ordering};
use std::sync::Arc;

use argon2::password_hash::{PasswordHash, PasswordHasher, PasswordVerifier, SaltString};
use argon2::Argon2;
use tokio::sync::Semaphore;

use crate::error::ApiError;

/// Password checks that may wait for a permit besides those running.
pub const QUEUE_MAX: usize = 8;

/// Runs hashes off the request path, at most `permits` at a time, and at most [`QUEUE_MAX`]
/// waiting.
#[derive(Clone)]
pub struct Hasher {
    permits: Arc<Semaphore>,
    params: argon2::Params,
    /// Hashes running or waiting for a permit.
    admitted: Arc<AtomicUsize>,
    admitted_max: usize,
}

/// A place in the hashing queue; frees it on drop.
struct Admitted(Arc<AtomicUsize>);

impl Drop for Admitted {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::AcqRel);
    }
}

/// A PHC string of a password nobody has: verifying against it costs the same as a real one,
/// so a wrong login and an unknown login take the same time.
const DUMMY_HASH: &str = "$argon2id$v=19$m=19456,t=2,p=1$c29tZXNhbHRzb21lc2FsdA$2mGEXAT2oqVqEXd0YzUUvZVS4lJxQOYNyEXfXw8p1+o";

impl Hasher {
    pub fn new(permits: usize, params: argon2::Params) -> Self {
        let permits = permits.max(1);
        Hasher {
            permits: Arc::new(Semaphore::new(permits)),
            params,
            admitted: Arc::new(AtomicUsize::new(0)),
            admitted_max: permits + QUEUE_MAX,
        }
    }

    /// Takes a place in the queue, or refuses at once when it is full.
    fn admit(&self) -> Result<Admitted, ApiError> {
        let before = self.admitted.fetch_add(1, Ordering::AcqRel);
        let admitted = Admitted(self.admitted.clone());
        if before >= self.admitted_max {
            return Err(ApiError::new(
                hyper::StatusCode::SERVICE_UNAVAILABLE,
                "busy",
                "too many password checks are waiting; retry in a second",
            )
            .with_header("retry-after", "1".to_owned()));
        }
        Ok(admitted)
    }

    /// OWASP defaults.
    pub fn standard() -> Self {
        Self::new(2, argon2::Params::default())
    }

    fn argon(params: argon2::Params) -> Argon2<'static> {
        Argon2::new(argon2::Algorithm::Argon2id, argon2::Version::V0x13, params)
    }

    pub async fn hash(&self, password: String) -> Result<String, ApiError> {
        let _admitted = self.admit()?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ApiError::internal())?;
        let params = self.params.clone();
        tokio::task::spawn_blocking(move || {
            let mut bytes = [0u8; 16];
            getrandom::getrandom(&mut bytes).map_err(|_| argon2::password_hash::Error::Crypto)?;
            let salt = SaltString::encode_b64(&bytes)?;
            Self::argon(params)
                .hash_password(password.as_bytes(), &salt)
                .map(|hash| hash.to_string())
        })
        .await
        .map_err(|_| ApiError::internal())?
        .map_err(|error| {
            tracing::error!(%error, "hashing a password failed");
            ApiError::internal()
        })
    }

    /// True when `password` matches `hash`; with `None` a dummy hash is checked so timing does
    /// not tell unknown accounts from wrong passwords.
    pub async fn verify(&self, password: String, hash: Option<String>) -> Result<bool, ApiError> {
        let _admitted = self.admit()?;
        let _permit = self
            .permits
            .acquire()
            .await
            .map_err(|_| ApiError::internal())?;
        let params = self.params.clone();
        tokio::task::spawn_blocking(move || {
            let known = hash.is_some();
            let text = hash.unwrap_or_else(|| DUMMY_HASH.to_owned());
            let Ok(parsed) = PasswordHash::new(&text) else {
                return false;
            };
            let matches = Self::argon(params)
                .verify_password(password.as_bytes(), &parsed)
                .is_ok();
            known && matches
        })
        .await
        .map_err(|_| ApiError::internal())
    }
}
