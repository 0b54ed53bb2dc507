//! Health, the OpenAPI document, and metrics.

use std::sync::atomic::Ordering;

use hyper::StatusCode;
use serde_json::json;

use super::call::{ok, Handled};
use crate::app::SharedApp;
use crate::error::ApiError;
use crate::views::{timestamp, Rendered};

/// The served OpenAPI 3.1 document (hand-written; a test checks it lists every route).
pub const OPENAPI: &str = include_str!("../../openapi.json");

pub async fn health(app: &SharedApp) -> Handled {
    if !app.ready.load(Ordering::SeqCst) {
        return Err(ApiError::unavailable("shutting down"));
    }
    // A failed log or shard: unusable until a restart (the watchdog is stopping the process).
    if let Some(reason) = app.engine.failure() {
        return Err(ApiError::unavailable(reason));
    }
    let (last_lsn, durable_lsn) = app.engine.lsns();
    ok(
        StatusCode::OK,
        &json!({
            "status": true,
            "data": {
                "status": "ok",
                "version": env!("CARGO_PKG_VERSION"),
                "timestamp": timestamp(app.now_ms()),
                "wal": {"last_lsn": last_lsn, "durable_lsn": durable_lsn},
            }
        }),
    )
}

pub fn openapi() -> Handled {
    Ok((
        Rendered {
            status: StatusCode::OK,
            body: OPENAPI.as_bytes().to_vec(),
            content_type: crate::views::JSON,
        },
        false,
    ))
}

pub fn metrics(app: &SharedApp) -> Handled {
    let (last_lsn, durable_lsn) = app.engine.lsns();
    let text = app.metrics.render(
        app.engine.wal_stats(),
        last_lsn,
        durable_lsn,
        &app.engine.queue_depths(),
    );
    Ok((
        Rendered {
            status: StatusCode::OK,
            body: text.into_bytes(),
            content_type: "text/plain; version=0.0.4",
        },
        false,
    ))
}
