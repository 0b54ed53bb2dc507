//! Payouts: the whole life cycle, four eyes, every refused transition, the hold they own.

use super::commerce_support::{all_zero, approve_payout, create_payout, payout_of, CHECKER, MAKER};
use super::{cur, dec, Harness};
use crate::commerce::payout::{PayoutAttemptStatus, PayoutStatus};
use crate::ledger::hold::{HoldStatus, NEVER_EXPIRES_AT_MS};
use crate::ledger::wallet::WalletType;
use crate::shard::command::{CaptureHold, Details, Page, PayoutProviderResult};
use crate::shard::commerce::query::PayoutFilter;
use crate::shard::commerce::report::ReportRange;
use crate::{Command, PayoutId, Rejection, WalletId};

fn setup() -> (Harness, WalletId) {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "100");
    (h, wallet)
}

fn result(payout_id: PayoutId, succeeded: bool) -> Command {
    Command::PayoutProviderResult(PayoutProviderResult {
        payout_id,
        succeeded,
        provider_ref: Some("prov-1".into()),
    })
}

fn clearing(h: &Harness) -> rust_decimal::Decimal {
    h.balance(
        h.shard
            .system_account(cur("USD"), WalletType::PayoutClearing)
            .unwrap(),
    )
}

#[test]
fn payout_from_pending_to_paid() {
    let (mut h, wallet) = setup();
    let created = payout_of(h.ok(create_payout(wallet, "60", "USD")));
    assert_eq!(created.status, PayoutStatus::Pending);
    assert_eq!(created.payout_method, "bank_transfer");
    assert_eq!(created.idempotency_key.as_deref(), Some("po-1"));
    assert_eq!((created.created_by, created.attempts.len()), (MAKER, 0));
    let hold = h.shard.hold_view(created.hold_uuid.unwrap()).unwrap();
    assert_eq!(
        (hold.status, hold.amount, hold.expires_at_ms),
        (HoldStatus::Active, dec("60.00"), NEVER_EXPIRES_AT_MS)
    );
    assert_eq!(
        (h.balance(wallet), h.available(wallet)),
        (dec("100.00"), dec("40.00"))
    );

    let approved = payout_of(h.ok(approve_payout(created.id, CHECKER)));
    assert_eq!(approved.status, PayoutStatus::Approved);
    assert_eq!(approved.approved.unwrap().by, CHECKER);
    assert_eq!(approved.approval_notes.as_deref(), Some("ok"));

    h.now_ms += 1000;
    let executed = payout_of(h.ok(Command::ExecutePayout {
        payout_id: created.id,
        by: CHECKER,
    }));
    assert_eq!(executed.status, PayoutStatus::Executed);
    assert_eq!(executed.executed.unwrap().at_ms, h.now_ms);
    assert_eq!(executed.attempts.len(), 1);
    assert_eq!(executed.attempts[0].status, PayoutAttemptStatus::Submitted);
    assert_eq!(
        (h.balance(wallet), h.available(wallet)),
        (dec("40.00"), dec("40.00"))
    );
    assert_eq!(clearing(&h), dec("60.00"));
    let debit = h
        .shard
        .transaction_view(executed.transaction_uuid.unwrap())
        .unwrap();
    assert_eq!(
        (
            debit.transaction_type.as_str(),
            debit.amount,
            debit.reference_type
        ),
        ("payout", dec("60.00"), Some("payout"))
    );
    let hold = h.shard.hold_view(created.hold_uuid.unwrap()).unwrap();
    assert_eq!(
        (hold.status, hold.captured_amount),
        (HoldStatus::Captured, Some(dec("60.00")))
    );

    let paid = payout_of(h.ok(result(created.id, true)));
    assert_eq!(paid.status, PayoutStatus::Paid);
    assert_eq!(paid.attempts[0].status, PayoutAttemptStatus::Succeeded);
    assert_eq!(paid.attempts[0].provider_ref.as_deref(), Some("prov-1"));
    assert_eq!(paid.paid_at_ms, Some(h.now_ms));
    assert_eq!(h.shard.payout_view(created.id).unwrap(), paid);
    assert!(all_zero(&h));
}

#[test]
fn provider_failure_returns_the_funds_even_to_a_frozen_wallet() {
    let (mut h, wallet) = setup();
    let payout = payout_of(h.ok(create_payout(wallet, "60", "USD")));
    h.ok(approve_payout(payout.id, CHECKER));
    h.ok(Command::ExecutePayout {
        payout_id: payout.id,
        by: CHECKER,
    });
    h.ok(Command::FreezeWallet { wallet_id: wallet });
    let failed = payout_of(h.ok(result(payout.id, false)));
    assert_eq!(failed.status, PayoutStatus::Failed);
    assert_eq!(failed.attempts[0].status, PayoutAttemptStatus::Failed);
    assert_eq!(h.balance(wallet), dec("100.00"));
    assert_eq!(clearing(&h), dec("0.00"));
    let back = h
        .shard
        .transaction_view(failed.return_transaction_uuid.unwrap())
        .unwrap();
    assert_eq!(back.transaction_type.as_str(), "payout_return");
    assert!(all_zero(&h));
}

