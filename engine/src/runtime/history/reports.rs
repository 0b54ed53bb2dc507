//! The engine's report reads: fees, payouts, settlements and transactions from the per-day
//! aggregates ([`super::report_days`]), off the shard threads, once the indexer has filed every
//! record a caller could have seen.

use super::{unavailable, Recount};
use crate::commerce::payout::{PayoutStatus, SettlementStatus};
use crate::runtime::config::EngineError;
use crate::runtime::engine::Engine;
use crate::shard::commerce::report::{
    fee_rows, status_rows_of, transaction_rows_of, DayRows, FeeRow, ReportKind, ReportRange,
    StatusRow, TransactionRow, PAYOUT_STATUSES, SETTLEMENT_STATUSES,
};
use crate::values::error::Rejection;

fn damaged(kind: ReportKind) -> EngineError {
    EngineError::Unavailable(format!(
        "the history store's {kind:?} report rows carry an unknown row code"
    ))
}

impl Engine {
    /// A report's rows summed over the range's days: one key range per business and currency,
    /// O(days x rows), read on a blocking thread. The range must be whole UTC days (the API's
    /// always are: `from`'s first to `to`'s last millisecond); any other is refused, since the
    /// aggregates cannot split a day.
    async fn report_rows(
        &self,
        kind: ReportKind,
        range: &ReportRange,
    ) -> Result<DayRows, EngineError> {
        let days = range
            .whole_days()
            .ok_or(EngineError::Rejected(Rejection::InvalidRequest(
                "a report covers whole UTC days",
            )))?;
        // Everything a caller could have seen is durable (every answer waits for that).
        self.inner
            .history
            .caught_up(self.inner.wal.durable_lsn())
            .await?;
        let store = self.inner.store.clone();
        let (business, currency) = (range.business_id, range.currency);
        tokio::task::spawn_blocking(move || store.report_rows(kind, business, currency, days))
            .await
            .map_err(|error| EngineError::Unavailable(format!("report read: {error}")))?
            .map_err(unavailable)
    }

    /// Fees of the payments completed in the range, per currency.
    pub async fn fee_report(&self, range: &ReportRange) -> Result<Vec<FeeRow>, EngineError> {
        Ok(fee_rows(self.report_rows(ReportKind::Fees, range).await?))
    }

    /// Payouts created in the range, by current status and currency.
    pub async fn payout_report(
        &self,
        range: &ReportRange,
    ) -> Result<Vec<StatusRow<PayoutStatus>>, EngineError> {
        let rows = self.report_rows(ReportKind::Payouts, range).await?;
        status_rows_of(&PAYOUT_STATUSES, rows).ok_or_else(|| damaged(ReportKind::Payouts))
    }

    /// Settlements created in the range, by current status and currency (net totals).
    pub async fn settlement_report(
        &self,
        range: &ReportRange,
    ) -> Result<Vec<StatusRow<SettlementStatus>>, EngineError> {
        let rows = self.report_rows(ReportKind::Settlements, range).await?;
        status_rows_of(&SETTLEMENT_STATUSES, rows).ok_or_else(|| damaged(ReportKind::Settlements))
    }

    /// Client wallet transactions created in the range, by type and currency.
    pub async fn transaction_report(
        &self,
        range: &ReportRange,
    ) -> Result<Vec<TransactionRow>, EngineError> {
        let rows = self.report_rows(ReportKind::Transactions, range).await?;
        transaction_rows_of(rows).ok_or_else(|| damaged(ReportKind::Transactions))
    }

    /// `replay --verify`: the report aggregates equal a recount of the records (the shards'
    /// wallets, payments, payouts and settlements, and every filed transaction). `Ok(Err(_))`
    /// names the first difference; `Ok(Ok(n))` is the number of report rows compared.
    pub async fn verify_reports(&self) -> Result<Result<u64, String>, EngineError> {
        self.inner
            .history
            .caught_up(self.inner.wal.last_lsn())
            .await?;
        let shards = self
            .read_all(|shard| {
                let mut recount = Recount::default();
                recount.shard(shard).map(|()| recount)
            })
            .await?;
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || {
            let mut recount = Recount::default();
            for shard in shards {
                recount.absorb(shard?)?;
            }
            store.recount_filed(&mut recount)?;
            store.verify_reports(&recount)
        })
        .await
        .map_err(|error| EngineError::Unavailable(format!("report verify: {error}")))?
        .map_err(unavailable)
    }
}
