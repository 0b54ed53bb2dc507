//! Finished cross-shard moves leave memory (issue 14, item 1): after many cross-shard transfers and
//! payments on 2 to 4 shards, once filed, no finished move record is left in the shards; the
//! invariants (in-transit totals, pairs across shards via the store) and `replay --verify`'s
//! store checks pass; a repeated step of an evicted move (credit, finalize, release, confirm) is
//! answered from the store and moves no money; and recovery after a snapshot and a restart
//! finishes a transfer whose credit had already left memory without crediting it twice.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::sync::Arc;

use engine::commerce::payment::PaymentStatus;
use engine::ledger::transfer::TransferState;
use engine::ledger::wallet::OwnerType;
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, Renderer};
use engine::shard::command::{
    Details, MoneyMove, PaymentCredit, RefundPayment, TransferArgs, TransferCredit,
};
use engine::shard::moves::MoveRecord;
use engine::values::fee::FeeRule;
use engine::{Command, Outcome, Rejection, Uuid, WalletId};
use rust_decimal::Decimal;

mod common;
use common::{amount, config, wallet, yer};

struct NoRenderer;

impl Renderer for NoRenderer {
    fn render(&self, _: u16, _: &Result<Outcome, Rejection>) -> Vec<u8> {
        Vec::new()
    }
}

fn open(dir: &std::path::Path, shards: u32, seed: u64) -> Engine {
    common::open(dir, shards, seed, Arc::new(NoRenderer))
}

async fn deposit(engine: &Engine, wallet_id: WalletId, value: &str) {
    engine
        .execute(Command::Deposit(MoneyMove {
            wallet_id,
            amount: amount(value),
            currency: None,
            details: Details::default(),
        }))
        .await
        .unwrap();
}

async fn balances(engine: &Engine, wallets: &[WalletId]) -> Vec<Decimal> {
    let mut out = Vec::new();
    for wallet_id in wallets {
        let wallet_id = *wallet_id;
        out.push(
            engine
                .read_wallet(wallet_id, move |s| s.balance(wallet_id).unwrap().balance)
                .await
                .unwrap(),
        );
    }
    out
}

/// Cross-shard move records in every shard's memory.
async fn moves_in_memory(engine: &Engine) -> usize {
    engine
        .read_all(engine::Shard::moves_in_memory)
        .await
        .unwrap()
        .iter()
        .sum()
}

fn transfer(source: WalletId, target: WalletId, value: &str) -> Command {
    Command::Transfer(TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: amount(value),
        currency: yer(),
        details: Details::default(),
    })
}

/// A pending wallet payment of `value` from `payer` to merchant 7.
async fn initiate(engine: &Engine, merchant: WalletId, payer: WalletId, value: &str) -> Uuid {
    let fee = FeeRule {
        percent: amount("1"),
        fixed: amount("0"),
    };
    common::initiate(engine, merchant, payer, value, fee).await
}

/// A merchant (7) and customers on every shard, funded; cross-shard transfers between the
/// customers and cross-shard payments (confirmed, some refunded) to the merchant. Answers the
/// wallets (merchant first) and the confirmed payments.
async fn workload(engine: &Engine, shards: u32) -> (Vec<WalletId>, Vec<Uuid>) {
    let merchant = wallet(engine, OwnerType::Merchant, 7, 7).await;
    let mut wallets = vec![merchant];
    for owner in 0..(2 * u64::from(shards)) {
        let customer = wallet(engine, OwnerType::Customer, 100 + owner, 1).await;
        deposit(engine, customer, "1000.00").await;
        wallets.push(customer);
    }
    let customers = &wallets[1..];
    let mut crossed = 0;
    for (i, source) in customers.iter().enumerate() {
        for (j, target) in customers.iter().enumerate() {
            if engine.shard_of_wallet(*source) != engine.shard_of_wallet(*target) {
                let value = format!("{}.{:02}", 1 + i, j);
                engine
                    .execute(transfer(*source, *target, &value))
                    .await
                    .unwrap();
                crossed += 1;
            }
        }
    }
    assert!(crossed >= 4, "{crossed} cross-shard transfers");
    let mut payments = Vec::new();
    for (i, payer) in customers.iter().enumerate() {
        if engine.shard_of_wallet(*payer) == engine.shard_of_wallet(merchant) {
            continue;
        }
        let payment = initiate(engine, merchant, *payer, &format!("{}.00", 20 + i)).await;
        let confirmed = engine
            .execute(Command::ConfirmPayment {
                payment_uuid: payment,
            })
            .await
            .unwrap();
        let Outcome::Payment(confirmed) = confirmed else {
            panic!("{confirmed:?}")
        };
        assert_eq!(confirmed.status, PaymentStatus::Completed);
        if i % 2 == 0 {
            // A cross-shard refund: reserve on the merchant's shard, credit on the payer's.
            engine
                .execute(Command::RefundPayment(RefundPayment {
                    payment_uuid: payment,
                    amount: Some(amount("5.00")),
                    reason: None,
                }))
                .await
                .unwrap();
        }
        payments.push(payment);
    }
    assert!(!payments.is_empty());
    // Refused moves: a transfer to a frozen wallet and a confirm to a frozen merchant are
    // released (the payment's credit refusal is recorded on the merchant's shard).
    let source = customers[0];
    let frozen = *customers
        .iter()
        .find(|c| engine.shard_of_wallet(**c) != engine.shard_of_wallet(source))
        .unwrap();
    let remote_payer = *customers
        .iter()
        .find(|c| engine.shard_of_wallet(**c) != engine.shard_of_wallet(merchant))
        .unwrap();
    let refused = initiate(engine, merchant, remote_payer, "9.00").await;
    for wallet_id in [frozen, merchant] {
        engine
            .execute(Command::FreezeWallet { wallet_id })
            .await
            .unwrap();
    }
    engine
        .execute(transfer(source, frozen, "3.00"))
        .await
        .unwrap_err();
    engine
        .execute(Command::ConfirmPayment {
            payment_uuid: refused,
        })
        .await
        .unwrap_err();
    for wallet_id in [frozen, merchant] {
        engine
            .execute(Command::UnfreezeWallet { wallet_id })
            .await
            .unwrap();
    }
    (wallets, payments)
}

