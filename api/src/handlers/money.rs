//! Routes that move money: deposit, withdraw, transfer, refund, reversal, holds.

use engine::runtime::WalletScope;
use engine::shard::command::{CaptureHold, Details, MoneyMove, PlaceHold, Refund, TransferArgs};
use engine::{Command, Currency, Uuid};
use rust_decimal::Decimal;
use serde::Deserialize;

use super::call::{authorized_wallet, engine_error, run, Call, Handled};
use super::wallets::wallet_field;
use crate::app::SharedApp;
use crate::auth::Scope;
use crate::error::ApiError;
use crate::json::{deserialize_decimal, deserialize_optional_decimal};
use crate::routes::Op;

fn currency(code: &str) -> Result<Currency, ApiError> {
    Currency::from_code(code).map_err(|unknown| ApiError::from_rejection(&unknown.into()))
}

fn meta_text(meta: Option<serde_json::Value>) -> Result<Option<String>, ApiError> {
    match meta {
        None | Some(serde_json::Value::Null) => Ok(None),
        Some(value @ serde_json::Value::Object(_)) => Ok(Some(value.to_string())),
        Some(_) => Err(ApiError::invalid_field("meta", "must be an object")),
    }
}

fn uuid_field(text: &str, field: &str) -> Result<Uuid, ApiError> {
    text.parse()
        .map_err(|_| ApiError::invalid_field(field, "must be a UUID"))
}

#[derive(Deserialize)]
struct Movement {
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    #[serde(default)]
    currency_code: Option<String>,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    external_reference: Option<String>,
    #[serde(default)]
    meta: Option<serde_json::Value>,
}

pub async fn deposit_or_withdraw(app: &SharedApp, call: &Call) -> Handled {
    let wallet_id = call.wallet_id()?;
    authorized_wallet(app, call, wallet_id).await?;
    let body: Movement = call.json()?;
    let movement = MoneyMove {
        wallet_id,
        amount: body.amount,
        currency: body.currency_code.as_deref().map(currency).transpose()?,
        details: Details {
            description: body.description,
            external_reference: body.external_reference,
            idempotency_key: call.idempotency_key()?,
            meta: meta_text(body.meta)?,
        },
    };
    let command = if call.op == Op::DepositWallet {
        Command::Deposit(movement)
    } else {
        Command::Withdraw(movement)
    };
    run(app, call, command).await
}

#[derive(Deserialize)]
pub(crate) struct Transfer {
    from_wallet_id: u64,
    to_wallet_id: u64,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    currency_code: String,
    #[serde(default)]
    description: Option<String>,
    /// Batch items only: the client's reference, kept as the transaction's external reference.
    #[serde(default)]
    pub(crate) reference: Option<String>,
}

pub async fn transfer(app: &SharedApp, call: &Call) -> Handled {
    let body: Transfer = call.json()?;
    let args = transfer_args(app, call, body, call.idempotency_key()?).await?;
    run(app, call, Command::Transfer(args)).await
}

/// A transfer request checked and turned into its command: the one path of `POST /transfers`
/// and of every item of `POST /transfers/batch` (validation, scope, who may move money out).
pub(crate) async fn transfer_args(
    app: &SharedApp,
    call: &Call,
    body: Transfer,
    idempotency_key: Option<String>,
) -> Result<TransferArgs, ApiError> {
    let source = wallet_field(body.from_wallet_id, "from_wallet_id")?;
    let target = wallet_field(body.to_wallet_id, "to_wallet_id")?;
    let wallet = authorized_wallet(app, call, source).await?;
    call.principal()?.require_money_out(&wallet)?;
    Ok(TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: body.amount,
        currency: currency(&body.currency_code)?,
        details: Details {
            description: body.description,
            external_reference: None,
            idempotency_key,
            meta: None,
        },
    })
}

