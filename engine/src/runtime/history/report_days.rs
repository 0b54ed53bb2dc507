//! Report aggregates: per report, business, currency and UTC day, the count and total of what the
//! fee, payout, settlement and transaction reports show, kept by the indexer from the events in
//! the same write batch as the records, so a report over a month reads O(days x rows) keys.
//!
//! ```text
//! report_days      kind | business | currency | day | row  -> count, total
//! report_subjects  1 | wallet       -> business, currency, counted (not a system account)
//!                  2 | payment uuid -> merchant business, currency, fee   (pending payments)
//!                  3 | payout id    -> business, currency, day, status, amount (not final)
//!                  4 | settlement   -> business, currency, day, status, total (not final)
//! meta             "reports_complete" -> ()  the aggregates count every filed record
//! ```
//!
//! `kind` is [`ReportKind`], `currency` its three-letter code, `day` the UTC day (days since the
//! epoch, sign-flipped so byte order is numeric order) and `row` the status or transaction type
//! code ([`PAYOUT_STATUSES`], [`SETTLEMENT_STATUSES`], [`TRANSACTION_TYPES`]; 0 for fees).
//!
//! The events alone do not say everything a row needs: a transaction names its wallet, not the
//! wallet's business and currency; a payment's completion names the payment, not its merchant
//! and fee; a payout's status change names the payout, not its creation day, amount or previous
//! status. `report_subjects` keeps exactly that, filed from the creating event, and drops it once
//! nothing can move it (a payment once completed or closed, a payout or settlement once final).
//! Nothing is read from a shard's memory.
//!
//! A payout or settlement is counted on the day it was created under its current status: a
//! status change moves one count and its amount from the old status row to the new one.

use std::collections::BTreeMap;

use rustc_hash::FxHashMap as HashMap;
use std::ops::Bound;
use std::sync::atomic::Ordering;

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::remembered::Remembered;
use super::store::{decode, encode, time_key, HistoryStore, Open, StoreError};
use super::writes::Writes;
use crate::commerce::payment::{Payment, PaymentStatus};
use crate::commerce::payout::{Payout, PayoutStatus, Settlement, SettlementStatus, DAY_MS};
use crate::ledger::transaction::Transaction;
use crate::shard::commerce::report::{
    row_code, DayRows, ReportKind, PAYOUT_STATUSES, SETTLEMENT_STATUSES, TRANSACTION_TYPES,
};
use crate::shard::event::Event;
use crate::shard::state::Shard;
use crate::values::currency::Currency;
use crate::values::ids::{PayoutId, SettlementId, Uuid, WalletId};

pub(crate) const REPORTS_COMPLETE: &[u8] = b"reports_complete";

/// kind | business | currency | day | row.
pub(crate) type DayKey = [u8; 21];

/// kind | id (a wallet, payout or settlement id in the first 8 bytes; a payment's uuid).
type SubjectKey = [u8; 17];

/// The count and total of one row of one day.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq, Serialize, Deserialize)]
pub(crate) struct DayTally {
    count: u64,
    #[serde(with = "crate::values::money::decimal")]
    total: Decimal,
}

/// What a later event needs to know of the record that created a subject.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
enum Subject {
    Wallet {
        business: u64,
        currency: Currency,
        /// Its transactions count in the transaction report (not a system account).
        counted: bool,
    },
    Payment {
        business: u64,
        currency: Currency,
        #[serde(with = "crate::values::money::decimal")]
        fee: Decimal,
    },
    /// A payout or settlement (the key says which): where it is counted now.
    Status {
        business: u64,
        currency: Currency,
        day: i64,
        status: u8,
        #[serde(with = "crate::values::money::decimal")]
        amount: Decimal,
    },
}

const WALLET: u8 = 1;
const PAYMENT: u8 = 2;
const PAYOUT: u8 = 3;
const SETTLEMENT: u8 = 4;

fn subject_key(kind: u8, id: [u8; 16]) -> SubjectKey {
    let mut key = [0u8; 17];
    key[0] = kind;
    key[1..].copy_from_slice(&id);
    key
}

/// A numeric id as a subject's id (in its first 8 bytes).
fn numeric(id: u64) -> [u8; 16] {
    let mut bytes = [0u8; 16];
    bytes[..8].copy_from_slice(&id.to_be_bytes());
    bytes
}

