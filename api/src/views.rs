//! JSON shapes of the contract (part 2), built from the engine's views, and the renderer that
//! turns a command's result into the bytes an idempotent retry gets back.
//!
//! Every amount is written as an exact JSON number at its currency's scale; every timestamp as
//! ISO 8601 UTC with milliseconds. Fields the contract types without "or null" are never null
//! (decisions.md §6).

use engine::money::to_currency_scale;
use engine::runtime::Renderer;
use engine::view::{
    BalanceView, EntryView, HoldView, IntegrityReport, TransactionView, WalletView,
};
use engine::{Currency, Outcome, Rejection};
use hyper::StatusCode;
use rust_decimal::Decimal;
use serde::Serialize;
use serde_json::{json, Map, Value};

use crate::error::ApiError;
use crate::json::Number;

/// An exact amount at the currency's scale.
pub fn amount(value: Decimal, currency: Currency) -> Number {
    Number(to_currency_scale(value, currency))
}

/// ISO 8601 UTC with milliseconds, from unix milliseconds (proleptic Gregorian, no leap seconds).
pub fn timestamp(ms: i64) -> String {
    let days = ms.div_euclid(86_400_000);
    let in_day = ms.rem_euclid(86_400_000);
    let (year, month, day) = civil_from_days(days);
    if !(0..=9999).contains(&year) {
        // Outside four-digit years: the general (slower) path, same layout.
        return format!(
            "{year:04}-{month:02}-{day:02}T{:02}:{:02}:{:02}.{:03}Z",
            in_day / 3_600_000,
            in_day / 60_000 % 60,
            in_day / 1000 % 60,
            in_day % 1000
        );
    }
    // Digits by hand: two timestamps are in every response, and `format!` was ~1% of the
    // server's CPU under load.
    let mut out = *b"0000-00-00T00:00:00.000Z";
    let mut put = |at: usize, width: usize, mut value: i64| {
        for i in (at..at + width).rev() {
            if let Some(slot) = out.get_mut(i) {
                // 0..=9 after the remainder, so the cast cannot truncate.
                *slot = b'0' + (value % 10) as u8;
            }
            value /= 10;
        }
    };
    put(0, 4, year);
    put(5, 2, i64::from(month));
    put(8, 2, i64::from(day));
    put(11, 2, in_day / 3_600_000);
    put(14, 2, in_day / 60_000 % 60);
    put(17, 2, in_day / 1000 % 60);
    put(20, 3, in_day % 1000);
    String::from_utf8_lossy(&out).into_owned()
}

/// The date (YYYY-MM-DD) of unix milliseconds.
pub fn date(ms: i64) -> String {
    let (year, month, day) = civil_from_days(ms.div_euclid(86_400_000));
    format!("{year:04}-{month:02}-{day:02}")
}

/// Howard Hinnant's `civil_from_days`.
fn civil_from_days(days: i64) -> (i64, u32, u32) {
    let z = days + 719_468;
    let era = z.div_euclid(146_097);
    let doe = z.rem_euclid(146_097);
    let yoe = (doe - doe / 1460 + doe / 36_524 - doe / 146_096) / 365;
    let doy = doe - (365 * yoe + yoe / 4 - yoe / 100);
    let mp = (5 * doy + 2) / 153;
    let day = (doy - (153 * mp + 2) / 5 + 1) as u32;
    let month = if mp < 10 { mp + 3 } else { mp - 9 } as u32;
    let year = yoe + era * 400 + i64::from(month <= 2);
    (year, month, day)
}

