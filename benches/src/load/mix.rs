//! Operations, the weighted mix, and the seeded RNG every choice comes from.

use std::fmt;

/// What one step of a connection's loop does.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash)]
pub enum Op {
    Deposit,
    Withdraw,
    Transfer,
    /// Place a hold, then capture or release it (two requests).
    Hold,
    Balance,
    /// A customer pays the run's merchant: initiate, then confirm; one completed payment in
    /// [`REFUND_ONE_IN`] is then partly refunded by the merchant (two or three requests).
    Payment,
}

/// One completed payment in this many is partly refunded.
pub const REFUND_ONE_IN: u64 = 4;

impl Op {
    pub const ALL: [Op; 6] = [
        Op::Deposit,
        Op::Withdraw,
        Op::Transfer,
        Op::Hold,
        Op::Balance,
        Op::Payment,
    ];

    pub fn name(self) -> &'static str {
        match self {
            Op::Deposit => "deposit",
            Op::Withdraw => "withdraw",
            Op::Transfer => "transfer",
            Op::Hold => "hold",
            Op::Balance => "balance",
            Op::Payment => "payment",
        }
    }

    fn parse(name: &str) -> Option<Op> {
        Op::ALL.into_iter().find(|op| op.name() == name)
    }
}

/// One kind of HTTP request; latencies and statuses are kept per kind.
#[derive(Copy, Clone, Debug, PartialEq, Eq, Hash, PartialOrd, Ord)]
pub enum Kind {
    Deposit,
    Withdraw,
    Transfer,
    HoldPlace,
    HoldCapture,
    HoldRelease,
    Balance,
    PaymentInitiate,
    PaymentConfirm,
    PaymentRefund,
}

impl Kind {
    pub const ALL: [Kind; 10] = [
        Kind::Deposit,
        Kind::Withdraw,
        Kind::Transfer,
        Kind::HoldPlace,
        Kind::HoldCapture,
        Kind::HoldRelease,
        Kind::Balance,
        Kind::PaymentInitiate,
        Kind::PaymentConfirm,
        Kind::PaymentRefund,
    ];
    pub const COUNT: usize = Kind::ALL.len();

    pub fn name(self) -> &'static str {
        match self {
            Kind::Deposit => "deposit",
            Kind::Withdraw => "withdraw",
            Kind::Transfer => "transfer",
            Kind::HoldPlace => "hold_place",
            Kind::HoldCapture => "hold_capture",
            Kind::HoldRelease => "hold_release",
            Kind::Balance => "balance",
            Kind::PaymentInitiate => "payment_initiate",
            Kind::PaymentConfirm => "payment_confirm",
            Kind::PaymentRefund => "payment_refund",
        }
    }

    pub fn index(self) -> usize {
        self as usize
    }
}

/// Weighted operations, e.g. `deposit=40,transfer=40,withdraw=10,hold=10` or
/// `deposit=40,transfer=40,payment=20`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Mix {
    weights: Vec<(Op, u32)>,
    total: u32,
}

impl Mix {
    pub fn parse(text: &str) -> Result<Mix, String> {
        let mut weights: Vec<(Op, u32)> = Vec::new();
        for part in text.split(',').map(str::trim).filter(|p| !p.is_empty()) {
            let (name, weight) = part.split_once('=').unwrap_or((part, "1"));
            let op = Op::parse(name.trim()).ok_or_else(|| {
                format!(
                    "unknown operation {name:?} (deposit, withdraw, transfer, hold, balance, payment)"
                )
            })?;
            let weight: u32 = weight
                .trim()
                .parse()
                .map_err(|_| format!("weight of {name} must be a whole number"))?;
            if weights.iter().any(|(seen, _)| *seen == op) {
                return Err(format!("{name} is listed twice"));
            }
            if weight > 0 {
                weights.push((op, weight));
            }
        }
        let total = weights.iter().map(|(_, w)| *w).sum::<u32>();
        if total == 0 {
            return Err("the mix needs at least one operation with a positive weight".into());
        }
        Ok(Mix { weights, total })
    }

    pub fn pick(&self, rng: &mut Rng) -> Op {
        let mut ticket = rng.below(u64::from(self.total)) as u32;
        for (op, weight) in &self.weights {
            if ticket < *weight {
                return *op;
            }
            ticket -= weight;
        }
        self.weights.last().map_or(Op::Balance, |(op, _)| *op)
    }