fn wallet_key(wallet: WalletId) -> SubjectKey {
    subject_key(WALLET, numeric(wallet.0))
}

fn payment_key(uuid: Uuid) -> SubjectKey {
    subject_key(PAYMENT, uuid.0)
}

pub(crate) fn day_key(
    kind: ReportKind,
    business: u64,
    currency: Currency,
    day: i64,
    row: u8,
) -> DayKey {
    let mut key = [0u8; 21];
    key[0] = kind as u8;
    key[1..9].copy_from_slice(&business.to_be_bytes());
    let code = currency.code().as_bytes();
    if code.len() == 3 {
        key[9..12].copy_from_slice(code);
    }
    key[12..20].copy_from_slice(&time_key(day).to_be_bytes());
    key[20] = row;
    key
}

/// The UTC day of a time.
fn day_of(at_ms: i64) -> i64 {
    at_ms.div_euclid(DAY_MS)
}

/// A payout's subject key, where it is counted, and whether it can change no more.
fn payout_subject(payout: &Payout) -> (SubjectKey, Subject, bool) {
    let subject = Subject::Status {
        business: payout.business_id,
        currency: payout.currency,
        day: day_of(payout.created.at_ms),
        status: row_code(&PAYOUT_STATUSES, &payout.status),
        amount: payout.amount,
    };
    let key = subject_key(PAYOUT, numeric(payout.id.0));
    (key, subject, payout_final(payout.status))
}

/// A settlement's subject key, where it is counted (net total), and whether it is final.
fn settlement_subject(settlement: &Settlement) -> (SubjectKey, Subject, bool) {
    let subject = Subject::Status {
        business: settlement.business_id,
        currency: settlement.currency,
        day: day_of(settlement.created.at_ms),
        status: row_code(&SETTLEMENT_STATUSES, &settlement.status),
        amount: settlement.total_amount,
    };
    let key = subject_key(SETTLEMENT, numeric(settlement.id.0));
    (key, subject, settlement_final(settlement.status))
}

/// The row a payout or settlement subject is counted in, and its amount.
fn status_row(kind: ReportKind, subject: &Subject) -> Option<(DayKey, Decimal)> {
    match *subject {
        Subject::Status {
            business,
            currency,
            day,
            status,
            amount,
        } => Some((day_key(kind, business, currency, day, status), amount)),
        _ => None,
    }
}

fn payout_final(status: PayoutStatus) -> bool {
    !PAYOUT_STATUSES.iter().any(|next| status.can_become(*next))
}

fn settlement_final(status: SettlementStatus) -> bool {
    !SETTLEMENT_STATUSES
        .iter()
        .any(|next| status.can_become(*next))
}

fn damaged(what: &'static str, key: &[u8], reason: &str) -> StoreError {
    StoreError::Corrupt {
        what,
        key: hex::encode(key),
        reason: reason.into(),
    }
}

fn overflow(key: &DayKey) -> StoreError {
    StoreError::Rule(format!(
        "report row {} overflows or goes below zero",
        hex::encode(key)
    ))
}

impl DayTally {
    fn count_in(&mut self, amount: Decimal, key: &DayKey) -> Result<(), StoreError> {
        self.count = self.count.checked_add(1).ok_or_else(|| overflow(key))?;
        self.total = self
            .total
            .checked_add(amount)
            .ok_or_else(|| overflow(key))?;
        Ok(())
    }

    fn count_out(&mut self, amount: Decimal, key: &DayKey) -> Result<(), StoreError> {
        self.count = self.count.checked_sub(1).ok_or_else(|| overflow(key))?;
        self.total = self
            .total
            .checked_sub(amount)
            .ok_or_else(|| overflow(key))?;
        Ok(())
    }
}

/// A wallet's business, currency and whether its transactions are counted.
pub(crate) type Scope = (u64, Currency, bool);

/// The report part of one write batch: every row and subject it changed, read from the store
/// once and then changed here (a batch cannot read its own writes), written at its end.
#[derive(Default)]
pub(crate) struct ReportBatch {
    days: HashMap<DayKey, DayTally>,
    /// `None`: removed in this batch.
    subjects: HashMap<SubjectKey, Option<Subject>>,
}

