//! The cross-shard payment protocol on two shards: charge (reserve on the payer's shard, credit on
//! the merchant's, finalize or release) and refund (the mirror), idempotency, recovery, and money
//! conservation across the shards.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use super::commerce_support::{initiate, merchant_wallet, pay, refund, reserved_of, MERCHANT};
use super::{cur, dec, Harness};
use crate::commerce::payment::{PaymentMoveKind, PaymentReservation, PaymentStatus};
use crate::commerce::view::PaymentView;
use crate::ledger::transfer::TransferState;
use crate::ledger::wallet::WalletType;
use crate::shard::command::{PaymentCredit, PaymentReserve};
use crate::{shard_of, Command, Currency, Outcome, Rejection, Shard, WalletId};

struct Two {
    /// Shard 0: the payer's.
    a: Harness,
    /// Shard 1: the merchant's (the payment lives here).
    b: Harness,
    payer: WalletId,
    merchant: WalletId,
}

fn two() -> Two {
    let mut a = Harness::with_shard(Shard::new(0, 2).unwrap());
    let mut b = Harness::with_shard(Shard::new(1, 2).unwrap());
    let payer = a.create(1, "USD");
    a.deposit(payer, "100");
    let merchant = merchant_wallet(&mut b, MERCHANT, "USD");
    assert_eq!((shard_of(payer.0, 2), shard_of(merchant.0, 2)), (0, 1));
    Two {
        a,
        b,
        payer,
        merchant,
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

fn in_transit(shards: &[&Shard]) -> Decimal {
    shards
        .iter()
        .filter_map(|shard| shard.in_transit_by_currency().get(&cur("USD")).copied())
        .sum()
}

fn balanced(t: &Two) {
    let shards = [&t.a.shard, &t.b.shard];
    assert!(global_sums(&shards).values().all(Decimal::is_zero));
    t.a.shard.check_invariants().unwrap();
    t.b.shard.check_invariants().unwrap();
}

fn reserve(t: &mut Two, payment: &PaymentView) -> PaymentReservation {
    let (reservation, debit) = reserved_of(t.a.ok(Command::PaymentReserve(
        PaymentReserve::for_payment(payment),
    )));
    assert_eq!(debit.wallet_id, t.payer);
    assert_eq!(debit.reference_uuid, Some(payment.uuid));
    reservation
}

fn credit(h: &mut Harness, reservation: &PaymentReservation) -> Result<bool, Rejection> {
    match h.exec(Command::PaymentCredit(PaymentCredit::for_reservation(
        reservation,
    )))? {
        Outcome::PaymentCredited { duplicate, .. } => Ok(duplicate),
        Outcome::PaymentCreditRefused { rejection } => Err(rejection),
        other => panic!("unexpected {other:?}"),
    }
}

fn settle(h: &mut Harness, command: Command) -> PaymentReservation {
    match h.ok(command) {
        Outcome::PaymentReservationSettled(reservation) => reservation,
        other => panic!("unexpected {other:?}"),
    }
}

/// Completes a payment of `amount` across the shards.
fn charge(t: &mut Two, amount: &str) -> PaymentView {
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, amount, "USD"));
    let reservation = reserve(t, &payment);
    assert_eq!(credit(&mut t.b, &reservation), Ok(false));
    settle(
        &mut t.a,
        Command::PaymentReserveFinalize {
            reservation_uuid: reservation.uuid,
        },
    );
    t.b.shard.payment_view(payment.uuid).unwrap()
}

