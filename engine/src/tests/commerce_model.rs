//! Random mixed commerce sequences: payments (wallet and sandbox), links, QR payloads, refunds,
//! payouts and settlements interleaved with deposits, withdrawals, freezes and time. After every
//! step the shard's invariants must hold (the harness checks them, checks that every rejection
//! changed nothing, and that every batch survives the codec); at the end the log must replay to
//! the same state, with or without a snapshot taken midway; and a small reference model of the
//! payment, payout and settlement statuses must agree with the shard.

use std::collections::BTreeMap;

use proptest::prelude::*;
use rust_decimal::Decimal;

use super::commerce_support::{
    approve_payout, approve_settlement, create_payout, create_settlement, day_of, fee, initiate,
    link, merchant_wallet, qr, refund, CHECKER, MAKER, MERCHANT,
};
use super::{deposit, withdraw, Harness};
use crate::commerce::payment::{PaymentProvider, PaymentStatus};
use crate::commerce::payout::{PayoutStatus, SettlementStatus, DAY_MS};
use crate::shard::command::{CreatePaymentLink, PaymentProviderResult, PayoutProviderResult};
use crate::{Command, Event, Outcome, PayoutId, SettlementId, Shard, Uuid, WalletId};

#[derive(Clone, Debug)]
pub(crate) enum Op {
    Initiate {
        payer: usize,
        merchant: usize,
        amount: Decimal,
        sandbox: bool,
        link: Option<usize>,
    },
    Confirm(usize),
    Cancel(usize),
    Fail(usize),
    Provider(usize, bool),
    Refund(usize, Option<Decimal>),
    Link(usize, Decimal, u32),
    Qr(usize, Option<Decimal>),
    Payout(usize, Decimal),
    ApprovePayout(usize, bool),
    RejectPayout(usize),
    CancelPayout(usize),
    ExecutePayout(usize),
    PayoutResult(usize, bool),
    Settle(usize, i64),
    ApproveSettlement(usize, bool),
    RejectSettlement(usize),
    CancelSettlement(usize),
    ExecuteSettlement(usize),
    Deposit(usize, Decimal),
    Withdraw(usize, Decimal),
    Freeze(usize),
    Unfreeze(usize),
    Tick(i64),
}

fn amount() -> impl Strategy<Value = Decimal> {
    prop_oneof![
        8 => (1i64..300).prop_map(|units| Decimal::new(units, 0)),
        3 => (1i64..30_000).prop_map(|cents| Decimal::new(cents, 2)),
        1 => Just(Decimal::ZERO),
        1 => Just(Decimal::new(1, 3)),
    ]
}

fn op() -> impl Strategy<Value = Op> {
    let i = 0usize..64;
    prop_oneof![
        8 => (i.clone(), i.clone(), amount(), proptest::bool::weighted(0.2), proptest::option::weighted(0.2, i.clone()))
            .prop_map(|(payer, merchant, amount, sandbox, link)| Op::Initiate { payer, merchant, amount, sandbox, link }),
        6 => i.clone().prop_map(Op::Confirm),
        1 => i.clone().prop_map(Op::Cancel),
        1 => i.clone().prop_map(Op::Fail),
        2 => (i.clone(), any::<bool>()).prop_map(|(p, ok)| Op::Provider(p, ok)),
        3 => (i.clone(), proptest::option::of(amount())).prop_map(|(p, a)| Op::Refund(p, a)),
        1 => (i.clone(), amount(), prop_oneof![Just(0u32), 1u32..5]).prop_map(|(m, a, min)| Op::Link(m, a, min)),
        1 => (i.clone(), proptest::option::of(amount())).prop_map(|(m, a)| Op::Qr(m, a)),
        3 => (i.clone(), amount()).prop_map(|(w, a)| Op::Payout(w, a)),
        2 => (i.clone(), proptest::bool::weighted(0.2)).prop_map(|(p, maker)| Op::ApprovePayout(p, maker)),
        1 => i.clone().prop_map(Op::RejectPayout),
        1 => i.clone().prop_map(Op::CancelPayout),
        2 => i.clone().prop_map(Op::ExecutePayout),
        2 => (i.clone(), any::<bool>()).prop_map(|(p, ok)| Op::PayoutResult(p, ok)),
        2 => (i.clone(), -1i64..2).prop_map(|(m, back)| Op::Settle(m, back)),
        2 => (i.clone(), proptest::bool::weighted(0.2)).prop_map(|(s, maker)| Op::ApproveSettlement(s, maker)),
        1 => i.clone().prop_map(Op::RejectSettlement),
        1 => i.clone().prop_map(Op::CancelSettlement),
        2 => i.clone().prop_map(Op::ExecuteSettlement),
        2 => (i.clone(), amount()).prop_map(|(w, a)| Op::Deposit(w, a)),
        2 => (i.clone(), amount()).prop_map(|(w, a)| Op::Withdraw(w, a)),
        1 => i.clone().prop_map(Op::Freeze),
        2 => i.prop_map(Op::Unfreeze),
        1 => prop_oneof![0i64..5, Just(1440)].prop_map(Op::Tick),
    ]
}

