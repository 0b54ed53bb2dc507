//! Crash test of the write-ahead log with real processes: a child appends from several threads
//! with fsync on, printing an `ACK` for every record once `Append::wait` returned `Ok`; the parent
//! SIGKILLs it at a seeded random moment, recovers the directory itself, and checks:
//!
//! - recovery succeeds, read-only and repairing scans agree, and LSNs are contiguous from 1;
//! - every acknowledged LSN holds exactly the payload the child wrote for it;
//! - every record recovered earlier is still there, byte for byte (recovery after recovery);
//! - every other record is an intact child payload of the killed run, and each of its threads'
//!   records are counters `0..=m` in LSN order with `m` its last ACK or the one after;
//! - the next append gets `last + 1`, and a clean reopen finds no torn tail.
//!
//! A SIGKILL keeps every completed `pwrite` in the page cache, so it rarely tears anything. To
//! also cover power loss, half the kill points also plan a *tear*, applied when the log's final
//! write (the records sharing its `lsn - batch_pos`) holds no acknowledged record and nothing
//! recovered before: its fdatasync may not have returned, so the parent damages it as a power cut
//! could: zeros from some offset on
//! (pages never written), one zeroed 512-byte sector with intact bytes after it (out-of-order
//! writeback), or one flipped bit. Recovery must then keep exactly the records that end before
//! the first changed byte, and report a torn tail unless the damage reads as a clean end.
//!
//! Each round uses a fresh directory and kills a child on it several times, so the child also
//! recovers what earlier kills left. Kill moments are drawn up front from one seed, printed; rerun
//! a failure with `WAL_CRASH_SEED=<seed>`, and soak with `WAL_CRASH_ROUNDS=<n>` (default 40 rounds
//! of 6 kills). Some kills land before the child finished opening the log (while it recovers or
//! creates its first segment), and some while it rotates segments.

use std::collections::BTreeMap;
use std::io::{BufRead, BufReader};
use std::os::unix::process::ExitStatusExt;
use std::path::Path;
use std::process::{Command, Stdio};
use std::sync::mpsc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use walletd_tests::crash::{identify, options, parse_ack, payload, Ack, XorShift};

/// Rounds (fresh directories); `WAL_CRASH_ROUNDS` overrides it for longer soaks.
const ROUNDS: u64 = 40;
const KILLS_PER_ROUND: u64 = 6;
const THREADS: u32 = 4;
/// Most ACK lines the parent waits for before it picks the kill moment.
const ACKS_BEFORE_KILL_MAX: u64 = 80;
/// Longest random pause between the chosen ACK and the kill.
const KILL_DELAY_US_MAX: u64 = 2_000;
/// Longest random pause after spawning, for kills that do not wait for `READY`.
const EARLY_KILL_DELAY_US_MAX: u64 = 8_000;
/// How long the parent waits for one line from the child before it gives up.
const LINE_TIMEOUT: Duration = Duration::from_secs(30);
const DEFAULT_SEED: u64 = 0x7761_6C5F_6372_6173;

/// When to kill a child.
#[derive(Debug, Clone, Copy)]
enum KillPoint {
    /// Right after spawning plus a pause: the child may still be recovering.
    Early { delay_us: u64 },
    /// Once `acks` ACK lines arrived, plus a pause.
    AfterAcks { acks: u64, delay_us: u64 },
}

/// How to damage the final write after a kill, when no acknowledged record is in it.
#[derive(Debug, Clone, Copy)]
enum TearKind {
    /// Zeros from a random offset of the write to its end (pages never written).
    ZeroSuffix,
    /// One 512-byte-aligned sector of the write zeroed, bytes after it intact (out-of-order
    /// writeback).
    ZeroSector,
    /// One bit flipped inside the write.
    FlipBit,
}

/// One kill: when, and what damage a simulated power cut adds afterwards (`seed` places it).
#[derive(Debug, Clone, Copy)]
struct Plan {
    point: KillPoint,
    tear: Option<(TearKind, u64)>,
}

