//! A byte budget shared by the two ends of a queue: a sender takes room for what it queues,
//! waiting while there is none, and the receiver gives the room back as it takes things off.
//! Both of the log's queues are bounded this way: the appenders' queue to the writer
//! ([`crate::Options::queue_bytes_max`]) and the durable tap to its consumer ([`crate::tap`]).
//!
//! Something larger than the whole budget is let through alone, when nothing else is held: a
//! sender never waits for room that cannot appear. Once the receiving end is gone
//! ([`Budget::close`]), every sender waiting for room is woken and told so.

use std::sync::atomic::{AtomicBool, AtomicUsize, Ordering};
use std::sync::{Condvar, Mutex, PoisonError};

/// Bytes a record is counted for beside its payload (the struct that carries it and the
/// vector's slot).
pub(crate) const RECORD_OVERHEAD_BYTES: usize = 48;

/// The bytes a record with a payload of `payload_bytes` is counted for.
pub(crate) fn record_cost(payload_bytes: usize) -> usize {
    payload_bytes.saturating_add(RECORD_OVERHEAD_BYTES)
}

#[derive(Debug)]
pub(crate) struct Budget {
    bytes_max: usize,
    /// Bytes sent and not yet received.
    held: Mutex<usize>,
    freed: Condvar,
    /// Set when the receiver is gone: a sender waiting for room would otherwise wait forever.
    closed: AtomicBool,
    /// Senders waiting for room now.
    waiting: AtomicUsize,
}

/// What [`Budget::take_room`] found.
pub(crate) enum Room {
    Taken,
    /// No room now (only when not waiting for it).
    Full,
    /// The receiver is gone.
    Closed,
}

impl Budget {
    pub(crate) fn new(bytes_max: usize) -> Self {
        Budget {
            bytes_max: bytes_max.max(1),
            held: Mutex::new(0),
            freed: Condvar::new(),
            closed: AtomicBool::new(false),
            waiting: AtomicUsize::new(0),
        }
    }

    fn fits(&self, held: usize, bytes: usize) -> bool {
        held == 0 || held.saturating_add(bytes) <= self.bytes_max
    }

    /// Counts `bytes` as held if they fit, waiting for the receiver to free room if `wait`.
    pub(crate) fn take_room(&self, bytes: usize, wait: bool) -> Room {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        loop {
            if self.closed.load(Ordering::Acquire) {
                return Room::Closed;
            }
            if self.fits(*held, bytes) {
                *held += bytes;
                return Room::Taken;
            }
            if !wait {
                return Room::Full;
            }
            self.waiting.fetch_add(1, Ordering::AcqRel);
            held = self
                .freed
                .wait(held)
                .unwrap_or_else(PoisonError::into_inner);
            self.waiting.fetch_sub(1, Ordering::AcqRel);
        }
    }

    /// Gives back room for `bytes` the receiver took off the queue.
    pub(crate) fn release(&self, bytes: usize) {
        let mut held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        *held = held.saturating_sub(bytes);
        // A sender counts itself waiting under this lock before it waits, so one that waits is
        // seen here. Waking nobody costs a futex syscall all the same, and the log's writer
        // releases once per batch it takes, hundreds of times a second.
        let anyone = self.waiting.load(Ordering::Acquire) > 0;
        drop(held);
        if anyone {
            self.freed.notify_all();
        }
    }

    /// The receiver is gone: wakes every sender waiting for room, and refuses every later one.
    pub(crate) fn close(&self) {
        self.shut();
        self.freed.notify_all();
    }

    /// Refuses every later sender, and every waiting one once it wakes, without waking it:
    /// a receiver that still gives room back ([`Self::release`], which wakes the waiting) can
    /// then refuse the waiting only once that room is counted back, and [`Self::close`] after
    /// it wakes any left.
    pub(crate) fn shut(&self) {
        // Under the lock, so a sender between its check and its wait cannot miss the flag.
        let held = self.held.lock().unwrap_or_else(PoisonError::into_inner);
        self.closed.store(true, Ordering::Release);
        drop(held);
    }

    /// Bytes sent and not yet received.
    pub(crate) fn held_bytes(&self) -> usize {
        *self.held.lock().unwrap_or_else(PoisonError::into_inner)
    }

    /// Senders waiting for room now.
    pub(crate) fn waiting(&self) -> usize {
        self.waiting.load(Ordering::Acquire)
    }
}
