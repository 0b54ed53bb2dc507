//! The commerce invariants and `apply` checks catch what they claim to: each tampering below must
//! be reported by `check_invariants`, each misfitting event refused by `apply` without changes.

use rust_decimal::Decimal;

use super::commerce_support::{
    approve_payout, create_payout, create_settlement, day_of, merchant_wallet, pay_now, payout_of,
    settlement_of, CHECKER, MERCHANT,
};
use super::{dec, Harness};
use crate::commerce::payment::PaymentStatus;
use crate::commerce::payout::{PayoutChange, PayoutStatus, SettlementStatus};
use crate::ledger::hold::HoldStatus;
use crate::{Event, Shard};

/// A shard with a completed payment, an approved payout and a pending settlement.
fn sample() -> (Harness, crate::Uuid) {
    let mut h = Harness::new();
    let payer = h.create(1, "USD");
    h.deposit(payer, "100");
    let merchant = merchant_wallet(&mut h, MERCHANT, "USD");
    let payment = pay_now(&mut h, merchant, payer, "40");
    let payout = payout_of(h.ok(create_payout(payer, "10", "USD")));
    h.ok(approve_payout(payout.id, CHECKER));
    let day = day_of(h.now_ms);
    settlement_of(h.ok(create_settlement(merchant, day, day)));
    h.shard.check_invariants().unwrap();
    (h, payment.uuid)
}

#[test]
fn check_invariants_reports_each_tampering() {
    let (h, payment_uuid) = sample();
    type Tamper = fn(&mut Shard, crate::Uuid);
    let tampers: [(&str, Tamper); 9] = [
        ("refunded total", |s, p| {
            s.commerce.payments.get_mut(&p).unwrap().refunded_amount = dec("1.00");
        }),
        ("fee split", |s, p| {
            s.commerce.payments.get_mut(&p).unwrap().fee_amount += Decimal::ONE;
        }),
        ("status without credit", |s, p| {
            s.commerce
                .payments
                .get_mut(&p)
                .unwrap()
                .merchant_transaction_id = None;
        }),
        ("completed back to pending", |s, p| {
            s.commerce.payments.get_mut(&p).unwrap().status = PaymentStatus::Pending;
        }),
        ("payout status vs hold", |s, _| {
            s.commerce.payouts.values_mut().next().unwrap().status = PayoutStatus::Cancelled;
        }),
        ("payout hold index", |s, _| {
            s.index.commerce.payout_holds.clear();
        }),
        ("settled index", |s, _| {
            s.index.commerce.settled.clear();
        }),
        ("settlement total", |s, _| {
            s.commerce
                .settlements
                .values_mut()
                .next()
                .unwrap()
                .total_amount += Decimal::ONE;
        }),
        ("settlement freed but indexed", |s, _| {
            s.commerce.settlements.values_mut().next().unwrap().status =
                SettlementStatus::Cancelled;
        }),
    ];
    for (what, tamper) in tampers {
        let mut shard = h.shard.clone();
        tamper(&mut shard, payment_uuid);
        assert!(shard.check_invariants().is_err(), "{what} went unnoticed");
    }
}

#[test]
fn apply_refuses_commerce_events_that_do_not_fit() {
    let (h, _) = sample();
    let log = h.log.clone();
    let mut shard = h.shard.clone();
    let digest = shard.state_digest();
    // Each commerce event of the log, applied again, no longer fits.
    for event in log.iter().filter(|event| event.format_version() == 2) {
        if matches!(
            event,
            Event::TransactionRecorded { .. } | Event::EntryPosted { .. }
        ) {
            continue;
        }
        assert!(shard.apply(event).is_err(), "{event:?} applied twice");
        assert_eq!(shard.state_digest(), digest);
    }
    // A transition the table does not allow.
    let payout_id = *shard.commerce.payouts.keys().next().unwrap();
    let paid = Event::PayoutChanged {
        payout_id,
        change: PayoutChange::Paid { provider_ref: None },
        at_ms: 0,
    };
    assert_eq!(
        shard.apply(&paid).unwrap_err().what,
        "payout transition not allowed"
    );
    // Rejecting without the hold released first.
    let rejected = Event::PayoutChanged {
        payout_id,
        change: PayoutChange::Cancelled { by: 1 },
        at_ms: 0,
    };
    assert!(shard.apply(&rejected).is_err());
    assert_eq!(shard.state_digest(), digest);
    let hold = shard.commerce.payouts[&payout_id].hold_id;
    let wallet = shard.commerce.payouts[&payout_id].wallet_id;
    assert_eq!(
        shard.wallet(wallet).unwrap().hold(hold).unwrap().status,
        HoldStatus::Active
    );
    // The full log replays.
    let mut replayed = Shard::new(0, 1).unwrap();
    replayed.apply_all(&log).unwrap();
    assert_eq!(replayed.state_digest(), digest);
}