#[test]
fn charge_reserve_credit_finalize() {
    let mut t = two();
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "100", "USD"));
    // The payer is on the other shard: confirming here is a routing error.
    assert_eq!(
        t.b.reject(Command::ConfirmPayment {
            payment_uuid: payment.uuid
        }),
        Rejection::WrongShard(t.payer)
    );
    let reservation = reserve(&mut t, &payment);
    assert_eq!(
        (reservation.kind, reservation.state),
        (PaymentMoveKind::Charge, TransferState::Reserved)
    );
    assert_eq!(t.a.balance(t.payer), dec("0.00"));
    assert_eq!(
        t.a.shard.pending_payment_reservations(),
        vec![reservation.clone()]
    );
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("100.00"));
    // Idempotent by payment uuid while not released.
    let digest = t.a.shard.state_digest();
    let (again, _) = reserved_of(t.a.ok(Command::PaymentReserve(PaymentReserve::for_payment(
        &payment,
    ))));
    assert_eq!(again, reservation);
    assert_eq!(t.a.shard.state_digest(), digest);
    let mut other = PaymentReserve::for_payment(&payment);
    other.amount = dec("99");
    assert_eq!(
        t.a.reject(Command::PaymentReserve(other)).code(),
        "invalid_request"
    );

    assert_eq!(credit(&mut t.b, &reservation), Ok(false));
    let done = t.b.shard.payment_view(payment.uuid).unwrap();
    assert_eq!(done.status, PaymentStatus::Completed);
    assert_eq!(t.b.balance(t.merchant), dec("97.20"));
    let fees =
        t.b.shard
            .system_account(cur("USD"), WalletType::Fees)
            .unwrap();
    assert_eq!(t.b.balance(fees), dec("2.80"));
    let digest = t.b.shard.state_digest();
    assert_eq!(
        credit(&mut t.b, &reservation),
        Ok(true),
        "a repeat is a no-op"
    );
    assert_eq!(t.b.shard.state_digest(), digest);

    let finalized = settle(
        &mut t.a,
        Command::PaymentReserveFinalize {
            reservation_uuid: reservation.uuid,
        },
    );
    assert_eq!(finalized.state, TransferState::Finalized);
    assert!(t.a.shard.pending_payment_reservations().is_empty());
    settle(
        &mut t.a,
        Command::PaymentReserveFinalize {
            reservation_uuid: reservation.uuid,
        },
    );
    assert_eq!(
        t.a.reject(Command::PaymentReserveRelease {
            reservation_uuid: reservation.uuid
        })
        .code(),
        "invalid_state"
    );
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("0"));
    balanced(&t);
    // A finalized charge is still open: a repeated reserve returns it, moving nothing.
    let digest = t.a.shard.state_digest();
    t.a.ok(Command::PaymentReserve(PaymentReserve::for_payment(
        &payment,
    )));
    assert_eq!(t.a.shard.state_digest(), digest);
}

#[test]
fn a_refused_credit_releases_the_reservation() {
    let mut t = two();
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "60", "USD"));
    let first = reserve(&mut t, &payment);
    t.b.ok(Command::FreezeWallet {
        wallet_id: t.merchant,
    });
    assert_eq!(credit(&mut t.b, &first), Err(Rejection::WalletFrozen));
    // The payer may be frozen meanwhile: the release still returns the funds.
    t.a.ok(Command::FreezeWallet { wallet_id: t.payer });
    let released = settle(
        &mut t.a,
        Command::PaymentReserveRelease {
            reservation_uuid: first.uuid,
        },
    );
    assert_eq!(released.state, TransferState::Released);
    assert_eq!(t.a.balance(t.payer), dec("100.00"));
    assert!(t.a.shard.open_charge_reservation(payment.uuid).is_none());
    assert_eq!(
        t.a.reject(Command::PaymentReserveFinalize {
            reservation_uuid: first.uuid
        })
        .code(),
        "invalid_state"
    );
    settle(
        &mut t.a,
        Command::PaymentReserveRelease {
            reservation_uuid: first.uuid,
        },
    );
    // A new attempt reserves afresh; the payment was cancelled meanwhile, so it is refused too.
    t.a.ok(Command::UnfreezeWallet { wallet_id: t.payer });
    t.b.ok(Command::UnfreezeWallet {
        wallet_id: t.merchant,
    });
    let second = reserve(&mut t, &payment);
    assert_ne!(second.uuid, first.uuid);
    t.b.ok(Command::CancelPayment {
        payment_uuid: payment.uuid,
    });
    assert_eq!(
        credit(&mut t.b, &second).unwrap_err().code(),
        "invalid_state"
    );
    settle(
        &mut t.a,
        Command::PaymentReserveRelease {
            reservation_uuid: second.uuid,
        },
    );
    assert_eq!(t.a.balance(t.payer), dec("100.00"));
    assert_eq!(t.b.balance(t.merchant), dec("0.00"));
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("0"));
    balanced(&t);
}

