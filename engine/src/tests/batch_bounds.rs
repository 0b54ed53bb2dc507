//! The bounds a transfer batch sizes its log records with (`runtime::batch::command_bound`):
//! each step an item can take, measured with empty texts and with every text at its longest,
//! must log no more than the bound says. If a change to the events makes one bigger, these
//! fail before a batch could build a record the log refuses (which stops the shard).

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use super::{dec, transfer, Harness};
use crate::runtime::batch::{command_bound, ITEM_EVENT_BYTES};
use crate::runtime::journal::JournalEntry;
use crate::shard::command::{Details, TransferCredit, TEXT_BYTES_MAX};
use crate::shard::state::Shard;
use crate::{Command, Event, Outcome};

/// The bytes `events` take as one record.
fn record_bytes(events: Vec<Event>) -> usize {
    JournalEntry {
        shard: 0,
        events,
        directory: Vec::new(),
        idempotency: Vec::new(),
    }
    .encode()
    .unwrap()
    .len()
}

fn details(long: bool) -> Details {
    // Multi-byte characters: the bound counts bytes.
    let text = |c: char| long.then(|| c.to_string().repeat(TEXT_BYTES_MAX / c.len_utf8()));
    Details {
        description: text('é'),
        external_reference: text('x'),
        idempotency_key: text('k'),
        meta: text('m'),
    }
}

/// Runs `command` on `h` and returns the bytes of its record, asserting the bound.
fn measured(h: &mut Harness, command: Command, bound: usize) -> (usize, Outcome) {
    h.log.clear();
    let outcome = h.ok(command);
    let bytes = record_bytes(std::mem::take(&mut h.log));
    assert!(bytes <= bound, "{bytes} bytes logged, bound {bound}");
    (bytes, outcome)
}

#[test]
fn every_step_of_a_batch_item_logs_within_its_bound() {
    for long in [false, true] {
        let mut h = Harness::with_shard(Shard::new(0, 1).unwrap());
        let a = h.create(1, "EUR");
        let b = h.create(2, "EUR");
        h.deposit(a, "1000");
        let mut args = transfer(a, b, "1.25", "EUR");
        args.details = details(long);
        let bound = command_bound(&Command::Transfer(args.clone()));

        // A transfer, and an atomic batch's undo of it (the two in one record: twice the bound).
        let (posted, outcome) = measured(&mut h, Command::Transfer(args.clone()), bound);
        let Outcome::Transaction(view) = outcome else {
            panic!("not a transfer")
        };
        let (undone, _) = measured(
            &mut h,
            Command::Reverse {
                transaction_uuid: view.uuid,
                reason: "atomic transfer batch aborted".into(),
            },
            bound,
        );
        assert!(posted + undone <= 2 * bound);

        // A batch reserve (here with its target on the same shard), its credit, a release.
        let (_, outcome) = measured(&mut h, Command::TransferBatchReserve(args.clone()), bound);
        let Outcome::TransferReserved { transfer, .. } = outcome else {
            panic!("not reserved")
        };
        let credit = Command::TransferCredit(TransferCredit::for_batch(
            &transfer,
            crate::values::ids::Uuid([1; 16]),
        ));
        let credit_bound = command_bound(&credit);
        measured(&mut h, credit, credit_bound);
        let (_, outcome) = measured(&mut h, Command::TransferBatchReserve(args.clone()), bound);
        let Outcome::TransferReserved { transfer, .. } = outcome else {
            panic!("not reserved")
        };
        measured(
            &mut h,
            Command::TransferRelease {
                transfer_uuid: transfer.uuid,
            },
            ITEM_EVENT_BYTES,
        );
        let (_, outcome) = measured(&mut h, Command::TransferBatchReserve(args), bound);
        let Outcome::TransferReserved { transfer, .. } = outcome else {
            panic!("not reserved")
        };
        measured(
            &mut h,
            Command::TransferFinalize {
                transfer_uuid: transfer.uuid,
            },
            ITEM_EVENT_BYTES,
        );
        assert!(h.balance(a) < dec("1000"));
    }
}
