//! The draft a `decide` call builds: minted ids, derived uuids, and balanced postings.
//!
//! `decide` takes `&Shard`, so it cannot mutate; a [`Draft`] carries what the events produced so far
//! would change (next id of each sequence, each touched wallet's running balance and chain head,
//! system accounts opened by this command) so that several postings in one command chain correctly.
//! [`Draft::post`] refuses an unbalanced posting: that would be a bug in `decide`, caught before any
//! event exists.

use rust_decimal::Decimal;

use crate::ledger::transaction::{
    entry_hash, Direction, EntryRef, Hash, LedgerEntry, Transaction, TransactionStatus,
    TransactionText, TransactionType,
};
use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::command::Context;
use crate::shard::event::{Event, WalletCreated};
use crate::shard::state::Shard;
use crate::values::currency::Currency;
use crate::values::error::Rejection;
use crate::values::ids::{EntryId, HoldId, TransactionId, Uuid, UuidKind, WalletId};
use crate::values::money::zero;
use crate::values::sealed::UuidKey;

/// A transaction to record as part of a posting.
pub(crate) struct TxSpec {
    pub(crate) wallet_id: WalletId,
    pub(crate) transaction_type: TransactionType,
    pub(crate) direction: Direction,
    pub(crate) amount: Decimal,
    pub(crate) counterparty_wallet_id: Option<WalletId>,
    pub(crate) reference_transaction_id: Option<TransactionId>,
    pub(crate) transfer_uuid: Option<Uuid>,
    /// The part of `amount` taken as a fee (a merchant's payment credit); `None` is zero.
    pub(crate) fee_amount: Option<Decimal>,
    pub(crate) text: TransactionText,
}

impl TxSpec {
    pub(crate) fn new(
        wallet_id: WalletId,
        transaction_type: TransactionType,
        direction: Direction,
        amount: Decimal,
        text: TransactionText,
    ) -> Self {
        Self {
            wallet_id,
            transaction_type,
            direction,
            amount,
            counterparty_wallet_id: None,
            reference_transaction_id: None,
            transfer_uuid: None,
            fee_amount: None,
            text,
        }
    }
}

/// One entry of a posting; `transaction` indexes the posting's `TxSpec`s.
pub(crate) struct LegSpec {
    pub(crate) wallet_id: WalletId,
    pub(crate) direction: Direction,
    pub(crate) amount: Decimal,
    pub(crate) entry_type: TransactionType,
    pub(crate) reverses_entry_id: Option<EntryId>,
    pub(crate) transaction: usize,
}

impl LegSpec {
    pub(crate) fn new(
        wallet_id: WalletId,
        direction: Direction,
        amount: Decimal,
        entry_type: TransactionType,
        transaction: usize,
    ) -> Self {
        Self {
            wallet_id,
            direction,
            amount,
            entry_type,
            reverses_entry_id: None,
            transaction,
        }
    }
}

/// Ids of what a posting recorded, in the order of its specs.
pub(crate) struct Posted {
    pub(crate) transactions: Vec<TransactionId>,
    pub(crate) entries: Vec<EntryId>,
}

struct Running {
    wallet_id: WalletId,
    currency: Currency,
    balance: Decimal,
    head: Hash,
}

pub(crate) struct Draft<'a> {
    pub(crate) shard: &'a Shard,
    pub(crate) ctx: &'a Context,
    events: Vec<Event>,
    next_wallet_seq: u64,
    next_transaction_seq: u64,
    next_entry_seq: u64,
    next_hold_seq: u64,
    running: Vec<Running>,
    opened: Vec<(Currency, WalletType, WalletId)>,
    /// The shard's uuid key when this command chose it (the shard had none).
    chosen_key: Option<UuidKey>,
    /// The earliest time this command may stamp a posting: the latest entry's on the shard,
    /// then its own postings' ([`Shard::posted_at_floor_ms`]).
    posted_at_floor_ms: i64,
}

fn mint(shard: &Shard, seq: &mut u64) -> Result<u64, Rejection> {
    let id = shard
        .ids
        .id_of(*seq)
        .ok_or(Rejection::LimitExceeded("id sequence exhausted"))?;
    *seq = seq
        .checked_add(1)
        .ok_or(Rejection::LimitExceeded("id sequence exhausted"))?;
    Ok(id)
}

impl<'a> Draft<'a> {
    pub(crate) fn new(shard: &'a Shard, ctx: &'a Context) -> Self {
        Self {
            shard,
            ctx,
            events: Vec::new(),
            next_wallet_seq: shard.next_wallet_seq,
            next_transaction_seq: shard.next_transaction_seq,
            next_entry_seq: shard.next_entry_seq,
            next_hold_seq: shard.next_hold_seq,
            running: Vec::new(),
            opened: Vec::new(),
            chosen_key: None,
            posted_at_floor_ms: shard.posted_at_floor_ms,
        }
    }

