//! Payment fees: a rule (percent plus fixed) and the exact split of an amount into fee and net.
//!
//! The fee schedule is configuration, not state: the caller passes the currency's [`FeeRule`] in
//! the command that initiates a payment, the engine computes the split once and stores it in the
//! event, so replay never needs the schedule (a schedule change affects only later payments).
//!
//! ```text
//! fee = round_half_even(amount × percent / 100, currency scale) + fixed, at most amount
//! net = amount − fee                                               (so fee + net = amount, net ≥ 0)
//! ```
//!
//! Arithmetic is exact: `amount` ≤ 1e12 with at most 3 fraction digits, `percent` ≤ 100 with at
//! most [`PERCENT_SCALE_MAX`] fraction digits, so `amount × percent` has at most 23 significant
//! digits and 9 fraction digits, inside `Decimal`'s 28; the only rounding is the explicit one
//! (banker's rounding, ties to even, as ledgers usually round).

use rust_decimal::{Decimal, RoundingStrategy};

use crate::values::currency::Currency;
use crate::values::error::Rejection;
use crate::values::money::{to_currency_scale, zero, AMOUNT_MAX};

/// Most fraction digits of a fee percentage (0.000001 %).
pub const PERCENT_SCALE_MAX: u32 = 6;

const HUNDRED: Decimal = Decimal::from_parts(100, 0, 0, false, 0);

/// A currency's fee: `percent` of the amount (0 to 100) plus a `fixed` amount (≥ 0, at most the
/// currency's minor unit of fraction digits).
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeeRule {
    pub percent: Decimal,
    pub fixed: Decimal,
}

/// An amount split into the fee and what the merchant nets, both at the currency's scale.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeeSplit {
    pub fee_amount: Decimal,
    pub net_amount: Decimal,
}

impl FeeRule {
    /// No fee.
    pub const FREE: FeeRule = FeeRule {
        percent: Decimal::ZERO,
        fixed: Decimal::ZERO,
    };

    /// Checks the rule for `currency` (`invalid_request` when out of range).
    pub fn validate(&self, currency: Currency) -> Result<(), Rejection> {
        if self.percent < Decimal::ZERO || self.percent > HUNDRED {
            return Err(Rejection::InvalidRequest("fee percent must be 0 to 100"));
        }
        if self.percent.normalize().scale() > PERCENT_SCALE_MAX {
            return Err(Rejection::InvalidRequest(
                "fee percent has more than 6 fraction digits",
            ));
        }
        if self.fixed < Decimal::ZERO
            || self.fixed > AMOUNT_MAX
            || self.fixed.normalize().scale() > currency.minor_units()
        {
            return Err(Rejection::InvalidRequest(
                "fixed fee must be 0 to 1e12 in the currency's minor unit",
            ));
        }
        Ok(())
    }

    /// Splits a validated `amount` (see the module docs). Fails only on a rule that
    /// [`FeeRule::validate`] refuses.
    pub fn split(&self, amount: Decimal, currency: Currency) -> Result<FeeSplit, Rejection> {
        self.validate(currency)?;
        let scale = currency.minor_units();
        let percentage = amount
            .checked_mul(self.percent)
            .and_then(|product| product.checked_div(HUNDRED))
            .ok_or(Rejection::LimitExceeded("fee"))?
            .round_dp_with_strategy(scale, RoundingStrategy::MidpointNearestEven);
        let fee = percentage
            .checked_add(self.fixed)
            .ok_or(Rejection::LimitExceeded("fee"))?
            .min(amount);
        let fee_amount = to_currency_scale(fee, currency);
        let net_amount = amount
            .checked_sub(fee_amount)
            .map(|net| to_currency_scale(net, currency))
            .filter(|net| *net >= zero(currency))
            .ok_or(Rejection::LimitExceeded("fee"))?;
        Ok(FeeSplit {
            fee_amount,
            net_amount,
        })
    }
}