#[test]
fn step_refusals() {
    let mut t = two();
    let local = t.a.create(3, "USD");
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "10", "USD"));
    let mut same_shard = PaymentReserve::for_payment(&payment);
    same_shard.merchant_wallet_id = local;
    assert_eq!(
        t.a.reject(Command::PaymentReserve(same_shard)).code(),
        "invalid_request"
    );
    let mut euros = PaymentReserve::for_payment(&payment);
    euros.currency = cur("EUR");
    assert_eq!(
        t.a.reject(Command::PaymentReserve(euros)),
        Rejection::CurrencyMismatch
    );
    let big = pay(&mut t.b, initiate(t.merchant, t.payer, "100.01", "USD"));
    assert_eq!(
        t.a.reject(Command::PaymentReserve(PaymentReserve::for_payment(&big))),
        Rejection::InsufficientFunds
    );
    for command in [
        Command::PaymentReserveFinalize {
            reservation_uuid: crate::Uuid([3; 16]),
        },
        Command::PaymentReserveRelease {
            reservation_uuid: crate::Uuid([3; 16]),
        },
    ] {
        assert_eq!(t.a.reject(command).code(), "not_found");
    }
    let reservation = reserve(&mut t, &payment);
    let mut wrong = PaymentCredit::for_reservation(&reservation);
    wrong.amount = dec("11");
    assert_eq!(
        t.b.reject(Command::PaymentCredit(wrong)).code(),
        "invalid_request"
    );
    let mut unknown = PaymentCredit::for_reservation(&reservation);
    unknown.payment_uuid = crate::Uuid([4; 16]);
    assert_eq!(
        t.b.reject(Command::PaymentCredit(unknown)).code(),
        "not_found"
    );
    let mut local_source = PaymentCredit::for_reservation(&reservation);
    local_source.source_wallet_id = WalletId(t.merchant.0 + 2);
    assert_eq!(
        t.b.reject(Command::PaymentCredit(local_source)).code(),
        "invalid_request"
    );
    // After a credit, the same reservation uuid with other details is refused.
    credit(&mut t.b, &reservation).unwrap();
    let mut altered = PaymentCredit::for_reservation(&reservation);
    altered.amount = dec("9");
    assert_eq!(
        t.b.reject(Command::PaymentCredit(altered)).code(),
        "invalid_request"
    );
}