/// Every filed move record, read from the store.
fn filed_moves(engine: &Engine) -> Vec<MoveRecord> {
    let mut records = Vec::new();
    engine
        .history()
        .store()
        .for_each_move(&mut |record| records.push(record))
        .unwrap();
    records
}

/// Repeats every step of every finished move: each is answered from the store (no move is in
/// memory), changes no balance and leaves nothing in memory. The step that settled a move is
/// answered with the filed record, the other settle is refused, a finalized move's credit is a
/// duplicate and a released payment step's credit is refused again (its refusal is filed).
async fn repeat_finished_steps(engine: &Engine, wallets: &[WalletId], payments: &[Uuid]) {
    let before = balances(engine, wallets).await;
    let records = filed_moves(engine);
    let (mut finalized, mut released, mut refusals) = (0, 0, 0);
    for record in &records {
        let (state, credit, finalize, release) = match record {
            MoveRecord::Outgoing(t) => (
                t.state,
                Command::TransferCredit(TransferCredit::for_transfer(t)),
                Command::TransferFinalize {
                    transfer_uuid: t.uuid,
                },
                Command::TransferRelease {
                    transfer_uuid: t.uuid,
                },
            ),
            MoveRecord::Reservation(r) => (
                r.state,
                Command::PaymentCredit(PaymentCredit::for_reservation(r)),
                Command::PaymentReserveFinalize {
                    reservation_uuid: r.uuid,
                },
                Command::PaymentReserveRelease {
                    reservation_uuid: r.uuid,
                },
            ),
            MoveRecord::Refusal(_) => {
                refusals += 1;
                continue;
            }
            MoveRecord::Incoming(_) | MoveRecord::Credit(_) => continue,
        };
        let done = state == TransferState::Finalized;
        let (same, other) = if done {
            (finalize, release)
        } else {
            (release, finalize)
        };
        let settled = match engine.execute(same).await.unwrap() {
            Outcome::TransferSettled(t) => MoveRecord::Outgoing(t),
            Outcome::PaymentReservationSettled(r) => MoveRecord::Reservation(r),
            other => panic!("{other:?}"),
        };
        assert_eq!(&settled, record);
        let refused = engine.execute(other).await.unwrap_err().to_string();
        let says = if done { "finalized" } else { "released" };
        assert!(refused.contains(says), "{refused}");
        if done {
            let again = engine.execute(credit).await.unwrap();
            assert!(
                matches!(
                    again,
                    Outcome::TransferCredited {
                        duplicate: true,
                        ..
                    } | Outcome::PaymentCredited {
                        duplicate: true,
                        ..
                    }
                ),
                "a repeated credit moved money: {again:?}"
            );
            finalized += 1;
        } else {
            if matches!(record, MoveRecord::Reservation(_)) {
                let again = engine.execute(credit).await.unwrap();
                assert!(
                    matches!(again, Outcome::PaymentCreditRefused { .. }),
                    "{again:?}"
                );
            }
            released += 1;
        }
    }
    assert!(finalized >= 4, "{finalized} moves repeated");
    assert_eq!(
        (released, refusals),
        (2, 1),
        "one transfer and one charge refused"
    );
    // A second confirm finds the charge reservation in the store (not in memory) and is refused.
    for payment_uuid in payments {
        let again = engine
            .execute(Command::ConfirmPayment {
                payment_uuid: *payment_uuid,
            })
            .await
            .unwrap_err();
        assert!(again.to_string().contains("not pending"), "{again}");
    }
    assert_eq!(balances(engine, wallets).await, before);
    engine.evict_filed().await.unwrap();
    assert_eq!(moves_in_memory(engine).await, 0);
    assert_eq!(
        filed_moves(engine),
        records,
        "a repeat changed a filed move"
    );
}