/// Resolves a wallet selector: one in sixteen names nothing, the rest any wallet.
fn pick_any<T: Copy>(items: &[T], selector: usize) -> Option<T> {
    (!items.is_empty() && selector % 16 != 15).then(|| items[selector % items.len()])
}

/// Resolves a record selector: one in sixteen names nothing (exercising `not_found`); otherwise three in
/// four pick one of the three newest entities (so life cycles get walked), the rest any entity.
fn pick<T: Copy>(items: &[T], selector: usize) -> Option<T> {
    if items.is_empty() || selector % 16 == 15 {
        return None;
    }
    let index = if selector.is_multiple_of(4) {
        selector % items.len()
    } else {
        items.len() - 1 - (selector / 4) % items.len().min(3)
    };
    Some(items[index])
}

/// What the model expects of the records' statuses.
#[derive(Default)]
struct Model {
    payments: BTreeMap<Uuid, (PaymentStatus, Decimal, Decimal)>,
    payouts: BTreeMap<PayoutId, PayoutStatus>,
    settlements: BTreeMap<SettlementId, SettlementStatus>,
}

pub(crate) struct Run {
    pub(crate) h: Harness,
    /// Customers (payers) and merchant wallets; all wallets for deposits and payouts.
    payers: Vec<WalletId>,
    merchants: Vec<WalletId>,
    payments: Vec<Uuid>,
    links: Vec<Uuid>,
    payouts: Vec<PayoutId>,
    settlements: Vec<SettlementId>,
    model: Model,
}

impl Run {
    fn new() -> Self {
        Self::on_shard(Shard::new(0, 1).unwrap())
    }

    /// A run on `shard` (one of several: ids and uuids stay apart).
    pub(crate) fn on_shard(shard: Shard) -> Self {
        let mut h = Harness::with_shard(shard);
        let mut payers = Vec::new();
        for (owner, currency) in [(1, "USD"), (2, "USD"), (3, "JPY")] {
            let wallet = h.create(owner, currency);
            h.deposit(wallet, "500");
            payers.push(wallet);
        }
        let merchants = vec![
            merchant_wallet(&mut h, MERCHANT, "USD"),
            merchant_wallet(&mut h, MERCHANT, "JPY"),
        ];
        Self {
            h,
            payers,
            merchants,
            payments: Vec::new(),
            links: Vec::new(),
            payouts: Vec::new(),
            settlements: Vec::new(),
            model: Model::default(),
        }
    }

    fn wallet(&self, selector: usize) -> WalletId {
        let all: Vec<WalletId> = self.payers.iter().chain(&self.merchants).copied().collect();
        pick_any(&all, selector).unwrap_or(WalletId(999_999))
    }

    fn payment(&self, selector: usize) -> Uuid {
        pick(&self.payments, selector).unwrap_or(Uuid([0xaa; 16]))
    }

