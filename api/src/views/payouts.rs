//! Payouts with their attempts, and settlements with their items (contract 2.6–2.7).

use engine::Currency;
use serde::Serialize;

use super::fields::{amount, date, raw_json, timestamp};
use crate::json::Number;
use engine::commerce::payout::{SettlementItem, Stamp};
use engine::commerce::view::{PayoutAttemptView, PayoutView, SettlementView};
use serde_json::value::RawValue;

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
