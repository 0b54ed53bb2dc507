//! Replay determinism: the events of a random run rebuild the same state, with or without a
//! snapshot taken midway; apply refuses events that do not fit.

use proptest::prelude::*;

use super::model::{ops, run_ops};
use super::{deposit, Harness};
use crate::{decode, encode, Event, Shard};

fn replay(events: &[Event]) -> Shard {
    let mut shard = Shard::new(0, 1).unwrap();
    shard.apply_all(events).unwrap();
    shard
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 64, ..ProptestConfig::default() })]

    #[test]
    fn replay_rebuilds_the_same_state(ops in ops(), split in any::<prop::sample::Index>()) {
        let h = run_ops(&ops);
        let digest = h.shard.state_digest();

        // Through the codec, as the WAL would carry it.
        let decoded = decode(&encode(&h.log).unwrap()).unwrap();
        let replayed = replay(&decoded);
        prop_assert_eq!(replayed.state_digest(), digest);
        prop_assert_eq!(replayed.snapshot_bytes().unwrap(), h.shard.snapshot_bytes().unwrap());
        replayed.check_invariants().unwrap();

        // Snapshot after a prefix, then the rest.
        let cut = split.index(h.log.len() + 1);
        let prefix = replay(&h.log[..cut]);
        let bytes = prefix.snapshot_bytes().unwrap();
        let mut restored = Shard::from_snapshot_bytes(&bytes).unwrap();
        prop_assert_eq!(restored.state_digest(), prefix.state_digest());
        prop_assert_eq!(restored.snapshot_bytes().unwrap(), bytes);
        restored.apply_all(&h.log[cut..]).unwrap();
        prop_assert_eq!(restored.state_digest(), digest);
        restored.check_invariants().unwrap();
    }
}

#[test]
fn apply_refuses_events_that_do_not_fit() {
    let mut h = Harness::new();
    let wallet = h.create(1, "USD");
    h.deposit(wallet, "10");
    let log = h.log.clone();
    // Applying the log a second time: ids are out of sequence.
    let mut shard = replay(&log);
    assert_eq!(
        shard.apply(&log[0]).unwrap_err().what,
        "wallet id out of sequence"
    );
    // A tampered entry does not chain.
    let mut shard_b = replay(&log[..1]);
    let mut tampered = log[1..].to_vec();
    for event in &mut tampered {
        if let Event::EntryPosted { entry, .. } = event {
            entry.created_at_ms += 1;
        }
    }
    let error = shard_b.apply_all(&tampered).unwrap_err();
    assert!(error.what.contains("hash"), "{error}");
    // Nothing half-applied by the refused event itself.
    let digest = shard.state_digest();
    assert!(shard.apply(&log[log.len() - 1]).is_err());
    assert_eq!(shard.state_digest(), digest);
}

#[test]
fn digest_differs_when_state_differs() {
    let mut a = Harness::new();
    let mut b = Harness::new();
    let wa = a.create(1, "USD");
    let wb = b.create(1, "USD");
    assert_eq!(a.shard.state_digest(), b.shard.state_digest());
    a.ok(deposit(wa, "1"));
    b.ok(deposit(wb, "2"));
    assert_ne!(a.shard.state_digest(), b.shard.state_digest());
}

#[test]
fn snapshot_of_a_two_shard_layout_round_trips() {
    let mut h = Harness::with_shard(Shard::new(1, 3).unwrap());
    let wallet = h.create(1, "JPY");
    assert_eq!(wallet.0 % 3, 1);
    h.deposit(wallet, "500");
    let restored = Shard::from_snapshot_bytes(&h.shard.snapshot_bytes().unwrap()).unwrap();
    assert_eq!((restored.shard_index(), restored.shard_count()), (1, 3));
    assert_eq!(restored.state_digest(), h.shard.state_digest());
    restored.check_invariants().unwrap();
}
