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
//! Payments (`engine/src/shard/commerce/payment*.rs`): a confirmed payment debits the payer the amount
//! and credits the merchant the net (the fee goes to the fee account, outside the audited
//! wallets); a refund debits the merchant and credits the payer the refunded amount (the fee is
//! kept). Initiating a payment moves no money. The merchant's wallet is audited like the
//! customers' wallets, as one more entry of the model.
//!
//! The audit then checks, per wallet, `base + delta + low <= balance <= base + delta + high`,
//! the same for the held balance, `available = balance - held`, and the total over the wallets
//! (transfers and refunds move money between the wallets; deposits, withdrawals, captures and
//! payment fees change the total).

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
        if self.wallets.len() < other.wallets.len() {
            self.wallets
                .resize(other.wallets.len(), WalletEffect::default());
        }
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

    /// Initiating a payment moves no money; an unknown outcome is only counted.
    pub fn initiate_payment(&mut self, cents: i64, effect: Effect) {
        if effect == Effect::Unknown {
            self.note_unknown(Kind::PaymentInitiate, cents);
        }
    }

    /// Confirming a payment of `cents`: the payer is debited `cents`, the merchant credited
    /// `net` (the fee, `cents - net`, leaves the audited wallets for the fee account). Both
    /// happen or neither. `net: None` (an answer without a readable `net_amount`) allows
    /// anything from 0 to `cents` for the merchant.
    pub fn confirm_payment(
        &mut self,
        payer: usize,
        merchant: usize,
        cents: i64,
        net: Option<i64>,
        effect: Effect,
    ) {
        let net_known = net.map(|net| net.clamp(0, cents));
        match (effect, net_known) {
            (Effect::None, _) => {}
            (Effect::Applied, Some(net)) => {
                self.wallet(payer).delta -= cents;
                self.wallet(merchant).delta += net;
            }
            (Effect::Applied, None) => {
                self.wallet(payer).delta -= cents;
                self.wallet(merchant).high += cents;
                self.total_high += cents;
            }
            (Effect::Unknown, net) => {
                self.wallet(payer).low -= cents;
                let credit = net.unwrap_or(cents);
                self.wallet(merchant).high += credit;
                // All or nothing: the total drops by the fee or stays.
                self.total_low -= cents - net.unwrap_or(0);
                self.note_unknown(Kind::PaymentConfirm, cents);
            }
        }
    }

    /// Refunding `cents` of a completed payment: the merchant is debited, the payer credited.
    pub fn refund_payment(&mut self, payer: usize, merchant: usize, cents: i64, effect: Effect) {
        match effect {
            Effect::Applied => {
                self.wallet(merchant).delta -= cents;
                self.wallet(payer).delta += cents;
            }
            Effect::None => {}
            Effect::Unknown => {
                self.wallet(merchant).low -= cents;
                self.wallet(payer).high += cents;
                self.note_unknown(Kind::PaymentRefund, cents);
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

/// The amount of a partial refund of a payment of `amount` that netted the merchant `net`:
/// from 1 cent to `min(amount - 1, net)` (less than the payment, so it stays partial, and at
/// most what this payment brought the merchant, so the merchant can always afford it), picked
/// by `pick`. `None` when no such amount exists (a payment of 1 cent, or a zero net).
pub fn partial_refund(amount: i64, net: i64, pick: u64) -> Option<i64> {
    let most = amount.saturating_sub(1).min(net);
    if most < 1 {
        return None;
    }
    Some(1 + (pick % most as u64) as i64)
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

    #[test]
    fn payments_and_refunds_move_exact_amounts() {
        // Customers 0 and 1, the merchant is 2. A fee schedule takes 3.50 of 100.00.
        let mut model = Model::new(2);
        model.initiate_payment(10_000, Effect::Applied);
        model.confirm_payment(0, 2, 10_000, Some(9_650), Effect::Applied);
        model.refund_payment(0, 2, 3_000, Effect::Applied);
        // A refused confirm and refund move nothing.
        model.confirm_payment(1, 2, 5_000, Some(4_800), Effect::None);
        model.refund_payment(1, 2, 100, Effect::None);
        // Without fees the net is the amount.
        model.confirm_payment(1, 2, 2_000, Some(2_000), Effect::Applied);
        let base = [at(100_000, 0), at(100_000, 0), at(0, 0)];
        let exact = [at(93_000, 0), at(98_000, 0), at(8_650, 0)];
        let report = check(&[1, 2, 3], &base, &model, &exact);
        assert!(report.ok, "{:?}", report.mismatches);
        assert_eq!(report.total_expected, "1996.50"); // 2000.00 less the 3.50 fee
        assert_eq!(model.unknown_total(), 0);
        // A cent off anywhere fails, the merchant included.
        for wrong in [
            [at(93_001, 0), at(98_000, 0), at(8_650, 0)],
            [at(93_000, 0), at(98_000, 0), at(8_649, 0)],
            // Fees refunded to the payer would be a bug: the fee is kept.
            [at(93_350, 0), at(98_000, 0), at(8_300, 0)],
        ] {
            assert!(!check(&[1, 2, 3], &base, &model, &wrong).ok, "{wrong:?}");
        }
    }

    #[test]
    fn unknown_payment_outcomes_widen_the_bounds_all_or_nothing() {
        let mut model = Model::new(3);
        model.initiate_payment(700, Effect::Unknown);
        model.confirm_payment(0, 2, 10_000, Some(9_650), Effect::Unknown);
        model.refund_payment(1, 2, 500, Effect::Unknown);
        let base = [at(100_000, 0), at(100_000, 0), at(1_000, 0)];
        let ids = [1, 2, 3];
        // Neither, the confirm only, the refund only, both.
        for (payer, other, merchant) in [
            (100_000, 100_000, 1_000),
            (90_000, 100_000, 10_650),
            (100_000, 100_500, 500),
            (90_000, 100_500, 10_150),
        ] {
            let actual = [at(payer, 0), at(other, 0), at(merchant, 0)];
            let report = check(&ids, &base, &model, &actual);
            assert!(report.ok, "{actual:?}: {:?}", report.mismatches);
        }
        // Outside the bounds: the payer debited more than the amount, the merchant credited
        // more than the net, or the payer debited with no credit anywhere (the total drops by
        // more than the fee).
        for actual in [
            [at(89_999, 0), at(100_000, 0), at(10_651, 0)],
            [at(100_000, 0), at(100_000, 0), at(10_651, 0)],
            [at(90_000, 0), at(100_000, 0), at(1_000, 0)],
        ] {
            assert!(!check(&ids, &base, &model, &actual).ok, "{actual:?}");
        }
        assert_eq!(model.unknown_total(), 3);
        assert_eq!(model.unknown[Kind::PaymentConfirm.index()], 1);
        assert_eq!(model.unknown_cents[Kind::PaymentRefund.index()], 500);
        assert_eq!(model.unknown_cents[Kind::PaymentInitiate.index()], 700);
    }

    #[test]
    fn a_confirm_without_a_readable_net_allows_zero_to_the_amount() {
        let mut model = Model::new(2);
        model.confirm_payment(0, 1, 1_000, None, Effect::Applied);
        let base = [at(5_000, 0), at(0, 0)];
        for merchant in [0, 990, 1_000] {
            let report = check(&[1, 2], &base, &model, &[at(4_000, 0), at(merchant, 0)]);
            assert!(report.ok, "{merchant}: {:?}", report.mismatches);
        }
        assert!(!check(&[1, 2], &base, &model, &[at(4_000, 0), at(1_001, 0)]).ok);
        assert!(!check(&[1, 2], &base, &model, &[at(5_000, 0), at(0, 0)]).ok);
    }

    #[test]
    fn models_merge_with_the_merchant_entry() {
        let mut total = Model::new(2);
        let mut connection = Model::new(2);
        connection.confirm_payment(0, 2, 300, Some(290), Effect::Applied);
        total.merge(&connection);
        assert_eq!(total.wallets.len(), 3);
        assert_eq!(total.wallets[2].delta, 290);
        assert_eq!(total.wallets[0].delta, -300);
    }

    #[test]
    fn partial_refunds_stay_partial_and_affordable() {
        assert_eq!(partial_refund(1, 1, 5), None);
        assert_eq!(partial_refund(500, 0, 5), None);
        assert_eq!(partial_refund(2, 2, 7), Some(1));
        for pick in 0..1_000 {
            let refund = partial_refund(10_000, 9_650, pick).unwrap();
            assert!((1..=9_650).contains(&refund), "{refund}");
            let refund = partial_refund(10_000, 10_000, pick).unwrap();
            assert!((1..10_000).contains(&refund), "{refund}");
        }
        assert_eq!(partial_refund(10_000, 10_000, 9_998), Some(9_999));
    }
}
