//! Payouts and settlements: the approval life cycle (docs/commerce-api.md "Payouts",
//! "Settlements").
//!
//! Both are kept on their wallet's shard, and their numeric id names that shard
//! (`shard_of(id)`), so a transition is one message to one shard. Lists merge the pages of every
//! shard (or of one, when filtered by wallet).

use engine::commerce::payout::{PayoutStatus, PeriodType, SettlementStatus};
use engine::runtime::WalletScope;
use engine::shard::command::{CreatePayout, CreateSettlement};
use engine::shard::commerce::query::{PayoutFilter, SettlementFilter};
use engine::values::ids::{shard_of, PayoutId, SettlementId};
use engine::{Command, WalletId};
use hyper::StatusCode;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::call::{authorized_wallet, engine_error, ok, run_keyed, Call, Handled};
use super::call::{currency_field, merchant_wallet};
use super::wallets::wallet_field;
use crate::app::SharedApp;
use crate::auth::{Scope, Subject};
use crate::error::ApiError;
use crate::json::deserialize_decimal;
use crate::routes::Op;
use crate::views::{envelope, page, parse_date};
use crate::views::{payout, settlement};

/// The employee making the request (payouts and settlements record who did what).
fn employee_id(call: &Call) -> Result<u64, ApiError> {
    match call.principal()?.subject {
        Subject::Employee(id) => Ok(id),
        Subject::Customer(_) => Err(ApiError::forbidden(format!(
            "this operation needs the {} tier",
            call.op.route().tier.name()
        ))),
    }
}

fn meta_text(value: Option<serde_json::Value>, field: &str) -> Result<Option<String>, ApiError> {
    match value {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value @ serde_json::Value::Object(_)) => Ok(Some(value.to_string())),
        Some(_) => Err(ApiError::invalid_field(field, "must be an object")),
    }
}

/// A required, non-blank text field.
fn required_text(value: Option<String>, field: &str) -> Result<String, ApiError> {
    match value {
        Some(text) if !text.trim().is_empty() => Ok(text),
        _ => Err(ApiError::invalid_field(field, "is required")),
    }
}

/// A positive integer path parameter.
fn id_param(call: &Call, name: &str, what: &str) -> Result<u64, ApiError> {
    call.param(name)
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::not_found(what))
}

/// Checks the caller against the route's tier in the business of the record's wallet.
fn authorize_record(call: &Call, wallet: Option<WalletScope>, what: &str) -> Result<(), ApiError> {
    let wallet = wallet.ok_or_else(|| ApiError::not_found(what))?;
    if let Subject::Customer(_) = call.principal()?.subject {
        return Err(ApiError::not_found(what));
    }
    call.principal()?
        .require(call.op.route().tier, Scope::of_wallet_scope(&wallet))
}

// ----- payouts -----

#[derive(Deserialize)]
struct CreatePayoutBody {
    wallet_id: u64,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    currency_code: String,
    #[serde(default)]
    payout_method: Option<String>,
    #[serde(default)]
    payout_destination: Option<serde_json::Value>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    idempotency_key: Option<String>,
}

/// `POST /payouts`: holds the amount on the wallet until the payout is executed or closed.
pub async fn create_payout(app: &SharedApp, call: &Call) -> Handled {
    let body: CreatePayoutBody = call.json()?;
    let wallet_id = wallet_field(body.wallet_id, "wallet_id")?;
    authorized_wallet(app, call, wallet_id).await?;
    let created_by = employee_id(call)?;
    let key = match body.idempotency_key {
        Some(key) => Some(key),
        None => call.idempotency_key()?,
    };
    let command = Command::CreatePayout(CreatePayout {
        wallet_id,
        amount: body.amount,
        currency: currency_field("currency_code", &body.currency_code)?,
        payout_method: required_text(body.payout_method, "payout_method")?,
        payout_destination: meta_text(body.payout_destination, "payout_destination")?,
        description: body.description,
        idempotency_key: key.clone(),
        created_by,
    });
    run_keyed(app, call, command, key).await
}

