//! `Shard::decide`: validates a command against the state and returns the events that perform it.
//!
//! Pure: `&self`, no clock, no randomness beyond [`Context`], no I/O. A rejection returns before any
//! event exists, so a rejected command changes nothing. Checks run in ascending
//! [`Rejection::precedence`]: text and field validation, shard and existence, duplicates, currency,
//! amount, frozen, state, then funds.
//!
//! This file holds the dispatcher, wallet life cycle, deposit/withdraw, transfers (same-shard and the
//! cross-shard steps) and integrity. Holds are in `decide_hold.rs`, refunds and reversals in
//! `reversal.rs`, payments in `decide_payment.rs` (cross-shard steps in `decide_payment_move.rs`),
//! links and QR payloads in `decide_link.rs`, payouts and settlements in `decide_payout.rs`.

use crate::commerce::payment::PaymentStatus;
use crate::ledger::transaction::{Direction, TransactionText, TransactionType};
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer, TransferState};
use crate::ledger::view::IntegrityReport;
use crate::ledger::wallet::{OwnerType, WalletStatus, WalletType};
use crate::shard::command::{
    BatchMark, Command, Context, CreateWallet, MoneyMove, TransferArgs, TransferCredit,
    EXPIRE_BATCH_MAX,
};
use crate::shard::event::{Event, WalletCreated};
use crate::shard::ledger::checks::{bounded_text, check_not_frozen, check_spendable, details_text};
use crate::shard::ledger::posting::{Draft, LegSpec, TxSpec};
use crate::shard::state::{OwnerKey, Shard};
use crate::values::error::Rejection;
use crate::values::ids::{UuidKind, WalletId};
use crate::values::money::validate_amount;
use rust_decimal::Decimal;

impl Shard {
    /// Decides the events of `command` (see the module docs). `&self`: nothing changes until the
    /// caller applies the events.
    pub fn decide(&self, command: &Command, ctx: &Context) -> Result<Vec<Event>, Rejection> {
        let mut draft = Draft::new(self, ctx);
        match command {
            Command::CreateWallet(create) => self.decide_create_wallet(&mut draft, create)?,
            Command::FreezeWallet { wallet_id } => {
                self.decide_status(&mut draft, *wallet_id, WalletStatus::Frozen)?
            }
            Command::UnfreezeWallet { wallet_id } => {
                self.decide_status(&mut draft, *wallet_id, WalletStatus::Active)?
            }
            Command::Deposit(deposit) => {
                self.decide_deposit_or_withdraw(&mut draft, deposit, Direction::Credit)?
            }
            Command::Withdraw(withdraw) => {
                self.decide_deposit_or_withdraw(&mut draft, withdraw, Direction::Debit)?
            }
            Command::Transfer(transfer) => self.decide_transfer(&mut draft, transfer)?,
            Command::TransferReserve(transfer) => {
                self.decide_transfer_reserve(&mut draft, transfer, false)?
            }
            Command::TransferBatchReserve(transfer) => {
                self.decide_transfer_reserve(&mut draft, transfer, true)?
            }
            Command::TransferBatchMark { batch, mark } => {
                self.decide_batch_mark(&mut draft, *batch, mark)?
            }
            Command::TransferCredit(credit) => self.decide_transfer_credit(&mut draft, credit)?,
            Command::TransferFinalize { transfer_uuid } => {
                // A finished transfer may have left memory: the store has it then.
                let transfer = self
                    .outgoing_record(*transfer_uuid)?
                    .ok_or(Rejection::NotFound("transfer"))?;
                match transfer.state {
                    TransferState::Finalized => {}
                    TransferState::Released => {
                        return Err(Rejection::InvalidState("transfer was released"))
                    }
                    TransferState::Reserved => {
                        draft.push(Event::TransferFinalized {
                            transfer_uuid: *transfer_uuid,
                            at_ms: ctx.now_ms,
                        });
                    }
                }
            }
            Command::TransferRelease { transfer_uuid } => {
                self.decide_transfer_release(&mut draft, *transfer_uuid)?
            }
            Command::PlaceHold(place) => self.decide_place_hold(&mut draft, place)?,
            Command::ReleaseHold { hold_uuid } => {
                self.decide_release_hold(&mut draft, *hold_uuid)?
            }
            Command::CaptureHold(capture) => self.decide_capture_hold(&mut draft, capture)?,
            Command::ExpireHolds { max_holds } => {
                self.decide_expire_holds(&mut draft, (*max_holds).min(EXPIRE_BATCH_MAX));
            }
            Command::Refund(refund) => self.decide_refund(&mut draft, refund)?,
            Command::Reverse {
                transaction_uuid,
                reason,
            } => self.decide_reverse(&mut draft, *transaction_uuid, reason)?,
            Command::VerifyIntegrity { wallet_id, filed } => {
                let report = self.integrity_report(*wallet_id, ctx.now_ms, filed.as_deref())?;
                if report.valid {
                    draft.push(Event::BalanceVerified {
                        wallet_id: *wallet_id,
                        at_ms: ctx.now_ms,
                    });
                }
            }
            commerce => self.decide_commerce(&mut draft, commerce)?,
        }
        Ok(draft.finish())
    }

