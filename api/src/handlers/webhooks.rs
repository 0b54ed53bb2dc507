//! Provider webhooks: `POST /v1/webhooks/{provider}` (decisions.md §5, docs/commerce-api.md
//! "Provider webhooks").
//!
//! Order of checks, so that nothing unauthenticated reaches the engine: the provider is known;
//! the timestamp is within 300 s of our clock; the signature `v1=hex(HMAC-SHA256(secret,
//! "{timestamp}.{raw body}"))` verifies; only then is the body parsed. The header carries 1 to
//! [`SIGNATURES_MAX`] candidates of exactly 64 hex characters, checked for shape before any
//! hashing; the MAC is computed once and compared in constant time with each (issue 17: one
//! request with thousands of entries used to cost a MAC over the whole body per entry). The event id is the idempotency key of the command it becomes
//! (caller `webhook:{provider}`), so a repeat has no second effect and gets the first answer,
//! restarts included.

use engine::runtime::IdempotencyKey;
use engine::shard::command::{PaymentProviderResult, PayoutProviderResult};
use engine::values::ids::{shard_of, PayoutId};
use engine::{Command, Currency, Uuid};
use hmac::{Hmac, Mac};
use rust_decimal::Decimal;
use serde::Deserialize;
use sha2::{Digest, Sha256};

use super::call::{engine_error, Call, Handled};
use crate::app::SharedApp;
use crate::error::ApiError;
use crate::json::deserialize_optional_decimal;
use crate::views::Rendered;
use crate::views::{mark_webhook_duplicate, with_event};

/// Providers whose events we accept.
pub const PROVIDERS: &[&str] = &["sandbox"];
/// Largest accepted distance between the event's timestamp and our clock, in seconds.
pub const TOLERANCE_SECS: i64 = 300;
/// Most `v1=` candidates in one `X-Webhook-Signature` (key rotation needs two; decisions.md §5).
pub const SIGNATURES_MAX: usize = 4;
/// Bytes of an HMAC-SHA256 signature (64 hex characters).
const SIGNATURE_BYTES: usize = 32;
/// Longest event id.
const EVENT_ID_BYTES_MAX: usize = 255;

fn signature_error(message: &str) -> ApiError {
    ApiError::new(
        hyper::StatusCode::UNAUTHORIZED,
        "webhook_signature_invalid",
        message,
    )
}

/// Checks the timestamp window and the signature over the raw body.
pub fn verify(
    secret: &[u8],
    now_secs: i64,
    timestamp: Option<&str>,
    signature: Option<&str>,
    body: &[u8],
) -> Result<(), ApiError> {
    let timestamp = timestamp
        .ok_or_else(|| signature_error("X-Webhook-Timestamp is missing"))?
        .trim();
    let seconds: i64 = timestamp
        .parse()
        .map_err(|_| signature_error("X-Webhook-Timestamp must be unix seconds"))?;
    if now_secs.abs_diff(seconds) > TOLERANCE_SECS.unsigned_abs() {
        return Err(signature_error(
            "X-Webhook-Timestamp is more than 300 seconds away from the server's clock",
        ));
    }
    let signature = signature.ok_or_else(|| signature_error("X-Webhook-Signature is missing"))?;
    // Shape first, before any hashing (decisions.md §5): 1 to 4 comma-separated `v1=` entries
    // (key rotation), each exactly 64 hex characters. Anything else costs nothing but a scan
    // of the header.
    let mut candidates = [[0u8; SIGNATURE_BYTES]; SIGNATURES_MAX];
    let mut count = 0;
    for part in signature.split(',') {
        let slot = candidates
            .get_mut(count)
            .ok_or_else(|| signature_error("X-Webhook-Signature has more than 4 entries"))?;
        let hex_text = part
            .trim()
            .strip_prefix("v1=")
            .filter(|text| text.len() == SIGNATURE_BYTES * 2)
            .ok_or_else(|| {
                signature_error("each X-Webhook-Signature entry must be v1= and 64 hex characters")
            })?;
        hex::decode_to_slice(hex_text, slot).map_err(|_| {
            signature_error("each X-Webhook-Signature entry must be v1= and 64 hex characters")
        })?;
        count += 1;
    }
    // One MAC per request, compared in constant time with each candidate (every one of them,
    // so the time does not tell which matched).
    let mut mac = Hmac::<Sha256>::new_from_slice(secret).map_err(|_| ApiError::internal())?;
    mac.update(timestamp.as_bytes());
    mac.update(b".");
    mac.update(body);
    let expected = mac.finalize().into_bytes();
    let matched = candidates.iter().take(count).fold(0u8, |any, candidate| {
        any | constant_time_eq(&expected, candidate)
    });
    if matched == 1 {
        Ok(())
    } else {
        Err(signature_error("X-Webhook-Signature does not match"))
    }
}

