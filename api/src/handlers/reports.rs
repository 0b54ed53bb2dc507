//! Reports (decisions.md §4, docs/commerce-api.md "Reports"): each shard tallies its records, the
//! engine's `merge_*` functions sum the shards, and the rows are rendered in key order.

use engine::shard::commerce::report::{
    merge_balance_rows, merge_fee_rows, merge_status_rows, merge_transaction_rows, ReportRange,
};
use engine::Currency;
use hyper::StatusCode;
use serde::Serialize;

use super::call::currency_field;
use super::call::{engine_error, ok, Call, Handled};
use crate::app::SharedApp;
use crate::auth::Subject;
use crate::error::ApiError;
use crate::json::Number;
use crate::routes::Op;
use crate::views::{amount, date, envelope, parse_date};

const DAY_MS: i64 = 86_400_000;
/// Longest range one report covers.
const RANGE_DAYS_MAX: i64 = 366;
/// Range when the request names none: the 30 days up to today.
const DEFAULT_DAYS: i64 = 30;

#[derive(Serialize)]
struct ReportJson<R: Serialize> {
    from: String,
    to: String,
    business_id: u64,
    currency_code: Option<String>,
    rows: Vec<R>,
}

#[derive(Serialize)]
struct FeeRowJson {
    currency_code: String,
    total_fees: Number,
    count: u64,
}

#[derive(Serialize)]
struct StatusRowJson {
    status: &'static str,
    currency_code: String,
    count: u64,
    total_amount: Number,
}

#[derive(Serialize)]
struct BalanceRowJson {
    currency_code: String,
    wallet_count: u64,
    total_balance: Number,
    total_held: Number,
    total_pending: Number,
}

#[derive(Serialize)]
struct TransactionRowJson {
    transaction_type: &'static str,
    currency_code: String,
    count: u64,
    total_amount: Number,
}

/// The report's range and scope from the query: `from`/`to` (inclusive days), `business_id`
/// (the caller's, or any for a platform admin), `currency_code`.
fn range(app: &SharedApp, call: &Call) -> Result<ReportRange, ApiError> {
    let principal = call.principal()?;
    if let Subject::Customer(_) = principal.subject {
        return Err(ApiError::forbidden(format!(
            "this operation needs the {} tier",
            call.op.route().tier.name()
        )));
    }
    principal.require_tier(call.op.route().tier)?;
    let business_id = match call.query("business_id") {
        None => principal.business_id,
        Some(text) => text
            .parse::<u64>()
            .ok()
            .filter(|id| *id > 0)
            .ok_or_else(|| ApiError::invalid_field("business_id", "must be a positive integer"))?,
    };
    if business_id != principal.business_id && !principal.is_platform_admin() {
        return Err(ApiError::forbidden(
            "only a platform admin reports on another business",
        ));
    }
    let day = |name: &str| -> Result<Option<i64>, ApiError> {
        call.query(name)
            .map(|text| {
                parse_date(&text)
                    .ok_or_else(|| ApiError::invalid_field(name, "must be a date YYYY-MM-DD"))
            })
            .transpose()
    };
    let today = app.now_ms().div_euclid(DAY_MS) * DAY_MS;
    let to = day("to")?.unwrap_or(today);
    let from = day("from")?.unwrap_or(to - (DEFAULT_DAYS - 1) * DAY_MS);
    if from > to {
        return Err(ApiError::invalid_field("from", "must not be after to"));
    }
    if (to - from) / DAY_MS >= RANGE_DAYS_MAX {
        return Err(ApiError::invalid_field(
            "to",
            "a report covers at most 366 days",
        ));
    }
    let currency: Option<Currency> = call
        .query("currency_code")
        .map(|code| currency_field("currency_code", &code))
        .transpose()?;
    Ok(ReportRange {
        from_ms: from,
        to_ms: to + DAY_MS - 1,
        business_id: Some(business_id),
        currency,
    })
}

fn answer<R: Serialize>(range: &ReportRange, rows: Vec<R>) -> Handled {
    let data = ReportJson {
        from: date(range.from_ms),
        to: date(range.to_ms),
        business_id: range.business_id.unwrap_or_default(),
        currency_code: range.currency.map(|c| c.code().to_owned()),
        rows,
    };
    ok(StatusCode::OK, &envelope(data, None))
}

/// Every report route.
pub async fn report(app: &SharedApp, call: &Call) -> Handled {
    let range = range(app, call)?;
    let engine = &app.engine;
    match call.op {
        Op::GetFeeReport => {
            let shards = engine
                .read_all(move |s| s.fee_report_checked(&range))
                .await
                .map_err(engine_error)?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|rejection| ApiError::from_rejection(&rejection))?;
            let rows = merge_fee_rows(shards)
                .into_iter()
                .map(|row| FeeRowJson {
                    currency_code: row.currency.code().to_owned(),
                    total_fees: amount(row.total_fees, row.currency),
                    count: row.count,
                })
                .collect();
            answer(&range, rows)
        }
        Op::GetPayoutReport => {
            let shards = engine
                .read_all(move |s| s.payout_report_checked(&range))
                .await
                .map_err(engine_error)?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|rejection| ApiError::from_rejection(&rejection))?;
            let rows = merge_status_rows(shards)
                .into_iter()
                .map(|row| StatusRowJson {
                    status: row.status.as_str(),
                    currency_code: row.currency.code().to_owned(),
                    count: row.count,
                    total_amount: amount(row.total_amount, row.currency),
                })
                .collect();
            answer(&range, rows)
        }
        Op::GetSettlementReport => {
            let shards = engine
                .read_all(move |s| s.settlement_report(&range))
                .await
                .map_err(engine_error)?;
            let rows = merge_status_rows(shards)
                .into_iter()
                .map(|row| StatusRowJson {
                    status: row.status.as_str(),
                    currency_code: row.currency.code().to_owned(),
                    count: row.count,
                    total_amount: amount(row.total_amount, row.currency),
                })
                .collect();
            answer(&range, rows)
        }
        Op::GetBalanceSummary => {
            let (business, currency) = (range.business_id, range.currency);
            let shards = engine
                .read_all(move |s| s.balance_summary(business, currency))
                .await
                .map_err(engine_error)?;
            let rows = merge_balance_rows(shards)
                .into_iter()
                .map(|row| BalanceRowJson {
                    currency_code: row.currency.code().to_owned(),
                    wallet_count: row.wallet_count,
                    total_balance: amount(row.total_balance, row.currency),
                    total_held: amount(row.total_held, row.currency),
                    total_pending: amount(row.total_pending, row.currency),
                })
                .collect();
            answer(&range, rows)
        }
        _ => {
            let shards = engine
                .read_all(move |s| s.transaction_report(&range))
                .await
                .map_err(engine_error)?
                .into_iter()
                .collect::<Result<Vec<_>, _>>()
                .map_err(|rejection| ApiError::from_rejection(&rejection))?;
            let rows = merge_transaction_rows(shards)
                .into_iter()
                .map(|row| TransactionRowJson {
                    transaction_type: row.transaction_type.as_str(),
                    currency_code: row.currency.code().to_owned(),
                    count: row.count,
                    total_amount: amount(row.total_amount, row.currency),
                })
                .collect();
            answer(&range, rows)
        }
    }
}
