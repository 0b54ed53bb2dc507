//! Memory holds hot state only (ARCHITECTURE.md, invariant 10; issue 14, item 9): a counting
//! global allocator shows a running shard's live heap after 200,000 transfers among 1,000
//! wallets within 1 MiB of its heap after 20,000, once the filed records have left memory.
//!
//! Before eviction every transfer kept ~2.4 KB (its two transactions and two entries), so the
//! 180,000 transfers in between grew the heap by ~430 MB; this test fails on any per-transfer
//! residue above ~6 bytes. It is the only test in its binary, so nothing else allocates meanwhile.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::alloc::{GlobalAlloc, Layout, System};
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;

use engine::commerce::payment::{Payment, PaymentLink, QrCode};
use engine::commerce::payout::{Payout, Settlement};
use engine::ledger::hold::Hold;
use engine::ledger::transaction::{Hash, LedgerEntry, Transaction};
use engine::ledger::wallet::{OwnerType, WalletType};
use engine::shard::cold::{ColdHistory, ColdResult, Recall};
use engine::shard::command::{CreateWallet, Details, MoneyMove, TransferArgs};
use engine::{
    Command, Context, Currency, HoldId, Outcome, PayoutId, Shard, TransactionId, Uuid, WalletId,
};
use engine::{EntryId, SettlementId};
use rust_decimal::Decimal;

/// Bytes allocated and not yet freed, by everything in this process.
static LIVE: AtomicI64 = AtomicI64::new(0);

struct Counting;