#[test]
fn four_eyes_and_state_come_in_precedence_order() {
    let (mut h, wallet) = setup();
    let payout = payout_of(h.ok(create_payout(wallet, "10", "USD")));
    assert_eq!(
        h.reject(approve_payout(payout.id, MAKER)),
        Rejection::FourEyes
    );
    h.ok(approve_payout(payout.id, CHECKER));
    // Already approved: the state is checked before four eyes.
    assert_eq!(
        h.reject(approve_payout(payout.id, MAKER)).code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(approve_payout(PayoutId(999), CHECKER)).code(),
        "not_found"
    );
    // The maker may cancel or execute; only approval needs a second person.
    h.ok(Command::ExecutePayout {
        payout_id: payout.id,
        by: MAKER,
    });
}

#[test]
fn reject_and_cancel_release_the_hold() {
    let (mut h, wallet) = setup();
    let first = payout_of(h.ok(create_payout(wallet, "70", "USD")));
    assert_eq!(
        h.reject(create_payout(wallet, "30.01", "USD")),
        Rejection::InsufficientFunds
    );
    for reason in ["", "   "] {
        assert_eq!(
            h.reject(Command::RejectPayout {
                payout_id: first.id,
                by: CHECKER,
                reason: reason.into(),
            })
            .code(),
            "invalid_request"
        );
    }
    let rejected = payout_of(h.ok(Command::RejectPayout {
        payout_id: first.id,
        by: CHECKER,
        reason: "wrong account".into(),
    }));
    assert_eq!(rejected.status, PayoutStatus::Rejected);
    assert_eq!(rejected.rejection_reason.as_deref(), Some("wrong account"));
    assert_eq!(h.available(wallet), dec("100.00"));
    let second = payout_of(h.ok(create_payout(wallet, "100", "USD")));
    h.ok(approve_payout(second.id, CHECKER));
    let cancelled = payout_of(h.ok(Command::CancelPayout {
        payout_id: second.id,
        by: MAKER,
    }));
    assert_eq!(cancelled.status, PayoutStatus::Cancelled);
    assert_eq!(cancelled.cancelled.unwrap().by, MAKER);
    assert_eq!(h.available(wallet), dec("100.00"));
    let hold = h.shard.hold_view(second.hold_uuid.unwrap()).unwrap();
    assert_eq!(hold.status, HoldStatus::Released);
}

/// Brings a fresh payout of `wallet` to `status`.
fn payout_in(h: &mut Harness, wallet: WalletId, status: PayoutStatus) -> PayoutId {
    let id = payout_of(h.ok(create_payout(wallet, "1", "USD"))).id;
    let steps: &[Command] = match status {
        PayoutStatus::Pending => &[],
        PayoutStatus::Approved => &[approve_payout(id, CHECKER)],
        PayoutStatus::Rejected => &[Command::RejectPayout {
            payout_id: id,
            by: CHECKER,
            reason: "no".into(),
        }],
        PayoutStatus::Cancelled => &[Command::CancelPayout {
            payout_id: id,
            by: MAKER,
        }],
        PayoutStatus::Executed => &[
            approve_payout(id, CHECKER),
            Command::ExecutePayout {
                payout_id: id,
                by: CHECKER,
            },
        ],
        PayoutStatus::Paid | PayoutStatus::Failed => &[
            approve_payout(id, CHECKER),
            Command::ExecutePayout {
                payout_id: id,
                by: CHECKER,
            },
            result(id, status == PayoutStatus::Paid),
        ],
    };
    for step in steps {
        h.ok(step.clone());
    }
    assert_eq!(h.shard.payout(id).unwrap().unwrap().status, status);
    id
}

#[test]
fn every_transition_not_in_the_table_is_invalid_state() {
    use PayoutStatus as S;
    let (mut h, wallet) = setup();
    let statuses = [
        S::Pending,
        S::Approved,
        S::Rejected,
        S::Cancelled,
        S::Executed,
        S::Paid,
        S::Failed,
    ];
    for from in statuses {
        let id = payout_in(&mut h, wallet, from);
        let attempts = [
            (S::Approved, approve_payout(id, CHECKER)),
            (
                S::Rejected,
                Command::RejectPayout {
                    payout_id: id,
                    by: CHECKER,
                    reason: "r".into(),
                },
            ),
            (
                S::Cancelled,
                Command::CancelPayout {
                    payout_id: id,
                    by: MAKER,
                },
            ),
            (
                S::Executed,
                Command::ExecutePayout {
                    payout_id: id,
                    by: CHECKER,
                },
            ),
            (S::Paid, result(id, true)),
            (S::Failed, result(id, false)),
        ];
        for (to, command) in attempts {
            let ctx = h.ctx();
            let allowed = h.shard.decide(&command, &ctx).is_ok();
            assert_eq!(allowed, from.can_become(to), "{from:?} -> {to:?}");
            if !allowed {
                assert_eq!(
                    h.reject(command).code(),
                    "invalid_state",
                    "{from:?} -> {to:?}"
                );
            }
        }
    }
}