    fn payout(&self, selector: usize) -> PayoutId {
        pick(&self.payouts, selector).unwrap_or(PayoutId(999_999))
    }

    fn settlement(&self, selector: usize) -> SettlementId {
        pick(&self.settlements, selector).unwrap_or(SettlementId(999_999))
    }

    fn command(&mut self, op: &Op) -> Command {
        match op.clone() {
            Op::Initiate {
                payer,
                merchant,
                amount,
                sandbox,
                link,
            } => {
                let merchant = pick_any(&self.merchants, merchant).unwrap_or(WalletId(999_999));
                let currency = self
                    .h
                    .shard
                    .wallet(merchant)
                    .map_or("USD".to_owned(), |w| w.currency().code().to_owned());
                // Three in four payers hold the merchant's currency.
                let same: Vec<WalletId> = self
                    .payers
                    .iter()
                    .copied()
                    .filter(|w| {
                        self.h
                            .shard
                            .wallet(*w)
                            .map(|w| w.currency().code().to_owned())
                            == Some(currency.clone())
                    })
                    .collect();
                let payer = match same.get(payer % same.len().max(1)) {
                    Some(wallet) if payer % 4 != 0 => *wallet,
                    _ => self.wallet(payer),
                };
                let mut request = initiate(merchant, payer, "1", &currency);
                request.amount = amount;
                request.fee = fee("1.5", if currency == "JPY" { "3" } else { "0.25" });
                if sandbox {
                    request.provider = PaymentProvider::Sandbox;
                }
                request.payment_link_uuid = link.map(|l| pick(&self.links, l).unwrap_or_default());
                Command::InitiatePayment(request)
            }
            Op::Confirm(p) => Command::ConfirmPayment {
                payment_uuid: self.payment(p),
            },
            Op::Cancel(p) => Command::CancelPayment {
                payment_uuid: self.payment(p),
            },
            Op::Fail(p) => Command::FailPayment {
                payment_uuid: self.payment(p),
            },
            Op::Provider(p, succeeded) => Command::PaymentProviderResult(PaymentProviderResult {
                payment_uuid: self.payment(p),
                succeeded,
                provider_ref: None,
            }),
            Op::Refund(p, amount) => {
                let mut command = refund(self.payment(p), None);
                if let Command::RefundPayment(request) = &mut command {
                    request.amount = amount;
                }
                command
            }
            Op::Link(m, amount, minutes) => {
                let mut command = link(self.wallet(m), "1", Some(minutes));
                if let Command::CreatePaymentLink(CreatePaymentLink {
                    amount: a,
                    currency,
                    merchant_wallet_id,
                    ..
                }) = &mut command
                {
                    *a = amount;
                    if let Some(wallet) = self.h.shard.wallet(*merchant_wallet_id) {
                        *currency = wallet.currency();
                    }
                }
                command
            }
            Op::Qr(m, amount) => {
                let wallet = self.wallet(m);
                let currency = self
                    .h
                    .shard
                    .wallet(wallet)
                    .map_or("USD".to_owned(), |w| w.currency().code().to_owned());
                let mut command = qr(wallet, None, &currency);
                if let Command::CreateQr(request) = &mut command {
                    request.amount = amount;
                }
                command
            }
            Op::Payout(w, amount) => {
                let wallet = self.wallet(w);
                let currency = self
                    .h
                    .shard
                    .wallet(wallet)
                    .map_or("USD".to_owned(), |w| w.currency().code().to_owned());
                let mut command = create_payout(wallet, "1", &currency);
                if let Command::CreatePayout(request) = &mut command {
                    request.amount = amount;
                }
                command
            }
            Op::ApprovePayout(p, maker) => {
                approve_payout(self.payout(p), if maker { MAKER } else { CHECKER })
            }
            Op::RejectPayout(p) => Command::RejectPayout {
                payout_id: self.payout(p),
                by: CHECKER,
                reason: "model".into(),
            },
            Op::CancelPayout(p) => Command::CancelPayout {
                payout_id: self.payout(p),
                by: MAKER,
            },
            Op::ExecutePayout(p) => Command::ExecutePayout {
                payout_id: self.payout(p),
                by: CHECKER,
            },
            Op::PayoutResult(p, succeeded) => Command::PayoutProviderResult(PayoutProviderResult {
                payout_id: self.payout(p),
                succeeded,
                provider_ref: None,
            }),
            Op::Settle(m, back) => {
                let day = day_of(self.h.now_ms);
                create_settlement(
                    pick_any(&self.merchants, m).unwrap_or(WalletId(999_999)),
                    day - back.max(0) * DAY_MS,
                    day - back * DAY_MS,
                )
            }
            Op::ApproveSettlement(s, maker) => {
                approve_settlement(self.settlement(s), if maker { MAKER } else { CHECKER })
            }
            Op::RejectSettlement(s) => Command::RejectSettlement {
                settlement_id: self.settlement(s),
                by: CHECKER,
                reason: "model".into(),
            },
            Op::CancelSettlement(s) => Command::CancelSettlement {
                settlement_id: self.settlement(s),
                by: MAKER,
            },
            Op::ExecuteSettlement(s) => Command::ExecuteSettlement {
                settlement_id: self.settlement(s),
                by: CHECKER,
            },
            Op::Deposit(w, amount) => {
                let mut command = deposit(self.wallet(w), "1");
                if let Command::Deposit(request) = &mut command {
                    request.amount = amount;
                }
                command
            }
            Op::Withdraw(w, amount) => {
                let mut command = withdraw(self.wallet(w), "1");
                if let Command::Withdraw(request) = &mut command {
                    request.amount = amount;
                }
                command
            }
            Op::Freeze(w) => Command::FreezeWallet {
                wallet_id: self.wallet(w),
            },
            Op::Unfreeze(w) => {
                let frozen: Vec<WalletId> = self
                    .payers
                    .iter()
                    .chain(&self.merchants)
                    .copied()
                    .filter(|w| self.h.shard.wallet(*w).is_some_and(|w| w.is_frozen()))
                    .collect();
                Command::UnfreezeWallet {
                    wallet_id: pick(&frozen, w).unwrap_or_else(|| self.wallet(w)),
                }
            }
            Op::Tick(minutes) => {
                self.h.now_ms += minutes * 60_000;
                Command::ExpireHolds { max_holds: 100 }
            }
        }
    }

