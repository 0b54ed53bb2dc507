//! What a successful command shows, by route, and the renderer that turns a command's result
//! into the bytes an idempotent retry gets back.

use engine::runtime::Renderer;
use engine::{Outcome, Rejection};
use hyper::StatusCode;
use serde::Serialize;
use serde_json::json;

use super::envelope::{envelope, translated, Rendered};
use super::ledger::{entry, hold, transaction, wallet, ReversalJson};
use crate::error::ApiError;

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
        return super::webhooks::webhook_answer(&Ok(outcome.clone()));
    }
    match outcome {
        Outcome::TransferBatch(answer) => super::batch::render_batch(answer),
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
        Outcome::Payment(view) => super::payments::payment_answer(status, view),
        Outcome::Payout(view) => {
            let data = super::payouts::payout(view);
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
        Outcome::Settlement(view) => {
            Rendered::json(status, &envelope(super::payouts::settlement(view), None))
        }
        Outcome::PaymentLink(view) => {
            Rendered::json(status, &envelope(super::payments::payment_link(view), None))
        }
        Outcome::Qr(view) => Rendered::json(status, &envelope(super::payments::qr(view), None)),
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
            return super::webhooks::webhook_answer(result).to_stored();
        }
        match result {
            Ok(outcome) => render_outcome(route, outcome).to_stored(),
            Err(rejection) if is_payment_route(route) => {
                super::payments::payment_refusal(rejection).to_stored()
            }
            Err(rejection) => Rendered::error(&ApiError::from_rejection(rejection)).to_stored(),
        }
    }
}
