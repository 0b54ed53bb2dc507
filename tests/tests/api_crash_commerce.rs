//! Commerce crash drill over HTTP: a merchant, its staff and funded customers on a 4-shard
//! `walletd`, with client threads running payments (initiate, confirm, cancel, partial refunds),
//! payouts from the merchant wallet (create holds the funds; approve or reject by a second
//! employee; cancel; execute) and deposits and transfers, all under idempotency keys. Every
//! acknowledged (2xx) step is recorded with the exact amounts the server answered (fee and net
//! read as decimal text, never through f64). After a seeded random number of acknowledgements the
//! server is SIGKILLed, then restarted on the same data dir, and:
//!
//! - every acknowledged step is there: each payment's status, refunded amount, amount, fee and net
//!   (`GET /v1/payments/{uuid}/status`) and each payout's status and amount
//!   (`GET /v1/payouts/{id}`, and the wallet's payout list holds no payout nobody asked for);
//! - each thread has at most one step in flight at the kill; where the durable state says whether
//!   it was applied (a payment's status or refunded amount, a payout's status, a payout found by
//!   its idempotency key), its money must have moved exactly when its status says so; the outcome
//!   of an in-flight deposit or transfer is unobservable, so every subset of those is tried;
//! - the money is exact: every customer's balance, the merchant's balance and held balance, and
//!   the fees collected (fee report) equal the start plus the acknowledged effects plus the
//!   applied in-flight ones: no payment, refund or payout is ever half moved;
//! - then each in-flight step is retried with its idempotency key, as a client would: one that
//!   was applied answers its stored answer (`Idempotent-Replayed: true`) and moves nothing, one
//!   that was not runs now; the whole state is checked again, exactly;
//! - every wallet's ledger verifies (`verify-integrity`).
//!
//! That is done [`ROUNDS`] times on the same data dir (a crash of a recovered server); finally the
//! server stops gracefully and `walletd replay --verify` rebuilds the state and checks double
//! entry per currency across shards, hash chains and that no cross-shard move is half done.
//!
//! Money semantics (engine `decide_payment*.rs`, `decide_payout.rs`): confirm debits the payer
//! the amount, credits the merchant the net and the fee account the fee; a refund debits the
//! merchant and credits the payer the refunded amount (the fee is kept); a payout's create holds
//! the amount on the merchant wallet, reject and cancel release it, execute captures it (balance
//! and held both drop by the amount) into payout clearing.
//!
//! The seed is printed; rerun with `WALLETD_API_CRASH_COMMERCE_SEED=<seed>` (thread interleaving
//! still varies from run to run).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Instant, SystemTime, UNIX_EPOCH};

use rust_decimal::{Decimal, RoundingStrategy};
use serde_json::{json, Value};
use walletd_tests::acks::AckCount;
use walletd_tests::crash::XorShift;
use walletd_tests::http::{self, Response};
use walletd_tests::server::{
    decimal, exact_json, Customer, Employee, Options, Server, PLATFORM_BUSINESS_ID,
};

/// Shard actors: customers and the merchant spread over them, so most payments and refunds take
/// the cross-shard reserve/credit/finalize path.
const SHARDS: u32 = 4;
const CUSTOMERS: usize = 6;
/// Threads that initiate, confirm, cancel and refund payments.
const PAYMENT_THREADS: usize = 4;
/// Threads that create, approve, reject, cancel and execute payouts.
const PAYOUT_THREADS: usize = 2;
/// Threads that deposit into and transfer between customer wallets.
const BANK_THREADS: usize = 1;
/// Load, SIGKILL, restart and check, this many times on the same data dir.
const ROUNDS: usize = 2;
/// Cents each customer starts with.
const CUSTOMER_FUNDS_CENTS: i64 = 300_000;
/// Cents the merchant wallet starts with (so payouts and refunds have funds from the start).
const MERCHANT_FUNDS_CENTS: i64 = 200_000;

/// Where money is counted. `Fees` is the fee account as the merchant's fee report shows it;
/// `PaidOut` (payout clearing) and `Deposited` are only counted by the model.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Account {
    Customer(usize),
    Merchant,
    MerchantHeld,
    Fees,
    PaidOut,
    Deposited,
}

impl Account {
    /// Whether the server shows this account's amount to the drill.
    fn observable(self) -> bool {
        !matches!(self, Account::PaidOut | Account::Deposited)
    }
}

/// A payment as its initiation answered it.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Payment {
    uuid: String,
    payer: usize,
    amount: Decimal,
    fee: Decimal,
    net: Decimal,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Action {
    Approve,
    Reject,
    Cancel,
    Execute,
}

impl Action {
    fn path(self) -> &'static str {
        match self {
            Action::Approve => "approve",
            Action::Reject => "reject",
            Action::Cancel => "cancel",
            Action::Execute => "execute",
        }
    }

    fn status(self) -> &'static str {
        match self {
            Action::Approve => "approved",
            Action::Reject => "rejected",
            Action::Cancel => "cancelled",
            Action::Execute => "executed",
        }
    }
}

/// What a step does. `Initiate::payment` and `CreatePayout::id` are filled in once known (from
/// the answer, or after the crash from the durable state).
#[derive(Debug, Clone)]
enum Kind {
    Deposit {
        customer: usize,
        amount: Decimal,
    },
    Transfer {
        from: usize,
        to: usize,
        amount: Decimal,
    },
    Initiate {
        payer: usize,
        amount: Decimal,
        payment: Option<Payment>,
    },
    Confirm(Payment),
    CancelPayment(Payment),
    Refund {
        payment: Payment,
        amount: Decimal,
    },
    CreatePayout {
        amount: Decimal,
        key: String,
        id: Option<u64>,
    },
    Payout {
        id: u64,
        amount: Decimal,
        action: Action,
    },
}

