//! Payouts and settlements: funds leaving the service through an approval-based life cycle.
//!
//! # Payouts
//!
//! Kept on the wallet's shard. Creation places a hold on the wallet for the amount (a hold that
//! never expires on its own and that only the payout may close), so the funds stay reserved while
//! the payout waits:
//!
//! ```text
//! pending ──approve (four eyes)──> approved ──execute──> executed ──provider ok──> paid
//!    │                                │                     └──provider failed──> failed
//!    ├──reject──> rejected            └──cancel──> cancelled
//!    └──cancel──> cancelled
//! ```
//!
//! reject/cancel release the hold; execute captures it into the currency's `payout_clearing`
//! system account (a `payout` debit transaction) and adds a `submitted` attempt; a provider failure
//! returns the funds from payout clearing to the wallet (`payout_return` credit), even to a frozen
//! wallet. Any other transition is `invalid_state`; the creator may not approve (`four_eyes`).
//!
//! # Settlements
//!
//! Kept on the merchant wallet's shard; the same machine without `paid`/`failed`. Creation gathers
//! the wallet's `payment` credits of the period (dates inclusive, as UTC day starts) that no live
//! settlement holds yet, one [`SettlementItem`] each, at most [`SETTLEMENT_ITEMS_MAX`] (the oldest;
//! the next settlement of the period takes the rest). A transaction is never in two live
//! settlements: reject and cancel free their items. Execute debits the merchant wallet by the net
//! total into `settlement_clearing` (spendable must cover it). An item is the credit as it was
//! posted: a later refund of its payment is a separate debit of the merchant, not netted here
//! (decisions §6: items are the period's merchant credits); the spendable check keeps execute from
//! taking more than the merchant holds.

use rust_decimal::Decimal;
use serde::{Deserialize, Serialize};

use crate::values::currency::Currency;
use crate::values::ids::{HoldId, PayoutId, SettlementId, TransactionId, Uuid, WalletId};

/// Most items one settlement takes (bounds one WAL record to well under a megabyte).
pub const SETTLEMENT_ITEMS_MAX: usize = 10_000;
/// One day in milliseconds (settlement periods are whole UTC days).
pub const DAY_MS: i64 = 86_400_000;

/// Who did something, and when.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Stamp {
    /// Employee id.
    pub by: u64,
    pub at_ms: i64,
}

/// Life-cycle state of a payout.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutStatus {
    Pending,
    Approved,
    Rejected,
    Cancelled,
    Executed,
    Paid,
    Failed,
}

impl PayoutStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
            Self::Executed => "executed",
            Self::Paid => "paid",
            Self::Failed => "failed",
        }
    }

    /// Parses the names above (list filters).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Approved,
            Self::Rejected,
            Self::Cancelled,
            Self::Executed,
            Self::Paid,
            Self::Failed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// The transition table (module docs): whether a payout in `self` may become `next`.
    #[must_use]
    pub fn can_become(&self, next: PayoutStatus) -> bool {
        use PayoutStatus as S;
        matches!(
            (self, next),
            (S::Pending, S::Approved | S::Rejected | S::Cancelled)
                | (S::Approved, S::Executed | S::Cancelled)
                | (S::Executed, S::Paid | S::Failed)
        )
    }

    /// Whether the payout's hold is still active in this state.
    #[must_use]
    pub fn holds_funds(&self) -> bool {
        matches!(self, Self::Pending | Self::Approved)
    }
}

/// State of one attempt to pay a payout out.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutAttemptStatus {
    Submitted,
    Succeeded,
    Failed,
}

impl PayoutAttemptStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Submitted => "submitted",
            Self::Succeeded => "succeeded",
            Self::Failed => "failed",
        }
    }
}

/// One entry of `Payout.attempts`: made on execute, completed by the provider's result.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct PayoutAttempt {
    /// 1-based.
    pub number: u32,
    pub status: PayoutAttemptStatus,
    pub submitted_at_ms: i64,
    pub completed_at_ms: Option<i64>,
    pub provider_ref: Option<Box<str>>,
}

/// A payout (contract §2.7), kept on its wallet's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Payout {
    pub id: PayoutId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub business_id: u64,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    pub currency: Currency,
    pub status: PayoutStatus,
    pub payout_method: Box<str>,
    /// Opaque JSON text from the API.
    pub payout_destination: Option<Box<str>>,
    pub description: Option<Box<str>>,
    pub idempotency_key: Option<Box<str>>,
    /// The hold that reserves the funds until execute, reject or cancel.
    pub hold_id: HoldId,
    pub created: Stamp,
    pub updated_at_ms: i64,
    pub approved: Option<Stamp>,
    pub approval_notes: Option<Box<str>>,
    pub rejected: Option<Stamp>,
    pub rejection_reason: Option<Box<str>>,
    pub cancelled: Option<Stamp>,
    pub executed: Option<Stamp>,
    /// The wallet's `payout` debit (execute).
    pub transaction_id: Option<TransactionId>,
    pub paid_at_ms: Option<i64>,
    pub failed_at_ms: Option<i64>,
    /// The wallet's `payout_return` credit (provider failure).
    pub return_transaction_id: Option<TransactionId>,
    pub attempts: Vec<PayoutAttempt>,
}

