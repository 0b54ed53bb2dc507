//! Deciding payouts and settlements (life cycles in `payout` docs). Checks run in ascending
//! [`Rejection::precedence`]: text, existence, currency, amount, frozen, state, four eyes, funds.

use rust_decimal::Decimal;

use crate::commerce::payout::{
    Payout, PayoutChange, PayoutStatus, Settlement, SettlementChange, SettlementItem,
    SettlementStatus, Stamp, DAY_MS, SETTLEMENT_ITEMS_MAX,
};
use crate::ledger::hold::{Hold, HoldStatus, NEVER_EXPIRES_AT_MS};
use crate::ledger::transaction::{Direction, TransactionStatus, TransactionText, TransactionType};
use crate::ledger::wallet::WalletType;
use crate::shard::command::{CreatePayout, CreateSettlement, PayoutProviderResult};
use crate::shard::event::Event;
use crate::shard::ledger::checks::{bounded_text, check_not_frozen, check_spendable};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::{PayoutId, SettlementId, UuidKind};
use crate::values::money::{validate_amount, zero};

/// A rejection or approval reason: required, bounded.
fn required_reason(reason: &str) -> Result<Box<str>, Rejection> {
    if reason.trim().is_empty() {
        return Err(Rejection::InvalidRequest("a reason is required"));
    }
    bounded_text(Some(reason))?.ok_or(Rejection::InvalidRequest("a reason is required"))
}