impl ReportBatch {
    fn subject(&mut self, open: &Open, key: SubjectKey) -> Result<Option<Subject>, StoreError> {
        if let Some(known) = self.subjects.get(&key) {
            return Ok(*known);
        }
        let stored = super::store::get(&open.report_subjects, key, "report subject")?;
        self.subjects.insert(key, stored);
        Ok(stored)
    }

    fn tally(&mut self, open: &Open, key: DayKey) -> Result<&mut DayTally, StoreError> {
        Ok(match self.days.entry(key) {
            std::collections::hash_map::Entry::Occupied(known) => known.into_mut(),
            std::collections::hash_map::Entry::Vacant(slot) => {
                let stored = super::store::get(&open.report_days, key, "report row")?;
                slot.insert(stored.unwrap_or_default())
            }
        })
    }

    fn scope(
        &mut self,
        open: &Open,
        scopes: &mut Remembered<Scope>,
        wallet: WalletId,
    ) -> Result<Scope, StoreError> {
        if let Some(scope) = scopes.get(wallet.0) {
            return Ok(scope);
        }
        let key = wallet_key(wallet);
        match self.subject(open, key)? {
            Some(Subject::Wallet {
                business,
                currency,
                counted,
            }) => {
                scopes.insert(wallet.0, (business, currency, counted));
                Ok((business, currency, counted))
            }
            _ => Err(StoreError::Missing {
                what: "report wallet",
                key: wallet.0.to_string(),
            }),
        }
    }

    /// Moves the payout or settlement under `key` to `status` (`last`: it can change no more).
    fn change_status(
        &mut self,
        open: &Open,
        (kind, key): (ReportKind, SubjectKey),
        status: u8,
        last: bool,
    ) -> Result<(), StoreError> {
        let Some(Subject::Status {
            business,
            currency,
            day,
            status: before,
            amount,
        }) = self.subject(open, key)?
        else {
            return Err(StoreError::Missing {
                what: "report subject",
                key: hex::encode(key),
            });
        };
        let old = day_key(kind, business, currency, day, before);
        self.tally(open, old)?.count_out(amount, &old)?;
        let new = day_key(kind, business, currency, day, status);
        self.tally(open, new)?.count_in(amount, &new)?;
        let moved = Subject::Status {
            business,
            currency,
            day,
            status,
            amount,
        };
        self.subjects.insert(key, (!last).then_some(moved));
        Ok(())
    }

    /// Counts a new payout or settlement on its creation day.
    fn created(
        &mut self,
        open: &Open,
        kind: ReportKind,
        (key, subject, last): (SubjectKey, Subject, bool),
    ) -> Result<(), StoreError> {
        if let Some((row, amount)) = status_row(kind, &subject) {
            self.tally(open, row)?.count_in(amount, &row)?;
        }
        self.subjects.insert(key, (!last).then_some(subject));
        Ok(())
    }

    /// Files what `event` changes in the reports.
    pub(crate) fn file(
        &mut self,
        open: &Open,
        scopes: &mut Remembered<Scope>,
        event: &Event,
    ) -> Result<(), StoreError> {
        match event {
            Event::WalletCreated(wallet) => {
                let counted = wallet.owner_type != crate::ledger::wallet::OwnerType::System;
                scopes.insert(
                    wallet.wallet_id.0,
                    (wallet.business_id, wallet.currency, counted),
                );
                self.subjects.insert(
                    wallet_key(wallet.wallet_id),
                    Some(Subject::Wallet {
                        business: wallet.business_id,
                        currency: wallet.currency,
                        counted,
                    }),
                );
            }
            Event::TransactionRecorded {
                wallet_id,
                transaction,
            } => {
                let (business, currency, counted) = self.scope(open, scopes, *wallet_id)?;
                if counted {
                    let row = transaction_row(business, currency, transaction);
                    self.tally(open, row)?.count_in(transaction.amount, &row)?;
                }
            }
            Event::PaymentInitiated(payment) => {
                self.subjects.insert(
                    payment_key(payment.uuid),
                    Some(Subject::Payment {
                        business: payment.merchant_id,
                        currency: payment.currency,
                        fee: payment.fee_amount,
                    }),
                );
            }
            Event::PaymentCompleted {
                payment_uuid,
                at_ms,
                ..
            } => {
                let key = payment_key(*payment_uuid);
                let Some(Subject::Payment {
                    business,
                    currency,
                    fee,
                }) = self.subject(open, key)?
                else {
                    return Err(StoreError::Missing {
                        what: "report payment",
                        key: payment_uuid.to_string(),
                    });
                };
                let row = day_key(ReportKind::Fees, business, currency, day_of(*at_ms), 0);
                self.tally(open, row)?.count_in(fee, &row)?;
                self.subjects.insert(key, None);
            }
            Event::PaymentClosed { payment_uuid, .. } => {
                self.subjects.insert(payment_key(*payment_uuid), None);
            }
            Event::PayoutCreated(payout) => {
                self.created(open, ReportKind::Payouts, payout_subject(payout))?;
            }
            Event::PayoutChanged {
                payout_id, change, ..
            } => {
                let key = subject_key(PAYOUT, numeric(payout_id.0));
                let status = change.status();
                let code = row_code(&PAYOUT_STATUSES, &status);
                let last = payout_final(status);
                self.change_status(open, (ReportKind::Payouts, key), code, last)?;
            }
            Event::SettlementCreated(settlement) => {
                self.created(
                    open,
                    ReportKind::Settlements,
                    settlement_subject(settlement),
                )?;
            }
            Event::SettlementChanged {
                settlement_id,
                change,
                ..
            } => {
                let key = subject_key(SETTLEMENT, numeric(settlement_id.0));
                let status = change.status();
                let code = row_code(&SETTLEMENT_STATUSES, &status);
                let last = settlement_final(status);
                self.change_status(open, (ReportKind::Settlements, key), code, last)?;
            }
            _ => {}
        }
        Ok(())
    }