    pub(crate) fn now_ms(&self) -> i64 {
        self.ctx.now_ms
    }

    pub(crate) fn push(&mut self, event: Event) {
        self.events.push(event);
    }

    pub(crate) fn finish(self) -> Vec<Event> {
        self.events
    }

    pub(crate) fn uuid(&self, kind: UuidKind, id: u64) -> Uuid {
        Uuid::derive(&self.ctx.entropy, self.shard.shard_index(), kind, id)
    }

    /// A time-ordered uuid stamped with this command's time ([`Uuid::derive_timed`]): for
    /// records the history store keys by uuid.
    pub(crate) fn timed_uuid(&self, kind: UuidKind, id: u64) -> Uuid {
        Uuid::derive_timed(
            &self.ctx.entropy,
            self.shard.shard_index(),
            kind,
            id,
            self.ctx.now_ms,
        )
    }

    /// The uuid of a new transaction or hold (`kind`) of `wallet`: sealed under the shard's key
    /// (`values::sealed`), so that it opens to the record without an index. The shard's first
    /// such command chooses the key from its entropy and logs it, ahead of the record. An id
    /// beyond 48 bits gets a derived uuid, which the history store indexes.
    pub(crate) fn record_uuid(&mut self, kind: UuidKind, wallet: WalletId, id: u64) -> Uuid {
        let key = match self.shard.uuid_key.or(self.chosen_key) {
            Some(key) => key,
            None => {
                let key = UuidKey::choose(&self.ctx.entropy, self.shard.shard_index());
                self.chosen_key = Some(key);
                self.events.push(Event::UuidKeyChosen { key });
                key
            }
        };
        key.seal(kind, wallet.0, id)
            .unwrap_or_else(|| self.uuid(kind, id))
    }

    pub(crate) fn mint_wallet_id(&mut self) -> Result<WalletId, Rejection> {
        mint(self.shard, &mut self.next_wallet_seq).map(WalletId)
    }

    pub(crate) fn mint_hold_id(&mut self) -> Result<HoldId, Rejection> {
        mint(self.shard, &mut self.next_hold_seq).map(HoldId)
    }

    /// The id the next recorded transaction will get (for uuids that must be known before posting).
    pub(crate) fn peek_transaction_id(&self) -> Result<TransactionId, Rejection> {
        self.shard
            .ids
            .id_of(self.next_transaction_seq)
            .map(TransactionId)
            .ok_or(Rejection::LimitExceeded("id sequence exhausted"))
    }

    /// The shard's system account of `kind` in `currency`, opening it in this command if needed.
    pub(crate) fn system_account(
        &mut self,
        currency: Currency,
        kind: WalletType,
    ) -> Result<WalletId, Rejection> {
        if let Some(id) = self.shard.system_account(currency, kind) {
            return Ok(id);
        }
        if let Some((_, _, id)) = self
            .opened
            .iter()
            .find(|(c, k, _)| *c == currency && *k == kind)
        {
            return Ok(*id);
        }
        let wallet_id = self.mint_wallet_id()?;
        let event = Event::WalletCreated(WalletCreated {
            wallet_id,
            uuid: self.uuid(UuidKind::Wallet, wallet_id.0),
            owner_type: OwnerType::System,
            owner_id: 0,
            wallet_type: kind,
            currency,
            business_id: 0,
            branch_id: 0,
            meta: None,
            at_ms: self.ctx.now_ms,
        });
        self.events.push(event);
        self.opened.push((currency, kind, wallet_id));
        self.running.push(Running {
            wallet_id,
            currency,
            balance: zero(currency),
            head: Hash::ZERO,
        });
        Ok(wallet_id)
    }

    fn running_mut(&mut self, wallet_id: WalletId) -> Result<&mut Running, Rejection> {
        let position = match self
            .running
            .iter()
            .position(|running| running.wallet_id == wallet_id)
        {
            Some(position) => position,
            None => {
                let wallet = self
                    .shard
                    .wallet(wallet_id)
                    .ok_or(Rejection::NotFound("wallet"))?;
                self.running.push(Running {
                    wallet_id,
                    currency: wallet.currency(),
                    balance: wallet.balance(),
                    head: wallet.chain_head(),
                });
                self.running.len() - 1
            }
        };
        self.running
            .get_mut(position)
            .ok_or(Rejection::NotFound("wallet"))
    }

