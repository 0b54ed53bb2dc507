//! The cross-shard transfer protocol on two shards (shard_count 2).

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::{cur, dec, transfer, Harness};
use crate::ledger::transfer::{OutgoingTransfer, TransferState};
use crate::shard::command::TransferCredit;
use crate::{shard_of, Command, Currency, Outcome, Rejection, Shard};

fn two_shards() -> (Harness, Harness) {
    (
        Harness::with_shard(Shard::new(0, 2).unwrap()),
        Harness::with_shard(Shard::new(1, 2).unwrap()),
    )
}

fn reserve(h: &mut Harness, command: Command) -> OutgoingTransfer {
    match h.ok(command) {
        Outcome::TransferReserved {
            transfer,
            transaction,
        } => {
            assert_eq!(transaction.transfer_uuid, Some(transfer.uuid));
            transfer
        }
        other => panic!("unexpected {other:?}"),
    }
}

fn global_sums(shards: &[&Shard]) -> BTreeMap<Currency, Decimal> {
    let mut sums = BTreeMap::new();
    for shard in shards {
        for (currency, sum) in shard.balance_sums_by_currency() {
            *sums.entry(currency).or_insert(Decimal::ZERO) += sum.unwrap();
        }
    }
    sums
}

fn in_transit_total(shards: &[&Shard], currency: Currency) -> Decimal {
    shards
        .iter()
        .filter_map(|shard| shard.in_transit_by_currency().get(&currency).copied())
        .sum()
}

#[test]
fn reserve_credit_finalize() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let target = b.create(2, "USD");
    assert_eq!((shard_of(source.0, 2), shard_of(target.0, 2)), (0, 1));
    a.deposit(source, "100");
    assert_eq!(
        a.reject(Command::TransferReserve(transfer(
            source, target, "100.01", "USD"
        ))),
        Rejection::InsufficientFunds
    );
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "60", "USD")),
    );
    assert_eq!(reserved.state, TransferState::Reserved);
    assert_eq!(a.balance(source), dec("40.00"));
    assert_eq!(a.shard.pending_outgoing_transfers(), vec![reserved.clone()]);
    let usd = cur("USD");
    assert_eq!(
        in_transit_total(&[&a.shard, &b.shard], usd),
        dec("60.00"),
        "in flight"
    );

    let credit = Command::TransferCredit(TransferCredit::for_transfer(&reserved));
    let Outcome::TransferCredited {
        transaction,
        duplicate,
    } = b.ok(credit.clone())
    else {
        panic!()
    };
    assert!(!duplicate);
    assert_eq!(
        (
            transaction.wallet_id,
            transaction.amount,
            transaction.transfer_uuid
        ),
        (target, dec("60.00"), Some(reserved.uuid))
    );
    assert_eq!(b.balance(target), dec("60.00"));
    // Idempotent: a second credit changes nothing and says so.
    let before = b.shard.state_digest();
    let Outcome::TransferCredited {
        transaction: again,
        duplicate,
    } = b.ok(credit)
    else {
        panic!()
    };
    assert!(duplicate);
    assert_eq!(again, transaction);
    assert_eq!(b.shard.state_digest(), before);
    let mut altered = TransferCredit::for_transfer(&reserved);
    altered.amount = dec("61");
    assert_eq!(
        b.reject(Command::TransferCredit(altered)).code(),
        "invalid_request"
    );

    let Outcome::TransferSettled(done) = a.ok(Command::TransferFinalize {
        transfer_uuid: reserved.uuid,
    }) else {
        panic!()
    };
    assert_eq!(done.state, TransferState::Finalized);
    assert!(a.shard.pending_outgoing_transfers().is_empty());
    a.ok(Command::TransferFinalize {
        transfer_uuid: reserved.uuid,
    }); // idempotent
    assert_eq!(
        a.reject(Command::TransferRelease {
            transfer_uuid: reserved.uuid
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(in_transit_total(&[&a.shard, &b.shard], usd), dec("0"));
    assert!(global_sums(&[&a.shard, &b.shard])
        .values()
        .all(Decimal::is_zero));
    // A cross-shard side is not reversible by a client.
    let debit_uuid = a.shard.wallet(source).unwrap().transactions()[1].uuid;
    assert_eq!(
        a.reject(Command::Reverse {
            transaction_uuid: debit_uuid,
            reason: "x".into()
        })
        .code(),
        "invalid_state"
    );
}

#[test]
fn reserve_then_release_when_the_credit_is_refused() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "EUR");
    let target = b.create(2, "EUR");
    a.deposit(source, "10");
    b.ok(Command::FreezeWallet { wallet_id: target });
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "10", "EUR")),
    );
    assert_eq!(a.available(source), dec("0.00"));
    assert_eq!(
        b.reject(Command::TransferCredit(TransferCredit::for_transfer(
            &reserved
        ))),
        Rejection::WalletFrozen
    );
    // The source may be frozen meanwhile: release still returns the funds.
    a.ok(Command::FreezeWallet { wallet_id: source });
    let Outcome::TransferSettled(released) = a.ok(Command::TransferRelease {
        transfer_uuid: reserved.uuid,
    }) else {
        panic!()
    };
    assert_eq!(released.state, TransferState::Released);
    assert_eq!(a.balance(source), dec("10.00"));
    let entries = a.shard.wallet(source).unwrap().entries();
    assert!(entries.last().unwrap().is_reversal());
    a.ok(Command::TransferRelease {
        transfer_uuid: reserved.uuid,
    }); // idempotent
    assert_eq!(
        a.reject(Command::TransferFinalize {
            transfer_uuid: reserved.uuid
        })
        .code(),
        "invalid_state"
    );
    let eur = cur("EUR");
    assert_eq!(in_transit_total(&[&a.shard, &b.shard], eur), dec("0"));
    assert!(global_sums(&[&a.shard, &b.shard])
        .values()
        .all(Decimal::is_zero));
    assert!(a.shard.pending_outgoing_transfers().is_empty());
}

