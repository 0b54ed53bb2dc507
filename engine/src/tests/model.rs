//! Model-based test: random command sequences run against the `Shard` and against a tiny reference
//! model (plain vectors of balances, holds and postings of client wallets). After every step both
//! must agree on accept/reject (with the same code), on every balance, held and available amount,
//! and the shard's invariants must hold. The model knows nothing of ledgers, hashes or system
//! accounts; it re-states the business rules in the simplest way.

use proptest::prelude::*;
use rust_decimal::Decimal;

use super::Harness;
use crate::ledger::transaction::{Direction, TransactionType};
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::command::{
    CaptureHold, CreateWallet, Details, MoneyMove, PlaceHold, Refund, TransferArgs,
};
use crate::values::money::AMOUNT_MAX;
use crate::{Command, Currency, Event, Uuid, WalletId};

const CURRENCIES: [&str; 3] = ["USD", "JPY", "KWD"];

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Create {
        owner: u64,
        currency: usize,
    },
    Deposit {
        wallet: usize,
        amount: Decimal,
        currency: Option<usize>,
    },
    Withdraw {
        wallet: usize,
        amount: Decimal,
    },
    Transfer {
        source: usize,
        target: usize,
        amount: Decimal,
        currency: Option<usize>,
    },
    Hold {
        wallet: usize,
        amount: Decimal,
        minutes: u32,
        currency: Option<usize>,
    },
    Release {
        hold: usize,
    },
    Capture {
        hold: usize,
        amount: Option<Decimal>,
        counter: Option<usize>,
    },
    Refund {
        tx: usize,
        amount: Decimal,
    },
    Reverse {
        tx: usize,
    },
    Freeze {
        wallet: usize,
    },
    Unfreeze {
        wallet: usize,
    },
    Tick {
        minutes: i64,
    },
}

fn amount() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        6 => (1i64..400).prop_map(|mantissa| Decimal::new(mantissa, 0)),
        3 => (1i64..40_000, 1u32..=3).prop_map(|(mantissa, scale)| Decimal::new(mantissa, scale)),
        1 => Just(Decimal::ZERO),
        1 => (-50i64..0).prop_map(|mantissa| Decimal::new(mantissa, 0)),
        1 => Just(Decimal::new(1_000_000_000_001, 0)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    // Selectors, resolved against the entities that exist when the op runs (see `pick`).
    let index = 0usize..1000;
    let currency = 0usize..3;
    prop_oneof![
        1 => (0u64..4, currency.clone()).prop_map(|(owner, currency)| Op::Create { owner, currency }),
        5 => (index.clone(), amount(), proptest::option::weighted(0.2, currency.clone()))
            .prop_map(|(wallet, amount, currency)| Op::Deposit { wallet, amount, currency }),
        3 => (index.clone(), amount()).prop_map(|(wallet, amount)| Op::Withdraw { wallet, amount }),
        5 => (index.clone(), index.clone(), amount(), proptest::option::weighted(0.1, currency.clone()))
            .prop_map(|(source, target, amount, currency)| Op::Transfer { source, target, amount, currency }),
        3 => (index.clone(), amount(), prop_oneof![1 => Just(0u32), 8 => 1u32..4], proptest::option::weighted(0.1, currency))
            .prop_map(|(wallet, amount, minutes, currency)| Op::Hold { wallet, amount, minutes, currency }),
        1 => index.clone().prop_map(|hold| Op::Release { hold }),
        3 => (index.clone(), proptest::option::of(amount()), proptest::option::weighted(0.3, index.clone()))
            .prop_map(|(hold, amount, counter)| Op::Capture { hold, amount, counter }),
        3 => (index.clone(), amount()).prop_map(|(tx, amount)| Op::Refund { tx, amount }),
        3 => index.clone().prop_map(|tx| Op::Reverse { tx }),
        1 => index.clone().prop_map(|wallet| Op::Freeze { wallet }),
        1 => index.prop_map(|wallet| Op::Unfreeze { wallet }),
        1 => (0i64..3).prop_map(|minutes| Op::Tick { minutes }),
    ]
}

