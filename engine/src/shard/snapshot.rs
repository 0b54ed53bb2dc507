//! Snapshots and the state digest.
//!
//! # Snapshot format
//!
//! ```text
//! byte 0     SNAPSHOT_FORMAT_VERSION (7; 1 to 6 are still read)
//! bytes 1..  postcard encoding of: shard index and count, the four next-sequence numbers,
//!            the wallets in id order (each with its history), outgoing transfers and incoming
//!            transfers in uuid order, then (version 2) the commerce state: its five next-sequence
//!            numbers (payment, link, QR, payout, settlement), payments, links and QR payloads in
//!            uuid order, payouts and settlements in id order, payment reservations and incoming
//!            payment credits in uuid order, then (version 3) the refused payment credits in
//!            uuid order, then (version 5) the in-transit totals of finished cross-shard moves
//!            in currency order, then (version 6) the shard's uuid key, if chosen, then
//!            (version 7) the atomic transfer batches prepared and not closed, in uuid order,
//!            then (version 8) the latest time an entry was posted at (`i64`)
//! ```
//!
//! Version 8 added the posting floor (`Shard::posted_at_floor_ms`): no entry is stamped
//! earlier than one before it on the shard, and a restart must keep that true. Versions 1 to 7
//! load with none known (`i64::MIN`); entries logged by builds before the floor carry a record
//! format that says so (`runtime::journal`), and the history store keeps a date index of those.
//!
//! Version 7 added the open atomic batches (`runtime::atomic_batch`): their transfers are
//! settled by the batch as a whole, so a restart from the snapshot must know them. Versions 1
//! to 6 load with none (nothing before version 7 prepared one).
//!
//! Version 6 added the uuid key (`values::sealed`): the log that chose it may be retired once
//! a snapshot covers it, and without it the shard's sealed uuids would not open. Versions 1 to
//! 5 load without one (nothing before version 6 sealed a uuid).
//!
//! Version 5 added the totals: the cross-shard moves it carries are the ones in memory (in
//! flight; a replayed shard keeps no finished one, see `shard::moves`). Versions 1 to 4 carry
//! every move, and load with totals derived from their finished ones.
//!
//! Version 4 changed only the wallet's history: besides its meta and chain head it carries the
//! hash of the entry before the first one held, the wallet's all-time record counts, and only
//! the records in memory (a running shard's hot ones; a replayed shard keeps active holds only,
//! see `shard::cold`). So a snapshot's size no longer grows with history. Versions 1 to 3 carry
//! every record and load as a whole history (counts from the records).
//!
//! A version 1 snapshot is the same without the commerce state; it loads with an empty one. A
//! version 2 snapshot loads with no refused credits.
//!
//! Only records are written; the indexes (owners, uuids, hold expiry, settled transactions, open
//! charges, payout holds) are rebuilt on load, which also validates the records: ids in their
//! positions and sequences, no duplicate owner key or uuid, commerce records keyed by their own
//! uuid or id and minted by this shard, no transaction in two live settlements.
//! The WAL crate wraps these bytes in its own header and checksum.
//!
//! # Digest
//!
//! [`Shard::state_digest`] is SHA-256 over exactly the bytes [`Shard::snapshot_bytes`] would produce
//! with the posting floor unknown (`i64::MIN`), streamed into the hasher without building them:
//! the floor bounds the next posting's time and is not ledger state, and `walletd replay
//! --from-archive --verify` compares a shard rebuilt from the first record (which knows it
//! exactly) with one restarted from a snapshot older than format 8 (which knows it only from
//! the entries since). Everything serialised is in a canonical order
//! (vectors in id order, `BTreeMap`s; no `HashMap`), so equal states have equal digests, and a
//! snapshot round trip preserves the digest.

use std::collections::BTreeMap;

use serde::{Deserialize, Serialize};
use sha2::{Digest, Sha256};

