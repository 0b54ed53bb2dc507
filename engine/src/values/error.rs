//! Errors of the engine, one enum per concern.
//!
//! * [`Rejection`]: a command was refused by the business rules. Deterministic: the same command
//!   against the same state is refused the same way, so it is never retried blindly and never logged
//!   (a rejected command produces no events and changes nothing).
//! * [`ApplyError`]: an event does not fit the state it is applied to. `decide` never produces such an
//!   event, so this means corruption or a bug; replay must stop loudly.
//! * [`DecodeError`]: bytes of an event batch or snapshot are not a valid encoding.
//! * [`EncodeError`]: a value could not be serialised (a bug); nothing may be written for it.
//! * [`InvariantViolation`]: [`crate::Shard::check_invariants`] found the state inconsistent.

use rust_decimal::Decimal;

use crate::values::currency::{Currency, UnknownCurrency};
use crate::values::ids::{EntryId, WalletId};

/// Why a command was refused.
///
/// Each rejection has a stable string [`code`](Rejection::code) for clients and a numeric
/// [`precedence`](Rejection::precedence): `decide` runs its checks in ascending precedence, so a
/// command that breaks several rules reports the one with the lowest number (as TigerBeetle orders its
/// result codes). Suggested HTTP statuses are for the API layer.
///
/// | precedence | code | when | HTTP |
/// |---|---|---|---|
/// | 1 | `unknown_currency` | code not in the ISO 4217 table | 422 |
/// | 2 | `invalid_request` | a non-amount field is out of range (expiry minutes, text too long, same wallet twice, system account named) | 422 |
/// | 3 | `wrong_shard` | a wallet id that this shard does not own | 500 (routing bug) |
/// | 4 | `not_found` | wallet, hold, transaction or transfer unknown | 404 |
/// | 5 | `duplicate` | second wallet for the same (owner, currency, wallet type) | 409 |
/// | 6 | `currency_mismatch` | currency given is not the wallet's | 422 |
/// | 7 | `invalid_amount` | ≤ 0, > 1e12, or too many fraction digits | 422 |
/// | 8 | `wallet_frozen` | a credit or debit on a frozen wallet | 409 |
/// | 9 | `invalid_state` | the record's state does not allow the operation | 409 |
/// | 10 | `hold_expired` | capture or release of a hold past its expiry | 409 |
/// | 11 | `capture_exceeds_hold` | capture amount above the hold amount | 422 |
/// | 12 | `not_a_debit` | refund of a transaction that is not a wallet debit | 422 |
/// | 13 | `already_reversed` | reversal (or refund) of a reversed transaction | 409 |
/// | 14 | `refund_exceeds_original` | refunds of one original would exceed it | 422 |
/// | 15 | `insufficient_funds` | spendable (balance − held) would become negative | 422 |
/// | 16 | `limit_exceeded` | a balance or id sequence would overflow | 422 |
/// | 17 | `four_eyes` | an employee approving the payout or settlement they created | 403 |
/// | 18 | `payment_link_expired` | initiating a payment on a link at or past its `expires_at` | 409 |
/// | 19 | `period_invalid` | a settlement period that ends before it starts | 422 |
/// | 20 | `nothing_to_settle` | no unsettled payment credit (with a positive net total) in the period | 422 |
/// | 21 | `unavailable` | a record that left memory could not be read back from the history store | 503 |
/// | 22 | `batch_too_large` | a transfer batch whose events (or answer) could not fit the log records it needs | 413 |
/// | 23 | `batch_interrupted` | the final answer of a keyed transfer batch over several log records that a crash interrupted: each item posted, was refused or never ran, none is in flight | 409 |
///
/// Numbers never change once published, so codes added later get the next numbers and are checked
/// after the older ones; each new code is placed so that this still holds for every command (a
/// `four_eyes` approval is checked once the record exists and is pending, a link's expiry once the
/// link exists, matches and is unused, a period once the wallet exists). An `invalid_request` that
/// depends on a record (a system account named, a reservation that does not match its payment) is
/// found when the record is looked up, after `wrong_shard`/`not_found`.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum Rejection {
    #[error("unknown currency code")]
    UnknownCurrency,
    #[error("invalid request: {0}")]
    InvalidRequest(&'static str),
    #[error("wallet {0} does not belong to this shard")]
    WrongShard(WalletId),
    #[error("{0} not found")]
    NotFound(&'static str),
    #[error("duplicate {0}")]
    Duplicate(&'static str),
    #[error("currency does not match the wallet's currency")]
    CurrencyMismatch,
    #[error("invalid amount: {0}")]
    InvalidAmount(&'static str),
    #[error("wallet is frozen")]
    WalletFrozen,
    #[error("invalid state: {0}")]
    InvalidState(&'static str),
    #[error("hold has expired")]
    HoldExpired,
    /// A transfer batch whose log records would pass the log's record size (`runtime::batch`).
    #[error("batch too large: {0}")]
    BatchTooLarge(&'static str),
    /// The answer recovery logs under the key of a transfer batch over several log records that
    /// a crash stopped before its answer was logged (`runtime::recovery`): each item posted, was
    /// refused or never ran, none is in flight, but which is not rebuilt; a retry gets this,
    /// never a second run.
    #[error(
        "the batch was interrupted by a restart before its answer was recorded: each item posted, was refused or never ran, and none is in flight (an item whose transaction, by its reference, is not in the wallet did not post); this answer is final under this key"
    )]
    BatchInterrupted,
    #[error("capture amount exceeds the hold amount")]
    CaptureExceedsHold,
    #[error("only a wallet debit can be refunded")]
    NotADebit,
    #[error("transaction is already reversed")]
    AlreadyReversed,
    #[error("refunds would exceed the original amount")]
    RefundExceedsOriginal,
    #[error("insufficient funds")]
    InsufficientFunds,
    #[error("limit exceeded: {0}")]
    LimitExceeded(&'static str),
    #[error("four eyes: the creator cannot approve it")]
    FourEyes,
    #[error("payment link has expired")]
    PaymentLinkExpired,
    #[error("invalid period: {0}")]
    PeriodInvalid(&'static str),
    #[error("nothing to settle in the period")]
    NothingToSettle,
    #[error("unavailable: {0}")]
    Unavailable(&'static str),
}

impl From<UnknownCurrency> for Rejection {
    fn from(_: UnknownCurrency) -> Self {
        Self::UnknownCurrency
    }
}

impl Rejection {
    /// Stable machine-readable code (never changes once published).
    #[must_use]
    pub fn code(&self) -> &'static str {
        match self {
            Self::UnknownCurrency => "unknown_currency",
            Self::InvalidRequest(_) => "invalid_request",
            Self::WrongShard(_) => "wrong_shard",
            Self::NotFound(_) => "not_found",
            Self::Duplicate(_) => "duplicate",
            Self::CurrencyMismatch => "currency_mismatch",
            Self::InvalidAmount(_) => "invalid_amount",
            Self::WalletFrozen => "wallet_frozen",
            Self::InvalidState(_) => "invalid_state",
            Self::HoldExpired => "hold_expired",
            Self::CaptureExceedsHold => "capture_exceeds_hold",
            Self::NotADebit => "not_a_debit",
            Self::AlreadyReversed => "already_reversed",
            Self::RefundExceedsOriginal => "refund_exceeds_original",
            Self::InsufficientFunds => "insufficient_funds",
            Self::LimitExceeded(_) => "limit_exceeded",
            Self::FourEyes => "four_eyes",
            Self::PaymentLinkExpired => "payment_link_expired",
            Self::PeriodInvalid(_) => "period_invalid",
            Self::NothingToSettle => "nothing_to_settle",
            Self::Unavailable(_) => "unavailable",
            Self::BatchTooLarge(_) => "batch_too_large",
            Self::BatchInterrupted => "batch_interrupted",
        }
    }

    /// Check order (see the table on the type); lower is checked first.
    #[must_use]
    pub fn precedence(&self) -> u16 {
        match self {
            Self::UnknownCurrency => 1,
            Self::InvalidRequest(_) => 2,
            Self::WrongShard(_) => 3,
            Self::NotFound(_) => 4,
            Self::Duplicate(_) => 5,
            Self::CurrencyMismatch => 6,
            Self::InvalidAmount(_) => 7,
            Self::WalletFrozen => 8,
            Self::InvalidState(_) => 9,
            Self::HoldExpired => 10,
            Self::CaptureExceedsHold => 11,
            Self::NotADebit => 12,
            Self::AlreadyReversed => 13,
            Self::RefundExceedsOriginal => 14,
            Self::InsufficientFunds => 15,
            Self::LimitExceeded(_) => 16,
            Self::FourEyes => 17,
            Self::PaymentLinkExpired => 18,
            Self::PeriodInvalid(_) => 19,
            Self::NothingToSettle => 20,
            Self::Unavailable(_) => 21,
            Self::BatchTooLarge(_) => 22,
            Self::BatchInterrupted => 23,
        }
    }
}

/// An event that does not fit the state: corruption or a bug, never a client error.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("cannot apply event: {what} (id {id})")]
pub struct ApplyError {
    /// What did not fit, as a verb phrase ("wallet id out of sequence").
    pub what: &'static str,
    /// The id (wallet, transaction, entry, hold) concerned, 0 if none.
    pub id: u64,
}

impl ApplyError {
    pub(crate) fn new(what: &'static str, id: u64) -> Self {
        Self { what, id }
    }
}

/// Bytes that are not a valid event batch or snapshot.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum DecodeError {
    #[error("empty input")]
    Empty,
    #[error("unsupported format version {0}")]
    UnsupportedVersion(u8),
    #[error("malformed encoding: {0}")]
    Malformed(String),
    #[error("{0} trailing bytes after the encoded value")]
    TrailingBytes(usize),
    #[error("decoded value is invalid: {0}")]
    Invalid(&'static str),
}

/// A value could not be serialised. Encoding into a growable vector fails only on a bug (a type
/// whose serialisation reports an error); the caller must fail the command or the snapshot before
/// anything is appended or kept, never write empty bytes in its place.
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[error("encoding {what} failed: {reason}")]
pub struct EncodeError {
    /// What was being encoded (`journal entry`, `shard snapshot`, ...).
    pub what: &'static str,
    pub reason: String,
}

/// Encodes `value` with postcard after `prefix` (a format version byte, or nothing for a value
/// nested in a versioned one), or says why it could not.
///
/// Test builds add one fault: bytes that contain [`encode_fault_marker`]`(what)` (a string a
/// test puts in a description or a name) fail as a serialiser error would, because no value of
/// these types fails to encode naturally. Release builds have no such check.
pub(crate) fn encode_versioned<T: serde::Serialize + ?Sized>(
    value: &T,
    prefix: &[u8],
    what: &'static str,
) -> Result<Vec<u8>, EncodeError> {
    let bytes = postcard::to_extend(value, prefix.to_vec()).map_err(|error| EncodeError {
        what,
        reason: error.to_string(),
    })?;
    #[cfg(test)]
    {
        let marker = encode_fault_marker(what);
        if bytes
            .windows(marker.len())
            .any(|window| window == marker.as_bytes())
        {
            return Err(EncodeError {
                what,
                reason: "injected encoder failure (test builds only)".into(),
            });
        }
    }
    Ok(bytes)
}

/// The text that makes [`encode_versioned`] fail for `what` in test builds.
#[cfg(test)]
pub(crate) fn encode_fault_marker(what: &str) -> String {
    format!("encode-fault:{what}")
}

/// Why `Shard::execute` failed: refused (nothing changed), or an event it decided did not apply
/// (a bug; the shard may be half-changed and must be rebuilt from snapshot + WAL).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum ExecuteError {
    #[error(transparent)]
    Rejected(#[from] Rejection),
    #[error("shard state corrupt: {0}")]
    Corrupt(#[from] ApplyError),
}

/// A broken invariant, naming where (see [`crate::Shard`] for the list).
#[derive(Clone, Debug, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum InvariantViolation {
    #[error("entries in {currency} sum to {sum}, not zero")]
    CurrencyNotBalanced { currency: Currency, sum: Decimal },
    #[error("wallet {wallet_id}: cached balance {cached} but its ledger sums to {ledger}")]
    BalanceMismatch {
        wallet_id: WalletId,
        cached: Decimal,
        ledger: Decimal,
    },
    #[error("wallet {wallet_id}: entry {entry_id} balance_after does not follow from the entries before it")]
    BalanceAfterMismatch {
        wallet_id: WalletId,
        entry_id: EntryId,
    },
    #[error("wallet {wallet_id}: cached held {cached} but its active holds sum to {holds}")]
    HeldMismatch {
        wallet_id: WalletId,
        cached: Decimal,
        holds: Decimal,
    },
    #[error("wallet {wallet_id}: spendable balance is negative")]
    NegativeSpendable { wallet_id: WalletId },
    #[error("wallet {wallet_id}: hash chain breaks at entry {entry_id}")]
    BrokenChain {
        wallet_id: WalletId,
        entry_id: EntryId,
    },
    #[error("wallet {wallet_id}: stored chain head is not the last entry's hash")]
    ChainHeadMismatch { wallet_id: WalletId },
    #[error("wallet {wallet_id}: {what}")]
    WalletCorrupt {
        wallet_id: WalletId,
        what: &'static str,
    },
    #[error("in-transit account in {currency} holds {balance}, but the transfers and payment reservations say {expected}")]
    InTransitMismatch {
        currency: Currency,
        balance: Decimal,
        expected: Decimal,
    },
    #[error("finished cross-shard moves in {currency}: the totals say sent {sent}, received {received}, but the records in memory say sent {found_sent}, received {found_received}")]
    TransitTotals {
        currency: Currency,
        sent: Decimal,
        received: Decimal,
        found_sent: Decimal,
        found_received: Decimal,
    },
    #[error("index out of step with the records: {0}")]
    IndexMismatch(&'static str),
    #[error("{record} {id}: {what}")]
    CommerceCorrupt {
        /// "payment", "payment link", "qr", "payout", "settlement", "payment reservation".
        record: &'static str,
        /// The record's numeric id (0 for reservations, which have none).
        id: u64,
        what: &'static str,
    },
    #[error("arithmetic overflow while summing")]
    Overflow,
}
