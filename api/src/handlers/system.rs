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
    // Quarantined cross-shard moves (recovery could not finish them) do not make the service
    // unusable: they are listed for an operator, and `status` says so.
    let quarantined: Vec<serde_json::Value> = app
        .engine
        .quarantined_moves()
        .iter()
        .map(|moved| {
            json!({
                "kind": moved.kind,
                "uuid": moved.uuid.to_string(),
                "payment_uuid": moved.payment_uuid.map(|uuid| uuid.to_string()),
                "reason": moved.reason,
            })
        })
        .collect();
    let status = if quarantined.is_empty() {
        "ok"
    } else {
        "degraded"
    };
    ok(
        StatusCode::OK,
        &json!({
            "status": true,
            "data": {
                "status": status,
                "version": env!("CARGO_PKG_VERSION"),
                "timestamp": timestamp(app.now_ms()),
                "wal": {"last_lsn": last_lsn, "durable_lsn": durable_lsn},
                "quarantined_moves": quarantined,
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

pub async fn metrics(app: &SharedApp) -> Handled {
    let (last_lsn, durable_lsn) = app.engine.lsns();
    let history = app.engine.history();
    // Off the runtime's workers: reading a keyspace's tables takes the lock fjall holds while it
    // syncs a version file (tens of ms on a busy disk), and a scrape must not hold a worker that
    // long (docs/history.md, "Where the lookup runs").
    let store_memory = {
        let history = history.clone();
        tokio::task::spawn_blocking(move || history.store().memory().ok())
            .await
            .ok()
            .flatten()
    };
    let text = app.metrics.render(
        app.engine.wal_stats(),
        crate::metrics::LogGauges {
            last_lsn,
            durable_lsn,
            indexed_lsn: history.progress().indexed_lsn,
            memtable_wait: history.store().memtable_wait(),
            foreground_reads: history.store().foreground_reads(),
            store_memory,
            snapshots: app.engine.snapshot_stats(),
        },
        &app.engine.queue_depths(),
        app.engine.quarantined_moves().len(),
        app.engine.idempotency_keys_held(),
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
