//! The outcomes of the commerce commands, read back from the state after their events applied.

use crate::commerce::payment::PaymentReservation;
use crate::commerce::view::{PaymentLinkView, QrView};
use crate::shard::command::{Command, Context, Outcome};
use crate::shard::event::Event;
use crate::shard::state::Shard;
use crate::values::error::{ApplyError, ExecuteError, Rejection};

fn missing(what: &'static str, id: u64) -> ExecuteError {
    ExecuteError::Corrupt(ApplyError::new(what, id))
}

impl Shard {
    fn reserved_outcome(&self, reservation: &PaymentReservation) -> Result<Outcome, ExecuteError> {
        Ok(Outcome::PaymentReserved {
            reservation: reservation.clone(),
            transaction: self
                .transaction_view_of(reservation.source_wallet_id, reservation.transaction_id)?,
        })
    }

    pub(crate) fn commerce_outcome(
        &self,
        command: &Command,
        events: &[Event],
        ctx: &Context,
    ) -> Result<Outcome, ExecuteError> {
        let outcome = match command {
            Command::InitiatePayment(_) => {
                let uuid = events
                    .iter()
                    .find_map(|event| match event {
                        Event::PaymentInitiated(payment) => Some(payment.uuid),
                        _ => None,
                    })
                    .ok_or(missing("initiated payment", 0))?;
                Outcome::Payment(self.payment_view(uuid)?)
            }
            Command::ConfirmPayment { payment_uuid }
            | Command::CancelPayment { payment_uuid }
            | Command::FailPayment { payment_uuid } => {
                Outcome::Payment(self.payment_view(*payment_uuid)?)
            }
            Command::PaymentProviderResult(result) => {
                Outcome::Payment(self.payment_view(result.payment_uuid)?)
            }
            Command::RefundPayment(refund) => {
                let reserved = events.iter().find_map(|event| match event {
                    Event::PaymentReserved(reservation) => Some(reservation.uuid),
                    _ => None,
                });
                match reserved {
                    Some(uuid) => self.reserved_outcome(
                        self.payment_reservation(uuid)
                            .ok_or(missing("refund reservation", 0))?,
                    )?,
                    None => Outcome::Payment(self.payment_view(refund.payment_uuid)?),
                }
            }
            Command::PaymentReserve(reserve) => {
                // A repeated reserve's reservation may be filed only.
                let reservation = self
                    .open_charge_record(reserve.payment_uuid)?
                    .ok_or(missing("charge reservation", 0))?;
                self.reserved_outcome(&reservation)?
            }
            Command::PaymentCredit(credit) => {
                let incoming = self
                    .credit_record(credit.reservation_uuid)?
                    .ok_or(missing("payment credit", 0))?;
                Outcome::PaymentCredited {
                    transaction: self
                        .transaction_view_of(incoming.target_wallet_id, incoming.transaction_id)?,
                    duplicate: events.is_empty(),
                }
            }
            Command::PaymentReserveFinalize { reservation_uuid }
            | Command::PaymentReserveRelease { reservation_uuid } => {
                Outcome::PaymentReservationSettled(
                    self.reservation_record(*reservation_uuid)?
                        .ok_or(Rejection::NotFound("payment reservation"))?
                        .into_owned(),
                )
            }
            Command::CreatePaymentLink(_) => {
                // The event is the link as created (it has not left memory yet, nor changed).
                let link = events
                    .iter()
                    .find_map(|event| match event {
                        Event::PaymentLinkCreated(link) => Some(link),
                        _ => None,
                    })
                    .ok_or(missing("created payment link", 0))?;
                Outcome::PaymentLink(PaymentLinkView::of(link, ctx.now_ms))
            }
            Command::CreateQr(_) => {
                let qr = events
                    .iter()
                    .find_map(|event| match event {
                        Event::QrCreated(qr) => Some(qr),
                        _ => None,
                    })
                    .ok_or(missing("created QR", 0))?;
                Outcome::Qr(QrView::of(qr))
            }
            Command::CreatePayout(_) => {
                let id = events
                    .iter()
                    .find_map(|event| match event {
                        Event::PayoutCreated(payout) => Some(payout.id),
                        _ => None,
                    })
                    .ok_or(missing("created payout", 0))?;
                Outcome::Payout(self.payout_view(id)?)
            }
            Command::ApprovePayout { payout_id, .. }
            | Command::RejectPayout { payout_id, .. }
            | Command::CancelPayout { payout_id, .. }
            | Command::ExecutePayout { payout_id, .. } => {
                Outcome::Payout(self.payout_view(*payout_id)?)
            }
            Command::PayoutProviderResult(result) => {
                Outcome::Payout(self.payout_view(result.payout_id)?)
            }
            Command::CreateSettlement(_) => {
                let id = events
                    .iter()
                    .find_map(|event| match event {
                        Event::SettlementCreated(settlement) => Some(settlement.id),
                        _ => None,
                    })
                    .ok_or(missing("created settlement", 0))?;
                Outcome::Settlement(self.settlement_view(id)?)
            }
            Command::ApproveSettlement { settlement_id, .. }
            | Command::RejectSettlement { settlement_id, .. }
            | Command::CancelSettlement { settlement_id, .. }
            | Command::ExecuteSettlement { settlement_id, .. } => {
                Outcome::Settlement(self.settlement_view(*settlement_id)?)
            }
            _ => return Err(missing("internal: not a commerce command", 0)),
        };
        Ok(outcome)
    }
}