#[test]
fn refunds_cross_back_and_a_refused_refund_credit_is_undone() {
    let mut t = two();
    let payment = charge(&mut t, "100");
    t.b.deposit(t.merchant, "10");
    let (reservation, debit) = reserved_of(t.b.ok(refund(payment.uuid, Some("30"))));
    assert_eq!(
        (
            reservation.kind,
            reservation.source_wallet_id,
            reservation.target_wallet_id
        ),
        (PaymentMoveKind::Refund, t.merchant, t.payer)
    );
    assert_eq!(debit.transaction_type.as_str(), "payment_refund");
    let view = t.b.shard.payment_view(payment.uuid).unwrap();
    assert_eq!(
        (view.status, view.refunded_amount),
        (PaymentStatus::PartiallyRefunded, dec("30.00"))
    );
    assert_eq!(credit(&mut t.a, &reservation), Ok(false));
    assert_eq!(t.a.balance(t.payer), dec("30.00"));
    settle(
        &mut t.b,
        Command::PaymentReserveFinalize {
            reservation_uuid: reservation.uuid,
        },
    );
    balanced(&t);

    // The rest, to a payer frozen meanwhile: the credit is refused, the release undoes it all.
    let (rest, _) = reserved_of(t.b.ok(refund(payment.uuid, None)));
    assert_eq!(rest.amount, dec("70.00"));
    assert_eq!(
        t.b.shard.payment_view(payment.uuid).unwrap().status,
        PaymentStatus::Refunded
    );
    assert_eq!(
        t.b.reject(refund(payment.uuid, Some("0.01"))).code(),
        "invalid_state"
    );
    t.a.ok(Command::FreezeWallet { wallet_id: t.payer });
    assert_eq!(credit(&mut t.a, &rest), Err(Rejection::WalletFrozen));
    let merchant_before = t.b.balance(t.merchant);
    settle(
        &mut t.b,
        Command::PaymentReserveRelease {
            reservation_uuid: rest.uuid,
        },
    );
    assert_eq!(t.b.balance(t.merchant), merchant_before + dec("70"));
    let view = t.b.shard.payment_view(payment.uuid).unwrap();
    assert_eq!(
        (view.status, view.refunded_amount),
        (PaymentStatus::PartiallyRefunded, dec("30.00"))
    );
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("0"));
    balanced(&t);
    // And it can be refunded again once the payer is unfrozen.
    t.a.ok(Command::UnfreezeWallet { wallet_id: t.payer });
    let (again, _) = reserved_of(t.b.ok(refund(payment.uuid, None)));
    credit(&mut t.a, &again).unwrap();
    settle(
        &mut t.b,
        Command::PaymentReserveFinalize {
            reservation_uuid: again.uuid,
        },
    );
    assert_eq!(t.a.balance(t.payer), dec("100.00"));
    balanced(&t);
}

#[test]
fn recovery_completes_pending_reservations_after_a_restart() {
    let mut t = two();
    let payments: Vec<PaymentView> = ["5", "7", "9"]
        .iter()
        .map(|amount| pay(&mut t.b, initiate(t.merchant, t.payer, amount, "USD")))
        .collect();
    for payment in &payments {
        reserve(&mut t, payment);
    }
    // The first credit landed before the "crash".
    let first = t.a.shard.pending_payment_reservations()[0].clone();
    credit(&mut t.b, &first).unwrap();
    // Restart both shards from snapshots; recovery re-sends every credit, then finalizes.
    t.a.shard = Shard::from_snapshot_bytes(&t.a.shard.snapshot_bytes().unwrap()).unwrap();
    t.b.shard = Shard::from_snapshot_bytes(&t.b.shard.snapshot_bytes().unwrap()).unwrap();
    let pending = t.a.shard.pending_payment_reservations();
    assert_eq!(pending.len(), 3);
    for reservation in pending {
        let target = shard_of(reservation.target_wallet_id.0, 2);
        assert_eq!(target, 1);
        let duplicate = credit(&mut t.b, &reservation).unwrap();
        assert_eq!(duplicate, reservation.uuid == first.uuid);
        settle(
            &mut t.a,
            Command::PaymentReserveFinalize {
                reservation_uuid: reservation.uuid,
            },
        );
    }
    for payment in &payments {
        assert_eq!(
            t.b.shard.payment_view(payment.uuid).unwrap().status,
            PaymentStatus::Completed
        );
    }
    assert_eq!(t.a.balance(t.payer), dec("79.00"));
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("0"));
    balanced(&t);
}

