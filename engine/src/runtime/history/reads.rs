//! The engine's history reads: a wallet's transactions, ledger entries and holds, served from the
//! store once the indexer has filed everything the caller could have seen.

use std::collections::BTreeMap;
use std::sync::Arc;

use rust_decimal::Decimal;

use crate::commerce::view::{PayoutView, SettlementView};
use crate::ledger::transfer::TransitTotals;
use crate::shard::commerce::invariants::{check_cross_shard_pairs, CrossShardLegs};
use crate::shard::commerce::query::{PayoutFilter, SettlementFilter};
use crate::shard::moves::Leg;
use crate::values::currency::Currency;

use super::pages::{starts_block, starts_fine};
use super::{unavailable, History, HistoryStore, StoreError, StorePage};
use crate::ledger::transaction::{entry_hash, ChainChecker, Hash};
use crate::ledger::view::{EntryView, HoldView, Holder, TransactionView};
use crate::runtime::config::EngineError;
use crate::runtime::engine::Engine;
use crate::shard::command::{Command, Outcome, Page, Paged};
use crate::shard::state::Shard;
use crate::values::error::Rejection;
use crate::values::ids::WalletId;

impl Engine {
    /// History on disk and the indexer's progress.
    #[must_use]
    pub fn history(&self) -> &History {
        &self.inner.history
    }

    /// The wallet's unchanging facts, after waiting until the store holds every record a caller
    /// could have seen of the wallet's history when it asked. `Ok(Err(_))`: no such wallet.
    ///
    /// Only the records whose events name the wallet (its creation, changes to its history)
    /// bear on what this read shows; the shard answers the LSN of the newest of them with the
    /// read ([`Engine::holder_for_history`]), and the store holds only durable records, so
    /// waiting for the indexer to reach it is also the durability wait. Waiting for the durable
    /// LSN instead, plus the shard's own durability ticket, made a read of a quiet wallet wait
    /// for the load's group commit and the indexer's whole backlog (statement_page p99
    /// 169-244 ms); a read right after a write to the wallet still waits for that write.
    async fn holder_caught_up(
        &self,
        wallet_id: WalletId,
    ) -> Result<Result<Holder, Rejection>, EngineError> {
        let (holder, bound) = self.holder_for_history(wallet_id).await?;
        if holder.is_ok() {
            self.inner.history.caught_up(bound).await?;
        }
        Ok(holder)
    }

    /// One page of a wallet's history from the store, each record shown with the wallet's facts.
    async fn store_page<T, V>(
        &self,
        wallet_id: WalletId,
        read: impl FnOnce(&HistoryStore) -> Result<StorePage<T>, StoreError>,
        view: impl Fn(Holder, &T) -> V,
    ) -> Result<Result<Paged<V>, Rejection>, EngineError> {
        let holder = match self.holder_caught_up(wallet_id).await? {
            Ok(holder) => holder,
            Err(rejection) => return Ok(Err(rejection)),
        };
        let found = read(self.inner.history.store()).map_err(unavailable)?;
        Ok(Ok(Paged {
            records: found
                .records
                .iter()
                .map(|record| view(holder, record))
                .collect(),
            total: found.total,
        }))
    }

    /// A wallet's transactions, newest first.
    pub async fn transactions_page(
        &self,
        wallet_id: WalletId,
        page: Page,
    ) -> Result<Result<Paged<TransactionView>, Rejection>, EngineError> {
        let (offset, per_page) = (page.offset() as u64, u64::from(page.per_page()));
        self.store_page(
            wallet_id,
            |store| store.transactions_page(wallet_id, offset, per_page),
            TransactionView::of,
        )
        .await
    }

