//! Payments on one shard: initiate, confirm, cancel, fail, sandbox provider, refunds, links;
//! every refusal (the harness checks each one changed nothing).

use rust_decimal::Decimal;

use super::commerce_support::{
    all_zero, fee, initiate, link, link_of, merchant_wallet, pay, pay_now, payment_of, refund,
    MERCHANT,
};
use super::{dec, deposit, withdraw, Harness};
use crate::commerce::payment::{PaymentLinkStatus, PaymentProvider, PaymentStatus};
use crate::ledger::transaction::{Direction, TransactionType};
use crate::ledger::wallet::WalletType;
use crate::shard::command::{PaymentProviderResult, Refund};
use crate::{Command, Rejection, Uuid, WalletId};

/// A funded payer (customer 1, USD 200) and a merchant wallet of [`MERCHANT`].
fn setup() -> (Harness, WalletId, WalletId) {
    let mut h = Harness::new();
    let payer = h.create(1, "USD");
    h.deposit(payer, "200");
    let merchant = merchant_wallet(&mut h, MERCHANT, "USD");
    (h, payer, merchant)
}

fn fees_balance(h: &Harness) -> Decimal {
    h.shard
        .system_account(super::cur("USD"), WalletType::Fees)
        .map_or(Decimal::ZERO, |fees| h.balance(fees))
}

#[test]
fn initiate_records_a_pending_payment_with_its_fee_split() {
    let (mut h, payer, merchant) = setup();
    let payment = pay(&mut h, initiate(merchant, payer, "100", "USD"));
    assert_eq!(payment.status, PaymentStatus::Pending);
    assert_eq!(
        (payment.amount, payment.fee_amount, payment.net_amount),
        (dec("100.00"), dec("2.80"), dec("97.20"))
    );
    assert_eq!(
        (payment.merchant_id, payment.provider),
        (MERCHANT, PaymentProvider::Wallet)
    );
    assert!(payment.provider_ref.parse::<Uuid>().is_ok());
    assert_eq!(payment.metadata.as_deref(), Some("{\"order\":1}"));
    assert_eq!(payment.merchant_transaction_uuid, None);
    assert_eq!(
        (h.balance(payer), h.balance(merchant)),
        (dec("200.00"), dec("0.00"))
    );
    assert_eq!(h.shard.payment_view(payment.uuid).unwrap(), payment);
}

#[test]
fn initiate_refusals_in_precedence_order() {
    let (mut h, payer, merchant) = setup();
    let reject = |h: &mut Harness, edit: &dyn Fn(&mut crate::shard::command::InitiatePayment)| {
        let mut request = initiate(merchant, payer, "10", "USD");
        edit(&mut request);
        h.reject(Command::InitiatePayment(request)).code()
    };
    assert_eq!(
        reject(&mut h, &|r| r.description = Some("x".repeat(5000))),
        "invalid_request"
    );
    assert_eq!(
        reject(&mut h, &|r| r.fee = fee("101", "0")),
        "invalid_request"
    );
    assert_eq!(
        reject(&mut h, &|r| r.payer_wallet_id = merchant),
        "invalid_request"
    );
    assert_eq!(
        reject(&mut h, &|r| r.merchant_wallet_id = WalletId(999)),
        "not_found"
    );
    assert_eq!(reject(&mut h, &|r| r.merchant_id = 8), "not_found");
    assert_eq!(
        reject(&mut h, &|r| r.payer_wallet_id = WalletId(999)),
        "not_found"
    );
    assert_eq!(
        reject(&mut h, &|r| r.payment_link_uuid = Some(Uuid([1; 16]))),
        "not_found"
    );
    assert_eq!(
        reject(&mut h, &|r| r.currency = super::cur("EUR")),
        "currency_mismatch"
    );
    assert_eq!(reject(&mut h, &|r| r.amount = dec("0")), "invalid_amount");
    assert_eq!(
        reject(&mut h, &|r| r.amount = dec("1.001")),
        "invalid_amount"
    );
    h.ok(Command::FreezeWallet {
        wallet_id: merchant,
    });
    // Two rules broken: the lower precedence number wins.
    assert_eq!(reject(&mut h, &|r| r.amount = dec("-1")), "invalid_amount");
    assert_eq!(reject(&mut h, &|_| {}), "wallet_frozen");
    // The payer is not checked for funds or frozen at initiation.
    h.ok(Command::UnfreezeWallet {
        wallet_id: merchant,
    });
    h.ok(Command::FreezeWallet { wallet_id: payer });
    pay(&mut h, initiate(merchant, payer, "1000", "USD"));
}