/// Issue 16, item 4: two confirms of one payment orchestrate the same reservation (the reserve is
/// idempotent by payment). The merchant is frozen for the first one's credit and unfrozen before
/// the second one's: the first decision on the target must be final, or the second credits what
/// the first releases and money appears on the merchant's shard.
#[test]
fn issue_16_a_refused_credit_stays_refused_for_a_second_orchestrator() {
    let mut t = two();
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "60", "USD"));
    let first = reserve(&mut t, &payment);
    let second = reserve(&mut t, &payment);
    assert_eq!(first, second, "the reserve is idempotent by payment");
    t.b.ok(Command::FreezeWallet {
        wallet_id: t.merchant,
    });
    assert_eq!(credit(&mut t.b, &first), Err(Rejection::WalletFrozen));
    t.b.ok(Command::UnfreezeWallet {
        wallet_id: t.merchant,
    });
    let again = credit(&mut t.b, &second);
    settle(
        &mut t.a,
        Command::PaymentReserveRelease {
            reservation_uuid: first.uuid,
        },
    );
    crate::shard::commerce::invariants::check_cross_shard_pairs(&[
        t.a.shard.cross_shard_legs(),
        t.b.shard.cross_shard_legs(),
    ])
    .unwrap();
    assert_eq!(in_transit(&[&t.a.shard, &t.b.shard]), dec("0"));
    assert_eq!(again.map_err(|r| r.code()), Err("invalid_state"));
    assert_eq!(t.a.balance(t.payer), dec("100.00"));
    assert_eq!(
        t.b.shard.payment_view(payment.uuid).unwrap().status,
        PaymentStatus::Pending
    );
    balanced(&t);
}

/// One orchestrator of a cross-shard payment move, stepped one command at a time.
#[derive(Clone, Debug)]
enum Step {
    /// A confirm that has not reserved yet.
    Confirm,
    Reserved(PaymentReservation),
    Credited(PaymentReservation, bool),
    Done,
}

fn harness(t: &mut Two, wallet: WalletId) -> &mut Harness {
    if shard_of(wallet.0, 2) == 0 {
        &mut t.a
    } else {
        &mut t.b
    }
}

/// Runs one step of `step`; what the runtime's orchestration does, one command at a time.
fn advance(t: &mut Two, payment: &PaymentView, step: Step) -> Step {
    match step {
        Step::Confirm => match t
            .a
            .exec(Command::PaymentReserve(PaymentReserve::for_payment(
                payment,
            ))) {
            Ok(Outcome::PaymentReserved { reservation, .. })
                if reservation.state == TransferState::Reserved =>
            {
                Step::Reserved(reservation)
            }
            Ok(_) | Err(_) => Step::Done,
        },
        Step::Reserved(reservation) => {
            let target = harness(t, reservation.target_wallet_id);
            let credited = credit(target, &reservation).is_ok();
            Step::Credited(reservation, credited)
        }
        Step::Credited(reservation, credited) => {
            let reservation_uuid = reservation.uuid;
            let command = if credited {
                Command::PaymentReserveFinalize { reservation_uuid }
            } else {
                Command::PaymentReserveRelease { reservation_uuid }
            };
            let source = harness(t, reservation.source_wallet_id);
            if let Err(rejection) = source.exec(command) {
                panic!("settling {reservation:?} (credited: {credited}) was refused: {rejection}");
            }
            Step::Done
        }
        Step::Done => Step::Done,
    }
}

