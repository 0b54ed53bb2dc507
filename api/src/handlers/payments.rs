//! Payment routes: initiate, confirm, cancel, refund, status (docs/commerce-api.md "Payments").
//!
//! Every answer is the payment envelope. A refusal by the engine (409/422) is a PaymentResult with
//! `success: false`; authentication, permission and "no such payment" keep the standard error
//! body, since there is no payment to describe. A retry under the same Idempotency-Key answers the
//! first answer with `is_duplicate: true`.

use engine::commerce::payment::PaymentProvider;
use engine::runtime::{owner_shard, EngineError, WalletScope};
use engine::shard::command::{InitiatePayment, RefundPayment};
use engine::{Command, Uuid, WalletId};
use hyper::StatusCode;
use rust_decimal::Decimal;
use serde::Deserialize;

use super::call::{currency_field, merchant_wallet};
use super::call::{engine_error, idempotency_key, Call, Handled, REQUEST_IN_PROGRESS};
use super::wallets::wallet_field;
use crate::app::SharedApp;
use crate::auth::{Scope, Subject, Tier};
use crate::error::ApiError;
use crate::json::{deserialize_decimal, deserialize_optional_decimal};
use crate::routes::Op;
use crate::views::{
    mark_duplicate, payment_answer, payment_refusal, refusal_from_error, with_payment_uuid,
};
use crate::views::{render_outcome, Rendered};

/// Runs a payment command: the payment envelope for success and refusal alike.
async fn run_payment(
    app: &SharedApp,
    call: &Call,
    command: Command,
    path_uuid: Option<Uuid>,
) -> Handled {
    let mut rendered = match call.idempotency_key()? {
        None => match app.engine.execute(command).await {
            Ok(outcome) => render_outcome(call.op.index(), &outcome),
            Err(EngineError::Rejected(rejection)) => payment_refusal(&rejection),
            Err(error) => return Err(engine_error(error)),
        },
        Some(key) => {
            let key = idempotency_key(call, &command, key)?;
            let reply = app
                .engine
                .execute_idempotent(command, key)
                .await
                .map_err(engine_error)?;
            let mut rendered =
                Rendered::from_stored(&reply.response).ok_or_else(ApiError::internal)?;
            if reply.replayed {
                mark_duplicate(&mut rendered);
            }
            return finish(rendered, path_uuid, reply.replayed);
        }
    };
    if let Some(uuid) = &path_uuid {
        with_payment_uuid(&mut rendered, uuid);
    }
    Ok((rendered, false))
}

fn finish(mut rendered: Rendered, path_uuid: Option<Uuid>, replayed: bool) -> Handled {
    if let Some(uuid) = &path_uuid {
        with_payment_uuid(&mut rendered, uuid);
    }
    Ok((rendered, replayed))
}

#[derive(Deserialize)]
struct InitiateBody {
    merchant_id: u64,
    wallet_id: u64,
    #[serde(deserialize_with = "deserialize_decimal")]
    amount: Decimal,
    currency_code: String,
    #[serde(default)]
    description: Option<String>,
    #[serde(default)]
    payment_link_uuid: Option<String>,
    #[serde(default)]
    metadata: Option<serde_json::Value>,
    #[serde(default)]
    provider: Option<String>,
}

/// Answers a refused payment request in the payment envelope: every 409 and 422 of these routes
/// (bad input included), so clients read one shape (decisions.md §4). 401, 403, 404 and 5xx keep
/// the standard error body, and so does `409 request_in_progress`: it says nothing about the
/// payment (the same request is still running), only "retry shortly", as on every other route.
pub fn in_envelope(handled: Handled, path_uuid: Option<Uuid>) -> Handled {
    match handled {
        Err(error) if is_payment_refusal(&error) => {
            let mut rendered = refusal_from_error(&error);
            if let Some(uuid) = &path_uuid {
                with_payment_uuid(&mut rendered, uuid);
            }
            Ok((rendered, false))
        }
        other => other,
    }
}

/// Whether `error` is a refusal the payment envelope reports (see [`in_envelope`]).
fn is_payment_refusal(error: &ApiError) -> bool {
    matches!(
        error.status,
        StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY
    ) && error.code != REQUEST_IN_PROGRESS
}

/// `POST /payments/initiate`: the caller pays from `wallet_id` (their own wallet, or one of
/// their business's) to the merchant.
pub async fn initiate(app: &SharedApp, call: &Call) -> Handled {
    in_envelope(initiate_payment(app, call).await, None)
}