    /// The commerce commands (`decide_payment*.rs`, `decide_link.rs`, `decide_payout.rs`).
    fn decide_commerce(&self, draft: &mut Draft<'_>, command: &Command) -> Result<(), Rejection> {
        match command {
            Command::InitiatePayment(request) => self.decide_initiate_payment(draft, request),
            Command::ConfirmPayment { payment_uuid } => {
                self.decide_confirm_payment(draft, *payment_uuid)
            }
            Command::CancelPayment { payment_uuid } => {
                self.decide_close_payment(draft, *payment_uuid, PaymentStatus::Cancelled)
            }
            Command::FailPayment { payment_uuid } => {
                self.decide_close_payment(draft, *payment_uuid, PaymentStatus::Failed)
            }
            Command::PaymentProviderResult(result) => {
                self.decide_payment_provider_result(draft, result)
            }
            Command::RefundPayment(request) => self.decide_refund_payment(draft, request),
            Command::PaymentReserve(request) => self.decide_payment_reserve(draft, request),
            Command::PaymentCredit(request) => self.decide_payment_credit(draft, request),
            Command::PaymentReserveFinalize { reservation_uuid } => {
                self.decide_reservation_finalize(draft, *reservation_uuid)
            }
            Command::PaymentReserveRelease { reservation_uuid } => {
                self.decide_reservation_release(draft, *reservation_uuid)
            }
            Command::CreatePaymentLink(request) => self.decide_create_payment_link(draft, request),
            Command::CreateQr(request) => self.decide_create_qr(draft, request),
            Command::CreatePayout(request) => self.decide_create_payout(draft, request),
            Command::ApprovePayout {
                payout_id,
                by,
                notes,
            } => self.decide_approve_payout(draft, *payout_id, *by, notes.as_deref()),
            Command::RejectPayout {
                payout_id,
                by,
                reason,
            } => self.decide_close_payout(draft, *payout_id, *by, Some(reason)),
            Command::CancelPayout { payout_id, by } => {
                self.decide_close_payout(draft, *payout_id, *by, None)
            }
            Command::ExecutePayout { payout_id, by } => {
                self.decide_execute_payout(draft, *payout_id, *by)
            }
            Command::PayoutProviderResult(result) => {
                self.decide_payout_provider_result(draft, result)
            }
            Command::CreateSettlement(request) => self.decide_create_settlement(draft, request),
            Command::ApproveSettlement {
                settlement_id,
                by,
                notes,
            } => self.decide_approve_settlement(draft, *settlement_id, *by, notes.as_deref()),
            Command::RejectSettlement {
                settlement_id,
                by,
                reason,
            } => self.decide_close_settlement(draft, *settlement_id, *by, Some(reason)),
            Command::CancelSettlement { settlement_id, by } => {
                self.decide_close_settlement(draft, *settlement_id, *by, None)
            }
            Command::ExecuteSettlement { settlement_id, by } => {
                self.decide_execute_settlement(draft, *settlement_id, *by)
            }
            _ => Err(Rejection::InvalidRequest(
                "internal: not a commerce command",
            )),
        }
    }

    fn decide_create_wallet(
        &self,
        draft: &mut Draft<'_>,
        create: &CreateWallet,
    ) -> Result<(), Rejection> {
        if create.owner_type == OwnerType::System || create.wallet_type.is_system() {
            return Err(Rejection::InvalidRequest(
                "system accounts are opened by the engine only",
            ));
        }
        let meta = bounded_text(create.meta.as_deref())?;
        let key = OwnerKey {
            owner_id: create.owner_id,
            currency: create.currency,
            owner_type: create.owner_type,
            wallet_type: create.wallet_type,
        };
        if self.index.owners.contains_key(&key) {
            return Err(Rejection::Duplicate(
                "wallet for this owner, currency and wallet type",
            ));
        }
        let wallet_id = draft.mint_wallet_id()?;
        let event = Event::WalletCreated(WalletCreated {
            wallet_id,
            uuid: draft.uuid(UuidKind::Wallet, wallet_id.0),
            owner_type: create.owner_type,
            owner_id: create.owner_id,
            wallet_type: create.wallet_type,
            currency: create.currency,
            business_id: create.business_id,
            branch_id: create.branch_id,
            meta,
            at_ms: draft.now_ms(),
        });
        draft.push(event);
        Ok(())
    }

