//! JSON shapes of the commerce resources (contract 2.6–2.8, docs/commerce-api.md): PaymentResult
//! and its envelope, payouts, settlements, payment links, QR payloads.
//!
//! Like [`crate::views`], every struct is serialized straight to bytes with exact amounts; client
//! JSON (payment `metadata`, `payout_destination`) is passed through as raw text, so numbers in it
//! stay exactly as the client wrote them.

use engine::commerce_view::{
    PaymentLinkView, PaymentView, PayoutAttemptView, PayoutView, QrView, SettlementView,
};
use engine::payment::PaymentStatus;
use engine::payout::{SettlementItem, Stamp};
use engine::{Currency, Rejection};
use hyper::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;

use crate::error::ApiError;
use crate::json::Number;
use crate::views::{amount, date, timestamp, Rendered};

/// Client JSON text as a raw JSON value; `None` when absent (or, defensively, not JSON).
fn raw_json(text: Option<&str>) -> Option<Box<RawValue>> {
    text.and_then(|text| RawValue::from_string(text.to_owned()).ok())
}

fn empty_object() -> Box<RawValue> {
    RawValue::from_string("{}".to_owned()).unwrap_or_else(|_| unreachable!("{{}} is JSON"))
}

/// Contract 2.8 plus the fields of docs/commerce-api.md. `is_duplicate` comes before every
/// field that holds client text, so a replay can flip it in the stored bytes (see
/// [`mark_duplicate`]).
#[derive(Serialize)]
pub struct PaymentResultJson {
    success: bool,
    transaction_id: String,
    status: &'static str,
    is_duplicate: bool,
    error_code: &'static str,
    message: String,
    provider: &'static str,
    provider_ref: String,
    amount: Number,
    currency: String,
    fee_amount: Number,
    net_amount: Number,
    refunded_amount: Number,
    merchant_id: u64,
    merchant_wallet_id: u64,
    payer_wallet_id: u64,
    payment_link_uuid: Option<String>,
    created_at: String,
    completed_at: Option<String>,
    description: Option<String>,
    metadata: Box<RawValue>,
}

fn payment_message(status: PaymentStatus) -> &'static str {
    match status {
        PaymentStatus::Pending => "Payment initiated; it completes on confirmation",
        PaymentStatus::Completed => "Payment completed",
        PaymentStatus::Cancelled => "Payment cancelled",
        PaymentStatus::Failed => "Payment failed",
        PaymentStatus::PartiallyRefunded => "Payment partially refunded",
        PaymentStatus::Refunded => "Payment refunded",
    }
}

pub fn payment_result(view: &PaymentView) -> PaymentResultJson {
    let currency = view.currency;
    PaymentResultJson {
        success: true,
        transaction_id: view.uuid.to_string(),
        status: view.status.as_str(),
        is_duplicate: false,
        error_code: "",
        message: payment_message(view.status).to_owned(),
        provider: view.provider.as_str(),
        provider_ref: view.provider_ref.clone(),
        amount: amount(view.amount, currency),
        currency: currency.code().to_owned(),
        fee_amount: amount(view.fee_amount, currency),
        net_amount: amount(view.net_amount, currency),
        refunded_amount: amount(view.refunded_amount, currency),
        merchant_id: view.merchant_id,
        merchant_wallet_id: view.merchant_wallet_id.0,
        payer_wallet_id: view.payer_wallet_id.0,
        payment_link_uuid: view.payment_link_uuid.map(|u| u.to_string()),
        created_at: timestamp(view.created_at_ms),
        completed_at: view.completed_at_ms.map(timestamp),
        description: view.description.clone(),
        metadata: raw_json(view.metadata.as_deref()).unwrap_or_else(empty_object),
    }
}

/// `{success, data: PaymentResult}`.
#[derive(Serialize)]
pub struct PaymentEnvelope<T: Serialize> {
    success: bool,
    data: T,
}

/// A successful payment answer.
pub fn payment_answer(status: StatusCode, view: &PaymentView) -> Rendered {
    Rendered::json(
        status,
        &PaymentEnvelope {
            success: true,
            data: payment_result(view),
        },
    )
}

/// A refused payment request: `success: false` with the error code, status 409 or 422
/// (decisions.md §4). `transaction_id` is empty here; the handler fills in the payment named by
/// the path with [`with_payment_uuid`]. Other statuses (404, 403, 5xx) keep the standard body.
pub fn payment_refusal(rejection: &Rejection) -> Rendered {
    refusal_from_error(&ApiError::from_rejection(rejection))
}

