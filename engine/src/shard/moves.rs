//! Cross-shard moves in memory and out of it (issue 14, item 1).
//!
//! A cross-shard transfer leaves an [`OutgoingTransfer`] on its source shard and an
//! [`IncomingTransfer`] on its target; a cross-shard payment step a [`PaymentReservation`] on its
//! source and an [`IncomingPaymentCredit`] or a [`RefusedPaymentCredit`] on its target. A move
//! still `reserved` is in flight: it stays in memory, since recovery finishes it after a crash.
//! A finished one (finalized, released, credited, refused) never changes again; it leaves
//! memory once the indexer has filed it, with the same stamps as the other records
//! ([`Shard::evict_filed`]): the command that finished it queues it in `Shard::moves_touched`.
//!
//! Invariant 5 no longer needs the finished records: [`TransitTotals`] keep, per currency, what
//! finished moves sent and received through the in-transit account, updated in `apply`
//! (deterministic, in the snapshot). The decisions that answer a repeated step from a finished
//! record (a credit, finalize, release or refusal of the same uuid; a charge reserved before)
//! look in memory, then in the store ([`Shard::outgoing_record`] and the others, as
//! `transaction_record` does): a store that cannot be read refuses the command as unavailable.

use std::borrow::Cow;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::commerce::payment::{
    IncomingPaymentCredit, PaymentMoveKind, PaymentReservation, RefusedPaymentCredit,
};
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer, TransferState, TransitTotals};
use crate::shard::cold::unavailable;
use crate::shard::state::{Presence, Shard};
use crate::values::currency::Currency;
use crate::values::error::ApplyError;
use crate::values::error::Rejection;
use crate::values::ids::{Uuid, WalletId};

/// Which record of a move, by its uuid (the transfer's, or the reservation's for a payment step).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash)]
pub enum MoveKey {
    Outgoing(Uuid),
    Incoming(Uuid),
    Reservation(Uuid),
    Credit(Uuid),
    Refusal(Uuid),
}

impl MoveKey {
    /// The first byte of the record's key in the store.
    #[must_use]
    pub fn kind(&self) -> u8 {
        match self {
            Self::Outgoing(_) => 1,
            Self::Incoming(_) => 2,
            Self::Reservation(_) => 3,
            Self::Credit(_) => 4,
            Self::Refusal(_) => 5,
        }
    }

    #[must_use]
    pub fn uuid(&self) -> Uuid {
        match self {
            Self::Outgoing(uuid)
            | Self::Incoming(uuid)
            | Self::Reservation(uuid)
            | Self::Credit(uuid)
            | Self::Refusal(uuid) => *uuid,
        }
    }
}

/// A move's record as the store files it.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub enum MoveRecord {
    Outgoing(OutgoingTransfer),
    Incoming(IncomingTransfer),
    Reservation(PaymentReservation),
    Credit(IncomingPaymentCredit),
    Refusal(RefusedPaymentCredit),
}

/// The refusal a `PaymentCreditRefused` event records (`apply` and the store's filing).
pub(crate) fn refusal_of(event: &crate::shard::event::Event) -> Option<RefusedPaymentCredit> {
    match event {
        crate::shard::event::Event::PaymentCreditRefused {
            reservation_uuid,
            payment_uuid,
            target_wallet_id,
            at_ms,
        } => Some(RefusedPaymentCredit {
            uuid: *reservation_uuid,
            payment_uuid: *payment_uuid,
            target_wallet_id: *target_wallet_id,
            refused_at_ms: *at_ms,
        }),
        _ => None,
    }
}

impl MoveRecord {
    #[must_use]
    pub fn key(&self) -> MoveKey {
        match self {
            Self::Outgoing(r) => MoveKey::Outgoing(r.uuid),
            Self::Incoming(r) => MoveKey::Incoming(r.uuid),
            Self::Reservation(r) => MoveKey::Reservation(r.uuid),
            Self::Credit(r) => MoveKey::Credit(r.uuid),
            Self::Refusal(r) => MoveKey::Refusal(r.uuid),
        }
    }