async fn initiate_payment(app: &SharedApp, call: &Call) -> Handled {
    let body: InitiateBody = call.json()?;
    let payer = wallet_field(body.wallet_id, "wallet_id")?;
    let payer_wallet = super::call::authorized_wallet(app, call, payer).await?;
    call.principal()?.require_money_out(&payer_wallet)?;
    let currency = currency_field("currency_code", &body.currency_code)?;
    let provider = match body.provider.as_deref() {
        None | Some("wallet") => PaymentProvider::Wallet,
        Some("sandbox") => PaymentProvider::Sandbox,
        Some(_) => {
            return Err(ApiError::invalid_field(
                "provider",
                "must be wallet or sandbox",
            ))
        }
    };
    let metadata = match body.metadata {
        None | Some(serde_json::Value::Null) => None,
        Some(value @ serde_json::Value::Object(_)) => Some(value.to_string()),
        Some(_) => return Err(ApiError::invalid_field("metadata", "must be an object")),
    };
    let merchant_id = body.merchant_id;
    let is_merchant = app
        .engine
        .is_merchant(merchant_id)
        .await
        .map_err(engine_error)?;
    if !is_merchant {
        return Err(ApiError::not_found("merchant"));
    }
    let link = match body.payment_link_uuid.as_deref() {
        None => None,
        Some(text) => Some(
            text.parse::<Uuid>()
                .map_err(|_| ApiError::invalid_field("payment_link_uuid", "must be a UUID"))?,
        ),
    };
    // A link names its wallet; otherwise the merchant's wallet in the currency.
    let merchant_wallet_id = match link {
        Some(uuid) => link_wallet(app, merchant_id, uuid).await?,
        None => merchant_wallet(app, merchant_id, None, currency).await?,
    };
    let command = Command::InitiatePayment(InitiatePayment {
        merchant_id,
        merchant_wallet_id,
        payer_wallet_id: payer,
        amount: body.amount,
        currency,
        fee: app.fees.rule(currency),
        provider,
        description: body.description,
        metadata,
        idempotency_key: call.idempotency_key()?,
        payment_link_uuid: link,
    });
    run_payment(app, call, command, None).await
}

/// The merchant wallet of payment link `uuid` of `merchant_id` (links live on the merchant's
/// shard).
async fn link_wallet(app: &SharedApp, merchant_id: u64, uuid: Uuid) -> Result<WalletId, ApiError> {
    let shard = owner_shard(merchant_id, app.engine.shard_count());
    app.engine
        .peek_shard(shard, move |s| {
            s.payment_link(uuid).map(|found| {
                found
                    .filter(|link| link.merchant_id == merchant_id)
                    .map(|link| link.merchant_wallet_id)
            })
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_rejection(&rejection))?
        .ok_or_else(|| ApiError::not_found("payment link"))
}

/// What a permission check needs of a payment; these facts never change once it exists.
struct PaymentParties {
    merchant_id: u64,
    payer: Option<WalletScope>,
}

async fn parties(app: &SharedApp, uuid: Uuid) -> Result<PaymentParties, ApiError> {
    let shard = app
        .engine
        .find(uuid, |s, u| s.holds_payment(u))
        .await
        .map_err(engine_error)?;
    let (merchant_id, payer_wallet) = app
        .engine
        .peek_shard(shard, move |s| {
            s.payment(uuid)
                .map(|found| found.map(|p| (p.merchant_id, p.payer_wallet_id)))
        })
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_rejection(&rejection))?
        .ok_or_else(|| ApiError::not_found("payment"))?;
    let payer = app
        .engine
        .wallet_scope(payer_wallet)
        .await
        .map_err(engine_error)?;
    Ok(PaymentParties { merchant_id, payer })
}