struct MWallet {
    id: WalletId,
    owner: u64,
    currency: Currency,
    balance: Decimal,
    frozen: bool,
}

#[derive(PartialEq, Eq, Clone, Copy, Debug)]
enum HoldState {
    Active,
    Closed,
    Expired,
}

struct MHold {
    uuid: Uuid,
    wallet: usize,
    amount: Decimal,
    expires_at_ms: i64,
    state: HoldState,
}

struct MTx {
    uuid: Uuid,
    wallet: usize,
    kind: TransactionType,
    direction: Direction,
    amount: Decimal,
    refunded: Decimal,
    /// For refunds: the refunded original (index into txs).
    refund_of: Option<usize>,
    posting: usize,
}

struct MPosting {
    /// Client-wallet legs: (wallet, signed amount). System legs are invisible to the model.
    legs: Vec<(usize, Decimal)>,
    txs: Vec<usize>,
    reversed: bool,
}

/// What the model expects an accepted command to record, in the engine's order.
struct Planned {
    wallet: usize,
    kind: TransactionType,
    direction: Direction,
    amount: Decimal,
    refund_of: Option<usize>,
}

#[derive(Default)]
struct Model {
    wallets: Vec<MWallet>,
    holds: Vec<MHold>,
    txs: Vec<MTx>,
    postings: Vec<MPosting>,
}

type Check = Result<(), &'static str>;

fn valid_amount(amount: Decimal, currency: Currency) -> Result<Decimal, &'static str> {
    if amount <= Decimal::ZERO
        || amount > AMOUNT_MAX
        || amount.normalize().scale() > currency.minor_units()
    {
        return Err("invalid_amount");
    }
    Ok(amount)
}

impl Model {
    fn held(&self, wallet: usize) -> Decimal {
        self.holds
            .iter()
            .filter(|h| h.wallet == wallet && h.state == HoldState::Active)
            .map(|h| h.amount)
            .sum()
    }

    fn available(&self, wallet: usize) -> Decimal {
        self.wallets[wallet].balance - self.held(wallet)
    }

    fn wallet(&self, selector: usize) -> Result<usize, &'static str> {
        pick(selector, self.wallets.len()).ok_or("not_found")
    }

    fn funds(&self, wallet: usize, amount: Decimal) -> Check {
        if self.available(wallet) < amount {
            Err("insufficient_funds")
        } else {
            Ok(())
        }
    }

    fn frozen(&self, wallet: usize) -> Check {
        if self.wallets[wallet].frozen {
            Err("wallet_frozen")
        } else {
            Ok(())
        }
    }

    fn post(&mut self, legs: Vec<(usize, Decimal)>, planned: Vec<Planned>) -> Vec<Planned> {
        for (wallet, signed) in &legs {
            self.wallets[*wallet].balance += *signed;
        }
        self.postings.push(MPosting {
            legs,
            txs: Vec::new(),
            reversed: false,
        });
        planned
    }

    /// Records the uuids of the planned transactions from the engine's events, checking that the
    /// engine recorded exactly what the model planned.
    fn record(&mut self, planned: Vec<Planned>, events: &[Event]) {
        let recorded: Vec<(WalletId, &crate::ledger::transaction::Transaction)> = events
            .iter()
            .filter_map(|event| match event {
                Event::TransactionRecorded {
                    wallet_id,
                    transaction,
                } => Some((*wallet_id, transaction)),
                _ => None,
            })
            .collect();
        assert_eq!(
            recorded.len(),
            planned.len(),
            "transactions recorded vs planned"
        );
        let posting = self.postings.len() - 1;
        for (plan, (wallet_id, transaction)) in planned.into_iter().zip(recorded) {
            assert_eq!(wallet_id, self.wallets[plan.wallet].id);
            assert_eq!(
                (transaction.transaction_type, transaction.direction),
                (plan.kind, plan.direction)
            );
            assert_eq!(transaction.amount, plan.amount);
            self.txs.push(MTx {
                uuid: transaction.uuid,
                wallet: plan.wallet,
                kind: plan.kind,
                direction: plan.direction,
                amount: plan.amount,
                refunded: Decimal::ZERO,
                refund_of: plan.refund_of,
                posting,
            });
            let tx = self.txs.len() - 1;
            self.postings[posting].txs.push(tx);
        }
    }
}

