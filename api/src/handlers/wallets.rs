//! Wallet routes: create, list, read, balance, freeze, transactions, ledger, statement,
//! integrity, holds.

use engine::ledger::view::WalletView;
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::shard::command::CreateWallet;
use engine::{Command, Currency, Outcome, WalletId};
use hyper::StatusCode;
use serde::Deserialize;

use super::call::{authorized_wallet, engine_error, not_found_as, ok, run, Call, Handled};
use crate::app::SharedApp;
use crate::auth::{Subject, PLATFORM_BUSINESS_ID};
use crate::error::ApiError;
use crate::views::{self, envelope, page};

fn currency(field: &str, code: &str) -> Result<Currency, ApiError> {
    Currency::from_code(code).map_err(|_| {
        let mut error = ApiError::unprocessable(
            "unknown_currency",
            format!("{field}: {code:?} is not an ISO 4217 currency we support"),
        );
        error.add_field(field, "unknown currency");
        error
    })
}

#[derive(Deserialize)]
struct CreateBody {
    owner_type: String,
    owner_id: u64,
    currency_code: String,
    #[serde(default)]
    wallet_type: Option<String>,
    #[serde(default)]
    business_id: Option<u64>,
    #[serde(default)]
    branch_id: Option<u64>,
    #[serde(default)]
    meta: Option<serde_json::Value>,
}

pub async fn create(app: &SharedApp, call: &Call) -> Handled {
    let principal = call.principal()?;
    principal.require_tier(call.op.route().tier)?;
    let body: CreateBody = call.json()?;
    let owner_type = OwnerType::parse_client(&body.owner_type).ok_or_else(|| {
        ApiError::invalid_field("owner_type", "must be customer, merchant or business")
    })?;
    let wallet_type = match &body.wallet_type {
        None => WalletType::Primary,
        Some(name) => WalletType::parse_client(name).ok_or_else(|| {
            ApiError::invalid_field("wallet_type", "must be primary, savings or escrow")
        })?,
    };
    let currency = currency("currency_code", &body.currency_code)?;
    // Customer wallets belong to the platform business; others to the caller's business.
    let default_business = if owner_type == OwnerType::Customer {
        PLATFORM_BUSINESS_ID
    } else {
        principal.business_id
    };
    let business_id = body.business_id.unwrap_or(default_business);
    principal.require(
        call.op.route().tier,
        crate::auth::Scope::business(business_id),
    )?;
    check_owner(app, owner_type, body.owner_id, business_id).await?;
    let meta = match body.meta {
        None | Some(serde_json::Value::Null) => None,
        Some(value @ serde_json::Value::Object(_)) => Some(value.to_string()),
        Some(_) => return Err(ApiError::invalid_field("meta", "must be an object")),
    };
    let command = Command::CreateWallet(CreateWallet {
        owner_type,
        owner_id: body.owner_id,
        currency,
        wallet_type,
        business_id,
        branch_id: body.branch_id.unwrap_or(0),
        meta,
    });
    run(app, call, command).await
}

/// The owner must exist: a registered customer (wallets of business 1), or a business.
async fn check_owner(
    app: &SharedApp,
    owner_type: OwnerType,
    owner_id: u64,
    business_id: u64,
) -> Result<(), ApiError> {
    let exists = app
        .engine
        .read_directory(move |d| match owner_type {
            OwnerType::Customer => {
                d.customer(owner_id).is_some() && business_id == PLATFORM_BUSINESS_ID
            }
            OwnerType::Merchant => {
                d.business(owner_id).is_some_and(|b| b.is_merchant) && business_id == owner_id
            }
            _ => d.business(owner_id).is_some() && business_id == owner_id,
        })
        .await
        .map_err(engine_error)?;
    if exists {
        Ok(())
    } else {
        Err(ApiError::unprocessable(
            "unknown_owner",
            format!(
                "no {} {owner_id} that business {business_id} may open a wallet for",
                owner_type.as_str()
            ),
        ))
    }
}

#[derive(Deserialize)]
struct CreateForCustomer {
    customer_id: u64,
    #[serde(default)]
    currency_code: Option<String>,
}

pub async fn create_for_customer(app: &SharedApp, call: &Call) -> Handled {
    let principal = call.principal()?;
    principal.require(
        call.op.route().tier,
        crate::auth::Scope::business(PLATFORM_BUSINESS_ID),
    )?;
    let body: CreateForCustomer = call.json()?;
    let code = body
        .currency_code
        .as_deref()
        .unwrap_or(engine::runtime::recovery::PRIMARY_CURRENCY);
    let currency = currency("currency_code", code)?;
    check_owner(
        app,
        OwnerType::Customer,
        body.customer_id,
        PLATFORM_BUSINESS_ID,
    )
    .await?;
    let command = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Customer,
        owner_id: body.customer_id,
        currency,
        wallet_type: WalletType::Primary,
        business_id: PLATFORM_BUSINESS_ID,
        branch_id: 0,
        meta: None,
    });
    run(app, call, command).await
}

