//! `POST /v1/transfers/batch`: up to 8,190 transfers in one request (docs/transfer-batches.md).
//!
//! Each item goes through the very path of `POST /v1/transfers` ([`transfer_args`]): the same
//! validation, scope check and rule on who may move money out of a wallet. Then the whole batch
//! is one call to the engine. Without `atomic`, an item refused here keeps its place in the
//! answer (the engine carries its rendered error along, so a keyed batch replays it too); with
//! `atomic: true`, a refused item refuses the batch before anything reaches the engine.

use engine::runtime::batch::{BatchItem, TRANSFER_BATCH_ITEMS_MAX};
use engine::runtime::IdempotencyKey;

use engine::Command;
use hyper::StatusCode;
use serde::Deserialize;
use serde_json::value::RawValue;
use sha2::{Digest, Sha256};

use super::call::{engine_error, Call, Handled};
use super::money::{transfer_args, Transfer};
use crate::app::SharedApp;
use crate::error::ApiError;
use crate::views::{batch_failure, item_error, render_batch, Rendered};

#[derive(Deserialize)]
struct Batch<'a> {
    #[serde(borrow)]
    transfers: Vec<&'a RawValue>,
    #[serde(default)]
    atomic: Option<bool>,
}

/// One item decoded and checked, or the error it gets in its place.
async fn item(
    app: &SharedApp,
    call: &Call,
    raw: &RawValue,
    key: Option<&String>,
) -> Result<engine::shard::command::TransferArgs, ApiError> {
    let body: Transfer = serde_json::from_str(raw.get()).map_err(|error| {
        ApiError::unprocessable(
            "validation_failed",
            format!("the item does not fit: {error}"),
        )
    })?;
    let reference = body.reference.clone();
    let mut args = transfer_args(app, call, body, key.cloned()).await?;
    args.details.external_reference = reference;
    Ok(args)
}

pub async fn transfer_batch(app: &SharedApp, call: &Call) -> Handled {
    let body = std::str::from_utf8(&call.body)
        .map_err(|_| ApiError::malformed_json("the body is not UTF-8"))?;
    // The 400/422 split of every other route first (an array body, a syntax error), then the
    // batch's own shape.
    call.json::<serde::de::IgnoredAny>()?;
    let batch: Batch<'_> = serde_json::from_str(body).map_err(|error| {
        ApiError::unprocessable(
            "validation_failed",
            format!("the body does not fit: {error}"),
        )
    })?;
    if batch.transfers.len() > TRANSFER_BATCH_ITEMS_MAX {
        return Err(ApiError::new(
            StatusCode::PAYLOAD_TOO_LARGE,
            "batch_too_large",
            format!(
                "a batch holds at most {TRANSFER_BATCH_ITEMS_MAX} transfers, this one {}",
                batch.transfers.len()
            ),
        ));
    }
    if batch.transfers.is_empty() {
        return Err(ApiError::invalid_field(
            "transfers",
            "must hold at least one transfer",
        ));
    }
    let atomic = batch.atomic.unwrap_or(false);
    let key = call.idempotency_key()?;
    let mut items = Vec::with_capacity(batch.transfers.len());
    let mut digests = Sha256::new();
    for (index, raw) in batch.transfers.iter().enumerate() {
        match item(app, call, raw, key.as_ref()).await {
            Ok(args) => {
                digests.update(item_fingerprint(call, &args)?);
                items.push(BatchItem::Transfer(args));
            }
            Err(error) if atomic => {
                return Ok((batch_failure(index, &error, batch.transfers.len()), false));
            }
            Err(error) => {
                let refused = item_error(&error);
                digests.update(Sha256::digest(&refused));
                items.push(BatchItem::Refused(refused));
            }
        }
    }
    let Some(key) = key else {
        let answer = app
            .engine
            .execute_batch(items, atomic)
            .await
            .map_err(engine_error)?;
        return Ok((render_batch(&answer), false));
    };
    let caller = call.principal()?.caller();
    let mut fingerprint = Sha256::new();
    fingerprint.update(call.op.route().operation_id.as_bytes());
    fingerprint.update(b"\0");
    fingerprint.update(caller.as_bytes());
    fingerprint.update([u8::from(atomic)]);
    fingerprint.update(digests.finalize());
    let key = IdempotencyKey {
        caller,
        key,
        fingerprint: fingerprint.finalize().into(),
        legacy: None,
        route: call.op.index(),
    };
    let reply = app
        .engine
        .execute_batch_idempotent(items, atomic, key)
        .await
        .map_err(engine_error)?;
    let rendered = Rendered::from_stored(&reply.response).ok_or_else(ApiError::internal)?;
    Ok((rendered, reply.replayed))
}

/// An item's canonical digest: a single transfer's fingerprint of the same command.
fn item_fingerprint(
    call: &Call,
    args: &engine::shard::command::TransferArgs,
) -> Result<[u8; 32], ApiError> {
    let caller = call.principal()?.caller();
    Ok(engine::runtime::fingerprint::fingerprint(
        "createTransfer",
        &caller,
        &[],
        &Command::Transfer(args.clone()),
    ))
}
