//! Holds: place, release, capture, expire.

use super::{cur, dec, withdraw, Harness};
use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::{Direction, TransactionType};
use crate::ledger::view::HoldView;
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::command::{CaptureHold, Details, PlaceHold};
use crate::{Command, Outcome, Rejection, Uuid, WalletId};

fn place(wallet_id: WalletId, amount: &str, minutes: Option<u32>) -> Command {
    Command::PlaceHold(PlaceHold {
        wallet_id,
        amount: dec(amount),
        currency: cur("USD"),
        reason: Some("card auth".into()),
        expiry_minutes: minutes,
    })
}

fn capture(hold_uuid: Uuid, amount: Option<&str>, counter: Option<WalletId>) -> Command {
    Command::CaptureHold(CaptureHold {
        hold_uuid,
        amount: amount.map(dec),
        counter_wallet_id: counter,
        details: Details::default(),
    })
}

fn hold_of(outcome: Outcome) -> HoldView {
    match outcome {
        Outcome::Hold(view) => view,
        other => panic!("unexpected {other:?}"),
    }
}

#[test]
fn place_reserves_spendable_funds() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "100");
    let hold = hold_of(h.ok(place(wallet, "30", None)));
    assert_eq!(hold.status, HoldStatus::Active);
    assert_eq!(
        hold.expires_at_ms,
        h.now_ms + 60 * 60_000,
        "default expiry is 60 minutes"
    );
    assert_eq!(hold.reason.as_deref(), Some("card auth"));
    let balance = h.shard.balance(wallet).unwrap();
    assert_eq!(
        (
            balance.balance,
            balance.held_balance,
            balance.available_balance
        ),
        (dec("100.00"), dec("30.00"), dec("70.00"))
    );
    assert_eq!(
        h.reject(withdraw(wallet, "70.01")),
        Rejection::InsufficientFunds
    );
    assert_eq!(
        h.reject(place(wallet, "70.01", Some(5))),
        Rejection::InsufficientFunds
    );
    let second = hold_of(h.ok(place(wallet, "70", Some(10_080))));
    assert_eq!(second.expires_at_ms, h.now_ms + 10_080 * 60_000);
    assert_eq!(h.available(wallet), dec("0.00"));
    let page = h.shard.holds_page(wallet, crate::Page::default()).unwrap();
    assert_eq!(page.total, 2);
    assert_eq!(page.records[0].uuid, second.uuid, "newest first");
}

#[test]
fn place_rejections() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    for minutes in [0, 10_081] {
        assert_eq!(
            h.reject(place(wallet, "1", Some(minutes))).code(),
            "invalid_request"
        );
    }
    let euro = Command::PlaceHold(PlaceHold {
        wallet_id: wallet,
        amount: dec("1"),
        currency: cur("EUR"),
        reason: None,
        expiry_minutes: None,
    });
    assert_eq!(h.reject(euro), Rejection::CurrencyMismatch);
    assert_eq!(h.reject(place(wallet, "0", None)).code(), "invalid_amount");
    assert_eq!(h.reject(place(WalletId(50), "1", None)).code(), "not_found");
    h.ok(Command::FreezeWallet { wallet_id: wallet });
    assert_eq!(h.reject(place(wallet, "1", None)), Rejection::WalletFrozen);
}

#[test]
fn release_frees_the_funds_once() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    let hold = hold_of(h.ok(place(wallet, "10", None)));
    let released = hold_of(h.ok(Command::ReleaseHold {
        hold_uuid: hold.uuid,
    }));
    assert_eq!(
        (released.status, released.closed_at_ms),
        (HoldStatus::Released, Some(h.now_ms))
    );
    assert_eq!(h.available(wallet), dec("10.00"));
    assert_eq!(
        h.reject(Command::ReleaseHold {
            hold_uuid: hold.uuid
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(capture(hold.uuid, None, None)).code(),
        "invalid_state"
    );
    assert_eq!(
        h.reject(Command::ReleaseHold {
            hold_uuid: Uuid([9; 16])
        })
        .code(),
        "not_found"
    );
}

#[test]
fn capture_debits_the_captured_part_and_releases_the_rest() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "100");
    let hold = hold_of(h.ok(place(wallet, "40", None)));
    assert_eq!(
        h.reject(capture(hold.uuid, Some("40.01"), None)),
        Rejection::CaptureExceedsHold
    );
    assert_eq!(
        h.reject(capture(hold.uuid, Some("0.001"), None)).code(),
        "invalid_amount"
    );
    let captured = hold_of(h.ok(capture(hold.uuid, Some("25"), None)));
    assert_eq!(
        (captured.status, captured.captured_amount),
        (HoldStatus::Captured, Some(dec("25.00")))
    );
    let balance = h.shard.balance(wallet).unwrap();
    assert_eq!(
        (
            balance.balance,
            balance.held_balance,
            balance.available_balance
        ),
        (dec("75.00"), dec("0.00"), dec("75.00"))
    );
    let tx = h
        .shard
        .wallet(wallet)
        .unwrap()
        .transaction(captured.capture_transaction_id.unwrap())
        .unwrap()
        .clone();
    assert_eq!(
        (tx.transaction_type, tx.direction, tx.amount),
        (TransactionType::HoldCapture, Direction::Debit, dec("25.00"))
    );
    let float = h
        .shard
        .system_account(cur("USD"), WalletType::Float)
        .unwrap();
    assert_eq!(h.balance(float), dec("-75.00"), "-100 deposit + 25 capture");
    assert_eq!(
        h.reject(capture(hold.uuid, None, None)).code(),
        "invalid_state"
    );
}

