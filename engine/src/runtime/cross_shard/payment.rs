//! Orchestration of payments whose payer and merchant wallets live on different shards (the
//! protocol is in the `payment` module docs): confirm and refund as reserve → credit →
//! finalize-or-release, each step one command on one shard, so one WAL record.
//!
//! The request's idempotency key rides on the first step as pending (answered only if that step
//! is refused) and is answered by the last step, in the same record that settles the reservation.
//! Recovery runs [`Engine::complete_payment_move`] for every reservation still `reserved` after a
//! crash, with the pending key if a request was waiting on it, so the protocol never stops
//! halfway and a retry gets the answer the crashed request would have had.

use crate::commerce::payment::{PaymentMoveKind, PaymentProvider, PaymentReservation};
use crate::ledger::transfer::TransferState;
use crate::runtime::actor::{Answer, Claim, Executed, LogAnswer};
use crate::runtime::config::{unavailable, EngineError};
use crate::runtime::engine::Engine;
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::{Command, Outcome, PaymentCredit, PaymentReserve};
use crate::values::error::Rejection;
use crate::values::ids::Uuid;

/// Where a payment's money moves from and to.
#[derive(Clone, Copy, Debug)]
pub(crate) struct PaymentPlace {
    /// The merchant wallet's shard: where the payment lives.
    pub merchant_shard: u32,
    pub payer_shard: u32,
    pub provider: PaymentProvider,
}

impl PaymentPlace {
    /// Whether moving money between payer and merchant crosses shards.
    pub fn crosses(&self) -> bool {
        self.provider == PaymentProvider::Wallet && self.payer_shard != self.merchant_shard
    }
}

impl Engine {
    /// Where payment `uuid` lives and where its payer is; `None` if there is no such payment.
    /// A payment's wallets and provider never change, so a peek is enough.
    pub(crate) async fn payment_place(
        &self,
        uuid: Uuid,
    ) -> Result<Option<PaymentPlace>, EngineError> {
        let merchant_shard = self.find(uuid, |s, u| s.holds_payment(u)).await?;
        let found = self
            .peek_shard(merchant_shard, move |s| {
                s.payment(uuid)
                    .map(|found| found.map(|payment| (payment.payer_wallet_id, payment.provider)))
            })
            .await?
            .map_err(|rejection| EngineError::Unavailable(rejection.to_string()))?;
        Ok(found.map(|(payer, provider)| PaymentPlace {
            merchant_shard,
            payer_shard: self.shard_of_wallet(payer),
            provider,
        }))
    }

    /// Confirms a `wallet` payment whose payer lives on another shard.
    pub(crate) async fn confirm_across(
        &self,
        payment_uuid: Uuid,
        place: PaymentPlace,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        let payment = self
            .peek_shard(place.merchant_shard, move |s| s.payment_view(payment_uuid))
            .await?;
        // `place` found it there, and payments are never deleted (a final one is read from the store).
        let payment = payment.map_err(|rejection| {
            EngineError::Unavailable(format!("payment {payment_uuid} vanished: {rejection}"))
        })?;
        let claim = record.clone().map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let reserved = self
            .send(
                place.payer_shard,
                Command::PaymentReserve(PaymentReserve::for_payment(&payment)),
                claim,
            )
            .await?;
        let reservation = match reserved.result {
            Ok(Outcome::PaymentReserved { reservation, .. }) => reservation,
            Ok(other) => {
                return Err(EngineError::Unavailable(format!(
                    "payment reserve answered {other:?}"
                )))
            }
            Err(rejection) => {
                return Ok(Executed {
                    result: Err(rejection),
                    response: reserved.response,
                })
            }
        };
        if reservation.state == TransferState::Finalized {
            // An earlier confirm already moved the money: this one is refused like a same-shard
            // confirm of a completed payment. The finalize is a no-op that carries the answer.
            let refusal = Rejection::InvalidState("payment is not pending");
            let claim = record.map(|record| Claim {
                record,
                answer: Answer::Rejected(refusal.clone()),
            });
            let settled = self
                .send(
                    place.payer_shard,
                    Command::PaymentReserveFinalize {
                        reservation_uuid: reservation.uuid,
                    },
                    claim,
                )
                .await?;
            return Ok(Executed {
                result: Err(refusal),
                response: settled.response,
            });
        }
        self.complete_payment_move(reservation, record).await
    }

