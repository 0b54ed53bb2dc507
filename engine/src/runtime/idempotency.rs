//! The idempotency table: (caller, key) -> what was asked and what was answered, for the keys
//! that are hot. Answers live in the history store ([`super::history::HistoryStore::answer`]).
//!
//! Entries are born in two ways. A live request claims its key first ([`IdempotencyTable::begin`]):
//! the slot is `InFlight` in memory only, so a concurrent retry is told so. The command then runs
//! on its shard, which writes the key, fingerprint and rendered answer *in the same WAL record* as
//! the command's events and, in the same step, stores the answer here tagged with that record's
//! LSN. An answer whose LSN is above the log's durable LSN still counts as in flight, so nobody is
//! shown it early. A crash before the record is durable leaves nothing: the command did not
//! happen, and a retry runs it.
//!
//! # Hot keys only
//!
//! Once the record is durable the history indexer files the answer in the store and then drops it
//! from this table ([`IdempotencyTable::forget_filed`]). A key not found here is looked up in the
//! store ([`super::Engine::execute_idempotent`]) *after* it is claimed here, so an answer moving
//! from memory to the store is always seen in one of the two. What stays in memory is what is in
//! flight: claims, answers not yet filed, and the pending keys of unfinished cross-shard moves
//! (those are hot state, so snapshots carry them; replay keeps nothing else, see
//! [`IdempotencyTable::record_hot`]).
//!
//! Keys are kept for the retention window (`--idempotency-retention`, 24 h by default) after
//! their answer; an older answer is treated as absent, so a retry after the window runs as new.
//! The indexer purges expired answers from the store.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::journal::IdempotencyRecord;

/// How long an answered key is kept by default (`--idempotency-retention`).
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

/// True when a stored `fingerprint` matches a request's, or the previous release's digest of it
/// (`legacy`, asked only when the canonical one differs: see [`super::LegacyRequest`]).
#[must_use]
pub fn same_request(
    stored: &[u8; 32],
    fingerprint: &[u8; 32],
    legacy: &dyn Fn() -> Option<[u8; 32]>,
) -> bool {
    stored == fingerprint || legacy().as_ref() == Some(stored)
}

#[derive(Clone, Debug, PartialEq, Eq)]
enum Slot {
    /// A live request holds the key; nothing durable yet.
    InFlight { fingerprint: [u8; 32] },
    /// A multi-step command (cross-shard transfer) logged its start but not its answer yet.
    Pending {
        fingerprint: [u8; 32],
        at_ms: i64,
        lsn: u64,
        record: IdempotencyRecord,
    },
    Done {
        fingerprint: [u8; 32],
        at_ms: i64,
        lsn: u64,
        response: Vec<u8>,
    },
}

/// What [`IdempotencyTable::begin`] found.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Begin {
    /// The key is new: it is now held for this request.
    Fresh,
    /// The same request was answered before: here is the answer.
    Replay(Vec<u8>),
    /// The key was used for a different request.
    Reused,
    /// The same key is being processed right now.
    InFlight,
}

/// The shared table; cheap concurrent access from every shard and API task.
#[derive(Debug, Default)]
pub struct IdempotencyTable {
    slots: DashMap<(String, String), Slot>,
}

impl IdempotencyTable {
    #[must_use]
    pub fn new() -> Self {
        IdempotencyTable::default()
    }

    /// Claims `key` for `caller`'s request with `fingerprint`, or says why not. `durable_lsn` is
    /// the log's durable watermark: an answer above it is not shown yet.
    pub fn begin(&self, caller: &str, key: &str, fingerprint: [u8; 32], durable_lsn: u64) -> Begin {
        self.begin_matching(caller, key, fingerprint, &|| None, durable_lsn, i64::MIN)
    }

    /// [`IdempotencyTable::begin`], where a stored key also matches what `legacy` answers (the
    /// fingerprint the previous release computed for the same request, asked only when the
    /// canonical one differs; see [`super::LegacyRequest`]). An answer decided before `cutoff_ms`
    /// (the retention window's start) is expired: the key is claimed afresh.
    pub fn begin_matching(
        &self,
        caller: &str,
        key: &str,
        fingerprint: [u8; 32],
        legacy: &dyn Fn() -> Option<[u8; 32]>,
        durable_lsn: u64,
        cutoff_ms: i64,
    ) -> Begin {
        let same = |stored: &[u8; 32]| same_request(stored, &fingerprint, legacy);
        match self.slots.entry((caller.to_owned(), key.to_owned())) {
            Entry::Vacant(vacant) => {
                vacant.insert(Slot::InFlight { fingerprint });
                Begin::Fresh
            }
            Entry::Occupied(mut occupied) => match occupied.get() {
                Slot::Done { at_ms, lsn, .. } if *at_ms < cutoff_ms && *lsn <= durable_lsn => {
                    occupied.insert(Slot::InFlight { fingerprint });
                    Begin::Fresh
                }
                Slot::Done {
                    fingerprint: f,
                    response,
                    lsn,
                    ..
                } if same(f) && *lsn <= durable_lsn => Begin::Replay(response.clone()),
                Slot::Done { fingerprint: f, .. } if same(f) => Begin::InFlight,
                Slot::InFlight { fingerprint: f } | Slot::Pending { fingerprint: f, .. }
                    if same(f) =>
                {
                    Begin::InFlight
                }
                _ => Begin::Reused,
            },
        }
    }