#[test]
fn confirm_moves_the_money_in_one_balanced_posting() {
    let (mut h, payer, merchant) = setup();
    let pending = pay(&mut h, initiate(merchant, payer, "100", "USD"));
    let events_before = h.log.len();
    let done = payment_of(h.ok(Command::ConfirmPayment {
        payment_uuid: pending.uuid,
    }));
    assert_eq!(done.status, PaymentStatus::Completed);
    assert_eq!(done.completed_at_ms, Some(h.now_ms));
    assert_eq!(
        (h.balance(payer), h.balance(merchant), fees_balance(&h)),
        (dec("100.00"), dec("97.20"), dec("2.80"))
    );
    assert!(all_zero(&h));
    // One posting: two transactions, three entries.
    let new_events = &h.log[events_before..];
    let entries = new_events
        .iter()
        .filter(|e| matches!(e, crate::Event::EntryPosted { .. }))
        .count();
    assert_eq!(entries, 3);
    let credit = h
        .shard
        .transaction_view(done.merchant_transaction_uuid.unwrap())
        .unwrap();
    assert_eq!(
        (
            credit.transaction_type,
            credit.direction,
            credit.amount,
            credit.fee_amount,
            credit.net_amount
        ),
        (
            TransactionType::Payment,
            Direction::Credit,
            dec("100.00"),
            dec("2.80"),
            dec("97.20")
        )
    );
    assert_eq!(
        (
            credit.reference_type,
            credit.reference_uuid,
            credit.transfer_uuid
        ),
        (Some("payment"), Some(done.uuid), None)
    );
    let debit = h
        .shard
        .wallet(payer)
        .unwrap()
        .transactions()
        .last()
        .unwrap()
        .clone();
    assert_eq!(
        (debit.transaction_type, debit.direction, debit.amount),
        (TransactionType::Payment, Direction::Debit, dec("100.00"))
    );
    // Neither side is a client's to reverse or wallet-refund.
    assert_eq!(
        h.reject(Command::Reverse {
            transaction_uuid: credit.uuid,
            reason: "x".into()
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(Command::Refund(Refund {
            original_transaction_uuid: debit.uuid,
            amount: dec("1"),
            reason: None,
            details: crate::shard::command::Details::default(),
        })),
        Rejection::NotADebit
    );
}

#[test]
fn zero_fee_and_whole_fee_payments_leave_out_the_empty_leg() {
    let (mut h, payer, merchant) = setup();
    let mut free = initiate(merchant, payer, "10", "USD");
    free.fee = fee("0", "0");
    let free = pay(&mut h, free);
    h.ok(Command::ConfirmPayment {
        payment_uuid: free.uuid,
    });
    assert_eq!(h.balance(merchant), dec("10.00"));
    let mut all_fee = initiate(merchant, payer, "0.20", "USD");
    all_fee.fee = fee("0", "0.30");
    let all_fee = pay(&mut h, all_fee);
    assert_eq!(
        (all_fee.fee_amount, all_fee.net_amount),
        (dec("0.20"), dec("0.00"))
    );
    h.ok(Command::ConfirmPayment {
        payment_uuid: all_fee.uuid,
    });
    assert_eq!(
        (h.balance(merchant), fees_balance(&h)),
        (dec("10.00"), dec("0.20"))
    );
}

#[test]
fn confirm_refusals() {
    let (mut h, payer, merchant) = setup();
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: Uuid([9; 16])
        })
        .code(),
        "not_found"
    );
    let big = pay(&mut h, initiate(merchant, payer, "200.01", "USD"));
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: big.uuid
        }),
        Rejection::InsufficientFunds
    );
    let payment = pay(&mut h, initiate(merchant, payer, "50", "USD"));
    h.ok(Command::FreezeWallet { wallet_id: payer });
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: payment.uuid
        }),
        Rejection::WalletFrozen
    );
    h.ok(Command::UnfreezeWallet { wallet_id: payer });
    h.ok(Command::FreezeWallet {
        wallet_id: merchant,
    });
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: payment.uuid
        }),
        Rejection::WalletFrozen
    );
    h.ok(Command::UnfreezeWallet {
        wallet_id: merchant,
    });
    h.ok(Command::ConfirmPayment {
        payment_uuid: payment.uuid,
    });
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: payment.uuid
        })
        .code(),
        "invalid_state"
    );
    let mut sandbox = initiate(merchant, payer, "5", "USD");
    sandbox.provider = PaymentProvider::Sandbox;
    let sandbox = pay(&mut h, sandbox);
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: sandbox.uuid
        })
        .code(),
        "invalid_state"
    );
}

