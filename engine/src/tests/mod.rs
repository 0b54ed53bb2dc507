//! Engine tests: unit tests per operation, model-based and replay property tests, codec fuzzing.
//!
//! Everything runs on a logical clock ([`Harness::now_ms`]) and counter-derived entropy, so every
//! test is deterministic.

mod answers_upgrade;
mod atomic_batches;
mod batch_bounds;
mod coalesce;
mod codec;
mod commerce_cross_shard;
mod commerce_fee_qr;
mod commerce_invariants;
pub(crate) mod commerce_model;
mod commerce_payments;
mod commerce_payouts;
mod commerce_reports;
mod commerce_settlements;
pub(crate) mod commerce_support;
mod cross_shard;
mod fingerprint;
mod history_reads;
mod holds;
mod idempotency_lookups;
mod journal;
mod links_store;
mod memory;
mod model;
mod money_ops;
mod moves_upgrade;
mod payments_upgrade;
mod refunds_reversals;
mod replay;
mod reports_upgrade;
mod runtime_hardening;
mod sealed_uuids;
mod settlements_store;
mod wallets;

use rust_decimal::Decimal;

use crate::ledger::wallet::{OwnerType, WalletType};
use crate::shard::command::{Details, MoneyMove, TransferArgs};
use crate::{Command, Context, Currency, Event, ExecuteError, Outcome, Rejection, Shard, WalletId};

pub(crate) fn dec(text: &str) -> Decimal {
    Decimal::from_str_exact(text).unwrap()
}

pub(crate) fn cur(code: &str) -> Currency {
    Currency::from_code(code).unwrap()
}

/// A shard plus a logical clock and entropy counter.
pub(crate) struct Harness {
    pub(crate) shard: Shard,
    pub(crate) now_ms: i64,
    counter: u64,
    /// Every event applied, in order (for replay checks).
    pub(crate) log: Vec<Event>,
}

impl Harness {
    pub(crate) fn new() -> Self {
        Self::with_shard(Shard::new(0, 1).unwrap())
    }

    pub(crate) fn with_shard(shard: Shard) -> Self {
        Self {
            shard,
            now_ms: 1_700_000_000_000,
            counter: 0,
            log: Vec::new(),
        }
    }

    pub(crate) fn ctx(&mut self) -> Context {
        self.counter += 1;
        let mut entropy = [0u8; 32];
        entropy[..8].copy_from_slice(&self.counter.to_le_bytes());
        entropy[8..16].copy_from_slice(&u64::from(self.shard.shard_index()).to_le_bytes());
        Context::new(self.now_ms, entropy)
    }

    /// Executes; a rejection is returned after checking that it changed nothing.
    pub(crate) fn exec(&mut self, command: Command) -> Result<Outcome, Rejection> {
        let before = self.shard.state_digest();
        let ctx = self.ctx();
        match self.shard.execute(&command, &ctx) {
            Ok((events, outcome)) => {
                self.shard.check_invariants().unwrap();
                // The batch survives the codec unchanged.
                assert_eq!(
                    crate::decode(&crate::encode(&events).unwrap()).unwrap(),
                    events
                );
                self.log.extend(events);
                Ok(outcome)
            }
            Err(ExecuteError::Rejected(rejection)) => {
                assert_eq!(
                    self.shard.state_digest(),
                    before,
                    "rejected {command:?} changed the state"
                );
                Err(rejection)
            }
            Err(other) => panic!("execute failed: {other}"),
        }
    }

    pub(crate) fn ok(&mut self, command: Command) -> Outcome {
        self.exec(command).unwrap()
    }

    pub(crate) fn reject(&mut self, command: Command) -> Rejection {
        let ctx = self.ctx();
        assert!(self.shard.decide(&command, &ctx).is_err());
        self.exec(command).unwrap_err()
    }

    pub(crate) fn create(&mut self, owner_id: u64, currency: &str) -> WalletId {
        self.create_typed(OwnerType::Customer, owner_id, currency, WalletType::Primary)
    }

    pub(crate) fn create_typed(
        &mut self,
        owner_type: OwnerType,
        owner_id: u64,
        currency: &str,
        wallet_type: WalletType,
    ) -> WalletId {
        match self.ok(Command::CreateWallet(crate::shard::command::CreateWallet {
            owner_type,
            owner_id,
            currency: cur(currency),
            wallet_type,
            business_id: 1,
            branch_id: 0,
            meta: None,
        })) {
            Outcome::Wallet(view) => view.id,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn deposit(
        &mut self,
        wallet_id: WalletId,
        amount: &str,
    ) -> crate::ledger::view::TransactionView {
        match self.ok(deposit(wallet_id, amount)) {
            Outcome::Transaction(view) => view,
            other => panic!("unexpected {other:?}"),
        }
    }

    pub(crate) fn balance(&self, wallet_id: WalletId) -> Decimal {
        self.shard.wallet(wallet_id).unwrap().balance()
    }

    pub(crate) fn available(&self, wallet_id: WalletId) -> Decimal {
        self.shard.wallet(wallet_id).unwrap().available().unwrap()
    }
}

pub(crate) fn deposit(wallet_id: WalletId, amount: &str) -> Command {
    Command::Deposit(MoneyMove {
        wallet_id,
        amount: dec(amount),
        currency: None,
        details: Details::default(),
    })
}

pub(crate) fn withdraw(wallet_id: WalletId, amount: &str) -> Command {
    Command::Withdraw(MoneyMove {
        wallet_id,
        amount: dec(amount),
        currency: None,
        details: Details::default(),
    })
}

pub(crate) fn transfer(
    source: WalletId,
    target: WalletId,
    amount: &str,
    currency: &str,
) -> TransferArgs {
    TransferArgs {
        source_wallet_id: source,
        target_wallet_id: target,
        amount: dec(amount),
        currency: cur(currency),
        details: Details::default(),
    }
}

/// Parks shard `shard`'s actor inside a read until the returned sender is used or dropped: no
/// message to that shard is handled meanwhile.
pub(crate) async fn park_shard(
    engine: &crate::runtime::Engine,
    shard: u32,
) -> (std::sync::mpsc::Sender<()>, tokio::task::JoinHandle<()>) {
    let (entered_tx, entered_rx) = std::sync::mpsc::channel();
    let (release_tx, release_rx) = std::sync::mpsc::channel::<()>();
    let parked = tokio::spawn({
        let engine = engine.clone();
        async move {
            engine
                .read_shard(shard, move |_| {
                    entered_tx.send(()).unwrap();
                    let _ = release_rx.recv();
                })
                .await
                .unwrap();
        }
    });
    tokio::task::spawn_blocking(move || entered_rx.recv().unwrap())
        .await
        .unwrap();
    (release_tx, parked)
}