    pub fn has(&self, op: Op) -> bool {
        self.weights.iter().any(|(o, _)| *o == op)
    }
}

impl fmt::Display for Mix {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        for (i, (op, weight)) in self.weights.iter().enumerate() {
            if i > 0 {
                f.write_str(",")?;
            }
            write!(f, "{}={weight}", op.name())?;
        }
        Ok(())
    }
}

/// SplitMix64: tiny, fast, and good enough to pick operations and amounts reproducibly.
#[derive(Clone, Debug)]
pub struct Rng(u64);

impl Rng {
    pub fn new(seed: u64) -> Rng {
        Rng(seed)
    }

    /// An independent stream for `index` (a connection), derived from the run seed.
    pub fn stream(seed: u64, index: u64) -> Rng {
        let mut base = Rng(seed ^ index.wrapping_mul(0xA076_1D64_78BD_642F));
        Rng(base.next_u64())
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }

    /// Uniform in `0..n` (n > 0), by Lemire's multiply-shift (bias below 2^-32 for small n).
    pub fn below(&mut self, n: u64) -> u64 {
        ((u128::from(self.next_u64()) * u128::from(n.max(1))) >> 64) as u64
    }

    /// Uniform in `low..=high`.
    pub fn between(&mut self, low: i64, high: i64) -> i64 {
        let span = (high - low).max(0) as u64 + 1;
        low + self.below(span) as i64
    }

    pub fn coin(&mut self) -> bool {
        self.next_u64() & 1 == 1
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn mixes_parse_and_pick_by_weight() {
        let mix = Mix::parse("deposit=40,transfer=40,withdraw=10,hold=10").unwrap();
        assert_eq!(
            mix.to_string(),
            "deposit=40,transfer=40,withdraw=10,hold=10"
        );
        let mut rng = Rng::new(7);
        let mut counts = std::collections::HashMap::new();
        for _ in 0..100_000 {
            *counts.entry(mix.pick(&mut rng)).or_insert(0u32) += 1;
        }
        let deposits = counts[&Op::Deposit];
        assert!((38_000..42_000).contains(&deposits), "{deposits}");
        assert!(!counts.contains_key(&Op::Balance));
        assert!(Mix::parse("deposit=0").is_err());
        assert!(Mix::parse("nope=1").is_err());
        assert!(Mix::parse("deposit=1,deposit=2").is_err());
        assert_eq!(Mix::parse("transfer").unwrap().to_string(), "transfer=1");
    }

    #[test]
    fn payments_parse_into_the_mix() {
        let mix = Mix::parse("deposit=40, transfer=40, payment=20").unwrap();
        assert!(mix.has(Op::Payment));
        assert!(!mix.has(Op::Hold));
        assert_eq!(mix.to_string(), "deposit=40,transfer=40,payment=20");
        let mut rng = Rng::new(11);
        let payments = (0..50_000)
            .filter(|_| mix.pick(&mut rng) == Op::Payment)
            .count();
        assert!((9_000..11_000).contains(&payments), "{payments}");
        assert_eq!(Mix::parse("payment").unwrap().to_string(), "payment=1");
        assert!(!Mix::parse("payment=0,deposit=1").unwrap().has(Op::Payment));
        assert!(Mix::parse("payment=1,payment=1").is_err());
        assert!(Mix::parse("payments=1").is_err());
        assert!(Mix::parse("payment=-1").is_err());
        // Every kind has its own name in the report.
        let names: std::collections::HashSet<_> = Kind::ALL.iter().map(|k| k.name()).collect();
        assert_eq!(names.len(), Kind::COUNT);
        assert!(names.contains("payment_initiate") && names.contains("payment_refund"));
        assert!(Kind::ALL.iter().enumerate().all(|(i, k)| k.index() == i));
    }

    #[test]
    fn streams_are_reproducible() {
        let a: Vec<u64> = (0..4).map(|_| Rng::stream(1, 2).next_u64()).collect();
        assert!(a.windows(2).all(|w| w[0] == w[1]));
        assert_ne!(Rng::stream(1, 2).next_u64(), Rng::stream(1, 3).next_u64());
    }
}