    pub(crate) fn step(&mut self, op: &Op) {
        let command = self.command(op);
        let Ok(outcome) = self.h.exec(command) else {
            return;
        };
        match outcome {
            Outcome::Payment(view) => {
                if !self.payments.contains(&view.uuid) {
                    self.payments.push(view.uuid);
                }
                self.model
                    .payments
                    .insert(view.uuid, (view.status, view.amount, view.refunded_amount));
            }
            Outcome::PaymentLink(view) => self.links.push(view.uuid),
            Outcome::Payout(view) => {
                if !self.payouts.contains(&view.id) {
                    self.payouts.push(view.id);
                }
                let before = self.model.payouts.insert(view.id, view.status);
                assert!(before.is_none_or(|from| from.can_become(view.status)));
            }
            Outcome::Settlement(view) => {
                if !self.settlements.contains(&view.id) {
                    self.settlements.push(view.id);
                }
                let before = self.model.settlements.insert(view.id, view.status);
                assert!(before.is_none_or(|from| from.can_become(view.status)));
            }
            _ => {}
        }
    }

    fn compare(&self) {
        for (uuid, (status, amount, refunded)) in &self.model.payments {
            let view = self.h.shard.payment_view(*uuid).unwrap();
            assert_eq!(
                (view.status, view.amount, view.refunded_amount),
                (*status, *amount, *refunded)
            );
            assert_eq!(view.fee_amount + view.net_amount, view.amount);
        }
        for (id, status) in &self.model.payouts {
            assert_eq!(self.h.shard.payout(*id).unwrap().unwrap().status, *status);
        }
        for (id, status) in &self.model.settlements {
            assert_eq!(
                self.h.shard.settlement(*id).unwrap().unwrap().status,
                *status
            );
        }
    }
}