/// Unix milliseconds of the start of a YYYY-MM-DD date (UTC), if it is one.
pub fn parse_date(text: &str) -> Option<i64> {
    let bytes = text.as_bytes();
    if bytes.len() != 10 || bytes.get(4) != Some(&b'-') || bytes.get(7) != Some(&b'-') {
        return None;
    }
    let year: i64 = text.get(0..4)?.parse().ok()?;
    let month: i64 = text.get(5..7)?.parse().ok()?;
    let day: i64 = text.get(8..10)?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    // days_from_civil
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y.rem_euclid(400);
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    let days = era * 146_097 + doe - 719_468;
    // Reject dates like 2026-02-31 by round-tripping.
    (date(days * 86_400_000) == text).then_some(days * 86_400_000)
}

fn meta_value(meta: Option<&str>) -> Value {
    meta.and_then(|text| serde_json::from_str(text).ok())
        .unwrap_or_else(|| Value::Object(Map::new()))
}

// Responses are typed structs serialized straight to bytes: a `serde_json::Value` would turn
// the exact decimal amounts into binary floats (serde_json keeps numbers as f64 without the
// graph-wide `arbitrary_precision` feature), so `json!` is never used where an amount appears.

/// Contract 2.2.
#[derive(Serialize)]
pub struct WalletJson {
    id: u64,
    uuid: String,
    owner_type: &'static str,
    owner_id: u64,
    wallet_type: &'static str,
    status: &'static str,
    currency_code: String,
    account_number: String,
    cached_balance: Number,
    cached_pending_balance: Number,
    cached_held_balance: Number,
    available_balance: Number,
    business_id: u64,
    branch_id: u64,
    balance_verified_at: String,
    meta: Value,
    created_at: String,
    updated_at: String,
}

pub fn wallet(view: &WalletView) -> WalletJson {
    let currency = view.currency;
    WalletJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        owner_type: view.owner_type.as_str(),
        owner_id: view.owner_id,
        wallet_type: view.wallet_type.as_str(),
        status: view.status.as_str(),
        currency_code: currency.code().to_owned(),
        account_number: view.account_number.clone(),
        cached_balance: amount(view.balance, currency),
        cached_pending_balance: amount(view.pending_balance, currency),
        cached_held_balance: amount(view.held_balance, currency),
        available_balance: amount(view.available_balance, currency),
        business_id: view.business_id,
        branch_id: view.branch_id,
        balance_verified_at: timestamp(view.balance_verified_at_ms),
        meta: meta_value(view.meta.as_deref()),
        created_at: timestamp(view.created_at_ms),
        updated_at: timestamp(view.updated_at_ms),
    }
}

/// decisions.md §3: `GET /wallets/{id}/balance`.
#[derive(Serialize)]
pub struct BalanceJson {
    wallet_id: u64,
    currency_code: String,
    balance: Number,
    available_balance: Number,
    held_balance: Number,
    pending_balance: Number,
    as_of: String,
}

pub fn balance(view: &BalanceView, as_of_ms: i64) -> BalanceJson {
    let currency = view.currency;
    BalanceJson {
        wallet_id: view.wallet_id.0,
        currency_code: currency.code().to_owned(),
        balance: amount(view.balance, currency),
        available_balance: amount(view.available_balance, currency),
        held_balance: amount(view.held_balance, currency),
        pending_balance: amount(view.pending_balance, currency),
        as_of: timestamp(as_of_ms),
    }
}

/// Contract 2.3.
#[derive(Serialize)]
pub struct TransactionJson {
    id: u64,
    uuid: String,
    wallet_id: u64,
    owner_type: &'static str,
    owner_id: u64,
    transaction_type: &'static str,
    direction: &'static str,
    status: &'static str,
    amount: Number,
    currency_code: String,
    exchange_rate: Option<Number>,
    local_amount: Option<Number>,
    fee_amount: Number,
    net_amount: Number,
    reference_type: Option<&'static str>,
    reference_id: Option<u64>,
    transfer_uuid: Option<String>,
    counterparty_wallet_id: Option<u64>,
    external_reference: Option<String>,
    idempotency_key: Option<String>,
    business_id: u64,
    branch_id: u64,
    payment_method: Option<String>,
    description: Option<String>,
    meta: Option<Value>,
    refunded_amount: Number,
    completed_at: Option<String>,
    failed_at: Option<String>,
    reversed_at: Option<String>,
    created_at: String,
}