use crate::commerce::payment::RefusedPaymentCredit;
use crate::commerce::state::{Commerce, CommerceIndex};
use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::Hash;
use crate::ledger::transfer::{
    IncomingTransfer, OutgoingTransfer, PreparedBatch, TransferState, TransitTotals,
};
use crate::ledger::wallet::Wallet;
use crate::shard::state::{Indexes, OwnerKey, Shard};
use crate::values::currency::Currency;
use crate::values::error::{encode_versioned, DecodeError, EncodeError};
use crate::values::ids::{IdSpace, Uuid};
use crate::values::sealed::UuidKey;

/// First byte of every snapshot.
pub const SNAPSHOT_FORMAT_VERSION: u8 = 8;

#[derive(Serialize)]
struct SnapshotRef<'a> {
    ids: IdSpace,
    next_wallet_seq: u64,
    next_transaction_seq: u64,
    next_entry_seq: u64,
    next_hold_seq: u64,
    wallets: &'a [Wallet],
    transfers_out: &'a BTreeMap<Uuid, OutgoingTransfer>,
    transfers_in: &'a BTreeMap<Uuid, IncomingTransfer>,
    commerce: &'a Commerce,
    refused_credits: &'a BTreeMap<Uuid, RefusedPaymentCredit>,
    transit: &'a BTreeMap<Currency, TransitTotals>,
    uuid_key: Option<UuidKey>,
    prepared_batches: &'a BTreeMap<Uuid, PreparedBatch>,
    posted_at_floor_ms: i64,
}

/// Everything before the commerce state: all of version 1. Postcard encodes a struct as its
/// fields in order, so version 2 reads as the pair `(SnapshotOwned, Commerce)`.
#[derive(Deserialize)]
struct SnapshotOwned<W> {
    ids: IdSpace,
    next_wallet_seq: u64,
    next_transaction_seq: u64,
    next_entry_seq: u64,
    next_hold_seq: u64,
    wallets: Vec<W>,
    transfers_out: BTreeMap<Uuid, OutgoingTransfer>,
    transfers_in: BTreeMap<Uuid, IncomingTransfer>,
}

impl SnapshotOwned<LegacyWallet> {
    fn upgrade(self) -> SnapshotOwned<Wallet> {
        SnapshotOwned {
            ids: self.ids,
            next_wallet_seq: self.next_wallet_seq,
            next_transaction_seq: self.next_transaction_seq,
            next_entry_seq: self.next_entry_seq,
            next_hold_seq: self.next_hold_seq,
            wallets: self
                .wallets
                .into_iter()
                .map(LegacyWallet::upgrade)
                .collect(),
            transfers_out: self.transfers_out,
            transfers_in: self.transfers_in,
        }
    }
}

/// Versions 3 and 4: version 2 and the refused payment credits.
type SnapshotV3<W> = (
    SnapshotOwned<W>,
    Commerce,
    BTreeMap<Uuid, RefusedPaymentCredit>,
);

/// Version 5: version 4 and the in-transit totals.
type SnapshotV5 = (
    SnapshotOwned<Wallet>,
    Commerce,
    BTreeMap<Uuid, RefusedPaymentCredit>,
    BTreeMap<Currency, TransitTotals>,
);

/// Version 6: version 5 and the uuid key.
type SnapshotV6 = (
    SnapshotOwned<Wallet>,
    Commerce,
    BTreeMap<Uuid, RefusedPaymentCredit>,
    BTreeMap<Currency, TransitTotals>,
    Option<UuidKey>,
);

/// Version 7: version 6 and the open atomic transfer batches.
type SnapshotV7 = (
    SnapshotOwned<Wallet>,
    Commerce,
    BTreeMap<Uuid, RefusedPaymentCredit>,
    BTreeMap<Currency, TransitTotals>,
    Option<UuidKey>,
    BTreeMap<Uuid, PreparedBatch>,
);

/// Version 8: version 7 and the posting floor.
type SnapshotV8 = (
    SnapshotOwned<Wallet>,
    Commerce,
    BTreeMap<Uuid, RefusedPaymentCredit>,
    BTreeMap<Currency, TransitTotals>,
    Option<UuidKey>,
    BTreeMap<Uuid, PreparedBatch>,
    i64,
);

