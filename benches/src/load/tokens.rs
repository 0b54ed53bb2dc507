//! The tokens the load sends, and their renewal before walletd stops taking them.
//!
//! walletd accepts a token for `expires_in` seconds (at most an hour). The setup logs everyone
//! in once; a load that outlives that would end in 401s, and a soak would count them as answers.
//! So a renewal task logs the admin, the merchant's employee and every customer in again when
//! three quarters of the lifetime have passed, and swaps each new token in as soon as it has it.
//! Requests already sent keep their old token, which is still good for the last quarter.
//!
//! The logins are spread over [`RENEWAL_CONNECTIONS`] connections: each one hashes a password
//! in walletd, and the renewal should take a sliver of the server, not a burst of it.

use std::sync::{Arc, RwLock};
use std::time::{Duration, Instant};

use super::args::LoadArgs;
use super::client::Target;
use super::setup::{self, Caller, Issued, Login, Merchant, Setup, Wallet};

/// Connections the renewal logs in over, one login at a time on each.
pub const RENEWAL_CONNECTIONS: usize = 2;

/// The fraction of a token's lifetime after which it is renewed, as a ratio.
const RENEW_AFTER: (u32, u32) = (3, 4);

/// The tokens the connection loops send; each can be swapped while they run.
pub struct Tokens {
    admin: RwLock<Arc<str>>,
    customers: Vec<RwLock<Arc<str>>>,
    merchant: Option<RwLock<Arc<str>>>,
}

fn read(slot: &RwLock<Arc<str>>) -> Arc<str> {
    slot.read()
        .unwrap_or_else(|poisoned| poisoned.into_inner())
        .clone()
}

fn swap(slot: &RwLock<Arc<str>>, token: Arc<str>) {
    *slot
        .write()
        .unwrap_or_else(|poisoned| poisoned.into_inner()) = token;
}

impl Tokens {
    pub fn new(setup: &Setup) -> Tokens {
        Tokens {
            admin: RwLock::new(setup.admin.clone()),
            customers: setup
                .wallets
                .iter()
                .map(|w| RwLock::new(w.token.clone()))
                .collect(),
            merchant: setup
                .merchant
                .as_ref()
                .map(|m| RwLock::new(m.token.clone())),
        }
    }

    pub fn admin(&self) -> Arc<str> {
        read(&self.admin)
    }

    /// Customer `index`'s token; the admin's for an index past the customers.
    pub fn customer(&self, index: usize) -> Arc<str> {
        self.customers.get(index).map_or_else(|| self.admin(), read)
    }

    pub fn merchant(&self) -> Option<Arc<str>> {
        self.merchant.as_ref().map(read)
    }

    /// Writes the newest admin and merchant tokens back into `setup` (for the audit's
    /// read-back after the load).
    pub fn store_into(&self, setup: &mut Setup) {
        setup.admin = self.admin();
        if let (Some(merchant), Some(token)) = (setup.merchant.as_mut(), self.merchant()) {
            merchant.token = token;
        }
    }
}

/// What the renewal needs to log everyone in again.
pub struct Renewal {
    pub args: LoadArgs,
    pub target: Target,
    pub timeout: Duration,
    pub nonce: u64,
    pub wallets: Vec<Wallet>,
    pub merchant: Option<Merchant>,
}

/// When tokens issued as `issued` are renewed.
pub fn due(issued: Issued) -> Instant {
    issued.at + issued.lifetime * RENEW_AFTER.0 / RENEW_AFTER.1
}

/// What the renewals did, for the report.
#[derive(Clone, Copy, Debug, Default)]
pub struct Renewed {
    /// Rounds of renewal started.
    pub rounds: u32,
    /// Tokens renewed.
    pub tokens: u64,
    /// Logins that failed (those tokens were kept, and expire).
    pub failed: u64,
}

/// Renews every token whenever it is due, until `until` (the end of the load). Returns what it
/// did; the caller aborts it when the load ends, so a round in progress is simply cut short.
pub async fn renew_until(
    tokens: Arc<Tokens>,
    renewal: Arc<Renewal>,
    mut issued: Issued,
    until: Instant,
    progress: Arc<RwLock<Renewed>>,
) {
    loop {
        let at = due(issued);
        if at >= until {
            return;
        }
        tokio::time::sleep_until(tokio::time::Instant::from_std(at)).await;
        let started = Instant::now();
        eprintln!(
            "walletd-load: tokens are {:.0} s old (accepted for {:.0} s): logging {} customers, the admin{} in again",
            started.saturating_duration_since(issued.at).as_secs_f64(),
            issued.lifetime.as_secs_f64(),
            renewal.wallets.len(),
            if renewal.merchant.is_some() {
                " and the merchant's employee"
            } else {
                ""
            },
        );
        let round = renew_all(&tokens, &renewal).await;
        if let Ok(mut total) = progress.write() {
            total.rounds += 1;
            total.tokens += round.tokens;
            total.failed += round.failed;
        }
        eprintln!(
            "walletd-load: renewed {} tokens in {:.1} s ({} logins failed)",
            round.tokens,
            started.elapsed().as_secs_f64(),
            round.failed
        );
        // The shortest lifetime any login of the round was given decides the next round; a round
        // whose logins all failed tries again after a quarter of the old lifetime.
        issued = match round.lifetime {
            Some(lifetime) => Issued {
                at: started,
                lifetime,
            },
            None => Issued {
                at: started,
                lifetime: issued.lifetime / RENEW_AFTER.1,
            },
        };
    }
}