    /// Every transaction of the merchant's wallets (payments in, refunds, payouts, settlements,
    /// deposits, ...), newest first: waits for the latest history bound of those wallets, then
    /// reads the store (`HistoryStore::merged_transactions_page`), so a page costs O(offset +
    /// page) keys and no time on the shard's thread.
    pub async fn merchant_transactions_page(
        &self,
        merchant_id: u64,
        page: Page,
    ) -> Result<Paged<TransactionView>, EngineError> {
        let (holders, bound) = self.merchant_holders_for_history(merchant_id).await?;
        self.inner.history.caught_up(bound).await?;
        let wallets: Vec<WalletId> = holders.iter().map(|holder| holder.id).collect();
        let (offset, per_page) = (page.offset() as u64, u64::from(page.per_page()));
        let found = self
            .inner
            .history
            .store()
            .merged_transactions_page(&wallets, offset, per_page)
            .map_err(unavailable)?;
        let mut records = Vec::with_capacity(found.records.len());
        for (index, transaction) in &found.records {
            let holder = holders.get(*index).copied().ok_or_else(|| {
                EngineError::Unavailable("the store answered an unknown wallet".into())
            })?;
            records.push(TransactionView::of(holder, transaction));
        }
        Ok(Paged {
            records,
            total: found.total,
        })
    }

    /// Payouts that `filter` accepts, of every shard, newest first (by creation time, then id):
    /// read from the store off the shards' threads once the indexer covers the durable LSN
    /// (everything a caller could have seen), one wallet's through `wallet_payouts`, otherwise
    /// every filed payout. Before, each shard visited the store range of every wallet of the
    /// business on its own thread, stopping every command of the shard for as long.
    pub async fn payouts_page(
        &self,
        filter: PayoutFilter,
        page: Page,
    ) -> Result<Paged<PayoutView>, EngineError> {
        self.filed_page(
            "payout",
            move |store| store.payouts_where(filter.wallet_id, &|payout| filter.accepts(payout)),
            |payout| (payout.created.at_ms, payout.id.0),
            |store, payout| PayoutView::of(store, payout),
            page,
        )
        .await
    }

    /// Settlements that `filter` accepts, of every shard, newest first (by creation time, then
    /// id), read as [`Engine::payouts_page`] reads payouts. Final settlements leave the shards'
    /// memory once filed, so the store is the one place that holds them all.
    pub async fn settlements_page(
        &self,
        filter: SettlementFilter,
        page: Page,
    ) -> Result<Paged<SettlementView>, EngineError> {
        self.filed_page(
            "settlement",
            move |store| {
                store.settlements_where(filter.wallet_id, &|settlement| filter.accepts(settlement))
            },
            |settlement| (settlement.created.at_ms, settlement.id.0),
            |store, settlement| SettlementView::of(store, settlement),
            page,
        )
        .await
    }

    /// Page `page` of the records `matching` reads from the store, newest first by `newest`
    /// (creation time, id), each shown through `view`: waits until the indexer covers the
    /// durable LSN, then reads on a blocking thread, not a shard's.
    async fn filed_page<T, V>(
        &self,
        what: &'static str,
        matching: impl FnOnce(&HistoryStore) -> Result<Vec<T>, StoreError> + Send + 'static,
        newest: fn(&T) -> (i64, u64),
        view: fn(&HistoryStore, &T) -> V,
        page: Page,
    ) -> Result<Paged<V>, EngineError>
    where
        T: Send + 'static,
        V: Send + 'static,
    {
        self.inner
            .history
            .caught_up(self.inner.wal.durable_lsn())
            .await?;
        let store = self.inner.store.clone();
        tokio::task::spawn_blocking(move || {
            let mut matching = matching(&store)?;
            matching.sort_unstable_by_key(|record| std::cmp::Reverse(newest(record)));
            let records = matching
                .iter()
                .skip(page.offset())
                .take(page.per_page() as usize)
                .map(|record| view(&store, record))
                .collect();
            Ok(Paged {
                records,
                total: matching.len() as u64,
            })
        })
        .await
        .map_err(|error| EngineError::Unavailable(format!("{what} list read: {error}")))?
        .map_err(unavailable)
    }

    /// A wallet's ledger (statement), newest first, optionally only entries created within
    /// `from_ms..=to_ms`.
    pub async fn ledger_page(
        &self,
        wallet_id: WalletId,
        page: Page,
        from_ms: Option<i64>,
        to_ms: Option<i64>,
    ) -> Result<Result<Paged<EntryView>, Rejection>, EngineError> {
        let (offset, per_page) = (page.offset() as u64, u64::from(page.per_page()));
        self.store_page(
            wallet_id,
            |store| store.entries_page(wallet_id, offset, per_page, from_ms, to_ms),
            |holder, (prev_hash, entry)| EntryView::of(holder, entry, *prev_hash),
        )
        .await
    }

