//! Finished cross-shard moves in the history store (issue 14, item 1; `shard::moves`).
//!
//! ```text
//! moves   kind (1 outgoing transfer, 2 incoming transfer, 3 payment reservation,
//!         4 payment credit, 5 refused payment credit) | uuid   -> MoveRecord
//! moves   6 | payment uuid                                     -> reservation uuid: the
//!         payment's charge reservation that is not released (a repeated reserve answers it)
//! meta    "moves_since"                                        -> u64: first LSN whose moves
//!         are filed (0: all; absent: a store written before moves were filed)
//! ```
//!
//! Filing mirrors `apply`: a reserve files the record `reserved`, a finalize or release settles
//! it through the same `settle_move`, a credit or refusal files its final record. A shard drops a
//! finished record from memory only once this is filed, and its decisions read it back from here.
//!
//! A store written before moves were filed lacks those of the records it covers: recovery files
//! the moves of the records it replays below the store's LSN (moves only) and those an older
//! snapshot carried (every move, format 4 and before) before the engine serves, then marks the
//! store complete. Those refilings may meet a newer version of the record: a reserve files only
//! a record that is absent then, and a settle of a record already settled the same way changes
//! nothing.

use std::collections::HashMap;

use super::store::{decode, encode, numbers, HistoryStore, Open, StoreError};
use super::writes::Writes;
use crate::commerce::payment::PaymentMoveKind;
use crate::ledger::transfer::{settle_move, TransferState};
use crate::shard::event::Event;
use crate::shard::moves::{refusal_of, MoveKey, MoveRecord};
use crate::values::ids::Uuid;

pub(crate) const MOVES_SINCE: &[u8] = b"moves_since";

/// Key byte of a payment's open charge.
const OPEN_CHARGE: u8 = 6;

fn key_of(kind: u8, uuid: Uuid) -> [u8; 17] {
    let mut key = [0u8; 17];
    key[0] = kind;
    key[1..].copy_from_slice(&uuid.0);
    key
}

pub(crate) fn move_key(key: MoveKey) -> [u8; 17] {
    key_of(key.kind(), key.uuid())
}

/// The move records a batch wrote, read before the keyspace (a batch cannot read its writes).
#[derive(Default)]
pub(crate) struct MoveOverlay {
    written: HashMap<[u8; 17], fjall::Slice>,
}

impl MoveOverlay {
    fn load(&self, open: &Open, key: MoveKey) -> Result<Option<MoveRecord>, StoreError> {
        let bytes = move_key(key);
        if let Some(value) = self.written.get(&bytes) {
            return decode("move", &bytes, value).map(Some);
        }
        open.moves
            .get(bytes)?
            .map(|value| decode("move", &bytes, &value))
            .transpose()
    }

    fn put(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        record: &MoveRecord,
    ) -> Result<(), StoreError> {
        let key = move_key(record.key());
        let bytes = fjall::Slice::from(encode(record)?);
        writes.insert(&open.moves, key, bytes.clone());
        self.written.insert(key, bytes);
        Ok(())
    }

    /// Files one event's change to a move, if it is one. `refiling`: the store may already hold
    /// a newer version (see the module docs), so a reserve files only an absent record.
    pub(crate) fn file(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        event: &Event,
        refiling: bool,
    ) -> Result<(), StoreError> {
        match event {
            Event::TransferReserved(transfer) => {
                let record = MoveRecord::Outgoing(transfer.clone());
                self.reserve(open, writes, &record, refiling)?;
            }
            Event::PaymentReserved(reservation) => {
                let record = MoveRecord::Reservation((**reservation).clone());
                if self.reserve(open, writes, &record, refiling)?
                    && reservation.kind == PaymentMoveKind::Charge
                {
                    writes.insert(
                        &open.moves,
                        key_of(OPEN_CHARGE, reservation.payment_uuid),
                        reservation.uuid.0.to_vec(),
                    );
                }
            }
            Event::TransferCredited(transfer) => {
                self.put(open, writes, &MoveRecord::Incoming(transfer.clone()))?;
            }
            Event::PaymentCredited(credit) => {
                self.put(open, writes, &MoveRecord::Credit((**credit).clone()))?;
            }
            refused @ Event::PaymentCreditRefused { .. } => {
                if let Some(refusal) = refusal_of(refused) {
                    self.put(open, writes, &MoveRecord::Refusal(refusal))?;
                }
            }
            other => {
                if let Some((key, to, at_ms)) = settlement_of(other) {
                    self.settle(open, writes, key, to, at_ms)?;
                }
            }
        }
        Ok(())
    }

