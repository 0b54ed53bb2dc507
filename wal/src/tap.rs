//! The durable tap: the channel on which the writer hands every record, once synced, to one
//! consumer ([`Options::durable_tap`](crate::Options::durable_tap)), bounded by the bytes it
//! holds rather than by a number of batches.
//!
//! Why bytes: the writer's batches follow the load (a few records under light load, thousands
//! behind a slow sync), so a bound in batches is either a few milliseconds of log or an unknown
//! amount of memory. The consumer (walletd's history indexer) pauses now and then for work that
//! is not its own: its store's flushes and journal syncs. Every such pause longer than what the
//! channel holds stops the writer, and with it every append's sync. A byte budget sized to a
//! second or two of the log's rate absorbs those pauses; a consumer that falls behind for longer
//! still stalls the writer once the budget is spent, so memory stays bounded either way.
//!
//! The budget counts a batch from its send until the consumer receives it. A batch larger than
//! the whole budget is let through alone, when nothing else is held: the writer never waits for
//! room that cannot appear. The channel is made for one sender (the writer): with several,
//! batches could be queued in another order than they took their room.

use std::sync::Arc;
use std::time::Duration;

pub use crossbeam_channel::{RecvTimeoutError, TryRecvError};

use crate::budget::{record_cost, Budget, Room};
use crate::log::DurableRecord;

/// A channel of durable batches holding at most `bytes_max` bytes of records (see the module
/// docs): the writer's end and the consumer's.
#[must_use]
pub fn channel(bytes_max: usize) -> (TapSender, TapReceiver) {
    let (tx, rx) = crossbeam_channel::unbounded();
    let budget = Arc::new(Budget::new(bytes_max));
    (
        TapSender {
            tx,
            budget: budget.clone(),
        },
        TapReceiver { rx, budget },
    )
}

/// The bytes a batch is counted for.
fn batch_bytes(records: &[DurableRecord]) -> usize {
    records
        .iter()
        .map(|record| record_cost(record.payload.len()))
        .sum()
}

struct Batch {
    records: Vec<DurableRecord>,
    bytes: usize,
}

/// The consumer hung up: nobody will ever receive the batch, which is handed back.
#[derive(Debug, PartialEq, Eq)]
pub struct Disconnected(pub Vec<DurableRecord>);

/// Why [`TapSender::try_send`] did not send: the batch is handed back.
#[derive(Debug, PartialEq, Eq)]
pub enum TrySendError {
    /// The budget has no room for it now.
    Full(Vec<DurableRecord>),
    Disconnected(Vec<DurableRecord>),
}

/// The writer's end.
#[derive(Clone, Debug)]
pub struct TapSender {
    tx: crossbeam_channel::Sender<Batch>,
    budget: Arc<Budget>,
}

impl TapSender {
    /// Sends a batch, waiting while the budget has no room for it.
    ///
    /// # Errors
    /// [`Disconnected`] once the receiver is dropped (also while waiting for room).
    pub fn send(&self, records: Vec<DurableRecord>) -> Result<(), Disconnected> {
        let bytes = batch_bytes(&records);
        match self.budget.take_room(bytes, true) {
            Room::Taken => self
                .hand_over(Batch { records, bytes })
                .map_err(Disconnected),
            Room::Full | Room::Closed => Err(Disconnected(records)),
        }
    }

    /// Sends a batch if the budget has room for it now.
    ///
    /// # Errors
    /// [`TrySendError::Full`] without room, [`TrySendError::Disconnected`] once the receiver is
    /// dropped.
    pub fn try_send(&self, records: Vec<DurableRecord>) -> Result<(), TrySendError> {
        let bytes = batch_bytes(&records);
        match self.budget.take_room(bytes, false) {
            Room::Taken => self
                .hand_over(Batch { records, bytes })
                .map_err(TrySendError::Disconnected),
            Room::Full => Err(TrySendError::Full(records)),
            Room::Closed => Err(TrySendError::Disconnected(records)),
        }
    }

    /// Bytes sent and not yet received.
    #[must_use]
    pub fn held_bytes(&self) -> usize {
        self.budget.held_bytes()
    }

    /// Senders waiting for room now: whether the consumer's back-pressure holds the writer.
    #[must_use]
    pub fn waiting(&self) -> usize {
        self.budget.waiting()
    }

    fn hand_over(&self, batch: Batch) -> Result<(), Vec<DurableRecord>> {
        let bytes = batch.bytes;
        self.tx.send(batch).map_err(|failed| {
            self.budget.release(bytes);
            failed.into_inner().records
        })
    }
}

/// The consumer's end. Batches come in the order they were sent; once every sender is gone
/// and the channel is drained, receiving reports the disconnection.
#[derive(Debug)]
pub struct TapReceiver {
    rx: crossbeam_channel::Receiver<Batch>,
    budget: Arc<Budget>,
}

impl TapReceiver {
    /// Waits for the next batch.
    ///
    /// # Errors
    /// Once every sender is gone and nothing is left.
    pub fn recv(&self) -> Result<Vec<DurableRecord>, crossbeam_channel::RecvError> {
        self.rx.recv().map(|batch| self.taken(batch))
    }

    /// Waits at most `timeout` for the next batch.
    ///
    /// # Errors
    /// [`RecvTimeoutError::Timeout`], or [`RecvTimeoutError::Disconnected`] once every sender is
    /// gone and nothing is left.
    pub fn recv_timeout(&self, timeout: Duration) -> Result<Vec<DurableRecord>, RecvTimeoutError> {
        self.rx.recv_timeout(timeout).map(|batch| self.taken(batch))
    }

