//! The process that `tests/wal_crash.rs` kills: it opens a log and appends from several threads
//! until it is SIGKILLed.
//!
//! Usage: `wal_crash_child DIR RUN THREADS`
//!
//! It prints `READY <last_lsn>` once recovery is done, then one `ACK ...` line (see
//! [`walletd_tests::crash::ack_line`]) after each `Append::wait` returns `Ok`, flushed before the
//! thread appends its next record: a printed ACK is a promise the parent holds the log to. Any
//! failure prints `ERR ...` and exits non-zero. It stops by itself after [`RUN_SECONDS_MAX`] or
//! when its stdout is gone, so a parent that dies does not leave it filling the disk.

use std::io::Write;
use std::path::PathBuf;
use std::time::{Duration, Instant};

use walletd_tests::crash::{ack_line, options, payload, Identity};

/// A safety net: the parent kills the child long before this.
const RUN_SECONDS_MAX: u64 = 60;

fn main() {
    let args: Vec<String> = std::env::args().collect();
    let [_, dir, run, threads] = args.as_slice() else {
        fail("usage: wal_crash_child DIR RUN THREADS");
    };
    let dir = PathBuf::from(dir);
    let run: u64 = run.parse().unwrap_or_else(|_| fail("RUN must be a number"));
    let threads: u32 = threads
        .parse()
        .unwrap_or_else(|_| fail("THREADS must be a number"));

    let (log, recovered) =
        wal::Wal::open(&dir, options()).unwrap_or_else(|e| fail(&format!("open: {e}")));
    say(&format!("READY {}", recovered.last_lsn));

    let deadline = Instant::now() + Duration::from_secs(RUN_SECONDS_MAX);
    let appenders: Vec<_> = (0..threads)
        .map(|thread| {
            let log = log.clone();
            std::thread::spawn(move || {
                for counter in 0.. {
                    if Instant::now() > deadline {
                        return;
                    }
                    let id = Identity {
                        run,
                        thread,
                        counter,
                    };
                    let bytes = payload(id);
                    let line_of = |lsn| ack_line(lsn, id, &bytes);
                    let ticket = log
                        .append(bytes.clone())
                        .unwrap_or_else(|e| fail(&format!("append {id:?}: {e}")));
                    let lsn = ticket.lsn();
                    match ticket.wait() {
                        Ok(durable) if durable == lsn => say(&line_of(lsn)),
                        Ok(durable) => fail(&format!("LSN {lsn} resolved as {durable}")),
                        Err(e) => fail(&format!("wait for LSN {lsn}: {e}")),
                    }
                }
            })
        })
        .collect();
    for appender in appenders {
        if appender.join().is_err() {
            fail("an appender thread panicked");
        }
    }
}

/// Prints one line and flushes it; exits quietly when the parent stopped listening.
fn say(line: &str) {
    let mut out = std::io::stdout().lock();
    if writeln!(out, "{line}").and_then(|()| out.flush()).is_err() {
        std::process::exit(3);
    }
}

fn fail(message: &str) -> ! {
    say(&format!("ERR {message}"));
    std::process::exit(2);
}
