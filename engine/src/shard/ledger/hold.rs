//! Deciding holds: place, release, capture, expire (life cycle in `hold` docs). A payout's hold
//! (see `payout`) is refused here (`invalid_state`) and never comes due (it never expires).

use crate::ledger::hold::{
    Hold, HoldStatus, EXPIRY_MINUTES_DEFAULT, EXPIRY_MINUTES_MAX, EXPIRY_MINUTES_MIN,
};
use crate::ledger::transaction::{Direction, TransactionType};
use crate::ledger::wallet::{Wallet, WalletType};
use crate::shard::command::{CaptureHold, Context, PlaceHold};
use crate::shard::event::Event;
use crate::shard::ledger::checks::{bounded_text, check_spendable, details_text};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{HoldId, Uuid, UuidKind, WalletId};
use crate::values::money::validate_amount;
use std::borrow::Cow;

const MS_PER_MINUTE: i64 = 60_000;

impl Shard {
    pub(crate) fn decide_place_hold(
        &self,
        draft: &mut Draft<'_>,
        place: &PlaceHold,
    ) -> Result<(), Rejection> {
        let reason = bounded_text(place.reason.as_deref())?;
        let minutes = place.expiry_minutes.unwrap_or(EXPIRY_MINUTES_DEFAULT);
        if !(EXPIRY_MINUTES_MIN..=EXPIRY_MINUTES_MAX).contains(&minutes) {
            return Err(Rejection::InvalidRequest(
                "expiry_minutes must be 1 to 10080",
            ));
        }
        let wallet = self.client_wallet(place.wallet_id)?;
        if wallet.currency() != place.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(place.amount, place.currency)?;
        if wallet.is_frozen() {
            return Err(Rejection::WalletFrozen);
        }
        check_spendable(wallet, amount)?;
        let now_ms = draft.now_ms();
        let expires_at_ms = now_ms
            .checked_add(i64::from(minutes) * MS_PER_MINUTE)
            .ok_or(Rejection::InvalidRequest("expiry out of range"))?;
        let hold_id = draft.mint_hold_id()?;
        let hold = Hold {
            id: hold_id,
            uuid: draft.record_uuid(UuidKind::Hold, wallet.id(), hold_id.0),
            amount,
            status: HoldStatus::Active,
            reason,
            created_at_ms: now_ms,
            expires_at_ms,
            closed_at_ms: None,
            captured_amount: None,
            capture_transaction_id: None,
        };
        draft.push(Event::HoldPlaced {
            wallet_id: wallet.id(),
            hold,
        });
        Ok(())
    }

    /// The hold's wallet and the hold, or `not_found`.
    fn find_hold(&self, hold_uuid: Uuid) -> Result<(&Wallet, Cow<'_, Hold>), Rejection> {
        let (wallet_id, hold_id) = self
            .locate_hold(hold_uuid)?
            .ok_or(Rejection::NotFound("hold"))?;
        let wallet = self.find_wallet(wallet_id)?;
        let hold = self
            .hold_record(wallet, hold_id)?
            .ok_or(Rejection::NotFound("hold"))?;
        Ok((wallet, hold))
    }

    /// A payout's hold closes only through the payout's life cycle.
    fn check_not_payout_hold(&self, hold: &Hold) -> Result<(), Rejection> {
        if self.index.commerce.payout_holds.contains_key(&hold.id) {
            return Err(Rejection::InvalidState(
                "hold belongs to a payout: reject, cancel or execute the payout",
            ));
        }
        Ok(())
    }

    /// A hold that may still be released or captured at `now_ms`.
    fn check_hold_open(hold: &Hold, now_ms: i64) -> Result<(), Rejection> {
        match hold.status {
            HoldStatus::Active if hold.is_past_expiry(now_ms) => Err(Rejection::HoldExpired),
            HoldStatus::Active => Ok(()),
            HoldStatus::Expired => Err(Rejection::HoldExpired),
            HoldStatus::Released | HoldStatus::Captured => {
                Err(Rejection::InvalidState("hold is no longer active"))
            }
        }
    }