#[test]
fn capture_to_a_named_counter_account() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    let merchant = h.create_typed(OwnerType::Merchant, 9, "USD", WalletType::Primary);
    let euro = h.create(2, "EUR");
    h.deposit(wallet, "50");
    let hold = hold_of(h.ok(place(wallet, "50", None)));
    assert_eq!(
        h.reject(capture(hold.uuid, None, Some(wallet))).code(),
        "invalid_request"
    );
    assert_eq!(
        h.reject(capture(hold.uuid, None, Some(euro))),
        Rejection::CurrencyMismatch
    );
    h.ok(Command::FreezeWallet {
        wallet_id: merchant,
    });
    assert_eq!(
        h.reject(capture(hold.uuid, None, Some(merchant))),
        Rejection::WalletFrozen
    );
    h.ok(Command::UnfreezeWallet {
        wallet_id: merchant,
    });
    hold_of(h.ok(capture(hold.uuid, None, Some(merchant))));
    assert_eq!(
        (h.balance(wallet), h.balance(merchant)),
        (dec("0.00"), dec("50.00"))
    );
    let credit = &h.shard.wallet(merchant).unwrap().transactions()[0];
    assert_eq!(
        (
            credit.transaction_type,
            credit.direction,
            credit.counterparty_wallet_id
        ),
        (
            TransactionType::HoldCapture,
            Direction::Credit,
            Some(wallet)
        )
    );
}

#[test]
fn expired_holds_free_funds_and_cannot_be_captured() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    let short = hold_of(h.ok(place(wallet, "4", Some(1))));
    let long = hold_of(h.ok(place(wallet, "5", Some(2))));
    h.now_ms += 59_999;
    assert!(
        h.shard.expire_holds(h.now_ms).is_empty(),
        "not due before expires_at"
    );
    h.now_ms += 1;
    // Past expiry but not yet ticked: still reserved, but no longer capturable or releasable.
    assert_eq!(
        h.reject(capture(short.uuid, None, None)),
        Rejection::HoldExpired
    );
    assert_eq!(
        h.reject(Command::ReleaseHold {
            hold_uuid: short.uuid
        }),
        Rejection::HoldExpired
    );
    assert_eq!(h.available(wallet), dec("1.00"));
    let events = h.shard.expire_holds(h.now_ms);
    assert_eq!(events.len(), 1);
    let Outcome::HoldsExpired { count } = h.ok(Command::ExpireHolds { max_holds: 100 }) else {
        panic!()
    };
    assert_eq!(count, 1);
    assert_eq!(
        h.shard.hold_view(short.uuid).unwrap().status,
        HoldStatus::Expired
    );
    assert_eq!(h.available(wallet), dec("5.00"));
    assert_eq!(
        h.reject(capture(short.uuid, None, None)),
        Rejection::HoldExpired
    );
    assert_eq!(
        h.shard.hold_view(long.uuid).unwrap().status,
        HoldStatus::Active
    );
    h.now_ms += 60_000;
    let Outcome::HoldsExpired { count } = h.ok(Command::ExpireHolds { max_holds: 100 }) else {
        panic!()
    };
    assert_eq!(count, 1);
    assert_eq!(
        (h.available(wallet), h.shard.active_hold_count()),
        (dec("10.00"), 0)
    );
    let Outcome::HoldsExpired { count } = h.ok(Command::ExpireHolds { max_holds: 100 }) else {
        panic!()
    };
    assert_eq!(count, 0);
}

#[test]
fn expiry_survives_a_restart_from_snapshot() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    hold_of(h.ok(place(wallet, "10", Some(1))));
    let restored = crate::Shard::from_snapshot_bytes(&h.shard.snapshot_bytes().unwrap()).unwrap();
    let events = restored.expire_holds(h.now_ms + 60_000);
    assert_eq!(
        events.len(),
        1,
        "the rebuilt expiry queue still knows the hold"
    );
}

#[test]
fn expire_batches_are_bounded() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    for _ in 0..5 {
        h.ok(place(wallet, "1", Some(1)));
    }
    h.now_ms += 60_000;
    let Outcome::HoldsExpired { count } = h.ok(Command::ExpireHolds { max_holds: 2 }) else {
        panic!()
    };
    assert_eq!((count, h.shard.active_hold_count()), (2, 3));
}