/// [`payment_refusal`] of an API error (bad input is refused in the same envelope).
pub fn refusal_from_error(error: &ApiError) -> Rendered {
    if !matches!(
        error.status,
        StatusCode::CONFLICT | StatusCode::UNPROCESSABLE_ENTITY
    ) {
        return Rendered::error(error);
    }
    let zero = Number(rust_decimal::Decimal::ZERO);
    let result = PaymentResultJson {
        success: false,
        transaction_id: String::new(),
        // The request was refused; the payment (if any) is unchanged: ask its status route.
        status: "refused",
        is_duplicate: false,
        error_code: error.code,
        message: error.message.clone(),
        provider: "",
        provider_ref: String::new(),
        amount: zero,
        currency: String::new(),
        fee_amount: zero,
        net_amount: zero,
        refunded_amount: zero,
        merchant_id: 0,
        merchant_wallet_id: 0,
        payer_wallet_id: 0,
        payment_link_uuid: None,
        created_at: String::new(),
        completed_at: None,
        description: None,
        metadata: empty_object(),
    };
    Rendered::json(
        error.status,
        &PaymentEnvelope {
            success: false,
            data: result,
        },
    )
}

const EMPTY_ID: &[u8] = br#""transaction_id":"""#;
const NOT_DUPLICATE: &[u8] = br#""is_duplicate":false"#;
const DUPLICATE: &[u8] = br#""is_duplicate":true"#;

/// Replaces the first occurrence of `from` by `to` in `body`, if any.
fn splice_first(body: &mut Vec<u8>, from: &[u8], to: &[u8]) {
    if let Some(at) = body.windows(from.len()).position(|window| window == from) {
        body.splice(at..at + from.len(), to.iter().copied());
    }
}

/// Names the payment of the path in a refusal rendered without it ([`payment_refusal`]).
pub fn with_payment_uuid(rendered: &mut Rendered, uuid: &engine::Uuid) {
    let filled = format!(r#""transaction_id":"{uuid}""#);
    splice_first(&mut rendered.body, EMPTY_ID, filled.as_bytes());
}

/// Marks a replayed payment answer `is_duplicate: true`. The flag is our own field and comes
/// before any client text in the body, so its first occurrence is the one to flip.
pub fn mark_duplicate(rendered: &mut Rendered) {
    splice_first(&mut rendered.body, NOT_DUPLICATE, DUPLICATE);
}

/// `{id, status, submitted_at, ...}` of `Payout.attempts`.
#[derive(Serialize)]
pub struct AttemptJson {
    attempt_number: u32,
    status: &'static str,
    submitted_at: String,
    completed_at: Option<String>,
    provider_ref: Option<String>,
}

fn attempt(view: &PayoutAttemptView) -> AttemptJson {
    AttemptJson {
        attempt_number: view.number,
        status: view.status.as_str(),
        submitted_at: timestamp(view.submitted_at_ms),
        completed_at: view.completed_at_ms.map(timestamp),
        provider_ref: view.provider_ref.clone(),
    }
}

fn by(stamp: Option<&Stamp>) -> Option<u64> {
    stamp.map(|s| s.by)
}

fn at(stamp: Option<&Stamp>) -> Option<String> {
    stamp.map(|s| timestamp(s.at_ms))
}

/// Contract 2.7 plus the life-cycle stamps.
#[derive(Serialize)]
pub struct PayoutJson {
    id: u64,
    uuid: String,
    wallet_id: u64,
    business_id: u64,
    amount: Number,
    currency_code: String,
    status: &'static str,
    payout_method: String,
    payout_destination: Option<Box<RawValue>>,
    description: Option<String>,
    idempotency_key: String,
    attempts: Vec<AttemptJson>,
    hold_uuid: Option<String>,
    created_by: u64,
    approved_by: Option<u64>,
    approved_at: Option<String>,
    approval_notes: Option<String>,
    rejected_by: Option<u64>,
    rejected_at: Option<String>,
    rejection_reason: Option<String>,
    cancelled_by: Option<u64>,
    cancelled_at: Option<String>,
    executed_by: Option<u64>,
    executed_at: Option<String>,
    transaction_uuid: Option<String>,
    paid_at: Option<String>,
    failed_at: Option<String>,
    return_transaction_uuid: Option<String>,
    created_at: String,
    updated_at: String,
}

pub fn payout(view: &PayoutView) -> PayoutJson {
    let currency = view.currency;
    PayoutJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        wallet_id: view.wallet_id.0,
        business_id: view.business_id,
        amount: amount(view.amount, currency),
        currency_code: currency.code().to_owned(),
        status: view.status.as_str(),
        payout_method: view.payout_method.clone(),
        payout_destination: raw_json(view.payout_destination.as_deref()),
        description: view.description.clone(),
        // Never null (contract 2.7 types it as a string): without a client key, the uuid.
        idempotency_key: view
            .idempotency_key
            .clone()
            .unwrap_or_else(|| view.uuid.to_string()),
        attempts: view.attempts.iter().map(attempt).collect(),
        hold_uuid: view.hold_uuid.map(|u| u.to_string()),
        created_by: view.created_by,
        approved_by: by(view.approved.as_ref()),
        approved_at: at(view.approved.as_ref()),
        approval_notes: view.approval_notes.clone(),
        rejected_by: by(view.rejected.as_ref()),
        rejected_at: at(view.rejected.as_ref()),
        rejection_reason: view.rejection_reason.clone(),
        cancelled_by: by(view.cancelled.as_ref()),
        cancelled_at: at(view.cancelled.as_ref()),
        executed_by: by(view.executed.as_ref()),
        executed_at: at(view.executed.as_ref()),
        transaction_uuid: view.transaction_uuid.map(|u| u.to_string()),
        paid_at: view.paid_at_ms.map(timestamp),
        failed_at: view.failed_at_ms.map(timestamp),
        return_transaction_uuid: view.return_transaction_uuid.map(|u| u.to_string()),
        created_at: timestamp(view.created_at_ms),
        updated_at: timestamp(view.updated_at_ms),
    }
}