/// 1 when `a == b`, else 0, in time that depends only on the lengths.
fn constant_time_eq(a: &[u8], b: &[u8]) -> u8 {
    if a.len() != b.len() {
        return 0;
    }
    let difference = a.iter().zip(b).fold(0u8, |acc, (x, y)| acc | (x ^ y));
    // 0 -> 1, anything else -> 0, without a branch on the secret-dependent value.
    u8::from(std::hint::black_box(difference) == 0)
}

#[derive(Deserialize)]
struct Event {
    id: String,
    #[serde(rename = "type")]
    kind: String,
    data: EventData,
}

#[derive(Deserialize)]
struct EventData {
    #[serde(default)]
    payment_uuid: Option<String>,
    #[serde(default)]
    payout_id: Option<u64>,
    #[serde(default)]
    provider_ref: Option<String>,
    #[serde(default, deserialize_with = "deserialize_optional_decimal")]
    amount: Option<Decimal>,
    #[serde(default)]
    currency_code: Option<String>,
}

/// The amount and currency an event names must be the target's, when it names them.
fn check_money(
    data: &EventData,
    target: Option<(Decimal, Currency)>,
    what: &str,
) -> Result<(), ApiError> {
    let (amount, currency) = target.ok_or_else(|| ApiError::not_found(what))?;
    if data.amount.is_some_and(|given| given != amount) {
        return Err(ApiError::invalid_field(
            "data.amount",
            format!("does not match the {what}"),
        ));
    }
    if data
        .currency_code
        .as_deref()
        .is_some_and(|code| code != currency.code())
    {
        return Err(ApiError::invalid_field(
            "data.currency_code",
            format!("does not match the {what}"),
        ));
    }
    Ok(())
}

/// `POST /v1/webhooks/{provider}`.
pub async fn receive(app: &SharedApp, call: &Call) -> Handled {
    let provider = call
        .param("provider")
        .and_then(|p| PROVIDERS.iter().copied().find(|known| *known == p))
        .ok_or_else(|| ApiError::not_found("provider"))?;
    let handled = deliver(app, call, provider).await;
    let result = match &handled {
        Err(_) => "refused",
        Ok((_, true)) => "duplicate",
        Ok((rendered, false)) if rendered.status != hyper::StatusCode::OK => "refused",
        Ok((rendered, false)) if contains(&rendered.body, br#""applied":false"#) => "not_applied",
        Ok(_) => "applied",
    };
    app.metrics.webhook(provider, result);
    handled
}

fn contains(haystack: &[u8], needle: &[u8]) -> bool {
    haystack
        .windows(needle.len())
        .any(|window| window == needle)
}

async fn deliver(app: &SharedApp, call: &Call, provider: &'static str) -> Handled {
    let header = |name: &str| call.headers.get(name).and_then(|v| v.to_str().ok());
    verify(
        &app.webhook_secret,
        app.now_secs(),
        header("x-webhook-timestamp"),
        header("x-webhook-signature"),
        &call.body,
    )?;
    let event: Event = call.json()?;
    if event.id.is_empty() || event.id.len() > EVENT_ID_BYTES_MAX {
        return Err(ApiError::invalid_field("id", "must be 1 to 255 characters"));
    }
    let command = match event.kind.as_str() {
        "payment.succeeded" | "payment.failed" => {
            let uuid: Uuid = event
                .data
                .payment_uuid
                .as_deref()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| ApiError::invalid_field("data.payment_uuid", "must be a UUID"))?;
            let shard = app
                .engine
                .find(uuid, |s, u| s.holds_payment(u))
                .await
                .map_err(engine_error)?;
            let target = app
                .engine
                .peek_shard(shard, move |s| {
                    s.payment(uuid)
                        .map(|found| found.map(|p| (p.amount, p.currency)))
                })
                .await
                .map_err(engine_error)?
                .map_err(|rejection| ApiError::from_rejection(&rejection))?;
            check_money(&event.data, target, "payment")?;
            Command::PaymentProviderResult(PaymentProviderResult {
                payment_uuid: uuid,
                succeeded: event.kind == "payment.succeeded",
                provider_ref: event.data.provider_ref.clone(),
            })
        }
        "payout.succeeded" | "payout.failed" => {
            let id = event
                .data
                .payout_id
                .filter(|id| *id > 0)
                .map(PayoutId)
                .ok_or_else(|| {
                    ApiError::invalid_field("data.payout_id", "must be a positive integer")
                })?;
            let shard = shard_of(id.0, app.engine.shard_count());
            let target = app
                .engine
                .peek_shard(shard, move |s| {
                    s.payout(id)
                        .map(|found| found.map(|p| (p.amount, p.currency)))
                })
                .await
                .map_err(engine_error)?
                .map_err(|rejection| ApiError::from_rejection(&rejection))?;
            check_money(&event.data, target, "payout")?;
            Command::PayoutProviderResult(PayoutProviderResult {
                payout_id: id,
                succeeded: event.kind == "payout.succeeded",
                provider_ref: event.data.provider_ref.clone(),
            })
        }
        _ => {
            return Err(ApiError::invalid_field(
                "type",
                "must be payment.succeeded, payment.failed, payout.succeeded or payout.failed",
            ))
        }
    };
    // The event id is the key; every delivery of it is the same request, whatever its body.
    let key = IdempotencyKey {
        fingerprint: Sha256::digest(event.id.as_bytes()).into(),
        legacy: None,
        caller: format!("webhook:{provider}"),
        key: event.id.clone(),
        route: call.op.index(),
    };
    let reply = app
        .engine
        .execute_idempotent(command, key)
        .await
        .map_err(engine_error)?;
    let mut rendered = Rendered::from_stored(&reply.response).ok_or_else(ApiError::internal)?;
    with_event(&mut rendered, &event.id, &event.kind);
    if reply.replayed {
        mark_webhook_duplicate(&mut rendered);
    }
    Ok((rendered, reply.replayed))
}