// SAFETY: forwards every call to the system allocator unchanged and only counts sizes.
#[allow(unsafe_code)]
unsafe impl GlobalAlloc for Counting {
    unsafe fn alloc(&self, layout: Layout) -> *mut u8 {
        LIVE.fetch_add(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: the caller upholds `GlobalAlloc::alloc`'s contract, passed on as is.
        unsafe { System.alloc(layout) }
    }
    unsafe fn dealloc(&self, ptr: *mut u8, layout: Layout) {
        LIVE.fetch_sub(layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.dealloc(ptr, layout) }
    }
    unsafe fn realloc(&self, ptr: *mut u8, layout: Layout, new_size: usize) -> *mut u8 {
        LIVE.fetch_add(new_size as i64 - layout.size() as i64, Ordering::Relaxed);
        // SAFETY: as above.
        unsafe { System.realloc(ptr, layout, new_size) }
    }
}

#[global_allocator]
static GLOBAL: Counting = Counting;

/// A store that filed everything and is never asked: transfers read no filed record.
struct FiledElsewhere;

impl ColdHistory for FiledElsewhere {
    fn transaction(&self, _: WalletId, _: TransactionId) -> ColdResult<Option<Transaction>> {
        Err("a transfer read a filed transaction".into())
    }
    fn entry(&self, _: WalletId, _: EntryId) -> ColdResult<Option<LedgerEntry>> {
        Err("a transfer read a filed entry".into())
    }
    fn hold(&self, _: WalletId, _: HoldId) -> ColdResult<Option<Hold>> {
        Err("a transfer read a filed hold".into())
    }
    fn locate_transaction(&self, _: Uuid) -> ColdResult<Option<(WalletId, TransactionId)>> {
        Err("a transfer located a transaction".into())
    }
    fn locate_hold(&self, _: Uuid) -> ColdResult<Option<(WalletId, HoldId)>> {
        Err("a transfer located a hold".into())
    }
    fn for_each_transaction(
        &self,
        _: WalletId,
        _: &mut dyn FnMut(&Transaction) -> bool,
    ) -> ColdResult<()> {
        Err("a transfer listed transactions".into())
    }
    fn for_each_transaction_within(
        &self,
        _: WalletId,
        _: (i64, i64),
        _: &mut dyn FnMut(&Transaction),
    ) -> ColdResult<()> {
        Err("a transfer listed transactions by date".into())
    }
    fn for_each_entry_after(
        &self,
        _: WalletId,
        _: Option<EntryId>,
        _: &mut dyn FnMut(&Hash, &LedgerEntry) -> bool,
    ) -> ColdResult<()> {
        Err("a transfer listed entries".into())
    }
    fn moved(
        &self,
        _: engine::shard::moves::MoveKey,
    ) -> ColdResult<Option<engine::shard::moves::MoveRecord>> {
        Err("a transfer read a cross-shard move".into())
    }
    fn open_charge(&self, _: Uuid) -> ColdResult<Option<Uuid>> {
        Err("a transfer read a charge".into())
    }
    fn payment(&self, _: Uuid) -> ColdResult<Option<Payment>> {
        Err("a transfer read a payment".into())
    }
    fn for_each_payment(&self, _: WalletId, _: &mut dyn FnMut(&Payment) -> bool) -> ColdResult<()> {
        Err("a transfer listed payments".into())
    }
    fn for_each_completed_payment(
        &self,
        _: i64,
        _: i64,
        _: &mut dyn FnMut(&Payment) -> bool,
    ) -> ColdResult<()> {
        Err("a transfer listed payments".into())
    }
    fn payout(&self, _: PayoutId) -> ColdResult<Option<Payout>> {
        Err("a transfer read a payout".into())
    }
    fn for_each_payout(&self, _: WalletId, _: &mut dyn FnMut(&Payout) -> bool) -> ColdResult<()> {
        Err("a transfer listed payouts".into())
    }
    fn settlement(&self, _: SettlementId) -> ColdResult<Option<Settlement>> {
        Err("a transfer read a settlement".into())
    }
    fn settled_by(&self, _: TransactionId) -> ColdResult<Option<SettlementId>> {
        Err("a transfer read a settlement claim".into())
    }
    fn payment_link(&self, _: Uuid) -> ColdResult<Option<PaymentLink>> {
        Err("a transfer read a payment link".into())
    }
    fn qr(&self, _: Uuid) -> ColdResult<Option<QrCode>> {
        Err("a transfer read a QR payload".into())
    }
}

const WALLETS: u64 = 1_000;
/// Commands between evictions, as the actor's 50 ms tick sees them at ~20k commands/s.
const EVICT_EVERY: u64 = 1_000;

fn ctx(step: u64) -> Context {
    let mut entropy = [0u8; 32];
    entropy[..8].copy_from_slice(&step.to_le_bytes());
    Context::new(1_700_000_000_000 + i64::try_from(step).unwrap(), entropy)
}

fn run(shard: &mut Shard, step: &mut u64, command: &Command) -> Outcome {
    *step += 1;
    let (_, outcome) = shard.execute(command, &ctx(*step)).unwrap();
    if step.is_multiple_of(EVICT_EVERY) {
        // Everything executed so far is filed: the indexer keeps up.
        shard.evict_filed(shard.command_stamp());
    }
    outcome
}

#[test]
fn a_shards_heap_after_200k_transfers_is_within_1_mib_of_its_heap_after_20k() {
    let yer = Currency::from_code("YER").unwrap();
    let mut shard = Shard::new(0, 1).unwrap();
    shard.set_recall(Recall::Store(Arc::new(FiledElsewhere)));
    let mut step = 0;
    let mut wallets = Vec::new();
    for owner_id in 0..WALLETS {
        let create = Command::CreateWallet(CreateWallet {
            owner_type: OwnerType::Customer,
            owner_id,
            currency: yer,
            wallet_type: WalletType::Primary,
            business_id: 1,
            branch_id: 0,
            meta: None,
        });
        let Outcome::Wallet(wallet) = run(&mut shard, &mut step, &create) else {
            panic!("not a wallet")
        };
        let fund = Command::Deposit(MoneyMove {
            wallet_id: wallet.id,
            amount: Decimal::from(1_000_000),
            currency: None,
            details: Details::default(),
        });
        run(&mut shard, &mut step, &fund);
        wallets.push(wallet.id);
    }
    let mut transfers = 0u64;
    let mut transfer_until = |shard: &mut Shard, step: &mut u64, until: u64| {
        while transfers < until {
            let source = wallets[(transfers % WALLETS) as usize];
            let target = wallets[((transfers * 7 + 1) % WALLETS) as usize];
            let command = Command::Transfer(TransferArgs {
                source_wallet_id: source,
                target_wallet_id: target,
                amount: Decimal::new(1 + i64::try_from(transfers % 500).unwrap(), 2),
                currency: yer,
                details: Details::default(),
            });
            match run(shard, step, &command) {
                Outcome::Transaction(_) => {}
                other => panic!("transfer {transfers}: {other:?}"),
            }
            transfers += 1;
        }
        shard.evict_filed(shard.command_stamp());
    };
    transfer_until(&mut shard, &mut step, 20_000);
    let after_20k = LIVE.load(Ordering::Relaxed);
    transfer_until(&mut shard, &mut step, 200_000);
    let after_200k = LIVE.load(Ordering::Relaxed);
    let grown = after_200k - after_20k;
    assert!(
        grown <= 1 << 20,
        "the heap grew {grown} bytes over 180,000 transfers ({} per transfer): history is kept in memory",
        grown / 180_000
    );
    // And it is the filing that frees it: the shard still counts every record.
    let counted: u64 = shard.wallets().map(|w| w.counts().transactions).sum();
    assert_eq!(counted, WALLETS + 2 * 200_000);
    assert_eq!(shard.records_in_memory(), 0);
}