/// One of `Settlement.items` (decisions.md §6).
#[derive(Serialize)]
pub struct SettlementItemJson {
    transaction_uuid: String,
    amount: Number,
    fee_amount: Number,
    net_amount: Number,
}

fn item(value: &SettlementItem, currency: Currency) -> SettlementItemJson {
    SettlementItemJson {
        transaction_uuid: value.transaction_uuid.to_string(),
        amount: amount(value.amount, currency),
        fee_amount: amount(value.fee_amount, currency),
        net_amount: amount(value.net_amount, currency),
    }
}

/// Contract 2.6 plus totals and life-cycle stamps.
#[derive(Serialize)]
pub struct SettlementJson {
    id: u64,
    uuid: String,
    wallet_id: u64,
    business_id: u64,
    currency_code: String,
    period_type: &'static str,
    period_start: String,
    period_end: String,
    status: &'static str,
    idempotency_key: String,
    notes: Option<String>,
    items: Vec<SettlementItemJson>,
    total_amount: Number,
    total_fee_amount: Number,
    created_by: u64,
    approved_by: Option<u64>,
    approved_at: Option<String>,
    approval_notes: Option<String>,
    rejected_by: Option<u64>,
    rejected_at: Option<String>,
    rejection_reason: Option<String>,
    cancelled_by: Option<u64>,
    cancelled_at: Option<String>,
    executed_by: Option<u64>,
    executed_at: Option<String>,
    transaction_uuid: Option<String>,
    created_at: String,
    updated_at: String,
}

pub fn settlement(view: &SettlementView) -> SettlementJson {
    let currency = view.currency;
    SettlementJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        wallet_id: view.wallet_id.0,
        business_id: view.business_id,
        currency_code: currency.code().to_owned(),
        period_type: view.period_type.as_str(),
        period_start: date(view.period_start_ms),
        period_end: date(view.period_end_ms),
        status: view.status.as_str(),
        idempotency_key: view
            .idempotency_key
            .clone()
            .unwrap_or_else(|| view.uuid.to_string()),
        notes: view.notes.clone(),
        items: view.items.iter().map(|i| item(i, currency)).collect(),
        total_amount: amount(view.total_amount, currency),
        total_fee_amount: amount(view.total_fee_amount, currency),
        created_by: view.created_by,
        approved_by: by(view.approved.as_ref()),
        approved_at: at(view.approved.as_ref()),
        approval_notes: view.approval_notes.clone(),
        rejected_by: by(view.rejected.as_ref()),
        rejected_at: at(view.rejected.as_ref()),
        rejection_reason: view.rejection_reason.clone(),
        cancelled_by: by(view.cancelled.as_ref()),
        cancelled_at: at(view.cancelled.as_ref()),
        executed_by: by(view.executed.as_ref()),
        executed_at: at(view.executed.as_ref()),
        transaction_uuid: view.transaction_uuid.map(|u| u.to_string()),
        created_at: timestamp(view.created_at_ms),
        updated_at: timestamp(view.updated_at_ms),
    }
}