/// The wallet of payout `id` (where it is kept never changes).
async fn payout_wallet(app: &SharedApp, id: PayoutId) -> Result<Option<WalletScope>, ApiError> {
    let shard = shard_of(id.0, app.engine.shard_count());
    app.engine
        .peek_shard(shard, move |s| {
            s.payout(id).map(|found| {
                found.and_then(|payout| s.wallet(payout.wallet_id).map(WalletScope::of))
            })
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_rejection(&rejection))
}

#[derive(Deserialize, Default)]
struct TransitionBody {
    #[serde(default)]
    notes: Option<String>,
    #[serde(default)]
    reason: Option<String>,
}

/// Approve, reject, cancel, execute.
pub async fn payout_transition(app: &SharedApp, call: &Call) -> Handled {
    let payout_id = PayoutId(id_param(call, "payoutId", "payout")?);
    authorize_record(call, payout_wallet(app, payout_id).await?, "payout")?;
    let by = employee_id(call)?;
    let body: TransitionBody = call.json()?;
    let command = match call.op {
        Op::ApprovePayout => Command::ApprovePayout {
            payout_id,
            by,
            notes: body.notes,
        },
        Op::RejectPayout => Command::RejectPayout {
            payout_id,
            by,
            reason: required_text(body.reason, "reason")?,
        },
        Op::CancelPayout => Command::CancelPayout { payout_id, by },
        _ => Command::ExecutePayout { payout_id, by },
    };
    run_keyed(app, call, command, call.idempotency_key()?).await
}

/// `GET /payouts/{payoutId}`.
pub async fn get_payout(app: &SharedApp, call: &Call) -> Handled {
    let id = PayoutId(id_param(call, "payoutId", "payout")?);
    authorize_record(call, payout_wallet(app, id).await?, "payout")?;
    let shard = shard_of(id.0, app.engine.shard_count());
    let view = app
        .engine
        .read_shard(shard, move |s| s.payout_view(id))
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_read(&rejection, "payout"))?;
    ok(StatusCode::OK, &envelope(payout(&view), None))
}

/// Filters shared by both lists: `wallet_id` (checked against the caller), `status`,
/// `business_id` (the caller's own; another business is refused).
struct ListScope {
    wallet_id: Option<WalletId>,
    business_id: u64,
    status: Option<String>,
}

async fn list_scope(app: &SharedApp, call: &Call) -> Result<ListScope, ApiError> {
    let principal = call.principal()?;
    if let Subject::Customer(_) = principal.subject {
        return Err(ApiError::forbidden(format!(
            "this operation needs the {} tier",
            call.op.route().tier.name()
        )));
    }
    principal.require(call.op.route().tier, Scope::business(principal.business_id))?;
    let business_id = match call.query("business_id") {
        None => principal.business_id,
        Some(text) => text
            .parse::<u64>()
            .map_err(|_| ApiError::invalid_field("business_id", "must be a positive integer"))?,
    };
    if business_id != principal.business_id {
        return Err(ApiError::forbidden(
            "the resource belongs to another business",
        ));
    }
    let wallet_id = match call.query("wallet_id") {
        None => None,
        Some(text) => {
            let id = text
                .parse::<u64>()
                .ok()
                .filter(|id| *id > 0)
                .ok_or_else(|| {
                    ApiError::invalid_field("wallet_id", "must be a positive integer")
                })?;
            let id = WalletId(id);
            authorized_wallet(app, call, id).await?;
            Some(id)
        }
    };
    Ok(ListScope {
        wallet_id,
        business_id,
        status: call.query("status"),
    })
}

fn payout_status(text: &str) -> Result<PayoutStatus, ApiError> {
    engine::shard::commerce::report::PAYOUT_STATUSES
        .into_iter()
        .find(|s| s.as_str() == text)
        .ok_or_else(|| {
            ApiError::invalid_field(
                "status",
                "must be pending, approved, rejected, cancelled, executed, paid or failed",
            )
        })
}

/// `GET /payouts`.
pub async fn list_payouts(app: &SharedApp, call: &Call) -> Handled {
    let scope = list_scope(app, call).await?;
    let requested = call.page()?;
    let filter = PayoutFilter {
        wallet_id: scope.wallet_id,
        status: scope.status.as_deref().map(payout_status).transpose()?,
        business_id: Some(scope.business_id),
    };
    let paged = app
        .engine
        .payouts_page(filter, requested)
        .await
        .map_err(engine_error)?;
    let records = paged.records.iter().map(payout).collect();
    let data = page(
        records,
        paged.total as usize,
        requested.page(),
        requested.per_page(),
    );
    ok(StatusCode::OK, &envelope(data, None))
}

// ----- settlements -----

#[derive(Deserialize)]
struct SettlementBody {
    wallet_id: u64,
    #[serde(default)]
    period_type: Option<String>,
    period_start: String,
    period_end: String,
    #[serde(default)]
    idempotency_key: Option<String>,
    #[serde(default)]
    notes: Option<String>,
}

fn period_type(text: &str) -> Result<PeriodType, ApiError> {
    [
        PeriodType::Daily,
        PeriodType::Weekly,
        PeriodType::Monthly,
        PeriodType::Custom,
    ]
    .into_iter()
    .find(|p| p.as_str() == text)
    .ok_or_else(|| {
        ApiError::invalid_field("period_type", "must be daily, weekly, monthly or custom")
    })
}

fn date_field(text: &str, field: &str) -> Result<i64, ApiError> {
    parse_date(text).ok_or_else(|| ApiError::invalid_field(field, "must be a date YYYY-MM-DD"))
}