/// Issue 16, item 4, model-based: concurrent confirms of one payment (each one's steps
/// interleaved with the others'), merchant and payer freezes and unfreezes, and cross-shard
/// refunds, in seeded random order. After every command no money is half-moved or created
/// (`check_cross_shard_pairs`, each shard's invariants); at the end every move is settled, the
/// in-transit accounts are empty and the balances are what the payment's final state says.
#[test]
fn issue_16_interleaved_confirms_freezes_and_refunds_never_create_money() {
    for seed in 0..400u64 {
        let mut state = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
        let mut next = move |bound: u64| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state % bound
        };
        let mut t = two();
        t.b.deposit(t.merchant, "50");
        let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "60", "USD"));
        let mut steps = vec![Step::Confirm, Step::Confirm, Step::Confirm];
        for _ in 0..40 {
            match next(8) {
                0 => {
                    let _ = t.b.exec(Command::FreezeWallet {
                        wallet_id: t.merchant,
                    });
                }
                1 => {
                    let _ = t.b.exec(Command::UnfreezeWallet {
                        wallet_id: t.merchant,
                    });
                }
                2 => {
                    let wallet_id = t.payer;
                    let _ = if next(2) == 0 {
                        t.a.exec(Command::FreezeWallet { wallet_id })
                    } else {
                        t.a.exec(Command::UnfreezeWallet { wallet_id })
                    };
                }
                3 => {
                    if let Ok(Outcome::PaymentReserved { reservation, .. }) =
                        t.b.exec(refund(payment.uuid, Some("10")))
                    {
                        steps.push(Step::Reserved(reservation));
                    }
                }
                _ => {
                    let index = usize::try_from(next(steps.len() as u64)).unwrap();
                    let step = steps[index].clone();
                    steps[index] = advance(&mut t, &payment, step);
                }
            }
            let legs = [t.a.shard.cross_shard_legs(), t.b.shard.cross_shard_legs()];
            if let Err(error) = crate::shard::commerce::invariants::check_cross_shard_pairs(&legs) {
                panic!("seed {seed}: {error}");
            }
        }
        // Everything settles once nobody is frozen.
        let _ = t.a.exec(Command::UnfreezeWallet { wallet_id: t.payer });
        let _ = t.b.exec(Command::UnfreezeWallet {
            wallet_id: t.merchant,
        });
        for step in &mut steps {
            while !matches!(step, Step::Done) {
                *step = advance(&mut t, &payment, step.clone());
            }
        }
        assert!(t.a.shard.pending_payment_reservations().is_empty());
        assert!(t.b.shard.pending_payment_reservations().is_empty());
        assert_eq!(
            in_transit(&[&t.a.shard, &t.b.shard]),
            dec("0"),
            "seed {seed}"
        );
        balanced(&t);
        let view = t.b.shard.payment_view(payment.uuid).unwrap();
        let charged = if view.status == PaymentStatus::Pending {
            dec("0")
        } else {
            dec("60")
        };
        assert_eq!(
            t.a.balance(t.payer),
            dec("100") - charged + view.refunded_amount,
            "seed {seed}: the payer paid once at most, and got back what was refunded"
        );
    }
}

/// The events each harness of `t` logged since the last call, one record per shard.
fn take_records(t: &mut Two, entries: &mut Vec<(u32, Vec<crate::Event>)>) {
    for (shard, log) in [(0, &mut t.a.log), (1, &mut t.b.log)] {
        let events = std::mem::take(log);
        if !events.is_empty() {
            entries.push((shard, events));
        }
    }
}

/// A payment of 30.00 from `t`'s payer, reserved on the payer's shard: the records so far.
fn reserved_payment(
    t: &mut Two,
) -> (
    Vec<(u32, Vec<crate::Event>)>,
    PaymentView,
    PaymentReservation,
) {
    let mut entries = Vec::new();
    take_records(t, &mut entries);
    let payment = pay(&mut t.b, initiate(t.merchant, t.payer, "30", "USD"));
    take_records(t, &mut entries);
    let reservation = reserve(t, &payment);
    take_records(t, &mut entries);
    (entries, payment, reservation)
}