impl Kind {
    /// The change this step makes to each account.
    fn effects(&self) -> Vec<(Account, Decimal)> {
        match self {
            Kind::Deposit { customer, amount } => vec![
                (Account::Customer(*customer), *amount),
                (Account::Deposited, *amount),
            ],
            Kind::Transfer { from, to, amount } => vec![
                (Account::Customer(*from), -*amount),
                (Account::Customer(*to), *amount),
            ],
            Kind::Initiate { .. } | Kind::CancelPayment(_) => Vec::new(),
            Kind::Confirm(payment) => vec![
                (Account::Customer(payment.payer), -payment.amount),
                (Account::Merchant, payment.net),
                (Account::Fees, payment.fee),
            ],
            Kind::Refund { payment, amount } => vec![
                (Account::Merchant, -*amount),
                (Account::Customer(payment.payer), *amount),
            ],
            Kind::CreatePayout { amount, .. } => vec![(Account::MerchantHeld, *amount)],
            Kind::Payout { amount, action, .. } => match action {
                Action::Approve => Vec::new(),
                Action::Reject | Action::Cancel => vec![(Account::MerchantHeld, -*amount)],
                Action::Execute => vec![
                    (Account::Merchant, -*amount),
                    (Account::MerchantHeld, -*amount),
                    (Account::PaidOut, *amount),
                ],
            },
        }
    }
}

/// A request as sent, so it can be sent again after the crash under the same key.
#[derive(Debug, Clone)]
struct Step {
    kind: Kind,
    path: String,
    token: String,
    key: String,
    body: String,
}

impl Step {
    fn send(&self, address: SocketAddr) -> std::io::Result<Response> {
        let authorization = format!("Bearer {}", self.token);
        http::send(
            address,
            "POST",
            &self.path,
            &[
                ("Authorization", &authorization),
                ("Idempotency-Key", &self.key),
            ],
            Some(self.body.as_bytes()),
        )
    }
}

#[derive(Debug, Clone)]
struct PaymentState {
    payment: Payment,
    status: String,
    refunded: Decimal,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct PayoutState {
    amount: Decimal,
    key: String,
    status: String,
}

/// What the server must hold: money per account, every payment and payout the drill knows of.
#[derive(Debug, Clone, Default)]
struct Model {
    money: BTreeMap<Account, Decimal>,
    payments: BTreeMap<String, PaymentState>,
    payouts: BTreeMap<u64, PayoutState>,
}

impl Model {
    fn add_money(&mut self, effects: &[(Account, Decimal)]) {
        for (account, delta) in effects {
            *self.money.entry(*account).or_default() += *delta;
        }
    }

    /// Applies a step that took effect (`Initiate::payment` and `CreatePayout::id` filled in).
    fn apply(&mut self, kind: &Kind) {
        self.add_money(&kind.effects());
        match kind {
            Kind::Deposit { .. } | Kind::Transfer { .. } => {}
            Kind::Initiate { payment, .. } => {
                let payment = payment.clone().expect("an initiated payment's details");
                let previous = self.payments.insert(
                    payment.uuid.clone(),
                    PaymentState {
                        refunded: Decimal::ZERO,
                        status: "pending".into(),
                        payment,
                    },
                );
                assert!(previous.is_none(), "a payment initiated twice");
            }
            Kind::Confirm(payment) | Kind::CancelPayment(payment) => {
                let state = self
                    .payments
                    .get_mut(&payment.uuid)
                    .unwrap_or_else(|| panic!("payment {} is not in the model", payment.uuid));
                assert_eq!(state.status, "pending", "{kind:?} on {state:?}");
                state.status = if matches!(kind, Kind::Confirm(_)) {
                    "completed".into()
                } else {
                    "cancelled".into()
                };
            }
            Kind::Refund { payment, amount } => {
                let state = self
                    .payments
                    .get_mut(&payment.uuid)
                    .unwrap_or_else(|| panic!("payment {} is not in the model", payment.uuid));
                state.refunded += *amount;
                assert!(state.refunded <= payment.amount, "{kind:?} on {state:?}");
                state.status = if state.refunded == payment.amount {
                    "refunded".into()
                } else {
                    "partially_refunded".into()
                };
            }
            Kind::CreatePayout { amount, key, id } => {
                let id = id.expect("a created payout's id");
                let previous = self.payouts.insert(
                    id,
                    PayoutState {
                        amount: *amount,
                        key: key.clone(),
                        status: "pending".into(),
                    },
                );
                assert!(previous.is_none(), "payout {id} created twice");
            }
            Kind::Payout { id, action, .. } => {
                let state = self
                    .payouts
                    .get_mut(id)
                    .unwrap_or_else(|| panic!("payout {id} is not in the model"));
                state.status = action.status().into();
            }
        }
    }

