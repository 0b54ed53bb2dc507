//! Refunds and reversals.

use super::{cur, dec, transfer, withdraw, Harness};
use crate::ledger::transaction::{Direction, TransactionStatus, TransactionType};
use crate::ledger::wallet::WalletType;
use crate::shard::command::{Details, Refund};
use crate::{Command, Outcome, Rejection, Uuid};

fn refund(original: Uuid, amount: &str) -> Command {
    Command::Refund(Refund {
        original_transaction_uuid: original,
        amount: dec(amount),
        reason: Some("returned goods".into()),
        details: Details::default(),
    })
}

fn reverse(uuid: Uuid) -> Command {
    Command::Reverse {
        transaction_uuid: uuid,
        reason: "operator error".into(),
    }
}

fn tx_uuid(outcome: Outcome) -> Uuid {
    match outcome {
        Outcome::Transaction(view) => view.uuid,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn refunds_of_a_debit_never_exceed_it() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "100");
    let original = tx_uuid(h.ok(withdraw(wallet, "30")));
    let Outcome::Transaction(first) = h.ok(refund(original, "10")) else {
        panic!()
    };
    assert_eq!(
        (first.transaction_type, first.direction),
        (TransactionType::Refund, Direction::Credit)
    );
    assert_eq!(
        (first.reference_type, first.description.as_deref()),
        (Some("transaction"), Some("returned goods"))
    );
    assert_eq!(h.balance(wallet), dec("80.00"));
    assert_eq!(
        h.reject(refund(original, "20.01")),
        Rejection::RefundExceedsOriginal
    );
    h.ok(refund(original, "20"));
    assert_eq!(
        h.shard.transaction_view(original).unwrap().refunded_amount,
        dec("30.00")
    );
    assert_eq!(
        h.reject(refund(original, "0.01")),
        Rejection::RefundExceedsOriginal
    );
    assert_eq!(h.balance(wallet), dec("100.00"));
}

#[test]
fn refund_rejections() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    let credit = h.deposit(wallet, "100").uuid;
    assert_eq!(h.reject(refund(credit, "1")), Rejection::NotADebit);
    assert_eq!(h.reject(refund(Uuid([1; 16]), "1")).code(), "not_found");
    let debit = tx_uuid(h.ok(withdraw(wallet, "10")));
    assert_eq!(h.reject(refund(debit, "0")).code(), "invalid_amount");
    h.ok(Command::FreezeWallet { wallet_id: wallet });
    assert_eq!(h.reject(refund(debit, "1")), Rejection::WalletFrozen);
    h.ok(Command::UnfreezeWallet { wallet_id: wallet });
    h.ok(reverse(debit));
    assert_eq!(h.reject(refund(debit, "1")), Rejection::AlreadyReversed);
    // A refund is a credit: refunding it is refused.
    let debit = tx_uuid(h.ok(withdraw(wallet, "10")));
    let refund_uuid = tx_uuid(h.ok(refund(debit, "5")));
    assert_eq!(h.reject(refund(refund_uuid, "1")), Rejection::NotADebit);
}

#[test]
fn reversal_mirrors_every_entry_of_the_posting() {
    let mut h = Harness::new();
    let source = h.create(1, "USD");
    let target = h.create(2, "USD");
    h.deposit(source, "100");
    let debit = tx_uuid(h.ok(Command::Transfer(transfer(source, target, "40", "USD"))));
    let Outcome::Reversal {
        transaction,
        entries,
    } = h.ok(reverse(debit))
    else {
        panic!()
    };
    assert_eq!(
        (transaction.wallet_id, transaction.transaction_type),
        (source, TransactionType::Reversal)
    );
    assert_eq!(
        (transaction.direction, transaction.description.as_deref()),
        (Direction::Credit, Some("operator error"))
    );
    assert_eq!(entries.len(), 2);
    assert!(entries
        .iter()
        .all(|entry| entry.is_reversal && entry.reverses_entry_id.is_some()));
    assert_eq!(
        (h.balance(source), h.balance(target)),
        (dec("100.00"), dec("0.00"))
    );
    // Both originals are marked, both transactions reversed.
    for wallet in [source, target] {
        let w = h.shard.wallet(wallet).unwrap();
        let original = w
            .transactions()
            .iter()
            .find(|t| t.transaction_type == TransactionType::Transfer)
            .unwrap();
        assert_eq!(original.status, TransactionStatus::Reversed);
        assert!(original.reversed_by_transaction_id.is_some() && original.reversed_at_ms.is_some());
        let entry = w
            .entries()
            .iter()
            .find(|e| e.entry_type == TransactionType::Transfer)
            .unwrap();
        let mirror = w.entry(entry.reversed_by_entry_id.unwrap()).unwrap();
        assert_eq!(
            (mirror.reverses_entry_id, mirror.direction),
            (Some(entry.id), entry.direction.opposite())
        );
    }
    assert_eq!(h.reject(reverse(debit)), Rejection::AlreadyReversed);
    // Reversing from the other side is the same posting.
    let credit_side = h.shard.wallet(target).unwrap().transactions()[0].uuid;
    assert_eq!(h.reject(reverse(credit_side)), Rejection::AlreadyReversed);
}

#[test]
fn reversal_rejections() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    let deposit = h.deposit(wallet, "100").uuid;
    h.ok(withdraw(wallet, "95"));
    // Reversing the deposit would take 100 from a wallet holding 5.
    assert_eq!(h.reject(reverse(deposit)), Rejection::InsufficientFunds);
    assert_eq!(
        h.reject(Command::Reverse {
            transaction_uuid: deposit,
            reason: " ".into()
        })
        .code(),
        "invalid_request"
    );
    assert_eq!(h.reject(reverse(Uuid([3; 16]))).code(), "not_found");
    h.ok(Command::FreezeWallet { wallet_id: wallet });
    assert_eq!(h.reject(reverse(deposit)), Rejection::WalletFrozen);
    h.ok(Command::UnfreezeWallet { wallet_id: wallet });
    let small = h.deposit(wallet, "1").uuid;
    let Outcome::Reversal { transaction, .. } = h.ok(reverse(small)) else {
        panic!()
    };
    assert_eq!(
        h.reject(reverse(transaction.uuid)).code(),
        "invalid_state",
        "a reversal cannot be reversed"
    );
    let debit = tx_uuid(h.ok(withdraw(wallet, "2")));
    h.ok(refund(debit, "1"));
    assert_eq!(
        h.reject(reverse(debit)).code(),
        "invalid_state",
        "refunded transactions cannot be reversed"
    );
}

#[test]
fn reversing_a_refund_restores_the_refundable_amount() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "100");
    let debit = tx_uuid(h.ok(withdraw(wallet, "30")));
    let refunded = tx_uuid(h.ok(refund(debit, "30")));
    assert_eq!(
        h.reject(refund(debit, "1")),
        Rejection::RefundExceedsOriginal
    );
    h.ok(reverse(refunded));
    assert_eq!(
        h.shard.transaction_view(debit).unwrap().refunded_amount,
        dec("0.00")
    );
    assert_eq!(h.balance(wallet), dec("70.00"));
    h.ok(refund(debit, "30"));
    let float = h
        .shard
        .system_account(cur("USD"), WalletType::Float)
        .unwrap();
    assert_eq!(h.balance(float), dec("-100.00"));
}
