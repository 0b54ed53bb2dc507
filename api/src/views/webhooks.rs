//! The answer to a provider webhook delivery and its replay marker.

use engine::Rejection;
use hyper::StatusCode;
use serde::Serialize;

use super::envelope::Rendered;
use super::fields::splice_first;
use super::payments::payment_result;
use super::payouts::payout;
use crate::error::ApiError;

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