    /// Payments that completed (their fee stays collected through refunds).
    fn completed_payments(&self) -> usize {
        self.payments
            .values()
            .filter(|p| {
                matches!(
                    p.status.as_str(),
                    "completed" | "partially_refunded" | "refunded"
                )
            })
            .count()
    }
}

/// What one client thread saw.
#[derive(Debug, Default)]
struct ThreadLog {
    /// Acknowledged steps, in the order they were answered.
    acked: Vec<Kind>,
    /// Refused with 422 `insufficient_funds`: must not be applied.
    refused: usize,
    /// Sent but not answered (the kill): may or may not be applied.
    in_flight: Option<Step>,
    /// Answers the drill did not expect; the test fails on any.
    unexpected: Vec<String>,
}

/// The business, its staff and the customers.
struct Setup {
    merchant_id: u64,
    merchant_wallet: u64,
    /// Roles operator, finance, merchant, merchant_finance of the merchant: deposits into the
    /// merchant wallet, refunds, creates and cancels payouts, reads everything.
    creator: Employee,
    /// Roles restricted_approver, restricted_operator of the merchant: approves, rejects and
    /// executes the creator's payouts (four eyes).
    approver: Employee,
    /// restricted_auditor of the merchant: verifies the merchant wallet's ledger.
    merchant_auditor: Employee,
    /// Operator of the platform business: deposits into and transfers between customer wallets.
    operator: Employee,
    /// restricted_auditor of the platform business: verifies customer ledgers.
    platform_auditor: Employee,
    customers: Vec<Customer>,
}

/// What every client thread of a round shares.
struct Shared {
    address: SocketAddr,
    round: usize,
    merchant_id: u64,
    merchant_wallet: u64,
    creator: String,
    approver: String,
    operator: String,
    customers: Vec<(u64, String)>,
    acks: AckCount,
    stop: AtomicBool,
}

enum Answer {
    Acked(Response),
    Refused,
    Stop,
}

struct Worker {
    shared: Arc<Shared>,
    rng: XorShift,
    label: String,
    next_key: u64,
    log: ThreadLog,
}

fn cents(amount: i64) -> Decimal {
    Decimal::new(amount, 2)
}

/// The cents of an exact decimal with at most 2 fraction digits.
fn cents_of(value: Decimal) -> i64 {
    let mut scaled = value;
    scaled.rescale(2);
    assert_eq!(scaled, value, "{value} has more than 2 decimals");
    i64::try_from(scaled.mantissa()).expect("cents fit in i64")
}

/// The fee of the test servers' YER rule, 2.5 % + 1.00 (docs/commerce-api.md): half-even to the
/// minor unit, plus the fixed part, at most the amount.
fn yer_fee(amount: Decimal) -> Decimal {
    let percentage = (amount * Decimal::new(25, 3))
        .round_dp_with_strategy(2, RoundingStrategy::MidpointNearestEven);
    (percentage + Decimal::ONE).min(amount)
}

/// `error.code` of a standard error, or `data.error_code` of a payment envelope.
fn refusal_code(response: &Response) -> String {
    let body: Value = serde_json::from_slice(&response.body).unwrap_or(Value::Null);
    body["error"]["code"]
        .as_str()
        .or_else(|| body["data"]["error_code"].as_str())
        .unwrap_or_default()
        .to_owned()
}

fn replayed(response: &Response) -> bool {
    response.header("idempotent-replayed") == Some("true")
}

/// Reads a PaymentResult answer: the payment, its status and refunded amount.
fn payment_answer(response: &Response, payer: usize) -> (Payment, String, Decimal) {
    let exact = exact_json(&response.body);
    let data = &exact["data"];
    let payment = Payment {
        uuid: data["transaction_id"]
            .as_str()
            .unwrap_or_else(|| panic!("transaction_id in {}", response.text()))
            .to_owned(),
        payer,
        amount: decimal(&data["amount"]),
        fee: decimal(&data["fee_amount"]),
        net: decimal(&data["net_amount"]),
    };
    let status = data["status"].as_str().unwrap_or_default().to_owned();
    (payment, status, decimal(&data["refunded_amount"]))
}

impl Worker {
    fn key(&mut self, what: &str) -> String {
        self.next_key += 1;
        format!(
            "r{}-{}-{}-{what}",
            self.shared.round, self.label, self.next_key
        )
    }

    fn customer(&self, index: usize) -> (u64, String) {
        self.shared.customers[index].clone()
    }

    /// Sends `step`; a 2xx is handed back to be checked and recorded by [`Worker::acked`].
    fn attempt(&mut self, step: &Step) -> Answer {
        if self.shared.stop.load(Ordering::SeqCst) {
            return Answer::Stop;
        }
        match step.send(self.shared.address) {
            Ok(response) if (200..300).contains(&response.status) && !replayed(&response) => {
                Answer::Acked(response)
            }
            Ok(response)
                if response.status == 422 && refusal_code(&response) == "insufficient_funds" =>
            {
                self.log.refused += 1;
                Answer::Refused
            }
            Ok(response) => {
                self.unexpected(step, &response);
                self.log.in_flight = Some(step.clone());
                Answer::Stop
            }
            Err(_) => {
                // The kill: this one may or may not have been applied.
                self.log.in_flight = Some(step.clone());
                Answer::Stop
            }
        }
    }

    fn unexpected(&mut self, step: &Step, response: &Response) {
        self.log.unexpected.push(format!(
            "{} {:?} answered {}: {}",
            self.label,
            step.kind,
            response.status,
            response.text()
        ));
    }

    fn acked(&mut self, kind: Kind) {
        self.log.acked.push(kind);
        self.shared.acks.add();
    }

    fn payment_step(&mut self, kind: Kind, action: &str, token: String, body: String) -> Step {
        let uuid = match &kind {
            Kind::Confirm(p) | Kind::CancelPayment(p) | Kind::Refund { payment: p, .. } => {
                p.uuid.clone()
            }
            _ => unreachable!("not a payment step"),
        };
        Step {
            kind,
            path: format!("/v1/payments/{uuid}/{action}"),
            token,
            key: self.key(action),
            body,
        }
    }