    /// Adds the batch's rows and subjects to `writes` (a row whose count fell to zero is removed).
    pub(crate) fn write(self, open: &Open, writes: &mut Writes) -> Result<(), StoreError> {
        for (key, tally) in self.days {
            if tally.count == 0 {
                if !tally.total.is_zero() {
                    return Err(overflow(&key));
                }
                writes.remove(&open.report_days, key.to_vec());
            } else {
                writes.insert(&open.report_days, key, encode(&tally)?);
            }
        }
        for (key, subject) in self.subjects {
            match subject {
                Some(subject) => writes.insert(&open.report_subjects, key, encode(&subject)?),
                None => writes.remove(&open.report_subjects, key.to_vec()),
            }
        }
        Ok(())
    }
}

fn transaction_row(business: u64, currency: Currency, transaction: &Transaction) -> DayKey {
    day_key(
        ReportKind::Transactions,
        business,
        currency,
        day_of(transaction.created_at_ms),
        row_code(&TRANSACTION_TYPES, &transaction.transaction_type),
    )
}

/// The aggregates recounted from records: what `report_days` and `report_subjects` must hold.
/// Built per shard ([`Recount::shard`]: wallets, which the shards hold in memory, and the
/// payments, payouts and settlements they hold) plus the records filed in the store
/// ([`HistoryStore::recount_filed`]: transactions, and the payments, payouts and settlements
/// that left memory; a version in memory stands for its filed one, being the same or newer).
#[derive(Debug, Default, PartialEq, Eq)]
pub struct Recount {
    days: BTreeMap<DayKey, DayTally>,
    subjects: BTreeMap<SubjectKey, Subject>,
    /// Payments, payouts and settlements in the shards' memory, counted by `recount_filed`.
    payments: BTreeMap<Uuid, Payment>,
    payouts: BTreeMap<PayoutId, Payout>,
    settlements: BTreeMap<SettlementId, Settlement>,
}

impl Recount {
    fn count(&mut self, key: DayKey, amount: Decimal) -> Result<(), StoreError> {
        self.days.entry(key).or_default().count_in(amount, &key)
    }

    /// Counts one payment: a pending one is a subject (its completion is still to come), a
    /// completed one a fee on its completion day.
    fn count_payment(&mut self, payment: &Payment) -> Result<(), StoreError> {
        if payment.status == PaymentStatus::Pending {
            self.subjects.insert(
                payment_key(payment.uuid),
                Subject::Payment {
                    business: payment.merchant_id,
                    currency: payment.currency,
                    fee: payment.fee_amount,
                },
            );
        }
        if let Some(at) = payment
            .completed_at_ms
            .filter(|_| payment.status.is_completed())
        {
            let row = day_key(
                ReportKind::Fees,
                payment.merchant_id,
                payment.currency,
                day_of(at),
                0,
            );
            self.count(row, payment.fee_amount)?;
        }
        Ok(())
    }