fn replay(events: &[Event]) -> Shard {
    let mut shard = Shard::new(0, 1).unwrap();
    shard.apply_all(events).unwrap();
    shard
}

pub(crate) fn ops() -> impl Strategy<Value = Vec<Op>> {
    proptest::collection::vec(op(), 1..120)
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    #[test]
    fn mixed_commerce_keeps_every_invariant_and_replays(ops in ops(), split in any::<prop::sample::Index>()) {
        let mut run = Run::new();
        for op in &ops {
            run.step(op);
            run.compare();
        }
        let digest = run.h.shard.state_digest();
        let log = &run.h.log;
        let decoded = crate::decode(&crate::encode(log).unwrap()).unwrap();
        let replayed = replay(&decoded);
        prop_assert_eq!(replayed.state_digest(), digest);
        replayed.check_invariants().unwrap();
        let cut = split.index(log.len() + 1);
        let prefix = replay(&log[..cut]);
        let bytes = prefix.snapshot_bytes().unwrap();
        let mut restored = Shard::from_snapshot_bytes(&bytes).unwrap();
        prop_assert_eq!(restored.state_digest(), prefix.state_digest());
        prop_assert_eq!(restored.snapshot_bytes().unwrap(), bytes);
        restored.apply_all(&log[cut..]).unwrap();
        prop_assert_eq!(restored.state_digest(), digest);
        restored.check_invariants().unwrap();
    }
}

/// A scripted run that reaches every record kind and state, so the replay test above is not
/// only as good as the random draws.
#[test]
fn scripted_commerce_run_replays_with_a_snapshot_midway() {
    let mut run = Run::new();
    let script = [
        Op::Initiate {
            payer: 0,
            merchant: 0,
            amount: Decimal::new(100, 0),
            sandbox: false,
            link: None,
        },
        Op::Confirm(0),
        Op::Refund(0, Some(Decimal::new(10, 0))),
        Op::Initiate {
            payer: 1,
            merchant: 0,
            amount: Decimal::new(5, 0),
            sandbox: true,
            link: None,
        },
        Op::Provider(1, true),
        Op::Link(3, Decimal::new(7, 0), 10),
        Op::Initiate {
            payer: 0,
            merchant: 0,
            amount: Decimal::new(7, 0),
            sandbox: false,
            link: Some(0),
        },
        Op::Confirm(2),
        Op::Qr(3, Some(Decimal::new(12, 0))),
        Op::Payout(0, Decimal::new(50, 0)),
        Op::ApprovePayout(0, true),
        Op::ApprovePayout(0, false),
        Op::ExecutePayout(0),
        Op::PayoutResult(0, false),
        Op::Payout(1, Decimal::new(20, 0)),
        Op::RejectPayout(1),
        Op::Settle(0, 0),
        Op::Deposit(3, Decimal::new(50, 0)),
        Op::ApproveSettlement(0, false),
        Op::ExecuteSettlement(0),
        Op::Initiate {
            payer: 2,
            merchant: 1,
            amount: Decimal::new(300, 0),
            sandbox: false,
            link: None,
        },
        Op::Confirm(3),
        Op::Settle(1, 0),
        Op::CancelSettlement(1),
        Op::Settle(1, 0),
        Op::Tick(1440),
    ];
    for op in &script {
        run.step(op);
        run.compare();
    }
    assert_eq!(run.model.payments.len(), 4);
    assert_eq!(run.model.payouts[&run.payouts[0]], PayoutStatus::Failed);
    assert_eq!(run.model.payouts[&run.payouts[1]], PayoutStatus::Rejected);
    assert_eq!(
        run.model.settlements[&run.settlements[0]],
        SettlementStatus::Executed
    );
    assert_eq!(
        run.model.settlements[&run.settlements[1]],
        SettlementStatus::Cancelled
    );
    assert_eq!(run.settlements.len(), 3);
    assert_eq!(run.links.len(), 1);
    let log = run.h.log.clone();
    for cut in [0, log.len() / 3, log.len() / 2, log.len()] {
        let mut restored =
            Shard::from_snapshot_bytes(&replay(&log[..cut]).snapshot_bytes().unwrap()).unwrap();
        restored.apply_all(&log[cut..]).unwrap();
        assert_eq!(restored.state_digest(), run.h.shard.state_digest());
    }
    // The readable form (`wal inspect`) round-trips too.
    let json = serde_json::to_string(&log).unwrap();
    assert_eq!(serde_json::from_str::<Vec<Event>>(&json).unwrap(), log);
    // Every commerce event kind made it into the log.
    let kinds: std::collections::BTreeSet<&str> = log
        .iter()
        .filter(|event| event.format_version() == 2)
        .map(|event| match event {
            Event::PaymentInitiated(_) => "initiated",
            Event::PaymentCompleted { .. } => "completed",
            Event::PaymentRefundTotalChanged { .. } => "refund total",
            Event::PaymentLinkCreated(_) => "link",
            Event::PaymentLinkUsed { .. } => "link used",
            Event::QrCreated(_) => "qr",
            Event::PayoutCreated(_) => "payout",
            Event::PayoutChanged { .. } => "payout changed",
            Event::SettlementCreated(_) => "settlement",
            Event::SettlementChanged { .. } => "settlement changed",
            _ => "other",
        })
        .collect();
    assert_eq!(kinds.len(), 11, "{kinds:?}");
}

