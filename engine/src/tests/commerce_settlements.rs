//! Settlements: gathering a period's payment credits, never twice, freed by cancel/reject, the
//! life cycle with four eyes, execution into settlement clearing.

use rust_decimal::Decimal;

use super::commerce_support::{
    all_zero, approve_settlement, create_settlement, day_of, initiate, merchant_wallet, pay,
    pay_now, settlement_of, CHECKER, MAKER, MERCHANT,
};
use super::{cur, dec, withdraw, Harness};
use crate::commerce::payout::{SettlementStatus, DAY_MS};
use crate::ledger::wallet::WalletType;
use crate::shard::command::Page;
use crate::shard::commerce::query::SettlementFilter;
use crate::shard::commerce::report::ReportRange;
use crate::{Command, Rejection, SettlementId, WalletId};

struct Setup {
    h: Harness,
    payer: WalletId,
    merchant: WalletId,
    /// Day start of the middle day.
    day: i64,
}

/// Payments of 10, 20, 30 on day D; 40 on D−1; 50 on D+1 (fee 2.5 % + 0.30 each).
fn setup() -> Setup {
    let mut h = Harness::new();
    let payer = h.create(1, "USD");
    h.deposit(payer, "1000");
    let merchant = merchant_wallet(&mut h, MERCHANT, "USD");
    let day = day_of(h.now_ms) + 10 * DAY_MS;
    for (offset, amount) in [
        (-DAY_MS + 5, "40"),
        (1, "10"),
        (3_600_000, "20"),
        (DAY_MS - 1, "30"),
        (DAY_MS, "50"),
    ] {
        h.now_ms = day + offset;
        pay_now(&mut h, merchant, payer, amount);
    }
    // Money of other kinds does not count: a pending payment and a deposit on day D.
    h.now_ms = day + 7;
    pay(&mut h, initiate(merchant, payer, "60", "USD"));
    h.deposit(merchant, "5");
    h.now_ms = day + 3 * DAY_MS;
    Setup {
        h,
        payer,
        merchant,
        day,
    }
}

fn amounts(view: &crate::commerce::view::SettlementView) -> Vec<Decimal> {
    view.items.iter().map(|item| item.amount).collect()
}

#[test]
fn a_settlement_gathers_the_periods_payment_credits() {
    let Setup {
        mut h,
        merchant,
        day,
        ..
    } = setup();
    let settlement = settlement_of(h.ok(create_settlement(merchant, day, day)));
    assert_eq!(settlement.status, SettlementStatus::Pending);
    assert_eq!(
        amounts(&settlement),
        [dec("10.00"), dec("20.00"), dec("30.00")]
    );
    let item = &settlement.items[0];
    assert_eq!(
        (item.amount, item.fee_amount, item.net_amount),
        (dec("10.00"), dec("0.55"), dec("9.45"))
    );
    let credit = h.shard.transaction_view(item.transaction_uuid).unwrap();
    assert_eq!(
        (credit.wallet_id, credit.net_amount),
        (merchant, dec("9.45"))
    );
    // 60 − fees (0.55 + 0.80 + 1.05).
    assert_eq!(settlement.total_amount, dec("57.60"));
    assert_eq!(settlement.total_fee_amount, dec("2.40"));
    assert_eq!(
        (settlement.period_start_ms, settlement.period_end_ms),
        (day, day)
    );
    assert_eq!(settlement.idempotency_key.as_deref(), Some("st-1"));
    assert_eq!(h.shard.settlement_view(settlement.id).unwrap(), settlement);
}