fn draw_plan(seed: u64, rounds: u64) -> Vec<Plan> {
    let mut rng = XorShift::new(seed);
    (0..rounds * KILLS_PER_ROUND)
        .map(|_| {
            let point = if rng.below(100) < 15 {
                KillPoint::Early {
                    delay_us: rng.below(EARLY_KILL_DELAY_US_MAX + 1),
                }
            } else {
                KillPoint::AfterAcks {
                    acks: rng.below(ACKS_BEFORE_KILL_MAX + 1),
                    delay_us: rng.below(KILL_DELAY_US_MAX + 1),
                }
            };
            let kind = match rng.below(6) {
                0 => Some(TearKind::ZeroSuffix),
                1 => Some(TearKind::ZeroSector),
                2 => Some(TearKind::FlipBit),
                _ => None,
            };
            let tear_seed = rng.next_u64();
            Plan {
                point,
                tear: kind.map(|kind| (kind, tear_seed)),
            }
        })
        .collect()
}

#[derive(Default)]
struct Totals {
    kills: u64,
    early_kills: u64,
    acks: u64,
    tears: u64,
    torn_tails: u64,
    torn_by_kill: u64,
    temp_segments: u64,
    unacked_survivors: u64,
    segments_max: usize,
    records_max: usize,
}