/// A wallet as versions 1 to 3 wrote it: the whole history, without counts.
#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct LegacyWallet {
    id: crate::values::ids::WalletId,
    uuid: Uuid,
    owner_id: u64,
    business_id: u64,
    branch_id: u64,
    #[serde(with = "crate::values::money::decimal")]
    balance: rust_decimal::Decimal,
    #[serde(with = "crate::values::money::decimal")]
    held: rust_decimal::Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pending: rust_decimal::Decimal,
    balance_verified_at_ms: i64,
    created_at_ms: i64,
    updated_at_ms: i64,
    currency: crate::values::currency::Currency,
    owner_type: crate::ledger::wallet::OwnerType,
    wallet_type: crate::ledger::wallet::WalletType,
    status: crate::ledger::wallet::WalletStatus,
    history: Option<Box<LegacyHistory>>,
}

#[derive(Deserialize)]
#[cfg_attr(test, derive(Serialize))]
struct LegacyHistory {
    meta: Option<Box<str>>,
    chain_head: Hash,
    entries: Vec<crate::ledger::transaction::LedgerEntry>,
    transactions: Vec<crate::ledger::transaction::Transaction>,
    holds: Vec<crate::ledger::hold::Hold>,
}

impl LegacyWallet {
    /// The version 1 to 3 form of a wallet whose whole history is in memory (tests write old
    /// snapshots with it).
    #[cfg(test)]
    fn of(wallet: &Wallet) -> Self {
        LegacyWallet {
            id: wallet.id,
            uuid: wallet.uuid,
            owner_id: wallet.owner_id,
            business_id: wallet.business_id,
            branch_id: wallet.branch_id,
            balance: wallet.balance,
            held: wallet.held,
            pending: wallet.pending,
            balance_verified_at_ms: wallet.balance_verified_at_ms,
            created_at_ms: wallet.created_at_ms,
            updated_at_ms: wallet.updated_at_ms,
            currency: wallet.currency,
            owner_type: wallet.owner_type,
            wallet_type: wallet.wallet_type,
            status: wallet.status,
            history: wallet.history.as_ref().map(|history| {
                Box::new(LegacyHistory {
                    meta: history.meta.clone(),
                    chain_head: history.chain_head,
                    entries: history.entries.iter().cloned().collect(),
                    transactions: history.transactions.iter().cloned().collect(),
                    holds: history.holds.iter().cloned().collect(),
                })
            }),
        }
    }

    fn upgrade(self) -> Wallet {
        let history = self.history.map(|old| {
            Box::new(crate::ledger::wallet::History {
                meta: old.meta,
                chain_head: old.chain_head,
                entries_before: Hash::ZERO,
                counts: crate::ledger::wallet::HistoryCounts {
                    transactions: old.transactions.len() as u64,
                    entries: old.entries.len() as u64,
                    holds: old.holds.len() as u64,
                },
                entries: old.entries.into(),
                transactions: old.transactions.into(),
                holds: old.holds.into(),
            })
        });
        Wallet {
            id: self.id,
            uuid: self.uuid,
            owner_id: self.owner_id,
            business_id: self.business_id,
            branch_id: self.branch_id,
            balance: self.balance,
            held: self.held,
            pending: self.pending,
            balance_verified_at_ms: self.balance_verified_at_ms,
            created_at_ms: self.created_at_ms,
            updated_at_ms: self.updated_at_ms,
            currency: self.currency,
            owner_type: self.owner_type,
            wallet_type: self.wallet_type,
            status: self.status,
            history,
        }
    }
}

/// A postcard output that feeds a hasher instead of a buffer.
struct HashFlavor(Sha256);

impl postcard::ser_flavors::Flavor for HashFlavor {
    type Output = Sha256;

    fn try_extend(&mut self, data: &[u8]) -> postcard::Result<()> {
        self.0.update(data);
        Ok(())
    }

    fn try_push(&mut self, data: u8) -> postcard::Result<()> {
        self.0.update([data]);
        Ok(())
    }

