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
        Ok(schedule)
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
}
