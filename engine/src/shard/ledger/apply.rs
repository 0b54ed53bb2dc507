//! `Shard::apply`: performs one event.
//!
//! Each arm first checks that the event fits the state (and returns [`ApplyError`] without changing
//! anything if not), then mutates. The checks are the pair of the ones `decide` made (ids in sequence,
//! records exist, `balance_after` and the entry hash follow from the wallet's current balance and chain
//! head, a hold is active before it closes), so a corrupt or misordered record stops replay loudly
//! instead of building a wrong state. Nothing here reads a clock or draws a random number.

use rust_decimal::Decimal;

use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::{entry_hash, LedgerEntry, Transaction};
use crate::ledger::transfer::{IncomingTransfer, OutgoingTransfer, PreparedBatch, TransferState};
use crate::ledger::wallet::{History, Wallet, WalletStatus};
use crate::shard::cold::Recall;
use crate::shard::event::{Event, WalletCreated};
use crate::shard::moves::MoveKey;
use crate::shard::state::{OwnerKey, Shard};
use crate::values::error::ApplyError;
use crate::values::ids::{EntryId, HoldId, TransactionId, WalletId};
use crate::values::money::zero;

impl Shard {
    /// Applies one event (see the module docs). Deterministic: the same events in the same order
    /// give byte-identical state.
    pub fn apply(&mut self, event: &Event) -> Result<(), ApplyError> {
        match event {
            Event::WalletCreated(created) => self.apply_wallet_created(created),
            Event::WalletStatusChanged {
                wallet_id,
                status,
                at_ms,
            } => {
                let wallet = self.wallet_for_apply(*wallet_id)?;
                wallet.status = *status;
                wallet.updated_at_ms = *at_ms;
                Ok(())
            }
            Event::TransactionRecorded {
                wallet_id,
                transaction,
            } => self.apply_transaction_recorded(*wallet_id, transaction),
            Event::EntryPosted { wallet_id, entry } => self.apply_entry_posted(*wallet_id, entry),
            Event::EntryReversed {
                wallet_id,
                entry_id,
                reversed_by_entry_id,
            } => match self.entry_for_change(*wallet_id, *entry_id)? {
                Some(entry) => entry
                    .mark_reversed(*reversed_by_entry_id)
                    .map_err(|reason| ApplyError::new(reason, entry_id.0)),
                // Filed already: the store's filing of this event marks it.
                None => Ok(()),
            },
            Event::TransactionReversed {
                wallet_id,
                transaction_id,
                reversed_by_transaction_id,
                at_ms,
            } => {
                if let Some(transaction) =
                    self.transaction_for_change(*wallet_id, *transaction_id)?
                {
                    transaction
                        .mark_reversed(*reversed_by_transaction_id, *at_ms)
                        .map_err(|reason| ApplyError::new(reason, transaction_id.0))?;
                }
                self.wallet_for_apply(*wallet_id)?.updated_at_ms = *at_ms;
                Ok(())
            }
            Event::RefundTotalChanged {
                wallet_id,
                transaction_id,
                refunded_amount,
                at_ms,
            } => {
                if let Some(transaction) =
                    self.transaction_for_change(*wallet_id, *transaction_id)?
                {
                    transaction
                        .set_refunded(*refunded_amount)
                        .map_err(|reason| ApplyError::new(reason, transaction_id.0))?;
                }
                self.wallet_for_apply(*wallet_id)?.updated_at_ms = *at_ms;
                Ok(())
            }
            Event::HoldPlaced { wallet_id, hold } => self.apply_hold_placed(*wallet_id, hold),
            Event::HoldClosed {
                wallet_id,
                hold_id,
                status,
                captured_amount,
                capture_transaction_id,
                at_ms,
            } => self.apply_hold_closed(
                *wallet_id,
                *hold_id,
                *status,
                (*captured_amount, *capture_transaction_id),
                *at_ms,
            ),
            Event::TransferReserved(transfer) => self.apply_transfer_reserved(transfer),
            Event::TransferCredited(transfer) => self.apply_transfer_credited(transfer),
            Event::TransferFinalized {
                transfer_uuid,
                at_ms,
            } => self.settle_transfer(*transfer_uuid, TransferState::Finalized, *at_ms),
            Event::TransferReleased {
                transfer_uuid,
                at_ms,
            } => self.settle_transfer(*transfer_uuid, TransferState::Released, *at_ms),
            Event::BalanceVerified { wallet_id, at_ms } => {
                let wallet = self.wallet_for_apply(*wallet_id)?;
                wallet.balance_verified_at_ms = *at_ms;
                Ok(())
            }
            Event::UuidKeyChosen { key } => {
                // Chosen once: a second key would leave the first one's uuids unreadable.
                if self.uuid_key.is_some_and(|chosen| chosen != *key) {
                    return Err(ApplyError::new(
                        "the shard's uuid key was chosen already",
                        0,
                    ));
                }
                self.uuid_key = Some(*key);
                Ok(())
            }
            Event::TransferBatchPrepared {
                batch,
                shards,
                transfers,
            } => self.apply_batch_prepared(*batch, shards, transfers),
            Event::TransferBatchClosed { batch } => self.apply_batch_closed(*batch),
            commerce => self.apply_commerce(commerce),
        }
    }

