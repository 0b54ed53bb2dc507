//! The ledger model: what the answers of a run imply for each wallet, and the comparison with
//! what walletd reads back afterwards.
//!
//! Every amount is in minor units (cents; YER has 2 fraction digits). For each wallet the model
//! keeps the exact change implied by acknowledged (2xx) requests (`delta`, `held`), plus bounds
//! for requests whose outcome is unknown (a timeout, a broken connection or a 5xx: applied or
//! not, we cannot tell): a deposit that may or may not have happened widens `high` by its
//! amount, a withdrawal widens `low`, and so on. A rejection (any 4xx, e.g. 422
//! insufficient_funds) has no effect. Effects are sums, so each connection keeps its own model
//! and the models are merged at the end.
//!
//! The audit then checks, per wallet, `base + delta + low <= balance <= base + delta + high`,
//! the same for the held balance, `available = balance - held`, and the total over the wallets
//! (transfers move money between the wallets; deposits, withdrawals and captures change the
//! total).

use serde::Serialize;

use super::cents_text;
use super::mix::Kind;

/// What an answer says about a write.
#[derive(Copy, Clone, Debug, PartialEq, Eq)]
pub enum Effect {
    /// 2xx: applied.
    Applied,
    /// A 4xx answer, or never sent: not applied.
    None,
    /// Timeout, broken connection or 5xx: maybe applied.
    Unknown,
}

/// A wallet's balances as walletd reports them, in cents.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct Balance {
    pub balance: i64,
    pub held: i64,
    pub available: i64,
}

/// Changes implied for one wallet.
#[derive(Copy, Clone, Debug, Default, PartialEq, Eq)]
pub struct WalletEffect {
    pub delta: i64,
    /// Sum of the negative effects that may or may not have happened (<= 0).
    pub low: i64,
    /// Sum of the positive effects that may or may not have happened (>= 0).
    pub high: i64,
    pub held: i64,
    pub held_low: i64,
    pub held_high: i64,
}

/// The effects of a run (or of one connection's share of it).
#[derive(Clone, Debug, Default)]
pub struct Model {
    pub wallets: Vec<WalletEffect>,
    pub total_low: i64,
    pub total_high: i64,
    /// Requests whose outcome is unknown, per [`Kind`].
    pub unknown: [u64; Kind::COUNT],
    /// Unknown amounts per kind (cents), for the report.
    pub unknown_cents: [i64; Kind::COUNT],
}

impl Model {
    pub fn new(wallets: usize) -> Model {
        Model {
            wallets: vec![WalletEffect::default(); wallets],
            ..Model::default()
        }
    }

    pub fn merge(&mut self, other: &Model) {
        for (mine, theirs) in self.wallets.iter_mut().zip(&other.wallets) {
            mine.delta += theirs.delta;
            mine.low += theirs.low;
            mine.high += theirs.high;
            mine.held += theirs.held;
            mine.held_low += theirs.held_low;
            mine.held_high += theirs.held_high;
        }
        self.total_low += other.total_low;
        self.total_high += other.total_high;
        for i in 0..Kind::COUNT {
            self.unknown[i] += other.unknown[i];
            self.unknown_cents[i] += other.unknown_cents[i];
        }
    }

    fn note_unknown(&mut self, kind: Kind, cents: i64) {
        self.unknown[kind.index()] += 1;
        self.unknown_cents[kind.index()] += cents;
    }

    fn wallet(&mut self, index: usize) -> &mut WalletEffect {
        if index >= self.wallets.len() {
            self.wallets.resize(index + 1, WalletEffect::default());
        }
        &mut self.wallets[index]
    }

    pub fn deposit(&mut self, wallet: usize, cents: i64, effect: Effect) {
        match effect {
            Effect::Applied => self.wallet(wallet).delta += cents,
            Effect::None => {}
            Effect::Unknown => {
                self.wallet(wallet).high += cents;
                self.total_high += cents;
                self.note_unknown(Kind::Deposit, cents);
            }
        }
    }

    pub fn withdraw(&mut self, wallet: usize, cents: i64, effect: Effect) {
        match effect {
            Effect::Applied => self.wallet(wallet).delta -= cents,
            Effect::None => {}
            Effect::Unknown => {
                self.wallet(wallet).low -= cents;
                self.total_low -= cents;
                self.note_unknown(Kind::Withdraw, cents);
            }
        }
    }

    pub fn transfer(&mut self, source: usize, target: usize, cents: i64, effect: Effect) {
        match effect {
            Effect::Applied => {
                self.wallet(source).delta -= cents;
                self.wallet(target).delta += cents;
            }
            Effect::None => {}
            Effect::Unknown => {
                self.wallet(source).low -= cents;
                self.wallet(target).high += cents;
                self.note_unknown(Kind::Transfer, cents);
            }
        }
    }

    pub fn place_hold(&mut self, wallet: usize, cents: i64, effect: Effect) {
        match effect {
            Effect::Applied => self.wallet(wallet).held += cents,
            Effect::None => {}
            Effect::Unknown => {
                self.wallet(wallet).held_high += cents;
                self.note_unknown(Kind::HoldPlace, cents);
            }
        }
    }

    /// Closing a hold that was placed (and counted in `held`).
    pub fn close_hold(&mut self, wallet: usize, cents: i64, capture: bool, effect: Effect) {
        let kind = if capture {
            Kind::HoldCapture
        } else {
            Kind::HoldRelease
        };
        match effect {
            Effect::Applied => {
                let w = self.wallet(wallet);
                w.held -= cents;
                if capture {
                    w.delta -= cents;
                }
            }
            Effect::None => {}
            Effect::Unknown => {
                let w = self.wallet(wallet);
                w.held_low -= cents;
                if capture {
                    w.low -= cents;
                    self.total_low -= cents;
                }
                self.note_unknown(kind, cents);
            }
        }
    }