    /// Verifies a wallet's whole hash chain and balance, and records a valid result (the
    /// `VerifyIntegrity` command). The entries the history store holds are checked here, off the
    /// shard's thread, after the indexer has filed everything durable; the shard then checks
    /// only the entries after them (filed since, or still in memory) and records the result. A
    /// wallet with 1M entries would otherwise stop its shard, and every wallet on it, for the
    /// whole scan.
    pub async fn verify_integrity(&self, wallet_id: WalletId) -> Result<Outcome, EngineError> {
        let currency = self
            .read_wallet(wallet_id, move |s| {
                s.find_wallet(wallet_id).map(|wallet| wallet.currency())
            })
            .await?
            .map_err(EngineError::Rejected)?;
        self.inner
            .history
            .caught_up(self.inner.wal.durable_lsn())
            .await?;
        let store = self.inner.store.clone();
        let check = move || {
            let mut checker = ChainChecker::new(wallet_id, currency);
            store
                .for_each_entry_after(wallet_id, None, &mut |(_, entry)| {
                    checker.feed(entry);
                    true
                })
                .map(|()| checker)
        };
        let filed = match tokio::runtime::Handle::try_current() {
            Ok(runtime) => runtime.spawn_blocking(check).await.map_err(|error| {
                EngineError::Unavailable(format!("the integrity check failed: {error}"))
            })?,
            Err(_) => check(),
        }
        .map_err(unavailable)?;
        self.execute(Command::VerifyIntegrity {
            wallet_id,
            filed: Some(Box::new(filed)),
        })
        .await
    }

    /// A wallet's holds in every state, newest first.
    pub async fn holds_page(
        &self,
        wallet_id: WalletId,
        page: Page,
    ) -> Result<Result<Paged<HoldView>, Rejection>, EngineError> {
        let (offset, per_page) = (page.offset() as u64, u64::from(page.per_page()));
        self.store_page(
            wallet_id,
            |store| store.holds_page(wallet_id, offset, per_page),
            HoldView::of,
        )
        .await
    }

    /// `replay --verify`: the store holds exactly the history the shards hold (every transaction,
    /// entry with the hash before it, and hold of every wallet, and the counts; every commerce
    /// record in memory; the executed settlements' claims), once the indexer has filed
    /// everything. `Ok(Err(_))` names the first difference; `Ok(Ok(n))` is the
    /// number of records compared.
    pub async fn verify_history(&self) -> Result<Result<u64, String>, EngineError> {
        self.inner
            .history
            .caught_up(self.inner.wal.last_lsn())
            .await?;
        let store = self.inner.store.clone();
        let verdicts = self
            .read_all(move |shard| compare_shard(shard, &store))
            .await?;
        let mut compared = 0;
        for verdict in verdicts {
            match verdict {
                Ok(count) => compared += count,
                Err(difference) => return Ok(Err(difference)),
            }
        }
        let claims = self
            .inner
            .store
            .verify_settled_items()
            .map_err(unavailable)?;
        match claims {
            Ok(count) => compared += count,
            Err(difference) => return Ok(Err(difference)),
        }
        match self.verify_moves().await? {
            Ok(count) => Ok(Ok(compared + count)),
            Err(difference) => Ok(Err(difference)),
        }
    }