/// One round: what it renewed and the shortest lifetime it was given.
struct Round {
    tokens: u64,
    failed: u64,
    lifetime: Option<Duration>,
}

impl Round {
    fn record(&mut self, login: &Result<Login, String>) {
        match login {
            Ok(login) => {
                self.tokens += 1;
                let lifetime = Duration::from_secs(login.expires_in.max(1) as u64);
                self.lifetime = Some(self.lifetime.map_or(lifetime, |l| l.min(lifetime)));
            }
            Err(error) => {
                if self.failed == 0 {
                    eprintln!(
                        "walletd-load: a token renewal failed (its old token is kept): {error}"
                    );
                }
                self.failed += 1;
            }
        }
    }

    fn merge(&mut self, other: Round) {
        self.tokens += other.tokens;
        self.failed += other.failed;
        if let Some(lifetime) = other.lifetime {
            self.lifetime = Some(self.lifetime.map_or(lifetime, |l| l.min(lifetime)));
        }
    }
}

async fn renew_all(tokens: &Arc<Tokens>, renewal: &Arc<Renewal>) -> Round {
    let mut round = Round {
        tokens: 0,
        failed: 0,
        lifetime: None,
    };
    let mut caller = Caller::new(renewal.args.client, renewal.target.clone(), renewal.timeout);
    let admin = setup::login_admin(&renewal.args, &mut caller).await;
    round.record(&admin);
    if let Ok(login) = admin {
        swap(&tokens.admin, login.token);
    }
    if let (Some(merchant), Some(slot)) = (&renewal.merchant, &tokens.merchant) {
        let login = setup::login_merchant(merchant, &mut caller).await;
        round.record(&login);
        if let Ok(login) = login {
            swap(slot, login.token);
        }
    }
    let workers: Vec<_> = (0..RENEWAL_CONNECTIONS)
        .map(|worker| {
            let tokens = tokens.clone();
            let renewal = renewal.clone();
            tokio::spawn(async move {
                let mut round = Round {
                    tokens: 0,
                    failed: 0,
                    lifetime: None,
                };
                let mut caller =
                    Caller::new(renewal.args.client, renewal.target.clone(), renewal.timeout);
                let mine = (worker..renewal.wallets.len()).step_by(RENEWAL_CONNECTIONS);
                for index in mine {
                    let (Some(wallet), Some(slot)) =
                        (renewal.wallets.get(index), tokens.customers.get(index))
                    else {
                        continue;
                    };
                    let login =
                        setup::login_customer(&mut caller, &wallet.phone, renewal.nonce).await;
                    round.record(&login);
                    if let Ok(login) = login {
                        swap(slot, login.token);
                    }
                }
                round
            })
        })
        .collect();
    for worker in workers {
        match worker.await {
            Ok(theirs) => round.merge(theirs),
            Err(error) => {
                eprintln!("walletd-load: a token renewal task failed: {error}");
                round.failed += 1;
            }
        }
    }
    round
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn tokens_are_renewed_after_three_quarters_of_their_lifetime() {
        let at = Instant::now();
        let issued = Issued::new(at, 3600);
        assert_eq!(due(issued), at + Duration::from_secs(2700));
    }

    #[test]
    fn a_swapped_token_is_what_the_loops_send_next() {
        let setup = Setup {
            admin: "admin-1".into(),
            wallets: vec![Wallet {
                id: 7,
                token: "customer-1".into(),
                phone: "+96770000000001".into(),
            }],
            merchant: None,
            base: Vec::new(),
            nonce: 1,
            tokens: None,
        };
        let tokens = Tokens::new(&setup);
        assert_eq!(&*tokens.customer(0), "customer-1");
        assert_eq!(
            &*tokens.customer(1),
            "admin-1",
            "past the customers: the admin"
        );
        swap(&tokens.customers[0], "customer-2".into());
        swap(&tokens.admin, "admin-2".into());
        assert_eq!(&*tokens.customer(0), "customer-2");
        assert_eq!(&*tokens.customer(1), "admin-2");
        let mut after = setup;
        tokens.store_into(&mut after);
        assert_eq!(
            &*after.admin, "admin-2",
            "the audit reads with the newest token"
        );
    }
}
