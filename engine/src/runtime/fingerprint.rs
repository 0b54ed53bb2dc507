//! The idempotency fingerprint: SHA-256 of an explicit, versioned, canonical encoding of a request.
//!
//! A retry must match the first request's fingerprint across restarts and upgrades, so the bytes
//! hashed are spelled out here field by field, never derived from `Debug` text or a serde layout
//! (a renamed Rust field or a new variant would change those). Two requests that mean the same
//! thing encode the same: amounts are normalized (`100.5` and `100.50` are one amount), and fields
//! are written in a fixed order whatever the order of the JSON body.
//!
//! # Format, version 1
//!
//! ```text
//! "walletd.request" (15 bytes) | version u8 = 1
//! field*
//! field = kind u8 | name_len u8 | name (UTF-8) | value_len u32 LE | value
//! ```
//!
//! | kind  | value                                                                        |
//! |-------|------------------------------------------------------------------------------|
//! | `s`   | text, UTF-8                                                                  |
//! | `u`   | unsigned integer, u64 LE                                                     |
//! | `i`   | signed integer, i64 LE                                                       |
//! | `b`   | boolean, one byte 0 or 1                                                     |
//! | `d`   | decimal as text, normalized: no trailing fraction zeros, no `.` when whole   |
//!
//! The fields, in this order: `route` (the operation id), `caller`, one `path.{name}` per path
//! parameter in the route's order, `command` (a stable name of the command), then the command's
//! fields in ascending order of their names, nested values flattened with a dotted prefix
//! (`details.description`). An optional field that is absent is left out, so adding an optional
//! field later leaves every earlier request's fingerprint as it was. Enumerations are written as
//! the strings the API shows for them; ids as integers; uuids in their hyphenated text form.
//!
//! A change to any of this is a new version: the version byte changes, and the change is listed in
//! README's "Tests and drills" with what it means for keys stored by the previous version.

use rust_decimal::Decimal;
use sha2::{Digest, Sha256};

use crate::shard::command::{Command, Details};
use crate::values::currency::Currency;
use crate::values::ids::Uuid;

/// Version of the canonical request encoding (see the module docs).
pub const FINGERPRINT_VERSION: u8 = 1;

const MAGIC: &[u8; 15] = b"walletd.request";

/// The canonical bytes of a request (see the module docs); hash them with [`fingerprint`].
#[must_use]
pub fn canonical_request(
    route: &str,
    caller: &str,
    path: &[(String, String)],
    command: &Command,
) -> Vec<u8> {
    let mut out = Canonical::new();
    out.text("route", route);
    out.text("caller", caller);
    for (name, value) in path {
        out.text(&format!("path.{name}"), value);
    }
    out.text("command", command_name(command));
    out.body_starts();
    command_fields(&mut out, command);
    out.bytes
}

/// SHA-256 of [`canonical_request`].
#[must_use]
pub fn fingerprint(
    route: &str,
    caller: &str,
    path: &[(String, String)],
    command: &Command,
) -> [u8; 32] {
    Sha256::digest(canonical_request(route, caller, path, command)).into()
}

/// A decimal in its normalized text form: `100.50` → `100.5`, `7.000` → `7`.
#[must_use]
pub fn normalized_decimal(value: Decimal) -> String {
    value.normalize().to_string()
}

struct Canonical {
    bytes: Vec<u8>,
    /// The last command field written; `None` before the command's fields start.
    last_field: Option<String>,
}

impl Canonical {
    fn new() -> Self {
        let mut bytes = Vec::with_capacity(256);
        bytes.extend_from_slice(MAGIC);
        bytes.push(FINGERPRINT_VERSION);
        Canonical {
            bytes,
            last_field: None,
        }
    }

    fn body_starts(&mut self) {
        self.last_field = Some(String::new());
    }

    fn field(&mut self, kind: u8, name: &str, value: &[u8]) {
        if let Some(last) = &self.last_field {
            // Paired with the format: command fields come in ascending name order.
            debug_assert!(
                last.as_str() < name,
                "fingerprint field {name} written after {last}"
            );
            self.last_field = Some(name.to_owned());
        }
        let name_len = u8::try_from(name.len()).unwrap_or(u8::MAX);
        let value_len = u32::try_from(value.len()).unwrap_or(u32::MAX);
        self.bytes.push(kind);
        self.bytes.push(name_len);
        self.bytes.extend_from_slice(
            name.as_bytes()
                .get(..usize::from(name_len))
                .unwrap_or_default(),
        );
        self.bytes.extend_from_slice(&value_len.to_le_bytes());
        self.bytes.extend_from_slice(
            value
                .get(..usize::try_from(value_len).unwrap_or(usize::MAX))
                .unwrap_or(value),
        );
    }

