//! The commerce state of a shard: payments, links, QR payloads, payouts, settlements and the
//! cross-shard payment records, with their id sequences; and the lookup indexes derived from them.
//!
//! Records are serialised in snapshots (every map is a `BTreeMap`, so the bytes are canonical);
//! [`CommerceIndex`] is rebuilt from them on load ([`CommerceIndex::build`]) and never serialised.

use std::collections::{BTreeMap, HashMap};

use serde::{Deserialize, Serialize};

use crate::commerce::payment::{
    IncomingPaymentCredit, Payment, PaymentLink, PaymentMoveKind, PaymentReservation, QrCode,
    RefusedPaymentCredit,
};
use crate::commerce::payout::{Payout, Settlement};
use crate::ledger::transfer::TransferState;
use crate::values::ids::{HoldId, PayoutId, SettlementId, TransactionId, Uuid};

/// Commerce records and sequences (one per record kind; ids follow the shard formula in `ids`).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct Commerce {
    pub(crate) next_payment_seq: u64,
    pub(crate) next_link_seq: u64,
    pub(crate) next_qr_seq: u64,
    pub(crate) next_payout_seq: u64,
    pub(crate) next_settlement_seq: u64,
    /// The payments in memory: pending ones, and final ones until their latest change is filed
    /// (in a shard with a store; see `Shard::evict_filed`). The store holds every one.
    pub(crate) payments: BTreeMap<Uuid, Payment>,
    pub(crate) links: BTreeMap<Uuid, PaymentLink>,
    pub(crate) qrs: BTreeMap<Uuid, QrCode>,
    /// The payouts in memory: open ones, and final ones until their latest change is filed.
    pub(crate) payouts: BTreeMap<PayoutId, Payout>,
    pub(crate) settlements: BTreeMap<SettlementId, Settlement>,
    /// Cross-shard payment steps this shard is the source of, by reservation uuid.
    pub(crate) reservations: BTreeMap<Uuid, PaymentReservation>,
    /// Cross-shard payment steps this shard credited, by reservation uuid.
    pub(crate) credits: BTreeMap<Uuid, IncomingPaymentCredit>,
    /// Cross-shard payment steps this shard refused to credit, by reservation uuid. Serialised
    /// after the rest of the snapshot (format version 3), hence skipped here.
    #[serde(skip)]
    pub(crate) refused_credits: BTreeMap<Uuid, RefusedPaymentCredit>,
}

impl Commerce {
    pub(crate) fn new() -> Self {
        Self {
            next_payment_seq: 1,
            next_link_seq: 1,
            next_qr_seq: 1,
            next_payout_seq: 1,
            next_settlement_seq: 1,
            payments: BTreeMap::new(),
            links: BTreeMap::new(),
            qrs: BTreeMap::new(),
            payouts: BTreeMap::new(),
            settlements: BTreeMap::new(),
            reservations: BTreeMap::new(),
            credits: BTreeMap::new(),
            refused_credits: BTreeMap::new(),
        }
    }
}

/// Lookups derived from [`Commerce`] (hash maps: lookup only, never iterated for state).
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct CommerceIndex {
    /// Merchant credit transactions claimed by a live (not rejected/cancelled) settlement.
    pub(crate) settled: HashMap<TransactionId, SettlementId>,
    /// Charge reservations not released, by payment uuid (at most one per payment).
    pub(crate) open_charges: HashMap<Uuid, Uuid>,
    /// Holds that belong to a payout (only the payout's life cycle closes them).
    pub(crate) payout_holds: HashMap<HoldId, PayoutId>,
}

impl CommerceIndex {
    /// Rebuilds the index from the records; refuses records that break its uniqueness rules.
    pub(crate) fn build(commerce: &Commerce) -> Result<Self, &'static str> {
        let mut index = Self::default();
        for settlement in commerce.settlements.values() {
            if !settlement.status.claims_items() {
                continue;
            }
            for item in &settlement.items {
                if index
                    .settled
                    .insert(item.transaction_id, settlement.id)
                    .is_some()
                {
                    return Err("a transaction is in two live settlements");
                }
            }
        }
        for reservation in commerce.reservations.values() {
            if reservation.kind == PaymentMoveKind::Charge
                && reservation.state != TransferState::Released
                && index
                    .open_charges
                    .insert(reservation.payment_uuid, reservation.uuid)
                    .is_some()
            {
                return Err("two open charge reservations for one payment");
            }
        }
        for payout in commerce.payouts.values() {
            if index
                .payout_holds
                .insert(payout.hold_id, payout.id)
                .is_some()
            {
                return Err("two payouts share a hold");
            }
        }
        Ok(index)
    }
}
