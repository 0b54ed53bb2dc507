//! Recovery drills in two processes (`--state-out FILE`, then `walletd-load audit --state FILE`).
//!
//! With `--state-out`, a connection error stops the load (requests in flight stay unknown
//! outcomes) and, instead of waiting for the server, the run writes everything the audit needs
//! to FILE as JSON and exits with [`SERVER_WENT_AWAY`]: the balances before the load, every
//! audited wallet with its id and the token that may read it, the customers' tokens, the merged
//! model of acknowledged deltas and unknown bounds (cents), the admin token and the merchant.
//! The state is also written when the load ends normally (before the run's own read-back), so
//! a kill that comes late still leaves something to audit.
//!
//! `walletd-load audit --state FILE --url URL` then waits for `GET /v1/health` to answer 200
//! (the restarted server), reads every wallet back and runs the same comparison
//! ([`super::audit::check`]). Tokens survive a restart (the JWT secret lives in the data dir)
//! and last an hour; a 401 on the merchant's wallet logs its employee in again.

use std::path::Path;
use std::sync::Arc;
use std::time::Duration;

use serde::{Deserialize, Serialize};

use super::args::{AuditArgs, ClientKind};
use super::audit::{self, Balance, Model};
use super::client::Target;
use super::drill;
use super::report;
use super::setup::{self, Caller, Merchant, Setup};

/// The exit code of a run that lost its server and wrote its state.
pub const SERVER_WENT_AWAY: i32 = 3;

/// One audited wallet and the token that reads it back.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct AuditedWallet {
    pub id: u64,
    pub token: String,
    /// `customer` or `merchant`.
    pub owner: String,
}

/// A customer's wallet and its token.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct CustomerWallet {
    pub id: u64,
    pub token: String,
}

/// The run's merchant.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct MerchantState {
    pub business_id: u64,
    pub wallet_id: u64,
    pub email: String,
    pub password: String,
    pub token: String,
}

/// What `--state-out` writes and `audit --state` reads.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct State {
    pub version: u32,
    pub url: String,
    pub seed: u64,
    /// Whether the load was stopped by a connection error (the server went away).
    pub server_went_away: bool,
    /// Seconds from the start of the load to that error.
    pub load_stopped_at_s: Option<f64>,
    pub admin_token: String,
    pub customers: Vec<CustomerWallet>,
    pub merchant: Option<MerchantState>,
    /// The wallets the audit reads, in the model's order (customers, then the merchant's).
    pub audited: Vec<AuditedWallet>,
    /// Balances after funding, before the load, in the order of `audited` (cents).
    pub base: Vec<Balance>,
    /// Acknowledged deltas and unknown bounds, merged over the connections (cents).
    pub model: Model,
}

impl State {
    pub fn new(
        setup: &Setup,
        model: &Model,
        url: &str,
        seed: u64,
        load_stopped_at_s: Option<f64>,
    ) -> State {
        let merchant_wallet = setup.merchant.as_ref().map(|m| m.wallet_id);
        State {
            version: 1,
            url: url.to_string(),
            seed,
            server_went_away: load_stopped_at_s.is_some(),
            load_stopped_at_s,
            admin_token: setup.admin.to_string(),
            customers: setup
                .wallets
                .iter()
                .map(|w| CustomerWallet {
                    id: w.id,
                    token: w.token.to_string(),
                })
                .collect(),
            merchant: setup.merchant.as_ref().map(|m| MerchantState {
                business_id: m.business_id,
                wallet_id: m.wallet_id,
                email: m.email.clone(),
                password: m.password.clone(),
                token: m.token.to_string(),
            }),
            audited: setup
                .audited()
                .into_iter()
                .enumerate()
                .map(|(index, (id, token))| AuditedWallet {
                    id,
                    token: token.to_string(),
                    owner: if index == setup.wallets.len() && Some(id) == merchant_wallet {
                        "merchant".into()
                    } else {
                        "customer".into()
                    },
                })
                .collect(),
            base: setup.base.clone(),
            model: model.clone(),
        }
    }

    /// Writes the state as JSON (to a temporary file renamed over `path`).
    pub fn write(&self, path: &Path) -> Result<(), String> {
        let text = serde_json::to_string_pretty(self).map_err(|e| e.to_string())?;
        let temporary = path.with_extension("tmp");
        std::fs::write(&temporary, text + "\n")
            .and_then(|()| std::fs::rename(&temporary, path))
            .map_err(|e| format!("write {}: {e}", path.display()))
    }

    pub fn read(path: &Path) -> Result<State, String> {
        let text = std::fs::read(path).map_err(|e| format!("read {}: {e}", path.display()))?;
        let state: State = serde_json::from_slice(&text)
            .map_err(|e| format!("{} is not a walletd-load state: {e}", path.display()))?;
        if state.version != 1 {
            return Err(format!(
                "{}: state version {} (this walletd-load reads 1)",
                path.display(),
                state.version
            ));
        }
        if state.base.len() != state.audited.len() {
            return Err(format!(
                "{}: {} base balances for {} audited wallets",
                path.display(),
                state.base.len(),
                state.audited.len()
            ));
        }
        Ok(state)
    }

    fn read_list(&self) -> Vec<(u64, Arc<str>)> {
        self.audited
            .iter()
            .map(|w| (w.id, Arc::from(w.token.as_str())))
            .collect()
    }
}

