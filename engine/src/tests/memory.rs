//! The idle-wallet memory budget (see `Shard` docs).

use super::Harness;
use crate::ledger::wallet::{Wallet, WALLET_BYTES_MAX};
use crate::shard::state::OwnerKey;
use crate::{WalletId, IDLE_WALLET_BYTES_BUDGET};

#[test]
fn idle_wallet_fits_the_budget() {
    let wallet = std::mem::size_of::<Wallet>();
    assert!(wallet <= WALLET_BYTES_MAX, "Wallet is {wallet} bytes");
    // Owner index slot: key + value + one hashbrown control byte, at the worst load factor (7/16).
    let slot = std::mem::size_of::<(OwnerKey, WalletId)>() + 1;
    let worst_index_bytes = slot * 16 / 7 + 1;
    assert!(
        wallet + worst_index_bytes <= IDLE_WALLET_BYTES_BUDGET,
        "{wallet} + {worst_index_bytes}"
    );
}

#[test]
fn idle_wallets_allocate_no_history() {
    let mut h = Harness::new();
    for owner in 0..1000 {
        h.create(owner, "YER");
    }
    assert!(h.shard.wallets().all(|wallet| !wallet.has_history()));
    let first = h.shard.wallets().next().unwrap().id();
    h.deposit(first, "1");
    assert!(h.shard.wallet(first).unwrap().has_history());
}
