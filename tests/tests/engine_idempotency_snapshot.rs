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
//! The fix keeps the pending record until the answer that replaces it is durable:
//! `Slot::Done { .., replaced: Option<(u64, IdempotencyRecord)> }`, set by `record` when it
//! overwrites a `Pending`; `durable_records` emits that pending record while the done slot's LSN
//! is above `durable_lsn` and the pending one's is not.

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
    let table = IdempotencyTable::new();
    let pending = pending_transfer_key();
    // Step 1, the reserve, logged at LSN 100 with the key pending; durable.
    table.record(&pending, 100);
    // Step 3, the finalize, logged at LSN 300 with the answer; not durable yet.
    let answered = IdempotencyRecord {
        response: Some(b"3:ok:transfer".to_vec()),
        ..pending.clone()
    };
    table.record(&answered, 300);

    // The snapshot covers the source shard through LSN 250 (the reserve, not the finalize) and
    // reads the table while the log is durable through 250.
    let kept = table.durable_records(NOW_MS - 1000, 250);
    let key = kept
        .iter()
        .find(|r| r.caller == pending.caller && r.key == pending.key);
    assert!(
        key.is_some(),
        "the snapshot holds neither the pending key (LSN 100, durable) nor its answer (LSN 300, \
         not durable): after a power loss that drops LSN 300, a retry of this transfer under the \
         same key would run it again"
    );

    // What recovery from that snapshot then does: load its keys, skip the reserve record (it is
    // covered), finish the transfer. The retry must not be a fresh request.
    let recovered = IdempotencyTable::new();
    for record in &kept {
        recovered.record(record, 0);
    }
    let retry = recovered.begin(&pending.caller, &pending.key, pending.fingerprint, 250);
    assert_ne!(
        retry,
        Begin::Fresh,
        "a retry after recovery runs the transfer a second time"
    );
}