    fn finalize(self) -> postcard::Result<Sha256> {
        Ok(self.0)
    }
}

impl Shard {
    fn snapshot_ref(&self) -> SnapshotRef<'_> {
        SnapshotRef {
            ids: self.ids,
            next_wallet_seq: self.next_wallet_seq,
            next_transaction_seq: self.next_transaction_seq,
            next_entry_seq: self.next_entry_seq,
            next_hold_seq: self.next_hold_seq,
            wallets: &self.wallets,
            transfers_out: &self.transfers_out,
            transfers_in: &self.transfers_in,
            commerce: &self.commerce,
            refused_credits: &self.commerce.refused_credits,
            transit: &self.transit,
            uuid_key: self.uuid_key,
            prepared_batches: &self.prepared_batches,
            posted_at_floor_ms: self.posted_at_floor_ms,
        }
    }

    /// The whole state as bytes (format in the module docs), or why it could not be encoded (a
    /// bug): a snapshot that cannot be encoded fails before anything is kept.
    pub fn snapshot_bytes(&self) -> Result<Vec<u8>, EncodeError> {
        encode_versioned(
            &self.snapshot_ref(),
            &[SNAPSHOT_FORMAT_VERSION],
            "shard snapshot",
        )
    }

    /// This state as a version 7 snapshot (without the posting floor), for tests of reading old
    /// snapshots.
    #[cfg(test)]
    pub(crate) fn version_7_snapshot_bytes(&self) -> Vec<u8> {
        let mut bytes = self.snapshot_bytes().unwrap_or_default();
        let floor = postcard::to_allocvec(&self.posted_at_floor_ms).unwrap_or_default();
        bytes.truncate(bytes.len().saturating_sub(floor.len()));
        if let Some(version) = bytes.first_mut() {
            *version = 7;
        }
        bytes
    }

    /// This state as a version 3 snapshot (the whole history in memory), for tests of reading
    /// old snapshots.
    #[cfg(test)]
    pub(crate) fn version_3_snapshot_bytes(&self) -> Vec<u8> {
        #[derive(Serialize)]
        struct V3<'a> {
            ids: IdSpace,
            next_wallet_seq: u64,
            next_transaction_seq: u64,
            next_entry_seq: u64,
            next_hold_seq: u64,
            wallets: Vec<LegacyWallet>,
            transfers_out: &'a BTreeMap<Uuid, OutgoingTransfer>,
            transfers_in: &'a BTreeMap<Uuid, IncomingTransfer>,
            commerce: &'a Commerce,
            refused_credits: &'a BTreeMap<Uuid, RefusedPaymentCredit>,
        }
        let v3 = V3 {
            ids: self.ids,
            next_wallet_seq: self.next_wallet_seq,
            next_transaction_seq: self.next_transaction_seq,
            next_entry_seq: self.next_entry_seq,
            next_hold_seq: self.next_hold_seq,
            wallets: self.wallets.iter().map(LegacyWallet::of).collect(),
            transfers_out: &self.transfers_out,
            transfers_in: &self.transfers_in,
            commerce: &self.commerce,
            refused_credits: &self.commerce.refused_credits,
        };
        postcard::to_extend(&v3, vec![3]).unwrap_or_default()
    }

    /// SHA-256 of the canonical state (see the module docs).
    #[must_use]
    pub fn state_digest(&self) -> Hash {
        let mut hasher = Sha256::new();
        hasher.update([SNAPSHOT_FORMAT_VERSION]);
        // The posting floor is a bound on the next posting's time, not ledger state, and a
        // shard rebuilt from the first record knows it exactly where one restarted from an
        // older snapshot knows it only from the entries since: not part of the digest.
        let state = SnapshotRef {
            posted_at_floor_ms: i64::MIN,
            ..self.snapshot_ref()
        };
        match postcard::serialize_with_flavor(&state, HashFlavor(hasher)) {
            Ok(hasher) => Hash(hasher.finalize().into()),
            Err(_) => Hash::ZERO,
        }
    }

    /// Rebuilds a shard from [`Shard::snapshot_bytes`] output, validating it. Never panics.
    pub fn from_snapshot_bytes(bytes: &[u8]) -> Result<Shard, DecodeError> {
        let (version, body) = bytes.split_first().ok_or(DecodeError::Empty)?;
        let malformed = |error: postcard::Error| DecodeError::Malformed(error.to_string());
        type Parts = (SnapshotOwned<Wallet>, Commerce);
        let mut transit = None;
        let mut uuid_key = None;
        let mut prepared_batches = BTreeMap::new();
        let mut posted_at_floor_ms = i64::MIN;
        let ((snapshot, commerce), rest): (Parts, &[u8]) = match *version {
            1 => {
                let (snapshot, rest): (SnapshotOwned<LegacyWallet>, _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                ((snapshot.upgrade(), Commerce::new()), rest)
            }
            2 => {
                let ((snapshot, commerce), rest): ((SnapshotOwned<LegacyWallet>, Commerce), _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                ((snapshot.upgrade(), commerce), rest)
            }
            3 => {
                let ((snapshot, mut commerce, refused), rest): (SnapshotV3<LegacyWallet>, _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                ((snapshot.upgrade(), commerce), rest)
            }
            4 => {
                let ((snapshot, mut commerce, refused), rest): (SnapshotV3<Wallet>, _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                ((snapshot, commerce), rest)
            }
            5 => {
                let ((snapshot, mut commerce, refused, totals), rest): (SnapshotV5, _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                transit = Some(totals);
                ((snapshot, commerce), rest)
            }
            6 => {
                let ((snapshot, mut commerce, refused, totals, key), rest): (SnapshotV6, _) =
                    postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                transit = Some(totals);
                uuid_key = key;
                ((snapshot, commerce), rest)
            }
            7 => {
                let ((snapshot, mut commerce, refused, totals, key, batches), rest): (
                    SnapshotV7,
                    _,
                ) = postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                transit = Some(totals);
                uuid_key = key;
                prepared_batches = batches;
                ((snapshot, commerce), rest)
            }
            SNAPSHOT_FORMAT_VERSION => {
                let ((snapshot, mut commerce, refused, totals, key, batches, floor), rest): (
                    SnapshotV8,
                    _,
                ) = postcard::take_from_bytes(body).map_err(malformed)?;
                commerce.refused_credits = refused;
                transit = Some(totals);
                uuid_key = key;
                prepared_batches = batches;
                posted_at_floor_ms = floor;
                ((snapshot, commerce), rest)
            }
            other => return Err(DecodeError::UnsupportedVersion(other)),
        };
        if !rest.is_empty() {
            return Err(DecodeError::TrailingBytes(rest.len()));
        }
        let mut shard = Shard::with_ids(snapshot.ids);
        shard.next_wallet_seq = snapshot.next_wallet_seq;
        shard.next_transaction_seq = snapshot.next_transaction_seq;
        shard.next_entry_seq = snapshot.next_entry_seq;
        shard.next_hold_seq = snapshot.next_hold_seq;
        shard.uuid_key = uuid_key;
        shard.posted_at_floor_ms = posted_at_floor_ms;
        shard.index = build_indexes(&shard, &snapshot.wallets)?;
        shard.wallets = snapshot.wallets;
        for (uuid, transfer) in &snapshot.transfers_out {
            if *uuid != transfer.uuid || !shard.owns(transfer.source_wallet_id) {
                return Err(DecodeError::Invalid(
                    "outgoing transfer keyed wrongly or not from this shard",
                ));
            }
        }
        for (uuid, transfer) in &snapshot.transfers_in {
            if *uuid != transfer.uuid || !shard.owns(transfer.target_wallet_id) {
                return Err(DecodeError::Invalid(
                    "incoming transfer keyed wrongly or not to this shard",
                ));
            }
        }
        shard.transfers_out = snapshot.transfers_out;
        shard.transfers_in = snapshot.transfers_in;
        check_prepared_batches(&shard, &prepared_batches)?;
        shard.prepared_batches = prepared_batches;
        check_commerce_keys(&shard, &commerce)?;
        shard.index.commerce = CommerceIndex::build(&commerce).map_err(DecodeError::Invalid)?;
        shard.commerce = commerce;
        // Older versions carry every move: the totals are their finished ones.
        shard.transit = match transit {
            Some(totals) => totals,
            None => shard
                .transit_from_records()
                .ok_or(DecodeError::Invalid("in-transit totals overflow"))?,
        };
        Ok(shard)
    }
}

/// Checks that `ids` are strictly increasing, minted by this shard, and below `next_seq`.
fn check_sequence(
    shard: &Shard,
    ids: impl Iterator<Item = u64>,
    next_seq: u64,
    what: &'static str,
) -> Result<(), DecodeError> {
    let mut last_seq = 0u64;
    for id in ids {
        let seq = shard.ids.seq_of(id).ok_or(DecodeError::Invalid(what))?;
        if seq <= last_seq || seq >= next_seq {
            return Err(DecodeError::Invalid(what));
        }
        last_seq = seq;
    }
    Ok(())
}

fn build_indexes(shard: &Shard, wallets: &[Wallet]) -> Result<Indexes, DecodeError> {
    let mut index = Indexes::default();
    index.owners.reserve(wallets.len());
    let expected_wallets =
        usize::try_from(shard.next_wallet_seq.saturating_sub(1)).unwrap_or(usize::MAX);
    if wallets.len() != expected_wallets {
        return Err(DecodeError::Invalid(
            "wallet count does not match the wallet sequence",
        ));
    }
    check_sequence(
        shard,
        wallets.iter().map(|wallet| wallet.id().0),
        shard.next_wallet_seq,
        "wallet ids out of order",
    )?;
    for wallet in wallets {
        if index
            .owners
            .insert(OwnerKey::of(wallet), wallet.id())
            .is_some()
        {
            return Err(DecodeError::Invalid(
                "two wallets for one owner, currency and wallet type",
            ));
        }
        if wallet.wallet_type().is_system() != wallet.is_system() {
            return Err(DecodeError::Invalid(
                "system wallet type on a non-system wallet",
            ));
        }
        let entries = wallet.entries().iter().map(|entry| entry.id.0);
        check_sequence(
            shard,
            entries,
            shard.next_entry_seq,
            "entry ids out of order",
        )?;
        let transactions = wallet
            .transactions()
            .iter()
            .map(|transaction| transaction.id.0);
        check_sequence(
            shard,
            transactions,
            shard.next_transaction_seq,
            "transaction ids out of order",
        )?;
        check_sequence(
            shard,
            wallet.holds().iter().map(|hold| hold.id.0),
            shard.next_hold_seq,
            "hold ids out of order",
        )?;
        for transaction in wallet.transactions() {
            if index
                .transactions
                .insert(transaction.uuid, (wallet.id(), transaction.id))
                .is_some()
            {
                return Err(DecodeError::Invalid("duplicate transaction uuid"));
            }
        }
        for hold in wallet.holds() {
            if index
                .holds
                .insert(hold.uuid, (wallet.id(), hold.id))
                .is_some()
            {
                return Err(DecodeError::Invalid("duplicate hold uuid"));
            }
            if hold.status == HoldStatus::Active {
                index
                    .hold_expiry
                    .insert((hold.expires_at_ms, hold.id), wallet.id());
            }
        }
    }
    Ok(index)
}

/// Commerce records keyed by their own uuid or id, ids minted by this shard below their sequence
/// and used once, cross-shard records on the right side of this shard.
/// An open batch names this shard among its shards, and its transfers are reserved here and in
/// no other open batch (what `apply` demands of `TransferBatchPrepared`).
fn check_prepared_batches(
    shard: &Shard,
    batches: &BTreeMap<Uuid, PreparedBatch>,
) -> Result<(), DecodeError> {
    let mut seen = std::collections::BTreeSet::new();
    for batch in batches.values() {
        crate::ledger::transfer::check_prepared(&batch.shards, &batch.transfers)
            .map_err(DecodeError::Invalid)?;
        let count = shard.ids.shard_count();
        if !batch.shards.contains(&shard.shard_index())
            || batch.shards.iter().any(|index| *index >= count)
        {
            return Err(DecodeError::Invalid(
                "an open batch not of this shard, or naming a shard that does not exist",
            ));
        }
        for uuid in &batch.transfers {
            let reserved = shard
                .transfers_out
                .get(uuid)
                .is_some_and(|transfer| transfer.state == TransferState::Reserved);
            if !reserved || !seen.insert(*uuid) {
                return Err(DecodeError::Invalid(
                    "an open batch's transfer is not reserved here, or in two batches",
                ));
            }
        }
    }
    Ok(())
}

fn check_commerce_keys(shard: &Shard, commerce: &Commerce) -> Result<(), DecodeError> {
    let minted_once = |ids: &mut Vec<u64>, next_seq: u64, what: &'static str| {
        ids.sort_unstable();
        check_sequence(shard, ids.iter().copied(), next_seq, what)
    };
    let mut payment_ids = Vec::with_capacity(commerce.payments.len());
    for (uuid, payment) in &commerce.payments {
        if *uuid != payment.uuid || !shard.owns(payment.merchant_wallet_id) {
            return Err(DecodeError::Invalid(
                "payment keyed wrongly or not of this shard",
            ));
        }
        payment_ids.push(payment.id.0);
    }
    minted_once(
        &mut payment_ids,
        commerce.next_payment_seq,
        "payment ids not minted here",
    )?;
    let mut link_ids: Vec<u64> = Vec::with_capacity(commerce.links.len());
    for (uuid, link) in &commerce.links {
        if *uuid != link.uuid {
            return Err(DecodeError::Invalid("payment link keyed wrongly"));
        }
        link_ids.push(link.id.0);
    }
    minted_once(
        &mut link_ids,
        commerce.next_link_seq,
        "link ids not minted here",
    )?;
    let mut qr_ids: Vec<u64> = Vec::with_capacity(commerce.qrs.len());
    for (uuid, qr) in &commerce.qrs {
        if *uuid != qr.uuid {
            return Err(DecodeError::Invalid("QR keyed wrongly"));
        }
        qr_ids.push(qr.id.0);
    }
    minted_once(&mut qr_ids, commerce.next_qr_seq, "QR ids not minted here")?;
    if commerce.payouts.iter().any(|(id, payout)| *id != payout.id) {
        return Err(DecodeError::Invalid("payout keyed wrongly"));
    }
    check_sequence(
        shard,
        commerce.payouts.keys().map(|id| id.0),
        commerce.next_payout_seq,
        "payout ids not minted here",
    )?;
    if commerce
        .settlements
        .iter()
        .any(|(id, settlement)| *id != settlement.id)
    {
        return Err(DecodeError::Invalid("settlement keyed wrongly"));
    }
    check_sequence(
        shard,
        commerce.settlements.keys().map(|id| id.0),
        commerce.next_settlement_seq,
        "settlement ids not minted here",
    )?;
    for (uuid, reservation) in &commerce.reservations {
        if *uuid != reservation.uuid || !shard.owns(reservation.source_wallet_id) {
            return Err(DecodeError::Invalid(
                "payment reservation keyed wrongly or not from this shard",
            ));
        }
    }
    for (uuid, credit) in &commerce.credits {
        if *uuid != credit.uuid || !shard.owns(credit.target_wallet_id) {
            return Err(DecodeError::Invalid(
                "payment credit keyed wrongly or not to this shard",
            ));
        }
    }
    for (uuid, refusal) in &commerce.refused_credits {
        if *uuid != refusal.uuid
            || !shard.owns(refusal.target_wallet_id)
            || commerce.credits.contains_key(uuid)
        {
            return Err(DecodeError::Invalid(
                "refused payment credit keyed wrongly, not to this shard, or also credited",
            ));
        }
    }
    Ok(())
}
