//! Wallets, balances, transactions, ledger entries, holds, integrity reports and reversals
//! (contract 2.2–2.5).

use engine::ledger::view::{
    BalanceView, EntryView, HoldView, IntegrityReport, TransactionView, WalletView,
};
use engine::Currency;
use serde::Serialize;
use serde_json::{json, Value};

use super::fields::{amount, meta_value, timestamp};
use crate::json::Number;

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

/// The reversal answer: the reversal transaction and every mirror entry.
#[derive(Serialize)]
pub struct ReversalJson {
    pub(super) transaction: TransactionJson,
    pub(super) entries: Vec<EntryJson>,
}