#[test]
fn version_1_records_still_decode_and_may_not_carry_commerce_events() {
    use crate::shard::event::{EVENT_FORMAT_VERSION, EVENT_FORMAT_VERSION_MIN};
    let mut run = Run::new();
    run.step(&Op::Initiate {
        payer: 0,
        merchant: 0,
        amount: Decimal::new(10, 0),
        sandbox: false,
        link: None,
    });
    let (old, new): (Vec<Event>, Vec<Event>) = run
        .h
        .log
        .iter()
        .cloned()
        .partition(|event| event.format_version() == 1);
    assert!(!old.is_empty() && !new.is_empty());
    let mut as_v1 = crate::encode(&old).unwrap();
    assert_eq!(as_v1[0], EVENT_FORMAT_VERSION);
    as_v1[0] = EVENT_FORMAT_VERSION_MIN;
    assert_eq!(crate::decode(&as_v1).unwrap(), old);
    let mut commerce_as_v1 = crate::encode(&new).unwrap();
    commerce_as_v1[0] = EVENT_FORMAT_VERSION_MIN;
    assert!(matches!(
        crate::decode(&commerce_as_v1),
        Err(crate::DecodeError::Invalid(_))
    ));
    let mut future = crate::encode(&new).unwrap();
    future[0] = EVENT_FORMAT_VERSION + 1;
    assert_eq!(
        crate::decode(&future),
        Err(crate::DecodeError::UnsupportedVersion(
            EVENT_FORMAT_VERSION + 1
        ))
    );
}