    /// Refunds a `wallet` payment whose payer lives on another shard: the merchant's debit and
    /// the reservation happen on the merchant's shard, the credit on the payer's.
    pub(crate) async fn refund_across(
        &self,
        command: Command,
        place: PaymentPlace,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        let claim = record.clone().map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let reserved = self.send(place.merchant_shard, command, claim).await?;
        match reserved.result {
            Ok(Outcome::PaymentReserved { reservation, .. }) => {
                self.complete_payment_move(reservation, record).await
            }
            // A refund that stayed on one shard (cannot happen for a cross-shard payer, but the
            // shard decides): the first step logged the key pending (it renders only a
            // refusal), so the answer is logged now; a pending key naming no move would be
            // taken for an interrupted batch's by recovery.
            Ok(outcome) => {
                let response = match record {
                    Some(record) => {
                        let claim = Claim {
                            record,
                            answer: Answer::Given(Box::new(outcome.clone())),
                        };
                        self.addr(place.merchant_shard)?
                            .send(LogAnswer(claim))
                            .await
                            .map_err(unavailable)??
                            .wait()
                            .await?
                    }
                    None => reserved.response,
                };
                Ok(Executed {
                    result: Ok(outcome),
                    response,
                })
            }
            Err(rejection) => Ok(Executed {
                result: Err(rejection),
                response: reserved.response,
            }),
        }
    }

    /// Steps 2 and 3 of a cross-shard payment move: credit the target, then finalize the
    /// reservation (or release it when the target refused). Also what recovery runs for a
    /// reservation still `reserved`. The answer is the payment after the move.
    pub(crate) async fn complete_payment_move(
        &self,
        reservation: PaymentReservation,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        let source = self.shard_of_wallet(reservation.source_wallet_id);
        let target = self.shard_of_wallet(reservation.target_wallet_id);
        let payment_uuid = reservation.payment_uuid;
        let reservation_uuid = reservation.uuid;
        let payment_shard = match reservation.kind {
            PaymentMoveKind::Charge => target,
            PaymentMoveKind::Refund => source,
        };
        let credited = self
            .send(
                target,
                Command::PaymentCredit(PaymentCredit::for_reservation(&reservation)),
                None,
            )
            .await?;
        let (command, answer) = match &credited.result {
            Ok(Outcome::PaymentCreditRefused { rejection }) | Err(rejection) => (
                Command::PaymentReserveRelease { reservation_uuid },
                Answer::Rejected(rejection.clone()),
            ),
            Ok(_) => {
                let answer = match reservation.kind {
                    // The payment lives on the target shard and is complete now (durable: the
                    // credit's answer waited for it).
                    PaymentMoveKind::Charge => {
                        let view = self
                            .read_shard(target, move |s| s.payment_view(payment_uuid))
                            .await?;
                        match view {
                            Ok(view) => Answer::Given(Box::new(Outcome::Payment(view))),
                            Err(rejection) => Answer::Rejected(rejection),
                        }
                    }
                    // The payment lives here, on the source shard: render it after the finalize.
                    PaymentMoveKind::Refund => Answer::Payment(payment_uuid),
                };
                (Command::PaymentReserveFinalize { reservation_uuid }, answer)
            }
        };
        let refused = match &answer {
            Answer::Rejected(rejection) => Some(rejection.clone()),
            _ => None,
        };
        let claim = record.map(|record| Claim { record, answer });
        let settled = self.send(source, command, claim).await?;
        if let Err(rejection) = settled.result {
            return Err(EngineError::Unavailable(format!(
                "settling payment reservation {reservation_uuid} failed: {rejection}"
            )));
        }
        let result = match refused {
            Some(rejection) => Err(rejection),
            None => self
                .read_shard(payment_shard, move |s| s.payment_view(payment_uuid))
                .await?
                .map(Outcome::Payment),
        };
        Ok(Executed {
            result,
            response: settled.response,
        })
    }
}