    /// Initiate; then cancel (1 in 10) or confirm; then up to two partial or full refunds.
    fn payment_round(&mut self) -> bool {
        let payer = self.rng.below(CUSTOMERS as u64) as usize;
        let (payer_wallet, payer_token) = self.customer(payer);
        // Now and then under 1.00, where the fixed fee takes it all and the merchant nets 0;
        // now and then more than the payer has, refused at confirm with nothing moved.
        let amount = if self.rng.below(8) == 0 {
            cents(1 + self.rng.below(150) as i64)
        } else if self.rng.below(12) == 0 {
            cents(CUSTOMER_FUNDS_CENTS * 3)
        } else {
            cents(1 + self.rng.below(30_000) as i64)
        };
        let step = Step {
            kind: Kind::Initiate {
                payer,
                amount,
                payment: None,
            },
            path: "/v1/payments/initiate".into(),
            token: payer_token.clone(),
            key: self.key("initiate"),
            body: format!(
                r#"{{"merchant_id": {}, "wallet_id": {payer_wallet}, "amount": {amount}, "currency_code": "YER", "description": "drill"}}"#,
                self.shared.merchant_id
            ),
        };
        let response = match self.attempt(&step) {
            Answer::Acked(response) => response,
            Answer::Refused => return true,
            Answer::Stop => return false,
        };
        let (payment, status, _) = payment_answer(&response, payer);
        if response.status != 201
            || status != "pending"
            || payment.amount != amount
            || payment.fee != yer_fee(amount)
            || payment.fee + payment.net != amount
        {
            self.unexpected(&step, &response);
        }
        self.acked(Kind::Initiate {
            payer,
            amount,
            payment: Some(payment.clone()),
        });
        if !self.log.unexpected.is_empty() {
            return false;
        }

        if self.rng.below(10) == 0 {
            let step = self.payment_step(
                Kind::CancelPayment(payment.clone()),
                "cancel",
                payer_token,
                "{}".into(),
            );
            return self.expect_payment(step, "cancelled", Decimal::ZERO) != Some(false);
        }
        let step = self.payment_step(
            Kind::Confirm(payment.clone()),
            "confirm",
            payer_token,
            "{}".into(),
        );
        match self.expect_payment(step, "completed", Decimal::ZERO) {
            Some(true) => {}
            Some(false) => return false,
            None => return true,
        }
        let mut refunded = Decimal::ZERO;
        for _ in 0..self.rng.below(3) {
            let left = payment.amount - refunded;
            let amount = if self.rng.below(4) == 0 {
                left
            } else {
                cents(1 + self.rng.below(cents_of(left) as u64) as i64)
            };
            let step = self.payment_step(
                Kind::Refund {
                    payment: payment.clone(),
                    amount,
                },
                "refund",
                self.shared.creator.clone(),
                format!(r#"{{"amount": {amount}, "reason": "drill"}}"#),
            );
            refunded += amount;
            let status = if refunded == payment.amount {
                "refunded"
            } else {
                "partially_refunded"
            };
            match self.expect_payment(step, status, refunded) {
                Some(true) => {}
                Some(false) => return false,
                None => return true,
            }
            if refunded == payment.amount {
                break;
            }
        }
        true
    }

    /// Sends a payment step whose answer must show `status` and `refunded`; records it.
    /// `Some(true)`: acknowledged; `None`: refused; `Some(false)`: stop.
    fn expect_payment(&mut self, step: Step, status: &str, refunded: Decimal) -> Option<bool> {
        let response = match self.attempt(&step) {
            Answer::Acked(response) => response,
            Answer::Refused => return None,
            Answer::Stop => return Some(false),
        };
        let payment = match &step.kind {
            Kind::Confirm(p) | Kind::CancelPayment(p) | Kind::Refund { payment: p, .. } => p,
            _ => unreachable!("not a payment step"),
        };
        let (answered, answered_status, answered_refunded) =
            payment_answer(&response, payment.payer);
        if response.status != 200
            || answered != *payment
            || answered_status != status
            || answered_refunded != refunded
        {
            self.unexpected(&step, &response);
        }
        self.acked(step.kind);
        Some(self.log.unexpected.is_empty())
    }

    /// Create (funds held); then cancel (1 in 10), reject (1 in 10) or approve, and after an
    /// approval cancel (1 in 10) or execute.
    fn payout_round(&mut self) -> bool {
        let amount = cents(1 + self.rng.below(10_000) as i64);
        let key = self.key("payout");
        let step = Step {
            kind: Kind::CreatePayout {
                amount,
                key: key.clone(),
                id: None,
            },
            path: "/v1/payouts".into(),
            token: self.shared.creator.clone(),
            key: key.clone(),
            body: format!(
                r#"{{"wallet_id": {}, "amount": {amount}, "currency_code": "YER", "payout_method": "bank_transfer", "payout_destination": {{"iban": "YE00TEST0001"}}, "idempotency_key": "{key}"}}"#,
                self.shared.merchant_wallet
            ),
        };
        let response = match self.attempt(&step) {
            Answer::Acked(response) => response,
            Answer::Refused => return true,
            Answer::Stop => return false,
        };
        let data = &response.json()["data"];
        let id = data["id"].as_u64().unwrap_or_default();
        if response.status != 201
            || data["status"] != json!("pending")
            || decimal(&exact_json(&response.body)["data"]["amount"]) != amount
        {
            self.unexpected(&step, &response);
        }
        self.acked(Kind::CreatePayout {
            amount,
            key,
            id: Some(id),
        });
        if !self.log.unexpected.is_empty() {
            return false;
        }
        let actions = match self.rng.below(10) {
            0 => vec![Action::Cancel],
            1 => vec![Action::Reject],
            _ if self.rng.below(10) == 0 => vec![Action::Approve, Action::Cancel],
            _ => vec![Action::Approve, Action::Execute],
        };
        for action in actions {
            let (token, body) = match action {
                Action::Approve => (self.shared.approver.clone(), r#"{"notes": "ok"}"#),
                Action::Reject => (self.shared.approver.clone(), r#"{"reason": "drill"}"#),
                Action::Cancel => (self.shared.creator.clone(), "{}"),
                Action::Execute => (self.shared.approver.clone(), "{}"),
            };
            let step = Step {
                kind: Kind::Payout { id, amount, action },
                path: format!("/v1/payouts/{id}/{}", action.path()),
                token,
                key: self.key(action.path()),
                body: body.into(),
            };
            let response = match self.attempt(&step) {
                Answer::Acked(response) => response,
                // A transition moves no new money: nothing to refuse for insufficient funds.
                Answer::Refused => {
                    self.log.unexpected.push(format!("{action:?} refused"));
                    return false;
                }
                Answer::Stop => return false,
            };
            if response.status != 200 || response.json()["data"]["status"] != json!(action.status())
            {
                self.unexpected(&step, &response);
            }
            self.acked(step.kind);
            if !self.log.unexpected.is_empty() {
                return false;
            }
        }
        true
    }

    /// A deposit (1 in 3) or a transfer between two customers.
    fn bank_round(&mut self) -> bool {
        let a = self.rng.below(CUSTOMERS as u64) as usize;
        let b = (a + 1 + self.rng.below(CUSTOMERS as u64 - 1) as usize) % CUSTOMERS;
        let step = if self.rng.below(3) == 0 {
            let amount = cents(1 + self.rng.below(50_000) as i64);
            Step {
                kind: Kind::Deposit {
                    customer: a,
                    amount,
                },
                path: format!("/v1/wallets/{}/deposit", self.shared.customers[a].0),
                token: self.shared.operator.clone(),
                key: self.key("deposit"),
                body: format!(r#"{{"amount": {amount}, "description": "drill"}}"#),
            }
        } else {
            let amount = cents(1 + self.rng.below(20_000) as i64);
            Step {
                kind: Kind::Transfer {
                    from: a,
                    to: b,
                    amount,
                },
                path: "/v1/transfers".into(),
                token: self.shared.operator.clone(),
                key: self.key("transfer"),
                body: format!(
                    r#"{{"from_wallet_id": {}, "to_wallet_id": {}, "amount": {amount}, "currency_code": "YER"}}"#,
                    self.shared.customers[a].0, self.shared.customers[b].0
                ),
            }
        };
        match self.attempt(&step) {
            Answer::Acked(_) => {
                self.acked(step.kind);
                true
            }
            Answer::Refused => true,
            Answer::Stop => false,
        }
    }
}

fn seed() -> u64 {
    match std::env::var("WALLETD_API_CRASH_COMMERCE_SEED") {
        Ok(text) => text
            .parse()
            .expect("WALLETD_API_CRASH_COMMERCE_SEED is a u64"),
        Err(_) => SystemTime::now()
            .duration_since(UNIX_EPOCH)
            .map_or(1, |d| d.as_nanos() as u64),
    }
}

/// The state the server shows.
#[derive(Debug)]
struct Observed {
    money: BTreeMap<Account, Decimal>,
    /// Fee report `count`: payments to the merchant that completed.
    fee_count: u64,
    /// uuid -> (status, refunded, the payment's amounts).
    payments: BTreeMap<String, (String, Decimal, Payment)>,
    /// Every payout of the merchant wallet.
    payouts: BTreeMap<u64, PayoutState>,
}

fn observe(server: &Server, setup: &Setup, model: &Model) -> Observed {
    let mut money = BTreeMap::new();
    for (index, customer) in setup.customers.iter().enumerate() {
        let b = server.balances(&setup.operator.token, customer.wallet_id);
        assert_eq!(
            b.held,
            Decimal::ZERO,
            "customer {index} has nothing held: {b:?}"
        );
        assert_eq!(b.available, b.balance, "customer {index}: {b:?}");
        assert!(b.balance >= Decimal::ZERO, "customer {index}: {b:?}");
        money.insert(Account::Customer(index), b.balance);
    }
    let b = server.balances(&setup.creator.token, setup.merchant_wallet);
    assert_eq!(b.available, b.balance - b.held, "merchant: {b:?}");
    assert!(b.available >= Decimal::ZERO, "merchant spendable: {b:?}");
    money.insert(Account::Merchant, b.balance);
    money.insert(Account::MerchantHeld, b.held);

    let response = server.get("/v1/reports/fees", Some(&setup.creator.token));
    assert_eq!(response.status, 200, "fee report: {}", response.text());
    let report = exact_json(&response.body);
    let rows = report["data"]["rows"].as_array().expect("fee rows").clone();
    let (mut fees, mut fee_count) = (Decimal::ZERO, 0);
    for row in &rows {
        assert_eq!(row["currency_code"], json!("YER"), "{report}");
        fees += decimal(&row["total_fees"]);
        fee_count += row["count"]
            .as_str()
            .and_then(|c| c.parse::<u64>().ok())
            .expect("a count");
    }
    money.insert(Account::Fees, fees);

    let mut payments = BTreeMap::new();
    for (uuid, state) in &model.payments {
        let response = server.get(
            &format!("/v1/payments/{uuid}/status"),
            Some(&setup.creator.token),
        );
        assert_eq!(
            response.status,
            200,
            "status of acknowledged payment {uuid}: {}",
            response.text()
        );
        let (payment, status, refunded) = payment_answer(&response, state.payment.payer);
        payments.insert(uuid.clone(), (status, refunded, payment));
    }

    let mut payouts = BTreeMap::new();
    for page in 1.. {
        let body = server.get_ok(
            &format!(
                "/v1/payouts?wallet_id={}&per_page=100&page={page}",
                setup.merchant_wallet
            ),
            &setup.creator.token,
        );
        let records = body["data"]["data"].as_array().expect("payouts").clone();
        if records.is_empty() {
            break;
        }
        for record in records {
            let id = record["id"].as_u64().expect("payout id");
            let exact = exact_json(record.to_string().as_bytes());
            payouts.insert(
                id,
                PayoutState {
                    amount: decimal(&exact["amount"]),
                    key: record["idempotency_key"]
                        .as_str()
                        .expect("idempotency_key")
                        .to_owned(),
                    status: record["status"].as_str().expect("status").to_owned(),
                },
            );
        }
    }
    // Every payout the drill knows of, one by one too.
    for id in model.payouts.keys() {
        let response = server.get(&format!("/v1/payouts/{id}"), Some(&setup.creator.token));
        assert_eq!(response.status, 200, "payout {id}: {}", response.text());
        let data = &exact_json(&response.body)["data"];
        let one = PayoutState {
            amount: decimal(&data["amount"]),
            key: data["idempotency_key"]
                .as_str()
                .expect("idempotency_key")
                .to_owned(),
            status: data["status"].as_str().expect("status").to_owned(),
        };
        assert_eq!(
            payouts.get(id),
            Some(&one),
            "GET /v1/payouts/{id} and the list disagree"
        );
    }
    Observed {
        money,
        fee_count,
        payments,
        payouts,
    }
}

/// Whether an in-flight step took effect, from the durable state alone; `None` when that state
/// cannot tell (deposits and transfers; an initiation without its uuid, which moves no money).
/// Fills in the id of a payout created in flight. Panics on a state the step cannot explain.
fn resolve(kind: &mut Kind, model: &Model, observed: &Observed, seed: u64) -> Option<bool> {
    let payment_seen = |uuid: &str| {
        let (status, refunded, _) = observed
            .payments
            .get(uuid)
            .unwrap_or_else(|| panic!("payment {uuid} not observed"));
        (status.clone(), *refunded)
    };
    let description = format!("{kind:?}");
    let closed = |payment: &Payment, after: &str| {
        let (status, _) = payment_seen(&payment.uuid);
        assert!(
            status == "pending" || status == after,
            "in-flight {description} left payment status {status:?} (seed {seed})"
        );
        Some(status == after)
    };
    match kind {
        Kind::Deposit { .. } | Kind::Transfer { .. } | Kind::Initiate { .. } => None,
        Kind::Confirm(payment) => closed(payment, "completed"),
        Kind::CancelPayment(payment) => closed(payment, "cancelled"),
        Kind::Refund { payment, amount } => {
            let before = model.payments[&payment.uuid].refunded;
            let (_, refunded) = payment_seen(&payment.uuid);
            assert!(
                refunded == before || refunded == before + *amount,
                "in-flight {description}: refunded {refunded}, acknowledged {before} (seed {seed})"
            );
            Some(refunded != before)
        }
        Kind::CreatePayout { key, id, .. } => {
            let found: Vec<u64> = observed
                .payouts
                .iter()
                .filter(|(_, p)| p.key == *key)
                .map(|(id, _)| *id)
                .collect();
            assert!(
                found.len() <= 1,
                "payout key {key} created {found:?} (seed {seed})"
            );
            *id = found.first().copied();
            Some(id.is_some())
        }
        Kind::Payout {
            id, action, amount, ..
        } => {
            let before = &model.payouts[id].status;
            let seen = &observed
                .payouts
                .get(id)
                .unwrap_or_else(|| panic!("acknowledged payout {id} is gone (seed {seed})"))
                .status;
            assert!(
                seen == before || seen == action.status(),
                "in-flight {action:?} of payout {id} ({amount}) left it {seen:?}, acknowledged \
                 {before:?} (seed {seed})"
            );
            Some(seen == action.status())
        }
    }
}

/// The server's payments and payouts are exactly the model's.
fn check_records(model: &Model, observed: &Observed, seed: u64, when: &str) {
    for (uuid, state) in &model.payments {
        let (status, refunded, payment) = &observed.payments[uuid];
        assert_eq!(
            (status.as_str(), *refunded, payment),
            (state.status.as_str(), state.refunded, &state.payment),
            "{when}: payment {uuid} (status, refunded, amounts) (seed {seed})"
        );
    }
    let model_ids: BTreeSet<&u64> = model.payouts.keys().collect();
    let seen_ids: BTreeSet<&u64> = observed.payouts.keys().collect();
    assert_eq!(
        seen_ids, model_ids,
        "{when}: the merchant wallet's payouts are the acknowledged ones (seed {seed})"
    );
    for (id, state) in &model.payouts {
        assert_eq!(
            &observed.payouts[id], state,
            "{when}: payout {id} (seed {seed})"
        );
    }
}

/// The observable money of the model equals the server's.
fn money_matches(model: &Model, observed: &Observed) -> bool {
    let mut accounts: BTreeSet<Account> = observed.money.keys().copied().collect();
    accounts.extend(model.money.keys().copied().filter(|a| a.observable()));
    accounts.iter().all(|account| {
        model.money.get(account).copied().unwrap_or_default()
            == observed.money.get(account).copied().unwrap_or_default()
    }) && observed.fee_count == model.completed_payments() as u64
}

fn verify_ledgers(server: &Server, setup: &Setup) {
    let mut wallets: Vec<(u64, &str)> = setup
        .customers
        .iter()
        .map(|c| (c.wallet_id, setup.platform_auditor.token.as_str()))
        .collect();
    wallets.push((setup.merchant_wallet, &setup.merchant_auditor.token));
    for (wallet, token) in wallets {
        let report = server.get_ok(&format!("/v1/wallets/{wallet}/verify-integrity"), token);
        assert_eq!(report["data"]["valid"], Value::Bool(true), "{report}");
    }
}

fn set_up(server: &Server) -> (Setup, Model) {
    let merchant_id = server.create_business(true);
    let creator = server.create_employee(
        merchant_id,
        &["operator", "finance", "merchant", "merchant_finance"],
    );
    let approver =
        server.create_employee(merchant_id, &["restricted_approver", "restricted_operator"]);
    let merchant_auditor = server.create_employee(merchant_id, &["restricted_auditor"]);
    let operator = server.create_employee(PLATFORM_BUSINESS_ID, &["operator"]);
    let platform_auditor = server.create_employee(PLATFORM_BUSINESS_ID, &["restricted_auditor"]);
    let merchant_wallet = server.create_merchant_wallet(&creator.token, merchant_id, "YER")["id"]
        .as_u64()
        .expect("merchant wallet id");
    let mut model = Model::default();
    server.deposit(
        &creator.token,
        merchant_wallet,
        &cents(MERCHANT_FUNDS_CENTS).to_string(),
    );
    model.add_money(&[
        (Account::Merchant, cents(MERCHANT_FUNDS_CENTS)),
        (Account::Deposited, cents(MERCHANT_FUNDS_CENTS)),
    ]);
    let customers: Vec<Customer> = (0..CUSTOMERS)
        .map(|index| {
            let customer = server.register_customer();
            server.deposit(
                &operator.token,
                customer.wallet_id,
                &cents(CUSTOMER_FUNDS_CENTS).to_string(),
            );
            model.add_money(&[
                (Account::Customer(index), cents(CUSTOMER_FUNDS_CENTS)),
                (Account::Deposited, cents(CUSTOMER_FUNDS_CENTS)),
            ]);
            customer
        })
        .collect();
    let shard = |wallet: u64| engine::values::ids::shard_of(wallet, SHARDS);
    let across = customers
        .iter()
        .filter(|c| shard(c.wallet_id) != shard(merchant_wallet))
        .count();
    println!(
        "merchant {merchant_id}, merchant wallet {merchant_wallet} (shard {}), customer wallets \
         {:?}: {across} of {CUSTOMERS} customers pay across shards",
        shard(merchant_wallet),
        customers.iter().map(|c| c.wallet_id).collect::<Vec<_>>()
    );
    assert!(
        across > 0 && across < CUSTOMERS,
        "the drill wants payers on the merchant's shard and on others"
    );
    let setup = Setup {
        merchant_id,
        merchant_wallet,
        creator,
        approver,
        merchant_auditor,
        operator,
        platform_auditor,
        customers,
    };
    (setup, model)
}

/// Runs the load until `kill_after` acknowledgements, SIGKILLs the server; returns the logs.
fn load_and_kill(
    server: &mut Server,
    setup: &Setup,
    round: usize,
    seed: u64,
    kill_after: u64,
) -> Vec<ThreadLog> {
    let shared = Arc::new(Shared {
        address: server.address(),
        round,
        merchant_id: setup.merchant_id,
        merchant_wallet: setup.merchant_wallet,
        creator: setup.creator.token.clone(),
        approver: setup.approver.token.clone(),
        operator: setup.operator.token.clone(),
        customers: setup
            .customers
            .iter()
            .map(|c| (c.wallet_id, c.token.clone()))
            .collect(),
        acks: AckCount::default(),
        stop: AtomicBool::new(false),
    });
    let roles = std::iter::repeat_n("pay", PAYMENT_THREADS)
        .chain(std::iter::repeat_n("payout", PAYOUT_THREADS))
        .chain(std::iter::repeat_n("bank", BANK_THREADS));
    let workers: Vec<_> = roles
        .enumerate()
        .map(|(thread, role)| {
            let mut worker = Worker {
                shared: shared.clone(),
                rng: XorShift::new(
                    seed ^ ((round as u64) << 32 | (thread as u64 + 1)).wrapping_mul(0x9E37_79B9),
                ),
                label: format!("{role}{thread}"),
                next_key: 0,
                log: ThreadLog::default(),
            };
            std::thread::spawn(move || {
                while !worker.shared.stop.load(Ordering::SeqCst) {
                    let go_on = match role {
                        "pay" => worker.payment_round(),
                        "payout" => worker.payout_round(),
                        _ => worker.bank_round(),
                    };
                    if !go_on {
                        break;
                    }
                }
                worker.log
            })
        })
        .collect();
    shared.acks.wait_for(kill_after, || {
        format!("seed {seed}; server stderr:\n{}", server.stderr_text())
    });
    server.kill_hard();
    shared.stop.store(true, Ordering::SeqCst);
    workers
        .into_iter()
        .map(|worker| worker.join().expect("a client thread panicked"))
        .collect()
}

/// One round: load, SIGKILL, restart, check, retry the in-flight steps, check again.
fn round(server: &mut Server, setup: &Setup, model: &mut Model, round: usize, seed: u64) {
    let mut rng = XorShift::new(seed.wrapping_add(round as u64));
    // About a second of load here (a few hundred to a couple of thousand steps).
    let kill_after = 200 + rng.below(1_500);
    let started = Instant::now();
    let logs = load_and_kill(server, setup, round, seed, kill_after);
    let unexpected: Vec<&String> = logs.iter().flat_map(|l| &l.unexpected).collect();
    assert!(
        unexpected.is_empty(),
        "round {round}: unexpected answers before the kill (seed {seed}):\n{unexpected:#?}\n\
         server stderr:\n{}",
        server.stderr_text()
    );
    let acked: usize = logs.iter().map(|l| l.acked.len()).sum();
    let refused: usize = logs.iter().map(|l| l.refused).sum();
    let mut in_flight: Vec<Step> = logs.iter().filter_map(|l| l.in_flight.clone()).collect();
    println!(
        "round {round}: killed after {kill_after} acknowledgements ({:.1?} of load): {acked} \
         acknowledged, {refused} refused (insufficient funds), {} in flight",
        started.elapsed(),
        in_flight.len()
    );

    server.restart();
    let mut expected = model.clone();
    for log in &logs {
        for kind in &log.acked {
            expected.apply(kind);
        }
    }
    let observed = observe(server, setup, &expected);

    // In-flight steps whose effect the durable state shows, then exact records.
    let mut applied: Vec<Option<bool>> = Vec::with_capacity(in_flight.len());
    for step in &mut in_flight {
        applied.push(resolve(&mut step.kind, &expected, &observed, seed));
    }
    for (step, applied) in in_flight.iter().zip(&applied) {
        if *applied == Some(true) {
            expected.apply(&step.kind);
        }
    }
    check_records(&expected, &observed, seed, "after the crash");

    // Money: the resolved steps are in `expected`; try every subset of the unobservable ones.
    let unknown: Vec<usize> = (0..in_flight.len())
        .filter(|&i| applied[i].is_none() && !in_flight[i].kind.effects().is_empty())
        .collect();
    let matching = (0u32..1 << unknown.len()).find(|subset| {
        let mut candidate = expected.clone();
        for (bit, &i) in unknown.iter().enumerate() {
            if subset & (1 << bit) != 0 {
                candidate.add_money(&in_flight[i].kind.effects());
            }
        }
        money_matches(&candidate, &observed)
    });
    let Some(subset) = matching else {
        // Would any subset of all in-flight steps, ignoring what the statuses say, explain it?
        panic!(
            "round {round}: the money {:?} (fee count {}) is not the acknowledged effects \
             {:?} (completed payments {}) plus the in-flight steps the durable state shows \
             applied and any subset of the unobservable ones (seed {seed}).\nin flight (applied \
             per durable state): {:#?}",
            observed.money,
            observed.fee_count,
            expected.money,
            expected.completed_payments(),
            in_flight
                .iter()
                .zip(&applied)
                .map(|(s, a)| (&s.kind, a))
                .collect::<Vec<_>>()
        );
    };
    for (bit, &i) in unknown.iter().enumerate() {
        let took = subset & (1 << bit) != 0;
        applied[i] = Some(took);
        if took {
            expected.apply(&in_flight[i].kind);
        }
    }
    println!(
        "round {round}: {} of the {} in-flight steps had taken effect: {:?}",
        applied.iter().filter(|a| **a == Some(true)).count(),
        in_flight.len(),
        in_flight
            .iter()
            .zip(&applied)
            .map(|(s, a)| format!("{} {:?}", s.path, a))
            .collect::<Vec<_>>()
    );
    verify_ledgers(server, setup);

    // Retry every in-flight step under its key, as its client would.
    for (step, applied) in in_flight.iter_mut().zip(&applied) {
        let response = step.send(server.address()).unwrap_or_else(|error| {
            panic!(
                "retry of {:?}: no answer ({error}); stderr:\n{}",
                step.kind,
                server.stderr_text()
            )
        });
        let ok = (200..300).contains(&response.status);
        let refused = response.status == 422 && refusal_code(&response) == "insufficient_funds";
        let what = format!(
            "round {round}: retry of in-flight {:?} (applied before: {applied:?}) answered {} \
             (replayed: {}): {} (seed {seed})",
            step.kind,
            response.status,
            replayed(&response),
            response.text()
        );
        match (&mut step.kind, applied) {
            // Whether it had run or not, the answer is a pending payment to track from now on.
            (
                Kind::Initiate {
                    payer,
                    amount,
                    payment,
                },
                _,
            ) => {
                assert!(response.status == 201, "{what}");
                let (answered, status, _) = payment_answer(&response, *payer);
                assert_eq!(status, "pending", "{what}");
                assert_eq!(
                    (answered.amount, answered.fee, answered.fee + answered.net),
                    (*amount, yer_fee(*amount), *amount),
                    "{what}"
                );
                *payment = Some(answered);
                expected.apply(&step.kind);
            }
            (kind, Some(true)) => {
                assert!(ok && replayed(&response), "{what}");
                if let Kind::CreatePayout { id, .. } = kind {
                    assert_eq!(response.json()["data"]["id"].as_u64(), *id, "{what}");
                }
            }
            (kind, _) => {
                assert!((ok && !replayed(&response)) || refused, "{what}");
                if ok {
                    if let Kind::CreatePayout { id, .. } = kind {
                        *id = response.json()["data"]["id"].as_u64();
                    }
                    expected.apply(&step.kind);
                }
            }
        }
    }
    let observed = observe(server, setup, &expected);
    check_records(&expected, &observed, seed, "after the retries");
    assert!(
        money_matches(&expected, &observed),
        "round {round}: after the retries the money {:?} (fee count {}) is not {:?} (completed \
         payments {}) (seed {seed})",
        observed.money,
        observed.fee_count,
        expected.money,
        expected.completed_payments()
    );
    verify_ledgers(server, setup);
    println!(
        "round {round}: checked {} payments, {} payouts; merchant balance {}, held {}, fees {}, \
         paid out {}",
        expected.payments.len(),
        expected.payouts.len(),
        expected.money[&Account::Merchant],
        expected
            .money
            .get(&Account::MerchantHeld)
            .copied()
            .unwrap_or_default(),
        expected
            .money
            .get(&Account::Fees)
            .copied()
            .unwrap_or_default(),
        expected
            .money
            .get(&Account::PaidOut)
            .copied()
            .unwrap_or_default(),
    );
    *model = expected;
}

#[test]
fn acknowledged_payments_refunds_and_payouts_survive_sigkills_whole() {
    let seed = seed();
    println!(
        "api commerce crash drill seed: {seed} (rerun with WALLETD_API_CRASH_COMMERCE_SEED={seed})"
    );
    let started = Instant::now();
    let mut server = Server::start_with(Options {
        shards: Some(SHARDS),
        ..Options::default()
    });
    let (setup, mut model) = set_up(&server);
    println!("server up and set up in {:.1?}", started.elapsed());
    for index in 1..=ROUNDS {
        round(&mut server, &setup, &mut model, index, seed);
    }

    let status = server.stop();
    assert_eq!(
        status.code(),
        Some(0),
        "SIGTERM after the drill: {status:?}"
    );
    let (status, stdout, stderr) = server.run_tool(&["replay", "--verify"]);
    assert!(
        status.success() && stdout.contains("verified"),
        "walletd replay --verify (seed {seed}): {status:?}\nstdout: {stdout}\nstderr: {stderr}"
    );
    println!("drill done in {:.1?}", started.elapsed());
}