    fn text(&mut self, name: &str, value: &str) {
        self.field(b's', name, value.as_bytes());
    }

    fn opt_text(&mut self, name: &str, value: Option<&str>) {
        if let Some(value) = value {
            self.text(name, value);
        }
    }

    fn unsigned(&mut self, name: &str, value: u64) {
        self.field(b'u', name, &value.to_le_bytes());
    }

    fn opt_unsigned(&mut self, name: &str, value: Option<u64>) {
        if let Some(value) = value {
            self.unsigned(name, value);
        }
    }

    fn signed(&mut self, name: &str, value: i64) {
        self.field(b'i', name, &value.to_le_bytes());
    }

    fn boolean(&mut self, name: &str, value: bool) {
        self.field(b'b', name, &[u8::from(value)]);
    }

    fn amount(&mut self, name: &str, value: Decimal) {
        self.field(b'd', name, normalized_decimal(value).as_bytes());
    }

    fn opt_amount(&mut self, name: &str, value: Option<Decimal>) {
        if let Some(value) = value {
            self.amount(name, value);
        }
    }

    fn currency(&mut self, name: &str, value: Currency) {
        self.text(name, value.code());
    }

    fn opt_currency(&mut self, name: &str, value: Option<Currency>) {
        if let Some(value) = value {
            self.currency(name, value);
        }
    }

    fn uuid(&mut self, name: &str, value: Uuid) {
        self.text(name, &value.to_string());
    }

    fn opt_uuid(&mut self, name: &str, value: Option<Uuid>) {
        if let Some(value) = value {
            self.uuid(name, value);
        }
    }

    /// `details.*`, in name order.
    fn details(&mut self, details: &Details) {
        self.opt_text("details.description", details.description.as_deref());
        self.opt_text(
            "details.external_reference",
            details.external_reference.as_deref(),
        );
        self.opt_text(
            "details.idempotency_key",
            details.idempotency_key.as_deref(),
        );
        self.opt_text("details.meta", details.meta.as_deref());
    }
}

/// A stable name per command (never the Rust variant's name read back from `Debug`).
fn command_name(command: &Command) -> &'static str {
    match command {
        Command::CreateWallet(_) => "create_wallet",
        Command::FreezeWallet { .. } => "freeze_wallet",
        Command::UnfreezeWallet { .. } => "unfreeze_wallet",
        Command::Deposit(_) => "deposit",
        Command::Withdraw(_) => "withdraw",
        Command::Transfer(_) => "transfer",
        Command::TransferReserve(_) => "transfer_reserve",
        Command::TransferBatchReserve(_) => "transfer_batch_reserve",
        Command::TransferBatchMark { .. } => "transfer_batch_mark",
        Command::TransferCredit(_) => "transfer_credit",
        Command::TransferFinalize { .. } => "transfer_finalize",
        Command::TransferRelease { .. } => "transfer_release",
        Command::PlaceHold(_) => "place_hold",
        Command::ReleaseHold { .. } => "release_hold",
        Command::CaptureHold(_) => "capture_hold",
        Command::ExpireHolds { .. } => "expire_holds",
        Command::Refund(_) => "refund",
        Command::Reverse { .. } => "reverse",
        Command::VerifyIntegrity { .. } => "verify_integrity",
        Command::InitiatePayment(_) => "initiate_payment",
        Command::ConfirmPayment { .. } => "confirm_payment",
        Command::CancelPayment { .. } => "cancel_payment",
        Command::FailPayment { .. } => "fail_payment",
        Command::PaymentProviderResult(_) => "payment_provider_result",
        Command::RefundPayment(_) => "refund_payment",
        Command::PaymentReserve(_) => "payment_reserve",
        Command::PaymentCredit(_) => "payment_credit",
        Command::PaymentReserveFinalize { .. } => "payment_reserve_finalize",
        Command::PaymentReserveRelease { .. } => "payment_reserve_release",
        Command::CreatePaymentLink(_) => "create_payment_link",
        Command::CreateQr(_) => "create_qr",
        Command::CreatePayout(_) => "create_payout",
        Command::ApprovePayout { .. } => "approve_payout",
        Command::RejectPayout { .. } => "reject_payout",
        Command::CancelPayout { .. } => "cancel_payout",
        Command::ExecutePayout { .. } => "execute_payout",
        Command::PayoutProviderResult(_) => "payout_provider_result",
        Command::CreateSettlement(_) => "create_settlement",
        Command::ApproveSettlement { .. } => "approve_settlement",
        Command::RejectSettlement { .. } => "reject_settlement",
        Command::CancelSettlement { .. } => "cancel_settlement",
        Command::ExecuteSettlement { .. } => "execute_settlement",
    }
}

