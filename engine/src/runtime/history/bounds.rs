//! What a history read of one wallet waits for, readable from any thread.
//!
//! A read of a wallet's history first waits until the indexer has filed the newest record
//! whose events changed that wallet's history (its *bound*), and no longer: a quiet wallet's
//! statement does not wait for the load's backlog (`super::reads`). Only the wallet's shard
//! logs such records, so its actor is the one writer of the wallet's bound: it notes the
//! record's LSN when the log takes the record ([`HistoryBounds::note`]), and forgets it once
//! the indexer has filed it, when there is nothing left to wait for.
//!
//! The bounds used to live on the actor's thread, and a read asked for one with a message in
//! the shard's mailbox, behind every command queued there. Under a transfer load that round
//! trip alone took 4.2 ms at p99 while its p50 was 0.04 ms, and it was the statement page's
//! whole tail (BENCHMARKS.md, "A statement page without the shard's mailbox"). Here a reader
//! looks the bound up without the shard.
//!
//! # Why a bound read here is never too low
//!
//! A caller can have seen a change to a wallet only in an answer, and every answer is sent
//! after the change's record is durable, which needs its LSN. The actor notes the LSN before
//! it hands the record's durability ticket to anyone (in [`super::super::actor`], right after
//! the log answers the LSN and before the handler returns or a gathered record's ticket is
//! resolved), so the note happens before the answer and before any read the caller makes
//! after it: the map's locks carry that order to the reader's thread. A command decided but
//! not logged yet (gathered) has no answer, so no caller can wait for it; and the wallet
//! facts such a read shows come from the engine's memory of wallet scopes, which the shard
//! fills only after logging what it had gathered (`Engine::wallet_scope`), so a wallet is
//! never shown before the record that created it has an LSN to wait for. A bound forgotten is
//! one the indexer has filed, so 0 then asks for nothing the store lacks; and every bound is
//! at least [`HistoryBounds::started`], the log's end when the shards started (what recovery
//! replayed, which the indexer may still be filing).

use dashmap::DashMap;

/// Per wallet, the LSN of the newest record that changed its history and is not filed yet.
#[derive(Debug)]
pub(crate) struct HistoryBounds {
    lsns: DashMap<u64, u64>,
    started: u64,
}

impl HistoryBounds {
    /// No bounds yet; every read waits at least for `started`, the log's last LSN when the
    /// shards started.
    pub(crate) fn new(started: u64) -> Self {
        HistoryBounds {
            lsns: DashMap::new(),
            started,
        }
    }

    /// What a read of `wallet`'s history waits for.
    pub(crate) fn bound(&self, wallet: u64) -> u64 {
        self.lsns
            .get(&wallet)
            .map_or(0, |lsn| *lsn)
            .max(self.started)
    }

    /// The log's last LSN when the shards started.
    pub(crate) fn started(&self) -> u64 {
        self.started
    }

    /// Notes that the record at `lsn` changed `wallet`'s history (its shard only, in LSN
    /// order); `false` if that was already noted (one record, two events of the wallet).
    pub(crate) fn note(&self, wallet: u64, lsn: u64) -> bool {
        self.lsns.insert(wallet, lsn) != Some(lsn)
    }

    /// Forgets `wallet`'s bound if it is still `lsn`, which the indexer has filed (its shard
    /// only): a later record's bound stays.
    pub(crate) fn forget(&self, wallet: u64, lsn: u64) {
        self.lsns.remove_if(&wallet, |_, noted| *noted == lsn);
    }

    /// Gives memory back once the map holds far fewer bounds than it has room for (after a
    /// burst over many wallets, or an indexer that was stalled).
    pub(crate) fn shrink(&self) {
        if self.lsns.capacity() > 4 * self.lsns.len() + 1024 {
            self.lsns.shrink_to_fit();
        }
    }

    #[cfg(test)]
    pub(crate) fn len(&self) -> usize {
        self.lsns.len()
    }
}

#[cfg(test)]
mod tests {
    use super::HistoryBounds;

    #[test]
    fn a_bound_is_the_newest_noted_and_never_below_the_start() {
        let bounds = HistoryBounds::new(10);
        assert_eq!(
            bounds.bound(7),
            10,
            "a wallet never noted waits for the start"
        );
        assert!(bounds.note(7, 12));
        assert!(
            !bounds.note(7, 12),
            "a second event of one record is one note"
        );
        assert!(bounds.note(7, 15));
        assert_eq!(bounds.bound(7), 15);
        assert_eq!(bounds.bound(8), 10, "another wallet's bound is its own");
        assert_eq!(bounds.started(), 10);
    }

    #[test]
    fn forgetting_a_filed_lsn_keeps_a_newer_one() {
        let bounds = HistoryBounds::new(0);
        bounds.note(7, 12);
        bounds.note(7, 15);
        // The indexer filed 12: the wallet still waits for 15.
        bounds.forget(7, 12);
        assert_eq!(bounds.bound(7), 15);
        bounds.forget(7, 15);
        assert_eq!(bounds.bound(7), 0);
        assert_eq!(bounds.len(), 0);
    }
}