    pub(crate) fn decide_release_hold(
        &self,
        draft: &mut Draft<'_>,
        hold_uuid: Uuid,
    ) -> Result<(), Rejection> {
        let (wallet, hold) = self.find_hold(hold_uuid)?;
        Self::check_hold_open(&hold, draft.now_ms())?;
        self.check_not_payout_hold(&hold)?;
        draft.push(Event::HoldClosed {
            wallet_id: wallet.id(),
            hold_id: hold.id,
            status: HoldStatus::Released,
            captured_amount: None,
            capture_transaction_id: None,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_capture_hold(
        &self,
        draft: &mut Draft<'_>,
        capture: &CaptureHold,
    ) -> Result<(), Rejection> {
        let text = details_text(&capture.details)?;
        let (wallet, hold) = self.find_hold(capture.hold_uuid)?;
        if capture.counter_wallet_id == Some(wallet.id()) {
            return Err(Rejection::InvalidRequest(
                "counter account is the hold's own wallet",
            ));
        }
        let counter = match capture.counter_wallet_id {
            Some(counter_id) => Some(self.client_wallet(counter_id)?),
            None => None,
        };
        let currency = wallet.currency();
        if counter.is_some_and(|counter| counter.currency() != currency) {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(capture.amount.unwrap_or(hold.amount), currency)?;
        if wallet.is_frozen() || counter.is_some_and(Wallet::is_frozen) {
            return Err(Rejection::WalletFrozen);
        }
        Self::check_hold_open(&hold, draft.now_ms())?;
        self.check_not_payout_hold(&hold)?;
        if amount > hold.amount {
            return Err(Rejection::CaptureExceedsHold);
        }
        let kind = TransactionType::HoldCapture;
        let mut debit = TxSpec::new(wallet.id(), kind, Direction::Debit, amount, text.clone());
        let mut txs = Vec::with_capacity(2);
        let credit_leg = match counter {
            Some(counter) => {
                debit.counterparty_wallet_id = Some(counter.id());
                let mut credit = TxSpec::new(counter.id(), kind, Direction::Credit, amount, text);
                credit.counterparty_wallet_id = Some(wallet.id());
                txs.push(debit);
                txs.push(credit);
                LegSpec::new(counter.id(), Direction::Credit, amount, kind, 1)
            }
            None => {
                txs.push(debit);
                let float = draft.system_account(currency, WalletType::Float)?;
                LegSpec::new(float, Direction::Credit, amount, kind, 0)
            }
        };
        let legs = [
            LegSpec::new(wallet.id(), Direction::Debit, amount, kind, 0),
            credit_leg,
        ];
        let posted = draft.post(currency, &txs, &legs)?;
        draft.push(Event::HoldClosed {
            wallet_id: wallet.id(),
            hold_id: hold.id,
            status: HoldStatus::Captured,
            captured_amount: Some(amount),
            capture_transaction_id: posted.transactions.first().copied(),
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_expire_holds(&self, draft: &mut Draft<'_>, max_holds: u32) {
        let limit = usize::try_from(max_holds).unwrap_or(usize::MAX);
        let now_ms = draft.now_ms();
        let due: Vec<(HoldId, WalletId)> = self.holds_due(now_ms).take(limit).collect();
        for (hold_id, wallet_id) in due {
            draft.push(Event::HoldClosed {
                wallet_id,
                hold_id,
                status: HoldStatus::Expired,
                captured_amount: None,
                capture_transaction_id: None,
                at_ms: now_ms,
            });
        }
    }

    /// Expiry events for every active hold whose `expires_at_ms` is at or before `now_ms`, oldest
    /// expiry first. Pure; the caller logs and applies them (a restart followed by a tick expires
    /// what came due while the process was down).
    #[must_use]
    pub fn expire_holds(&self, now_ms: i64) -> Vec<Event> {
        let ctx = Context::new(now_ms, [0u8; 32]);
        let mut draft = Draft::new(self, &ctx);
        self.decide_expire_holds(&mut draft, u32::MAX);
        draft.finish()
    }
}