pub fn transaction(view: &TransactionView) -> TransactionJson {
    let currency = view.currency;
    TransactionJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        wallet_id: view.wallet_id.0,
        owner_type: view.owner_type.as_str(),
        owner_id: view.owner_id,
        transaction_type: view.transaction_type.as_str(),
        direction: view.direction.as_str(),
        status: view.status.as_str(),
        amount: amount(view.amount, currency),
        currency_code: currency.code().to_owned(),
        exchange_rate: None,
        local_amount: None,
        fee_amount: amount(view.fee_amount, currency),
        net_amount: amount(view.net_amount, currency),
        reference_type: view.reference_type,
        reference_id: view.reference_id,
        transfer_uuid: view.transfer_uuid.map(|u| u.to_string()),
        counterparty_wallet_id: view.counterparty_wallet_id.map(|w| w.0),
        external_reference: view.external_reference.clone(),
        idempotency_key: view.idempotency_key.clone(),
        business_id: view.business_id,
        branch_id: view.branch_id,
        payment_method: None,
        description: view.description.clone(),
        meta: view.meta.as_deref().map(|m| meta_value(Some(m))),
        refunded_amount: amount(view.refunded_amount, currency),
        completed_at: Some(timestamp(view.completed_at_ms)),
        failed_at: None,
        reversed_at: view.reversed_at_ms.map(timestamp),
        created_at: timestamp(view.created_at_ms),
    }
}

/// Contract 2.4.
#[derive(Serialize)]
pub struct EntryJson {
    id: u64,
    uuid: String,
    wallet_id: u64,
    transaction_id: u64,
    direction: &'static str,
    amount: Number,
    signed_amount: Number,
    currency_code: String,
    exchange_rate: Option<Number>,
    local_amount: Option<Number>,
    signed_local_amount: Option<Number>,
    local_currency_code: Option<String>,
    balance_after: Number,
    entry_type: &'static str,
    status: &'static str,
    idempotency_key: Option<String>,
    reference_type: Option<String>,
    reference_id: Option<u64>,
    description: Option<String>,
    reversed_by_entry_id: Option<u64>,
    is_reversal: bool,
    reverses_entry_id: Option<u64>,
    meta: Value,
    created_at: String,
}

pub fn entry(view: &EntryView) -> EntryJson {
    let currency = view.currency;
    EntryJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        wallet_id: view.wallet_id.0,
        transaction_id: view.transaction_id.0,
        direction: view.direction.as_str(),
        amount: amount(view.amount, currency),
        signed_amount: amount(view.signed_amount, currency),
        currency_code: currency.code().to_owned(),
        exchange_rate: None,
        local_amount: None,
        signed_local_amount: None,
        local_currency_code: None,
        balance_after: amount(view.balance_after, currency),
        entry_type: view.entry_type.as_str(),
        status: view.status,
        idempotency_key: view.idempotency_key.clone(),
        reference_type: None,
        reference_id: None,
        description: view.description.clone(),
        reversed_by_entry_id: view.reversed_by_entry_id.map(|e| e.0),
        is_reversal: view.is_reversal,
        reverses_entry_id: view.reverses_entry_id.map(|e| e.0),
        meta: json!({"hash": view.hash.to_hex(), "prev_hash": view.prev_hash.to_hex()}),
        created_at: timestamp(view.created_at_ms),
    }
}

/// Contract 2.5, plus what the hold routes of decisions.md §4 show.
#[derive(Serialize)]
pub struct HoldJson {
    id: u64,
    uuid: String,
    wallet_id: u64,
    amount: Number,
    currency_code: String,
    status: &'static str,
    reason: Option<String>,
    expires_at: String,
    created_at: String,
    closed_at: Option<String>,
}