    /// Whether it can still change (an outgoing transfer or reservation still `reserved`).
    #[must_use]
    pub fn in_flight(&self) -> bool {
        match self {
            Self::Outgoing(r) => r.state == TransferState::Reserved,
            Self::Reservation(r) => r.state == TransferState::Reserved,
            Self::Incoming(_) | Self::Credit(_) | Self::Refusal(_) => false,
        }
    }

    /// Its side of the cross-shard pairing: sent (state, amount) or received amount.
    #[must_use]
    pub fn leg(&self) -> Option<Leg> {
        match self {
            Self::Outgoing(r) => Some(Leg::Sent(r.state, r.amount)),
            Self::Reservation(r) => Some(Leg::Sent(r.state, r.amount)),
            Self::Incoming(r) => Some(Leg::Received(r.amount)),
            Self::Credit(r) => Some(Leg::Received(r.amount)),
            Self::Refusal(_) => None,
        }
    }
}

impl MoveRecord {
    /// What it adds to a shard's [`TransitTotals`]: (the wallet whose shard counts it, currency,
    /// amount, sent or received). Only finished moves that moved money count.
    #[must_use]
    pub fn counted(&self) -> Option<(WalletId, Currency, Decimal, bool)> {
        match self {
            Self::Outgoing(r) if r.state == TransferState::Finalized => {
                Some((r.source_wallet_id, r.currency, r.amount, true))
            }
            Self::Reservation(r) if r.state == TransferState::Finalized => {
                Some((r.source_wallet_id, r.currency, r.amount, true))
            }
            Self::Incoming(r) => Some((r.target_wallet_id, r.currency, r.amount, false)),
            Self::Credit(r) => Some((r.target_wallet_id, r.currency, r.amount, false)),
            _ => None,
        }
    }
}

/// One side of a cross-shard move.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Leg {
    Sent(TransferState, Decimal),
    Received(Decimal),
}

/// A filed record of the kind `key` names, or a store that holds something else there.
macro_rules! filed_as {
    ($shard:expr, $hot:expr, $key:expr, $variant:ident) => {
        $shard.hot_or_filed($hot, |store| match store.moved($key)? {
            None => Ok(None),
            Some(MoveRecord::$variant(record)) => Ok(Some(record)),
            Some(other) => Err(format!("{:?} holds a {:?}", $key, other.key())),
        })
    };
}