/// The command's fields, in ascending name order (checked in debug builds).
#[allow(clippy::too_many_lines)]
fn command_fields(out: &mut Canonical, command: &Command) {
    match command {
        Command::CreateWallet(c) => {
            out.unsigned("branch_id", c.branch_id);
            out.unsigned("business_id", c.business_id);
            out.currency("currency", c.currency);
            out.opt_text("meta", c.meta.as_deref());
            out.unsigned("owner_id", c.owner_id);
            out.text("owner_type", c.owner_type.as_str());
            out.text("wallet_type", c.wallet_type.as_str());
        }
        Command::FreezeWallet { wallet_id }
        | Command::UnfreezeWallet { wallet_id }
        | Command::VerifyIntegrity { wallet_id, .. } => out.unsigned("wallet_id", wallet_id.0),
        Command::Deposit(m) | Command::Withdraw(m) => {
            out.amount("amount", m.amount);
            out.opt_currency("currency", m.currency);
            out.details(&m.details);
            out.unsigned("wallet_id", m.wallet_id.0);
        }
        Command::Transfer(t) | Command::TransferReserve(t) | Command::TransferBatchReserve(t) => {
            out.amount("amount", t.amount);
            out.currency("currency", t.currency);
            out.details(&t.details);
            out.unsigned("source_wallet_id", t.source_wallet_id.0);
            out.unsigned("target_wallet_id", t.target_wallet_id.0);
        }
        Command::TransferCredit(t) => {
            out.amount("amount", t.amount);
            out.currency("currency", t.currency);
            out.opt_text("description", t.description.as_deref());
            out.unsigned("source_wallet_id", t.source_wallet_id.0);
            out.unsigned("target_wallet_id", t.target_wallet_id.0);
            out.uuid("transfer_uuid", t.transfer_uuid);
        }
        Command::TransferFinalize { transfer_uuid }
        | Command::TransferRelease { transfer_uuid } => {
            out.uuid("transfer_uuid", *transfer_uuid);
        }
        // Internal to the atomic batch protocol: never under a client's key.
        Command::TransferBatchMark { batch, .. } => out.uuid("batch", *batch),
        Command::PlaceHold(h) => {
            out.amount("amount", h.amount);
            out.currency("currency", h.currency);
            out.opt_unsigned("expiry_minutes", h.expiry_minutes.map(u64::from));
            out.opt_text("reason", h.reason.as_deref());
            out.unsigned("wallet_id", h.wallet_id.0);
        }
        Command::ReleaseHold { hold_uuid } => out.uuid("hold_uuid", *hold_uuid),
        Command::CaptureHold(c) => {
            out.opt_amount("amount", c.amount);
            out.opt_unsigned("counter_wallet_id", c.counter_wallet_id.map(|w| w.0));
            out.details(&c.details);
            out.uuid("hold_uuid", c.hold_uuid);
        }
        Command::ExpireHolds { max_holds } => out.unsigned("max_holds", u64::from(*max_holds)),
        Command::Refund(r) => {
            out.amount("amount", r.amount);
            out.details(&r.details);
            out.uuid("original_transaction_uuid", r.original_transaction_uuid);
            out.opt_text("reason", r.reason.as_deref());
        }
        Command::Reverse {
            transaction_uuid,
            reason,
        } => {
            out.text("reason", reason);
            out.uuid("transaction_uuid", *transaction_uuid);
        }
        Command::InitiatePayment(p) => {
            out.amount("amount", p.amount);
            out.currency("currency", p.currency);
            out.opt_text("description", p.description.as_deref());
            out.amount("fee.fixed", p.fee.fixed);
            out.amount("fee.percent", p.fee.percent);
            out.opt_text("idempotency_key", p.idempotency_key.as_deref());
            out.unsigned("merchant_id", p.merchant_id);
            out.unsigned("merchant_wallet_id", p.merchant_wallet_id.0);
            out.opt_text("metadata", p.metadata.as_deref());
            out.unsigned("payer_wallet_id", p.payer_wallet_id.0);
            out.opt_uuid("payment_link_uuid", p.payment_link_uuid);
            out.text("provider", p.provider.as_str());
        }
        Command::ConfirmPayment { payment_uuid }
        | Command::CancelPayment { payment_uuid }
        | Command::FailPayment { payment_uuid } => out.uuid("payment_uuid", *payment_uuid),
        Command::PaymentProviderResult(r) => {
            out.uuid("payment_uuid", r.payment_uuid);
            out.opt_text("provider_ref", r.provider_ref.as_deref());
            out.boolean("succeeded", r.succeeded);
        }
        Command::RefundPayment(r) => {
            out.opt_amount("amount", r.amount);
            out.uuid("payment_uuid", r.payment_uuid);
            out.opt_text("reason", r.reason.as_deref());
        }
        Command::PaymentReserve(r) => {
            out.amount("amount", r.amount);
            out.currency("currency", r.currency);
            out.opt_text("description", r.description.as_deref());
            out.unsigned("merchant_wallet_id", r.merchant_wallet_id.0);
            out.unsigned("payer_wallet_id", r.payer_wallet_id.0);
            out.uuid("payment_uuid", r.payment_uuid);
        }
        Command::PaymentCredit(c) => {
            out.amount("amount", c.amount);
            out.currency("currency", c.currency);
            out.text("kind", c.kind.as_str());
            out.uuid("payment_uuid", c.payment_uuid);
            out.uuid("reservation_uuid", c.reservation_uuid);
            out.unsigned("source_wallet_id", c.source_wallet_id.0);
            out.unsigned("target_wallet_id", c.target_wallet_id.0);
        }
        Command::PaymentReserveFinalize { reservation_uuid }
        | Command::PaymentReserveRelease { reservation_uuid } => {
            out.uuid("reservation_uuid", *reservation_uuid);
        }
        Command::CreatePaymentLink(l) => {
            out.amount("amount", l.amount);
            out.currency("currency", l.currency);
            out.opt_text("description", l.description.as_deref());
            out.opt_unsigned("expires_in_minutes", l.expires_in_minutes.map(u64::from));
            out.unsigned("merchant_wallet_id", l.merchant_wallet_id.0);
        }
        Command::CreateQr(q) => {
            out.opt_amount("amount", q.amount);
            out.opt_unsigned("branch_id", q.branch_id);
            out.currency("currency", q.currency);
            out.opt_unsigned("expires_in_minutes", q.expires_in_minutes.map(u64::from));
            out.unsigned("merchant_wallet_id", q.merchant_wallet_id.0);
        }
        Command::CreatePayout(p) => {
            out.amount("amount", p.amount);
            out.unsigned("created_by", p.created_by);
            out.currency("currency", p.currency);
            out.opt_text("description", p.description.as_deref());
            out.opt_text("idempotency_key", p.idempotency_key.as_deref());
            out.opt_text("payout_destination", p.payout_destination.as_deref());
            out.text("payout_method", &p.payout_method);
            out.unsigned("wallet_id", p.wallet_id.0);
        }
        Command::ApprovePayout {
            payout_id,
            by,
            notes,
        } => {
            out.unsigned("by", *by);
            out.opt_text("notes", notes.as_deref());
            out.unsigned("payout_id", payout_id.0);
        }
        Command::RejectPayout {
            payout_id,
            by,
            reason,
        } => {
            out.unsigned("by", *by);
            out.unsigned("payout_id", payout_id.0);
            out.text("reason", reason);
        }
        Command::CancelPayout { payout_id, by } | Command::ExecutePayout { payout_id, by } => {
            out.unsigned("by", *by);
            out.unsigned("payout_id", payout_id.0);
        }
        Command::PayoutProviderResult(r) => {
            out.unsigned("payout_id", r.payout_id.0);
            out.opt_text("provider_ref", r.provider_ref.as_deref());
            out.boolean("succeeded", r.succeeded);
        }
        Command::CreateSettlement(s) => {
            out.unsigned("created_by", s.created_by);
            out.opt_text("idempotency_key", s.idempotency_key.as_deref());
            out.opt_text("notes", s.notes.as_deref());
            out.signed("period_end_ms", s.period_end_ms);
            out.signed("period_start_ms", s.period_start_ms);
            out.text("period_type", s.period_type.as_str());
            out.unsigned("wallet_id", s.wallet_id.0);
        }
        Command::ApproveSettlement {
            settlement_id,
            by,
            notes,
        } => {
            out.unsigned("by", *by);
            out.opt_text("notes", notes.as_deref());
            out.unsigned("settlement_id", settlement_id.0);
        }
        Command::RejectSettlement {
            settlement_id,
            by,
            reason,
        } => {
            out.unsigned("by", *by);
            out.text("reason", reason);
            out.unsigned("settlement_id", settlement_id.0);
        }
        Command::CancelSettlement { settlement_id, by }
        | Command::ExecuteSettlement { settlement_id, by } => {
            out.unsigned("by", *by);
            out.unsigned("settlement_id", settlement_id.0);
        }
    }
}
