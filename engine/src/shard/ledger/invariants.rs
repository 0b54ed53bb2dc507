//! `Shard::check_invariants`: recomputes every invariant listed on [`Shard`] from the records.
//!
//! O(size of the state); meant for tests, `walletd replay --verify` and after loading a snapshot, not
//! for the hot path.

use std::collections::BTreeMap;

use rust_decimal::Decimal;

use crate::ledger::hold::HoldStatus;
use crate::ledger::transaction::{check_chain, ChainChecker};
use crate::ledger::transfer::TransferState;
use crate::shard::state::{OwnerKey, Shard};
use crate::values::currency::Currency;
use crate::values::error::InvariantViolation;

fn add(
    sums: &mut BTreeMap<Currency, Decimal>,
    currency: Currency,
    amount: Decimal,
) -> Result<(), InvariantViolation> {
    let sum = sums.entry(currency).or_insert(Decimal::ZERO);
    *sum = sum
        .checked_add(amount)
        .ok_or(InvariantViolation::Overflow)?;
    Ok(())
}

impl Shard {
    /// Checks every invariant (list on [`Shard`]) and names the first one broken.
    pub fn check_invariants(&self) -> Result<(), InvariantViolation> {
        let mut sums: BTreeMap<Currency, Decimal> = BTreeMap::new();
        let mut transaction_count = 0usize;
        let mut hold_count = 0usize;
        let mut active_count = 0usize;
        for (position, wallet) in self.wallets.iter().enumerate() {
            let wallet_id = wallet.id();
            if self.position_of(wallet_id) != Some(position) {
                return Err(InvariantViolation::WalletCorrupt {
                    wallet_id,
                    what: "wallet is not at its id's position",
                });
            }
            // The ledger in memory is the whole chain, or (once records leave memory) a suffix of
            // it that must continue from the hash before it and end at the cached balance.
            let entries = wallet.entries();
            let counts = wallet.counts();
            let whole = counts.entries == entries.len() as u64;
            let all_in_memory = whole
                && counts.transactions == wallet.transactions().len() as u64
                && counts.holds == wallet.holds().len() as u64;
            if !self.recall.evicts() && !all_in_memory {
                return Err(InvariantViolation::WalletCorrupt {
                    wallet_id,
                    what: "record counts differ from the records",
                });
            }
            if counts.entries < entries.len() as u64
                || counts.transactions < wallet.transactions().len() as u64
                || counts.holds < wallet.holds().len() as u64
            {
                return Err(InvariantViolation::WalletCorrupt {
                    wallet_id,
                    what: "more records in memory than the wallet ever had",
                });
            }
            let check = if whole {
                check_chain(wallet_id, wallet.currency(), entries)
            } else {
                let start = match entries.first() {
                    Some(first) => first
                        .balance_after
                        .checked_sub(first.signed_amount())
                        .ok_or(InvariantViolation::Overflow)?,
                    None => wallet.balance(),
                };
                let mut checker = ChainChecker::resume(
                    wallet_id,
                    wallet.currency(),
                    wallet.entries_before(),
                    start,
                );
                for entry in entries {
                    checker.feed(entry);
                }
                checker.finish()
            };
            if let Some(entry_id) = check.first_invalid_entry_id {
                return Err(if check.first_bad_hash_entry_id == Some(entry_id) {
                    InvariantViolation::BrokenChain {
                        wallet_id,
                        entry_id,
                    }
                } else {
                    InvariantViolation::BalanceAfterMismatch {
                        wallet_id,
                        entry_id,
                    }
                });
            }
            if check.last_hash != wallet.chain_head() {
                return Err(InvariantViolation::ChainHeadMismatch { wallet_id });
            }
            let ledger = check.ledger_balance.ok_or(InvariantViolation::Overflow)?;
            if ledger != wallet.balance() {
                return Err(InvariantViolation::BalanceMismatch {
                    wallet_id,
                    cached: wallet.balance(),
                    ledger,
                });
            }
            let holds = wallet
                .active_holds_sum()
                .ok_or(InvariantViolation::Overflow)?;
            if holds != wallet.held() {
                return Err(InvariantViolation::HeldMismatch {
                    wallet_id,
                    cached: wallet.held(),
                    holds,
                });
            }
            if !wallet.is_system()
                && wallet
                    .available()
                    .is_none_or(|available| available < Decimal::ZERO)
            {
                return Err(InvariantViolation::NegativeSpendable { wallet_id });
            }
            if wallet.is_system()
                && (!wallet.transactions().is_empty() || !wallet.holds().is_empty())
            {
                return Err(InvariantViolation::WalletCorrupt {
                    wallet_id,
                    what: "system account with transactions or holds",
                });
            }
            add(&mut sums, wallet.currency(), ledger)?;

            // Indexes point back at the records.
            if self.index.owners.get(&OwnerKey::of(wallet)) != Some(&wallet_id) {
                return Err(InvariantViolation::IndexMismatch("owner index"));
            }
            for transaction in wallet.transactions() {
                transaction_count += 1;
                if self.index.transactions.get(&transaction.uuid)
                    != Some(&(wallet_id, transaction.id))
                {
                    return Err(InvariantViolation::IndexMismatch("transaction uuid index"));
                }
            }
            for hold in wallet.holds() {
                hold_count += 1;
                if self.index.holds.get(&hold.uuid) != Some(&(wallet_id, hold.id)) {
                    return Err(InvariantViolation::IndexMismatch("hold uuid index"));
                }
                if hold.status == HoldStatus::Active {
                    active_count += 1;
                    if self.index.hold_expiry.get(&(hold.expires_at_ms, hold.id))
                        != Some(&wallet_id)
                    {
                        return Err(InvariantViolation::IndexMismatch("hold expiry queue"));
                    }
                }
            }
        }
        if self.index.owners.len() != self.wallets.len()
            || self.index.transactions.len() != transaction_count
            || self.index.holds.len() != hold_count
            || self.index.hold_expiry.len() != active_count
        {
            return Err(InvariantViolation::IndexMismatch(
                "index holds records that do not exist",
            ));
        }
        for (currency, sum) in sums {
            if !sum.is_zero() {
                return Err(InvariantViolation::CurrencyNotBalanced { currency, sum });
            }
        }
        self.check_in_transit()?;
        self.check_commerce()
    }

