//! Report queries (decisions §4 "Reports"): pure reads of one shard that the API sums across shards
//! with the `merge_*` functions.
//!
//! | report | rows | counts |
//! |---|---|---|
//! | fees | `{currency, total_fees, count}` | payments that completed in the range (refunded ones too: fees are kept), by merchant business |
//! | payouts | `{status, currency, count, total_amount}` | payouts created in the range, by the wallet's business |
//! | settlements | `{status, currency, count, total_amount}` (net totals) | settlements created in the range |
//! | summary | `{currency, wallet_count, total_balance, total_held, total_pending}` | customer and merchant wallets now (decisions §6; never system accounts) |
//! | transactions | `{transaction_type, currency, count, total_amount}` | client wallet transactions created in the range |
//!
//! Rows come in key order (`BTreeMap`), so the output is deterministic. Sums saturate instead of
//! overflowing (they cannot reach `Decimal`'s 7.9e28 with amounts of at most 1e12 each).
//!
//! The API serves fees, payouts, settlements and transactions from per-day aggregates the
//! history indexer keeps (`runtime::history::report_days`, docs/history.md "Reports"); the
//! `Shard` methods here count the records a shard holds and are the reference the aggregates are
//! tested against (a whole-history shard, `Recall::Keep`), and the summary (current balances).

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::values::error::Rejection;

use crate::commerce::payout::{PayoutStatus, SettlementStatus, DAY_MS};
use crate::ledger::transaction::TransactionType;
use crate::ledger::wallet::OwnerType;
use crate::shard::state::Shard;
use crate::values::currency::Currency;

/// The range and scope of a report. `from_ms..=to_ms` (the API passes the start of `from` and the
/// last millisecond of `to`); `None` matches every business or currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct ReportRange {
    pub from_ms: i64,
    pub to_ms: i64,
    pub business_id: Option<u64>,
    pub currency: Option<Currency>,
}

impl ReportRange {
    /// The first and last UTC day (days since the epoch) of a range of whole days, `None` when
    /// the range starts or ends inside a day (the aggregates cannot answer it exactly).
    #[must_use]
    pub fn whole_days(&self) -> Option<(i64, i64)> {
        let starts = self.from_ms.rem_euclid(DAY_MS) == 0;
        let ends = self.to_ms.rem_euclid(DAY_MS) == DAY_MS - 1;
        (starts && ends && self.from_ms <= self.to_ms).then(|| {
            (
                self.from_ms.div_euclid(DAY_MS),
                self.to_ms.div_euclid(DAY_MS),
            )
        })
    }

    fn covers(&self, at_ms: i64, business_id: u64, currency: Currency) -> bool {
        (self.from_ms..=self.to_ms).contains(&at_ms) && self.wants(business_id, currency)
    }

    /// Whether a wallet of this business and currency can have rows in the report.
    fn wants(&self, business_id: u64, currency: Currency) -> bool {
        self.business_id.is_none_or(|wanted| wanted == business_id)
            && self.currency.is_none_or(|wanted| wanted == currency)
    }
}

/// Fees collected in one currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct FeeRow {
    pub currency: Currency,
    pub total_fees: Decimal,
    pub count: u64,
}

/// Payouts or settlements in one status and currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatusRow<S> {
    pub status: S,
    pub currency: Currency,
    pub count: u64,
    pub total_amount: Decimal,
}

/// Balances of the client wallets in one currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct BalanceRow {
    pub currency: Currency,
    pub wallet_count: u64,
    pub total_balance: Decimal,
    pub total_held: Decimal,
    pub total_pending: Decimal,
}

/// Transactions of one type in one currency.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct TransactionRow {
    pub transaction_type: TransactionType,
    pub currency: Currency,
    pub count: u64,
    pub total_amount: Decimal,
}

/// The reports the history indexer aggregates per business, currency and day; the number is the
/// first byte of their keys in the store.
#[derive(Clone, Copy, Debug, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub enum ReportKind {
    /// Payments completed in the day (one row).
    Fees = 1,
    /// Payouts created in the day, by current status.
    Payouts = 2,
    /// Settlements created in the day, by current status.
    Settlements = 3,
    /// Client wallet transactions created in the day, by type.
    Transactions = 4,
}