/// decisions.md §4: `{uuid, url, amount, currency_code, description, status, expires_at}`.
#[derive(Serialize)]
pub struct PaymentLinkJson {
    uuid: String,
    url: String,
    amount: Number,
    currency_code: String,
    description: Option<String>,
    status: &'static str,
    expires_at: String,
    merchant_id: u64,
    wallet_id: u64,
    used_by_payment_uuid: Option<String>,
    created_at: String,
}

/// Where a link points: `{public url}/v1/payment-links/{uuid}` (docs/commerce-api.md).
pub const PAYMENT_LINK_PATH: &str = "/v1/payment-links/";

/// The service's public base URL (`--public-url`), decided once at start.
static PUBLIC_URL: std::sync::OnceLock<String> = std::sync::OnceLock::new();

/// Sets the public base URL links are rendered with (first call wins; `serve` calls it once).
pub fn set_public_url(url: &str) {
    let _ = PUBLIC_URL.set(url.trim_end_matches('/').to_owned());
}

fn public_url() -> &'static str {
    PUBLIC_URL
        .get()
        .map_or("http://127.0.0.1:8080", String::as_str)
}

pub fn payment_link(view: &PaymentLinkView) -> PaymentLinkJson {
    let currency = view.currency;
    PaymentLinkJson {
        uuid: view.uuid.to_string(),
        url: format!("{}{PAYMENT_LINK_PATH}{}", public_url(), view.uuid),
        amount: amount(view.amount, currency),
        currency_code: currency.code().to_owned(),
        description: view.description.clone(),
        status: view.status.as_str(),
        expires_at: timestamp(view.expires_at_ms),
        merchant_id: view.merchant_id,
        wallet_id: view.merchant_wallet_id.0,
        used_by_payment_uuid: view.used_by_payment_uuid.map(|u| u.to_string()),
        created_at: timestamp(view.created_at_ms),
    }
}

/// decisions.md §4: `{uuid, payload, svg, expires_at}`.
#[derive(Serialize)]
pub struct QrJson {
    uuid: String,
    payload: String,
    svg: String,
    expires_at: String,
    amount: Option<Number>,
    currency_code: String,
    branch_id: u64,
    merchant_id: u64,
    wallet_id: u64,
    created_at: String,
}

pub fn qr(view: &QrView) -> QrJson {
    let currency = view.currency;
    QrJson {
        uuid: view.uuid.to_string(),
        svg: crate::qr_svg::render(&view.payload),
        payload: view.payload.clone(),
        expires_at: timestamp(view.expires_at_ms),
        amount: view.amount.map(|a| amount(a, currency)),
        currency_code: currency.code().to_owned(),
        branch_id: view.branch_id,
        merchant_id: view.merchant_id,
        wallet_id: view.merchant_wallet_id.0,
        created_at: timestamp(view.created_at_ms),
    }
}

/// The merchant transaction list (contract 2.1): `{status, data: [...], meta: {...}}`.
#[derive(Serialize)]
pub struct MetaList<T: Serialize> {
    status: bool,
    data: Vec<T>,
    meta: PageMeta,
}

/// Contract 2.1 `PaginationMeta`; `from`/`to` as in [`crate::views::page`].
#[derive(Serialize)]
pub struct PageMeta {
    current_page: u32,
    last_page: u64,
    per_page: u32,
    total: u64,
    from: Option<u64>,
    to: Option<u64>,
}

pub fn meta_list<T: Serialize>(
    records: Vec<T>,
    total: u64,
    page: u32,
    per_page: u32,
) -> MetaList<T> {
    let per_page_u = u64::from(per_page.max(1));
    let first = (u64::from(page.max(1)) - 1) * per_page_u;
    let (from, to) = if records.is_empty() {
        (None, None)
    } else {
        (Some(first + 1), Some(first + records.len() as u64))
    };
    MetaList {
        status: true,
        data: records,
        meta: PageMeta {
            current_page: page,
            last_page: total.div_ceil(per_page_u).max(1),
            per_page,
            total,
            from,
            to,
        },
    }
}