    /// Applies a whole batch in order, stopping at the first event that does not fit.
    pub fn apply_all(&mut self, events: &[Event]) -> Result<(), ApplyError> {
        events.iter().try_for_each(|event| self.apply(event))
    }

    pub(crate) fn wallet_for_apply(
        &mut self,
        wallet_id: WalletId,
    ) -> Result<&mut Wallet, ApplyError> {
        self.wallet_mut(wallet_id)
            .ok_or(ApplyError::new("unknown wallet", wallet_id.0))
    }

    /// Whether transaction `id` was issued by this shard: in memory, or (once records leave
    /// memory) below the transaction sequence. What apply checks a reference against.
    pub(crate) fn transaction_known(&self, wallet: &Wallet, id: TransactionId) -> bool {
        wallet.transaction(id).is_some() || (self.recall.evicts() && self.transaction_issued(id))
    }

    /// Whether this shard minted transaction `id` (below its transaction sequence).
    fn transaction_issued(&self, id: TransactionId) -> bool {
        self.ids
            .seq_of(id.0)
            .is_some_and(|seq| seq < self.next_transaction_seq)
    }

    /// Transaction `id` of `wallet_id`, to change under the current command: in memory, or
    /// recalled from the store into memory (`Recall::Store`); `None` while replaying if it is not
    /// in memory (the store's own filing of the event changes it).
    fn transaction_for_change(
        &mut self,
        wallet_id: WalletId,
        id: TransactionId,
    ) -> Result<Option<&mut Transaction>, ApplyError> {
        let unknown = ApplyError::new("unknown transaction", id.0);
        let stamp = self.stamp;
        let issued = self.transaction_issued(id);
        self.touch(wallet_id);
        let position = self
            .position_of(wallet_id)
            .filter(|p| self.wallets.get(*p).is_some_and(|w| w.id() == wallet_id))
            .ok_or(ApplyError::new("unknown wallet", wallet_id.0))?;
        let recall = self.recall.clone();
        let wallet = self
            .wallets
            .get_mut(position)
            .ok_or(ApplyError::new("unknown wallet", wallet_id.0))?;
        if wallet.transaction(id).is_some() {
            return Ok(wallet.transaction_mut(id, stamp));
        }
        match recall {
            Recall::Keep => Err(unknown),
            Recall::Replay => issued.then_some(None).ok_or(unknown),
            Recall::Store(store) => {
                let filed = store
                    .transaction(wallet_id, id)
                    .map_err(|_| ApplyError::new("the history store could not be read", id.0))?
                    .ok_or(unknown)?;
                self.index
                    .transactions
                    .insert(filed.uuid, (wallet_id, filed.id));
                Ok(wallet
                    .history_mut()
                    .transactions
                    .recall(stamp, filed, |t| t.id))
            }
        }
    }