    /// Counts what `shard` holds in memory: its wallets; its payments, payouts and settlements
    /// are kept to be counted with the filed ones ([`HistoryStore::recount_filed`]).
    pub fn shard(&mut self, shard: &Shard) -> Result<(), StoreError> {
        for wallet in shard.wallets() {
            self.subjects.insert(
                wallet_key(wallet.id()),
                Subject::Wallet {
                    business: wallet.business_id(),
                    currency: wallet.currency(),
                    counted: !wallet.is_system(),
                },
            );
        }
        for payment in shard.commerce.payments.values() {
            self.payments.insert(payment.uuid, payment.clone());
        }
        for payout in shard.commerce.payouts.values() {
            self.payouts.insert(payout.id, payout.clone());
        }
        for settlement in shard.commerce.settlements.values() {
            self.settlements.insert(settlement.id, settlement.clone());
        }
        Ok(())
    }

    /// Counts a payout or settlement as [`ReportBatch::created`] does.
    fn created(
        &mut self,
        kind: ReportKind,
        (key, subject, last): (SubjectKey, Subject, bool),
    ) -> Result<(), StoreError> {
        if let Some((row, amount)) = status_row(kind, &subject) {
            self.count(row, amount)?;
        }
        if !last {
            self.subjects.insert(key, subject);
        }
        Ok(())
    }

    /// Adds another shard's recount.
    pub fn absorb(&mut self, other: Recount) -> Result<(), StoreError> {
        for (key, tally) in other.days {
            let mine = self.days.entry(key).or_default();
            mine.count = mine
                .count
                .checked_add(tally.count)
                .ok_or_else(|| overflow(&key))?;
            mine.total = mine
                .total
                .checked_add(tally.total)
                .ok_or_else(|| overflow(&key))?;
        }
        self.subjects.extend(other.subjects);
        self.payments.extend(other.payments);
        self.payouts.extend(other.payouts);
        self.settlements.extend(other.settlements);
        Ok(())
    }
}

/// Reads the rows of `kind` for `business` (every one when `None`) and `currency` within
/// `days` (inclusive), summed over the days: per (business, currency) group one seek and its
/// days x rows keys.
pub(crate) fn read_rows(
    open: &Open,
    kind: ReportKind,
    business: Option<u64>,
    currency: Option<Currency>,
    (from_day, to_day): (i64, i64),
) -> Result<DayRows, StoreError> {
    let mut rows = DayRows::new();
    let group_low = |business: u64, code: [u8; 3], day: u64, row: u8| {
        let mut key = [0u8; 21];
        key[0] = kind as u8;
        key[1..9].copy_from_slice(&business.to_be_bytes());
        key[9..12].copy_from_slice(&code);
        key[12..20].copy_from_slice(&day.to_be_bytes());
        key[20] = row;
        key
    };
    let (first, last) = match business {
        Some(id) => (id, id),
        None => (0, u64::MAX),
    };
    let end = group_low(last, [u8::MAX; 3], u64::MAX, u8::MAX);
    let mut cursor = Bound::Included(group_low(first, [0; 3], 0, 0));
    loop {
        let Some(guard) = open
            .report_days
            .range((cursor, Bound::Included(end)))
            .next()
        else {
            break;
        };
        let stored = guard.key()?;
        let key: DayKey = stored
            .as_ref()
            .try_into()
            .map_err(|_| damaged("report row", &stored, "not 21 bytes"))?;
        let mut word = [0u8; 8];
        word.copy_from_slice(&key[1..9]);
        let group_business = u64::from_be_bytes(word);
        let code = [key[9], key[10], key[11]];
        let group_currency = std::str::from_utf8(&code)
            .ok()
            .and_then(|text| Currency::from_code(text).ok())
            .ok_or_else(|| damaged("report row", &key, "unknown currency"))?;
        if currency.is_none_or(|wanted| wanted == group_currency) {
            let low = group_low(group_business, code, time_key(from_day), 0);
            let high = group_low(group_business, code, time_key(to_day), u8::MAX);
            for guard in open.report_days.range(low..=high) {
                let (key, bytes) = guard.into_inner()?;
                let tally: DayTally = decode("report row", &key, &bytes)?;
                let row = key.get(20).copied().unwrap_or(u8::MAX);
                let (count, total) = rows
                    .entry((row, group_currency))
                    .or_insert((0, Decimal::ZERO));
                *count = count.saturating_add(tally.count);
                *total = total.saturating_add(tally.total);
            }
        }
        cursor = Bound::Excluded(group_low(group_business, code, u64::MAX, u8::MAX));
    }
    Ok(rows)
}