/// `walletd-load audit`: the exit code (0 OK, 1 mismatch, 2 could not audit).
pub fn main(args: AuditArgs) -> i32 {
    let runtime = match tokio::runtime::Builder::new_current_thread()
        .enable_all()
        .build()
    {
        Ok(runtime) => runtime,
        Err(error) => {
            eprintln!("walletd-load audit: start the runtime: {error}");
            return 2;
        }
    };
    match runtime.block_on(audit_state(&args)) {
        Ok(ok) => i32::from(!ok),
        Err(error) => {
            eprintln!("walletd-load audit: {error}");
            2
        }
    }
}

async fn audit_state(args: &AuditArgs) -> Result<bool, String> {
    let mut state = State::read(&args.state)?;
    let url = args.url.clone().unwrap_or_else(|| state.url.clone());
    let target = Target::parse(&url)?;
    let kind = ClientKind::Raw;
    let timeout = Duration::from_secs(30);
    eprintln!(
        "walletd-load audit: {} wallets from {} (server went away: {}); waiting up to {:.0} s for {url}/v1/health",
        state.audited.len(),
        args.state.display(),
        state.server_went_away,
        args.wait
    );
    let comeback =
        drill::wait_healthy(kind, &target, Duration::from_secs_f64(args.wait.max(0.01))).await?;
    eprintln!(
        "walletd-load audit: the server answered after {:.2} s",
        comeback.waited.as_secs_f64()
    );
    let mut relogged = false;
    let actual = loop {
        match setup::read_balances(kind, &target, &state.read_list(), 8, timeout).await {
            Ok(balances) => break balances,
            Err(failure) if failure.unauthorized && !relogged => {
                // Only the merchant's employee can log in again (its password is in the state);
                // the admin's password comes from WALLETD_ADMIN_PASSWORD only in a load run.
                relogged = true;
                let Some(merchant) = state.merchant.as_mut() else {
                    return Err(format!("read-back: {}", failure.message));
                };
                eprintln!(
                    "walletd-load audit: 401 on the read-back: logging the merchant in again"
                );
                let mut caller = Caller::new(kind, target.clone(), timeout);
                let fresh = setup::login_merchant(
                    &Merchant {
                        business_id: merchant.business_id,
                        wallet_id: merchant.wallet_id,
                        email: merchant.email.clone(),
                        password: merchant.password.clone(),
                        token: Arc::from(merchant.token.as_str()),
                    },
                    &mut caller,
                )
                .await?;
                merchant.token = fresh.to_string();
                let merchant_wallet = merchant.wallet_id;
                for wallet in &mut state.audited {
                    if wallet.owner == "merchant" && wallet.id == merchant_wallet {
                        wallet.token = fresh.to_string();
                    }
                }
            }
            Err(failure) => return Err(format!("read-back: {}", failure.message)),
        }
    };
    let ids: Vec<u64> = state.audited.iter().map(|w| w.id).collect();
    let verdict = audit::check(&ids, &state.base, &state.model, &actual);
    report::print_audit(Some(&verdict), &mut std::io::stdout())
        .map_err(|e| format!("print the audit: {e}"))?;
    Ok(verdict.ok)
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::load::audit::Effect;
    use crate::load::setup::Wallet;

    fn setup() -> Setup {
        Setup {
            admin: "admin-token".into(),
            wallets: vec![
                Wallet {
                    id: 7,
                    token: "c7".into(),
                },
                Wallet {
                    id: 9,
                    token: "c9".into(),
                },
            ],
            merchant: Some(Merchant {
                business_id: 3,
                wallet_id: 11,
                email: "m1@load.example".into(),
                password: "merchant-pass-1".into(),
                token: "m-token".into(),
            }),
            base: vec![
                Balance {
                    balance: 1_000_000,
                    held: 0,
                    available: 1_000_000,
                };
                3
            ],
            nonce: 1,
        }
    }

    #[test]
    fn the_state_round_trips_and_audits_the_same() {
        let setup = setup();
        let mut model = Model::new(3);
        model.confirm_payment(0, 2, 10_000, Some(9_650), Effect::Applied);
        model.refund_payment(0, 2, 1_234, Effect::Unknown);
        model.deposit(1, 500, Effect::Unknown);
        let state = State::new(&setup, &model, "http://127.0.0.1:1", 5, Some(1.5));
        assert!(state.server_went_away);
        assert_eq!(state.audited[2].owner, "merchant");
        assert_eq!(state.audited[2].token, "m-token");
        assert_eq!(state.audited[0].token, "admin-token");
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("state.json");
        state.write(&path).unwrap();
        let back = State::read(&path).unwrap();
        assert_eq!(back, state);
        // The payer paid 100.00 and got 12.34 back, or not; the merchant netted 96.50, less
        // the refund, or not.
        let actual = [
            Balance {
                balance: 1_000_000 - 10_000 + 1_234,
                held: 0,
                available: 1_000_000 - 10_000 + 1_234,
            },
            Balance {
                balance: 1_000_000,
                held: 0,
                available: 1_000_000,
            },
            Balance {
                balance: 1_000_000 + 9_650 - 1_234,
                held: 0,
                available: 1_000_000 + 9_650 - 1_234,
            },
        ];
        let ids: Vec<u64> = back.audited.iter().map(|w| w.id).collect();
        assert!(audit::check(&ids, &back.base, &back.model, &actual).ok);
        // Within the refund's bounds either way, but one cent above the net is not.
        let mut wrong = actual;
        wrong[2].balance = 1_000_000 + 9_651;
        wrong[2].available = wrong[2].balance;
        assert!(!audit::check(&ids, &back.base, &back.model, &wrong).ok);
    }
}