impl Shard {
    /// The payout with this id, from memory or the store.
    pub(crate) fn find_payout(
        &self,
        payout_id: PayoutId,
    ) -> Result<std::borrow::Cow<'_, Payout>, Rejection> {
        self.payout(payout_id)?.ok_or(Rejection::NotFound("payout"))
    }

    /// The settlement with this id, from memory or the store.
    pub(crate) fn find_settlement(
        &self,
        settlement_id: SettlementId,
    ) -> Result<std::borrow::Cow<'_, Settlement>, Rejection> {
        self.settlement(settlement_id)?
            .ok_or(Rejection::NotFound("settlement"))
    }

    pub(crate) fn decide_create_payout(
        &self,
        draft: &mut Draft<'_>,
        request: &CreatePayout,
    ) -> Result<(), Rejection> {
        if request.payout_method.trim().is_empty() {
            return Err(Rejection::InvalidRequest("payout_method is required"));
        }
        let payout_method =
            bounded_text(Some(&request.payout_method))?.unwrap_or_else(|| "".into());
        let payout_destination = bounded_text(request.payout_destination.as_deref())?;
        let description = bounded_text(request.description.as_deref())?;
        let idempotency_key = bounded_text(request.idempotency_key.as_deref())?;
        let wallet = self.client_wallet(request.wallet_id)?;
        if wallet.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        check_not_frozen(wallet)?;
        check_spendable(wallet, amount)?;
        let now_ms = draft.now_ms();
        let hold_id = draft.mint_hold_id()?;
        let id = PayoutId(self.record_id(self.commerce.next_payout_seq)?);
        let uuid = draft.uuid(UuidKind::Payout, id.0);
        let hold_uuid = draft.record_uuid(UuidKind::Hold, wallet.id(), hold_id.0);
        draft.push(Event::HoldPlaced {
            wallet_id: wallet.id(),
            hold: Hold {
                id: hold_id,
                uuid: hold_uuid,
                amount,
                status: HoldStatus::Active,
                reason: Some(format!("payout {uuid}").into()),
                created_at_ms: now_ms,
                expires_at_ms: NEVER_EXPIRES_AT_MS.max(now_ms),
                closed_at_ms: None,
                captured_amount: None,
                capture_transaction_id: None,
            },
        });
        draft.push(Event::PayoutCreated(Box::new(Payout {
            id,
            uuid,
            wallet_id: wallet.id(),
            business_id: wallet.business_id(),
            amount,
            currency: request.currency,
            status: PayoutStatus::Pending,
            payout_method,
            payout_destination,
            description,
            idempotency_key,
            hold_id,
            created: Stamp {
                by: request.created_by,
                at_ms: now_ms,
            },
            updated_at_ms: now_ms,
            approved: None,
            approval_notes: None,
            rejected: None,
            rejection_reason: None,
            cancelled: None,
            executed: None,
            transaction_id: None,
            paid_at_ms: None,
            failed_at_ms: None,
            return_transaction_id: None,
            attempts: Vec::new(),
        })));
        Ok(())
    }

    fn check_payout_move(payout: &Payout, next: PayoutStatus) -> Result<(), Rejection> {
        if payout.status.can_become(next) {
            return Ok(());
        }
        Err(Rejection::InvalidState(match next {
            PayoutStatus::Approved | PayoutStatus::Rejected => "payout is not pending",
            PayoutStatus::Cancelled => "payout is neither pending nor approved",
            PayoutStatus::Executed => "payout is not approved",
            _ => "payout is not executed",
        }))
    }

    pub(crate) fn decide_approve_payout(
        &self,
        draft: &mut Draft<'_>,
        payout_id: PayoutId,
        by: u64,
        notes: Option<&str>,
    ) -> Result<(), Rejection> {
        let notes = bounded_text(notes)?;
        let payout = self.find_payout(payout_id)?;
        Self::check_payout_move(&payout, PayoutStatus::Approved)?;
        if payout.created.by == by {
            return Err(Rejection::FourEyes);
        }
        draft.push(Event::PayoutChanged {
            payout_id,
            change: PayoutChange::Approved { by, notes },
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    /// Reject (`reason` given) or cancel (`None`): the hold is released.
    pub(crate) fn decide_close_payout(
        &self,
        draft: &mut Draft<'_>,
        payout_id: PayoutId,
        by: u64,
        reason: Option<&str>,
    ) -> Result<(), Rejection> {
        let reason = reason.map(required_reason).transpose()?;
        let payout = self.find_payout(payout_id)?;
        let change = match reason {
            Some(reason) => PayoutChange::Rejected { by, reason },
            None => PayoutChange::Cancelled { by },
        };
        Self::check_payout_move(&payout, change.status())?;
        let now_ms = draft.now_ms();
        draft.push(Event::HoldClosed {
            wallet_id: payout.wallet_id,
            hold_id: payout.hold_id,
            status: HoldStatus::Released,
            captured_amount: None,
            capture_transaction_id: None,
            at_ms: now_ms,
        });
        draft.push(Event::PayoutChanged {
            payout_id,
            change,
            at_ms: now_ms,
        });
        Ok(())
    }

    pub(crate) fn decide_execute_payout(
        &self,
        draft: &mut Draft<'_>,
        payout_id: PayoutId,
        by: u64,
    ) -> Result<(), Rejection> {
        let payout = self.find_payout(payout_id)?;
        let wallet = self.client_wallet(payout.wallet_id)?;
        check_not_frozen(wallet)?;
        Self::check_payout_move(&payout, PayoutStatus::Executed)?;
        let clearing = draft.system_account(payout.currency, WalletType::PayoutClearing)?;
        let kind = TransactionType::Payout;
        let text = TransactionText {
            description: payout.description.clone(),
            idempotency_key: payout.idempotency_key.clone(),
            ..TransactionText::default()
        };
        let mut debit = TxSpec::new(wallet.id(), kind, Direction::Debit, payout.amount, text);
        debit.transfer_uuid = Some(payout.uuid);
        let legs = [
            LegSpec::new(wallet.id(), Direction::Debit, payout.amount, kind, 0),
            LegSpec::new(clearing, Direction::Credit, payout.amount, kind, 0),
        ];
        let posted = draft.post(payout.currency, &[debit], &legs)?;
        let transaction_id = *posted
            .transactions
            .first()
            .ok_or(Rejection::InvalidState("internal: no transaction"))?;
        let now_ms = draft.now_ms();
        draft.push(Event::HoldClosed {
            wallet_id: wallet.id(),
            hold_id: payout.hold_id,
            status: HoldStatus::Captured,
            captured_amount: Some(payout.amount),
            capture_transaction_id: Some(transaction_id),
            at_ms: now_ms,
        });
        draft.push(Event::PayoutChanged {
            payout_id,
            change: PayoutChange::Executed { by, transaction_id },
            at_ms: now_ms,
        });
        Ok(())
    }

    pub(crate) fn decide_payout_provider_result(
        &self,
        draft: &mut Draft<'_>,
        result: &PayoutProviderResult,
    ) -> Result<(), Rejection> {
        let provider_ref = bounded_text(result.provider_ref.as_deref())?;
        let payout = self.find_payout(result.payout_id)?;
        let next = if result.succeeded {
            PayoutStatus::Paid
        } else {
            PayoutStatus::Failed
        };
        Self::check_payout_move(&payout, next)?;
        let change = if result.succeeded {
            PayoutChange::Paid { provider_ref }
        } else {
            // The funds come back from payout clearing, to a frozen wallet too.
            let clearing = draft.system_account(payout.currency, WalletType::PayoutClearing)?;
            let kind = TransactionType::PayoutReturn;
            let mut credit = TxSpec::new(
                payout.wallet_id,
                kind,
                Direction::Credit,
                payout.amount,
                TransactionText::default(),
            );
            credit.transfer_uuid = Some(payout.uuid);
            let legs = [
                LegSpec::new(clearing, Direction::Debit, payout.amount, kind, 0),
                LegSpec::new(payout.wallet_id, Direction::Credit, payout.amount, kind, 0),
            ];
            let posted = draft.post(payout.currency, &[credit], &legs)?;
            let return_transaction_id = *posted
                .transactions
                .first()
                .ok_or(Rejection::InvalidState("internal: no transaction"))?;
            PayoutChange::Failed {
                provider_ref,
                return_transaction_id,
            }
        };
        draft.push(Event::PayoutChanged {
            payout_id: payout.id,
            change,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_create_settlement(
        &self,
        draft: &mut Draft<'_>,
        request: &CreateSettlement,
    ) -> Result<(), Rejection> {
        let notes = bounded_text(request.notes.as_deref())?;
        let idempotency_key = bounded_text(request.idempotency_key.as_deref())?;
        if request.period_start_ms.rem_euclid(DAY_MS) != 0
            || request.period_end_ms.rem_euclid(DAY_MS) != 0
        {
            return Err(Rejection::InvalidRequest(
                "period bounds must be UTC day starts",
            ));
        }
        let wallet = self.client_wallet(request.wallet_id)?;
        if request.period_end_ms < request.period_start_ms {
            return Err(Rejection::PeriodInvalid(
                "period_end is before period_start",
            ));
        }
        let end_exclusive = request
            .period_end_ms
            .checked_add(DAY_MS)
            .ok_or(Rejection::PeriodInvalid("period_end out of range"))?;
        let currency = wallet.currency();
        let mut items: Vec<SettlementItem> = Vec::new();
        let mut unreadable = None;
        let period = (request.period_start_ms, end_exclusive - 1);
        self.for_each_transaction_within(wallet, period, |transaction| {
            if transaction.transaction_type == TransactionType::Payment
                && transaction.direction == Direction::Credit
                && transaction.status == TransactionStatus::Completed
            {
                match self.settled_by(transaction.id) {
                    Ok(None) => {}
                    Ok(Some(_)) => return true,
                    Err(rejection) => {
                        unreadable = Some(rejection);
                        return false;
                    }
                }
                items.push(SettlementItem {
                    transaction_id: transaction.id,
                    transaction_uuid: transaction.uuid,
                    amount: transaction.amount,
                    fee_amount: transaction.fee_amount,
                    net_amount: transaction.net_amount,
                });
            }
            items.len() < SETTLEMENT_ITEMS_MAX
        })?;
        if let Some(rejection) = unreadable {
            return Err(rejection);
        }
        let sum = |pick: fn(&SettlementItem) -> Decimal| {
            items
                .iter()
                .try_fold(zero(currency), |sum, item| sum.checked_add(pick(item)))
                .ok_or(Rejection::LimitExceeded("settlement total"))
        };
        let total_amount = sum(|item| item.net_amount)?;
        let total_fee_amount = sum(|item| item.fee_amount)?;
        if items.is_empty() || total_amount <= Decimal::ZERO {
            return Err(Rejection::NothingToSettle);
        }
        let id = SettlementId(self.record_id(self.commerce.next_settlement_seq)?);
        let now_ms = draft.now_ms();
        draft.push(Event::SettlementCreated(Box::new(Settlement {
            id,
            uuid: draft.uuid(UuidKind::Settlement, id.0),
            wallet_id: wallet.id(),
            business_id: wallet.business_id(),
            currency,
            period_type: request.period_type,
            period_start_ms: request.period_start_ms,
            period_end_ms: request.period_end_ms,
            status: SettlementStatus::Pending,
            notes,
            idempotency_key,
            items,
            total_amount,
            total_fee_amount,
            created: Stamp {
                by: request.created_by,
                at_ms: now_ms,
            },
            updated_at_ms: now_ms,
            approved: None,
            approval_notes: None,
            rejected: None,
            rejection_reason: None,
            cancelled: None,
            executed: None,
            transaction_id: None,
        })));
        Ok(())
    }

    fn check_settlement_move(
        settlement: &Settlement,
        next: SettlementStatus,
    ) -> Result<(), Rejection> {
        if settlement.status.can_become(next) {
            return Ok(());
        }
        Err(Rejection::InvalidState(match next {
            SettlementStatus::Approved | SettlementStatus::Rejected => "settlement is not pending",
            SettlementStatus::Cancelled => "settlement is neither pending nor approved",
            _ => "settlement is not approved",
        }))
    }

    pub(crate) fn decide_approve_settlement(
        &self,
        draft: &mut Draft<'_>,
        settlement_id: SettlementId,
        by: u64,
        notes: Option<&str>,
    ) -> Result<(), Rejection> {
        let notes = bounded_text(notes)?;
        let settlement = self.find_settlement(settlement_id)?;
        Self::check_settlement_move(&settlement, SettlementStatus::Approved)?;
        if settlement.created.by == by {
            return Err(Rejection::FourEyes);
        }
        draft.push(Event::SettlementChanged {
            settlement_id,
            change: SettlementChange::Approved { by, notes },
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    /// Reject (`reason` given) or cancel (`None`): the items are freed.
    pub(crate) fn decide_close_settlement(
        &self,
        draft: &mut Draft<'_>,
        settlement_id: SettlementId,
        by: u64,
        reason: Option<&str>,
    ) -> Result<(), Rejection> {
        let reason = reason.map(required_reason).transpose()?;
        let settlement = self.find_settlement(settlement_id)?;
        let change = match reason {
            Some(reason) => SettlementChange::Rejected { by, reason },
            None => SettlementChange::Cancelled { by },
        };
        Self::check_settlement_move(&settlement, change.status())?;
        draft.push(Event::SettlementChanged {
            settlement_id,
            change,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    pub(crate) fn decide_execute_settlement(
        &self,
        draft: &mut Draft<'_>,
        settlement_id: SettlementId,
        by: u64,
    ) -> Result<(), Rejection> {
        let settlement = self.find_settlement(settlement_id)?;
        let wallet = self.client_wallet(settlement.wallet_id)?;
        check_not_frozen(wallet)?;
        Self::check_settlement_move(&settlement, SettlementStatus::Executed)?;
        let amount = settlement.total_amount;
        check_spendable(wallet, amount)?;
        let clearing = draft.system_account(settlement.currency, WalletType::SettlementClearing)?;
        let kind = TransactionType::Settlement;
        let text = TransactionText {
            description: settlement.notes.clone(),
            idempotency_key: settlement.idempotency_key.clone(),
            ..TransactionText::default()
        };
        let mut debit = TxSpec::new(wallet.id(), kind, Direction::Debit, amount, text);
        debit.transfer_uuid = Some(settlement.uuid);
        let legs = [
            LegSpec::new(wallet.id(), Direction::Debit, amount, kind, 0),
            LegSpec::new(clearing, Direction::Credit, amount, kind, 0),
        ];
        let posted = draft.post(settlement.currency, &[debit], &legs)?;
        let transaction_id = *posted
            .transactions
            .first()
            .ok_or(Rejection::InvalidState("internal: no transaction"))?;
        draft.push(Event::SettlementChanged {
            settlement_id,
            change: SettlementChange::Executed { by, transaction_id },
            at_ms: draft.now_ms(),
        });
        Ok(())
    }
}