    /// `replay --verify`'s part for cross-shard moves, once everything is filed: every move in
    /// memory equals its filed version; every filed move pairs up across shards (no credit
    /// without its reservation, no finalized reservation without its credit, the same amount);
    /// each shard's in-transit totals are the sums of its filed finished moves; and with no move
    /// in flight the in-transit accounts of all shards net to zero per currency.
    async fn verify_moves(&self) -> Result<Result<u64, String>, EngineError> {
        let store = self.inner.store.clone();
        let shown = self
            .read_all(move |shard| {
                let mut differs = None;
                for record in shard.move_records() {
                    match store.moved(record.key()) {
                        Ok(Some(filed)) if filed == record => {}
                        Ok(_) => {
                            differs = Some(format!("{:?} differs from the store", record.key()))
                        }
                        Err(e) => differs = Some(e.to_string()),
                    }
                }
                (
                    differs,
                    shard.transit_totals().clone(),
                    shard.cross_shard_legs(),
                    shard.reserved_outgoing_count() + shard.pending_payment_reservations().len(),
                    shard.in_transit_by_currency(),
                )
            })
            .await?;
        let count = self.shard_count() as usize;
        let mut totals: Vec<BTreeMap<Currency, TransitTotals>> = vec![BTreeMap::new(); count];
        let mut legs = CrossShardLegs::default();
        let mut failed = None;
        let filed = self.inner.store.for_each_move(&mut |record| {
            match record.leg() {
                Some(Leg::Sent(state, amount)) => {
                    legs.sent.push((record.key().uuid(), state, amount));
                }
                Some(Leg::Received(amount)) => {
                    legs.received.push((record.key().uuid(), amount));
                }
                None => {}
            }
            let Some((wallet, currency, amount, sent)) = record.counted() else {
                return;
            };
            let Some(slot) = totals.get_mut(self.shard_of_wallet(wallet) as usize) else {
                failed = Some(format!("{:?} names a wallet of no shard", record.key()));
                return;
            };
            let entry = slot.entry(currency).or_default();
            let total = if sent {
                &mut entry.sent
            } else {
                &mut entry.received
            };
            match total.checked_add(amount) {
                Some(sum) => *total = sum,
                None => failed = Some("in-transit totals overflow".into()),
            }
        });
        let filed = match filed {
            Ok(filed) => filed,
            Err(error) => return Ok(Err(error.to_string())),
        };
        if let Some(failed) = failed {
            return Ok(Err(failed));
        }
        // The shards' in-flight moves are filed too (the store caught up), so the store's legs
        // are all of them.
        let mut nets: BTreeMap<Currency, Decimal> = BTreeMap::new();
        let mut pending = 0;
        for (index, (differs, kept, _, in_flight, in_transit)) in shown.iter().enumerate() {
            if let Some(differs) = differs {
                return Ok(Err(format!("shard {index}: {differs}")));
            }
            let filed_totals = totals.get(index).cloned().unwrap_or_default();
            if *kept != filed_totals {
                return Ok(Err(format!(
                    "shard {index}: in-transit totals {kept:?} but its filed moves sum to {filed_totals:?}"
                )));
            }
            pending += in_flight;
            for (currency, balance) in in_transit {
                *nets.entry(*currency).or_default() += *balance;
            }
        }
        if let Err(broken) = check_cross_shard_pairs(std::slice::from_ref(&legs)) {
            return Ok(Err(format!("history store: {broken}")));
        }
        if pending == 0 {
            if let Some((currency, net)) = nets.iter().find(|(_, net)| !net.is_zero()) {
                return Ok(Err(format!(
                    "the in-transit accounts in {} net to {net} across shards with no move in flight",
                    currency.code()
                )));
            }
        }
        Ok(Ok(filed))
    }
}