#[test]
fn items_never_overlap_and_cancel_or_reject_frees_them() {
    let Setup {
        mut h,
        merchant,
        day,
        ..
    } = setup();
    let middle = settlement_of(h.ok(create_settlement(merchant, day, day)));
    let wide = settlement_of(h.ok(create_settlement(merchant, day - DAY_MS, day + DAY_MS)));
    assert_eq!(amounts(&wide), [dec("40.00"), dec("50.00")]);
    assert_eq!(
        h.reject(create_settlement(merchant, day - DAY_MS, day + DAY_MS)),
        Rejection::NothingToSettle
    );
    h.ok(Command::CancelSettlement {
        settlement_id: middle.id,
        by: MAKER,
    });
    let again = settlement_of(h.ok(create_settlement(merchant, day - DAY_MS, day + DAY_MS)));
    assert_eq!(amounts(&again), [dec("10.00"), dec("20.00"), dec("30.00")]);
    h.ok(Command::RejectSettlement {
        settlement_id: wide.id,
        by: CHECKER,
        reason: "wrong period".into(),
    });
    let last = settlement_of(h.ok(create_settlement(merchant, day - DAY_MS, day + DAY_MS)));
    assert_eq!(amounts(&last), [dec("40.00"), dec("50.00")]);
    // An executed settlement keeps its items.
    h.ok(approve_settlement(last.id, CHECKER));
    h.ok(Command::ExecuteSettlement {
        settlement_id: last.id,
        by: CHECKER,
    });
    h.ok(Command::CancelSettlement {
        settlement_id: again.id,
        by: MAKER,
    });
    let rest = settlement_of(h.ok(create_settlement(merchant, day - DAY_MS, day + DAY_MS)));
    assert_eq!(amounts(&rest), [dec("10.00"), dec("20.00"), dec("30.00")]);
}

#[test]
fn life_cycle_four_eyes_and_execution() {
    let Setup {
        mut h,
        merchant,
        day,
        ..
    } = setup();
    let settlement = settlement_of(h.ok(create_settlement(merchant, day, day)));
    assert_eq!(
        h.reject(approve_settlement(settlement.id, MAKER)),
        Rejection::FourEyes
    );
    assert_eq!(
        h.reject(Command::ExecuteSettlement {
            settlement_id: settlement.id,
            by: CHECKER
        })
        .code(),
        "invalid_state"
    );
    let approved = settlement_of(h.ok(Command::ApproveSettlement {
        settlement_id: settlement.id,
        by: CHECKER,
        notes: Some("checked".into()),
    }));
    assert_eq!(approved.status, SettlementStatus::Approved);
    assert_eq!(approved.approval_notes.as_deref(), Some("checked"));
    assert_eq!(
        h.reject(approve_settlement(settlement.id, MAKER)).code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(Command::RejectSettlement {
            settlement_id: settlement.id,
            by: CHECKER,
            reason: "late".into()
        })
        .code(),
        "invalid_state"
    );
    let before = h.balance(merchant);
    let executed = settlement_of(h.ok(Command::ExecuteSettlement {
        settlement_id: settlement.id,
        by: CHECKER,
    }));
    assert_eq!(executed.status, SettlementStatus::Executed);
    assert_eq!(h.balance(merchant), before - dec("57.60"));
    let clearing = h
        .shard
        .system_account(cur("USD"), WalletType::SettlementClearing)
        .unwrap();
    assert_eq!(h.balance(clearing), dec("57.60"));
    let debit = h
        .shard
        .transaction_view(executed.transaction_uuid.unwrap())
        .unwrap();
    assert_eq!(
        (debit.transaction_type.as_str(), debit.reference_uuid),
        ("settlement", Some(executed.uuid))
    );
    for command in [
        Command::ExecuteSettlement {
            settlement_id: settlement.id,
            by: CHECKER,
        },
        Command::CancelSettlement {
            settlement_id: settlement.id,
            by: MAKER,
        },
        approve_settlement(settlement.id, CHECKER),
    ] {
        assert_eq!(h.reject(command).code(), "invalid_state");
    }
    assert!(all_zero(&h));
}

