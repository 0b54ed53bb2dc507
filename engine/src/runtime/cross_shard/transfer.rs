//! The cross-shard transfer protocol (reserve → credit → finalize or release), run on the
//! source's Arbiter; see `super` for the steps and recovery.

use crate::commerce::view::RecordUuids;
use crate::runtime::actor::{Answer, Claim, Executed};
use crate::runtime::config::EngineError;
use crate::runtime::engine::Engine;
use crate::runtime::journal::IdempotencyRecord;
use crate::shard::command::{Command, Outcome, TransferArgs, TransferCredit};
use crate::values::error::Rejection;
use crate::values::ids::{Uuid, WalletId};

impl Engine {
    /// The cross-shard transfer protocol (see the module docs).
    pub(crate) async fn transfer_across(
        &self,
        args: TransferArgs,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        let source = self.shard_of_wallet(args.source_wallet_id);
        let claim = record.clone().map(|record| Claim {
            record,
            answer: Answer::RejectionOnly,
        });
        let reserved = self
            .send(source, Command::TransferReserve(args), claim)
            .await?;
        let transfer = match reserved.result {
            Ok(Outcome::TransferReserved { transfer, .. }) => transfer,
            Ok(other) => {
                return Err(EngineError::Unavailable(format!(
                    "transfer reserve answered {other:?}"
                )))
            }
            Err(rejection) => {
                return Ok(Executed {
                    result: Err(rejection),
                    response: reserved.response,
                })
            }
        };
        self.complete_transfer(
            transfer.uuid,
            transfer.target_wallet_id,
            TransferCredit::for_transfer(&transfer),
            record,
        )
        .await
    }
    /// Steps 2 and 3 of a cross-shard transfer; also what recovery runs for a reserved one.
    pub(crate) async fn complete_transfer(
        &self,
        transfer_uuid: Uuid,
        target_wallet_id: WalletId,
        credit: TransferCredit,
        record: Option<IdempotencyRecord>,
    ) -> Result<Executed, EngineError> {
        // The transfer lives on its source wallet's shard; no need to search for it.
        let source = self.shard_of_wallet(credit.source_wallet_id);
        let target = self.shard_of_wallet(target_wallet_id);
        let credited = self
            .send(target, Command::TransferCredit(credit), None)
            .await?;
        // Which transaction is the debit never changes once written: a peek is enough.
        let debit_uuid = self
            .peek_shard(source, move |s| {
                let transfer = s.outgoing_transfer(transfer_uuid)?;
                s.transaction_uuid(transfer.source_wallet_id, transfer.transaction_id)
            })
            .await?;
        let (command, answer) = match credited.result {
            Ok(_) => (
                Command::TransferFinalize { transfer_uuid },
                debit_uuid.map_or(Answer::Result, Answer::Transaction),
            ),
            Err(rejection) => (
                Command::TransferRelease { transfer_uuid },
                Answer::Rejected(rejection),
            ),
        };
        let refused = match &answer {
            Answer::Rejected(rejection) => Some(rejection.clone()),
            _ => None,
        };
        let claim = record.map(|record| Claim { record, answer });
        let settled = self.send(source, command, claim).await?;
        if let Err(rejection) = settled.result {
            return Err(EngineError::Unavailable(format!(
                "settling transfer {transfer_uuid} failed: {rejection}"
            )));
        }
        let result = match (refused, debit_uuid) {
            (Some(rejection), _) => Err(rejection),
            (None, Some(uuid)) => {
                let view = self
                    .read_shard(source, move |s| s.transaction_view(uuid))
                    .await?;
                view.map(Outcome::Transaction)
            }
            (None, None) => Err(Rejection::NotFound("transfer transaction")),
        };
        Ok(Executed {
            result,
            response: settled.response,
        })
    }
}