/// Compares one shard's hot state with the store: per wallet the record counts, the chain (every
/// filed entry follows the one before it, and the last is the wallet's chain head and balance),
/// and every record still in memory (payments, payouts, settlements, payment links and QR
/// payloads included) against its filed version, and the shard's uuid key with the one the
/// indexer filed (it decides which uuids need no index entry).
pub(super) fn compare_shard(shard: &Shard, store: &Arc<HistoryStore>) -> Result<u64, String> {
    let mut compared = 0u64;
    let filed_key = store
        .uuid_key(shard.shard_index())
        .map_err(|e| format!("shard {}: {e}", shard.shard_index()))?;
    if filed_key != shard.uuid_key {
        return Err(format!(
            "shard {}: the store's uuid key is not the shard's ({} filed, {} in the shard)",
            shard.shard_index(),
            if filed_key.is_some() { "one" } else { "none" },
            if shard.uuid_key.is_some() {
                "one"
            } else {
                "none"
            },
        ));
    }
    for wallet in shard.wallets() {
        let id = wallet.id();
        let failed = |what: &str| format!("wallet {}: {what}", id.0);
        let counts = store.counts(id).map_err(|e| failed(&e.to_string()))?;
        let held = wallet.counts();
        if (counts.transactions, counts.entries, counts.holds)
            != (held.transactions, held.entries, held.holds)
        {
            return Err(failed(&format!(
                "the store counts {counts:?}, the shard counts {held:?}"
            )));
        }
        let gaps = store
            .directory_gaps(id, counts)
            .map_err(|e| failed(&e.to_string()))?;
        if !gaps.is_empty() {
            return Err(failed(&format!(
                "the store's page directory lacks blocks of its {}",
                gaps.join(" and ")
            )));
        }
        // The entries the date index holds are exactly those before the wallet's first entry
        // at the posting floor, and from there on the entries are in time order: what a read
        // with `from`/`to` relies on (`super::dated`).
        let (ordered_from, indexed) = store.date_parts(id).map_err(|e| failed(&e.to_string()))?;
        if indexed != ordered_from {
            return Err(failed(&format!(
                "the date index holds {indexed} of its entries, but {ordered_from} are before \
                 its first entry at the posting floor"
            )));
        }
        let mut prev = Hash::ZERO;
        let mut balance = None;
        let mut broken = None;
        let mut ordinal = 0u64;
        let mut latest = i64::MIN;
        let mut starts = Vec::new();
        let currency = wallet.currency;
        store
            .for_each_entry(id, &mut |(stored_prev, stored)| {
                // Each entry follows the one before it, and its hash is recomputed from its
                // fields: a changed amount or text breaks the chain here.
                if broken.is_none() {
                    if *stored_prev != prev {
                        broken = Some((stored.id, "does not follow the entry before it"));
                    } else if entry_hash(&prev, id, currency, stored) != stored.hash {
                        broken = Some((stored.id, "does not hash to its stored hash"));
                    } else if ordinal >= ordered_from && stored.created_at_ms < latest {
                        broken = Some((stored.id, "is earlier than the entry before it"));
                    }
                }
                if ordinal >= ordered_from {
                    latest = latest.max(stored.created_at_ms);
                }
                if starts_block(ordinal) || starts_fine(ordinal) {
                    starts.push((ordinal, stored.id.0));
                }
                ordinal += 1;
                prev = stored.hash;
                balance = Some(stored.balance_after);
            })
            .map_err(|e| failed(&e.to_string()))?;
        if let Some((entry, why)) = broken {
            return Err(failed(&format!("entry {} {why} in the store", entry.0)));
        }
        // The directory keys a page or a period is found through name the right entries.
        if let Some(wrong) = store
            .entry_directory_disagreement(id, &starts)
            .map_err(|e| failed(&e.to_string()))?
        {
            return Err(failed(&wrong));
        }
        if prev != wallet.chain_head() {
            return Err(failed(
                "the store's chain does not end at the wallet's chain head",
            ));
        }
        if balance.is_some_and(|balance| balance != wallet.balance()) {
            return Err(failed(
                "the store's last entry disagrees with the wallet's balance",
            ));
        }
        for entry in wallet.entries() {
            let stored = store
                .entry(id, entry.id)
                .map_err(|e| failed(&e.to_string()))?;
            if stored.as_ref().map(|(_, stored)| stored) != Some(entry) {
                return Err(failed(&format!(
                    "entry {} differs from the store",
                    entry.id.0
                )));
            }
        }
        for transaction in wallet.transactions() {
            let stored = store
                .transaction(id, transaction.id)
                .map_err(|e| failed(&e.to_string()))?;
            if stored.as_ref() != Some(transaction) {
                return Err(failed(&format!(
                    "transaction {} differs from the store",
                    transaction.id.0
                )));
            }
        }
        for hold in wallet.holds() {
            let stored = store
                .hold(id, hold.id)
                .map_err(|e| failed(&e.to_string()))?;
            if stored.as_ref() != Some(hold) {
                return Err(failed(&format!(
                    "hold {} differs from the store",
                    hold.id.0
                )));
            }
        }
        compared += held.transactions + held.entries + held.holds;
    }
    for payment in shard.commerce.payments.values() {
        let stored = store
            .payment(payment.uuid)
            .map_err(|e| format!("payment {}: {e}", payment.uuid))?;
        if stored.as_ref() != Some(payment) {
            return Err(format!("payment {} differs from the store", payment.uuid));
        }
        compared += 1;
    }
    for payout in shard.commerce.payouts.values() {
        let stored = store
            .payout(payout.id)
            .map_err(|e| format!("payout {}: {e}", payout.id.0))?;
        if stored.as_ref() != Some(payout) {
            return Err(format!("payout {} differs from the store", payout.id.0));
        }
        compared += 1;
    }
    for settlement in shard.commerce.settlements.values() {
        let id = settlement.id.0;
        let stored = store
            .settlement(settlement.id)
            .map_err(|e| format!("settlement {id}: {e}"))?;
        if stored.as_ref() != Some(settlement) {
            return Err(format!("settlement {id} differs from the store"));
        }
        compared += 1;
    }
    for link in shard.commerce.links.values() {
        let stored = store
            .payment_link(link.uuid)
            .map_err(|e| format!("payment link {}: {e}", link.uuid))?;
        if stored.as_ref() != Some(link) {
            return Err(format!("payment link {} differs from the store", link.uuid));
        }
        compared += 1;
    }
    for qr in shard.commerce.qrs.values() {
        let stored = store
            .qr(qr.uuid)
            .map_err(|e| format!("qr {}: {e}", qr.uuid))?;
        if stored.as_ref() != Some(qr) {
            return Err(format!("qr {} differs from the store", qr.uuid));
        }
        compared += 1;
    }
    Ok(compared)
}