/// The payer side (the customer who owns the wallet, or an employee of its business) always may;
/// the merchant side may when `merchant_tier` is given and the caller holds it in the merchant.
fn authorize(
    call: &Call,
    parties: &PaymentParties,
    merchant_tier: Option<Tier>,
) -> Result<(), ApiError> {
    let principal = call.principal()?;
    if let Some(tier) = merchant_tier {
        if matches!(principal.subject, Subject::Employee(_))
            && principal.business_id == parties.merchant_id
        {
            return principal.require(tier, Scope::business(parties.merchant_id));
        }
    }
    let payer = parties
        .payer
        .as_ref()
        .ok_or_else(|| ApiError::not_found("payment"))?;
    principal
        .require(Tier::Authenticated, Scope::of_wallet_scope(payer))
        .map_err(|error| {
            if error.status == StatusCode::NOT_FOUND {
                ApiError::not_found("payment")
            } else {
                error
            }
        })?;
    if call.op == Op::RefundPayment {
        // The payer side may see the payment, but only the merchant refunds it.
        return Err(ApiError::forbidden(
            "only the merchant's merchant_finance staff refund a payment",
        ));
    }
    if matches!(call.op, Op::ConfirmPayment | Op::CancelPayment) {
        // Confirming or cancelling on the payer's side moves (or frees) the payer's money: only
        // the roles that may move money out of the wallet (decisions.md §2).
        principal.require_money_out(payer)?;
    }
    Ok(())
}

#[derive(Deserialize, Default)]
struct RefundBody {
    #[serde(default, deserialize_with = "deserialize_optional_decimal")]
    amount: Option<Decimal>,
    #[serde(default)]
    reason: Option<String>,
}

/// Confirm, cancel and refund: one transition of the payment named by the path.
pub async fn transition(app: &SharedApp, call: &Call) -> Handled {
    let uuid = call.uuid_param("paymentUuid", "payment")?;
    in_envelope(transition_payment(app, call, uuid).await, Some(uuid))
}

async fn transition_payment(app: &SharedApp, call: &Call, uuid: Uuid) -> Handled {
    let parties = parties(app, uuid).await?;
    let command = match call.op {
        Op::ConfirmPayment => {
            authorize(call, &parties, None)?;
            Command::ConfirmPayment { payment_uuid: uuid }
        }
        Op::CancelPayment => {
            authorize(call, &parties, Some(Tier::Merchant))?;
            Command::CancelPayment { payment_uuid: uuid }
        }
        _ => {
            authorize(call, &parties, Some(Tier::MerchantFinance))?;
            let body: RefundBody = call.json()?;
            Command::RefundPayment(RefundPayment {
                payment_uuid: uuid,
                amount: body.amount,
                reason: body.reason,
            })
        }
    };
    run_payment(app, call, command, Some(uuid)).await
}

/// `GET /payments/{paymentUuid}/status`.
pub async fn status(app: &SharedApp, call: &Call) -> Handled {
    let uuid = call.uuid_param("paymentUuid", "payment")?;
    let parties = parties(app, uuid).await?;
    authorize(call, &parties, Some(Tier::Merchant))?;
    let shard = app
        .engine
        .find(uuid, |s, u| s.holds_payment(u))
        .await
        .map_err(engine_error)?;
    let view = app
        .engine
        .read_shard(shard, move |s| s.payment_view(uuid))
        .await
        .map_err(engine_error)?
        .map_err(|rejection| ApiError::from_read(&rejection, "payment"))?;
    Ok((payment_answer(StatusCode::OK, &view), false))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]

    use engine::runtime::EngineError;
    use hyper::StatusCode;

    use super::in_envelope;
    use crate::handlers::call::engine_error;

    /// Issue 16, item 11: a key still in flight on a payment route is the standard error body
    /// (409 `request_in_progress`), as on every other route; before, it was rendered as a
    /// PaymentResult with `status: "refused"`. A business refusal keeps the payment envelope.
    #[test]
    fn issue_16_request_in_progress_on_a_payment_route_is_the_standard_error() {
        let in_flight = in_envelope(Err(engine_error(EngineError::IdempotencyInFlight)), None);
        let error = in_flight.err().unwrap();
        assert_eq!(error.status, StatusCode::CONFLICT);
        assert_eq!(error.code, "request_in_progress");
        let body: serde_json::Value = serde_json::from_slice(&error.body("rid")).unwrap();
        assert_eq!(body["status"], serde_json::json!(false));
        assert_eq!(body["error"]["code"], "request_in_progress");
        assert_eq!(body["request_id"], "rid");

        let refused = in_envelope(
            Err(engine_error(EngineError::Rejected(
                engine::Rejection::WalletFrozen,
            ))),
            None,
        );
        let (rendered, replayed) = refused.unwrap();
        assert!(!replayed);
        assert_eq!(rendered.status, StatusCode::CONFLICT);
        let body: serde_json::Value = serde_json::from_slice(&rendered.body).unwrap();
        assert_eq!(body["success"], serde_json::json!(false));
        assert_eq!(body["data"]["status"], "refused");
    }
}