#[test]
fn protocol_step_rejections() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let local = a.create(3, "USD");
    let target = b.create(2, "USD");
    a.deposit(source, "10");
    assert_eq!(
        a.reject(Command::TransferReserve(transfer(
            source, local, "1", "USD"
        )))
        .code(),
        "invalid_request"
    );
    assert_eq!(
        a.reject(Command::TransferReserve(transfer(
            source, target, "1", "EUR"
        ))),
        Rejection::CurrencyMismatch
    );
    assert_eq!(
        a.reject(Command::TransferFinalize {
            transfer_uuid: crate::Uuid([5; 16])
        })
        .code(),
        "not_found"
    );
    assert_eq!(
        a.reject(Command::TransferRelease {
            transfer_uuid: crate::Uuid([5; 16])
        })
        .code(),
        "not_found"
    );
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "1", "USD")),
    );
    let mut wrong = TransferCredit::for_transfer(&reserved);
    wrong.currency = cur("EUR");
    assert_eq!(
        b.reject(Command::TransferCredit(wrong)),
        Rejection::CurrencyMismatch
    );
    let mut same_shard = TransferCredit::for_transfer(&reserved);
    same_shard.source_wallet_id = crate::WalletId(5);
    assert_eq!(
        b.reject(Command::TransferCredit(same_shard)).code(),
        "invalid_request"
    );
    // Same-shard transfer command refuses a wallet of the other shard.
    assert_eq!(
        a.reject(Command::Transfer(transfer(source, target, "1", "USD"))),
        Rejection::WrongShard(target)
    );
}