#[cfg(test)]
mod tests {
    use std::sync::Arc;

    use super::compare_shard;
    use crate::runtime::history::filing::{file_batch, ChainHeads, Filed};
    use crate::runtime::history::HistoryStore;
    use crate::tests::Harness;

    #[test]
    fn verify_names_history_the_store_lacks_or_holds_differently() {
        let dir = tempfile::tempdir().unwrap();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut harness = Harness::new();
        let a = harness.create(1, "YER");
        let b = harness.create(2, "YER");
        harness.deposit(a, "10.00");
        harness.deposit(b, "5.00");
        let mut heads = ChainHeads::default();
        file_batch(&store, &[Filed::events(1, harness.log.clone())], &mut heads).unwrap();
        let first_batch = harness.log.len();
        let compared = compare_shard(&harness.shard, &store).unwrap();
        assert!(compared >= 4, "compared {compared}");

        // A record the shard holds and the store does not.
        harness.deposit(b, "1.00");
        let missing = compare_shard(&harness.shard, &store).unwrap_err();
        assert!(missing.contains(&format!("wallet {}", b.0)), "{missing}");

        // Filed, the store agrees again; a store whose copy differs is named by record.
        let newest: Vec<_> = harness.log[first_batch..].to_vec();
        file_batch(&store, &[Filed::events(2, newest)], &mut heads).unwrap();
        let _ = compare_shard(&harness.shard, &store).unwrap();
        let other = dir.path().join("other");
        let tampered = Arc::new(HistoryStore::open(&other, 1 << 20).unwrap());
        let mut events = harness.log.clone();
        for event in &mut events {
            if let crate::Event::TransactionRecorded { transaction, .. } = event {
                transaction.text.description = Some("not what happened".into());
                break;
            }
        }
        file_batch(
            &tampered,
            &[Filed::events(1, events)],
            &mut ChainHeads::default(),
        )
        .unwrap();
        let differs = compare_shard(&harness.shard, &tampered).unwrap_err();
        assert!(differs.contains("transaction"), "{differs}");

        // An entry changed in the store after its hash was computed breaks the chain there.
        let rewritten =
            Arc::new(HistoryStore::open(&dir.path().join("rewritten"), 1 << 20).unwrap());
        let mut events = harness.log.clone();
        for event in &mut events {
            if let crate::Event::EntryPosted { entry, .. } = event {
                entry.description = Some("not what happened".into());
                break;
            }
        }
        file_batch(
            &rewritten,
            &[Filed::events(1, events)],
            &mut ChainHeads::default(),
        )
        .unwrap();
        let broken = compare_shard(&harness.shard, &rewritten).unwrap_err();
        assert!(
            broken.contains("does not hash to its stored hash"),
            "{broken}"
        );
    }

