//! The answer of `POST /v1/transfers/batch`: one result per item, in order. A posted item is the
//! transfer as `POST /v1/transfers` renders it (`{status: true, data: Transaction}`); any other
//! is `{status: false, error: {code, message}}`.
//!
//! * Not atomic: 200 `{status: true, data: {atomic: false, count, posted, failed, results}}`.
//! * Atomic, posted: the same with `atomic: true`.
//! * Atomic, refused: the failing item's status and code in the standard error envelope,
//!   `error.details = {failed_index, results}`, where every other item is `batch_aborted`.

use engine::shard::command::{BatchAnswer, BatchItemResult};
use hyper::StatusCode;
use serde::Serialize;
use serde_json::value::RawValue;
use serde_json::{json, Value};

use super::envelope::{envelope, Rendered};
use super::ledger::{transaction, TransactionJson};
use crate::error::ApiError;

/// The code of an atomic batch's items that were not posted because another one failed.
pub const BATCH_ABORTED: &str = "batch_aborted";

#[derive(Serialize)]
#[serde(untagged)]
enum ItemJson {
    Posted {
        status: bool,
        data: Box<TransactionJson>,
    },
    Failed {
        status: bool,
        error: ItemErrorJson,
    },
    Raw(Box<RawValue>),
}

#[derive(Serialize)]
struct ItemErrorJson {
    code: String,
    message: String,
}

fn failed(code: &str, message: String) -> ItemJson {
    ItemJson::Failed {
        status: false,
        error: ItemErrorJson {
            code: code.to_owned(),
            message,
        },
    }
}

fn aborted(failed_index: usize) -> ItemJson {
    failed(
        BATCH_ABORTED,
        format!("not posted: item {failed_index} of this atomic batch failed"),
    )
}

/// An item refused by the API, as it stands in the answer (and as the engine carries it along).
pub fn item_error(error: &ApiError) -> Vec<u8> {
    let item = failed(error.code, error.message.clone());
    serde_json::to_vec(&item).unwrap_or_else(|_| br#"{"status":false}"#.to_vec())
}

fn item_json(item: &BatchItemResult, failed_index: Option<usize>) -> ItemJson {
    match item {
        BatchItemResult::Posted(view) => ItemJson::Posted {
            status: true,
            data: Box::new(transaction(view)),
        },
        BatchItemResult::Rejected(rejection) => {
            let error = ApiError::from_rejection(rejection);
            failed(error.code, error.message)
        }
        BatchItemResult::Refused(bytes) => std::str::from_utf8(bytes)
            .ok()
            .and_then(|text| RawValue::from_string(text.to_owned()).ok())
            .map_or_else(
                || failed("internal_error", "the item's error was lost".into()),
                ItemJson::Raw,
            ),
        BatchItemResult::NotPosted => aborted(failed_index.unwrap_or(0)),
    }
}

/// The whole answer of a batch the engine ran.
pub fn render_batch(answer: &BatchAnswer) -> Rendered {
    let results: Vec<ItemJson> = answer
        .items
        .iter()
        .map(|item| item_json(item, answer.failed))
        .collect();
    if let (true, Some(index)) = (answer.atomic, answer.failed) {
        let error = match answer.items.get(index) {
            Some(BatchItemResult::Rejected(rejection)) => ApiError::from_rejection(rejection),
            _ => ApiError::internal(),
        };
        return failure(index, &error, results);
    }
    let posted = answer
        .items
        .iter()
        .filter(|item| matches!(item, BatchItemResult::Posted(_)))
        .count();
    let data = BatchJson {
        atomic: answer.atomic,
        count: answer.items.len(),
        failed: answer.items.len() - posted,
        posted,
        results,
    };
    Rendered::json(StatusCode::OK, &envelope(data, None))
}

/// The answer's `data`, serialized straight from the items: through a `serde_json::Value` (a
/// map per item and per transaction, each key a `String`), rendering a batch of 1,000 was most
/// of the HTTP workers' CPU per transfer (BENCHMARKS.md, "Each wallet once per eviction"), and
/// every amount was parsed into an `f64` on the way (`10.00` came out as `10.0`). The fields
/// keep the order `json!` gave them (sorted); an item's transaction has the key order
/// `POST /v1/transfers` renders.
#[derive(Serialize)]
struct BatchJson {
    atomic: bool,
    count: usize,
    failed: usize,
    posted: usize,
    results: Vec<ItemJson>,
}

/// An atomic batch whose item `index` the API refused: nothing reached the engine.
pub fn batch_failure(index: usize, error: &ApiError, count: usize) -> Rendered {
    let results = (0..count)
        .map(|at| {
            if at == index {
                failed(error.code, error.message.clone())
            } else {
                aborted(index)
            }
        })
        .collect();
    failure(index, error, results)
}

fn failure(index: usize, error: &ApiError, results: Vec<ItemJson>) -> Rendered {
    let results = serde_json::to_value(results).unwrap_or(Value::Null);
    let refused = ApiError::new(
        error.status,
        error.code,
        format!(
            "item {index} failed ({}); nothing in this atomic batch was posted",
            error.message
        ),
    )
    .with_details(json!({ "failed_index": index, "results": results }));
    Rendered::error(&refused)
}