fn plan(wallet: usize, kind: TransactionType, direction: Direction, amount: Decimal) -> Planned {
    Planned {
        wallet,
        kind,
        direction,
        amount,
        refund_of: None,
    }
}

struct Run {
    h: Harness,
    model: Model,
}

impl Run {
    fn wallet_id(&self, selector: usize) -> WalletId {
        pick(selector, self.model.wallets.len())
            .map_or(WalletId(1_000_000 + selector as u64), |w| {
                self.model.wallets[w].id
            })
    }

    fn currency_or(&self, choice: Option<usize>, wallet: Result<usize, &'static str>) -> Currency {
        match (choice, wallet) {
            (Some(choice), _) => Currency::from_code(CURRENCIES[choice]).unwrap(),
            (None, Ok(wallet)) => self.model.wallets[wallet].currency,
            (None, Err(_)) => Currency::from_code("USD").unwrap(),
        }
    }

    fn hold_uuid(&self, selector: usize) -> Uuid {
        pick(selector, self.model.holds.len())
            .map_or(Uuid([0xee; 16]), |h| self.model.holds[h].uuid)
    }

    fn tx_uuid(&self, selector: usize) -> Uuid {
        pick(selector, self.model.txs.len()).map_or(Uuid([0xdd; 16]), |t| self.model.txs[t].uuid)
    }

    /// The command for `op`, and the model's verdict (planned transactions, or the rejection code).
    fn step(&mut self, op: &Op) {
        let (command, verdict) = self.plan(op);
        let ctx = self.h.ctx();
        let decided = self.h.shard.decide(&command, &ctx);
        match (&verdict, &decided) {
            (Ok(_), Ok(_)) => {}
            (Err(code), Err(rejection)) => assert_eq!(*code, rejection.code(), "{op:?}"),
            _ => panic!(
                "{op:?}: model says {:?}, shard says {decided:?}",
                verdict.as_ref().map(|_| ())
            ),
        }
        let Ok(events) = decided else { return };
        let Ok(Mutation { planned, after }) = verdict else {
            return;
        };
        self.h.shard.apply_all(&events).unwrap();
        self.h.log.extend(events.iter().cloned());
        if let Some(planned) = planned {
            self.model.record(planned, &events);
        }
        after(&mut self.model, &events);
    }