    /// Entry `id` of `wallet_id`, to change under the current command, if it is in memory.
    /// Entries are not recalled: the only change to a filed entry (its reversal mark) is made by
    /// the store's filing, and decisions read the reversal from the transaction.
    fn entry_for_change(
        &mut self,
        wallet_id: WalletId,
        id: EntryId,
    ) -> Result<Option<&mut LedgerEntry>, ApplyError> {
        let stamp = self.stamp;
        let issued = self
            .ids
            .seq_of(id.0)
            .is_some_and(|seq| seq < self.next_entry_seq);
        let evicts = self.recall.evicts();
        self.touch(wallet_id);
        let wallet = self.wallet_for_apply(wallet_id)?;
        if wallet.entry(id).is_some() {
            return Ok(wallet.entry_mut(id, stamp));
        }
        if evicts && issued {
            Ok(None)
        } else {
            Err(ApplyError::new("unknown entry", id.0))
        }
    }

    /// Checks that `id` is the next id of a sequence and returns the sequence number after it.
    pub(crate) fn next_in_sequence(
        &self,
        id: u64,
        next_seq: u64,
        what: &'static str,
    ) -> Result<u64, ApplyError> {
        match self.ids.seq_of(id) {
            Some(seq) if seq == next_seq => seq
                .checked_add(1)
                .ok_or(ApplyError::new("sequence overflow", id)),
            _ => Err(ApplyError::new(what, id)),
        }
    }

    fn apply_wallet_created(&mut self, created: &WalletCreated) -> Result<(), ApplyError> {
        let id = created.wallet_id.0;
        let next = self.next_in_sequence(id, self.next_wallet_seq, "wallet id out of sequence")?;
        let history = created.meta.as_ref().map(|meta| {
            Box::new(History {
                meta: Some(meta.clone()),
                ..History::default()
            })
        });
        let wallet = Wallet {
            id: created.wallet_id,
            uuid: created.uuid,
            owner_id: created.owner_id,
            business_id: created.business_id,
            branch_id: created.branch_id,
            balance: zero(created.currency),
            held: zero(created.currency),
            pending: zero(created.currency),
            balance_verified_at_ms: created.at_ms,
            created_at_ms: created.at_ms,
            updated_at_ms: created.at_ms,
            currency: created.currency,
            owner_type: created.owner_type,
            wallet_type: created.wallet_type,
            status: WalletStatus::Active,
            history,
        };
        let key = OwnerKey::of(&wallet);
        if self.index.owners.contains_key(&key) {
            return Err(ApplyError::new(
                "duplicate wallet for owner, currency and type",
                id,
            ));
        }
        self.index.owners.insert(key, created.wallet_id);
        self.wallets.push(wallet);
        self.next_wallet_seq = next;
        Ok(())
    }

    fn apply_transaction_recorded(
        &mut self,
        wallet_id: WalletId,
        transaction: &Transaction,
    ) -> Result<(), ApplyError> {
        let id = transaction.id.0;
        let next = self.next_in_sequence(
            id,
            self.next_transaction_seq,
            "transaction id out of sequence",
        )?;
        if self.index.transactions.contains_key(&transaction.uuid) {
            return Err(ApplyError::new("duplicate transaction uuid", id));
        }
        let replaying = matches!(self.recall, Recall::Replay);
        let stamp = self.stamp;
        let wallet = self.wallet_for_apply(wallet_id)?;
        if wallet.is_system() {
            return Err(ApplyError::new(
                "system accounts have no transactions",
                wallet_id.0,
            ));
        }
        wallet.updated_at_ms = transaction.created_at_ms;
        let history = wallet.history_mut();
        history.counts.transactions += 1;
        // Replay keeps no history in memory: the store files it from the same log.
        if !replaying {
            history.transactions.push(stamp, transaction.clone());
            self.index
                .transactions
                .insert(transaction.uuid, (wallet_id, transaction.id));
            self.touch(wallet_id);
        }
        self.next_transaction_seq = next;
        Ok(())
    }