impl HistoryStore {
    /// Whether the report aggregates count every record filed (false for a store written before
    /// they existed, until [`HistoryStore::build_reports`]).
    pub fn reports_ready(&self) -> Result<bool, StoreError> {
        self.with(|open| Ok(open.reports.load(Ordering::Acquire)))
    }

    /// A report's rows summed over `days` (inclusive UTC days since the epoch); refused while
    /// the aggregates are not built, rather than answering wrong numbers.
    pub fn report_rows(
        &self,
        kind: ReportKind,
        business: Option<u64>,
        currency: Option<Currency>,
        days: (i64, i64),
    ) -> Result<DayRows, StoreError> {
        self.with(|open| {
            if !open.reports.load(Ordering::Acquire) {
                return Err(StoreError::Rule(
                    "the report aggregates are not built yet".into(),
                ));
            }
            read_rows(open, kind, business, currency, days)
        })
    }

    /// Counts into `recount` every transaction filed, by its wallet's scope (from the wallets
    /// `recount` already holds).
    pub fn recount_filed(&self, recount: &mut Recount) -> Result<(), StoreError> {
        self.with(|open| {
            let mut scope: Option<(u64, Option<Scope>)> = None;
            for guard in open.transactions.iter() {
                let (key, bytes) = guard.into_inner()?;
                let (wallet, _) = super::epochs::record_of(&key)?;
                let known = match scope {
                    Some((w, known)) if w == wallet => known,
                    _ => {
                        let known = match recount.subjects.get(&wallet_key(WalletId(wallet))) {
                            Some(Subject::Wallet {
                                business,
                                currency,
                                counted,
                            }) => Some((*business, *currency, *counted)),
                            _ => None,
                        };
                        scope = Some((wallet, known));
                        known
                    }
                };
                let Some((business, currency, counted)) = known else {
                    return Err(StoreError::Missing {
                        what: "wallet of a filed transaction",
                        key: wallet.to_string(),
                    });
                };
                if counted {
                    let transaction: Transaction = decode("transaction", &key, &bytes)?;
                    let row = transaction_row(business, currency, &transaction);
                    recount.count(row, transaction.amount)?;
                }
            }
            // Payments and payouts: the filed version of each, or the one in memory instead.
            let mut in_memory = std::mem::take(&mut recount.payments);
            for guard in open.payments.iter() {
                let (key, bytes) = guard.into_inner()?;
                let filed: Payment = decode("payment", &key, &bytes)?;
                let payment = in_memory.remove(&filed.uuid).unwrap_or(filed);
                recount.count_payment(&payment)?;
            }
            for payment in in_memory.into_values() {
                recount.count_payment(&payment)?;
            }
            let mut in_memory = std::mem::take(&mut recount.payouts);
            for guard in open.payouts.iter() {
                let (key, bytes) = guard.into_inner()?;
                let filed: Payout = decode("payout", &key, &bytes)?;
                let payout = in_memory.remove(&filed.id).unwrap_or(filed);
                recount.created(ReportKind::Payouts, payout_subject(&payout))?;
            }
            for payout in in_memory.into_values() {
                recount.created(ReportKind::Payouts, payout_subject(&payout))?;
            }
            let mut in_memory = std::mem::take(&mut recount.settlements);
            for guard in open.settlements.iter() {
                let (key, bytes) = guard.into_inner()?;
                let filed: Settlement = decode("settlement", &key, &bytes)?;
                let settlement = in_memory.remove(&filed.id).unwrap_or(filed);
                recount.created(ReportKind::Settlements, settlement_subject(&settlement))?;
            }
            for settlement in in_memory.into_values() {
                recount.created(ReportKind::Settlements, settlement_subject(&settlement))?;
            }
            Ok(())
        })
    }