    /// Files a new `reserved` record; false if refiling found one there already.
    fn reserve(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        record: &MoveRecord,
        refiling: bool,
    ) -> Result<bool, StoreError> {
        if refiling && self.load(open, record.key())?.is_some() {
            return Ok(false);
        }
        self.put(open, writes, record)?;
        Ok(true)
    }

    fn settle(
        &mut self,
        open: &Open,
        writes: &mut Writes,
        key: MoveKey,
        to: TransferState,
        at_ms: i64,
    ) -> Result<(), StoreError> {
        let missing = || StoreError::Missing {
            what: "cross-shard move",
            key: format!("{key:?}"),
        };
        let mut record = self.load(open, key)?.ok_or_else(missing)?;
        let (state, settled_at_ms, charge) = match &mut record {
            MoveRecord::Outgoing(transfer) => {
                (&mut transfer.state, &mut transfer.settled_at_ms, None)
            }
            MoveRecord::Reservation(reservation) => (
                &mut reservation.state,
                &mut reservation.settled_at_ms,
                (reservation.kind == PaymentMoveKind::Charge).then_some(reservation.payment_uuid),
            ),
            _ => return Err(missing()),
        };
        if *state == to && *settled_at_ms == Some(at_ms) {
            return Ok(()); // refiled: settled so already
        }
        settle_move((state, settled_at_ms), to, at_ms)
            .map_err(|reason| StoreError::Rule(format!("{key:?}: {reason}")))?;
        if let (TransferState::Released, Some(payment_uuid)) = (to, charge) {
            writes.remove(&open.moves, key_of(OPEN_CHARGE, payment_uuid));
        }
        self.put(open, writes, &record)
    }
}

/// The move a finalize or release settles, how, and when.
fn settlement_of(event: &Event) -> Option<(MoveKey, TransferState, i64)> {
    use TransferState::{Finalized, Released};
    Some(match event {
        Event::TransferFinalized {
            transfer_uuid,
            at_ms,
        } => (MoveKey::Outgoing(*transfer_uuid), Finalized, *at_ms),
        Event::TransferReleased {
            transfer_uuid,
            at_ms,
        } => (MoveKey::Outgoing(*transfer_uuid), Released, *at_ms),
        Event::PaymentReserveFinalized {
            reservation_uuid,
            at_ms,
        } => (MoveKey::Reservation(*reservation_uuid), Finalized, *at_ms),
        Event::PaymentReserveReleased {
            reservation_uuid,
            at_ms,
        } => (MoveKey::Reservation(*reservation_uuid), Released, *at_ms),
        _ => return None,
    })
}

/// Whether an event changes a cross-shard move (what a store without moves must refile).
pub(crate) fn is_move_event(event: &Event) -> bool {
    matches!(
        event,
        Event::TransferReserved(_)
            | Event::TransferCredited(_)
            | Event::TransferFinalized { .. }
            | Event::TransferReleased { .. }
            | Event::PaymentReserved(_)
            | Event::PaymentCredited(_)
            | Event::PaymentCreditRefused { .. }
            | Event::PaymentReserveFinalized { .. }
            | Event::PaymentReserveReleased { .. }
    )
}

impl HistoryStore {
    /// A filed move record.
    pub fn moved(&self, key: MoveKey) -> Result<Option<MoveRecord>, StoreError> {
        self.with(|open| MoveOverlay::default().load(open, key))
    }