    fn apply_entry_posted(
        &mut self,
        wallet_id: WalletId,
        entry: &LedgerEntry,
    ) -> Result<(), ApplyError> {
        let id = entry.id.0;
        let next = self.next_in_sequence(id, self.next_entry_seq, "entry id out of sequence")?;
        let replaying = matches!(self.recall, Recall::Replay);
        let stamp = self.stamp;
        let wallet = self.wallet_for_apply(wallet_id)?;
        let expected_balance = wallet.balance.checked_add(entry.signed_amount());
        if expected_balance != Some(entry.balance_after) {
            return Err(ApplyError::new(
                "entry balance_after does not follow the wallet balance",
                id,
            ));
        }
        if entry_hash(&wallet.chain_head(), wallet_id, wallet.currency, entry) != entry.hash {
            return Err(ApplyError::new(
                "entry hash does not chain to the wallet's head",
                id,
            ));
        }
        wallet.balance = entry.balance_after;
        wallet.updated_at_ms = entry.created_at_ms;
        let history = wallet.history_mut();
        history.chain_head = entry.hash;
        history.counts.entries += 1;
        if replaying {
            // Nothing of the chain in memory: the next entry in memory follows this one.
            if history.entries.is_empty() {
                history.entries_before = entry.hash;
            }
        } else {
            history.entries.push(stamp, entry.clone());
            self.touch(wallet_id);
        }
        self.next_entry_seq = next;
        self.posted_at_floor_ms = self.posted_at_floor_ms.max(entry.created_at_ms);
        Ok(())
    }

    fn apply_hold_placed(
        &mut self,
        wallet_id: WalletId,
        hold: &crate::ledger::hold::Hold,
    ) -> Result<(), ApplyError> {
        let id = hold.id.0;
        let next = self.next_in_sequence(id, self.next_hold_seq, "hold id out of sequence")?;
        if self.index.holds.contains_key(&hold.uuid) {
            return Err(ApplyError::new("duplicate hold uuid", id));
        }
        if hold.status != HoldStatus::Active {
            return Err(ApplyError::new("a placed hold must be active", id));
        }
        let stamp = self.stamp;
        let wallet = self.wallet_for_apply(wallet_id)?;
        let held = wallet
            .held
            .checked_add(hold.amount)
            .ok_or(ApplyError::new("held overflow", id))?;
        wallet.held = held;
        wallet.updated_at_ms = hold.created_at_ms;
        let history = wallet.history_mut();
        history.counts.holds += 1;
        history.holds.push(stamp, hold.clone());
        self.touch(wallet_id);
        self.index.holds.insert(hold.uuid, (wallet_id, hold.id));
        self.index
            .hold_expiry
            .insert((hold.expires_at_ms, hold.id), wallet_id);
        self.next_hold_seq = next;
        Ok(())
    }

    fn apply_hold_closed(
        &mut self,
        wallet_id: WalletId,
        hold_id: HoldId,
        status: HoldStatus,
        (captured_amount, capture_transaction_id): (Option<Decimal>, Option<TransactionId>),
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let stamp = self.stamp;
        self.touch(wallet_id);
        let wallet = self.wallet_for_apply(wallet_id)?;
        let held_before = wallet.held;
        // Active holds never leave memory, so the hold is here.
        let hold = wallet
            .hold_mut(hold_id, stamp)
            .ok_or(ApplyError::new("unknown hold", hold_id.0))?;
        let held = held_before
            .checked_sub(hold.amount)
            .ok_or(ApplyError::new("held underflow", hold_id.0))?;
        let expiry_key = (hold.expires_at_ms, hold.id);
        hold.close(status, captured_amount, capture_transaction_id, at_ms)
            .map_err(|reason| ApplyError::new(reason, hold_id.0))?;
        wallet.held = held;
        wallet.updated_at_ms = at_ms;
        self.index.hold_expiry.remove(&expiry_key);
        Ok(())
    }

