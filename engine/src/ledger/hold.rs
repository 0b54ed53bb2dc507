//! Holds: funds reserved on a wallet, later captured, released or expired.
//!
//! A hold moves no money: it raises the wallet's `held` balance, which lowers what is spendable
//! (`available = balance − held`). Its life is `active → released | captured | expired`, and only an
//! active hold counts towards `held`. Expiry is decided, never assumed: a hold stays `active` in the
//! state until [`crate::Shard::expire_holds`] emits its `HoldClosed { status: Expired }` event, and until
//! then its funds stay reserved (the conservative side). Capture and release already refuse a hold
//! whose `expires_at_ms` has passed (`hold_expired`), so a tick that is late changes no outcome.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::values::ids::{HoldId, TransactionId, Uuid};

/// Shortest hold, in minutes.
pub const EXPIRY_MINUTES_MIN: u32 = 1;
/// Longest hold: one week, in minutes.
pub const EXPIRY_MINUTES_MAX: u32 = 10_080;
/// Used when a request gives no expiry.
pub const EXPIRY_MINUTES_DEFAULT: u32 = 60;
/// Expiry of a hold that never expires on its own (a payout's: its life cycle closes it):
/// 9999-12-31T23:59:59.999Z, the last instant an ISO 8601 four-digit year can show.
pub const NEVER_EXPIRES_AT_MS: i64 = 253_402_300_799_999;

/// Life-cycle state of a hold.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum HoldStatus {
    Active,
    Released,
    Captured,
    Expired,
}

impl HoldStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Active => "active",
            Self::Released => "released",
            Self::Captured => "captured",
            Self::Expired => "expired",
        }
    }
}

/// A hold (contract §2.5), kept in its wallet's history.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Hold {
    pub id: HoldId,
    pub uuid: Uuid,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub status: HoldStatus,
    pub reason: Option<Box<str>>,
    pub created_at_ms: i64,
    pub expires_at_ms: i64,
    /// When it left `active`.
    pub closed_at_ms: Option<i64>,
    /// For `captured`: the amount debited (≤ `amount`; the rest was released).
    #[serde(with = "crate::values::money::decimal_opt")]
    pub captured_amount: Option<Decimal>,
    /// For `captured`: the wallet's hold_capture transaction.
    pub capture_transaction_id: Option<TransactionId>,
}

impl Hold {
    /// Whether the hold is past its expiry at `now_ms` (expired from `expires_at_ms` on, inclusive).
    #[must_use]
    pub fn is_past_expiry(&self, now_ms: i64) -> bool {
        now_ms >= self.expires_at_ms
    }

    /// Closes an active hold as released, captured (for `captured_amount`, by
    /// `capture_transaction_id`) or expired. The one place a hold's record changes: the shard and
    /// the history indexer both go through it.
    pub fn close(
        &mut self,
        status: HoldStatus,
        captured_amount: Option<Decimal>,
        capture_transaction_id: Option<TransactionId>,
        at_ms: i64,
    ) -> Result<(), &'static str> {
        if self.status != HoldStatus::Active || status == HoldStatus::Active {
            return Err("only an active hold can close");
        }
        if captured_amount.is_some_and(|amount| amount > self.amount) {
            return Err("capture above the hold amount");
        }
        self.status = status;
        self.closed_at_ms = Some(at_ms);
        self.captured_amount = captured_amount;
        self.capture_transaction_id = capture_transaction_id;
        Ok(())
    }
}