pub async fn list(app: &SharedApp, call: &Call) -> Handled {
    let principal = call.principal()?;
    let requested = call.page()?;
    let mut wallets: Vec<WalletView> = match principal.subject {
        Subject::Customer(id) => {
            let shard = engine::runtime::owner_shard(id, app.engine.shard_count());
            app.engine
                .read_shard(shard, move |s| {
                    s.wallets()
                        .filter(|w| w.owner_type() == OwnerType::Customer && w.owner_id() == id)
                        .map(WalletView::of)
                        .collect()
                })
                .await
                .map_err(engine_error)?
        }
        Subject::Employee(_) => {
            let business_id = principal.business_id;
            app.engine
                .read_all(move |s| {
                    s.wallets()
                        .filter(|w| w.business_id() == business_id && !w.wallet_type().is_system())
                        .map(WalletView::of)
                        .collect::<Vec<_>>()
                })
                .await
                .map_err(engine_error)?
                .into_iter()
                .flatten()
                .collect()
        }
    };
    wallets.sort_by_key(|w| w.id.0);
    let total = wallets.len();
    let records = wallets
        .iter()
        .skip(requested.offset())
        .take(requested.per_page() as usize)
        .map(views::wallet)
        .collect();
    ok(
        StatusCode::OK,
        &envelope(
            page(records, total, requested.page(), requested.per_page()),
            None,
        ),
    )
}

pub async fn get(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let wallet = app
        .engine
        .read_wallet(id, move |s| s.wallet_view(id))
        .await
        .map_err(engine_error)?
        .map_err(not_found_as("wallet"))?;
    ok(StatusCode::OK, &envelope(views::wallet(&wallet), None))
}

pub async fn balance(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let view = app
        .engine
        .read_wallet(id, move |s| s.balance(id))
        .await
        .map_err(engine_error)?
        .map_err(not_found_as("wallet"))?;
    ok(
        StatusCode::OK,
        &envelope(views::balance(&view, app.now_ms()), None),
    )
}

pub async fn freeze(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let command = if call.op == crate::routes::Op::FreezeWallet {
        Command::FreezeWallet { wallet_id: id }
    } else {
        Command::UnfreezeWallet { wallet_id: id }
    };
    run(app, call, command).await
}

pub async fn transactions(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let requested = call.page()?;
    let paged = app.engine.transactions_page(id, requested).await;
    render_page(paged, requested, views::transaction)
}

/// Renders one page of a wallet's history (read from the store once it covers everything the
/// caller could have seen) in the paginated envelope.
fn render_page<T, J>(
    paged: Result<Result<engine::Paged<T>, engine::Rejection>, engine::runtime::EngineError>,
    requested: engine::Page,
    render: impl Fn(&T) -> J,
) -> Handled
where
    J: serde::Serialize,
{
    let paged = paged
        .map_err(engine_error)?
        .map_err(not_found_as("wallet"))?;
    let records = paged.records.iter().map(render).collect();
    let data = page(
        records,
        paged.total as usize,
        requested.page(),
        requested.per_page(),
    );
    ok(StatusCode::OK, &envelope(data, None))
}

/// `from` and `to` (YYYY-MM-DD, inclusive) as a millisecond range.
fn date_range(call: &Call) -> Result<(Option<i64>, Option<i64>), ApiError> {
    let parse = |name: &str| -> Result<Option<i64>, ApiError> {
        match call.query(name) {
            None => Ok(None),
            Some(text) => views::parse_date(&text)
                .map(Some)
                .ok_or_else(|| ApiError::invalid_field(name, "must be a date YYYY-MM-DD")),
        }
    };
    let from = parse("from")?;
    let to = parse("to")?.map(|start| start + 86_400_000 - 1);
    if let (Some(from), Some(to)) = (from, to) {
        if from > to {
            return Err(ApiError::invalid_field("from", "must not be after to"));
        }
    }
    Ok((from, to))
}

/// The ledger (finance) and the statement (the owner too): entries newest first.
pub async fn ledger(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let requested = call.page()?;
    let (from, to) = date_range(call)?;
    let paged = app.engine.ledger_page(id, requested, from, to).await;
    render_page(paged, requested, views::entry)
}

pub async fn verify(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    let wallet = authorized_wallet(app, call, id).await?;
    match app
        .engine
        .verify_integrity(id)
        .await
        .map_err(engine_error)?
    {
        Outcome::Integrity(report) => ok(
            StatusCode::OK,
            &envelope(views::integrity(&report, wallet.currency), None),
        ),
        _ => Err(ApiError::internal()),
    }
}

pub async fn holds(app: &SharedApp, call: &Call) -> Handled {
    let id = call.wallet_id()?;
    authorized_wallet(app, call, id).await?;
    let requested = call.page()?;
    let paged = app.engine.holds_page(id, requested).await;
    render_page(paged, requested, views::hold)
}

/// The wallet id of a JSON body field, or 422.
pub fn wallet_field(value: u64, field: &str) -> Result<WalletId, ApiError> {
    if value == 0 {
        return Err(ApiError::invalid_field(field, "must be a wallet id"));
    }
    Ok(WalletId(value))
}