#[test]
fn recovery_completes_reserved_transfers_after_restart() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let target = b.create(2, "USD");
    a.deposit(source, "30");
    for amount in ["5", "7", "9"] {
        reserve(
            &mut a,
            Command::TransferReserve(transfer(source, target, amount, "USD")),
        );
    }
    // The first credit landed before the "crash".
    let first = a.shard.pending_outgoing_transfers()[0].clone();
    b.ok(Command::TransferCredit(TransferCredit::for_transfer(
        &first,
    )));
    // Restart the source shard from its snapshot; recovery re-sends every credit, then finalizes.
    a.shard = Shard::from_snapshot_bytes(&a.shard.snapshot_bytes().unwrap()).unwrap();
    let pending = a.shard.pending_outgoing_transfers();
    assert_eq!(pending.len(), 3);
    for transfer in pending {
        b.ok(Command::TransferCredit(TransferCredit::for_transfer(
            &transfer,
        )));
        a.ok(Command::TransferFinalize {
            transfer_uuid: transfer.uuid,
        });
    }
    assert_eq!(
        (a.balance(source), b.balance(target)),
        (dec("9.00"), dec("21.00"))
    );
    assert_eq!(
        in_transit_total(&[&a.shard, &b.shard], cur("USD")),
        dec("0")
    );
    a.shard.check_invariants().unwrap();
    b.shard.check_invariants().unwrap();
}

/// Issue 16, items 4 and 5: a refund of the debit of a transfer still reserved across shards
/// would make its release impossible (the release mirrors that posting), so recovery could not
/// finish it. The refund is refused until the transfer is settled.
#[test]
fn issue_16_a_reserved_transfer_debit_cannot_be_refunded() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "EUR");
    let target = b.create(2, "EUR");
    a.deposit(source, "10");
    b.ok(Command::FreezeWallet { wallet_id: target });
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "10", "EUR")),
    );
    let debit = a
        .shard
        .wallet(source)
        .unwrap()
        .transactions()
        .last()
        .unwrap()
        .uuid;
    let refund = || {
        Command::Refund(crate::shard::command::Refund {
            original_transaction_uuid: debit,
            amount: dec("4"),
            reason: None,
            details: crate::shard::command::Details::default(),
        })
    };
    assert_eq!(a.reject(refund()).code(), "invalid_state");
    a.ok(Command::TransferRelease {
        transfer_uuid: reserved.uuid,
    });
    assert_eq!(a.balance(source), dec("10.00"));
    // Released: the debit is reversed, so there is nothing left to refund.
    assert_eq!(a.reject(refund()), Rejection::AlreadyReversed);
}

/// Invariant 5 checks the in-transit totals kept in apply: a total that is off is caught,
/// whether the finished records are still in memory (`Recall::Keep`: they must sum to the
/// totals) or gone (records leave: the totals must still explain the in-transit account).
#[test]
fn a_broken_in_transit_total_is_caught() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let target = b.create(2, "USD");
    a.deposit(source, "100");
    for value in ["10", "20.5"] {
        let reserved = reserve(
            &mut a,
            Command::TransferReserve(transfer(source, target, value, "USD")),
        );
        b.ok(Command::TransferCredit(TransferCredit::for_transfer(
            &reserved,
        )));
        a.ok(Command::TransferFinalize {
            transfer_uuid: reserved.uuid,
        });
    }
    let usd = cur("USD");
    assert_eq!(a.shard.transit_totals()[&usd].sent, dec("30.50"));
    assert_eq!(b.shard.transit_totals()[&usd].received, dec("30.50"));
    a.shard.check_invariants().unwrap();
    b.shard.check_invariants().unwrap();

    // Whole history in memory: the records disagree with a changed total.
    let mut broken = b.shard.clone();
    broken.transit.get_mut(&usd).unwrap().received += dec("0.01");
    assert!(matches!(
        broken.check_invariants(),
        Err(crate::values::error::InvariantViolation::TransitTotals { .. })
    ));

    // Finished records gone: the totals alone must explain the in-transit account.
    for shard in [&mut a.shard, &mut b.shard] {
        shard.set_recall(crate::shard::cold::Recall::Replay);
        assert!(shard.evict_all() > 0);
        assert_eq!(shard.moves_in_memory(), 0);
        shard.check_invariants().unwrap();
    }
    let mut broken = a.shard.clone();
    broken.transit.get_mut(&usd).unwrap().sent -= dec("10");
    assert!(matches!(
        broken.check_invariants(),
        Err(crate::values::error::InvariantViolation::InTransitMismatch { .. })
    ));
    // The totals survive a snapshot (format 5) without the records.
    let loaded = Shard::from_snapshot_bytes(&a.shard.snapshot_bytes().unwrap()).unwrap();
    assert_eq!(loaded.transit_totals(), a.shard.transit_totals());
    assert_eq!(loaded.state_digest(), a.shard.state_digest());
}