    fn plan(&mut self, op: &Op) -> (Command, Result<Mutation, &'static str>) {
        let now_ms = self.h.now_ms;
        let m = &mut self.model;
        match op.clone() {
            Op::Create { owner, currency } => {
                let currency = Currency::from_code(CURRENCIES[currency]).unwrap();
                let command = Command::CreateWallet(CreateWallet {
                    owner_type: OwnerType::Customer,
                    owner_id: owner,
                    currency,
                    wallet_type: WalletType::Primary,
                    business_id: 1,
                    branch_id: 0,
                    meta: None,
                });
                let verdict = if m
                    .wallets
                    .iter()
                    .any(|w| w.owner == owner && w.currency == currency)
                {
                    Err("duplicate")
                } else {
                    Ok(Mutation::after(move |m, events| {
                        let Some(Event::WalletCreated(created)) = events.first() else {
                            panic!("no wallet created")
                        };
                        m.wallets.push(MWallet {
                            id: created.wallet_id,
                            owner,
                            currency,
                            balance: Decimal::ZERO,
                            frozen: false,
                        });
                    }))
                };
                (command, verdict)
            }
            Op::Deposit { wallet, amount, .. } | Op::Withdraw { wallet, amount } => {
                let debit = matches!(op, Op::Withdraw { .. });
                let index = m.wallet(wallet);
                let wallet_id = self.wallet_id(wallet);
                let currency = currency_of(op).map(|c| Currency::from_code(CURRENCIES[c]).unwrap());
                let request = MoneyMove {
                    wallet_id,
                    amount,
                    currency,
                    details: Details::default(),
                };
                let command = if debit {
                    Command::Withdraw(request)
                } else {
                    Command::Deposit(request)
                };
                let m = &mut self.model;
                let verdict = (|| {
                    let w = index?;
                    if currency.is_some_and(|c| c != m.wallets[w].currency) {
                        return Err("currency_mismatch");
                    }
                    let amount = valid_amount(amount, m.wallets[w].currency)?;
                    m.frozen(w)?;
                    if debit {
                        m.funds(w, amount)?;
                    }
                    let (kind, direction, signed) = if debit {
                        (TransactionType::Withdrawal, Direction::Debit, -amount)
                    } else {
                        (TransactionType::Deposit, Direction::Credit, amount)
                    };
                    Ok(Mutation::posting(m.post(
                        vec![(w, signed)],
                        vec![plan(w, kind, direction, amount)],
                    )))
                })();
                (command, verdict)
            }
            Op::Transfer {
                source,
                target,
                amount,
                currency,
            } => {
                let s = m.wallet(source);
                // Two in three targets are drawn from the source's currency, so transfers mostly pass
                // the currency check and reach the funds and frozen rules.
                let t = match s {
                    Ok(s) if target % 3 != 0 => {
                        let same: Vec<usize> = (0..m.wallets.len())
                            .filter(|w| m.wallets[*w].currency == m.wallets[s].currency)
                            .collect();
                        Ok(same[target % same.len()])
                    }
                    _ => m.wallet(target),
                };
                let target_id = t.map_or(WalletId(1_000_000 + target as u64), |t| m.wallets[t].id);
                let currency = self.currency_or(currency, s);
                let same_wallet = self.wallet_id(source) == target_id;
                let command = Command::Transfer(TransferArgs {
                    source_wallet_id: self.wallet_id(source),
                    target_wallet_id: target_id,
                    amount,
                    currency,
                    details: Details::default(),
                });
                let m = &mut self.model;
                let verdict = (|| {
                    if same_wallet {
                        return Err("invalid_request");
                    }
                    let (s, t) = (s?, t?);
                    if m.wallets[s].currency != currency || m.wallets[t].currency != currency {
                        return Err("currency_mismatch");
                    }
                    let amount = valid_amount(amount, currency)?;
                    m.frozen(s)?;
                    m.frozen(t)?;
                    m.funds(s, amount)?;
                    let kind = TransactionType::Transfer;
                    Ok(Mutation::posting(m.post(
                        vec![(s, -amount), (t, amount)],
                        vec![
                            plan(s, kind, Direction::Debit, amount),
                            plan(t, kind, Direction::Credit, amount),
                        ],
                    )))
                })();
                (command, verdict)
            }
            Op::Hold {
                wallet,
                amount,
                minutes,
                currency,
            } => {
                let index = m.wallet(wallet);
                let currency = self.currency_or(currency, index);
                let command = Command::PlaceHold(PlaceHold {
                    wallet_id: self.wallet_id(wallet),
                    amount,
                    currency,
                    reason: None,
                    expiry_minutes: Some(minutes),
                });
                let m = &self.model;
                let verdict = (|| {
                    if minutes == 0 {
                        return Err("invalid_request");
                    }
                    let w = index?;
                    if m.wallets[w].currency != currency {
                        return Err("currency_mismatch");
                    }
                    let amount = valid_amount(amount, currency)?;
                    m.frozen(w)?;
                    m.funds(w, amount)?;
                    let expires_at_ms = now_ms + i64::from(minutes) * 60_000;
                    Ok(Mutation::after(move |m, events| {
                        let Some(Event::HoldPlaced { hold, .. }) = events.first() else {
                            panic!("no hold")
                        };
                        m.holds.push(MHold {
                            uuid: hold.uuid,
                            wallet: w,
                            amount,
                            expires_at_ms,
                            state: HoldState::Active,
                        });
                    }))
                })();
                (command, verdict)
            }
            Op::Release { hold } => {
                let command = Command::ReleaseHold {
                    hold_uuid: self.hold_uuid(hold),
                };
                let m = &self.model;
                let verdict = (|| {
                    let hold = pick(hold, m.holds.len()).ok_or("not_found")?;
                    let state = &m.holds[hold];
                    hold_open(state, now_ms)?;
                    Ok(Mutation::after(move |m, _| {
                        m.holds[hold].state = HoldState::Closed
                    }))
                })();
                (command, verdict)
            }
            Op::Capture {
                hold,
                amount,
                counter,
            } => {
                let counter_id = counter.map(|c| self.wallet_id(c));
                let command = Command::CaptureHold(CaptureHold {
                    hold_uuid: self.hold_uuid(hold),
                    amount,
                    counter_wallet_id: counter_id,
                    details: Details::default(),
                });
                let m = &mut self.model;
                let verdict = (|| {
                    let hold = pick(hold, m.holds.len()).ok_or("not_found")?;
                    let state = &m.holds[hold];
                    let w = state.wallet;
                    let counter = counter.map(|c| m.wallet(c));
                    if counter == Some(Ok(w)) {
                        return Err("invalid_request");
                    }
                    let counter = counter.transpose()?;
                    let currency = m.wallets[w].currency;
                    if counter.is_some_and(|c| m.wallets[c].currency != currency) {
                        return Err("currency_mismatch");
                    }
                    let captured = valid_amount(amount.unwrap_or(state.amount), currency)?;
                    m.frozen(w)?;
                    if let Some(c) = counter {
                        m.frozen(c)?;
                    }
                    hold_open(state, now_ms)?;
                    if captured > state.amount {
                        return Err("capture_exceeds_hold");
                    }
                    m.holds[hold].state = HoldState::Closed;
                    let kind = TransactionType::HoldCapture;
                    let (legs, planned) = match counter {
                        Some(c) => (
                            vec![(w, -captured), (c, captured)],
                            vec![
                                plan(w, kind, Direction::Debit, captured),
                                plan(c, kind, Direction::Credit, captured),
                            ],
                        ),
                        None => (
                            vec![(w, -captured)],
                            vec![plan(w, kind, Direction::Debit, captured)],
                        ),
                    };
                    Ok(Mutation::posting(m.post(legs, planned)))
                })();
                (command, verdict)
            }
            Op::Refund { tx, amount } => {
                // Two in three refunds name a debit, so the later rules are reached.
                let debits: Vec<usize> = (0..m.txs.len())
                    .filter(|t| m.txs[*t].direction == Direction::Debit)
                    .collect();
                let resolved = match pick(tx, debits.len()) {
                    Some(debit) if tx % 3 != 0 => Some(debits[debit]),
                    _ => pick(tx, m.txs.len()),
                };
                let command = Command::Refund(Refund {
                    original_transaction_uuid: resolved.map_or(Uuid([0xdd; 16]), |t| m.txs[t].uuid),
                    amount,
                    reason: None,
                    details: Details::default(),
                });
                let m = &mut self.model;
                let verdict = (|| {
                    let tx = resolved.ok_or("not_found")?;
                    let original = &m.txs[tx];
                    let w = original.wallet;
                    let amount = valid_amount(amount, m.wallets[w].currency)?;
                    m.frozen(w)?;
                    let refundable = original.direction == Direction::Debit
                        && matches!(
                            original.kind,
                            TransactionType::Withdrawal
                                | TransactionType::Transfer
                                | TransactionType::HoldCapture
                        );
                    if !refundable {
                        return Err("not_a_debit");
                    }
                    if m.postings[original.posting].reversed {
                        return Err("already_reversed");
                    }
                    if original.refunded + amount > original.amount {
                        return Err("refund_exceeds_original");
                    }
                    m.txs[tx].refunded += amount;
                    let planned = Planned {
                        wallet: w,
                        kind: TransactionType::Refund,
                        direction: Direction::Credit,
                        amount,
                        refund_of: Some(tx),
                    };
                    Ok(Mutation::posting(m.post(vec![(w, amount)], vec![planned])))
                })();
                (command, verdict)
            }
            Op::Reverse { tx } => {
                let command = Command::Reverse {
                    transaction_uuid: self.tx_uuid(tx),
                    reason: "model".into(),
                };
                let m = &mut self.model;
                let verdict = (|| {
                    let tx = pick(tx, m.txs.len()).ok_or("not_found")?;
                    let posting = m.txs[tx].posting;
                    let txs = m.postings[posting].txs.clone();
                    if txs.iter().any(|t| m.wallets[m.txs[*t].wallet].frozen) {
                        return Err("wallet_frozen");
                    }
                    for t in &txs {
                        if m.txs[*t].kind == TransactionType::Reversal {
                            return Err("invalid_state");
                        }
                        if m.txs[*t].refunded > Decimal::ZERO {
                            return Err("invalid_state");
                        }
                    }
                    if m.postings[posting].reversed {
                        return Err("already_reversed");
                    }
                    let legs = m.postings[posting].legs.clone();
                    for (wallet, _) in &legs {
                        let delta: Decimal = legs
                            .iter()
                            .filter(|(w, _)| w == wallet)
                            .map(|(_, signed)| -*signed)
                            .sum();
                        if m.available(*wallet) + delta < Decimal::ZERO {
                            return Err("insufficient_funds");
                        }
                    }
                    m.postings[posting].reversed = true;
                    for t in &txs {
                        if let Some(refunded) = m.txs[*t].refund_of {
                            let amount = m.txs[*t].amount;
                            m.txs[refunded].refunded -= amount;
                        }
                    }
                    let planned = txs
                        .iter()
                        .map(|t| {
                            let t = &m.txs[*t];
                            plan(
                                t.wallet,
                                TransactionType::Reversal,
                                t.direction.opposite(),
                                t.amount,
                            )
                        })
                        .collect();
                    let mirror = legs.iter().map(|(w, signed)| (*w, -*signed)).collect();
                    Ok(Mutation::posting(m.post(mirror, planned)))
                })();
                (command, verdict)
            }
            Op::Freeze { wallet } | Op::Unfreeze { wallet } => {
                let freeze = matches!(op, Op::Freeze { .. });
                let wallet_id = self.wallet_id(wallet);
                let command = if freeze {
                    Command::FreezeWallet { wallet_id }
                } else {
                    Command::UnfreezeWallet { wallet_id }
                };
                let m = &self.model;
                let verdict = (|| {
                    let w = m.wallet(wallet)?;
                    if m.wallets[w].frozen == freeze {
                        return Err("invalid_state");
                    }
                    Ok(Mutation::after(move |m, _| m.wallets[w].frozen = freeze))
                })();
                (command, verdict)
            }
            Op::Tick { minutes } => {
                self.h.now_ms += minutes * 60_000;
                let now_ms = self.h.now_ms;
                let verdict = Ok(Mutation::after(move |m, events| {
                    let due: Vec<usize> = (0..m.holds.len())
                        .filter(|h| {
                            m.holds[*h].state == HoldState::Active
                                && m.holds[*h].expires_at_ms <= now_ms
                        })
                        .collect();
                    assert_eq!(due.len(), events.len(), "holds expired");
                    for h in due {
                        m.holds[h].state = HoldState::Expired;
                    }
                }));
                (Command::ExpireHolds { max_holds: 1000 }, verdict)
            }
        }
    }