#[test]
fn the_payout_hold_is_the_payouts_alone() {
    let (mut h, wallet) = setup();
    let payout = payout_of(h.ok(create_payout(wallet, "50", "USD")));
    let hold_uuid = payout.hold_uuid.unwrap();
    assert_eq!(
        h.reject(Command::ReleaseHold { hold_uuid }).code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(Command::CaptureHold(CaptureHold {
            hold_uuid,
            amount: None,
            counter_wallet_id: None,
            details: Details::default(),
        }))
        .code(),
        "invalid_state"
    );
    h.now_ms += 365 * 24 * 3_600_000;
    h.ok(Command::ExpireHolds { max_holds: 100 });
    assert!(h.shard.expire_holds(h.now_ms).is_empty());
    assert_eq!(
        h.shard.hold_view(hold_uuid).unwrap().status,
        HoldStatus::Active
    );
}

#[test]
fn create_and_execute_refusals() {
    let (mut h, wallet) = setup();
    let mut no_method = create_payout(wallet, "1", "USD");
    if let Command::CreatePayout(request) = &mut no_method {
        request.payout_method = " ".into();
    }
    assert_eq!(h.reject(no_method).code(), "invalid_request");
    assert_eq!(
        h.reject(create_payout(WalletId(999), "1", "USD")).code(),
        "not_found"
    );
    assert_eq!(
        h.reject(create_payout(wallet, "1", "EUR")),
        Rejection::CurrencyMismatch
    );
    assert_eq!(
        h.reject(create_payout(wallet, "0.001", "USD")).code(),
        "invalid_amount"
    );
    let payout = payout_of(h.ok(create_payout(wallet, "1", "USD")));
    h.ok(approve_payout(payout.id, CHECKER));
    h.ok(Command::FreezeWallet { wallet_id: wallet });
    assert_eq!(
        h.reject(create_payout(wallet, "1", "USD")),
        Rejection::WalletFrozen
    );
    assert_eq!(
        h.reject(Command::ExecutePayout {
            payout_id: payout.id,
            by: CHECKER
        }),
        Rejection::WalletFrozen
    );
    // Cancel frees the funds of a frozen wallet.
    h.ok(Command::CancelPayout {
        payout_id: payout.id,
        by: MAKER,
    });
}

#[test]
fn payout_lists_and_report() {
    let (mut h, wallet) = setup();
    let other = h.create(2, "USD");
    h.deposit(other, "50");
    let a = payout_in(&mut h, wallet, PayoutStatus::Paid);
    let b = payout_in(&mut h, wallet, PayoutStatus::Pending);
    let c = payout_in(&mut h, other, PayoutStatus::Pending);
    let page = h
        .shard
        .payouts_page(&PayoutFilter::default(), Page::default())
        .unwrap();
    let ids: Vec<PayoutId> = page.records.iter().map(|p| p.id).collect();
    assert_eq!(ids, [c, b, a]);
    let pending_of_wallet = h
        .shard
        .payouts_page(
            &PayoutFilter {
                wallet_id: Some(wallet),
                status: Some(PayoutStatus::Pending),
                business_id: Some(1),
            },
            Page::default(),
        )
        .unwrap();
    assert_eq!(pending_of_wallet.total, 1);
    assert_eq!(pending_of_wallet.records[0].id, b);
    let range = ReportRange {
        from_ms: h.now_ms,
        to_ms: h.now_ms,
        business_id: Some(1),
        currency: None,
    };
    let rows = h.shard.payout_report(&range).unwrap();
    let summary: Vec<(PayoutStatus, u64, rust_decimal::Decimal)> = rows
        .iter()
        .map(|row| (row.status, row.count, row.total_amount))
        .collect();
    assert_eq!(
        summary,
        [
            (PayoutStatus::Pending, 2, dec("2.00")),
            (PayoutStatus::Paid, 1, dec("1.00"))
        ]
    );
    let later = ReportRange {
        from_ms: h.now_ms + 1,
        to_ms: h.now_ms + 10,
        ..range
    };
    assert!(h.shard.payout_report(&later).unwrap().is_empty());
}