    /// Records a balanced posting in `currency`: one `TransactionRecorded` per spec, then one chained
    /// `EntryPosted` per leg.
    pub(crate) fn post(
        &mut self,
        currency: Currency,
        txs: &[TxSpec],
        legs: &[LegSpec],
    ) -> Result<Posted, Rejection> {
        let net = legs
            .iter()
            .try_fold(Decimal::ZERO, |sum, leg| {
                sum.checked_add(leg.direction.signed(leg.amount))
            })
            .ok_or(Rejection::LimitExceeded("posting amount"))?;
        if !net.is_zero()
            || legs.is_empty()
            || legs
                .iter()
                .any(|leg| leg.transaction >= txs.len() || leg.amount <= Decimal::ZERO)
        {
            return Err(Rejection::InvalidState(
                "internal: unbalanced or malformed posting",
            ));
        }
        // Never earlier than an entry posted before on this shard: a clock stepped back, or a
        // command stamped on one thread and decided after a later one, posts at the floor.
        let now_ms = self.ctx.now_ms.max(self.posted_at_floor_ms);
        self.posted_at_floor_ms = now_ms;
        let mut transaction_ids = Vec::with_capacity(txs.len());
        for _ in txs {
            transaction_ids.push(TransactionId(mint(
                self.shard,
                &mut self.next_transaction_seq,
            )?));
        }
        let mut entry_ids = Vec::with_capacity(legs.len());
        for _ in legs {
            entry_ids.push(EntryId(mint(self.shard, &mut self.next_entry_seq)?));
        }
        let refs: Vec<EntryRef> = legs
            .iter()
            .zip(&entry_ids)
            .map(|(leg, entry_id)| EntryRef {
                wallet_id: leg.wallet_id,
                entry_id: *entry_id,
            })
            .collect();
        for (spec, id) in txs.iter().zip(&transaction_ids) {
            let fee_amount = spec.fee_amount.unwrap_or_else(|| zero(currency));
            let net_amount = spec
                .amount
                .checked_sub(fee_amount)
                .filter(|net| *net >= Decimal::ZERO)
                .ok_or(Rejection::InvalidState("internal: fee above the amount"))?;
            let transaction = Transaction {
                id: *id,
                uuid: self.record_uuid(UuidKind::Transaction, spec.wallet_id, id.0),
                transaction_type: spec.transaction_type,
                direction: spec.direction,
                status: TransactionStatus::Completed,
                amount: spec.amount,
                fee_amount,
                net_amount,
                counterparty_wallet_id: spec.counterparty_wallet_id,
                reference_transaction_id: spec.reference_transaction_id,
                transfer_uuid: spec.transfer_uuid,
                text: spec.text.clone(),
                legs: refs.clone(),
                refunded_amount: zero(currency),
                reversed_by_transaction_id: None,
                created_at_ms: now_ms,
                completed_at_ms: now_ms,
                reversed_at_ms: None,
            };
            self.events.push(Event::TransactionRecorded {
                wallet_id: spec.wallet_id,
                transaction,
            });
        }
        for (leg, entry_id) in legs.iter().zip(&entry_ids) {
            let spec = txs
                .get(leg.transaction)
                .ok_or(Rejection::InvalidState("internal: leg without transaction"))?;
            let transaction_id = *transaction_ids
                .get(leg.transaction)
                .ok_or(Rejection::InvalidState("internal: leg without transaction"))?;
            let uuid = self.uuid(UuidKind::Entry, entry_id.0);
            let running = self.running_mut(leg.wallet_id)?;
            if running.currency != currency {
                return Err(Rejection::CurrencyMismatch);
            }
            let balance_after = running
                .balance
                .checked_add(leg.direction.signed(leg.amount))
                .ok_or(Rejection::LimitExceeded("balance"))?;
            let mut entry = LedgerEntry {
                id: *entry_id,
                uuid,
                transaction_id,
                direction: leg.direction,
                entry_type: leg.entry_type,
                amount: leg.amount,
                balance_after,
                reverses_entry_id: leg.reverses_entry_id,
                reversed_by_entry_id: None,
                description: spec.text.description.clone(),
                idempotency_key: spec.text.idempotency_key.clone(),
                created_at_ms: now_ms,
                hash: Hash::ZERO,
            };
            entry.hash = entry_hash(&running.head, leg.wallet_id, currency, &entry);
            running.balance = balance_after;
            running.head = entry.hash;
            self.events.push(Event::EntryPosted {
                wallet_id: leg.wallet_id,
                entry,
            });
        }
        Ok(Posted {
            transactions: transaction_ids,
            entries: entry_ids,
        })
    }
}