/// What a provider event did: `{status: true, data: {duplicate, applied, reason?, result?}}`
/// (the handler adds `event_id` and `type`, see [`with_event`]).
#[derive(Serialize)]
struct WebhookAnswer<T: Serialize> {
    status: bool,
    data: WebhookData<T>,
}

#[derive(Serialize)]
struct WebhookData<T: Serialize> {
    duplicate: bool,
    applied: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    reason: Option<String>,
    #[serde(skip_serializing_if = "Option::is_none")]
    result: Option<T>,
}

/// The answer to a provider event: the moved payment or payout; a state conflict (the target
/// already left the state the event moves) is `applied: false` with the reason, still 200, so the
/// provider stops redelivering; anything else is the standard error.
pub fn webhook_answer(result: &Result<engine::Outcome, Rejection>) -> Rendered {
    use engine::Outcome;
    fn applied<T: Serialize>(result: T) -> Rendered {
        Rendered::json(
            StatusCode::OK,
            &WebhookAnswer {
                status: true,
                data: WebhookData {
                    duplicate: false,
                    applied: true,
                    reason: None,
                    result: Some(result),
                },
            },
        )
    }
    match result {
        Ok(Outcome::Payment(view)) => applied(payment_result(view)),
        Ok(Outcome::Payout(view)) => applied(payout(view)),
        Ok(_) => Rendered::error(&ApiError::internal()),
        Err(rejection @ Rejection::InvalidState(_)) => Rendered::json(
            StatusCode::OK,
            &WebhookAnswer::<()> {
                status: true,
                data: WebhookData {
                    duplicate: false,
                    applied: false,
                    reason: Some(rejection.to_string()),
                    result: None,
                },
            },
        ),
        Err(rejection) => Rendered::error(&ApiError::from_rejection(rejection)),
    }
}

const WEBHOOK_PREFIX: &[u8] = br#"{"status":true,"data":{"#;
const NOT_DUPLICATE_EVENT: &[u8] = br#""duplicate":false"#;
const DUPLICATE_EVENT: &[u8] = br#""duplicate":true"#;

/// Names the event in a webhook answer (the stored answer is rendered without it).
pub fn with_event(rendered: &mut Rendered, event_id: &str, kind: &str) {
    if !rendered.body.starts_with(WEBHOOK_PREFIX) {
        return;
    }
    let names = format!(
        r#""event_id":{},"type":{},"#,
        serde_json::Value::from(event_id),
        serde_json::Value::from(kind)
    );
    let at = WEBHOOK_PREFIX.len();
    rendered.body.splice(at..at, names.bytes());
}

/// Marks a redelivered event's answer `duplicate: true`: the first `"duplicate":false` after
/// the event's own fields is ours (client text comes later, inside `result`).
pub fn mark_webhook_duplicate(rendered: &mut Rendered) {
    splice_first(&mut rendered.body, NOT_DUPLICATE_EVENT, DUPLICATE_EVENT);
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn a_replay_flips_only_our_duplicate_flag() {
        let mut rendered = Rendered::json(
            StatusCode::OK,
            &serde_json::json!({"success": true, "data": {"is_duplicate": false,
                "metadata": {"is_duplicate": false}}}),
        );
        mark_duplicate(&mut rendered);
        let text = String::from_utf8(rendered.body).unwrap();
        assert_eq!(
            text,
            r#"{"data":{"is_duplicate":true,"metadata":{"is_duplicate":false}},"success":true}"#
        );
    }

    #[test]
    fn a_refusal_names_its_code_and_the_payment_of_the_path() {
        let mut rendered = payment_refusal(&Rejection::InsufficientFunds);
        assert_eq!(rendered.status, StatusCode::UNPROCESSABLE_ENTITY);
        let uuid: engine::Uuid = "5f0c8a4e-6f7b-4c1d-9a2b-3c4d5e6f7a8b".parse().unwrap();
        with_payment_uuid(&mut rendered, &uuid);
        let value: serde_json::Value = serde_json::from_slice(&rendered.body).unwrap();
        assert_eq!(value["success"], false);
        assert_eq!(value["data"]["error_code"], "insufficient_funds");
        assert_eq!(value["data"]["transaction_id"], uuid.to_string());
        assert_eq!(payment_refusal(&Rejection::NotFound("payment")).status, 404);
    }
}