pub fn hold(view: &HoldView) -> HoldJson {
    let currency = view.currency;
    HoldJson {
        id: view.id.0,
        uuid: view.uuid.to_string(),
        wallet_id: view.wallet_id.0,
        amount: amount(view.amount, currency),
        currency_code: currency.code().to_owned(),
        status: view.status.as_str(),
        reason: view.reason.clone(),
        expires_at: timestamp(view.expires_at_ms),
        created_at: timestamp(view.created_at_ms),
        closed_at: view.closed_at_ms.map(timestamp),
    }
}

/// decisions.md §3: `verify-integrity`.
#[derive(Serialize)]
pub struct IntegrityJson {
    wallet_id: u64,
    valid: bool,
    entries_checked: u64,
    ledger_balance: Option<Number>,
    cached_balance: Number,
    chain_head: String,
    first_invalid_entry_id: Option<u64>,
    verified_at: String,
}

pub fn integrity(report: &IntegrityReport, currency: Currency) -> IntegrityJson {
    IntegrityJson {
        wallet_id: report.wallet_id.0,
        valid: report.valid,
        entries_checked: report.entries_checked,
        ledger_balance: report.ledger_balance.map(|b| amount(b, currency)),
        cached_balance: amount(report.cached_balance, currency),
        chain_head: report.chain_head.to_hex(),
        first_invalid_entry_id: report.first_invalid_entry_id.map(|e| e.0),
        verified_at: timestamp(report.verified_at_ms),
    }
}

/// `{status: true, message?, data}`.
#[derive(Serialize)]
pub struct Envelope<T: Serialize> {
    status: bool,
    #[serde(skip_serializing_if = "Option::is_none")]
    message: Option<&'static str>,
    #[serde(skip_serializing_if = "Option::is_none")]
    message_translated: Option<&'static str>,
    data: T,
}

pub fn envelope<T: Serialize>(data: T, message: Option<&'static str>) -> Envelope<T> {
    Envelope {
        status: true,
        message,
        message_translated: None,
        data,
    }
}

/// The standard envelope with `message_translated` (wallet refund; payout approve, reject,
/// execute).
pub fn translated<T: Serialize>(data: T, message: &'static str) -> Envelope<T> {
    Envelope {
        status: true,
        message: Some(message),
        message_translated: Some(message),
        data,
    }
}

/// Laravel-style page inside `data` (contract 2.1; decisions.md §6 for `from`/`to`).
#[derive(Serialize)]
pub struct Page<T: Serialize> {
    data: Vec<T>,
    current_page: u32,
    last_page: u64,
    per_page: u32,
    total: u64,
    from: Option<u64>,
    to: Option<u64>,
}

pub fn page<T: Serialize>(records: Vec<T>, total: usize, page: u32, per_page: u32) -> Page<T> {
    let total = total as u64;
    let per_page_u = u64::from(per_page.max(1));
    let last_page = total.div_ceil(per_page_u).max(1);
    let first = (u64::from(page.max(1)) - 1) * per_page_u;
    let (from, to) = if records.is_empty() {
        (None, None)
    } else {
        (Some(first + 1), Some(first + records.len() as u64))
    };
    Page {
        data: records,
        current_page: page,
        last_page,
        per_page,
        total,
        from,
        to,
    }
}

/// The reversal answer: the reversal transaction and every mirror entry.
#[derive(Serialize)]
pub struct ReversalJson {
    transaction: TransactionJson,
    entries: Vec<EntryJson>,
}

/// A rendered response: status and JSON body.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Rendered {
    pub status: StatusCode,
    pub body: Vec<u8>,
    /// `application/json` for everything but `/metrics`; not part of the stored form.
    pub content_type: &'static str,
}

/// The content type of JSON responses.
pub const JSON: &str = "application/json";