    /// Releases a claim whose command left no record in the log (refused before it, its message
    /// dropped, the engine unavailable). A key the command logged (pending or answered) stays.
    pub fn abandon(&self, caller: &str, key: &str) {
        self.slots
            .remove_if(&(caller.to_owned(), key.to_owned()), |_, slot| {
                matches!(slot, Slot::InFlight { .. })
            });
    }

    /// Records an answer (or the start of a multi-step command) logged at `lsn`.
    pub fn record(&self, record: &IdempotencyRecord, lsn: u64) {
        let id = (record.caller.clone(), record.key.clone());
        let slot = match &record.response {
            Some(response) => Slot::Done {
                fingerprint: record.fingerprint,
                at_ms: record.at_ms,
                lsn,
                response: response.clone(),
            },
            None => Slot::Pending {
                fingerprint: record.fingerprint,
                at_ms: record.at_ms,
                lsn,
                record: record.clone(),
            },
        };
        self.slots.insert(id, slot);
    }

    /// The pending keys of unfinished cross-shard moves and multi-record transfer batches, for a
    /// snapshot (hot state; answers are in the store), sorted so snapshots are canonical. Snapshots take them from replay's table,
    /// which holds only what the durable log says.
    #[must_use]
    pub fn pending_records(&self) -> Vec<IdempotencyRecord> {
        let mut records: Vec<IdempotencyRecord> = self
            .slots
            .iter()
            .filter_map(|item| match item.value() {
                Slot::Pending { record, .. } => Some(record.clone()),
                _ => None,
            })
            .collect();
        records.sort_by(|a, b| (&a.caller, &a.key).cmp(&(&b.caller, &b.key)));
        records
    }

    /// Forgets answers older than `cutoff_ms` (in-flight claims are never dropped).
    pub fn purge_before(&self, cutoff_ms: i64) {
        self.slots
            .retain(|_, slot| !matches!(slot, Slot::Done { at_ms, .. } if *at_ms < cutoff_ms));
    }

    /// Replay's [`IdempotencyTable::record`], which keeps hot keys only: a pending key (its move
    /// is unfinished) is kept, an answer ends it. Every answer replay sees is in the store once
    /// recovery has filed the log, so memory need not hold it.
    pub fn record_hot(&self, record: &IdempotencyRecord, lsn: u64) {
        if record.response.is_some() {
            self.slots
                .remove(&(record.caller.clone(), record.key.clone()));
        } else {
            self.record(record, lsn);
        }
    }

    /// Drops the answer logged at `lsn` under (`caller`, `key`) once the indexer has filed it in
    /// the store; anything else held under the key (a newer claim or answer) stays.
    pub fn forget_filed(&self, caller_and_key: &(String, String), lsn: u64) {
        self.slots.remove_if(
            caller_and_key,
            |_, slot| matches!(slot, Slot::Done { lsn: filed, .. } if *filed == lsn),
        );
    }

    /// The pending key of the cross-shard move `transfer_uuid`, if a request is waiting on it.
    /// Two confirms of one payment can both wait on its reservation: the one with the lowest LSN
    /// is the one whose step finishes it, then by caller and key (a snapshot's keys carry no
    /// LSN, and two keys of one coalesced record share theirs), so recovery answers the same key
    /// whatever order the table holds them in.
    #[must_use]
    pub fn pending_for_transfer(
        &self,
        transfer_uuid: crate::values::ids::Uuid,
    ) -> Option<IdempotencyRecord> {
        self.slots
            .iter()
            .filter_map(|item| match item.value() {
                Slot::Pending { record, lsn, .. }
                    if record.transfer_uuid == Some(transfer_uuid) =>
                {
                    Some((*lsn, record.clone()))
                }
                _ => None,
            })
            .min_by(|(a_lsn, a), (b_lsn, b)| {
                (a_lsn, &a.caller, &a.key).cmp(&(b_lsn, &b.caller, &b.key))
            })
            .map(|(_, record)| record)
    }

    /// Number of keys held.
    #[must_use]
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// True when no key is held.
    #[must_use]
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pending(key: &str, uuid: crate::values::ids::Uuid) -> IdempotencyRecord {
        IdempotencyRecord {
            caller: "customer:1".into(),
            key: key.into(),
            fingerprint: [1; 32],
            at_ms: 1,
            route: 2,
            response: None,
            transfer_uuid: Some(uuid),
        }
    }

    /// Two keys waiting on one move: the one logged first is the one its completion answers,
    /// whichever the table yields first; keys without an LSN (a snapshot's) by caller and key.
    #[test]
    fn the_key_logged_first_is_the_one_a_move_answers() {
        let uuid = crate::values::ids::Uuid([4; 16]);
        for (first, second) in [("a", "z"), ("z", "a")] {
            let table = IdempotencyTable::default();
            table.record(&pending(second, uuid), 20);
            table.record(&pending(first, uuid), 10);
            assert_eq!(table.pending_for_transfer(uuid).unwrap().key, first);
        }
        let table = IdempotencyTable::default();
        table.record(&pending("z", uuid), 0);
        table.record(&pending("m", uuid), 0);
        assert_eq!(table.pending_for_transfer(uuid).unwrap().key, "m");
        let other = crate::values::ids::Uuid([5; 16]);
        assert!(table.pending_for_transfer(other).is_none());
    }
}