    /// Both sides of move `uuid` as filed (for the pairing check across shards).
    pub fn filed_legs(
        &self,
        uuid: Uuid,
    ) -> Result<crate::shard::commerce::invariants::FiledLegs, StoreError> {
        let mut legs = (None, None);
        for key in [
            MoveKey::Outgoing(uuid),
            MoveKey::Reservation(uuid),
            MoveKey::Incoming(uuid),
            MoveKey::Credit(uuid),
        ] {
            match self.moved(key)?.as_ref().and_then(MoveRecord::leg) {
                Some(crate::shard::moves::Leg::Sent(state, amount)) => {
                    legs.0 = Some((state, amount));
                }
                Some(crate::shard::moves::Leg::Received(amount)) => legs.1 = Some(amount),
                None => {}
            }
        }
        Ok(legs)
    }

    /// The reservation uuid of a payment's charge not released, as filed.
    pub fn open_charge(&self, payment_uuid: Uuid) -> Result<Option<Uuid>, StoreError> {
        self.with(|open| {
            let key = key_of(OPEN_CHARGE, payment_uuid);
            match open.moves.get(key)? {
                None => Ok(None),
                Some(bytes) => {
                    let mut uuid = [0u8; 16];
                    if bytes.len() != 16 {
                        return Err(StoreError::Corrupt {
                            what: "open charge",
                            key: hex::encode(key),
                            reason: format!("{} bytes where 16 were expected", bytes.len()),
                        });
                    }
                    uuid.copy_from_slice(&bytes);
                    Ok(Some(Uuid(uuid)))
                }
            }
        })
    }

    /// Visits every filed move record, in key order (`replay --verify`).
    pub fn for_each_move(&self, visit: &mut dyn FnMut(MoveRecord)) -> Result<u64, StoreError> {
        self.with(|open| {
            let mut count = 0;
            for guard in open
                .moves
                .range(key_of(1, Uuid([0; 16]))..key_of(OPEN_CHARGE, Uuid([0; 16])))
            {
                let (key, bytes) = guard.into_inner()?;
                visit(decode("move", &key, &bytes)?);
                count += 1;
            }
            Ok(count)
        })
    }

    /// Files the moves an older snapshot carried (format 4 and before: every one), each only if
    /// the store has none under its key (the store's may be newer). One write batch.
    pub(crate) fn file_snapshot_moves(&self, records: &[MoveRecord]) -> Result<(), StoreError> {
        if records.is_empty() {
            return Ok(());
        }
        self.with_move_batch(|open, writes, overlay| {
            for record in records {
                if overlay.load(open, record.key())?.is_some() {
                    continue;
                }
                overlay.put(open, writes, record)?;
                if let MoveRecord::Reservation(reservation) = record {
                    if reservation.kind == PaymentMoveKind::Charge
                        && reservation.state != TransferState::Released
                    {
                        writes.insert(
                            &open.moves,
                            key_of(OPEN_CHARGE, reservation.payment_uuid),
                            reservation.uuid.0.to_vec(),
                        );
                    }
                }
            }
            Ok(())
        })
    }

    /// One write batch of move records, committed if `work` succeeds.
    fn with_move_batch(
        &self,
        work: impl FnOnce(&Open, &mut Writes, &mut MoveOverlay) -> Result<(), StoreError>,
    ) -> Result<(), StoreError> {
        self.with(|open| {
            let mut writes = Writes::new(&open.db);
            work(open, &mut writes, &mut MoveOverlay::default())?;
            writes.commit()?;
            Ok(())
        })
    }

    /// Files the moves of records the store covers but filed without them (see the module
    /// docs), in LSN order, without moving `indexed_lsn`. One write batch.
    pub(crate) fn refile_moves(&self, events: &[Event]) -> Result<(), StoreError> {
        if events.is_empty() {
            return Ok(());
        }
        self.with_move_batch(|open, writes, overlay| {
            events
                .iter()
                .try_for_each(|event| overlay.file(open, writes, event, true))
        })
    }