    /// The next batch if one is waiting.
    ///
    /// # Errors
    /// [`TryRecvError::Empty`], or [`TryRecvError::Disconnected`] once every sender is gone and
    /// nothing is left.
    pub fn try_recv(&self) -> Result<Vec<DurableRecord>, TryRecvError> {
        self.rx.try_recv().map(|batch| self.taken(batch))
    }

    fn taken(&self, batch: Batch) -> Vec<DurableRecord> {
        self.budget.release(batch.bytes);
        batch.records
    }
}

impl Drop for TapReceiver {
    fn drop(&mut self) {
        self.budget.close();
    }
}

#[cfg(test)]
#[allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]
mod tests {
    use super::*;
    use crate::budget::RECORD_OVERHEAD_BYTES;

    fn records(first_lsn: u64, count: u64, payload_bytes: usize) -> Vec<DurableRecord> {
        (first_lsn..first_lsn + count)
            .map(|lsn| DurableRecord {
                lsn,
                payload: vec![u8::try_from(lsn % 251).unwrap_or(0); payload_bytes],
            })
            .collect()
    }

    fn lsns(batch: &[DurableRecord]) -> Vec<u64> {
        batch.iter().map(|record| record.lsn).collect()
    }

    #[test]
    fn the_budget_counts_bytes_not_batches() {
        // Room for ten records of 1,000 bytes (with their overhead), whatever the batching.
        let (tx, rx) = channel(10 * (1_000 + RECORD_OVERHEAD_BYTES));
        for lsn in 1..=6 {
            tx.try_send(records(lsn, 1, 1_000)).unwrap();
        }
        tx.try_send(records(7, 4, 1_000)).unwrap();
        assert_eq!(tx.held_bytes(), 10 * (1_000 + RECORD_OVERHEAD_BYTES));
        let Err(TrySendError::Full(back)) = tx.try_send(records(11, 1, 1)) else {
            panic!("a full budget refuses even a small batch");
        };
        assert_eq!(
            lsns(&back),
            vec![11],
            "the refused batch is handed back whole"
        );
        // Receiving one batch frees exactly its bytes.
        assert_eq!(lsns(&rx.try_recv().unwrap()), vec![1]);
        assert_eq!(tx.held_bytes(), 9 * (1_000 + RECORD_OVERHEAD_BYTES));
        tx.try_send(back).unwrap();
        let mut seen = Vec::new();
        while let Ok(batch) = rx.try_recv() {
            seen.extend(lsns(&batch));
        }
        assert_eq!(seen, (2..=11).collect::<Vec<_>>(), "in order, each once");
        assert_eq!(tx.held_bytes(), 0);
    }

    #[test]
    fn a_batch_larger_than_the_budget_goes_alone() {
        let (tx, rx) = channel(1_000);
        tx.try_send(records(1, 5, 1_000)).unwrap();
        assert!(matches!(
            tx.try_send(records(6, 1, 10)),
            Err(TrySendError::Full(_))
        ));
        assert_eq!(lsns(&rx.recv().unwrap()), vec![1, 2, 3, 4, 5]);
        tx.try_send(records(6, 1, 10)).unwrap();
    }

    /// Spins until a sender of `tx`'s channel waits for room: the wake-up is then what a test
    /// checks, not a send that found room before the consumer acted.
    fn until_a_sender_waits(tx: &TapSender) {
        while tx.waiting() == 0 {
            std::thread::yield_now();
        }
    }

    /// Sends on another thread; its outcome comes back on the returned channel, so a sender
    /// that is never woken fails the test (after a minute) instead of hanging it.
    fn send_elsewhere(
        tx: &TapSender,
        batch: Vec<DurableRecord>,
    ) -> crossbeam_channel::Receiver<Result<(), Disconnected>> {
        let (done, outcome) = crossbeam_channel::bounded(1);
        let tx = tx.clone();
        std::thread::spawn(move || done.send(tx.send(batch)));
        outcome
    }

    const NEVER_WOKEN: Duration = Duration::from_secs(60);

    #[test]
    fn a_waiting_sender_goes_on_when_the_consumer_takes_a_batch() {
        let (tx, rx) = channel(2_000);
        tx.send(records(1, 1, 1_500)).unwrap();
        // No room for record 2 until record 1 is received.
        let outcome = send_elsewhere(&tx, records(2, 1, 1_500));
        until_a_sender_waits(&tx);
        assert_eq!(lsns(&rx.recv().unwrap()), vec![1]);
        outcome
            .recv_timeout(NEVER_WOKEN)
            .expect("the waiting sender was woken")
            .unwrap();
        assert_eq!(tx.waiting(), 0);
        assert_eq!(lsns(&rx.recv().unwrap()), vec![2]);
        drop(tx);
        assert!(
            rx.recv().is_err(),
            "the channel closes with its last sender"
        );
    }

    #[test]
    fn a_sender_waiting_for_room_is_told_when_the_consumer_hangs_up() {
        let (tx, rx) = channel(2_000);
        tx.send(records(1, 1, 1_500)).unwrap();
        let outcome = send_elsewhere(&tx, records(2, 1, 1_500));
        until_a_sender_waits(&tx);
        drop(rx);
        let Err(Disconnected(back)) = outcome
            .recv_timeout(NEVER_WOKEN)
            .expect("the waiting sender was woken")
        else {
            panic!("a send into a channel nobody reads must fail");
        };
        assert_eq!(lsns(&back), vec![2]);
    }

    #[test]
    fn a_send_after_the_consumer_hung_up_fails_at_once() {
        let (tx, rx) = channel(1 << 20);
        drop(rx);
        assert!(tx.send(records(1, 1, 10)).is_err());
        assert!(matches!(
            tx.try_send(records(1, 1, 10)),
            Err(TrySendError::Disconnected(_))
        ));
    }
}