/// An older snapshot (format 4) carries every move: it loads with totals derived from them.
#[test]
fn a_version_4_snapshot_derives_the_in_transit_totals_from_its_records() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let target = b.create(2, "USD");
    a.deposit(source, "100");
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "7", "USD")),
    );
    b.ok(Command::TransferCredit(TransferCredit::for_transfer(
        &reserved,
    )));
    a.ok(Command::TransferFinalize {
        transfer_uuid: reserved.uuid,
    });
    for shard in [&a.shard, &b.shard] {
        let mut bytes = shard.version_7_snapshot_bytes();
        // Version 7 = version 6 + the open batches; version 6 = version 5 + the uuid key;
        // version 5 = version 4 + the totals: one currency is a length byte and the entry.
        let batches = postcard::to_allocvec(shard.prepared_batches()).unwrap();
        let key = postcard::to_allocvec(&shard.uuid_key).unwrap();
        let totals = postcard::to_allocvec(shard.transit_totals()).unwrap();
        bytes.truncate(bytes.len() - batches.len() - key.len() - totals.len());
        bytes[0] = 4;
        let loaded = Shard::from_snapshot_bytes(&bytes).unwrap();
        assert_eq!(loaded.transit_totals(), shard.transit_totals());
        loaded.check_invariants().unwrap();
    }
}

/// A store that cannot be read.
struct Unreadable;

use crate::shard::cold::ColdResult;

impl crate::shard::cold::ColdHistory for Unreadable {
    fn for_each_transaction_within(
        &self,
        _: crate::WalletId,
        _: (i64, i64),
        _: &mut dyn FnMut(&crate::ledger::transaction::Transaction),
    ) -> ColdResult<()> {
        Err("unreadable".into())
    }
    fn payment_link(
        &self,
        _: crate::Uuid,
    ) -> ColdResult<Option<crate::commerce::payment::PaymentLink>> {
        Err("unreadable".into())
    }
    fn qr(&self, _: crate::Uuid) -> ColdResult<Option<crate::commerce::payment::QrCode>> {
        Err("unreadable".into())
    }
    fn settlement(
        &self,
        _: crate::values::ids::SettlementId,
    ) -> ColdResult<Option<crate::commerce::payout::Settlement>> {
        Err("unreadable".into())
    }
    fn settled_by(
        &self,
        _: crate::values::ids::TransactionId,
    ) -> ColdResult<Option<crate::values::ids::SettlementId>> {
        Err("unreadable".into())
    }
    fn transaction(
        &self,
        _: crate::WalletId,
        _: crate::values::ids::TransactionId,
    ) -> crate::shard::cold::ColdResult<Option<crate::ledger::transaction::Transaction>> {
        Err("unreadable".into())
    }
    fn entry(
        &self,
        _: crate::WalletId,
        _: crate::values::ids::EntryId,
    ) -> crate::shard::cold::ColdResult<Option<crate::ledger::transaction::LedgerEntry>> {
        Err("unreadable".into())
    }
    fn hold(
        &self,
        _: crate::WalletId,
        _: crate::values::ids::HoldId,
    ) -> crate::shard::cold::ColdResult<Option<crate::ledger::hold::Hold>> {
        Err("unreadable".into())
    }
    fn locate_transaction(
        &self,
        _: crate::Uuid,
    ) -> crate::shard::cold::ColdResult<Option<(crate::WalletId, crate::values::ids::TransactionId)>>
    {
        Err("unreadable".into())
    }
    fn locate_hold(
        &self,
        _: crate::Uuid,
    ) -> crate::shard::cold::ColdResult<Option<(crate::WalletId, crate::values::ids::HoldId)>> {
        Err("unreadable".into())
    }
    fn for_each_transaction(
        &self,
        _: crate::WalletId,
        _: &mut dyn FnMut(&crate::ledger::transaction::Transaction) -> bool,
    ) -> crate::shard::cold::ColdResult<()> {
        Err("unreadable".into())
    }
    fn for_each_entry_after(
        &self,
        _: crate::WalletId,
        _: Option<crate::values::ids::EntryId>,
        _: &mut dyn FnMut(
            &crate::ledger::transaction::Hash,
            &crate::ledger::transaction::LedgerEntry,
        ) -> bool,
    ) -> crate::shard::cold::ColdResult<()> {
        Err("unreadable".into())
    }
    fn moved(
        &self,
        _: crate::shard::moves::MoveKey,
    ) -> crate::shard::cold::ColdResult<Option<crate::shard::moves::MoveRecord>> {
        Err("unreadable".into())
    }
    fn open_charge(&self, _: crate::Uuid) -> ColdResult<Option<crate::Uuid>> {
        Err("unreadable".into())
    }
    fn payment(&self, _: crate::Uuid) -> ColdResult<Option<crate::commerce::payment::Payment>> {
        Err("unreadable".into())
    }
    fn for_each_payment(
        &self,
        _: crate::WalletId,
        _: &mut dyn FnMut(&crate::commerce::payment::Payment) -> bool,
    ) -> ColdResult<()> {
        Err("unreadable".into())
    }
    fn for_each_completed_payment(
        &self,
        _: i64,
        _: i64,
        _: &mut dyn FnMut(&crate::commerce::payment::Payment) -> bool,
    ) -> ColdResult<()> {
        Err("unreadable".into())
    }
    fn payout(
        &self,
        _: crate::values::ids::PayoutId,
    ) -> ColdResult<Option<crate::commerce::payout::Payout>> {
        Err("unreadable".into())
    }
    fn for_each_payout(
        &self,
        _: crate::WalletId,
        _: &mut dyn FnMut(&crate::commerce::payout::Payout) -> bool,
    ) -> ColdResult<()> {
        Err("unreadable".into())
    }
}