impl Rendered {
    pub fn json(status: StatusCode, value: &impl Serialize) -> Self {
        Rendered {
            status,
            body: serde_json::to_vec(value).unwrap_or_default(),
            content_type: JSON,
        }
    }

    pub fn error(error: &ApiError) -> Self {
        Rendered {
            status: error.status,
            body: error.body(REQUEST_ID_PLACEHOLDER),
            content_type: JSON,
        }
    }

    /// Stored form for the idempotency table: 2 bytes of status, then the body.
    pub fn to_stored(&self) -> Vec<u8> {
        let mut bytes = self.status.as_u16().to_be_bytes().to_vec();
        bytes.extend_from_slice(&self.body);
        bytes
    }

    pub fn from_stored(bytes: &[u8]) -> Option<Self> {
        let (status, body) = bytes.split_at_checked(2)?;
        let status = u16::from_be_bytes([*status.first()?, *status.get(1)?]);
        Some(Rendered {
            status: StatusCode::from_u16(status).ok()?,
            body: body.to_vec(),
            content_type: JSON,
        })
    }
}

/// Written into error bodies that are stored for replay; replaced by the live request's id.
pub const REQUEST_ID_PLACEHOLDER: &str = "\u{0}request-id\u{0}";

/// What a successful command shows, by route. `route` indexes [`crate::routes::Op`].
pub fn render_outcome(route: u16, outcome: &Outcome) -> Rendered {
    use crate::routes::Op;
    let op = Op::from_index(route);
    let created = op.is_some_and(Op::answers_created);
    let status = if created {
        StatusCode::CREATED
    } else {
        StatusCode::OK
    };
    let refund = matches!(op, Some(Op::RefundWalletTransaction));
    if matches!(op, Some(Op::ReceiveProviderWebhook)) {
        return crate::views_commerce::webhook_answer(&Ok(outcome.clone()));
    }
    match outcome {
        Outcome::Wallet(view) => wrapped(status, wallet(view), refund),
        Outcome::Transaction(view)
        | Outcome::TransferReserved {
            transaction: view, ..
        }
        | Outcome::TransferCredited {
            transaction: view, ..
        } => wrapped(status, transaction(view), refund),
        Outcome::Hold(view) => wrapped(status, hold(view), refund),
        Outcome::Reversal {
            transaction: t,
            entries,
        } => wrapped(
            status,
            ReversalJson {
                transaction: transaction(t),
                entries: entries.iter().map(entry).collect(),
            },
            refund,
        ),
        Outcome::Integrity(report) => wrapped(
            status,
            json!({ "wallet_id": report.wallet_id.0, "valid": report.valid }),
            refund,
        ),
        Outcome::Payment(view) => crate::views_commerce::payment_answer(status, view),
        Outcome::Payout(view) => {
            let data = crate::views_commerce::payout(view);
            match op {
                Some(Op::ApprovePayout) => {
                    Rendered::json(status, &translated(data, "Payout approved"))
                }
                Some(Op::RejectPayout) => {
                    Rendered::json(status, &translated(data, "Payout rejected"))
                }
                Some(Op::ExecutePayout) => {
                    Rendered::json(status, &translated(data, "Payout executed"))
                }
                _ => Rendered::json(status, &envelope(data, None)),
            }
        }
        Outcome::Settlement(view) => Rendered::json(
            status,
            &envelope(crate::views_commerce::settlement(view), None),
        ),
        Outcome::PaymentLink(view) => Rendered::json(
            status,
            &envelope(crate::views_commerce::payment_link(view), None),
        ),
        Outcome::Qr(view) => {
            Rendered::json(status, &envelope(crate::views_commerce::qr(view), None))
        }
        // Intermediate steps of cross-shard protocols and internal commands: never a request's
        // answer (the orchestration answers with the final view), shown plainly if ever reached.
        other => wrapped(status, json!({ "outcome": format!("{other:?}") }), refund),
    }
}