#[test]
fn execution_needs_the_funds_and_an_unfrozen_wallet() {
    let Setup {
        mut h,
        merchant,
        day,
        ..
    } = setup();
    let settlement = settlement_of(h.ok(create_settlement(merchant, day, day)));
    h.ok(approve_settlement(settlement.id, CHECKER));
    let spendable = h.available(merchant);
    h.ok(withdraw(merchant, &(spendable - dec("57.59")).to_string()));
    let execute = Command::ExecuteSettlement {
        settlement_id: settlement.id,
        by: CHECKER,
    };
    assert_eq!(h.reject(execute.clone()), Rejection::InsufficientFunds);
    h.deposit(merchant, "0.01");
    h.ok(Command::FreezeWallet {
        wallet_id: merchant,
    });
    assert_eq!(h.reject(execute.clone()), Rejection::WalletFrozen);
    h.ok(Command::UnfreezeWallet {
        wallet_id: merchant,
    });
    h.ok(execute);
    assert_eq!(h.balance(merchant), dec("0.00"));
}

#[test]
fn period_and_existence_rules_in_precedence_order() {
    let Setup {
        mut h,
        merchant,
        payer,
        day,
    } = setup();
    assert_eq!(
        h.reject(create_settlement(merchant, day + 1, day + DAY_MS))
            .code(),
        "invalid_request"
    );
    assert_eq!(
        h.reject(create_settlement(WalletId(999), day, day - DAY_MS))
            .code(),
        "not_found"
    );
    assert_eq!(
        h.reject(create_settlement(merchant, day, day - DAY_MS)),
        Rejection::PeriodInvalid("period_end is before period_start")
    );
    assert_eq!(
        h.reject(create_settlement(
            merchant,
            day + 5 * DAY_MS,
            day + 6 * DAY_MS
        )),
        Rejection::NothingToSettle
    );
    // The payer's wallet has payment debits only.
    assert_eq!(
        h.reject(create_settlement(payer, day, day)),
        Rejection::NothingToSettle
    );
    for command in [
        approve_settlement(SettlementId(999), CHECKER),
        Command::CancelSettlement {
            settlement_id: SettlementId(999),
            by: MAKER,
        },
    ] {
        assert_eq!(h.reject(command).code(), "not_found");
    }
    let settlement = settlement_of(h.ok(create_settlement(merchant, day, day)));
    assert_eq!(
        h.reject(Command::RejectSettlement {
            settlement_id: settlement.id,
            by: CHECKER,
            reason: " ".into()
        })
        .code(),
        "invalid_request"
    );
}

#[test]
fn settlement_lists_and_report() {
    let Setup {
        mut h,
        merchant,
        day,
        ..
    } = setup();
    let first = settlement_of(h.ok(create_settlement(merchant, day, day)));
    let second = settlement_of(h.ok(create_settlement(merchant, day - DAY_MS, day - DAY_MS)));
    h.ok(Command::CancelSettlement {
        settlement_id: second.id,
        by: MAKER,
    });
    let page = h
        .shard
        .settlements_page(&SettlementFilter::default(), Page::default());
    assert_eq!(page.total, 2);
    assert_eq!(page.records[0].id, second.id);
    let pending = h.shard.settlements_page(
        &SettlementFilter {
            status: Some(SettlementStatus::Pending),
            business_id: Some(MERCHANT),
            wallet_id: Some(merchant),
        },
        Page::default(),
    );
    assert_eq!(pending.records.len(), 1);
    assert_eq!(pending.records[0].id, first.id);
    let rows = h.shard.settlement_report(&ReportRange {
        from_ms: h.now_ms,
        to_ms: h.now_ms,
        business_id: Some(MERCHANT),
        currency: Some(cur("USD")),
    });
    let summary: Vec<(SettlementStatus, u64, Decimal)> = rows
        .iter()
        .map(|row| (row.status, row.count, row.total_amount))
        .collect();
    assert_eq!(
        summary,
        [
            (SettlementStatus::Pending, 1, dec("57.60")),
            (SettlementStatus::Cancelled, 1, dec("38.70")),
        ]
    );
}