impl Shard {
    /// Outgoing transfer `uuid`, from memory (in flight, or finished and not yet filed) or the
    /// store.
    pub fn outgoing_record(
        &self,
        uuid: Uuid,
    ) -> Result<Option<Cow<'_, OutgoingTransfer>>, Rejection> {
        filed_as!(
            self,
            self.transfers_out.get(&uuid),
            MoveKey::Outgoing(uuid),
            Outgoing
        )
    }

    /// Incoming transfer `uuid`, from memory or the store.
    pub fn incoming_record(
        &self,
        uuid: Uuid,
    ) -> Result<Option<Cow<'_, IncomingTransfer>>, Rejection> {
        filed_as!(
            self,
            self.transfers_in.get(&uuid),
            MoveKey::Incoming(uuid),
            Incoming
        )
    }

    /// Payment reservation `uuid`, from memory or the store.
    pub fn reservation_record(
        &self,
        uuid: Uuid,
    ) -> Result<Option<Cow<'_, PaymentReservation>>, Rejection> {
        filed_as!(
            self,
            self.commerce.reservations.get(&uuid),
            MoveKey::Reservation(uuid),
            Reservation
        )
    }

    /// Payment credit `uuid` (by reservation uuid), from memory or the store.
    pub fn credit_record(
        &self,
        uuid: Uuid,
    ) -> Result<Option<Cow<'_, IncomingPaymentCredit>>, Rejection> {
        filed_as!(
            self,
            self.commerce.credits.get(&uuid),
            MoveKey::Credit(uuid),
            Credit
        )
    }

    /// The refusal of payment credit `uuid`, from memory or the store.
    pub fn refusal_record(
        &self,
        uuid: Uuid,
    ) -> Result<Option<Cow<'_, RefusedPaymentCredit>>, Rejection> {
        filed_as!(
            self,
            self.commerce.refused_credits.get(&uuid),
            MoveKey::Refusal(uuid),
            Refusal
        )
    }

    /// The charge reservation of a payment that is not released (reserved or finalized), from
    /// memory or the store. Memory's version of a reservation wins: one released and not filed
    /// yet is still open in the store.
    pub fn open_charge_record(
        &self,
        payment_uuid: Uuid,
    ) -> Result<Option<Cow<'_, PaymentReservation>>, Rejection> {
        if let Some(uuid) = self.index.commerce.open_charges.get(&payment_uuid) {
            return self.reservation_record(*uuid);
        }
        let Some(store) = self.recall.store() else {
            return Ok(None);
        };
        let Some(uuid) = store
            .open_charge(payment_uuid)
            .map_err(|e| unavailable(&e))?
        else {
            return Ok(None);
        };
        Ok(self.reservation_record(uuid)?.filter(|reservation| {
            reservation.kind == PaymentMoveKind::Charge
                && reservation.state != TransferState::Released
        }))
    }

    /// Whether outgoing transfer `uuid` is this shard's, in memory or filed (see
    /// [`Presence`]).
    #[must_use]
    pub fn holds_outgoing(&self, uuid: Uuid) -> Presence {
        Presence::of(
            self.outgoing_record(uuid)
                .map(|found| found.filter(|transfer| self.owns(transfer.source_wallet_id))),
        )
    }

    /// Whether payment reservation `uuid` is this shard's (see [`Shard::holds_outgoing`]).
    #[must_use]
    pub fn holds_reservation(&self, uuid: Uuid) -> Presence {
        Presence::of(
            self.reservation_record(uuid)
                .map(|found| found.filter(|reservation| self.owns(reservation.source_wallet_id))),
        )
    }

    // ----- in apply -----

    /// Counts a finished move in its currency's totals: `sent` when an outgoing move is
    /// finalized, `received` when an incoming one is credited.
    pub(crate) fn count_transit(
        &mut self,
        currency: Currency,
        amount: Decimal,
        sent: bool,
    ) -> Result<(), ApplyError> {
        let totals = self.transit.entry(currency).or_default();
        let total = if sent {
            &mut totals.sent
        } else {
            &mut totals.received
        };
        *total = total
            .checked_add(amount)
            .ok_or(ApplyError::new("in-transit total overflows", 0))?;
        Ok(())
    }

    /// After a move was settled (finalized or released) in apply: counts what a finalized one
    /// sent, and lets it leave memory once filed.
    pub(crate) fn settled_move(
        &mut self,
        key: MoveKey,
        state: TransferState,
        (currency, amount): (Currency, Decimal),
    ) -> Result<(), ApplyError> {
        if state == TransferState::Finalized {
            self.count_transit(currency, amount, true)?;
        }
        self.finish_move(key);
        Ok(())
    }

    /// Notes that the current command finished a move: it leaves memory once that command is
    /// filed (never in `Recall::Keep`).
    pub(crate) fn finish_move(&mut self, key: MoveKey) {
        if self.recall.evicts() {
            self.moves_touched.push_back((self.stamp, key));
        }
    }

    /// Per currency, what finished moves sent and received through the in-transit account.
    #[must_use]
    pub fn transit_totals(&self) -> &std::collections::BTreeMap<Currency, TransitTotals> {
        &self.transit
    }

    // ----- eviction -----

    /// Drops the finished moves whose finishing command is filed (stamped at or before `filed`).
    pub(crate) fn evict_filed_moves(&mut self, filed: u64) -> usize {
        let mut gone = 0;
        while let Some(&(stamp, key)) = self.moves_touched.front() {
            if stamp > filed {
                break;
            }
            self.moves_touched.pop_front();
            gone += usize::from(self.drop_finished(key));
        }
        gone
    }

    /// Drops every finished move (after recovery, or a loaded snapshot in replay).
    pub(crate) fn evict_all_moves(&mut self) -> usize {
        self.moves_touched.clear();
        let before = self.moves_in_memory();
        self.transfers_out
            .retain(|_, transfer| transfer.state == TransferState::Reserved);
        self.transfers_in.clear();
        self.commerce
            .reservations
            .retain(|_, reservation| reservation.state == TransferState::Reserved);
        self.commerce.credits.clear();
        self.commerce.refused_credits.clear();
        let reservations = &self.commerce.reservations;
        self.index
            .commerce
            .open_charges
            .retain(|_, uuid| reservations.contains_key(uuid));
        before - self.moves_in_memory()
    }

    /// Drops one finished move; false if it is not in memory or still in flight.
    fn drop_finished(&mut self, key: MoveKey) -> bool {
        let uuid = key.uuid();
        match key {
            MoveKey::Outgoing(_) => self
                .transfers_out
                .remove(&uuid)
                .map(|transfer| {
                    if transfer.state == TransferState::Reserved {
                        self.transfers_out.insert(uuid, transfer);
                        return false;
                    }
                    true
                })
                .unwrap_or(false),
            MoveKey::Reservation(_) => {
                let Some(reservation) = self.commerce.reservations.remove(&uuid) else {
                    return false;
                };
                if reservation.state == TransferState::Reserved {
                    self.commerce.reservations.insert(uuid, reservation);
                    return false;
                }
                let open = &mut self.index.commerce.open_charges;
                if open.get(&reservation.payment_uuid) == Some(&uuid) {
                    open.remove(&reservation.payment_uuid);
                }
                true
            }
            MoveKey::Incoming(_) => self.transfers_in.remove(&uuid).is_some(),
            MoveKey::Credit(_) => self.commerce.credits.remove(&uuid).is_some(),
            MoveKey::Refusal(_) => self.commerce.refused_credits.remove(&uuid).is_some(),
        }
    }

    /// Cross-shard move records in memory: those in flight and those finished but not yet filed.
    #[must_use]
    pub fn moves_in_memory(&self) -> usize {
        self.transfers_out.len()
            + self.transfers_in.len()
            + self.commerce.reservations.len()
            + self.commerce.credits.len()
            + self.commerce.refused_credits.len()
    }

    /// Every move record in memory, for the store (an older snapshot's finished moves) and
    /// `replay --verify`.
    #[must_use]
    pub fn move_records(&self) -> Vec<MoveRecord> {
        let mut records = Vec::with_capacity(self.moves_in_memory());
        records.extend(
            self.transfers_out
                .values()
                .cloned()
                .map(MoveRecord::Outgoing),
        );
        records.extend(
            self.transfers_in
                .values()
                .cloned()
                .map(MoveRecord::Incoming),
        );
        records.extend(
            self.commerce
                .reservations
                .values()
                .cloned()
                .map(MoveRecord::Reservation),
        );
        records.extend(
            self.commerce
                .credits
                .values()
                .cloned()
                .map(MoveRecord::Credit),
        );
        records.extend(
            self.commerce
                .refused_credits
                .values()
                .cloned()
                .map(MoveRecord::Refusal),
        );
        records
    }

    /// Totals derived from the finished records in memory (a snapshot older than format 5,
    /// which carries every record, and the check of a shard that keeps them all).
    pub(crate) fn transit_from_records(
        &self,
    ) -> Option<std::collections::BTreeMap<Currency, TransitTotals>> {
        let mut totals: std::collections::BTreeMap<Currency, TransitTotals> =
            std::collections::BTreeMap::new();
        let mut add = |currency: Currency, amount: Decimal, sent: bool| -> Option<()> {
            let entry = totals.entry(currency).or_default();
            let total = if sent {
                &mut entry.sent
            } else {
                &mut entry.received
            };
            *total = total.checked_add(amount)?;
            Some(())
        };
        for transfer in self.transfers_out.values() {
            if transfer.state == TransferState::Finalized {
                add(transfer.currency, transfer.amount, true)?;
            }
        }
        for reservation in self.commerce.reservations.values() {
            if reservation.state == TransferState::Finalized {
                add(reservation.currency, reservation.amount, true)?;
            }
        }
        for transfer in self.transfers_in.values() {
            add(transfer.currency, transfer.amount, false)?;
        }
        for credit in self.commerce.credits.values() {
            add(credit.currency, credit.amount, false)?;
        }
        Some(totals)
    }
}