    /// The indexer skips index entries by the key it filed: verify names a store whose key is
    /// not the shard's, and the indexer refuses a second, different key for a shard.
    #[test]
    fn verify_and_the_indexer_hold_the_store_to_the_shards_uuid_key() {
        use crate::values::sealed::UuidKey;
        use crate::Event;
        let dir = tempfile::tempdir().unwrap();
        let mut harness = Harness::new();
        let a = harness.create(1, "YER");
        harness.deposit(a, "10.00");
        let rekeyed: Vec<Event> = harness
            .log
            .iter()
            .cloned()
            .map(|event| match event {
                Event::UuidKeyChosen { .. } => Event::UuidKeyChosen {
                    key: UuidKey([9; 32]),
                },
                other => other,
            })
            .collect();
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        let mut heads = ChainHeads::default();
        file_batch(&store, &[Filed::events(1, rekeyed)], &mut heads).unwrap();
        let differs = compare_shard(&harness.shard, &store).unwrap_err();
        assert!(differs.contains("uuid key"), "{differs}");

        let second = Event::UuidKeyChosen {
            key: harness.shard.uuid_key.unwrap(),
        };
        let refused = file_batch(&store, &[Filed::events(2, vec![second])], &mut heads);
        assert!(refused.is_err(), "a second key for shard 0 is refused");
        assert_eq!(store.uuid_key(0).unwrap(), Some(UuidKey([9; 32])), "kept");

        let agrees = Arc::new(HistoryStore::open(&dir.path().join("same"), 1 << 20).unwrap());
        let log = harness.log.clone();
        file_batch(
            &agrees,
            &[Filed::events(1, log)],
            &mut ChainHeads::default(),
        )
        .unwrap();
        compare_shard(&harness.shard, &agrees).unwrap();
    }

    /// Verify checks what a read by date relies on: entries at the posting floor in time order,
    /// and the date index holding exactly the entries before them.
    #[test]
    fn verify_names_entries_out_of_time_order_and_a_date_index_that_disagrees() {
        let dir = tempfile::tempdir().unwrap();
        let mut harness = Harness::new();
        let a = harness.create(1, "YER");
        harness.now_ms = 10_000;
        harness.deposit(a, "10.00");
        // A shard that lost its floor (the bug this catches): the next posting is earlier.
        harness.shard.posted_at_floor_ms = i64::MIN;
        harness.now_ms = 9_000;
        harness.deposit(a, "1.00");
        let store = Arc::new(HistoryStore::open(dir.path(), 1 << 20).unwrap());
        file_batch(
            &store,
            &[Filed::events(1, harness.log.clone())],
            &mut ChainHeads::default(),
        )
        .unwrap();
        let earlier = compare_shard(&harness.shard, &store).unwrap_err();
        assert!(
            earlier.contains("earlier than the entry before it"),
            "{earlier}"
        );

        // Logged before the floor, the same entries are indexed and verify agrees; without
        // one of their date index keys it names the index.
        let indexed = Arc::new(HistoryStore::open(&dir.path().join("indexed"), 1 << 20).unwrap());
        let before = Filed::events(1, harness.log.clone()).before_floor();
        file_batch(&indexed, &[before], &mut ChainHeads::default()).unwrap();
        compare_shard(&harness.shard, &indexed).unwrap();
        indexed
            .with(|open| {
                let key = open.entry_times.iter().next().unwrap().key().unwrap();
                open.entry_times.remove(key)?;
                Ok(())
            })
            .unwrap();
        let lacks = compare_shard(&harness.shard, &indexed).unwrap_err();
        assert!(lacks.contains("the date index holds"), "{lacks}");
    }
}
