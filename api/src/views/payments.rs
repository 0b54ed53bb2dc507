//! PaymentResult and its envelope, payment links and QR payloads (contract 2.8,
//! docs/commerce-api.md). Client JSON (payment `metadata`) is passed through as raw text, so
//! numbers in it stay exactly as the client wrote them.

use engine::Rejection;
use hyper::StatusCode;
use serde::Serialize;

use super::envelope::Rendered;
use super::fields::{amount, raw_json, splice_first, timestamp};
use crate::error::ApiError;
use crate::json::Number;
use engine::commerce::payment::PaymentStatus;
use engine::commerce::view::{PaymentLinkView, PaymentView, QrView};
use serde_json::value::RawValue;

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