/// `POST /wallet-settlements`.
pub async fn create_settlement(app: &SharedApp, call: &Call) -> Handled {
    create_settlement_for(app, call, None).await
}

/// Creates a settlement of the body's wallet; `merchant` is the merchant of the settlement-request
/// route (the wallet must be one of its wallets, and the period is `custom`).
pub async fn create_settlement_for(app: &SharedApp, call: &Call, merchant: Option<u64>) -> Handled {
    let body: SettlementBody = call.json()?;
    let wallet_id = wallet_field(body.wallet_id, "wallet_id")?;
    let period_type = match merchant {
        Some(merchant_id) => {
            let scope = app
                .engine
                .wallet_scope(wallet_id)
                .await
                .map_err(engine_error)?
                .ok_or_else(|| ApiError::not_found("merchant wallet"))?;
            let currency = scope.currency;
            // The wallet must be the merchant's own.
            merchant_wallet(app, merchant_id, Some(wallet_id.0), currency).await?;
            PeriodType::Custom
        }
        None => {
            authorized_wallet(app, call, wallet_id).await?;
            let text = required_text(body.period_type, "period_type")?;
            period_type(&text)?
        }
    };
    let created_by = employee_id(call)?;
    let key = required_text(body.idempotency_key, "idempotency_key")?;
    let command = Command::CreateSettlement(CreateSettlement {
        wallet_id,
        period_type,
        period_start_ms: date_field(&body.period_start, "period_start")?,
        period_end_ms: date_field(&body.period_end, "period_end")?,
        notes: body.notes,
        idempotency_key: Some(key.clone()),
        created_by,
    });
    run_keyed(app, call, command, Some(key)).await
}

async fn settlement_wallet(
    app: &SharedApp,
    id: SettlementId,
) -> Result<Option<WalletScope>, ApiError> {
    let shard = shard_of(id.0, app.engine.shard_count());
    app.engine
        .peek_shard(shard, move |s| {
            s.settlement(id).map(|found| {
                found.and_then(|settlement| s.wallet(settlement.wallet_id).map(WalletScope::of))
            })
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_rejection(&rejection))
}

/// Approve, reject, cancel, execute.
pub async fn settlement_transition(app: &SharedApp, call: &Call) -> Handled {
    let settlement_id = SettlementId(id_param(call, "settlementId", "settlement")?);
    authorize_record(
        call,
        settlement_wallet(app, settlement_id).await?,
        "settlement",
    )?;
    let by = employee_id(call)?;
    let body: TransitionBody = call.json()?;
    let command = match call.op {
        Op::ApproveSettlement => Command::ApproveSettlement {
            settlement_id,
            by,
            notes: body.notes,
        },
        Op::RejectSettlement => Command::RejectSettlement {
            settlement_id,
            by,
            reason: required_text(body.reason, "reason")?,
        },
        Op::CancelSettlement => Command::CancelSettlement { settlement_id, by },
        _ => Command::ExecuteSettlement { settlement_id, by },
    };
    run_keyed(app, call, command, call.idempotency_key()?).await
}

/// `GET /wallet-settlements/{settlementId}`.
pub async fn get_settlement(app: &SharedApp, call: &Call) -> Handled {
    let id = SettlementId(id_param(call, "settlementId", "settlement")?);
    authorize_record(call, settlement_wallet(app, id).await?, "settlement")?;
    let shard = shard_of(id.0, app.engine.shard_count());
    let view = app
        .engine
        .read_shard(shard, move |s| s.settlement_view(id))
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_read(&rejection, "settlement"))?;
    ok(StatusCode::OK, &envelope(settlement(&view), None))
}

fn settlement_status(text: &str) -> Result<SettlementStatus, ApiError> {
    [
        SettlementStatus::Pending,
        SettlementStatus::Approved,
        SettlementStatus::Rejected,
        SettlementStatus::Cancelled,
        SettlementStatus::Executed,
    ]
    .into_iter()
    .find(|s| s.as_str() == text)
    .ok_or_else(|| {
        ApiError::invalid_field(
            "status",
            "must be pending, approved, rejected, cancelled or executed",
        )
    })
}

/// `GET /wallet-settlements`.
pub async fn list_settlements(app: &SharedApp, call: &Call) -> Handled {
    let scope = list_scope(app, call).await?;
    let requested = call.page()?;
    let filter = SettlementFilter {
        wallet_id: scope.wallet_id,
        status: scope.status.as_deref().map(settlement_status).transpose()?,
        business_id: Some(scope.business_id),
    };
    let paged = app
        .engine
        .settlements_page(filter, requested)
        .await
        .map_err(engine_error)?;
    let records = paged.records.iter().map(settlement).collect();
    let data = page(
        records,
        paged.total as usize,
        requested.page(),
        requested.per_page(),
    );
    ok(StatusCode::OK, &envelope(data, None))
}