/// Whether a route answers with the payment envelope (its refusals too).
fn is_payment_route(route: u16) -> bool {
    use crate::routes::Op;
    matches!(
        Op::from_index(route),
        Some(Op::InitiatePayment | Op::ConfirmPayment | Op::CancelPayment | Op::RefundPayment)
    )
}

/// The standard envelope around `data`, serialized once, straight to bytes.
fn wrapped<T: Serialize>(status: StatusCode, data: T, refund: bool) -> Rendered {
    if refund {
        Rendered::json(status, &translated(data, "Refund completed"))
    } else {
        Rendered::json(status, &envelope(data, None))
    }
}

/// The API's renderer: `(route, result)` -> stored response bytes. Pure, as the engine requires.
pub struct ApiRenderer;

impl Renderer for ApiRenderer {
    fn render(&self, route: u16, result: &Result<Outcome, Rejection>) -> Vec<u8> {
        use crate::routes::Op;
        if Op::from_index(route) == Some(Op::ReceiveProviderWebhook) {
            return crate::views_commerce::webhook_answer(result).to_stored();
        }
        match result {
            Ok(outcome) => render_outcome(route, outcome).to_stored(),
            Err(rejection) if is_payment_route(route) => {
                crate::views_commerce::payment_refusal(rejection).to_stored()
            }
            Err(rejection) => Rendered::error(&ApiError::from_rejection(rejection)).to_stored(),
        }
    }
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    #[test]
    fn timestamps_and_dates_are_iso_8601_utc() {
        assert_eq!(timestamp(0), "1970-01-01T00:00:00.000Z");
        assert_eq!(timestamp(1_700_000_000_123), "2023-11-14T22:13:20.123Z");
        assert_eq!(timestamp(-1), "1969-12-31T23:59:59.999Z");
        assert_eq!(timestamp(253_402_300_799_999), "9999-12-31T23:59:59.999Z");
        assert_eq!(timestamp(253_402_300_800_000), "10000-01-01T00:00:00.000Z");
        assert_eq!(date(951_782_400_000), "2000-02-29");
        assert_eq!(parse_date("2000-02-29"), Some(951_782_400_000));
        assert_eq!(parse_date("2026-02-31"), None);
        assert_eq!(parse_date("2026-1-01"), None);
        assert_eq!(parse_date("1970-01-01"), Some(0));
    }

    #[test]
    fn pages_report_one_based_positions() {
        let p = serde_json::to_value(page(vec![1, 2], 7, 2, 2)).unwrap();
        assert_eq!(p["from"], json!(3));
        assert_eq!(p["to"], json!(4));
        assert_eq!(p["last_page"], json!(4));
        let empty = serde_json::to_value(page(Vec::<u8>::new(), 7, 9, 2)).unwrap();
        assert_eq!(empty["from"], Value::Null);
        assert_eq!(empty["total"], json!(7));
    }

    #[test]
    fn amounts_keep_their_currency_scale_through_the_envelope() {
        let currency = Currency::from_code("YER").unwrap();
        let text = String::from_utf8(
            Rendered::json(
                StatusCode::OK,
                &envelope(
                    json_amount(Decimal::from_str_exact("100.5").unwrap(), currency),
                    None,
                ),
            )
            .body,
        )
        .unwrap();
        assert_eq!(text, r#"{"status":true,"data":{"amount":100.50}}"#);
    }

    #[derive(Serialize)]
    struct AmountOnly {
        amount: Number,
    }

    fn json_amount(value: Decimal, currency: Currency) -> AmountOnly {
        AmountOnly {
            amount: amount(value, currency),
        }
    }

    #[test]
    fn stored_responses_round_trip() {
        let r = Rendered::json(StatusCode::CREATED, &json!({"a": 1}));
        assert_eq!(Rendered::from_stored(&r.to_stored()).unwrap(), r);
        assert!(Rendered::from_stored(&[1]).is_none());
    }
}