    fn apply_transfer_reserved(&mut self, transfer: &OutgoingTransfer) -> Result<(), ApplyError> {
        if transfer.state != TransferState::Reserved || transfer.settled_at_ms.is_some() {
            return Err(ApplyError::new(
                "a new outgoing transfer must be reserved",
                transfer.transaction_id.0,
            ));
        }
        if self.transfers_out.contains_key(&transfer.uuid) {
            return Err(ApplyError::new(
                "duplicate outgoing transfer",
                transfer.transaction_id.0,
            ));
        }
        self.transfers_out.insert(transfer.uuid, transfer.clone());
        Ok(())
    }

    fn apply_transfer_credited(&mut self, transfer: &IncomingTransfer) -> Result<(), ApplyError> {
        if self.transfers_in.contains_key(&transfer.uuid) {
            return Err(ApplyError::new(
                "transfer already credited",
                transfer.transaction_id.0,
            ));
        }
        self.count_transit(transfer.currency, transfer.amount, false)?;
        self.transfers_in.insert(transfer.uuid, transfer.clone());
        self.finish_move(MoveKey::Incoming(transfer.uuid));
        Ok(())
    }

    fn apply_batch_prepared(
        &mut self,
        batch: crate::values::ids::Uuid,
        shards: &[u32],
        transfers: &[crate::values::ids::Uuid],
    ) -> Result<(), ApplyError> {
        if self.prepared_batches.contains_key(&batch) || !shards.contains(&self.shard_index()) {
            return Err(ApplyError::new(
                "a batch is prepared once, on one of its shards",
                0,
            ));
        }
        let taken = |uuid| {
            self.prepared_batches
                .values()
                .any(|open| open.transfers.contains(uuid))
        };
        for uuid in transfers {
            let reserved = self
                .transfers_out
                .get(uuid)
                .is_some_and(|transfer| transfer.state == TransferState::Reserved);
            if !reserved || taken(uuid) {
                return Err(ApplyError::new(
                    "a prepared batch's transfer must be reserved here and in no other batch",
                    0,
                ));
            }
        }
        self.prepared_batches.insert(
            batch,
            PreparedBatch {
                shards: shards.to_vec(),
                transfers: transfers.to_vec(),
            },
        );
        Ok(())
    }

    /// Closing needs every transfer of the batch settled (a reserved one never leaves memory),
    /// else recovery would no longer finish it.
    fn apply_batch_closed(&mut self, batch: crate::values::ids::Uuid) -> Result<(), ApplyError> {
        let open = self
            .prepared_batches
            .get(&batch)
            .ok_or(ApplyError::new("closing a batch that is not open", 0))?;
        let unsettled = open.transfers.iter().any(|uuid| {
            self.transfers_out
                .get(uuid)
                .is_some_and(|transfer| transfer.state == TransferState::Reserved)
        });
        if unsettled {
            return Err(ApplyError::new(
                "closing a batch whose transfers are not all settled",
                0,
            ));
        }
        self.prepared_batches.remove(&batch);
        Ok(())
    }

    fn settle_transfer(
        &mut self,
        uuid: crate::values::ids::Uuid,
        state: TransferState,
        at_ms: i64,
    ) -> Result<(), ApplyError> {
        let transfer = self
            .transfers_out
            .get_mut(&uuid)
            .ok_or(ApplyError::new("unknown outgoing transfer", 0))?;
        let id = transfer.transaction_id.0;
        crate::ledger::transfer::settle_move(
            (&mut transfer.state, &mut transfer.settled_at_ms),
            state,
            at_ms,
        )
        .map_err(|_| ApplyError::new("outgoing transfer already settled", id))?;
        let moved = (transfer.currency, transfer.amount);
        self.settled_move(MoveKey::Outgoing(uuid), state, moved)
    }
}
