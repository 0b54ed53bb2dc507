//! Merchant routes: merchant wallets, overview, payment links, QR payloads, settlement requests
//! and the merchant transaction list (docs/commerce-api.md "Merchant wallets").
//!
//! A merchant is a business with `is_merchant`; all its wallets have `owner_id` = its id, so they
//! live on one shard (`owner_shard(merchant_id)`), which answers every merchant read in one step.

use std::collections::BTreeMap;

use engine::ledger::view::WalletView;
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::owner_shard;
use engine::shard::command::{CreatePaymentLink, CreateQr, CreateWallet};
use engine::{Command, Currency};
use hyper::StatusCode;
use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use super::call::{currency_field, engine_error, merchant_wallet, ok, run, Call, Handled};
use super::payouts::create_settlement_for;
use crate::app::SharedApp;
use crate::auth::{Scope, Subject};
use crate::error::ApiError;
use crate::json::{deserialize_decimal, deserialize_optional_decimal, Number};
use crate::views::meta_list;
use crate::views::{self, envelope};

/// The `{merchantId}` path parameter.
fn merchant_param(call: &Call) -> Result<u64, ApiError> {
    call.param("merchantId")
        .and_then(|v| v.parse::<u64>().ok())
        .filter(|id| *id > 0)
        .ok_or_else(|| ApiError::not_found("merchant"))
}

/// Checks the caller may act for merchant `merchant_id` at the route's tier, and that the merchant
/// exists: 403 for a customer or another business's employee, 404 for no such merchant.
pub async fn authorized_merchant(
    app: &SharedApp,
    call: &Call,
    merchant_id: u64,
) -> Result<(), ApiError> {
    let principal = call.principal()?;
    if let Subject::Customer(_) = principal.subject {
        return Err(ApiError::forbidden(format!(
            "this operation needs the {} tier",
            call.op.route().tier.name()
        )));
    }
    // Existence first: an unknown merchant is 404 for everyone (business ids are not secret).
    let is_merchant = app
        .engine
        .is_merchant(merchant_id)
        .await
        .map_err(engine_error)?;
    if !is_merchant {
        return Err(ApiError::not_found("merchant"));
    }
    principal.require(call.op.route().tier, Scope::business(merchant_id))
}

#[derive(Deserialize)]
struct CreateBody {
    merchant_id: u64,
    currency_code: String,
    #[serde(default)]
    branch_id: Option<u64>,
}

/// `POST /merchant-wallets`: an operator of the merchant business opens one of its wallets.
pub async fn create_wallet(app: &SharedApp, call: &Call) -> Handled {
    let body: CreateBody = call.json()?;
    authorized_merchant(app, call, body.merchant_id).await?;
    let command = Command::CreateWallet(CreateWallet {
        owner_type: OwnerType::Merchant,
        owner_id: body.merchant_id,
        currency: currency_field("currency_code", &body.currency_code)?,
        wallet_type: WalletType::Primary,
        business_id: body.merchant_id,
        branch_id: body.branch_id.unwrap_or(0),
        meta: None,
    });
    run(app, call, command).await
}

#[derive(Serialize)]
struct BranchJson {
    branch_id: u64,
    balance: Number,
    currency_code: String,
}

#[derive(Serialize)]
struct OverviewJson {
    merchant_id: u64,
    wallets: Vec<views::WalletJson>,
    branches: Vec<BranchJson>,
}

/// `GET /merchant-wallets/{merchantId}/overview`.
pub async fn overview(app: &SharedApp, call: &Call) -> Handled {
    let merchant_id = merchant_param(call)?;
    authorized_merchant(app, call, merchant_id).await?;
    let shard = owner_shard(merchant_id, app.engine.shard_count());
    let wallets: Vec<WalletView> = app
        .engine
        .read_shard(shard, move |s| s.merchant_wallets(merchant_id))
        .await
        .map_err(engine_error)?;
    let mut branches: BTreeMap<(u64, Currency), Decimal> = BTreeMap::new();
    for wallet in &wallets {
        let sum = branches
            .entry((wallet.branch_id, wallet.currency))
            .or_insert(Decimal::ZERO);
        *sum = sum.saturating_add(wallet.balance);
    }
    let data = OverviewJson {
        merchant_id,
        wallets: wallets.iter().map(views::wallet).collect(),
        branches: branches
            .into_iter()
            .map(|((branch_id, currency), balance)| BranchJson {
                branch_id,
                balance: views::amount(balance, currency),
                currency_code: currency.code().to_owned(),
            })
            .collect(),
    };
    ok(StatusCode::OK, &envelope(data, None))
}