impl Payout {
    /// Whether the payout may leave memory once filed: rejected, cancelled, paid and failed ones
    /// never change again.
    #[must_use]
    pub fn may_leave_memory(&self) -> bool {
        matches!(
            self.status,
            PayoutStatus::Rejected
                | PayoutStatus::Cancelled
                | PayoutStatus::Paid
                | PayoutStatus::Failed
        )
    }

    /// Applies one transition (`PayoutChanged`): the status it names, its stamps and attempts.
    pub(crate) fn apply_change(
        &mut self,
        change: &PayoutChange,
        at_ms: i64,
    ) -> Result<(), &'static str> {
        let next = change.status();
        if !self.status.can_become(next) {
            return Err("payout transition not allowed");
        }
        self.status = next;
        self.updated_at_ms = at_ms;
        match change {
            PayoutChange::Approved { by, notes } => {
                self.approved = Some(Stamp { by: *by, at_ms });
                self.approval_notes.clone_from(notes);
            }
            PayoutChange::Rejected { by, reason } => {
                self.rejected = Some(Stamp { by: *by, at_ms });
                self.rejection_reason = Some(reason.clone());
            }
            PayoutChange::Cancelled { by } => self.cancelled = Some(Stamp { by: *by, at_ms }),
            PayoutChange::Executed { by, transaction_id } => {
                self.executed = Some(Stamp { by: *by, at_ms });
                self.transaction_id = Some(*transaction_id);
                let number = u32::try_from(self.attempts.len())
                    .unwrap_or(u32::MAX)
                    .saturating_add(1);
                // Our reference for the provider, until its result brings its own; derived from
                // stored state, so replay derives the same one.
                let provider_ref = format!("po_{}_{number}", self.uuid).into_boxed_str();
                self.attempts.push(PayoutAttempt {
                    number,
                    status: PayoutAttemptStatus::Submitted,
                    submitted_at_ms: at_ms,
                    completed_at_ms: None,
                    provider_ref: Some(provider_ref),
                });
            }
            PayoutChange::Paid { provider_ref } | PayoutChange::Failed { provider_ref, .. } => {
                let succeeded = matches!(change, PayoutChange::Paid { .. });
                if succeeded {
                    self.paid_at_ms = Some(at_ms);
                } else {
                    self.failed_at_ms = Some(at_ms);
                }
                if let PayoutChange::Failed {
                    return_transaction_id,
                    ..
                } = change
                {
                    self.return_transaction_id = Some(*return_transaction_id);
                }
                if let Some(attempt) = self.attempts.last_mut() {
                    attempt.status = if succeeded {
                        PayoutAttemptStatus::Succeeded
                    } else {
                        PayoutAttemptStatus::Failed
                    };
                    attempt.completed_at_ms = Some(at_ms);
                    if provider_ref.is_some() {
                        attempt.provider_ref.clone_from(provider_ref);
                    }
                }
            }
        }
        Ok(())
    }
}

/// One transition of a payout (the event carries it; `apply` checks it is allowed).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PayoutChange {
    Approved {
        by: u64,
        notes: Option<Box<str>>,
    },
    Rejected {
        by: u64,
        reason: Box<str>,
    },
    Cancelled {
        by: u64,
    },
    Executed {
        by: u64,
        transaction_id: TransactionId,
    },
    Paid {
        provider_ref: Option<Box<str>>,
    },
    Failed {
        provider_ref: Option<Box<str>>,
        return_transaction_id: TransactionId,
    },
}

impl PayoutChange {
    /// The status the payout is in after this change.
    #[must_use]
    pub fn status(&self) -> PayoutStatus {
        match self {
            Self::Approved { .. } => PayoutStatus::Approved,
            Self::Rejected { .. } => PayoutStatus::Rejected,
            Self::Cancelled { .. } => PayoutStatus::Cancelled,
            Self::Executed { .. } => PayoutStatus::Executed,
            Self::Paid { .. } => PayoutStatus::Paid,
            Self::Failed { .. } => PayoutStatus::Failed,
        }
    }
}

/// How a settlement's period was chosen (recorded; the bounds are what count).
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum PeriodType {
    Daily,
    Weekly,
    Monthly,
    Custom,
}

impl PeriodType {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Daily => "daily",
            Self::Weekly => "weekly",
            Self::Monthly => "monthly",
            Self::Custom => "custom",
        }
    }

    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [Self::Daily, Self::Weekly, Self::Monthly, Self::Custom]
            .into_iter()
            .find(|period| period.as_str() == text)
    }
}

/// Life-cycle state of a settlement.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Hash, PartialOrd, Ord, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettlementStatus {
    Pending,
    Approved,
    Rejected,
    Cancelled,
    Executed,
}