    fn decide_status(
        &self,
        draft: &mut Draft<'_>,
        wallet_id: WalletId,
        status: WalletStatus,
    ) -> Result<(), Rejection> {
        let wallet = self.client_wallet(wallet_id)?;
        if wallet.status() == status {
            return Err(Rejection::InvalidState(match status {
                WalletStatus::Frozen => "wallet is already frozen",
                WalletStatus::Active => "wallet is not frozen",
            }));
        }
        draft.push(Event::WalletStatusChanged {
            wallet_id,
            status,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    /// Deposit (`Credit`: float → wallet) or withdraw (`Debit`: wallet → float).
    fn decide_deposit_or_withdraw(
        &self,
        draft: &mut Draft<'_>,
        request: &MoneyMove,
        direction: Direction,
    ) -> Result<(), Rejection> {
        let text = details_text(&request.details)?;
        let wallet = self.client_wallet(request.wallet_id)?;
        if request
            .currency
            .is_some_and(|currency| currency != wallet.currency())
        {
            return Err(Rejection::CurrencyMismatch);
        }
        let currency = wallet.currency();
        let amount = validate_amount(request.amount, currency)?;
        check_not_frozen(wallet)?;
        if direction == Direction::Debit {
            check_spendable(wallet, amount)?;
        }
        let transaction_type = match direction {
            Direction::Credit => TransactionType::Deposit,
            Direction::Debit => TransactionType::Withdrawal,
        };
        let float = draft.system_account(currency, WalletType::Float)?;
        let txs = [TxSpec::new(
            wallet.id(),
            transaction_type,
            direction,
            amount,
            text,
        )];
        let legs = [
            LegSpec::new(wallet.id(), direction, amount, transaction_type, 0),
            LegSpec::new(float, direction.opposite(), amount, transaction_type, 0),
        ];
        draft.post(currency, &txs, &legs)?;
        Ok(())
    }

    fn decide_transfer(
        &self,
        draft: &mut Draft<'_>,
        request: &TransferArgs,
    ) -> Result<(), Rejection> {
        let text = details_text(&request.details)?;
        if request.source_wallet_id == request.target_wallet_id {
            return Err(Rejection::InvalidRequest(
                "source and target are the same wallet",
            ));
        }
        let source = self.client_wallet(request.source_wallet_id)?;
        let target = self.client_wallet(request.target_wallet_id)?;
        if source.currency() != request.currency || target.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        check_not_frozen(source)?;
        check_not_frozen(target)?;
        check_spendable(source, amount)?;
        let kind = TransactionType::Transfer;
        let mut debit = TxSpec::new(source.id(), kind, Direction::Debit, amount, text.clone());
        debit.counterparty_wallet_id = Some(target.id());
        let mut credit = TxSpec::new(target.id(), kind, Direction::Credit, amount, text);
        credit.counterparty_wallet_id = Some(source.id());
        let legs = [
            LegSpec::new(source.id(), Direction::Debit, amount, kind, 0),
            LegSpec::new(target.id(), Direction::Credit, amount, kind, 1),
        ];
        draft.post(request.currency, &[debit, credit], &legs)?;
        Ok(())
    }

    /// Step 1 of a cross-shard transfer; `in_batch`: an atomic batch's item, whose target may
    /// be on this shard too.
    fn decide_transfer_reserve(
        &self,
        draft: &mut Draft<'_>,
        request: &TransferArgs,
        in_batch: bool,
    ) -> Result<(), Rejection> {
        if !in_batch && self.owns(request.target_wallet_id) {
            return Err(Rejection::InvalidRequest(
                "target is on this shard: use a same-shard transfer",
            ));
        }
        let (source, amount, text) = self.check_transfer_source(request, Decimal::ZERO)?;
        let transaction_id = draft.peek_transaction_id()?;
        let transfer_uuid = draft.timed_uuid(UuidKind::Transfer, transaction_id.0);
        let in_transit = draft.system_account(request.currency, WalletType::InTransit)?;
        let kind = TransactionType::Transfer;
        let mut debit = TxSpec::new(source.id(), kind, Direction::Debit, amount, text.clone());
        debit.counterparty_wallet_id = Some(request.target_wallet_id);
        debit.transfer_uuid = Some(transfer_uuid);
        let legs = [
            LegSpec::new(source.id(), Direction::Debit, amount, kind, 0),
            LegSpec::new(in_transit, Direction::Credit, amount, kind, 0),
        ];
        let posted = draft.post(request.currency, &[debit], &legs)?;
        let transaction_id = *posted
            .transactions
            .first()
            .ok_or(Rejection::InvalidState("internal: no transaction"))?;
        draft.push(Event::TransferReserved(OutgoingTransfer {
            uuid: transfer_uuid,
            source_wallet_id: source.id(),
            target_wallet_id: request.target_wallet_id,
            amount,
            currency: request.currency,
            transaction_id,
            state: TransferState::Reserved,
            description: text.description,
            reserved_at_ms: draft.now_ms(),
            settled_at_ms: None,
        }));
        Ok(())
    }

    /// The source-side checks of a reserve, in its order, with `spent_before` already taken
    /// from the source by earlier items of the same batch: the source wallet, the amount and the
    /// texts.
    /// An atomic cross-shard batch runs them as a peek to name its first failing item when a
    /// target refuses (see `runtime::atomic_batch`).
    pub fn check_transfer_source(
        &self,
        request: &TransferArgs,
        spent_before: Decimal,
    ) -> Result<(&crate::ledger::wallet::Wallet, Decimal, TransactionText), Rejection> {
        let text = details_text(&request.details)?;
        if request.source_wallet_id == request.target_wallet_id {
            return Err(Rejection::InvalidRequest(
                "source and target are the same wallet",
            ));
        }
        let source = self.client_wallet(request.source_wallet_id)?;
        if source.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        check_not_frozen(source)?;
        let needed = spent_before
            .checked_add(amount)
            .ok_or(Rejection::InsufficientFunds)?;
        check_spendable(source, needed)?;
        Ok((source, amount, text))
    }

    /// Whether a transfer in `currency` may credit `target_wallet_id` now (the checks of the
    /// credit step): an atomic cross-shard batch asks every target before it reserves anything.
    pub fn check_transfer_target(
        &self,
        target_wallet_id: WalletId,
        currency: crate::values::currency::Currency,
    ) -> Result<(), Rejection> {
        let target = self.client_wallet(target_wallet_id)?;
        if target.currency() != currency {
            return Err(Rejection::CurrencyMismatch);
        }
        check_not_frozen(target)
    }

    fn decide_batch_mark(
        &self,
        draft: &mut Draft<'_>,
        batch: crate::values::ids::Uuid,
        mark: &BatchMark,
    ) -> Result<(), Rejection> {
        match mark {
            BatchMark::Prepared { shards, transfers } => {
                let event = Event::TransferBatchPrepared {
                    batch,
                    shards: shards.clone(),
                    transfers: transfers.clone(),
                };
                event.validate().map_err(Rejection::InvalidRequest)?;
                let count = self.ids.shard_count();
                if self.prepared_batches.contains_key(&batch)
                    || !shards.contains(&self.shard_index())
                    || shards.iter().any(|shard| *shard >= count)
                {
                    return Err(Rejection::InvalidState("batch already prepared here"));
                }
                let in_other = self.transfers_in_batches();
                for uuid in transfers {
                    let reserved = self
                        .outgoing_transfer(*uuid)
                        .is_some_and(|transfer| transfer.state == TransferState::Reserved);
                    if !reserved || in_other.contains(uuid) {
                        return Err(Rejection::InvalidState(
                            "a batch transfer is not reserved here",
                        ));
                    }
                }
                draft.push(event);
            }
            BatchMark::Closed => {
                let Some(open) = self.prepared_batches.get(&batch) else {
                    return Ok(()); // closed before, or never prepared here
                };
                let unsettled = open.transfers.iter().any(|uuid| {
                    self.outgoing_transfer(*uuid)
                        .is_some_and(|transfer| transfer.state == TransferState::Reserved)
                });
                if unsettled {
                    return Err(Rejection::InvalidState(
                        "a batch transfer is not settled yet",
                    ));
                }
                draft.push(Event::TransferBatchClosed { batch });
            }
        }
        Ok(())
    }

    fn decide_transfer_credit(
        &self,
        draft: &mut Draft<'_>,
        request: &TransferCredit,
    ) -> Result<(), Rejection> {
        let description = bounded_text(request.description.as_deref())?;
        // Credited before: the record is in memory, or (filed and evicted) in the store.
        if let Some(existing) = self.incoming_record(request.transfer_uuid)? {
            let same = existing.source_wallet_id == request.source_wallet_id
                && existing.target_wallet_id == request.target_wallet_id
                && existing.currency == request.currency
                && existing.amount == request.amount;
            if same {
                return Ok(()); // idempotent: credited before, nothing to do
            }
            return Err(Rejection::InvalidRequest(
                "transfer uuid already credited with other details",
            ));
        }
        if request.source_wallet_id == request.target_wallet_id {
            return Err(Rejection::InvalidRequest(
                "source and target are the same wallet",
            ));
        }
        if request.batch.is_none() && self.owns(request.source_wallet_id) {
            return Err(Rejection::InvalidRequest(
                "source is on this shard: use a same-shard transfer",
            ));
        }
        let target = self.client_wallet(request.target_wallet_id)?;
        if target.currency() != request.currency {
            return Err(Rejection::CurrencyMismatch);
        }
        let amount = validate_amount(request.amount, request.currency)?;
        // A committed batch was decided with the target active: a later freeze takes effect
        // for later transfers, else the batch could not keep all-or-nothing.
        if request.batch.is_none() {
            check_not_frozen(target)?;
        }
        let in_transit = draft.system_account(request.currency, WalletType::InTransit)?;
        let kind = TransactionType::Transfer;
        let text = TransactionText {
            description,
            ..TransactionText::default()
        };
        let mut credit = TxSpec::new(target.id(), kind, Direction::Credit, amount, text);
        credit.counterparty_wallet_id = Some(request.source_wallet_id);
        credit.transfer_uuid = Some(request.transfer_uuid);
        let legs = [
            LegSpec::new(in_transit, Direction::Debit, amount, kind, 0),
            LegSpec::new(target.id(), Direction::Credit, amount, kind, 0),
        ];
        let posted = draft.post(request.currency, &[credit], &legs)?;
        let transaction_id = *posted
            .transactions
            .first()
            .ok_or(Rejection::InvalidState("internal: no transaction"))?;
        draft.push(Event::TransferCredited(IncomingTransfer {
            uuid: request.transfer_uuid,
            source_wallet_id: request.source_wallet_id,
            target_wallet_id: target.id(),
            amount,
            currency: request.currency,
            transaction_id,
            credited_at_ms: draft.now_ms(),
        }));
        Ok(())
    }

    fn decide_transfer_release(
        &self,
        draft: &mut Draft<'_>,
        transfer_uuid: crate::values::ids::Uuid,
    ) -> Result<(), Rejection> {
        let transfer = self
            .outgoing_record(transfer_uuid)?
            .ok_or(Rejection::NotFound("transfer"))?;
        match transfer.state {
            TransferState::Released => return Ok(()),
            TransferState::Finalized => {
                return Err(Rejection::InvalidState("transfer is finalized"))
            }
            TransferState::Reserved => {}
        }
        self.reverse_posting(
            draft,
            transfer.source_wallet_id,
            transfer.transaction_id,
            Some("cross-shard transfer released".into()),
            crate::shard::ledger::reversal::ReverseMode::TransferRelease,
        )?;
        draft.push(Event::TransferReleased {
            transfer_uuid,
            at_ms: draft.now_ms(),
        });
        Ok(())
    }

    /// Recomputes a wallet's chain and balance (`verify-integrity`).
    pub fn integrity_report(
        &self,
        wallet_id: WalletId,
        now_ms: i64,
        filed: Option<&crate::ledger::transaction::ChainChecker>,
    ) -> Result<IntegrityReport, Rejection> {
        let wallet = self.find_wallet(wallet_id)?;
        let check = match filed {
            Some(filed) => self.check_chain_after(wallet, filed.clone())?,
            None => self.check_whole_chain(wallet)?,
        };
        let valid = check.first_invalid_entry_id.is_none()
            && check.last_hash == wallet.chain_head()
            && check.ledger_balance == Some(wallet.balance());
        Ok(IntegrityReport {
            wallet_id,
            valid,
            entries_checked: check.entries_checked,
            ledger_balance: check.ledger_balance,
            cached_balance: wallet.balance(),
            chain_head: wallet.chain_head(),
            first_invalid_entry_id: check.first_invalid_entry_id,
            verified_at_ms: now_ms,
        })
    }
}
