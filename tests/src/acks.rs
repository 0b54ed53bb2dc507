//! A count of acknowledged operations that a crash drill's parent can wait on: client threads
//! call [`AckCount::add`] after each acknowledged write, and the parent blocks in
//! [`AckCount::wait_for`] until the seeded number is reached, then kills the server.

use std::sync::{Condvar, Mutex};
use std::time::Duration;

/// Longest the parent waits for the next acknowledgement before failing the drill.
const ACK_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Default)]
pub struct AckCount {
    count: Mutex<u64>,
    changed: Condvar,
}

impl AckCount {
    /// Counts one acknowledged operation and wakes the waiter.
    pub fn add(&self) {
        *self.count.lock().expect("ack lock") += 1;
        self.changed.notify_all();
    }

    /// Blocks until at least `target` operations are acknowledged. Panics when none comes for
    /// 60 s, with `context()` (the seed, the server's stderr) in the message.
    pub fn wait_for(&self, target: u64, context: impl Fn() -> String) {
        let mut acked = self.count.lock().expect("ack lock");
        while *acked < target {
            let (next, waited) = self
                .changed
                .wait_timeout(acked, ACK_TIMEOUT)
                .expect("ack lock");
            acked = next;
            assert!(
                !waited.timed_out(),
                "no acknowledgement for 60 s after {} ({})",
                *acked,
                context()
            );
        }
    }
}