async fn assert_clean(engine: &Engine) {
    engine.evict_filed().await.unwrap();
    assert_eq!(moves_in_memory(engine).await, 0, "finished moves in memory");
    engine.check_invariants().await.unwrap();
    let compared = engine.verify_history().await.unwrap();
    assert!(compared.is_ok(), "{compared:?}");
    assert_eq!(engine.pending_cross_shard_moves().await.unwrap(), 0);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn finished_moves_leave_memory_and_repeats_are_answered_from_the_store() {
    for shards in [2, 3, 4] {
        let dir = tempfile::tempdir().unwrap();
        let engine = open(dir.path(), shards, u64::from(shards));
        let (wallets, payments) = workload(&engine, shards).await;
        assert_clean(&engine).await;
        let totals = engine
            .read_all(|s| s.transit_totals().clone())
            .await
            .unwrap();
        assert!(totals.iter().any(|t| !t.is_empty()));
        repeat_finished_steps(&engine, &wallets, &payments).await;
        let held = balances(&engine, &wallets).await;

        // A snapshot carries no finished move; after a restart the repeats still find them.
        engine.snapshot().await.unwrap();
        engine.shutdown().unwrap();
        let engine = open(dir.path(), shards, 100 + u64::from(shards));
        assert_clean(&engine).await;
        assert_eq!(
            engine
                .read_all(|s| s.transit_totals().clone())
                .await
                .unwrap(),
            totals
        );
        assert_eq!(balances(&engine, &wallets).await, held);
        repeat_finished_steps(&engine, &wallets, &payments).await;
        assert_clean(&engine).await;
        engine.shutdown().unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn recovery_finishes_a_transfer_whose_credit_left_memory_without_crediting_twice() {
    let dir = tempfile::tempdir().unwrap();
    let engine = open(dir.path(), 2, 1);
    let mut owner = 1;
    let source = wallet(&engine, OwnerType::Customer, owner, 1).await;
    let target = loop {
        owner += 1;
        let target = wallet(&engine, OwnerType::Customer, owner, 1).await;
        if engine.shard_of_wallet(target) != engine.shard_of_wallet(source) {
            break target;
        }
    };
    deposit(&engine, source, "100.00").await;
    // The crash: the reserve and the credit are durable, the finalize never ran.
    let Command::Transfer(args) = transfer(source, target, "40.00") else {
        unreachable!()
    };
    let reserved = engine
        .execute(Command::TransferReserve(args))
        .await
        .unwrap();
    let Outcome::TransferReserved { transfer, .. } = reserved else {
        panic!("{reserved:?}")
    };
    let credited = engine
        .execute(Command::TransferCredit(TransferCredit::for_transfer(
            &transfer,
        )))
        .await
        .unwrap();
    assert!(matches!(
        credited,
        Outcome::TransferCredited {
            duplicate: false,
            ..
        }
    ));
    engine.evict_filed().await.unwrap();
    // Only the reserved transfer is left in memory: the credit was filed and left.
    let held = engine
        .read_all(engine::Shard::moves_in_memory)
        .await
        .unwrap();
    assert_eq!(held[engine.shard_of_wallet(source) as usize], 1);
    assert_eq!(held[engine.shard_of_wallet(target) as usize], 0);
    assert_eq!(
        balances(&engine, &[source, target]).await,
        [amount("60.00"), amount("40.00")]
    );
    // The snapshot is replayed: it carries the reserved transfer and no credit record.
    engine.snapshot().await.unwrap();
    engine.shutdown().unwrap();

    let clock = Arc::new(SeededClock::new(2, 1_700_000_100_000));
    let (engine, report) =
        Engine::open(config(dir.path(), 2), clock, Arc::new(NoRenderer)).unwrap();
    assert_eq!(report.transfers_completed, 1);
    // Recovery re-sent the credit: answered from the store, so the target got 40 once.
    assert_eq!(
        balances(&engine, &[source, target]).await,
        [amount("60.00"), amount("40.00")]
    );
    assert_clean(&engine).await;
    let filed = engine
        .history()
        .store()
        .moved(engine::shard::moves::MoveKey::Outgoing(transfer.uuid))
        .unwrap();
    assert!(
        matches!(filed, Some(MoveRecord::Outgoing(ref t)) if t.state == TransferState::Finalized),
        "{filed:?}"
    );
    engine.shutdown().unwrap();

    // And once more from the log alone (no snapshot newer than the finalize): same state.
    let engine = open(dir.path(), 2, 3);
    assert_eq!(
        balances(&engine, &[source, target]).await,
        [amount("60.00"), amount("40.00")]
    );
    assert_clean(&engine).await;
    engine.shutdown().unwrap();
}