#[cfg(test)]
mod tests {
    #![allow(clippy::unwrap_used)]
    use super::*;

    fn sign(secret: &[u8], timestamp: &str, body: &[u8]) -> String {
        let mut mac = Hmac::<Sha256>::new_from_slice(secret).unwrap();
        mac.update(timestamp.as_bytes());
        mac.update(b".");
        mac.update(body);
        format!("v1={}", hex::encode(mac.finalize().into_bytes()))
    }

    #[test]
    fn accepts_a_fresh_signed_body_and_refuses_everything_else() {
        let secret = b"0123456789abcdef";
        let body = br#"{"id":"evt_1"}"#;
        let good = sign(secret, "1000", body);
        assert!(verify(secret, 1000, Some("1000"), Some(&good), body).is_ok());
        assert!(verify(secret, 1300, Some("1000"), Some(&good), body).is_ok());
        let stale = format!("v1={}", "0".repeat(64));
        let rotated = format!("{stale}, {good}");
        assert!(verify(secret, 1000, Some("1000"), Some(&rotated), body).is_ok());
        let four = format!("{stale},{stale},{stale},{good}");
        assert!(verify(secret, 1000, Some("1000"), Some(&four), body).is_ok());
        let five = format!("{stale},{four}");
        let short = format!("v1=00ff,{good}");
        let empty = format!("v1=,{good}");
        let trailing = format!("{good},");
        let not_hex = format!("v1={},{good}", "g".repeat(64));
        let refused = [
            verify(secret, 1301, Some("1000"), Some(&good), body),
            verify(secret, 699, Some("1000"), Some(&good), body),
            verify(
                secret,
                1000,
                Some("1000"),
                Some(&good),
                br#"{"id":"evt_2"}"#,
            ),
            verify(b"another-secret!!", 1000, Some("1000"), Some(&good), body),
            verify(secret, 1000, Some("1001"), Some(&good), body),
            verify(secret, 1000, None, Some(&good), body),
            verify(secret, 1000, Some("1000"), None, body),
            verify(secret, 1000, Some("soon"), Some(&good), body),
            verify(secret, 1000, Some("1000"), Some("v2=abc"), body),
            verify(secret, 1000, Some("1000"), Some(&five), body),
            verify(secret, 1000, Some("1000"), Some(&short), body),
            verify(secret, 1000, Some("1000"), Some(&empty), body),
            verify(secret, 1000, Some("1000"), Some(&trailing), body),
            verify(secret, 1000, Some("1000"), Some(&not_hex), body),
            verify(secret, 1000, Some("1000"), Some(""), body),
        ];
        for result in refused {
            let error = result.unwrap_err();
            assert_eq!(error.status, 401);
            assert_eq!(error.code, "webhook_signature_invalid");
        }
    }
}