#[test]
fn a_version_1_snapshot_loads_with_empty_commerce_state() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    assert_eq!(crate::SNAPSHOT_FORMAT_VERSION, 8);
    // Versions before 8 carry no posting floor, before 6 no uuid key: compare with the shard's
    // state without them.
    assert!(
        h.shard.posted_at_floor_ms > i64::MIN,
        "the deposit set the floor"
    );
    h.shard.posted_at_floor_ms = i64::MIN;
    let key = h.shard.uuid_key.take();
    assert!(key.is_some(), "the deposit sealed its transaction's uuid");
    let v3 = h.shard.version_3_snapshot_bytes();
    assert_eq!(v3[0], 3);
    let loaded = Shard::from_snapshot_bytes(&v3).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    // An empty commerce state is five sequence numbers (1) and seven empty maps: 12 bytes; then
    // version 3's empty map of refused payment credits: 1 byte.
    let (base, tail) = v3[1..].split_at(v3.len() - 1 - 13);
    assert_eq!(tail, [1, 1, 1, 1, 1, 0, 0, 0, 0, 0, 0, 0, 0]);
    let mut v1 = vec![1u8];
    v1.extend_from_slice(base);
    let loaded = Shard::from_snapshot_bytes(&v1).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    loaded.check_invariants().unwrap();
    // Version 2 is version 3 without the refused credits.
    let mut v2 = vec![2u8];
    v2.extend_from_slice(&v3[1..v3.len() - 1]);
    let loaded = Shard::from_snapshot_bytes(&v2).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    // A version 1 body with a commerce tail is refused (trailing bytes); a version 3 body read
    // as version 4 does not decode (the wallet's history changed shape).
    let mut padded = v3.clone();
    padded[0] = 1;
    assert!(Shard::from_snapshot_bytes(&padded).is_err());
    let mut as_v4 = v3.clone();
    as_v4[0] = 4;
    assert!(Shard::from_snapshot_bytes(&as_v4).is_err());
    // Version 6 is version 7 without the open batches (here none: 1 byte), version 5 is
    // version 6 without the uuid key (here none: 1 byte), version 4 is version 5 without the
    // in-transit totals (here an empty map: 1 byte).
    let v7 = h.shard.version_7_snapshot_bytes();
    assert_eq!(v7[v7.len() - 3..], [0, 0, 0]);
    let loaded = Shard::from_snapshot_bytes(&v7).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    let mut v6 = v7[..v7.len() - 1].to_vec();
    v6[0] = 6;
    let loaded = Shard::from_snapshot_bytes(&v6).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    let mut v5 = v6[..v6.len() - 1].to_vec();
    v5[0] = 5;
    let loaded = Shard::from_snapshot_bytes(&v5).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    let mut v4 = v5[..v5.len() - 1].to_vec();
    v4[0] = 4;
    let loaded = Shard::from_snapshot_bytes(&v4).unwrap();
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    // Version 6 carries the key.
    h.shard.uuid_key = key;
    let loaded = Shard::from_snapshot_bytes(&h.shard.snapshot_bytes().unwrap()).unwrap();
    assert_eq!(loaded.uuid_key, key);
    assert_eq!(loaded.state_digest(), h.shard.state_digest());
    let mut future = v3;
    future[0] = 9;
    assert_eq!(
        Shard::from_snapshot_bytes(&future).unwrap_err(),
        crate::DecodeError::UnsupportedVersion(9)
    );
}

#[test]
fn new_rejection_codes_follow_the_old_ones() {
    use crate::Rejection as R;
    let all = [
        R::UnknownCurrency,
        R::InvalidRequest(""),
        R::WrongShard(WalletId(0)),
        R::NotFound(""),
        R::Duplicate(""),
        R::CurrencyMismatch,
        R::InvalidAmount(""),
        R::WalletFrozen,
        R::InvalidState(""),
        R::HoldExpired,
        R::CaptureExceedsHold,
        R::NotADebit,
        R::AlreadyReversed,
        R::RefundExceedsOriginal,
        R::InsufficientFunds,
        R::LimitExceeded(""),
        R::FourEyes,
        R::PaymentLinkExpired,
        R::PeriodInvalid(""),
        R::NothingToSettle,
        R::Unavailable(""),
        R::BatchTooLarge(""),
        R::BatchInterrupted,
    ];
    let precedences: Vec<u16> = all.iter().map(R::precedence).collect();
    assert_eq!(precedences, (1..=23).collect::<Vec<u16>>());
    let codes: std::collections::BTreeSet<&str> = all.iter().map(R::code).collect();
    assert_eq!(codes.len(), all.len());
    assert_eq!(
        [17, 18, 19, 20].map(|n| all[n - 1].code()),
        [
            "four_eyes",
            "payment_link_expired",
            "period_invalid",
            "nothing_to_settle"
        ]
    );
}