/// Every payout status, in the order of their report row codes (never reorder: the codes are
/// stored). Also the list the API parses a status filter against.
pub const PAYOUT_STATUSES: [PayoutStatus; 7] = [
    PayoutStatus::Pending,
    PayoutStatus::Approved,
    PayoutStatus::Rejected,
    PayoutStatus::Cancelled,
    PayoutStatus::Executed,
    PayoutStatus::Paid,
    PayoutStatus::Failed,
];

/// The settlement statuses in the order of their row codes (stored).
pub const SETTLEMENT_STATUSES: [SettlementStatus; 5] = [
    SettlementStatus::Pending,
    SettlementStatus::Approved,
    SettlementStatus::Rejected,
    SettlementStatus::Cancelled,
    SettlementStatus::Executed,
];

/// The transaction types in the order of their row codes (stored).
pub const TRANSACTION_TYPES: [TransactionType; 11] = [
    TransactionType::Deposit,
    TransactionType::Withdrawal,
    TransactionType::Transfer,
    TransactionType::Refund,
    TransactionType::Reversal,
    TransactionType::HoldCapture,
    TransactionType::Payment,
    TransactionType::PaymentRefund,
    TransactionType::Payout,
    TransactionType::PayoutReturn,
    TransactionType::Settlement,
];

/// The row code of `value` in `table` (its position).
#[must_use]
pub fn row_code<T: PartialEq>(table: &[T], value: &T) -> u8 {
    let position = table.iter().position(|known| known == value);
    u8::try_from(position.unwrap_or(usize::MAX)).unwrap_or(u8::MAX)
}

/// Aggregated rows of one report: per (row code, currency), the count and total.
pub type DayRows = BTreeMap<(u8, Currency), (u64, Decimal)>;

/// Fee rows from aggregated rows (row code 0).
#[must_use]
pub fn fee_rows(rows: DayRows) -> Vec<FeeRow> {
    merge_fee_rows([rows
        .into_iter()
        .map(|((_, currency), (count, total_fees))| FeeRow {
            currency,
            total_fees,
            count,
        })
        .collect()])
}

/// Status rows from aggregated rows whose codes index `statuses`; an unknown code is `None`.
#[must_use]
pub fn status_rows_of<S: Ord + Copy>(statuses: &[S], rows: DayRows) -> Option<Vec<StatusRow<S>>> {
    let mut tally: Tally<(S, Currency)> = BTreeMap::new();
    for ((code, currency), counted) in rows {
        tally.insert((*statuses.get(usize::from(code))?, currency), counted);
    }
    Some(status_rows(tally))
}

/// Transaction rows from aggregated rows; an unknown code is `None`.
#[must_use]
pub fn transaction_rows_of(rows: DayRows) -> Option<Vec<TransactionRow>> {
    let mut tally: Tally<(TransactionType, Currency)> = BTreeMap::new();
    for ((code, currency), counted) in rows {
        tally.insert(
            (*TRANSACTION_TYPES.get(usize::from(code))?, currency),
            counted,
        );
    }
    Some(transaction_rows(tally))
}

fn add(sum: Decimal, amount: Decimal) -> Decimal {
    sum.saturating_add(amount)
}

/// Per key: count and total.
type Tally<K> = BTreeMap<K, (u64, Decimal)>;

fn tally<K: Ord>(tally: &mut Tally<K>, key: K, amount: Decimal) {
    let (count, total) = tally.entry(key).or_insert((0, Decimal::ZERO));
    *count += 1;
    *total = add(*total, amount);
}

