//! Regression: a snapshot taken while a cross-shard transfer's answer is logged but not yet
//! durable lost the transfer's idempotency key (found by the engine crash drill's review; fixed
//! by "engine: a snapshot keeps a transfer's idempotency key until its answer is durable").
//!
//! How it happened (engine/src/runtime): an idempotent cross-shard transfer logs its key as
//! *pending* with the reserve record (LSN r), and its answer with the finalize record (LSN f > r),
//! whereupon `IdempotencyTable::record` *replaces* the pending slot by a done slot tagged f. A
//! snapshot captures the source shard after the reserve (covered LSN c, r <= c < f), then reads
//! the table with `durable_records(cutoff, durable)`. If f is not yet durable then, the done slot
//! is skipped (lsn > durable) and the pending record is gone, so the snapshot has no entry for the
//! key. After a power loss that drops the not-yet-durable finalize record, recovery loads the
//! snapshot, skips the reserve record (r <= c), finds the transfer still reserved and finishes it
//! (`pending_for_transfer` finds no key, so no answer is recorded). The client, which never got
//! an answer, retries under the same key: `begin` says `Fresh` and the transfer runs a second
//! time: money moves twice for one idempotent request.
//!
//! The first fix kept the pending record in the live table until its answer was durable. Since
//! answers moved to the history store, a snapshot's keys come from replaying the durable log up
//! to the snapshot's LSN (`IdempotencyTable::record_hot`, then `pending_records`), never from the
//! live table: a pending key is replaced only by an answer the replay itself read, which is
//! durable and filed in the store by the time recovery serves. This test drives that table.

#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use engine::runtime::idempotency::{Begin, IdempotencyTable};
use engine::runtime::journal::IdempotencyRecord;
use engine::Uuid;

const NOW_MS: i64 = 1_700_000_000_000;

fn pending_transfer_key() -> IdempotencyRecord {
    IdempotencyRecord {
        caller: "customer:1".into(),
        key: "transfer-1".into(),
        fingerprint: [5; 32],
        at_ms: NOW_MS,
        route: 3,
        response: None,
        transfer_uuid: Some(Uuid([7; 16])),
    }
}

#[test]
fn a_snapshot_keeps_the_key_of_a_transfer_whose_answer_is_not_yet_durable() {
    // The snapshot's replay reads the durable log through LSN 250: the reserve (LSN 100, key
    // pending) is in it, the finalize (LSN 300, with the answer) is not.
    let replayed = IdempotencyTable::new();
    let pending = pending_transfer_key();
    replayed.record_hot(&pending, 100);
    let kept = replayed.pending_records();
    assert!(
        kept.iter()
            .any(|r| r.caller == pending.caller && r.key == pending.key),
        "the snapshot lost the pending key: after a power loss that drops LSN 300, a retry of \
         this transfer under the same key would run it again"
    );

    // What recovery from that snapshot then does: load its keys, skip the reserve record (it is
    // covered), finish the transfer. The retry must not be a fresh request.
    let recovered = IdempotencyTable::new();
    for record in &kept {
        recovered.record_hot(record, 0);
    }
    let retry = recovered.begin(&pending.caller, &pending.key, pending.fingerprint, 250);
    assert_ne!(
        retry,
        Begin::Fresh,
        "a retry after recovery runs the transfer a second time"
    );

    // Had the replay read the finalize too, the answer (durable, so in the store once recovery
    // serves) ends the pending key and the snapshot holds no answer.
    let answered = IdempotencyRecord {
        response: Some(b"3:ok:transfer".to_vec()),
        ..pending.clone()
    };
    replayed.record_hot(&answered, 300);
    assert!(replayed.pending_records().is_empty());
    assert!(replayed.is_empty(), "replay keeps no answer in memory");
}