    /// The first LSN whose moves the store holds; `None` for a store written before moves were
    /// filed.
    pub(crate) fn moves_since(&self) -> Result<Option<u64>, StoreError> {
        self.with(|open| match open.meta.get(MOVES_SINCE)? {
            Some(bytes) => Ok(Some(numbers::<1>("moves_since", &bytes)?[0])),
            None => Ok(None),
        })
    }

    pub(crate) fn set_moves_since(&self, lsn: u64) -> Result<(), StoreError> {
        self.with(|open| Ok(open.meta.insert(MOVES_SINCE, lsn.to_be_bytes())?))
    }
}

#[cfg(test)]
mod tests {
    use rust_decimal::Decimal;

    use super::*;
    use crate::ledger::transfer::OutgoingTransfer;
    use crate::values::currency::Currency;
    use crate::values::ids::{TransactionId, WalletId};

    fn reserved(uuid: u8) -> OutgoingTransfer {
        OutgoingTransfer {
            uuid: Uuid([uuid; 16]),
            source_wallet_id: WalletId(2),
            target_wallet_id: WalletId(3),
            amount: Decimal::from(5),
            currency: Currency::from_code("YER").unwrap(),
            transaction_id: TransactionId(4),
            state: TransferState::Reserved,
            description: None,
            reserved_at_ms: 10,
            settled_at_ms: None,
        }
    }

    fn refile(store: &HistoryStore, events: &[Event]) -> Result<(), StoreError> {
        store.refile_moves(events)
    }

    /// Refiling (an older store's upgrade) may meet a newer version of a move: a snapshot's
    /// move is filed only where the store has none, a refiled reserve never replaces a record,
    /// and a settle of a record settled the same way changes nothing; another settle is refused.
    #[test]
    fn refiling_keeps_the_newer_version_of_a_move() {
        let dir = tempfile::tempdir().unwrap();
        let store = HistoryStore::open(dir.path(), 1 << 20).unwrap();
        let mut finalized = reserved(1);
        finalized.state = TransferState::Finalized;
        finalized.settled_at_ms = Some(20);
        let key = MoveKey::Outgoing(finalized.uuid);
        store
            .file_snapshot_moves(&[MoveRecord::Outgoing(finalized.clone())])
            .unwrap();
        // An older snapshot's version does not replace it.
        store
            .file_snapshot_moves(&[MoveRecord::Outgoing(reserved(1))])
            .unwrap();
        let expected = Some(MoveRecord::Outgoing(finalized.clone()));
        assert_eq!(store.moved(key).unwrap(), expected);
        let finalize = |at_ms| Event::TransferFinalized {
            transfer_uuid: finalized.uuid,
            at_ms,
        };
        refile(
            &store,
            &[Event::TransferReserved(reserved(1)), finalize(20)],
        )
        .unwrap();
        assert_eq!(store.moved(key).unwrap(), expected);
        // A settle that disagrees with the filed one is a broken rule, not silently kept.
        assert!(refile(&store, &[finalize(21)]).is_err());
        let release = Event::TransferReleased {
            transfer_uuid: finalized.uuid,
            at_ms: 20,
        };
        assert!(refile(&store, &[release]).is_err());
        assert_eq!(store.moved(key).unwrap(), expected);
        // A new move is filed, and settled within the same batch through the overlay.
        refile(
            &store,
            &[
                Event::TransferReserved(reserved(2)),
                Event::TransferReleased {
                    transfer_uuid: Uuid([2; 16]),
                    at_ms: 30,
                },
            ],
        )
        .unwrap();
        let Some(MoveRecord::Outgoing(second)) =
            store.moved(MoveKey::Outgoing(Uuid([2; 16]))).unwrap()
        else {
            panic!()
        };
        assert_eq!(
            (second.state, second.settled_at_ms),
            (TransferState::Released, Some(30))
        );
        assert_eq!(store.for_each_move(&mut |_| {}).unwrap(), 2);
    }
}