impl Shard {
    /// Fees of the payments that completed in the range: those in memory, then the filed ones
    /// from the store's date index of completed payments (a store that cannot be read is an
    /// error). The API reads the aggregates instead; this is the tests' reference.
    pub fn fee_report(&self, range: &ReportRange) -> Result<Vec<FeeRow>, Rejection> {
        let mut rows: Tally<Currency> = BTreeMap::new();
        let mut count = |payment: &crate::commerce::payment::Payment| {
            let completed = payment
                .completed_at_ms
                .filter(|_| payment.status.is_completed());
            if completed.is_some_and(|at| range.covers(at, payment.merchant_id, payment.currency)) {
                tally(&mut rows, payment.currency, payment.fee_amount);
            }
        };
        for payment in self.commerce.payments.values() {
            count(payment);
        }
        if let Some(store) = self.recall.store() {
            store
                .for_each_completed_payment(range.from_ms, range.to_ms, &mut |payment| {
                    if self.owns(payment.merchant_wallet_id)
                        && !self.commerce.payments.contains_key(&payment.uuid)
                    {
                        count(payment);
                    }
                    true
                })
                .map_err(|e| crate::shard::cold::unavailable(&e))?;
        }
        Ok(rows
            .into_iter()
            .map(|(currency, (count, total_fees))| FeeRow {
                currency,
                total_fees,
                count,
            })
            .collect())
    }

    /// Payouts created in the range, by status and currency: those in memory and the filed ones
    /// of the wallets in scope (a store that cannot be read is an error).
    pub fn payout_report(
        &self,
        range: &ReportRange,
    ) -> Result<Vec<StatusRow<PayoutStatus>>, Rejection> {
        let mut rows: Tally<(PayoutStatus, Currency)> = BTreeMap::new();
        self.for_each_payout(
            |wallet| range.wants(wallet.business_id(), wallet.currency()),
            |payout| {
                if range.covers(payout.created.at_ms, payout.business_id, payout.currency) {
                    tally(&mut rows, (payout.status, payout.currency), payout.amount);
                }
                true
            },
        )?;
        Ok(status_rows(rows))
    }

    /// Settlements created in the range, by status and currency (net totals), of the
    /// settlements in memory: every one in a shard without a store (the tests' reference); the
    /// API reads the aggregates, which count the filed ones too.
    #[must_use]
    pub fn settlement_report(&self, range: &ReportRange) -> Vec<StatusRow<SettlementStatus>> {
        let mut rows: Tally<(SettlementStatus, Currency)> = BTreeMap::new();
        for settlement in self.commerce.settlements.values() {
            if range.covers(
                settlement.created.at_ms,
                settlement.business_id,
                settlement.currency,
            ) {
                tally(
                    &mut rows,
                    (settlement.status, settlement.currency),
                    settlement.total_amount,
                );
            }
        }
        status_rows(rows)
    }

    /// Current balances of the customer and merchant wallets, per currency.
    #[must_use]
    pub fn balance_summary(
        &self,
        business_id: Option<u64>,
        currency: Option<Currency>,
    ) -> Vec<BalanceRow> {
        let mut rows: BTreeMap<Currency, BalanceRow> = BTreeMap::new();
        let counted = |wallet: &&crate::ledger::wallet::Wallet| {
            matches!(
                wallet.owner_type(),
                OwnerType::Customer | OwnerType::Merchant
            )
        };
        for wallet in self.wallets().filter(counted) {
            if business_id.is_some_and(|wanted| wanted != wallet.business_id())
                || currency.is_some_and(|wanted| wanted != wallet.currency())
            {
                continue;
            }
            let row = rows.entry(wallet.currency()).or_insert(BalanceRow {
                currency: wallet.currency(),
                wallet_count: 0,
                total_balance: Decimal::ZERO,
                total_held: Decimal::ZERO,
                total_pending: Decimal::ZERO,
            });
            row.wallet_count += 1;
            row.total_balance = add(row.total_balance, wallet.balance());
            row.total_held = add(row.total_held, wallet.held());
            row.total_pending = add(row.total_pending, wallet.pending());
        }
        rows.into_values().collect()
    }