    fn compare(&self) {
        for (index, wallet) in self.model.wallets.iter().enumerate() {
            let actual = self.h.shard.wallet(wallet.id).unwrap();
            assert_eq!(
                actual.balance(),
                wallet.balance,
                "balance of wallet {index}"
            );
            assert_eq!(
                actual.held(),
                self.model.held(index),
                "held of wallet {index}"
            );
            assert_eq!(actual.available().unwrap(), self.model.available(index));
            assert_eq!(actual.is_frozen(), wallet.frozen);
        }
        for hold in &self.model.holds {
            let view = self.h.shard.hold_view(hold.uuid).unwrap();
            assert_eq!(
                view.status == crate::ledger::hold::HoldStatus::Active,
                hold.state == HoldState::Active
            );
            assert_eq!(
                view.status == crate::ledger::hold::HoldStatus::Expired,
                hold.state == HoldState::Expired
            );
        }
        for tx in &self.model.txs {
            let view = self.h.shard.transaction_view(tx.uuid).unwrap();
            assert_eq!(view.refunded_amount, tx.refunded);
            assert_eq!(
                view.reversed_by_transaction_id.is_some(),
                self.model.postings[tx.posting].reversed
            );
        }
        self.h.shard.check_invariants().unwrap();
    }
}

/// Resolves a selector: one in ten names nothing (exercising `not_found`), the rest an existing
/// entity.
fn pick(selector: usize, len: usize) -> Option<usize> {
    (len > 0 && selector % 10 != 9).then(|| selector % len)
}

