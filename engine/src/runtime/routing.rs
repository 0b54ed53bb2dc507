//! Which shard a command goes to: by the wallet it names, by the owner a new wallet belongs to, or,
//! for records named by uuid, by asking the shards (where a uuid lives never changes).

use crate::runtime::actor::{Answer, Claim, Executed};
use crate::runtime::config::EngineError;
use crate::runtime::engine::Engine;
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::Command;
use crate::shard::state::{Presence, Shard};
use crate::values::ids::{owner_shard, shard_of, Uuid, WalletId};

impl Engine {
    /// The shard whose Arbiter runs a command's orchestration: its wallet's (the source's for a
    /// transfer), or shard 0 when only an async lookup could tell (holds and transactions named
    /// by uuid).
    pub(crate) fn home(&self, command: &Command) -> u32 {
        let count = self.shard_count();
        match command {
            Command::CreateWallet(create) => owner_shard(create.owner_id, count),
            Command::FreezeWallet { wallet_id }
            | Command::UnfreezeWallet { wallet_id }
            | Command::VerifyIntegrity { wallet_id, .. } => shard_of(wallet_id.0, count),
            Command::Deposit(movement) | Command::Withdraw(movement) => {
                shard_of(movement.wallet_id.0, count)
            }
            Command::Transfer(args)
            | Command::TransferReserve(args)
            | Command::TransferBatchReserve(args) => shard_of(args.source_wallet_id.0, count),
            Command::TransferCredit(credit) => shard_of(credit.target_wallet_id.0, count),
            Command::PlaceHold(hold) => shard_of(hold.wallet_id.0, count),
            Command::InitiatePayment(payment) => shard_of(payment.merchant_wallet_id.0, count),
            Command::CreatePaymentLink(link) => shard_of(link.merchant_wallet_id.0, count),
            Command::CreateQr(qr) => shard_of(qr.merchant_wallet_id.0, count),
            Command::CreatePayout(payout) => shard_of(payout.wallet_id.0, count),
            Command::ApprovePayout { payout_id, .. }
            | Command::RejectPayout { payout_id, .. }
            | Command::CancelPayout { payout_id, .. }
            | Command::ExecutePayout { payout_id, .. } => shard_of(payout_id.0, count),
            Command::PayoutProviderResult(result) => shard_of(result.payout_id.0, count),
            Command::CreateSettlement(settlement) => shard_of(settlement.wallet_id.0, count),
            Command::ApproveSettlement { settlement_id, .. }
            | Command::RejectSettlement { settlement_id, .. }
            | Command::CancelSettlement { settlement_id, .. }
            | Command::ExecuteSettlement { settlement_id, .. } => shard_of(settlement_id.0, count),
            _ => 0,
        }
    }
    /// Routes a command to its shard (or runs the cross-shard protocol).
    pub(crate) async fn dispatch(
        &self,
        command: Command,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        match &command {
            Command::Transfer(args) => {
                let source = self.shard_of_wallet(args.source_wallet_id);
                let target = self.shard_of_wallet(args.target_wallet_id);
                if source != target {
                    return self.transfer_across(args.clone(), record).await;
                }
            }
            Command::ConfirmPayment { payment_uuid } => {
                if let Some(place) = self.payment_place(*payment_uuid).await? {
                    if place.crosses() {
                        return self.confirm_across(*payment_uuid, place, record).await;
                    }
                }
            }
            Command::RefundPayment(refund) => {
                if let Some(place) = self.payment_place(refund.payment_uuid).await? {
                    if place.crosses() {
                        return self.refund_across(command, place, record).await;
                    }
                }
            }
            _ => {}
        }
        let shard = self.route(&command).await?;
        let claim = record.map(|record| Claim {
            record,
            answer: Answer::Result,
        });
        self.send(shard, command, claim).await
    }
    /// The shard a command belongs to. Commands naming a hold or transaction by uuid are sent to
    /// the shard that has it (shard 0 when none does, which then refuses with `not_found`).
    pub(crate) async fn route(&self, command: &Command) -> Result<u32, EngineError> {
        let count = self.shard_count();
        let by_wallet = |wallet_id: WalletId| shard_of(wallet_id.0, count);
        Ok(match command {
            Command::CreateWallet(create) => owner_shard(create.owner_id, count),
            Command::FreezeWallet { wallet_id }
            | Command::UnfreezeWallet { wallet_id }
            | Command::VerifyIntegrity { wallet_id, .. } => by_wallet(*wallet_id),
            Command::Deposit(movement) | Command::Withdraw(movement) => {
                by_wallet(movement.wallet_id)
            }
            Command::Transfer(args)
            | Command::TransferReserve(args)
            | Command::TransferBatchReserve(args) => by_wallet(args.source_wallet_id),
            Command::TransferCredit(credit) => by_wallet(credit.target_wallet_id),
            Command::PlaceHold(hold) => by_wallet(hold.wallet_id),
            Command::ReleaseHold { hold_uuid } => {
                self.find(*hold_uuid, |s, u| s.holds_hold(u)).await?
            }
            Command::CaptureHold(capture) => {
                self.find(capture.hold_uuid, |s, u| s.holds_hold(u)).await?
            }
            Command::Refund(refund) => {
                self.find(refund.original_transaction_uuid, |s, u| {
                    s.holds_transaction(u)
                })
                .await?
            }
            Command::Reverse {
                transaction_uuid, ..
            } => {
                self.find(*transaction_uuid, |s, u| s.holds_transaction(u))
                    .await?
            }
            Command::TransferFinalize { transfer_uuid }
            | Command::TransferRelease { transfer_uuid } => {
                self.find(*transfer_uuid, |s, u| s.holds_outgoing(u))
                    .await?
            }
            Command::ConfirmPayment { payment_uuid }
            | Command::CancelPayment { payment_uuid }
            | Command::FailPayment { payment_uuid } => {
                self.find(*payment_uuid, |s, u| s.holds_payment(u)).await?
            }
            Command::PaymentProviderResult(result) => {
                self.find(result.payment_uuid, |s, u| s.holds_payment(u))
                    .await?
            }
            Command::RefundPayment(refund) => {
                self.find(refund.payment_uuid, |s, u| s.holds_payment(u))
                    .await?
            }
            Command::PaymentReserve(reserve) => by_wallet(reserve.payer_wallet_id),
            Command::PaymentCredit(credit) => by_wallet(credit.target_wallet_id),
            Command::PaymentReserveFinalize { reservation_uuid }
            | Command::PaymentReserveRelease { reservation_uuid } => {
                self.find(*reservation_uuid, |s, u| s.holds_reservation(u))
                    .await?
            }
            command => self.home(command),
        })
    }
    /// The shard where `has(shard, uuid)` is [`Presence::Here`]; else the first shard that
    /// could not tell ([`Presence::Unknown`]: a store read failed there, and the command is
    /// refused there as unavailable rather than as not found); else 0. A shard that could not
    /// tell does not hide the one that holds the record. Uses [`Engine::peek_shard`]: where a
    /// uuid lives never changes once it is written.
    pub async fn find(
        &self,
        uuid: Uuid,
        has: fn(&Shard, Uuid) -> Presence,
    ) -> Result<u32, EngineError> {
        if self.shard_count() == 1 {
            return Ok(0);
        }
        let mut unknown = None;
        for shard in 0..self.shard_count() {
            match self.peek_shard(shard, move |s| has(s, uuid)).await? {
                Presence::Here => return Ok(shard),
                Presence::Unknown => unknown = unknown.or(Some(shard)),
                Presence::Absent => {}
            }
        }
        Ok(unknown.unwrap_or(0))
    }
    /// The shard of a command that is one message to one shard, known without a lookup: it can
    /// be sent to the shard's actor from the caller's thread. Once the message is in the
    /// actor's mailbox it runs to the end even if the caller stops waiting, like the detached
    /// orchestration of the others, and one thread handoff is saved on the hottest paths.
    pub(crate) fn direct_shard(&self, command: &Command) -> Option<u32> {
        match command {
            Command::Transfer(args) => {
                let source = self.shard_of_wallet(args.source_wallet_id);
                (source == self.shard_of_wallet(args.target_wallet_id)).then_some(source)
            }
            Command::CreateWallet(_)
            | Command::FreezeWallet { .. }
            | Command::UnfreezeWallet { .. }
            | Command::VerifyIntegrity { .. }
            | Command::Deposit(_)
            | Command::Withdraw(_)
            | Command::PlaceHold(_)
            | Command::InitiatePayment(_)
            | Command::CreatePaymentLink(_)
            | Command::CreateQr(_)
            | Command::CreatePayout(_)
            | Command::ApprovePayout { .. }
            | Command::RejectPayout { .. }
            | Command::CancelPayout { .. }
            | Command::ExecutePayout { .. }
            | Command::PayoutProviderResult(_)
            | Command::CreateSettlement(_)
            | Command::ApproveSettlement { .. }
            | Command::RejectSettlement { .. }
            | Command::CancelSettlement { .. }
            | Command::ExecuteSettlement { .. } => Some(self.home(command)),
            _ => None,
        }
    }
}