/// Opens an engine on `entries` plus a second confirm's key, logged pending on the payer's
/// shard naming `reservation` (its reserve found that reservation; the crash came before its
/// answer); retries the confirm. Answers the retry's answer, the payer's balance and the number
/// of keys recovery answered on the first and on a second open.
async fn recover_repeated_confirm(
    entries: Vec<(u32, Vec<crate::Event>)>,
    reservation: crate::Uuid,
    payment: crate::Uuid,
    payer: WalletId,
) -> (String, Decimal, [usize; 2]) {
    use std::sync::Arc;

    use super::runtime_hardening::{append_pending_key, write_log, DebugRenderer, START_MS};
    use crate::runtime::clock::SeededClock;
    use crate::runtime::{Engine, EngineConfig};
    let dir = tempfile::tempdir().unwrap();
    let mut config = EngineConfig::new(dir.path());
    config.shard_count = 2;
    config.snapshot_every_records = 0;
    write_log(&config, entries);
    let key = append_pending_key(&config, 0, Some(reservation));
    let clock = Arc::new(SeededClock::new(34, START_MS));
    let open = || Engine::open(config.clone(), clock.clone(), Arc::new(DebugRenderer)).unwrap();
    let (engine, first) = open();
    let retry = engine
        .execute_idempotent(
            Command::ConfirmPayment {
                payment_uuid: payment,
            },
            key,
        )
        .await
        .unwrap();
    assert!(retry.replayed, "answered, not run");
    let balance = engine
        .read_wallet(payer, move |s| s.wallet(payer).unwrap().balance())
        .await
        .unwrap();
    engine.check_invariants().await.unwrap();
    assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 0);
    engine.shutdown().unwrap();
    let (engine, second) = open();
    engine.shutdown().unwrap();
    let text = String::from_utf8(retry.response).unwrap();
    (
        text,
        balance,
        [first.confirm_keys_answered, second.confirm_keys_answered],
    )
}

/// A second confirm of a cross-shard payment that an earlier confirm had completed: its reserve
/// logs the key pending, naming the finalized reservation, and the no-op finalize that answers
/// it never ran (the crash). Recovery settles only reservations still reserved, so before, the
/// key stayed pending for good (409 `request_in_progress` to every retry); now it gets the live
/// path's answer, `invalid_state` "payment is not pending", and the payment is untouched.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_confirm_interrupted_after_its_reserve_is_answered_by_recovery() {
    let mut t = two();
    let (mut entries, payment, reservation) = reserved_payment(&mut t);
    assert_eq!(credit(&mut t.b, &reservation), Ok(false));
    take_records(&mut t, &mut entries);
    settle(
        &mut t.a,
        Command::PaymentReserveFinalize {
            reservation_uuid: reservation.uuid,
        },
    );
    take_records(&mut t, &mut entries);
    let (text, balance, answered) =
        recover_repeated_confirm(entries, reservation.uuid, payment.uuid, t.payer).await;
    assert!(text.contains("payment is not pending"), "{text}");
    assert_eq!(balance, dec("70.00"), "charged once");
    assert_eq!(answered, [1, 0], "answered once, and the answer was logged");
}

/// The same race ending in a release: the second confirm reserved while the first one's
/// reservation was still reserved, then the first one's credit was refused (the merchant
/// frozen) and the reservation released. Live, the second confirm completes that reservation
/// too (its credit refused again, a no-op release, the refusal as its answer); recovery now
/// does the same for its pending key, and nothing is charged.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_repeated_confirm_of_a_released_charge_is_answered_by_recovery() {
    let mut t = two();
    let (mut entries, payment, reservation) = reserved_payment(&mut t);
    t.b.ok(Command::FreezeWallet {
        wallet_id: t.merchant,
    });
    assert_eq!(credit(&mut t.b, &reservation), Err(Rejection::WalletFrozen));
    take_records(&mut t, &mut entries);
    settle(
        &mut t.a,
        Command::PaymentReserveRelease {
            reservation_uuid: reservation.uuid,
        },
    );
    take_records(&mut t, &mut entries);
    let (text, balance, answered) =
        recover_repeated_confirm(entries, reservation.uuid, payment.uuid, t.payer).await;
    assert!(text.contains("refused before"), "{text}");
    assert_eq!(balance, dec("100.00"), "nothing charged");
    assert_eq!(answered, [1, 0]);
}