    /// Invariant 5: in-transit = sent − received by finished moves (the totals kept in apply) +
    /// outgoing moves still `reserved` (in memory, always), per currency, for transfers and
    /// payment reservations together. The finished records in memory are checked against the
    /// totals: equal on a shard that keeps them all, within them on one whose records leave.
    fn check_in_transit(&self) -> Result<(), InvariantViolation> {
        let mut expected: BTreeMap<Currency, Decimal> = BTreeMap::new();
        for (currency, totals) in &self.transit {
            add(&mut expected, *currency, totals.sent)?;
            add(&mut expected, *currency, -totals.received)?;
        }
        for transfer in self.transfers_out.values() {
            if transfer.state == TransferState::Reserved {
                add(&mut expected, transfer.currency, transfer.amount)?;
            }
        }
        for reservation in self.commerce.reservations.values() {
            if reservation.state == TransferState::Reserved {
                add(&mut expected, reservation.currency, reservation.amount)?;
            }
        }
        let finished = self
            .transit_from_records()
            .ok_or(InvariantViolation::Overflow)?;
        for currency in finished.keys().chain(self.transit.keys()) {
            let kept = self.transit.get(currency).copied().unwrap_or_default();
            let found = finished.get(currency).copied().unwrap_or_default();
            let fits = if self.recall.evicts() {
                found.sent <= kept.sent && found.received <= kept.received
            } else {
                found == kept
            };
            if !fits {
                return Err(InvariantViolation::TransitTotals {
                    currency: *currency,
                    sent: kept.sent,
                    received: kept.received,
                    found_sent: found.sent,
                    found_received: found.received,
                });
            }
        }
        let actual = self.in_transit_by_currency();
        for currency in expected.keys().chain(actual.keys()) {
            let want = expected.get(currency).copied().unwrap_or(Decimal::ZERO);
            let have = actual.get(currency).copied().unwrap_or(Decimal::ZERO);
            if want != have {
                return Err(InvariantViolation::InTransitMismatch {
                    currency: *currency,
                    balance: have,
                    expected: want,
                });
            }
        }
        Ok(())
    }
}