    /// Replaces the aggregates with `recount` (a complete one: every shard and the filed
    /// transactions), marks them complete and syncs: the upgrade of a store written before
    /// aggregates existed, at open, before anything else is filed.
    pub fn build_reports(&self, recount: Recount) -> Result<(), StoreError> {
        const COMMIT_EVERY: usize = 100_000;
        self.with(|open| {
            let mut writes = Writes::new(&open.db);
            let mut pending = 0usize;
            for keyspace in [&open.report_days, &open.report_subjects] {
                for guard in keyspace.iter() {
                    writes.remove(keyspace, guard.key()?.to_vec());
                    pending += 1;
                    if pending >= COMMIT_EVERY {
                        writes.commit()?;
                        writes = Writes::new(&open.db);
                        pending = 0;
                    }
                }
            }
            writes.commit()?;
            writes = Writes::new(&open.db);
            pending = 0;
            let days = recount
                .days
                .iter()
                .map(|(key, tally)| encode(tally).map(|value| (key.to_vec(), value)));
            let subjects = recount
                .subjects
                .iter()
                .map(|(key, subject)| encode(subject).map(|value| (key.to_vec(), value)));
            for (keyspace, pairs) in [
                (&open.report_days, days.collect::<Result<Vec<_>, _>>()?),
                (
                    &open.report_subjects,
                    subjects.collect::<Result<Vec<_>, _>>()?,
                ),
            ] {
                for (key, value) in pairs {
                    writes.insert(keyspace, key, value);
                    pending += 1;
                    if pending >= COMMIT_EVERY {
                        writes.commit()?;
                        writes = Writes::new(&open.db);
                        pending = 0;
                    }
                }
            }
            writes.insert(&open.meta, REPORTS_COMPLETE, Vec::new());
            writes.commit()?;
            open.db.persist(fjall::PersistMode::SyncData)?;
            open.reports.store(true, Ordering::Release);
            Ok(())
        })
    }

    /// `replay --verify`: the aggregates equal `recount`; `Err` names the first difference.
    pub fn verify_reports(&self, recount: &Recount) -> Result<Result<u64, String>, StoreError> {
        self.with(|open| {
            let mut stored_days = BTreeMap::new();
            for guard in open.report_days.iter() {
                let (key, bytes) = guard.into_inner()?;
                let tally: DayTally = decode("report row", &key, &bytes)?;
                let key: DayKey = key
                    .as_ref()
                    .try_into()
                    .map_err(|_| damaged("report row", &key, "not 21 bytes"))?;
                stored_days.insert(key, tally);
            }
            let mut stored_subjects = BTreeMap::new();
            for guard in open.report_subjects.iter() {
                let (key, bytes) = guard.into_inner()?;
                let subject: Subject = decode("report subject", &key, &bytes)?;
                let key: SubjectKey = key
                    .as_ref()
                    .try_into()
                    .map_err(|_| damaged("report subject", &key, "not 17 bytes"))?;
                stored_subjects.insert(key, subject);
            }
            if let Some(difference) = first_difference(&stored_days, &recount.days) {
                return Ok(Err(format!("report row {difference}")));
            }
            if let Some(difference) = first_difference(&stored_subjects, &recount.subjects) {
                return Ok(Err(format!("report subject {difference}")));
            }
            Ok(Ok(stored_days.len() as u64))
        })
    }

    /// Forgets the aggregates and their mark, as a store written before they existed (tests).
    #[cfg(test)]
    pub(crate) fn forget_reports(&self) -> Result<(), StoreError> {
        self.with(|open| {
            let mut writes = Writes::new(&open.db);
            for keyspace in [&open.report_days, &open.report_subjects] {
                for guard in keyspace.iter() {
                    writes.remove(keyspace, guard.key()?.to_vec());
                }
            }
            writes.remove(&open.meta, REPORTS_COMPLETE.to_vec());
            writes.commit()?;
            open.reports.store(false, Ordering::Release);
            Ok(())
        })
    }
}

/// The first key whose value differs between the stored map and the recount, described.
fn first_difference<K: Ord + AsRef<[u8]>, V: PartialEq + std::fmt::Debug>(
    stored: &BTreeMap<K, V>,
    recounted: &BTreeMap<K, V>,
) -> Option<String> {
    let keys: std::collections::BTreeSet<&K> = stored.keys().chain(recounted.keys()).collect();
    keys.into_iter().find_map(|key| {
        let (kept, counted) = (stored.get(key), recounted.get(key));
        (kept != counted).then(|| {
            format!(
                "{}: the store holds {kept:?}, the records count {counted:?}",
                hex::encode(key)
            )
        })
    })
}