impl SettlementStatus {
    #[must_use]
    pub fn as_str(&self) -> &'static str {
        match self {
            Self::Pending => "pending",
            Self::Approved => "approved",
            Self::Rejected => "rejected",
            Self::Cancelled => "cancelled",
            Self::Executed => "executed",
        }
    }

    /// Parses the names above (list filters).
    #[must_use]
    pub fn parse(text: &str) -> Option<Self> {
        [
            Self::Pending,
            Self::Approved,
            Self::Rejected,
            Self::Cancelled,
            Self::Executed,
        ]
        .into_iter()
        .find(|status| status.as_str() == text)
    }

    /// Whether a settlement in `self` may become `next`.
    #[must_use]
    pub fn can_become(&self, next: SettlementStatus) -> bool {
        use SettlementStatus as S;
        matches!(
            (self, next),
            (S::Pending, S::Approved | S::Rejected | S::Cancelled)
                | (S::Approved, S::Executed | S::Cancelled)
        )
    }

    /// Whether the settlement still claims its items (not rejected or cancelled).
    #[must_use]
    pub fn claims_items(&self) -> bool {
        !matches!(self, Self::Rejected | Self::Cancelled)
    }
}

/// One merchant credit in a settlement (decisions §6).
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct SettlementItem {
    pub transaction_id: TransactionId,
    pub transaction_uuid: Uuid,
    #[serde(with = "crate::values::money::decimal")]
    pub amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub fee_amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub net_amount: Decimal,
}

/// A settlement (contract §2.6), kept on its merchant wallet's shard.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct Settlement {
    pub id: SettlementId,
    pub uuid: Uuid,
    pub wallet_id: WalletId,
    pub business_id: u64,
    pub currency: Currency,
    pub period_type: PeriodType,
    /// First day, as its UTC day start.
    pub period_start_ms: i64,
    /// Last day (inclusive), as its UTC day start.
    pub period_end_ms: i64,
    pub status: SettlementStatus,
    pub notes: Option<Box<str>>,
    pub idempotency_key: Option<Box<str>>,
    pub items: Vec<SettlementItem>,
    /// Sum of the items' net amounts: what execute moves.
    #[serde(with = "crate::values::money::decimal")]
    pub total_amount: Decimal,
    #[serde(with = "crate::values::money::decimal")]
    pub total_fee_amount: Decimal,
    pub created: Stamp,
    pub updated_at_ms: i64,
    pub approved: Option<Stamp>,
    pub approval_notes: Option<Box<str>>,
    pub rejected: Option<Stamp>,
    pub rejection_reason: Option<Box<str>>,
    pub cancelled: Option<Stamp>,
    pub executed: Option<Stamp>,
    /// The wallet's `settlement` debit (execute).
    pub transaction_id: Option<TransactionId>,
}

impl Settlement {
    /// Whether the settlement may leave memory once filed: rejected, cancelled and executed ones
    /// never change again (an executed one's claim on its items is then kept by the store).
    #[must_use]
    pub fn may_leave_memory(&self) -> bool {
        matches!(
            self.status,
            SettlementStatus::Rejected | SettlementStatus::Cancelled | SettlementStatus::Executed
        )
    }

    /// Applies one transition (`SettlementChanged`): the status it names and its stamps.
    pub(crate) fn apply_change(
        &mut self,
        change: &SettlementChange,
        at_ms: i64,
    ) -> Result<(), &'static str> {
        let next = change.status();
        if !self.status.can_become(next) {
            return Err("settlement transition not allowed");
        }
        self.status = next;
        self.updated_at_ms = at_ms;
        match change {
            SettlementChange::Approved { by, notes } => {
                self.approved = Some(Stamp { by: *by, at_ms });
                self.approval_notes.clone_from(notes);
            }
            SettlementChange::Rejected { by, reason } => {
                self.rejected = Some(Stamp { by: *by, at_ms });
                self.rejection_reason = Some(reason.clone());
            }
            SettlementChange::Cancelled { by } => self.cancelled = Some(Stamp { by: *by, at_ms }),
            SettlementChange::Executed { by, transaction_id } => {
                self.executed = Some(Stamp { by: *by, at_ms });
                self.transaction_id = Some(*transaction_id);
            }
        }
        Ok(())
    }
}

/// One transition of a settlement.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
#[serde(rename_all = "snake_case")]
pub enum SettlementChange {
    Approved {
        by: u64,
        notes: Option<Box<str>>,
    },
    Rejected {
        by: u64,
        reason: Box<str>,
    },
    Cancelled {
        by: u64,
    },
    Executed {
        by: u64,
        transaction_id: TransactionId,
    },
}

impl SettlementChange {
    /// The status the settlement is in after this change.
    #[must_use]
    pub fn status(&self) -> SettlementStatus {
        match self {
            Self::Approved { .. } => SettlementStatus::Approved,
            Self::Rejected { .. } => SettlementStatus::Rejected,
            Self::Cancelled { .. } => SettlementStatus::Cancelled,
            Self::Executed { .. } => SettlementStatus::Executed,
        }
    }
}