#[derive(Deserialize)]
struct LinkBody {
    #[serde(default)]
    wallet_id: Option<u64>,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    currency_code: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    expires_in_minutes: Option<u32>,
}

/// `POST /merchant-wallets/{merchantId}/payment-link`.
pub async fn payment_link(app: &SharedApp, call: &Call) -> Handled {
    let merchant_id = merchant_param(call)?;
    authorized_merchant(app, call, merchant_id).await?;
    let body: LinkBody = call.json()?;
    let currency = currency_field("currency_code", &body.currency_code)?;
    let wallet = merchant_wallet(app, merchant_id, body.wallet_id, currency).await?;
    let command = Command::CreatePaymentLink(CreatePaymentLink {
        merchant_wallet_id: wallet,
        amount: body.amount,
        currency,
        description: body.description,
        expires_in_minutes: body.expires_in_minutes,
    });
    run(app, call, command).await
}

#[derive(Deserialize)]
struct QrBody {
    #[serde(default)]
    wallet_id: Option<u64>,
    #[serde(default, deserialize_with = "deserialize_optional_decimal")]
    amount: Option<Decimal>,
    currency_code: String,
    #[serde(default)]
    branch_id: Option<u64>,
    #[serde(default)]
    expires_in_minutes: Option<u32>,
}

/// `POST /merchant-wallets/{merchantId}/qr-payment`.
pub async fn qr_payment(app: &SharedApp, call: &Call) -> Handled {
    let merchant_id = merchant_param(call)?;
    authorized_merchant(app, call, merchant_id).await?;
    let body: QrBody = call.json()?;
    let currency = currency_field("currency_code", &body.currency_code)?;
    let wallet = merchant_wallet(app, merchant_id, body.wallet_id, currency).await?;
    let command = Command::CreateQr(CreateQr {
        merchant_wallet_id: wallet,
        amount: body.amount,
        currency,
        branch_id: body.branch_id,
        expires_in_minutes: body.expires_in_minutes,
    });
    run(app, call, command).await
}

/// `POST /merchant-wallets/{merchantId}/settlement-request`: a custom-period settlement of one
/// of the merchant's wallets (the body's `idempotency_key`, as the contract says).
pub async fn settlement_request(app: &SharedApp, call: &Call) -> Handled {
    let merchant_id = merchant_param(call)?;
    authorized_merchant(app, call, merchant_id).await?;
    create_settlement_for(app, call, Some(merchant_id)).await
}

/// `GET /merchant-wallets/{merchantId}/transactions`: every wallet of the merchant, newest first,
/// in the `meta` envelope (contract 2.1).
pub async fn transactions(app: &SharedApp, call: &Call) -> Handled {
    let merchant_id = merchant_param(call)?;
    authorized_merchant(app, call, merchant_id).await?;
    let requested = call.page()?;
    let paged = app
        .engine
        .merchant_transactions_page(merchant_id, requested)
        .await
        .map_err(engine_error)?;
    let records = paged.records.iter().map(views::transaction).collect();
    ok(
        StatusCode::OK,
        &meta_list(records, paged.total, requested.page(), requested.per_page()),
    )
}

/// `GET /payment-links/{linkUuid}`: what a payer's app shows before paying a link (its amount,
/// currency, merchant and whether it is still usable). The uuid is the capability: any signed-in
/// caller who has it may read the link.
pub async fn get_payment_link(app: &SharedApp, call: &Call) -> Handled {
    call.principal()?;
    let uuid = call.uuid_param("linkUuid", "payment link")?;
    let shard = app
        .engine
        // A store that cannot answer there routes the read to that shard, which answers
        // unavailable, unless another shard has the link.
        .find(uuid, |s, u| engine::Presence::of(s.payment_link(u)))
        .await
        .map_err(engine_error)?;
    let now_ms = app.now_ms();
    let view = app
        .engine
        .read_shard(shard, move |s| s.payment_link_view(uuid, now_ms))
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_read(&rejection, "payment link"))?;
    ok(
        StatusCode::OK,
        &envelope(crate::views::payment_link(&view), None),
    )
}
