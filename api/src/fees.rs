//! The payment fee schedule from configuration (`--fee-schedule` / `WALLETD_FEE_SCHEDULE`):
//! `CUR:PERCENT[+FIXED]` entries separated by commas, `*` for every currency not named, e.g.
//! `YER:2.5+1,USD:2.9+0.30,*:1`. Empty (the default): no fees.
//!
//! The schedule is read once at start; the engine stores each payment's split when it is
//! initiated, so changing the schedule never changes a recorded payment (engine `fee` docs).

use std::collections::BTreeMap;

use engine::values::fee::FeeRule;
use engine::Currency;
use rust_decimal::Decimal;

/// Per-currency fee rules.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct FeeSchedule {
    rules: BTreeMap<Currency, FeeRule>,
    fallback: Option<FeeRule>,
}

impl FeeSchedule {
    /// Parses the configuration text; the error names the faulty entry.
    pub fn parse(text: &str) -> Result<Self, String> {
        let mut schedule = FeeSchedule::default();
        for entry in text.split(',').map(str::trim).filter(|e| !e.is_empty()) {
            let (code, rule) = entry
                .split_once(':')
                .ok_or_else(|| format!("fee entry {entry:?}: expected CUR:PERCENT[+FIXED]"))?;
            let (percent, fixed) = rule.split_once('+').unwrap_or((rule, "0"));
            let number = |text: &str, what: &str| {
                Decimal::from_str_exact(text.trim())
                    .map_err(|_| format!("fee entry {entry:?}: {what} {text:?} is not a decimal"))
            };
            let rule = FeeRule {
                percent: number(percent, "percent")?,
                fixed: number(fixed, "fixed fee")?,
            };
            if code.trim() == "*" {
                if schedule.fallback.replace(rule).is_some() {
                    return Err("fee schedule names * twice".into());
                }
                continue;
            }
            let currency = Currency::from_code(code.trim())
                .map_err(|_| format!("fee entry {entry:?}: unknown currency {code:?}"))?;
            rule.validate(currency)
                .map_err(|rejection| format!("fee entry {entry:?}: {rejection}"))?;
            if schedule.rules.insert(currency, rule).is_some() {
                return Err(format!("fee schedule names {} twice", currency.code()));
            }
        }
        schedule.validate_fallback()?;
        Ok(schedule)
    }

    /// The `*` rule applies to every currency the schedule does not name, so it must be valid for
    /// each of them (a fixed fee of `0.5` cannot apply to a currency without minor units). Found
    /// only at the first payment in that currency otherwise, as a 422 nobody could fix.
    fn validate_fallback(&self) -> Result<(), String> {
        let Some(rule) = self.fallback else {
            return Ok(());
        };
        for currency in Currency::all().filter(|c| !self.rules.contains_key(c)) {
            rule.validate(currency).map_err(|rejection| {
                format!(
                    "fee entry for * (every currency not named) does not fit {}: {rejection}",
                    currency.code()
                )
            })?;
        }
        Ok(())
    }

    /// The rule for `currency`: its own, else the `*` rule, else no fee.
    pub fn rule(&self, currency: Currency) -> FeeRule {
        self.rules
            .get(&currency)
            .or(self.fallback.as_ref())
            .copied()
            .unwrap_or(FeeRule::FREE)
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn d(text: &str) -> Decimal {
        Decimal::from_str_exact(text).unwrap()
    }

    #[test]
    fn parses_rules_fallback_and_no_fee() {
        let schedule = FeeSchedule::parse("YER:2.5+1, USD:2.9+0.30,*:1").unwrap();
        let yer = Currency::from_code("YER").unwrap();
        let usd = Currency::from_code("USD").unwrap();
        let eur = Currency::from_code("EUR").unwrap();
        assert_eq!(
            schedule.rule(yer),
            FeeRule {
                percent: d("2.5"),
                fixed: d("1")
            }
        );
        assert_eq!(
            schedule.rule(usd),
            FeeRule {
                percent: d("2.9"),
                fixed: d("0.30")
            }
        );
        assert_eq!(
            schedule.rule(eur),
            FeeRule {
                percent: d("1"),
                fixed: d("0")
            }
        );
        assert_eq!(FeeSchedule::parse("").unwrap().rule(eur), FeeRule::FREE);
    }

    #[test]
    fn refuses_bad_entries_with_a_reason() {
        for bad in [
            "YER",
            "XXX:1",
            "YER:abc",
            "YER:101",
            "YER:1+0.001",
            "YER:1,YER:2",
            "*:1,*:2",
        ] {
            assert!(FeeSchedule::parse(bad).is_err(), "{bad}");
        }
    }

    /// Issue 16, item 11: the `*` fallback is checked like a named entry, against every currency
    /// it applies to. Before, `*:101` or a fixed fee finer than a currency's minor unit started
    /// and refused every payment in those currencies with a 422.
    #[test]
    fn issue_16_an_invalid_fallback_is_refused_naming_the_currency() {
        for bad in ["*:101", "*:-1", "*:1+-2", "*:0.0000001", "*:1+0.001"] {
            let error = FeeSchedule::parse(bad).unwrap_err();
            assert!(error.contains("fee entry for *"), "{bad}: {error}");
        }
        // A fixed fee some currencies can hold and others (no minor units) cannot.
        assert!(Currency::all().any(|c| c.minor_units() == 0));
        let error = FeeSchedule::parse("*:1+0.5").unwrap_err();
        assert!(error.contains("minor unit"), "{error}");
        // Valid for every currency it applies to: accepted.
        assert!(FeeSchedule::parse("*:2.5+1").is_ok());
        assert!(FeeSchedule::parse("YER:1,*:0").is_ok());
    }
}