/// The wallet holding transaction `uuid`, checked against the caller's scope.
async fn wallet_of_transaction(
    app: &SharedApp,
    call: &Call,
    uuid: Uuid,
) -> Result<WalletScope, ApiError> {
    let shard = app
        .engine
        .find(uuid, |s, u| s.holds_transaction(u))
        .await
        .map_err(engine_error)?;
    let wallet = app
        .engine
        .peek_shard(shard, move |s| {
            let found = s.locate_transaction(uuid)?;
            Ok(found.and_then(|(wallet_id, _)| s.wallet(wallet_id).map(WalletScope::of)))
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection: engine::Rejection| ApiError::from_rejection(&rejection))?
        .ok_or_else(|| ApiError::not_found("transaction"))?;
    call.principal()?
        .require(call.op.route().tier, Scope::of_wallet_scope(&wallet))?;
    Ok(wallet)
}

/// Every client wallet a reversal of transaction `uuid` would post to, each checked against the
/// caller's scope (decisions.md §2: a reversal touches every wallet of the reversed
/// transaction, so the wallet that holds it is not enough; issue 17). The legs of a posting all
/// live on the shard of the transaction (a cross-shard transfer's sides are not reversible).
async fn wallets_of_posting(
    app: &SharedApp,
    call: &Call,
    uuid: Uuid,
) -> Result<Vec<WalletScope>, ApiError> {
    let shard = app
        .engine
        .find(uuid, |s, u| s.holds_transaction(u))
        .await
        .map_err(engine_error)?;
    let wallets = app
        .engine
        .peek_shard(shard, move |s| {
            let Some((wallet_id, transaction_id)) = s.locate_transaction(uuid)? else {
                return Ok(None);
            };
            let Some(holder) = s.wallet(wallet_id) else {
                return Ok(None);
            };
            let Some(transaction) = s.transaction_record(holder, transaction_id)? else {
                return Ok(None);
            };
            let mut wallets = vec![WalletScope::of(holder)];
            for leg in &transaction.legs {
                let Some(wallet) = s.wallet(leg.wallet_id) else {
                    continue;
                };
                if !wallet.is_system() && wallets.iter().all(|w| w.wallet_id != wallet.id()) {
                    wallets.push(WalletScope::of(wallet));
                }
            }
            Ok(Some(wallets))
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection: engine::Rejection| ApiError::from_rejection(&rejection))?
        .ok_or_else(|| ApiError::not_found("transaction"))?;
    let principal = call.principal()?;
    for wallet in &wallets {
        principal.require(call.op.route().tier, Scope::of_wallet_scope(wallet))?;
    }
    Ok(wallets)
}

#[derive(Deserialize)]
struct RefundBody {
    original_transaction_uuid: String,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn refund(app: &SharedApp, call: &Call) -> Handled {
    let body: RefundBody = call.json()?;
    let uuid = uuid_field(&body.original_transaction_uuid, "original_transaction_uuid")?;
    wallet_of_transaction(app, call, uuid).await?;
    let command = Command::Refund(Refund {
        original_transaction_uuid: uuid,
        amount: body.amount,
        reason: body.reason,
        details: Details {
            idempotency_key: call.idempotency_key()?,
            ..Details::default()
        },
    });
    run(app, call, command).await
}

#[derive(Deserialize)]
struct ReverseBody {
    transaction_uuid: String,
    #[serde(default)]
    reason: Option<String>,
}

pub async fn reverse(app: &SharedApp, call: &Call) -> Handled {
    let body: ReverseBody = call.json()?;
    let uuid = uuid_field(&body.transaction_uuid, "transaction_uuid")?;
    let reason = body
        .reason
        .filter(|r| !r.trim().is_empty())
        .ok_or_else(|| ApiError::invalid_field("reason", "is required"))?;
    wallets_of_posting(app, call, uuid).await?;
    run(
        app,
        call,
        Command::Reverse {
            transaction_uuid: uuid,
            reason,
        },
    )
    .await
}

#[derive(Deserialize)]
struct HoldBody {
    wallet_id: u64,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    currency_code: String,
    #[serde(default)]
    reason: Option<String>,
    #[serde(default)]
    expiry_minutes: Option<u32>,
}

pub async fn place_hold(app: &SharedApp, call: &Call) -> Handled {
    let body: HoldBody = call.json()?;
    let wallet_id = wallet_field(body.wallet_id, "wallet_id")?;
    authorized_wallet(app, call, wallet_id).await?;
    if let Some(minutes) = body.expiry_minutes {
        if !(1..=10_080).contains(&minutes) {
            return Err(ApiError::invalid_field(
                "expiry_minutes",
                "must be between 1 and 10080",
            ));
        }
    }
    let command = Command::PlaceHold(PlaceHold {
        wallet_id,
        amount: body.amount,
        currency: currency(&body.currency_code)?,
        reason: body.reason,
        expiry_minutes: body.expiry_minutes,
    });
    run(app, call, command).await
}

#[derive(Deserialize, Default)]
struct CaptureBody {
    #[serde(default, deserialize_with = "deserialize_optional_decimal")]
    amount: Option<Decimal>,
}

pub async fn close_hold(app: &SharedApp, call: &Call) -> Handled {
    let uuid = call.uuid_param("holdUuid", "hold")?;
    let shard = app
        .engine
        .find(uuid, |s, u| s.holds_hold(u))
        .await
        .map_err(engine_error)?;
    let wallet = app
        .engine
        .peek_shard(shard, move |s| {
            let found = s.locate_hold(uuid)?;
            Ok(found.and_then(|(wallet_id, _)| s.wallet(wallet_id).map(WalletScope::of)))
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection: engine::Rejection| ApiError::from_rejection(&rejection))?
        .ok_or_else(|| ApiError::not_found("hold"))?;
    call.principal()?
        .require(call.op.route().tier, Scope::of_wallet_scope(&wallet))?;
    let command = if call.op == Op::ReleaseHold {
        Command::ReleaseHold { hold_uuid: uuid }
    } else {
        let body: CaptureBody = call.json()?;
        Command::CaptureHold(CaptureHold {
            hold_uuid: uuid,
            amount: body.amount,
            counter_wallet_id: None,
            details: Details {
                idempotency_key: call.idempotency_key()?,
                ..Details::default()
            },
        })
    };
    run(app, call, command).await
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn amounts_must_be_json_numbers() {
        let ok: Movement = serde_json::from_str(r#"{"amount": 10.50}"#).unwrap();
        assert_eq!(ok.amount.to_string(), "10.50");
        assert!(serde_json::from_str::<Movement>(r#"{"amount": "10.50"}"#).is_err());
    }
}