/// A repeated step of a move that left memory reads the store; a store that cannot be read
/// refuses it as unavailable and nothing changes (no credit, no settle).
#[test]
fn a_repeated_step_of_an_evicted_move_with_an_unreadable_store_is_unavailable() {
    let (mut a, mut b) = two_shards();
    let source = a.create(1, "USD");
    let target = b.create(2, "USD");
    a.deposit(source, "100");
    let reserved = reserve(
        &mut a,
        Command::TransferReserve(transfer(source, target, "25", "USD")),
    );
    b.ok(Command::TransferCredit(TransferCredit::for_transfer(
        &reserved,
    )));
    a.ok(Command::TransferFinalize {
        transfer_uuid: reserved.uuid,
    });
    for h in [&mut a, &mut b] {
        h.shard
            .set_recall(crate::shard::cold::Recall::Store(std::sync::Arc::new(
                Unreadable,
            )));
        h.shard.evict_all();
        assert_eq!(h.shard.moves_in_memory(), 0);
    }
    let (a_before, b_before) = (a.shard.state_digest(), b.shard.state_digest());
    let unavailable = |r: Rejection| matches!(r, Rejection::Unavailable(_));
    assert!(unavailable(b.reject(Command::TransferCredit(
        TransferCredit::for_transfer(&reserved)
    ))));
    for command in [
        Command::TransferFinalize {
            transfer_uuid: reserved.uuid,
        },
        Command::TransferRelease {
            transfer_uuid: reserved.uuid,
        },
    ] {
        assert!(unavailable(a.reject(command)));
    }
    assert_eq!(a.shard.state_digest(), a_before);
    assert_eq!(b.shard.state_digest(), b_before);
    assert_eq!(b.balance(target), dec("25.00"));
    // Routing sends it to a shard that then refuses it, rather than calling it not found.
    assert_eq!(
        a.shard.holds_outgoing(reserved.uuid),
        crate::Presence::Unknown
    );
}
