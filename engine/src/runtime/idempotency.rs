//! The idempotency table: (caller, key) -> what was asked and what was answered.
//!
//! Entries are born in two ways. A live request claims its key first ([`IdempotencyTable::begin`]):
//! the slot is `InFlight` in memory only, so a concurrent retry is told so. The command then runs
//! on its shard, which writes the key, fingerprint and rendered answer *in the same WAL record* as
//! the command's events and, in the same step, stores the answer here tagged with that record's
//! LSN. An answer whose LSN is above the log's durable LSN still counts as in flight, so nobody is
//! shown it early, and snapshots take only durable answers. Replay rebuilds answers from the log,
//! so they survive restarts. A crash before the record is durable leaves nothing: the command did
//! not happen, and a retry runs it.
//!
//! Keys are kept at least [`RETENTION_MS`] (24 h) after their answer; snapshots drop older ones.

use dashmap::mapref::entry::Entry;
use dashmap::DashMap;

use super::journal::IdempotencyRecord;

/// How long an answered key is kept, at least.
pub const RETENTION_MS: i64 = 24 * 60 * 60 * 1000;

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
        /// The pending record this answer replaced, with its LSN. Kept so that a snapshot
        /// taken before the answer is durable still carries the key (as pending): otherwise a
        /// crash that loses the answer would leave the key unknown, and a retry would run the
        /// transfer again.
        replaced: Option<(u64, IdempotencyRecord)>,
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
        self.begin_matching(caller, key, fingerprint, None, durable_lsn)
    }

    /// [`IdempotencyTable::begin`], where a stored key also matches `legacy` (the fingerprint
    /// the previous release computed for the same request, see
    /// [`super::IdempotencyKey::legacy_fingerprint`]).
    pub fn begin_matching(
        &self,
        caller: &str,
        key: &str,
        fingerprint: [u8; 32],
        legacy: Option<[u8; 32]>,
        durable_lsn: u64,
    ) -> Begin {
        let same = |stored: &[u8; 32]| *stored == fingerprint || legacy.as_ref() == Some(stored);
        match self.slots.entry((caller.to_owned(), key.to_owned())) {
            Entry::Vacant(vacant) => {
                vacant.insert(Slot::InFlight { fingerprint });
                Begin::Fresh
            }
            Entry::Occupied(occupied) => match occupied.get() {
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
                replaced: match self.slots.get(&id).as_deref() {
                    Some(Slot::Pending { lsn, record, .. }) => Some((*lsn, record.clone())),
                    _ => None,
                },
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

    /// Durable answers (LSN ≤ `durable_lsn`) newer than `cutoff_ms`, for a snapshot, sorted so
    /// snapshots are canonical.
    #[must_use]
    pub fn durable_records(&self, cutoff_ms: i64, durable_lsn: u64) -> Vec<IdempotencyRecord> {
        let mut records: Vec<IdempotencyRecord> = self
            .slots
            .iter()
            .filter_map(|item| {
                let (caller, key) = item.key();
                match item.value() {
                    Slot::Done {
                        fingerprint,
                        at_ms,
                        lsn,
                        response,
                        ..
                    } if *at_ms >= cutoff_ms && *lsn <= durable_lsn => Some(IdempotencyRecord {
                        caller: caller.clone(),
                        key: key.clone(),
                        fingerprint: *fingerprint,
                        at_ms: *at_ms,
                        route: 0,
                        response: Some(response.clone()),
                        transfer_uuid: None,
                    }),
                    Slot::Pending { lsn, record, .. } if *lsn <= durable_lsn => {
                        Some(record.clone())
                    }
                    // Answered, but the answer is not durable yet: keep the durable pending key.
                    Slot::Done {
                        replaced: Some((pending_lsn, record)),
                        lsn,
                        ..
                    } if *lsn > durable_lsn && *pending_lsn <= durable_lsn => Some(record.clone()),
                    _ => None,
                }
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

    /// The pending key of the cross-shard transfer `transfer_uuid`, if a request is waiting on it.
    #[must_use]
    pub fn pending_for_transfer(
        &self,
        transfer_uuid: crate::values::ids::Uuid,
    ) -> Option<IdempotencyRecord> {
        self.slots.iter().find_map(|item| match item.value() {
            Slot::Pending { record, .. } if record.transfer_uuid == Some(transfer_uuid) => {
                Some(record.clone())
            }
            _ => None,
        })
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