    pub fn unknown_total(&self) -> u64 {
        self.unknown.iter().sum()
    }
}

/// The verdict of an audit.
#[derive(Clone, Debug, Serialize)]
pub struct AuditReport {
    pub ok: bool,
    pub wallets: usize,
    /// Sum of the balances before the run (after funding), in YER.
    pub total_before: String,
    /// What the acknowledged requests imply for the total, and its bounds from unknown outcomes.
    pub total_expected: String,
    pub total_expected_low: String,
    pub total_expected_high: String,
    pub total_actual: String,
    pub unknown_requests: u64,
    pub mismatches: Vec<String>,
}

/// Compares `actual` with `base` changed by `model`, wallet by wallet (`ids` name them).
pub fn check(ids: &[u64], base: &[Balance], model: &Model, actual: &[Balance]) -> AuditReport {
    let mut mismatches = Vec::new();
    let mut total_before = 0i64;
    let mut total_expected = 0i64;
    let mut total_actual = 0i64;
    for (index, id) in ids.iter().enumerate() {
        let before = base.get(index).copied().unwrap_or_default();
        let effect = model.wallets.get(index).copied().unwrap_or_default();
        let Some(now) = actual.get(index).copied() else {
            mismatches.push(format!("wallet {id}: no balance read back"));
            continue;
        };
        total_before += before.balance;
        total_expected += before.balance + effect.delta;
        total_actual += now.balance;
        let expected = before.balance + effect.delta;
        let (low, high) = (expected + effect.low, expected + effect.high);
        if now.balance < low || now.balance > high {
            mismatches.push(format!(
                "wallet {id}: balance {} but the acknowledged requests imply {}{} (difference {})",
                cents_text(now.balance),
                cents_text(expected),
                bounds_text(effect.low, effect.high),
                cents_text(now.balance - expected),
            ));
        }
        let held = before.held + effect.held;
        let (held_low, held_high) = (held + effect.held_low, held + effect.held_high);
        if now.held < held_low || now.held > held_high {
            mismatches.push(format!(
                "wallet {id}: held {} but the acknowledged requests imply {}{} (difference {})",
                cents_text(now.held),
                cents_text(held),
                bounds_text(effect.held_low, effect.held_high),
                cents_text(now.held - held),
            ));
        }
        if now.available != now.balance - now.held {
            mismatches.push(format!(
                "wallet {id}: available {} is not balance {} - held {}",
                cents_text(now.available),
                cents_text(now.balance),
                cents_text(now.held)
            ));
        }
    }
    let (low, high) = (
        total_expected + model.total_low,
        total_expected + model.total_high,
    );
    if total_actual < low || total_actual > high {
        mismatches.push(format!(
            "total over {} wallets: {} but the acknowledged requests imply {}{} (difference {})",
            ids.len(),
            cents_text(total_actual),
            cents_text(total_expected),
            bounds_text(model.total_low, model.total_high),
            cents_text(total_actual - total_expected),
        ));
    }
    AuditReport {
        ok: mismatches.is_empty(),
        wallets: ids.len(),
        total_before: cents_text(total_before),
        total_expected: cents_text(total_expected),
        total_expected_low: cents_text(low),
        total_expected_high: cents_text(high),
        total_actual: cents_text(total_actual),
        unknown_requests: model.unknown_total(),
        mismatches,
    }
}

fn bounds_text(low: i64, high: i64) -> String {
    if low == 0 && high == 0 {
        String::new()
    } else {
        format!(
            " (unknown outcomes allow {} .. +{})",
            cents_text(low),
            cents_text(high)
        )
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn at(balance: i64, held: i64) -> Balance {
        Balance {
            balance,
            held,
            available: balance - held,
        }
    }

    #[test]
    fn acknowledged_requests_must_match_exactly() {
        let mut model = Model::new(2);
        model.deposit(0, 500, Effect::Applied);
        model.transfer(0, 1, 200, Effect::Applied);
        model.withdraw(1, 50, Effect::None);
        model.place_hold(1, 30, Effect::Applied);
        model.close_hold(1, 30, true, Effect::Applied);
        model.place_hold(0, 10, Effect::Applied);
        let base = [at(1000, 0), at(1000, 0)];
        let report = check(&[7, 8], &base, &model, &[at(1300, 10), at(1170, 0)]);
        assert!(report.ok, "{:?}", report.mismatches);
        let report = check(&[7, 8], &base, &model, &[at(1300, 10), at(1171, 0)]);
        assert!(!report.ok);
        assert_eq!(report.mismatches.len(), 2, "{:?}", report.mismatches);
    }

    #[test]
    fn unknown_outcomes_widen_the_bounds() {
        let mut model = Model::new(2);
        model.deposit(0, 100, Effect::Unknown);
        model.transfer(0, 1, 40, Effect::Unknown);
        let base = [at(1000, 0), at(1000, 0)];
        for (a, b) in [(1000, 1000), (1100, 1000), (1060, 1040), (960, 1040)] {
            let report = check(&[1, 2], &base, &model, &[at(a, 0), at(b, 0)]);
            assert!(report.ok, "{a} {b}: {:?}", report.mismatches);
        }
        assert!(!check(&[1, 2], &base, &model, &[at(1101, 0), at(1000, 0)]).ok);
        assert_eq!(model.unknown_total(), 2);
    }
}