    /// Client wallet transactions created in the range, by type and currency (read through
    /// memory and the history store).
    pub fn transaction_report(
        &self,
        range: &ReportRange,
    ) -> Result<Vec<TransactionRow>, Rejection> {
        let mut rows: Tally<(TransactionType, Currency)> = BTreeMap::new();
        for wallet in self
            .wallets()
            .filter(|wallet| !wallet.is_system() && wallet.has_history())
            .filter(|wallet| range.wants(wallet.business_id(), wallet.currency()))
        {
            self.for_each_transaction(wallet, |transaction| {
                if range.covers(
                    transaction.created_at_ms,
                    wallet.business_id(),
                    wallet.currency(),
                ) {
                    tally(
                        &mut rows,
                        (transaction.transaction_type, wallet.currency()),
                        transaction.amount,
                    );
                }
                true
            })?;
        }
        Ok(transaction_rows(rows))
    }
}

fn transaction_rows(rows: Tally<(TransactionType, Currency)>) -> Vec<TransactionRow> {
    rows.into_iter()
        .map(
            |((transaction_type, currency), (count, total_amount))| TransactionRow {
                transaction_type,
                currency,
                count,
                total_amount,
            },
        )
        .collect()
}

fn status_rows<S: Ord + Copy>(rows: Tally<(S, Currency)>) -> Vec<StatusRow<S>> {
    rows.into_iter()
        .map(|((status, currency), (count, total_amount))| StatusRow {
            status,
            currency,
            count,
            total_amount,
        })
        .collect()
}

/// Sums the fee rows of several shards.
#[must_use]
pub fn merge_fee_rows(shards: impl IntoIterator<Item = Vec<FeeRow>>) -> Vec<FeeRow> {
    let mut rows: BTreeMap<Currency, FeeRow> = BTreeMap::new();
    for row in shards.into_iter().flatten() {
        let merged = rows.entry(row.currency).or_insert(FeeRow {
            currency: row.currency,
            total_fees: Decimal::ZERO,
            count: 0,
        });
        merged.count += row.count;
        merged.total_fees = add(merged.total_fees, row.total_fees);
    }
    rows.into_values().collect()
}

/// Sums the payout or settlement rows of several shards.
#[must_use]
pub fn merge_status_rows<S: Ord + Copy>(
    shards: impl IntoIterator<Item = Vec<StatusRow<S>>>,
) -> Vec<StatusRow<S>> {
    let mut rows: Tally<(S, Currency)> = BTreeMap::new();
    for row in shards.into_iter().flatten() {
        let (count, total) = rows
            .entry((row.status, row.currency))
            .or_insert((0, Decimal::ZERO));
        *count += row.count;
        *total = add(*total, row.total_amount);
    }
    status_rows(rows)
}

/// Sums the balance rows of several shards.
#[must_use]
pub fn merge_balance_rows(shards: impl IntoIterator<Item = Vec<BalanceRow>>) -> Vec<BalanceRow> {
    let mut rows: BTreeMap<Currency, BalanceRow> = BTreeMap::new();
    for row in shards.into_iter().flatten() {
        let merged = rows.entry(row.currency).or_insert(BalanceRow {
            currency: row.currency,
            wallet_count: 0,
            total_balance: Decimal::ZERO,
            total_held: Decimal::ZERO,
            total_pending: Decimal::ZERO,
        });
        merged.wallet_count += row.wallet_count;
        merged.total_balance = add(merged.total_balance, row.total_balance);
        merged.total_held = add(merged.total_held, row.total_held);
        merged.total_pending = add(merged.total_pending, row.total_pending);
    }
    rows.into_values().collect()
}

/// Sums the transaction rows of several shards.
#[must_use]
pub fn merge_transaction_rows(
    shards: impl IntoIterator<Item = Vec<TransactionRow>>,
) -> Vec<TransactionRow> {
    let mut rows: Tally<(TransactionType, Currency)> = BTreeMap::new();
    for row in shards.into_iter().flatten() {
        let (count, total) = rows
            .entry((row.transaction_type, row.currency))
            .or_insert((0, Decimal::ZERO));
        *count += row.count;
        *total = add(*total, row.total_amount);
    }
    transaction_rows(rows)
}