#[test]
fn wal_keeps_every_acknowledged_record_across_sigkill() {
    let seed = std::env::var("WAL_CRASH_SEED")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(DEFAULT_SEED);
    let rounds = std::env::var("WAL_CRASH_ROUNDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(ROUNDS);
    let plans = draw_plan(seed, rounds);
    println!(
        "wal_crash: seed {seed} ({} kill points; rerun with WAL_CRASH_SEED={seed})",
        plans.len()
    );
    let started = Instant::now();
    let mut totals = Totals::default();
    for round in 0..rounds {
        let dir = tempfile::tempdir().expect("create a temp dir");
        // Every record recovered so far, by LSN: later recoveries must keep all of them.
        let mut known: Vec<Vec<u8>> = Vec::new();
        for kill in 0..KILLS_PER_ROUND {
            let run = round * KILLS_PER_ROUND + kill;
            let plan = plans[run as usize];
            let context = format!("seed {seed}, round {round}, run {run}, {plan:?}");
            let lines = run_and_kill(dir.path(), run, plan.point);
            let acks: Vec<Ack> = lines.iter().filter_map(|l| parse_ack(l)).collect();
            let tear = plan.tear.and_then(|(kind, tear_seed)| {
                tear_final_write(dir.path(), known.len() as u64, &acks, kind, tear_seed)
            });
            let context = format!("{context}, {tear:?}");
            totals.tears += u64::from(tear.is_some());
            verify_and_continue(
                dir.path(),
                run,
                &acks,
                tear.as_ref(),
                &mut known,
                &mut totals,
                &context,
            );
            totals.kills += 1;
            totals.early_kills += u64::from(matches!(plan.point, KillPoint::Early { .. }));
            totals.acks += acks.len() as u64;
        }
    }
    println!(
        "wal_crash: {} kills ({} early) in {:.1?}; {} ACKs verified; {} simulated power-cut \
         tears, {} torn tails cut ({} torn by the kill alone); {} half-created segments \
         removed; {} unacknowledged records survived; up to {} segments and \
         {} records per log",
        totals.kills,
        totals.early_kills,
        started.elapsed(),
        totals.acks,
        totals.tears,
        totals.torn_tails,
        totals.torn_by_kill,
        totals.temp_segments,
        totals.unacked_survivors,
        totals.segments_max,
        totals.records_max,
    );
    assert_eq!(totals.kills, rounds * KILLS_PER_ROUND);
}

/// Runs one child on `dir` until the kill point, SIGKILLs it, and returns every line it printed.
fn run_and_kill(dir: &Path, run: u64, point: KillPoint) -> Vec<String> {
    let mut child = Command::new(env!("CARGO_BIN_EXE_wal_crash_child"))
        .arg(dir)
        .arg(run.to_string())
        .arg(THREADS.to_string())
        .stdin(Stdio::null())
        .stdout(Stdio::piped())
        .stderr(Stdio::inherit())
        .spawn()
        .expect("spawn wal_crash_child");
    let stdout = child.stdout.take().expect("child stdout is piped");
    let (tx, rx) = mpsc::channel();
    let reader = std::thread::spawn(move || {
        for line in BufReader::new(stdout).lines() {
            let Ok(line) = line else { break };
            if tx.send(line).is_err() {
                break;
            }
        }
    });

    let mut lines = Vec::new();
    let delay_us = match point {
        KillPoint::Early { delay_us } => delay_us,
        KillPoint::AfterAcks { acks, delay_us } => {
            let mut seen = 0;
            while seen < acks {
                match rx.recv_timeout(LINE_TIMEOUT) {
                    Ok(line) => {
                        assert!(!line.starts_with("ERR"), "run {run}: child failed: {line}");
                        seen += u64::from(line.starts_with("ACK "));
                        lines.push(line);
                    }
                    Err(e) => panic!("run {run}: child stopped talking ({e}) after {lines:?}"),
                }
            }
            delay_us
        }
    };
    std::thread::sleep(Duration::from_micros(delay_us));
    child.kill().expect("SIGKILL the child");
    let status = child.wait().expect("reap the child");
    reader.join().expect("the reader thread does not panic");
    lines.extend(rx.try_iter());
    let errors: Vec<_> = lines.iter().filter(|l| l.starts_with("ERR")).collect();
    assert!(errors.is_empty(), "run {run}: child failed: {errors:?}");
    assert_eq!(
        status.signal(),
        Some(9),
        "run {run}: the child must die by SIGKILL, not exit ({status})"
    );
    lines
}

/// What [`tear_final_write`] did, and so what recovery must find.
#[derive(Debug)]
struct TornWrite {
    path: std::path::PathBuf,
    /// First byte that differs from what the child wrote.
    first_changed: u64,
    /// Recovery must keep exactly the LSNs up to this one: the records that end before the damage.
    last_kept: u64,
    /// Where the first damaged record starts: the torn tail is cut there.
    cut_at: u64,
    /// False when the damage reads as a clean end of data (zeros from a record boundary on).
    expect_torn: bool,
}

/// Damages the log's final write as a power cut could, when no acknowledged record is in it and
/// nothing recovered before is in it. Returns `None` when it changed nothing.
fn tear_final_write(
    dir: &Path,
    known_records: u64,
    acks: &[Ack],
    kind: TearKind,
    seed: u64,
) -> Option<TornWrite> {
    // (lsn, batch_pos, bytes on disk) of every record. Errors are left to the checks that follow.
    let mut layout: Vec<(u64, u32, u64)> = Vec::new();
    let scan = wal::reader::read_from(dir, options().record_bytes_max, 1, &mut |r| {
        layout.push((r.lsn, r.batch_pos, r.bytes() as u64));
        Ok(())
    })
    .ok()?;
    if scan.torn.is_some() {
        return None; // the kill itself tore a write: leave that for recovery as it is
    }
    let segment = scan.segments.last()?;
    let &(last_lsn, last_pos, _) = layout.last()?;
    let write_first = last_lsn - u64::from(last_pos);
    // The final write must be in the last segment (an empty last segment means the previous
    // segment was synced before it was created), new since the previous recovery, and unacked.
    if write_first < segment.first_lsn
        || write_first <= known_records
        || acks.iter().any(|a| a.lsn >= write_first)
    {
        return None;
    }
    // (lsn, start, end) of the records of the last segment.
    let mut offset = wal::record::SEGMENT_HEADER_BYTES as u64;
    let mut extents = Vec::new();
    for &(lsn, _, bytes) in layout.iter().filter(|r| r.0 >= segment.first_lsn) {
        extents.push((lsn, offset, offset + bytes));
        offset += bytes;
    }
    assert_eq!(
        offset, segment.end_offset,
        "record sizes add up to the scan's end"
    );
    let write_start = extents.iter().find(|e| e.0 == write_first)?.1;
    let write_end = segment.end_offset;

    let before = std::fs::read(&segment.path).expect("read the last segment");
    let mut bytes = before.clone();
    let mut rng = XorShift::new(seed);
    let at = write_start + rng.below(write_end - write_start);
    let range = |from: u64, to: u64| from as usize..to as usize;
    match kind {
        TearKind::ZeroSuffix => bytes[range(at, write_end)].fill(0),
        TearKind::ZeroSector => {
            let sector = at / 512 * 512;
            bytes[range(sector.max(write_start), (sector + 512).min(write_end))].fill(0);
        }
        TearKind::FlipBit => bytes[at as usize] ^= 1 << rng.below(8),
    }
    let first_changed =
        (write_start..write_end).find(|&i| bytes[i as usize] != before[i as usize])?;
    std::fs::write(&segment.path, &bytes).expect("write the torn segment");

    let damaged = extents
        .iter()
        .find(|e| e.1 <= first_changed && first_changed < e.2)
        .expect("the change is inside a record");
    let expect_torn =
        !(damaged.1 == first_changed && bytes[first_changed as usize..].iter().all(|&b| b == 0));
    Some(TornWrite {
        path: segment.path.clone(),
        first_changed,
        last_kept: damaged.0 - 1,
        cut_at: damaged.1,
        expect_torn,
    })
}

fn verify_and_continue(
    dir: &Path,
    run: u64,
    acks: &[Ack],
    tear: Option<&TornWrite>,
    known: &mut Vec<Vec<u8>>,
    totals: &mut Totals,
    context: &str,
) {
    let record_bytes_max = options().record_bytes_max;

    // What a read-only scan sees must be what recovery replays.
    let mut scanned: Vec<(u64, Vec<u8>)> = Vec::new();
    let scan = wal::reader::read_from(dir, record_bytes_max, 1, &mut |r| {
        scanned.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{context}: read-only scan failed: {e}"));
    let mut replayed: Vec<(u64, Vec<u8>)> = Vec::new();
    let (log, recovered) =
        wal::Wal::open_with(Arc::new(wal::fs::StdFs), dir, options(), 1, &mut |r| {
            replayed.push((r.lsn, r.payload.to_vec()));
            Ok(())
        })
        .unwrap_or_else(|e| panic!("{context}: recovery failed: {e}"));
    assert!(
        scanned == replayed,
        "{context}: read-only scan and recovery disagree"
    );
    assert_eq!(
        scan.torn.is_some(),
        recovered.torn_tail.is_some(),
        "{context}: torn tail"
    );
    totals.torn_tails += u64::from(recovered.torn_tail.is_some());
    totals.torn_by_kill += u64::from(tear.is_none() && recovered.torn_tail.is_some());
    totals.temp_segments += scan.stale_temp_files.len() as u64;
    if let Some(tear) = tear {
        assert_eq!(
            recovered.last_lsn, tear.last_kept,
            "{context}: recovery must keep exactly the records before the damage"
        );
        let expected_cut = tear.expect_torn.then(|| (tear.path.clone(), tear.cut_at));
        let actual_cut = recovered
            .torn_tail
            .as_ref()
            .map(|(path, offset, _)| (path.clone(), *offset));
        assert_eq!(
            actual_cut, expected_cut,
            "{context}: where the torn tail is cut (first changed byte at {})",
            tear.first_changed
        );
    }
    totals.segments_max = totals.segments_max.max(recovered.segments);
    totals.records_max = totals.records_max.max(replayed.len());

    // Contiguous from 1.
    for (index, (lsn, _)) in replayed.iter().enumerate() {
        assert_eq!(*lsn, index as u64 + 1, "{context}: LSN gap or reorder");
    }
    let last = replayed.len() as u64;
    assert_eq!(recovered.last_lsn, last, "{context}: Recovered::last_lsn");
    assert_eq!(
        recovered.records_replayed, last,
        "{context}: records_replayed"
    );
    if last > 0 {
        assert_eq!(recovered.first_lsn, 1, "{context}: first_lsn");
    }

    // Everything recovered before is still there, unchanged.
    assert!(
        replayed.len() >= known.len(),
        "{context}: the log shrank from {} to {} records",
        known.len(),
        replayed.len()
    );
    for (index, before) in known.iter().enumerate() {
        assert!(
            &replayed[index].1 == before,
            "{context}: LSN {} changed since the previous recovery",
            index + 1
        );
    }

    // Every ACK holds, byte for byte.
    let mut acked_max: BTreeMap<u32, u64> = BTreeMap::new();
    for ack in acks {
        assert_eq!(ack.id.run, run, "{context}: ACK from another run: {ack:?}");
        let expected = payload(ack.id);
        assert_eq!(
            (ack.payload_bytes, ack.payload_fnv),
            (expected.len(), walletd_tests::crash::fnv1a64(&expected)),
            "{context}: the ACK line does not describe the payload of {:?}",
            ack.id
        );
        let Some((_, found)) = replayed.get(ack.lsn as usize - 1) else {
            panic!(
                "{context}: acknowledged LSN {} is missing (log ends at {last})",
                ack.lsn
            );
        };
        assert!(
            found == &expected,
            "{context}: LSN {} holds {:?}, acknowledged as {:?}",
            ack.lsn,
            identify(found),
            ack.id
        );
        let entry = acked_max.entry(ack.id.thread).or_insert(ack.id.counter);
        *entry = (*entry).max(ack.id.counter);
    }

    // New records all come from the killed run, each thread's counters in order without gaps.
    let mut counters: BTreeMap<u32, u64> = BTreeMap::new();
    for (lsn, bytes) in &replayed[known.len()..] {
        let Some(id) = identify(bytes) else {
            panic!(
                "{context}: LSN {lsn} is not a child payload ({} bytes)",
                bytes.len()
            );
        };
        assert_eq!(id.run, run, "{context}: LSN {lsn} is from run {}", id.run);
        let next = counters.entry(id.thread).or_insert(0);
        assert_eq!(
            id.counter, *next,
            "{context}: LSN {lsn}: counters of thread {} skip",
            id.thread
        );
        *next += 1;
    }
    for thread in 0..THREADS {
        let written = counters.get(&thread).copied().unwrap_or(0);
        let acked = acked_max.get(&thread).map_or(0, |&c| c + 1);
        assert!(
            written == acked || written == acked + 1,
            "{context}: thread {thread} acknowledged {acked} records, {written} are in the log"
        );
        totals.unacked_survivors += written - acked;
    }

    // LSNs continue: the next append gets last + 1 and becomes durable.
    let marker = format!("parent after run {run}").into_bytes();
    let ticket = log
        .append(marker.clone())
        .unwrap_or_else(|e| panic!("{context}: append after recovery: {e}"));
    assert_eq!(ticket.lsn(), last + 1, "{context}: LSNs must continue");
    assert_eq!(ticket.wait().ok(), Some(last + 1), "{context}: durable");
    assert_eq!(log.durable_lsn(), last + 1);
    log.close()
        .unwrap_or_else(|e| panic!("{context}: close: {e}"));

    known.clear();
    known.extend(replayed.into_iter().map(|(_, bytes)| bytes));
    known.push(marker);

    // A clean close leaves a clean log: reading it again finds exactly that, no torn tail.
    let mut again = Vec::new();
    let clean = wal::reader::read_from(dir, record_bytes_max, 1, &mut |r| {
        again.push(r.payload.to_vec());
        Ok(())
    })
    .unwrap_or_else(|e| panic!("{context}: scan after close: {e}"));
    assert!(
        clean.torn.is_none(),
        "{context}: torn tail after a clean close"
    );
    assert!(
        &again == known,
        "{context}: the log after close is not what was recovered"
    );
}
