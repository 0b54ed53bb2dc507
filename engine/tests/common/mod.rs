//! Helpers the engine's integration tests share (`mod common;` in each file that uses them):
//! an engine on a temporary directory, wallets, amounts and payments.
#![allow(dead_code, clippy::unwrap_used)]

use std::sync::Arc;

use engine::commerce::payment::{PaymentProvider, PaymentStatus};
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::runtime::clock::SeededClock;
use engine::runtime::{Engine, EngineConfig, Renderer};
use engine::shard::command::{CreateWallet, InitiatePayment};
use engine::values::fee::FeeRule;
use engine::{Command, Currency, Outcome, Uuid, WalletId};
use rust_decimal::Decimal;

/// `shards` shards, 1 MiB segments, no automatic snapshot.
pub fn config(dir: &std::path::Path, shards: u32) -> EngineConfig {
    let mut config = EngineConfig::new(dir);
    config.shard_count = shards;
    config.wal.segment_bytes = 1 << 20;
    config.wal.record_bytes_max = 256 * 1024;
    config.snapshot_every_records = 0;
    config
}

/// The engine of [`config`] on a seeded clock.
pub fn open(dir: &std::path::Path, shards: u32, seed: u64, renderer: Arc<dyn Renderer>) -> Engine {
    let clock = Arc::new(SeededClock::new(seed, 1_700_000_000_000));
    Engine::open(config(dir, shards), clock, renderer)
        .unwrap()
        .0
}

pub fn yer() -> Currency {
    Currency::from_code("YER").unwrap()
}

pub fn amount(text: &str) -> Decimal {
    Decimal::from_str_exact(text).unwrap()
}

/// A primary YER wallet of `owner_type` `owner_id` in `business`.
pub async fn wallet(
    engine: &Engine,
    owner_type: OwnerType,
    owner_id: u64,
    business: u64,
) -> WalletId {
    let command = Command::CreateWallet(CreateWallet {
        owner_type,
        owner_id,
        currency: yer(),
        wallet_type: WalletType::Primary,
        business_id: business,
        branch_id: 0,
        meta: None,
    });
    match engine.execute(command).await.unwrap() {
        Outcome::Wallet(wallet) => wallet.id,
        other => panic!("{other:?}"),
    }
}

/// A pending wallet payment of `value` from `payer` to merchant 7 under `fee`.
pub async fn initiate(
    engine: &Engine,
    merchant: WalletId,
    payer: WalletId,
    value: &str,
    fee: FeeRule,
) -> Uuid {
    let command = Command::InitiatePayment(InitiatePayment {
        merchant_id: 7,
        merchant_wallet_id: merchant,
        payer_wallet_id: payer,
        amount: amount(value),
        currency: yer(),
        fee,
        provider: PaymentProvider::Wallet,
        description: None,
        metadata: None,
        idempotency_key: None,
        payment_link_uuid: None,
    });
    match engine.execute(command).await.unwrap() {
        Outcome::Payment(payment) => {
            assert_eq!(payment.status, PaymentStatus::Pending);
            payment.uuid
        }
        other => panic!("{other:?}"),
    }
}