fn currency_of(op: &Op) -> Option<usize> {
    match op {
        Op::Deposit { currency, .. } => *currency,
        _ => None,
    }
}

fn hold_open(hold: &MHold, now_ms: i64) -> Check {
    match hold.state {
        HoldState::Active if now_ms >= hold.expires_at_ms => Err("hold_expired"),
        HoldState::Active => Ok(()),
        HoldState::Expired => Err("hold_expired"),
        HoldState::Closed => Err("invalid_state"),
    }
}

type After = Box<dyn FnOnce(&mut Model, &[Event])>;

/// An accepted command's effect on the model beyond what `plan` already did.
struct Mutation {
    planned: Option<Vec<Planned>>,
    after: After,
}

impl Mutation {
    fn posting(planned: Vec<Planned>) -> Self {
        Self {
            planned: Some(planned),
            after: Box::new(|_, _| {}),
        }
    }

    fn after(after: impl FnOnce(&mut Model, &[Event]) + 'static) -> Self {
        Self {
            planned: None,
            after: Box::new(after),
        }
    }
}

/// Runs `ops` on a fresh shard and model; returns the harness (for replay tests).
pub(crate) fn run_ops(ops: &[Op]) -> Harness {
    let mut run = Run {
        h: Harness::new(),
        model: Model::default(),
    };
    // Every run starts with funded wallets: two in USD (2 decimals), one JPY (0), one KWD (3).
    let setup = [(1, 0), (2, 0), (3, 1), (1, 2)]
        .into_iter()
        .enumerate()
        .flat_map(|(wallet, (owner, currency))| {
            [
                Op::Create { owner, currency },
                Op::Deposit {
                    wallet,
                    amount: Decimal::new(1000, 0),
                    currency: None,
                },
            ]
        });
    for op in setup.collect::<Vec<_>>().iter().chain(ops) {
        run.step(op);
        run.compare();
    }
    run.h
}

pub(crate) fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..80)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn shard_agrees_with_the_reference_model(ops in ops()) {
        let _ = run_ops(&ops);
    }
}

#[test]
fn model_sanity_scripted() {
    let ops = [
        Op::Create {
            owner: 1,
            currency: 0,
        },
        Op::Create {
            owner: 5,
            currency: 0,
        },
        Op::Deposit {
            wallet: 0,
            amount: Decimal::new(1000, 2),
            currency: None,
        },
        Op::Transfer {
            source: 0,
            target: 1,
            amount: Decimal::new(400, 2),
            currency: None,
        },
        Op::Hold {
            wallet: 1,
            amount: Decimal::new(3, 0),
            minutes: 1,
            currency: None,
        },
        Op::Refund {
            tx: 1,
            amount: Decimal::new(1, 0),
        },
        Op::Reverse { tx: 1 },
        Op::Reverse { tx: 3 },
        Op::Capture {
            hold: 0,
            amount: Some(Decimal::new(2, 0)),
            counter: Some(0),
        },
        Op::Tick { minutes: 2 },
        Op::Withdraw {
            wallet: 0,
            amount: Decimal::new(1, 0),
        },
    ];
    let h = run_ops(&ops);
    assert!(h.log.len() > 30);
}