#[test]
fn cancel_and_fail_only_while_pending() {
    let (mut h, payer, merchant) = setup();
    let a = pay(&mut h, initiate(merchant, payer, "10", "USD"));
    let cancelled = payment_of(h.ok(Command::CancelPayment {
        payment_uuid: a.uuid,
    }));
    assert_eq!(cancelled.status, PaymentStatus::Cancelled);
    assert_eq!(cancelled.closed_at_ms, Some(h.now_ms));
    for command in [
        Command::CancelPayment {
            payment_uuid: a.uuid,
        },
        Command::FailPayment {
            payment_uuid: a.uuid,
        },
        Command::ConfirmPayment {
            payment_uuid: a.uuid,
        },
        refund(a.uuid, Some("1")),
    ] {
        assert_eq!(h.reject(command).code(), "invalid_state");
    }
    let b = pay(&mut h, initiate(merchant, payer, "10", "USD"));
    let failed = payment_of(h.ok(Command::FailPayment {
        payment_uuid: b.uuid,
    }));
    assert_eq!(failed.status, PaymentStatus::Failed);
    assert_eq!(
        h.reject(Command::CancelPayment {
            payment_uuid: b.uuid
        })
        .code(),
        "invalid_state"
    );
    let c = pay_now(&mut h, merchant, payer, "10");
    assert_eq!(
        h.reject(Command::CancelPayment {
            payment_uuid: c.uuid
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(
        h.balance(payer),
        dec("190.00"),
        "only the confirmed one moved money"
    );
}

#[test]
fn refunds_partial_full_and_over() {
    let (mut h, payer, merchant) = setup();
    let pending = pay(&mut h, initiate(merchant, payer, "100", "USD"));
    assert_eq!(
        h.reject(refund(pending.uuid, Some("1"))).code(),
        "invalid_state"
    );
    h.ok(Command::ConfirmPayment {
        payment_uuid: pending.uuid,
    });
    let uuid = pending.uuid;
    let partial = payment_of(h.ok(refund(uuid, Some("30"))));
    assert_eq!(
        (partial.status, partial.refunded_amount),
        (PaymentStatus::PartiallyRefunded, dec("30.00"))
    );
    assert_eq!(
        (h.balance(payer), h.balance(merchant)),
        (dec("130.00"), dec("67.20"))
    );
    assert_eq!(
        h.reject(refund(uuid, Some("70.01"))),
        Rejection::RefundExceedsOriginal
    );
    assert_eq!(h.reject(refund(uuid, Some("0"))).code(), "invalid_amount");
    // The merchant pays refunds from its own balance (fees are kept): 70 > 67.20.
    assert_eq!(h.reject(refund(uuid, None)), Rejection::InsufficientFunds);
    h.ok(deposit(merchant, "10"));
    h.ok(Command::FreezeWallet { wallet_id: payer });
    assert_eq!(h.reject(refund(uuid, None)), Rejection::WalletFrozen);
    h.ok(Command::UnfreezeWallet { wallet_id: payer });
    let full = payment_of(h.ok(refund(uuid, None)));
    assert_eq!(
        (full.status, full.refunded_amount),
        (PaymentStatus::Refunded, dec("100.00"))
    );
    assert_eq!(
        (h.balance(payer), h.balance(merchant)),
        (dec("200.00"), dec("7.20"))
    );
    assert_eq!(h.reject(refund(uuid, None)).code(), "invalid_state");
    assert_eq!(h.reject(refund(uuid, Some("0.01"))).code(), "invalid_state");
    let refunds: Vec<_> = h
        .shard
        .wallet(payer)
        .unwrap()
        .transactions()
        .iter()
        .filter(|t| t.transaction_type == TransactionType::PaymentRefund)
        .map(|t| (t.direction, t.amount))
        .collect();
    assert_eq!(
        refunds,
        [
            (Direction::Credit, dec("30.00")),
            (Direction::Credit, dec("70.00"))
        ]
    );
    assert_eq!(fees_balance(&h), dec("2.80"));
    assert!(all_zero(&h));
}

#[test]
fn sandbox_payments_complete_or_fail_on_the_provider_result() {
    let (mut h, payer, merchant) = setup();
    let mut request = initiate(merchant, payer, "40", "USD");
    request.provider = PaymentProvider::Sandbox;
    let payment = pay(&mut h, request.clone());
    let result = |succeeded: bool, provider_ref: Option<String>| {
        Command::PaymentProviderResult(PaymentProviderResult {
            payment_uuid: payment.uuid,
            succeeded,
            provider_ref,
        })
    };
    assert_eq!(
        h.reject(result(true, Some("other".into()))).code(),
        "invalid_request"
    );
    let done = payment_of(h.ok(result(true, Some(payment.provider_ref.clone()))));
    assert_eq!(done.status, PaymentStatus::Completed);
    assert_eq!(h.balance(payer), dec("200.00"), "paid from outside");
    assert_eq!(h.balance(merchant), dec("38.70"));
    let float = h
        .shard
        .system_account(super::cur("USD"), WalletType::Float)
        .unwrap();
    let float_before = h.balance(float);
    payment_of(h.ok(refund(payment.uuid, Some("10"))));
    assert_eq!(
        h.balance(float),
        float_before + dec("10"),
        "refunded outside"
    );
    assert_eq!(h.balance(payer), dec("200.00"));
    assert_eq!(h.reject(result(true, None)).code(), "invalid_state");
    assert_eq!(h.reject(result(false, None)).code(), "invalid_state");

    let second = pay(&mut h, request);
    let failed = payment_of(h.ok(Command::PaymentProviderResult(PaymentProviderResult {
        payment_uuid: second.uuid,
        succeeded: false,
        provider_ref: None,
    })));
    assert_eq!(failed.status, PaymentStatus::Failed);
    let wallet_payment = pay(&mut h, initiate(merchant, payer, "1", "USD"));
    assert_eq!(
        h.reject(Command::PaymentProviderResult(PaymentProviderResult {
            payment_uuid: wallet_payment.uuid,
            succeeded: true,
            provider_ref: None,
        }))
        .code(),
        "invalid_state"
    );
    assert!(all_zero(&h));
}

#[test]
fn payment_links_are_single_use_and_expire() {
    let (mut h, payer, merchant) = setup();
    let created = link_of(h.ok(link(merchant, "25", None)));
    assert_eq!(created.status, PaymentLinkStatus::Active);
    assert_eq!(created.expires_at_ms, h.now_ms + 1440 * 60_000);
    assert_eq!(created.amount, dec("25.00"));
    for minutes in [0, 43_201] {
        assert_eq!(
            h.reject(link(merchant, "25", Some(minutes))).code(),
            "invalid_request"
        );
    }
    assert_eq!(h.reject(link(merchant, "0", None)).code(), "invalid_amount");
    let other = merchant_wallet(&mut h, MERCHANT + 1, "USD");
    let with_link = |amount: &str, wallet: WalletId, merchant_id: u64| {
        let mut request = initiate(wallet, payer, amount, "USD");
        request.merchant_id = merchant_id;
        request.payment_link_uuid = Some(created.uuid);
        Command::InitiatePayment(request)
    };
    assert_eq!(
        h.reject(with_link("25", other, MERCHANT + 1)).code(),
        "not_found"
    );
    assert_eq!(
        h.reject(with_link("24", merchant, MERCHANT)).code(),
        "invalid_amount"
    );
    let first = payment_of(h.ok(with_link("25", merchant, MERCHANT)));
    let second = payment_of(h.ok(with_link("25", merchant, MERCHANT)));
    assert_eq!(first.payment_link_uuid, Some(created.uuid));
    h.ok(Command::ConfirmPayment {
        payment_uuid: first.uuid,
    });
    let used = h.shard.payment_link_view(created.uuid, h.now_ms).unwrap();
    assert_eq!(
        (used.status, used.used_by_payment_uuid),
        (PaymentLinkStatus::Used, Some(first.uuid))
    );
    assert_eq!(
        h.reject(Command::ConfirmPayment {
            payment_uuid: second.uuid
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(with_link("25", merchant, MERCHANT)).code(),
        "invalid_state"
    );

    let expiring = link_of(h.ok(link(merchant, "5", Some(1))));
    let mut request = initiate(merchant, payer, "5", "USD");
    request.payment_link_uuid = Some(expiring.uuid);
    h.now_ms = expiring.expires_at_ms - 1;
    let early = pay(&mut h, request.clone());
    h.now_ms = expiring.expires_at_ms;
    assert_eq!(
        h.reject(Command::InitiatePayment(request)),
        Rejection::PaymentLinkExpired
    );
    assert_eq!(
        h.shard
            .payment_link_view(expiring.uuid, h.now_ms)
            .unwrap()
            .status,
        PaymentLinkStatus::Expired
    );
    // A payment initiated before the expiry may still be confirmed.
    h.ok(Command::ConfirmPayment {
        payment_uuid: early.uuid,
    });
    assert_eq!(
        h.shard
            .payment_link_view(expiring.uuid, h.now_ms)
            .unwrap()
            .status,
        PaymentLinkStatus::Used
    );
}

#[test]
fn payment_lists_and_merchant_transactions() {
    let (mut h, payer, merchant) = setup();
    let first = pay_now(&mut h, merchant, payer, "10");
    let pending = pay(&mut h, initiate(merchant, payer, "20", "USD"));
    h.ok(deposit(merchant, "5"));
    h.ok(withdraw(merchant, "1"));
    use crate::shard::command::Page;
    use crate::shard::commerce::query::PaymentFilter;
    let all = h
        .shard
        .payments_page(&PaymentFilter::default(), Page::default())
        .unwrap();
    assert_eq!(all.total, 2);
    assert_eq!(all.records[0].uuid, pending.uuid, "newest first");
    let completed = h
        .shard
        .payments_page(
            &PaymentFilter {
                status: Some(PaymentStatus::Completed),
                ..PaymentFilter::default()
            },
            Page::default(),
        )
        .unwrap();
    assert_eq!(completed.records.len(), 1);
    assert_eq!(completed.records[0].uuid, first.uuid);
    let none = h
        .shard
        .payments_page(
            &PaymentFilter {
                merchant_id: Some(MERCHANT + 1),
                ..PaymentFilter::default()
            },
            Page::default(),
        )
        .unwrap();
    assert_eq!(none.total, 0);
    // Every transaction of the merchant's wallets, debits too, newest first.
    let listed = h
        .shard
        .merchant_transactions_page(MERCHANT, Page::default())
        .unwrap();
    let kinds: Vec<TransactionType> = listed.records.iter().map(|t| t.transaction_type).collect();
    assert_eq!(
        kinds,
        [
            TransactionType::Withdrawal,
            TransactionType::Deposit,
            TransactionType::Payment
        ]
    );
    assert_eq!(h.shard.merchant_wallets(MERCHANT).len(), 1);
    assert!(h.shard.merchant_wallets(1).is_empty());
}
