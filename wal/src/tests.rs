//! Tests of the log. Each names the behaviour it checks and would fail if it broke.
#![allow(clippy::unwrap_used, clippy::expect_used, clippy::indexing_slicing)]

use std::path::{Path, PathBuf};
use std::sync::Arc;

use proptest::prelude::*;

use crate::fs::{FaultyFs, FileSystem, StdFs};
use crate::record::{self, Parsed, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use crate::{snapshot, Error, FsyncPolicy, Options, Wal};

fn small_options() -> Options {
    Options {
        segment_bytes: 64 * 1024,
        record_bytes_max: 16 * 1024,
        ..Options::default()
    }
}

fn payload(lsn: u64, len: usize) -> Vec<u8> {
    let mut state = lsn.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            state ^= state << 13;
            state ^= state >> 7;
            state ^= state << 17;
            state as u8
        })
        .collect()
}

fn read_all(dir: &Path, options: &Options) -> Vec<(u64, Vec<u8>)> {
    let mut out = Vec::new();
    crate::reader::read_from(dir, options.record_bytes_max, 1, &mut |r| {
        out.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })
    .unwrap();
    out
}

fn segments(dir: &Path) -> Vec<PathBuf> {
    let mut found: Vec<PathBuf> = std::fs::read_dir(dir)
        .unwrap()
        .map(|e| e.unwrap().path())
        .filter(|p| p.extension().is_some_and(|e| e == "wal"))
        .collect();
    found.sort();
    found
}

/// Appends `count` records (lengths from `len_of`) and waits for all of them.
fn fill(wal: &Wal, first_lsn: u64, count: u64, len_of: impl Fn(u64) -> usize) {
    let tickets: Vec<_> = (first_lsn..first_lsn + count)
        .map(|lsn| wal.append(payload(lsn, len_of(lsn))).unwrap())
        .collect();
    for (ticket, lsn) in tickets.into_iter().zip(first_lsn..) {
        assert_eq!(ticket.wait().unwrap(), lsn);
    }
}

#[test]
fn appended_records_read_back_in_order_across_rotations_and_reopen() {
    let dir = tempfile::tempdir().unwrap();
    let options = small_options();
    let (wal, recovered) = Wal::open(dir.path(), options.clone()).unwrap();
    assert_eq!((recovered.first_lsn, recovered.last_lsn), (1, 0));
    fill(&wal, 1, 200, |lsn| (lsn as usize * 37) % 3000);
    assert_eq!(wal.durable_lsn(), 200);
    wal.close().unwrap();
    assert!(
        segments(dir.path()).len() > 3,
        "records should span several segments"
    );

    let (wal, recovered) = Wal::open(dir.path(), options.clone()).unwrap();
    assert_eq!((recovered.first_lsn, recovered.last_lsn), (1, 200));
    assert!(recovered.torn_tail.is_none());
    fill(&wal, 201, 10, |_| 10);
    wal.close().unwrap();

    let records = read_all(dir.path(), &options);
    assert_eq!(records.len(), 210);
    for (i, (lsn, bytes)) in records.iter().enumerate() {
        assert_eq!(*lsn, i as u64 + 1, "LSNs are contiguous");
        let len = if *lsn <= 200 {
            (*lsn as usize * 37) % 3000
        } else {
            10
        };
        assert_eq!(bytes, &payload(*lsn, len));
    }
}

#[test]
fn segment_names_sort_in_lsn_order() {
    assert_eq!(record::segment_file_name(7), "00000000000000000007.wal");
    assert!(record::segment_file_name(9) < record::segment_file_name(10));
    assert_eq!(
        record::parse_segment_file_name("00000000000000000010.wal"),
        Some(10)
    );
    assert_eq!(record::parse_segment_file_name("10.wal"), None);
}

#[test]
fn replay_visits_only_records_from_the_requested_lsn() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 50, |_| 100);
    wal.close().unwrap();
    let mut seen = Vec::new();
    let (_wal, recovered) =
        Wal::open_with(Arc::new(StdFs), dir.path(), small_options(), 41, &mut |r| {
            seen.push(r.lsn);
            Ok(())
        })
        .unwrap();
    assert_eq!(seen, (41..=50).collect::<Vec<_>>());
    assert_eq!(recovered.records_replayed, 10);
}

#[test]
fn oversized_record_is_refused_with_a_typed_error() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    let err = wal.append(vec![0; 16 * 1024 + 1]).err().unwrap();
    assert!(
        matches!(
            err,
            Error::RecordTooLarge {
                len: 16385,
                max: 16384
            }
        ),
        "{err}"
    );
    // Nothing was consumed: the next record still gets LSN 1.
    assert_eq!(wal.append(vec![1]).unwrap().wait().unwrap(), 1);
}

#[test]
fn a_second_open_of_the_same_directory_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    let err = Wal::open(dir.path(), small_options()).err().unwrap();
    assert!(matches!(err, Error::Locked { .. }), "{err}");
    wal.close().unwrap();
    Wal::open(dir.path(), small_options()).unwrap();
}

/// Writes records 1..=count to a fresh log and returns the last segment and its byte offsets.
fn log_with_records(dir: &Path, count: u64, len: usize) -> (PathBuf, Vec<u64>) {
    let (wal, _) = Wal::open(dir, small_options()).unwrap();
    // One append at a time, so each record is its own write (batch_pos 0).
    for lsn in 1..=count {
        wal.append(payload(lsn, len)).unwrap().wait().unwrap();
    }
    wal.close().unwrap();
    let last = segments(dir).pop().unwrap();
    let bytes = std::fs::read(&last).unwrap();
    let mut offsets = vec![];
    let mut at = SEGMENT_HEADER_BYTES;
    while let Parsed::Record(r) = record::parse_record(&bytes, at, 1 << 20) {
        offsets.push(at as u64);
        at += r.bytes();
    }
    offsets.push(at as u64);
    (last, offsets)
}

#[test]
fn tail_cut_at_every_byte_of_the_last_record_reopens_cleanly() {
    let template = tempfile::tempdir().unwrap();
    let (last, offsets) = log_with_records(template.path(), 5, 40);
    let (start, end) = (offsets[offsets.len() - 2], offsets[offsets.len() - 1]);
    let name = last.file_name().unwrap().to_owned();
    for cut in start..end {
        let dir = tempfile::tempdir().unwrap();
        std::fs::copy(&last, dir.path().join(&name)).unwrap();
        std::fs::OpenOptions::new()
            .write(true)
            .open(dir.path().join(&name))
            .unwrap()
            .set_len(cut)
            .unwrap();
        let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
        assert_eq!(
            recovered.last_lsn, 4,
            "cut at {cut}: the partial record is dropped"
        );
        assert_eq!(recovered.torn_tail.is_some(), cut > start, "cut at {cut}");
        assert_eq!(
            wal.append(b"next".to_vec()).unwrap().wait().unwrap(),
            5,
            "LSNs continue"
        );
        wal.close().unwrap();
        // Recovery is idempotent: a second open finds the same log and nothing torn.
        let (_, again) = Wal::open(dir.path(), small_options()).unwrap();
        assert_eq!(again.last_lsn, 5);
        assert!(again.torn_tail.is_none());
    }
}

#[test]
fn garbage_after_the_tail_is_cut() {
    let dir = tempfile::tempdir().unwrap();
    let (last, offsets) = log_with_records(dir.path(), 5, 40);
    let end = *offsets.last().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &payload(99, 300), end).unwrap();
    drop(file);
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.last_lsn, 5);
    let (path, offset, _) = recovered.torn_tail.unwrap();
    assert_eq!((path, offset), (last, end));
    wal.close().unwrap();
    assert_eq!(read_all(dir.path(), &small_options()).len(), 5);
}

#[test]
fn repeated_record_after_the_tail_is_corruption_not_a_tear() {
    // A valid copy of an older record beyond the end cannot come from a torn final write.
    let dir = tempfile::tempdir().unwrap();
    let (last, offsets) = log_with_records(dir.path(), 5, 40);
    let bytes = std::fs::read(&last).unwrap();
    let third = bytes[offsets[2] as usize..offsets[3] as usize].to_vec();
    let end = *offsets.last().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xAB; 7], end).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &third, end + 7).unwrap();
    drop(file);
    let err = Wal::open(dir.path(), small_options()).err().unwrap();
    assert!(err.is_corruption(), "{err}");
}

#[test]
fn flipped_bit_in_an_earlier_record_is_a_hard_error_naming_file_and_offset() {
    let dir = tempfile::tempdir().unwrap();
    let (last, offsets) = log_with_records(dir.path(), 6, 40);
    let target = offsets[2] + RECORD_HEADER_BYTES as u64 + 5; // inside record 3's payload
    flip_bit(&last, target);
    let err = Wal::open(dir.path(), small_options()).err().unwrap();
    match &err {
        Error::Corruption { path, offset, .. } => {
            assert_eq!((path, *offset), (&last, offsets[2]), "{err}");
        }
        other => panic!("expected corruption, got {other}"),
    }
    let message = err.to_string();
    assert!(
        message.contains(last.file_name().unwrap().to_str().unwrap()),
        "{message}"
    );
    assert!(
        message.contains(&format!("offset {}", offsets[2])),
        "{message}"
    );
    // Refusal changes nothing: it refuses again, the same way.
    let again = Wal::open(dir.path(), small_options()).err().unwrap();
    assert_eq!(again.to_string(), message);
}

#[test]
fn flipped_bit_in_an_earlier_segment_is_a_hard_error() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    wal.close().unwrap();
    let all = segments(dir.path());
    assert!(all.len() >= 3);
    // The last record of the first segment: damage there must not pass for a tear.
    let first = std::fs::read(&all[0]).unwrap();
    let mut at = SEGMENT_HEADER_BYTES;
    let mut last_start = at;
    while let Parsed::Record(r) = record::parse_record(&first, at, 1 << 20) {
        last_start = at;
        at += r.bytes();
    }
    flip_bit(&all[0], last_start as u64 + 30);
    let err = Wal::open(dir.path(), small_options()).err().unwrap();
    match err {
        Error::Corruption { path, offset, .. } => {
            assert_eq!((path, offset), (all[0].clone(), last_start as u64))
        }
        other => panic!("expected corruption, got {other}"),
    }
}

#[test]
fn a_missing_middle_segment_is_corruption() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    wal.close().unwrap();
    let all = segments(dir.path());
    std::fs::remove_file(&all[1]).unwrap();
    let err = Wal::open(dir.path(), small_options()).err().unwrap();
    assert!(err.is_corruption(), "{err}");
    assert!(
        err.to_string()
            .contains(all[2].file_name().unwrap().to_str().unwrap()),
        "{err}"
    );
}

#[test]
fn torn_final_write_with_a_valid_record_of_the_same_write_after_the_hole_is_a_tear() {
    // Pages of one write can reach the disk in any order: a hole, then a valid later record of the
    // same write. That write was never acknowledged, so recovery must cut it, not refuse.
    let dir = tempfile::tempdir().unwrap();
    let options = small_options();
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    wal.append(payload(1, 40)).unwrap().wait().unwrap();
    wal.close().unwrap();
    let last = segments(dir.path()).pop().unwrap();
    let start = (SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 40) as u64;
    // Forge one write of records 2, 3, 4 (batch_pos 0, 1, 2) and lose record 3's bytes.
    let mut buf = Vec::new();
    record::encode_record(&mut buf, 2, 0, &payload(2, 40));
    let hole_start = buf.len();
    record::encode_record(&mut buf, 3, 1, &payload(3, 40));
    let hole_end = buf.len();
    record::encode_record(&mut buf, 4, 2, &payload(4, 40));
    buf[hole_start..hole_end].fill(0);
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &buf, start).unwrap();
    drop(file);
    let (wal, recovered) = Wal::open(dir.path(), options.clone()).unwrap();
    assert_eq!(recovered.last_lsn, 2);
    assert_eq!(
        recovered.torn_tail.as_ref().unwrap().1,
        start + hole_start as u64
    );
    wal.close().unwrap();

    // The same picture, but the record after the hole belongs to a later write (batch_pos 0):
    // the hole was durable once, so this is corruption.
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    wal.append(payload(1, 40)).unwrap().wait().unwrap();
    wal.close().unwrap();
    let last = segments(dir.path()).pop().unwrap();
    let mut buf = Vec::new();
    record::encode_record(&mut buf, 2, 0, &payload(2, 40));
    let hole_start = buf.len();
    record::encode_record(&mut buf, 3, 0, &payload(3, 40));
    let hole_end = buf.len();
    record::encode_record(&mut buf, 4, 0, &payload(4, 40));
    buf[hole_start..hole_end].fill(0);
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &buf, start).unwrap();
    drop(file);
    let err = Wal::open(dir.path(), options).err().unwrap();
    assert!(err.is_corruption(), "{err}");
}

fn flip_bit(path: &Path, offset: u64) {
    let mut bytes = std::fs::read(path).unwrap();
    bytes[offset as usize] ^= 0x10;
    std::fs::write(path, bytes).unwrap();
}

#[test]
fn a_half_created_segment_from_a_crash_is_removed() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 3, |_| 10);
    wal.close().unwrap();
    let temp = dir.path().join("00000000000000000004.wal.tmp");
    std::fs::write(&temp, [0u8; 100]).unwrap();
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.last_lsn, 3);
    assert!(!temp.exists());
    assert_eq!(wal.append(vec![7]).unwrap().wait().unwrap(), 4);
}

/// A log on a [`FaultyFs`] in `dir` holding records 1 to 3, durable.
fn open_faulty_with_three_records(dir: &Path) -> (Wal, FaultyFs) {
    let fs = FaultyFs::new();
    let (wal, _) = Wal::open_with(
        Arc::new(fs.clone()),
        dir,
        small_options(),
        u64::MAX,
        &mut |_| Ok(()),
    )
    .unwrap();
    fill(&wal, 1, 3, |_| 10);
    (wal, fs)
}

#[test]
fn fsync_failure_poisons_the_log_and_is_never_retried() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, fs) = open_faulty_with_three_records(dir.path());
    fs.fail_sync_after(0);
    let err = wal.append(vec![1]).unwrap().wait().err().unwrap();
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
    assert!(
        err.to_string().contains("injected fdatasync failure"),
        "{err}"
    );
    assert!(wal.is_poisoned());
    assert_eq!(
        wal.durable_lsn(),
        3,
        "the failed record is never reported durable"
    );
    let syncs = fs.syncs_seen();
    let later = wal.append(vec![2]);
    assert!(matches!(later, Err(Error::Poisoned { .. })));
    assert_eq!(
        fs.syncs_seen(),
        syncs,
        "no fsync is retried after poisoning"
    );
}

#[test]
fn write_failure_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let fs = FaultyFs::new();
    let (wal, _) = Wal::open_with(
        Arc::new(fs.clone()),
        dir.path(),
        small_options(),
        u64::MAX,
        &mut |_| Ok(()),
    )
    .unwrap();
    fs.fail_write_after(0);
    let err = wal.append(vec![1]).unwrap().wait().err().unwrap();
    assert!(matches!(err, Error::Poisoned { .. }), "{err}");
}

/// Lets held syncs through when dropped: a test that fails while the writer is held then
/// fails instead of hanging in the log's shutdown (declared after the log, it drops first).
struct ReleaseSyncs(FaultyFs);

impl Drop for ReleaseSyncs {
    fn drop(&mut self) {
        self.0.hold_segment_syncs(false);
    }
}

/// A log on a [`FaultyFs`] whose writer's queue holds `queue_bytes_max` bytes, with record 1
/// (1,000 bytes) taken by the writer and held in its sync.
fn open_with_the_writer_held(
    dir: &Path,
    queue_bytes_max: usize,
) -> (Wal, ReleaseSyncs, crate::Append) {
    let fs = FaultyFs::new();
    let options = Options {
        queue_bytes_max,
        ..small_options()
    };
    let (wal, _) = Wal::open_with(
        Arc::new(fs.clone()),
        dir,
        options,
        u64::MAX,
        &mut |_| Ok(()),
    )
    .unwrap();
    fs.hold_segment_syncs(true);
    let first = wal.append(payload(1, 1_000)).unwrap();
    fs.wait_for_a_held_sync();
    (wal, ReleaseSyncs(fs), first)
}

/// Appends records `lsns` of 1,000 bytes on another thread; their outcomes come back on the
/// returned channel when the last append returns.
fn append_elsewhere(
    wal: &Wal,
    lsns: std::ops::RangeInclusive<u64>,
) -> crossbeam_channel::Receiver<Vec<crate::Result<crate::Append>>> {
    let wal = wal.clone();
    let (done, outcomes) = crossbeam_channel::bounded(1);
    std::thread::spawn(move || {
        let _ = done.send(lsns.map(|lsn| wal.append(payload(lsn, 1_000))).collect());
    });
    outcomes
}

/// Spins until an appender waits for room in the writer's queue; fails if the appender
/// returned without ever waiting.
fn until_an_appender_waits(
    wal: &Wal,
    appender: &crossbeam_channel::Receiver<Vec<crate::Result<crate::Append>>>,
) {
    while wal.appenders_waiting() == 0 {
        assert!(
            appender.is_empty(),
            "every append found room: the queue is not bounded by bytes"
        );
        std::thread::yield_now();
    }
}

/// How long an appender waiting for room may take to be woken before the test fails, instead
/// of hanging.
const NEVER_WOKEN: std::time::Duration = std::time::Duration::from_secs(60);

/// The writer's queue is bounded by bytes, not only by records: while the writer is held in a
/// sync, appenders queue records until the budget is spent and the next one waits for room;
/// once the sync goes through, every record is written, in order, and the room is given back.
#[test]
fn appenders_wait_once_the_writers_queue_holds_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    // Room for seven records of 1,000 bytes (each counted with 48 bytes beside it).
    let budget = 8 * 1024;
    let (wal, fs, first) = open_with_the_writer_held(dir.path(), budget);
    let appender = append_elsewhere(&wal, 2..=12);
    until_an_appender_waits(&wal, &appender);
    assert_eq!(wal.last_lsn(), 8, "records 2 to 8 queued, record 9 waits");
    assert!(wal.queued_bytes() <= budget, "{}", wal.queued_bytes());
    assert_eq!(wal.durable_lsn(), 0);
    fs.0.hold_segment_syncs(false);
    assert_eq!(first.wait().unwrap(), 1);
    let tickets = appender
        .recv_timeout(NEVER_WOKEN)
        .expect("the appender gets room");
    for (ticket, lsn) in tickets.into_iter().zip(2..) {
        assert_eq!(ticket.unwrap().wait().unwrap(), lsn);
    }
    assert_eq!(wal.queued_bytes(), 0, "the writer gave back every byte");
    let options = small_options();
    wal.close().unwrap();
    let read: Vec<(u64, Vec<u8>)> = read_all(dir.path(), &options);
    let expected: Vec<(u64, Vec<u8>)> = (1..=12).map(|lsn| (lsn, payload(lsn, 1_000))).collect();
    assert_eq!(read, expected, "every record once, in order");
}

/// An appender waiting for room is told when the writer stops (here: its held sync fails and
/// poisons the log) instead of waiting for room that will never come.
#[test]
fn an_appender_waiting_for_room_is_told_when_the_writer_stops() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, fs, first) = open_with_the_writer_held(dir.path(), 4 * 1024);
    let appender = append_elsewhere(&wal, 2..=8);
    until_an_appender_waits(&wal, &appender);
    fs.0.fail_sync_after(0);
    fs.0.hold_segment_syncs(false);
    assert!(matches!(first.wait(), Err(Error::Poisoned { .. })));
    let Ok(outcomes) = appender.recv_timeout(NEVER_WOKEN) else {
        // Its appender holds the append lock for good: closing the log would wait for it.
        std::mem::forget(wal);
        panic!("the waiting appender is never woken when the writer stops");
    };
    // Records 2 to 4 were queued (3 x 1,048 bytes of 4,096); record 5 waited and is refused.
    assert!(
        matches!(outcomes.get(3), Some(Err(Error::Poisoned { .. }))),
        "the waiting appender is refused as poisoned, not left waiting: {:?}",
        outcomes.get(3).map(|outcome| outcome.as_ref().err())
    );
    assert_eq!(wal.last_lsn(), 4, "a refused append takes no LSN");
    assert_eq!(
        wal.queued_bytes(),
        0,
        "the stopped writer's queue holds nothing"
    );
    for ticket in outcomes.into_iter().flatten() {
        assert!(
            ticket.wait().is_err(),
            "nothing after the failed sync is durable"
        );
    }
    assert!(wal.is_poisoned());
}

/// Invariant 1 at the log's edge: an append is not durable, and its ticket does not resolve,
/// while its segment's fdatasync is held back; letting the sync through resolves it.
#[test]
fn an_append_resolves_only_after_its_segment_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, fs) = open_faulty_with_three_records(dir.path());
    fs.hold_segment_syncs(true);
    let ticket = wal.append(vec![7; 10]).unwrap();
    let lsn = ticket.lsn();
    fs.wait_for_a_held_sync();
    // The record is written and its sync has begun, but is held: not durable yet.
    assert!(
        wal.durable_lsn() < lsn,
        "durable {} >= {lsn}",
        wal.durable_lsn()
    );
    let waiter = std::thread::spawn(move || ticket.wait());
    assert!(!waiter.is_finished());
    fs.hold_segment_syncs(false);
    assert_eq!(waiter.join().unwrap().unwrap(), lsn);
    assert!(wal.durable_lsn() >= lsn);
}

#[test]
fn concurrent_appenders_share_syncs_and_every_ack_is_durable() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        segment_bytes: 1 << 20,
        record_bytes_max: 1024,
        ..Options::default()
    };
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    let threads: Vec<_> = (0..16u8)
        .map(|t| {
            let wal = wal.clone();
            std::thread::spawn(move || {
                let mut acked = Vec::new();
                for i in 0..200u32 {
                    let mut body = vec![t];
                    body.extend_from_slice(&i.to_le_bytes());
                    let lsn = wal.append(body.clone()).unwrap().wait().unwrap();
                    assert!(wal.durable_lsn() >= lsn, "acknowledged before durable");
                    acked.push((lsn, body));
                }
                acked
            })
        })
        .collect();
    let acked: Vec<(u64, Vec<u8>)> = threads
        .into_iter()
        .flat_map(|h| h.join().unwrap())
        .collect();
    let stats = wal.stats();
    wal.close().unwrap();
    assert_eq!(acked.len(), 3200);
    assert!(
        stats.syncs < 3200,
        "group commit shares syncs: {} syncs for 3200 records",
        stats.syncs
    );
    let records: std::collections::HashMap<u64, Vec<u8>> =
        read_all(dir.path(), &options).into_iter().collect();
    assert_eq!(records.len(), 3200);
    for (lsn, body) in acked {
        assert_eq!(records[&lsn], body);
    }
    // Per appender, LSN order is submission order.
}

#[test]
fn append_future_resolves_when_durable() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    let tickets: Vec<_> = (0..50).map(|i| wal.append(vec![i]).unwrap()).collect();
    for (i, ticket) in tickets.into_iter().enumerate() {
        assert_eq!(block_on(ticket).unwrap(), i as u64 + 1);
    }
    assert!(wal.durable_lsn() >= 50);
}

/// A minimal executor: parks the thread until the waker unparks it.
fn block_on<F: std::future::Future>(future: F) -> F::Output {
    struct Unpark(std::thread::Thread);
    impl std::task::Wake for Unpark {
        fn wake(self: Arc<Self>) {
            self.0.unpark();
        }
    }
    let waker = std::task::Waker::from(Arc::new(Unpark(std::thread::current())));
    let mut cx = std::task::Context::from_waker(&waker);
    let mut future = std::pin::pin!(future);
    loop {
        if let std::task::Poll::Ready(out) = future.as_mut().poll(&mut cx) {
            return out;
        }
        std::thread::park();
    }
}

#[test]
fn fsync_never_still_orders_and_persists_records_across_a_clean_close() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        fsync: FsyncPolicy::Never,
        ..small_options()
    };
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    fill(&wal, 1, 20, |_| 100);
    wal.close().unwrap();
    assert_eq!(read_all(dir.path(), &options).len(), 20);
}

#[test]
fn closing_releases_the_directory_even_while_clones_live() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    let other = wal.clone();
    wal.close().unwrap();
    assert!(matches!(other.append(vec![1]), Err(Error::Closed)));
    assert!(matches!(other.checkpoint(0, b"x"), Err(Error::Closed)));
    // The stray clone does not keep the directory locked.
    let (reopened, _) = Wal::open(dir.path(), small_options()).unwrap();
    reopened.close().unwrap();
}

// ---- snapshots ----

#[test]
fn checkpoint_keeps_two_snapshots_and_removes_covered_segments() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    let first_segment_lsn = |dir: &Path| {
        let first = segments(dir).into_iter().next().unwrap();
        record::parse_segment_file_name(first.file_name().unwrap().to_str().unwrap()).unwrap()
    };
    let before = segments(dir.path()).len();
    assert!(before >= 4);
    wal.checkpoint(40, b"state@40").unwrap();
    // Only one snapshot exists: it is the oldest kept, and segments wholly at or below 40 go.
    let after_first = segments(dir.path()).len();
    assert!(
        after_first < before,
        "segments covered by the snapshot were removed"
    );
    assert!(
        first_segment_lsn(dir.path()) <= 41,
        "records after LSN 40 remain"
    );
    wal.checkpoint(90, b"state@90").unwrap();
    assert_eq!(
        segments(dir.path()).len(),
        after_first,
        "the older kept snapshot (40) still needs its log"
    );
    fill(&wal, 101, 50, |_| 2000);
    wal.checkpoint(150, b"state@150").unwrap();
    let snaps = snapshot::list(&StdFs, dir.path()).unwrap();
    assert_eq!(snaps.iter().map(|s| s.0).collect::<Vec<_>>(), vec![150, 90]);
    let first = first_segment_lsn(dir.path());
    assert!(
        first > 41 && first <= 91,
        "log kept from the oldest kept snapshot (90); starts at {first}"
    );
    wal.close().unwrap();

    // Replay from the oldest kept snapshot still works after a restart.
    let mut seen = 0;
    let (_wal, _) = Wal::open_with(
        Arc::new(StdFs),
        dir.path(),
        small_options(),
        91,
        &mut |_| {
            seen += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, 60);
    // Asking for records before the retained log is a typed error, not silence.
    let err = crate::reader::read_from(dir.path(), 16 * 1024, 1, &mut |_| Ok(()))
        .err()
        .unwrap();
    assert!(matches!(err, Error::Unavailable { .. }), "{err}");
}

#[test]
fn checkpoint_beyond_the_durable_lsn_is_refused() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    assert!(wal.checkpoint(5, b"x").is_err());
}

#[test]
fn crash_between_snapshot_temp_write_and_rename_leaves_the_previous_snapshot() {
    let dir = tempfile::tempdir().unwrap();
    snapshot::write(&StdFs, dir.path(), 10, b"ten").unwrap();
    // The crash: a complete temp file that was never renamed.
    std::fs::write(
        dir.path().join("00000000000000000020.snap.tmp"),
        snapshot::encode(20, b"twenty"),
    )
    .unwrap();
    let loaded = snapshot::load_newest(&StdFs, dir.path()).unwrap().unwrap();
    assert_eq!((loaded.lsn, loaded.payload.as_slice()), (10, &b"ten"[..]));
    snapshot::prune(&StdFs, dir.path(), 2).unwrap();
    assert!(!dir.path().join("00000000000000000020.snap.tmp").exists());
}

#[test]
fn corrupt_newest_snapshot_falls_back_to_the_previous() {
    let dir = tempfile::tempdir().unwrap();
    snapshot::write(&StdFs, dir.path(), 10, b"ten").unwrap();
    let newest = snapshot::write(&StdFs, dir.path(), 20, b"twenty").unwrap();
    flip_bit(&newest, 45);
    let loaded = snapshot::load_newest(&StdFs, dir.path()).unwrap().unwrap();
    assert_eq!(loaded.lsn, 10);
    // With every snapshot corrupt, loading refuses rather than starting from nothing.
    let older = dir.path().join("00000000000000000010.snap");
    flip_bit(&older, 3);
    let err = snapshot::load_newest(&StdFs, dir.path()).err().unwrap();
    assert!(err.is_corruption(), "{err}");
}

#[test]
fn snapshot_decode_rejects_truncation_and_trailing_bytes() {
    let bytes = snapshot::encode(7, b"payload");
    assert_eq!(snapshot::decode(&bytes).unwrap(), (7, &b"payload"[..]));
    for cut in 0..bytes.len() {
        assert!(snapshot::decode(&bytes[..cut]).is_err(), "cut at {cut}");
    }
    let mut longer = bytes.clone();
    longer.push(0);
    assert!(snapshot::decode(&longer).is_err());
}

#[test]
fn record_frame_validates_before_encoding_and_after_decoding() {
    let mut buf = Vec::new();
    record::encode_record(&mut buf, 42, 3, b"hello");
    match record::parse_record(&buf, 0, 1024) {
        Parsed::Record(r) => {
            assert_eq!((r.lsn, r.batch_pos, r.payload), (42, 3, &b"hello"[..]));
            assert_eq!(r.write_first_lsn(), 39);
        }
        other => panic!("{other:?}"),
    }
    // Every single-bit flip anywhere in the frame is detected.
    for byte in 0..buf.len() {
        for bit in 0..8 {
            let mut bad = buf.clone();
            bad[byte] ^= 1 << bit;
            assert!(
                !matches!(record::parse_record(&bad, 0, 1024), Parsed::Record(r) if r.lsn == 42 && r.payload == b"hello"),
                "flip of bit {bit} in byte {byte} went unnoticed"
            );
        }
    }
    // A length over the maximum is refused before the payload is touched.
    assert!(matches!(
        record::parse_record(&buf, 0, 4),
        Parsed::Invalid(_)
    ));
}

// ---- properties ----

proptest! {
    #![proptest_config(ProptestConfig { cases: 12, ..ProptestConfig::default() })]

    /// Random record sizes from 0 B to 1 MiB, across several rotations, read back identical and in order.
    #[test]
    fn random_records_survive_rotation_and_reopen(
        sizes in prop::collection::vec(prop_oneof![0usize..64, 64usize..4096, 4096usize..=(1 << 20)], 1..24),
        concurrent in any::<bool>(),
    ) {
        let dir = tempfile::tempdir().unwrap();
        let options = Options { segment_bytes: 2 << 20, record_bytes_max: 1 << 20, ..Options::default() };
        let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
        if concurrent {
            let tickets: Vec<_> = sizes.iter().enumerate().map(|(i, &n)| wal.append(payload(i as u64 + 1, n)).unwrap()).collect();
            for t in tickets { t.wait().unwrap(); }
        } else {
            for (i, &n) in sizes.iter().enumerate() { wal.append(payload(i as u64 + 1, n)).unwrap().wait().unwrap(); }
        }
        wal.close().unwrap();
        let (wal, recovered) = Wal::open(dir.path(), options.clone()).unwrap();
        prop_assert_eq!(recovered.last_lsn, sizes.len() as u64);
        prop_assert!(recovered.torn_tail.is_none());
        wal.close().unwrap();
        let records = read_all(dir.path(), &options);
        prop_assert_eq!(records.len(), sizes.len());
        for (i, (lsn, bytes)) in records.iter().enumerate() {
            prop_assert_eq!(*lsn, i as u64 + 1);
            prop_assert_eq!(bytes, &payload(*lsn, sizes[i]));
        }
    }
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 256, ..ProptestConfig::default() })]

    /// The parsers never panic on arbitrary bytes, and never invent a record.
    #[test]
    fn parsers_never_panic_on_arbitrary_bytes(bytes in prop::collection::vec(any::<u8>(), 0..4096), offset in 0usize..4200) {
        let _ = record::decode_segment_header(&bytes);
        let _ = record::parse_record(&bytes, offset, 1024);
        let _ = snapshot::decode(&bytes);
        let dir = tempfile::tempdir().unwrap();
        std::fs::write(dir.path().join(record::segment_file_name(1)), &bytes).unwrap();
        let _ = crate::reader::read_from(dir.path(), 1024, 1, &mut |_| Ok(()));
    }

    /// A valid segment with arbitrary bytes overwritten anywhere either opens with a prefix of the
    /// original records, or refuses with corruption: it never yields a record that was not written.
    #[test]
    fn damaged_segments_yield_a_prefix_or_an_error(at in 0usize..3000, junk in prop::collection::vec(any::<u8>(), 1..64)) {
        let dir = tempfile::tempdir().unwrap();
        let options = small_options();
        let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
        fill(&wal, 1, 20, |lsn| lsn as usize * 7);
        wal.close().unwrap();
        let path = segments(dir.path()).pop().unwrap();
        let mut bytes = std::fs::read(&path).unwrap();
        for (i, b) in junk.iter().enumerate() {
            if let Some(slot) = bytes.get_mut(at + i) { *slot = *b; }
        }
        std::fs::write(&path, &bytes).unwrap();
        let mut seen = Vec::new();
        let outcome = crate::reader::read_from(dir.path(), options.record_bytes_max, 1, &mut |r| {
            seen.push((r.lsn, r.payload.to_vec()));
            Ok(())
        });
        for (lsn, body) in &seen {
            prop_assert_eq!(body, &payload(*lsn, *lsn as usize * 7));
        }
        if outcome.is_ok() {
            prop_assert!(seen.iter().enumerate().all(|(i, (lsn, _))| *lsn == i as u64 + 1));
        }
    }
}

#[test]
fn std_fs_lists_what_it_creates() {
    let dir = tempfile::tempdir().unwrap();
    let file = StdFs.create(&dir.path().join("a")).unwrap();
    file.write_all_at(b"xy", 0).unwrap();
    assert_eq!(file.len().unwrap(), 2);
    assert_eq!(StdFs.list(dir.path()).unwrap(), vec![PathBuf::from("a")]);
}

#[test]
fn non_zero_bytes_beyond_the_longest_write_are_corruption_not_a_tear() {
    let dir = tempfile::tempdir().unwrap();
    let options = Options {
        segment_bytes: 10 << 20,
        record_bytes_max: 4096,
        ..Options::default()
    };
    let (wal, _) = Wal::open(dir.path(), options.clone()).unwrap();
    wal.append(payload(1, 40)).unwrap().wait().unwrap();
    wal.close().unwrap();
    let last = segments(dir.path()).pop().unwrap();
    let end = (SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES + 40) as u64;
    let far = end + record::write_bytes_max(options.record_bytes_max) as u64 + 100;
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0xEE; 16], end).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0x5A; 16], far).unwrap();
    drop(file);
    let opened = Wal::open(dir.path(), options.clone());
    let err = match opened {
        Ok((_, recovered)) => panic!(
            "opened: {recovered:?}, file len {}",
            std::fs::metadata(&last).unwrap().len()
        ),
        Err(err) => err,
    };
    assert!(err.is_corruption(), "{err}");
    assert!(
        err.to_string()
            .contains("beyond the longest possible write"),
        "{err}"
    );

    // The same damage within reach of one write is a tear and is cut.
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0; 16], far).unwrap();
    drop(file);
    let (_, recovered) = Wal::open(dir.path(), options).unwrap();
    assert_eq!(recovered.last_lsn, 1);
    assert!(recovered.torn_tail.is_some());
}

#[test]
fn cutting_a_torn_tail_keeps_the_segment_preallocated() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir().unwrap();
    let (last, offsets) = log_with_records(dir.path(), 3, 40);
    let end = *offsets.last().unwrap();
    let file = std::fs::OpenOptions::new().write(true).open(&last).unwrap();
    std::os::unix::fs::FileExt::write_all_at(&file, &[0x77; 500], end).unwrap();
    drop(file);
    let (_, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert!(recovered.torn_tail.is_some());
    let meta = std::fs::metadata(&last).unwrap();
    assert_eq!(meta.len(), small_options().segment_bytes);
    assert!(
        meta.blocks() * 512 >= meta.len(),
        "the repair left a hole: {} of {} bytes allocated",
        meta.blocks() * 512,
        meta.len()
    );
}

#[test]
fn a_stale_spare_segment_is_replaced_and_rotation_uses_spares() {
    let dir = tempfile::tempdir().unwrap();
    std::fs::write(
        dir.path().join(crate::writer::SPARE_NAME),
        b"left by a crash",
    )
    .unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 120, |_| 2000);
    wal.close().unwrap();
    assert!(segments(dir.path()).len() >= 3);
    let records = read_all(dir.path(), &small_options());
    assert_eq!(records.len(), 120);
    let (_, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.last_lsn, 120);
}

#[test]
fn snapshot_reserved_bytes_must_be_zero() {
    let mut bytes = snapshot::encode(7, b"state");
    bytes[36] = 0xFF;
    assert!(snapshot::decode(&bytes).is_err());
    let mut bytes = snapshot::encode(7, b"state");
    bytes[12] = 1;
    assert!(snapshot::decode(&bytes).is_err());
}

#[test]
fn the_durable_tap_gets_every_record_in_order_after_its_sync() {
    let dir = tempfile::tempdir().unwrap();
    let (tap, records) = crate::tap::channel(4 * 1024);
    let options = Options {
        durable_tap: Some(tap),
        ..small_options()
    };
    // The test keeps no sender of its own: the channel must close when the writer stops.
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    let consumer = std::thread::spawn(move || {
        let mut seen = Vec::new();
        while let Ok(batch) = records.recv() {
            seen.extend(batch);
        }
        seen
    });
    // Enough to rotate segments (a batch can end a segment and start the next).
    fill(&wal, 1, 200, |lsn| 500 + (lsn as usize % 700));
    let durable = wal.durable_lsn();
    wal.close().unwrap();
    let seen = consumer.join().unwrap();
    assert_eq!(durable, 200);
    assert_eq!(
        seen.iter().map(|r| r.lsn).collect::<Vec<_>>(),
        (1..=200).collect::<Vec<_>>(),
        "every record once, in LSN order; the channel closed with the writer"
    );
    for record in &seen {
        assert_eq!(
            record.payload,
            payload(record.lsn, 500 + (record.lsn as usize % 700))
        );
    }
    assert_eq!(read_all(dir.path(), &small_options()).len(), 200);
}

#[test]
fn the_writer_syncs_on_while_the_tap_consumer_pauses_within_its_byte_budget() {
    let dir = tempfile::tempdir().unwrap();
    // Room for about 250 records of 1,000 bytes, however the writer batches them.
    let (tap, records) = crate::tap::channel(256 * 1024);
    let options = Options {
        durable_tap: Some(tap),
        ..small_options()
    };
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    // The consumer reads nothing yet. Each append is waited for before the next, so each is a
    // batch of its own: a bound of a few batches would stop the writer after a few of them.
    for lsn in 1..=200 {
        assert_eq!(
            wal.append(payload(lsn, 1_000)).unwrap().wait().unwrap(),
            lsn
        );
    }
    assert_eq!(wal.durable_lsn(), 200);
    wal.close().unwrap();
    let mut seen = Vec::new();
    while let Ok(batch) = records.recv() {
        seen.extend(batch.into_iter().map(|record| record.lsn));
    }
    assert_eq!(
        seen,
        (1..=200).collect::<Vec<_>>(),
        "every record once, in order"
    );
}

#[test]
fn a_tap_consumer_that_takes_nothing_stops_the_writer_once_the_budget_is_spent() {
    let dir = tempfile::tempdir().unwrap();
    // Room for seven records of 1,000 bytes (each is counted with 48 bytes of overhead).
    let budget = 8 * 1024;
    let (tap, records) = crate::tap::channel(budget);
    let watch = tap.clone();
    let options = Options {
        durable_tap: Some(tap),
        ..small_options()
    };
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    // Each append is waited for, so each is a batch of its own. Record 8 is synced, but finds no
    // room: the writer waits with it.
    for lsn in 1..=8 {
        assert_eq!(
            wal.append(payload(lsn, 1_000)).unwrap().wait().unwrap(),
            lsn
        );
    }
    while watch.waiting() == 0 {
        std::thread::yield_now();
    }
    assert!(watch.held_bytes() <= budget, "{}", watch.held_bytes());
    // While it waits, nothing more is written or synced.
    let ninth = wal.append(payload(9, 1_000)).unwrap();
    assert_eq!(wal.durable_lsn(), 8);
    let mut seen: Vec<u64> = records.recv().unwrap().iter().map(|r| r.lsn).collect();
    assert_eq!(seen, vec![1]);
    // Taking one batch makes room: record 8 is handed over and record 9 synced.
    assert_eq!(ninth.wait().unwrap(), 9);
    while seen.last() != Some(&9) {
        seen.extend(records.recv().unwrap().into_iter().map(|record| record.lsn));
    }
    assert_eq!(
        seen,
        (1..=9).collect::<Vec<_>>(),
        "every record once, in order"
    );
    drop(watch);
    wal.close().unwrap();
    assert!(
        records.recv().is_err(),
        "the channel closes with the writer"
    );
}

#[test]
fn a_tap_whose_consumer_hangs_up_poisons_the_log() {
    let dir = tempfile::tempdir().unwrap();
    let (tap, records) = crate::tap::channel(1);
    let options = Options {
        durable_tap: Some(tap),
        ..small_options()
    };
    let (wal, _) = Wal::open(dir.path(), options).unwrap();
    fill(&wal, 1, 1, |_| 10);
    drop(records);
    // Record 2 is written and synced, but nobody can be told: the writer poisons the log right
    // after its sync, so record 3 cannot become durable (refused, or failed while waiting).
    let _ = wal.append(payload(2, 10)).unwrap().wait();
    let third = wal.append(payload(3, 10)).and_then(crate::Append::wait);
    assert!(third.is_err(), "{third:?}");
    assert!(wal.is_poisoned());
}

#[test]
fn the_retention_floor_keeps_segments_a_snapshot_alone_would_drop() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    let before = segments(dir.path()).len();
    wal.set_retention_floor(10);
    wal.checkpoint(90, b"state@90").unwrap();
    let first = segments(dir.path()).into_iter().next().unwrap();
    let first_lsn =
        record::parse_segment_file_name(first.file_name().unwrap().to_str().unwrap()).unwrap();
    assert!(
        first_lsn <= 11,
        "records after the floor (10) stay although the snapshot covers 90; log starts at {first_lsn}"
    );
    wal.set_retention_floor(95);
    wal.checkpoint(95, b"state@95").unwrap();
    assert!(
        segments(dir.path()).len() < before,
        "with the floor raised, covered segments go"
    );
}

// ---- issue 16, item 7: recovery publishes as durable only what it synced; the spare is inspected ----

/// A closed log of 120 records of 2000 bytes: several segments, and the spare its preallocator left.
fn closed_log_with_segments(dir: &Path) -> usize {
    let (wal, _) = Wal::open(dir, small_options()).unwrap();
    fill(&wal, 1, 120, |_| 2000);
    wal.close().unwrap();
    let count = segments(dir).len();
    assert!(count >= 3, "{count} segments");
    count
}

fn open_on(fs: &FaultyFs, dir: &Path) -> crate::Result<(Wal, crate::Recovered)> {
    Wal::open_with(
        Arc::new(fs.clone()),
        dir,
        small_options(),
        u64::MAX,
        &mut |_| Ok(()),
    )
}

#[test]
fn issue_16_recovery_syncs_every_segment_and_the_directory_before_publishing_durable() {
    let dir = tempfile::tempdir().unwrap();
    let count = closed_log_with_segments(dir.path());
    let fs = FaultyFs::new();
    let (wal, recovered) = open_on(&fs, dir.path()).unwrap();
    assert_eq!(recovered.last_lsn, 120);
    assert_eq!(wal.durable_lsn(), 120);
    // By the time `durable_lsn` is readable (open returned), each segment had its fdatasync and
    // the directory its fsync. (The preallocator may add one data sync of its own; never fewer.)
    assert!(
        fs.syncs_seen() >= count as u64,
        "{} data syncs for {count} segments",
        fs.syncs_seen()
    );
    assert!(fs.dir_syncs_seen() >= 1, "the directory was not synced");
}

#[test]
fn issue_16_recovery_that_cannot_sync_the_log_refuses_to_open() {
    let dir = tempfile::tempdir().unwrap();
    closed_log_with_segments(dir.path());

    let fs = FaultyFs::new();
    fs.fail_sync_after(0);
    let err = open_on(&fs, dir.path()).expect_err("open must fail");
    assert!(matches!(err, Error::Io { .. }), "{err}");
    assert!(err.to_string().contains("sync recovered segment"), "{err}");

    let fs = FaultyFs::new();
    fs.fail_dir_sync_after(0);
    let err = open_on(&fs, dir.path()).expect_err("open must fail");
    assert!(err.to_string().contains("sync log directory"), "{err}");

    // Nothing was lost by the refusals.
    let (_, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.last_lsn, 120);
}

#[test]
fn issue_16_an_intact_spare_is_reused_not_rewritten() {
    let dir = tempfile::tempdir().unwrap();
    closed_log_with_segments(dir.path());
    let spare = dir.path().join(crate::writer::SPARE_NAME);
    assert_eq!(
        std::fs::metadata(&spare).unwrap().len(),
        small_options().segment_bytes
    );
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.spare, crate::SpareVerdict::Reused);
    // Rotation takes the reused spare: records keep landing in order.
    fill(&wal, 121, 60, |_| 2000);
    wal.close().unwrap();
    assert_eq!(read_all(dir.path(), &small_options()).len(), 180);

    // A crash after a rotation wrote its header into the spare but before the rename leaves a
    // header over zeros: still what the preallocator and rotation leave, so it is reused too.
    let header = record::encode_segment_header(999);
    let file = StdFs.open(&spare).unwrap();
    file.write_all_at(&header, 0).unwrap();
    drop(file);
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert_eq!(recovered.spare, crate::SpareVerdict::Reused);
    fill(&wal, 181, 60, |_| 2000);
    wal.close().unwrap();
    assert_eq!(read_all(dir.path(), &small_options()).len(), 240);
}

#[test]
fn issue_16_a_damaged_spare_is_removed_with_its_reason() {
    let dir = tempfile::tempdir().unwrap();
    closed_log_with_segments(dir.path());
    let spare = dir.path().join(crate::writer::SPARE_NAME);

    // Cut short: preallocation was interrupted.
    std::fs::write(&spare, vec![0u8; 1000]).unwrap();
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    match &recovered.spare {
        crate::SpareVerdict::Removed(reason) => {
            assert!(reason.contains("1000 bytes"), "{reason}")
        }
        other => panic!("a short spare was {other:?}"),
    }
    wal.close().unwrap();

    // Full length but with data where only zeros belong.
    let mut bytes = vec![0u8; small_options().segment_bytes as usize];
    bytes[40_000] = 0x5A;
    std::fs::write(&spare, &bytes).unwrap();
    let (wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    match &recovered.spare {
        crate::SpareVerdict::Removed(reason) => {
            assert!(reason.contains("offset 40000"), "{reason}")
        }
        other => panic!("a dirty spare was {other:?}"),
    }
    // A fresh spare replaced it and the log still works across rotations.
    fill(&wal, 121, 60, |_| 2000);
    wal.close().unwrap();
    assert_eq!(read_all(dir.path(), &small_options()).len(), 180);

    // A header that is not a segment header.
    let mut bytes = vec![0u8; small_options().segment_bytes as usize];
    bytes[..8].copy_from_slice(b"garbage!");
    std::fs::write(&spare, &bytes).unwrap();
    let (_wal, recovered) = Wal::open(dir.path(), small_options()).unwrap();
    assert!(
        matches!(&recovered.spare, crate::SpareVerdict::Removed(r) if r.contains("segment header")),
        "{:?}",
        recovered.spare
    );
}

// ---- issue 16, item 9: pruning keeps the newest *valid* snapshots ----

#[test]
fn issue_16_pruning_never_deletes_the_last_valid_snapshot_for_corrupt_newer_ones() {
    let dir = tempfile::tempdir().unwrap();
    snapshot::write(&StdFs, dir.path(), 10, b"ten").unwrap();
    let twenty = snapshot::write(&StdFs, dir.path(), 20, b"twenty").unwrap();
    let thirty = snapshot::write(&StdFs, dir.path(), 30, b"thirty").unwrap();
    flip_bit(&twenty, 45);
    flip_bit(&thirty, 3);
    // The newest two names are corrupt; the only valid snapshot is the oldest.
    let oldest_kept = snapshot::prune(&StdFs, dir.path(), 2).unwrap();
    assert_eq!(oldest_kept, Some(10));
    let loaded = snapshot::load_newest(&StdFs, dir.path()).unwrap().unwrap();
    assert_eq!((loaded.lsn, loaded.payload.as_slice()), (10, &b"ten"[..]));

    // A newer valid one arrives: it and 10 are the two valid ones kept.
    snapshot::write(&StdFs, dir.path(), 40, b"forty").unwrap();
    assert_eq!(snapshot::prune(&StdFs, dir.path(), 2).unwrap(), Some(10));
    // And one more: 40 and 50 are kept; 10 and the corrupt ones between go.
    snapshot::write(&StdFs, dir.path(), 50, b"fifty").unwrap();
    assert_eq!(snapshot::prune(&StdFs, dir.path(), 2).unwrap(), Some(40));
    let names: Vec<u64> = snapshot::list(&StdFs, dir.path())
        .unwrap()
        .into_iter()
        .map(|(lsn, _)| lsn)
        .collect();
    assert_eq!(names, vec![50, 40]);
}

#[test]
fn issue_16_a_corrupt_newest_snapshot_does_not_release_the_log_the_valid_one_needs() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 150, |_| 2000);
    wal.checkpoint(40, b"state@40").unwrap();
    // Two newer snapshots that are corrupt on disk (a bad disk, a bug): neither counts.
    std::fs::write(
        dir.path().join(format!("{:020}.snap", 90)),
        b"not a snapshot",
    )
    .unwrap();
    let newest = wal.checkpoint(120, b"state@120").unwrap();
    flip_bit(&newest, 44);
    wal.checkpoint(130, b"state@130").unwrap();
    // Valid: 130 and 40. Every record after 40 must still be in the log.
    let first = segments(dir.path()).into_iter().next().unwrap();
    let first_lsn =
        record::parse_segment_file_name(first.file_name().unwrap().to_str().unwrap()).unwrap();
    assert!(
        first_lsn <= 41,
        "log starts at {first_lsn}, after the valid snapshot 40"
    );
    wal.close().unwrap();
    let mut seen = 0;
    Wal::open_with(
        Arc::new(StdFs),
        dir.path(),
        small_options(),
        41,
        &mut |_| {
            seen += 1;
            Ok(())
        },
    )
    .unwrap();
    assert_eq!(seen, 110);
}

// ---- issue 14, items 6 and 8: retired segments move into an archive, never into neither place ----

/// Segment files (`*.wal`) in `dir`, as first LSNs, in order.
fn segment_lsns(dir: &Path) -> Vec<u64> {
    segments(dir)
        .iter()
        .map(|p| record::parse_segment_file_name(p.file_name().unwrap().to_str().unwrap()).unwrap())
        .collect()
}

fn archive_options(archive: &Path) -> Options {
    Options {
        archive_dir: Some(archive.to_path_buf()),
        ..small_options()
    }
}

/// Every record of the archive followed by the live log, read without changing anything: what
/// `walletd replay --from-archive` reads.
fn read_archive_and_log(archive: &Path, log: &Path) -> crate::Result<Vec<(u64, Vec<u8>)>> {
    let mut out = Vec::new();
    let scan = crate::archive::replay_archived(&StdFs, archive, log, 16 * 1024, &mut |r| {
        out.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })?;
    crate::reader::read_from(log, 16 * 1024, scan.next_lsn, &mut |r| {
        out.push((r.lsn, r.payload.to_vec()));
        Ok(())
    })?;
    Ok(out)
}

fn expected_records(count: u64) -> Vec<(u64, Vec<u8>)> {
    (1..=count).map(|lsn| (lsn, payload(lsn, 2000))).collect()
}

#[test]
fn issue_14_retired_segments_move_into_the_archive_and_read_back_with_the_log_from_lsn_1() {
    use std::os::unix::fs::PermissionsExt as _;
    let dir = tempfile::tempdir().unwrap();
    let log = dir.path().join("wal");
    let archive = dir.path().join("archive").join("walletd");
    let (wal, _) = Wal::open(&log, archive_options(&archive)).unwrap();
    let mode = std::fs::metadata(&archive).unwrap().permissions().mode() & 0o777;
    assert_eq!(mode, 0o700, "the archive directory is created owner-only");
    fill(&wal, 1, 100, |_| 2000);
    let before = segment_lsns(&log);
    wal.checkpoint(90, b"state@90").unwrap();
    let live = segment_lsns(&log);
    let archived = segment_lsns(&archive);
    assert!(!archived.is_empty(), "covered segments were archived");
    assert_eq!(archived.first(), Some(&1));
    assert!(live.first().unwrap() > &1, "and left the log: {live:?}");
    let mut union = archived.clone();
    union.extend(&live);
    assert_eq!(union, before, "every segment is in exactly one place");
    assert_eq!(
        read_archive_and_log(&archive, &log).unwrap(),
        expected_records(100)
    );
    wal.close().unwrap();
    // The log alone no longer starts at 1; with the archive it does.
    let alone = crate::reader::read_from(&log, 16 * 1024, 1, &mut |_| Ok(()));
    assert!(matches!(alone, Err(Error::Unavailable { .. })));
}

#[test]
fn issue_14_without_an_archive_retired_segments_are_deleted() {
    let dir = tempfile::tempdir().unwrap();
    let (wal, _) = Wal::open(dir.path(), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    wal.checkpoint(90, b"state@90").unwrap();
    assert!(segment_lsns(dir.path()).first().unwrap() > &1);
    let entries = std::fs::read_dir(dir.path()).unwrap().count();
    assert!(entries < 10, "no archive appeared: {entries} entries");
}

/// A closed log of 100 records in `root/wal` with its spare in place, so reopening it writes and
/// syncs nothing in the background: every fault armed afterwards hits the checkpoint.
fn closed_log_for_archiving(root: &Path) {
    let (wal, _) = Wal::open(root.join("wal"), small_options()).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    wal.close().unwrap();
}

/// What each fault kind arms: fail the call after `n` more succeed.
#[derive(Debug, Clone, Copy)]
enum Step {
    Link,
    DirSync,
    Remove,
    CopyWrite,
    CopySync,
    CopyRename,
}

impl Step {
    fn arm(self, fs: &FaultyFs, n: u64) {
        match self {
            Step::Link => fs.fail_link_after(n),
            Step::DirSync => fs.fail_dir_sync_after(n),
            Step::Remove => fs.fail_remove_after(n),
            Step::CopyWrite => fs.fail_write_after(n),
            Step::CopySync => fs.fail_sync_after(n),
            Step::CopyRename => fs.fail_rename_after(n),
        }
    }

    fn copies(self) -> bool {
        matches!(self, Step::CopyWrite | Step::CopySync | Step::CopyRename)
    }
}

#[test]
fn issue_14_a_failure_at_any_archiving_step_leaves_every_record_in_the_log_or_the_archive() {
    // For each kind of call the move makes (on the hard-link path and on the copy path), fail the
    // n-th one of the checkpoint for n = 0, 1, ... until a checkpoint gets through: every point at
    // which a move can stop. After each, the archive and the log together still hold records
    // 1..=100 byte for byte, the log reopens, and the next checkpoint finishes the move.
    let steps = [
        Step::Link,
        Step::DirSync,
        Step::Remove,
        Step::DirSync,
        Step::Remove,
        Step::CopyWrite,
        Step::CopySync,
        Step::CopyRename,
    ];
    for (index, step) in steps.into_iter().enumerate() {
        // The second DirSync and Remove rounds run on the copy path.
        let copy_path = step.copies() || index >= 3;
        let mut stopped = 0;
        let mut finished = false;
        for n in 0..40 {
            let root = tempfile::tempdir().unwrap();
            let log = root.path().join("wal");
            let archive = root.path().join("archive");
            closed_log_for_archiving(root.path());
            let segments_before = segment_lsns(&log);
            let fs = FaultyFs::new();
            fs.links_cross_devices(copy_path);
            let (wal, _) = Wal::open_with(
                Arc::new(fs.clone()),
                &log,
                archive_options(&archive),
                u64::MAX,
                &mut |_| Ok(()),
            )
            .unwrap();
            step.arm(&fs, n);
            let outcome = wal.checkpoint(90, b"state@90");
            drop(wal);
            let what = format!("{step:?} failing after {n} (copy path: {copy_path})");
            assert_eq!(
                read_archive_and_log(&archive, &log).unwrap(),
                expected_records(100),
                "{what}: a record is in neither place"
            );
            let mut union = segment_lsns(&archive);
            union.extend(segment_lsns(&log));
            union.sort_unstable();
            union.dedup();
            assert_eq!(union, segments_before, "{what}");
            if outcome.is_ok() {
                finished = true;
                break;
            }
            stopped += 1;
            // The next open works and its checkpoint finishes the move.
            let (wal, recovered) = Wal::open(&log, archive_options(&archive)).unwrap();
            assert_eq!(recovered.last_lsn, 100, "{what}");
            wal.checkpoint(95, b"state@95").unwrap();
            let live = segment_lsns(&log);
            assert!(
                segment_lsns(&archive).iter().all(|lsn| !live.contains(lsn)),
                "{what}: after a finished move no segment is in both places"
            );
            assert_eq!(
                read_archive_and_log(&archive, &log).unwrap(),
                expected_records(100),
                "{what}"
            );
            wal.close().unwrap();
        }
        assert!(finished, "{step:?}: no checkpoint got through");
        assert!(stopped > 0, "{step:?}: no fault ever stopped a move");
    }
}

#[test]
fn issue_14_an_archive_holding_other_bytes_under_a_segment_name_is_refused() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("wal");
    let archive = root.path().join("archive");
    closed_log_for_archiving(root.path());
    std::fs::create_dir_all(&archive).unwrap();
    let first = segments(&log).into_iter().next().unwrap();
    std::fs::write(archive.join(first.file_name().unwrap()), b"another log").unwrap();
    let (wal, _) = Wal::open(&log, archive_options(&archive)).unwrap();
    let error = wal.checkpoint(90, b"state@90").unwrap_err();
    assert!(error.is_corruption(), "{error}");
    assert!(
        error.to_string().contains("belongs to another log"),
        "{error}"
    );
    assert!(first.exists(), "the log keeps its segment");
}

#[test]
fn issue_14_the_archive_cannot_be_the_log_directory() {
    let dir = tempfile::tempdir().unwrap();
    let error = Wal::open(dir.path(), archive_options(dir.path())).unwrap_err();
    assert!(matches!(error, Error::InvalidOptions(_)), "{error}");
}

#[test]
fn issue_14_a_hole_between_the_archive_and_the_log_is_named() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("wal");
    let archive = root.path().join("archive");
    let (wal, _) = Wal::open(&log, archive_options(&archive)).unwrap();
    fill(&wal, 1, 100, |_| 2000);
    wal.checkpoint(90, b"state@90").unwrap();
    wal.close().unwrap();
    let archived = segment_lsns(&archive);
    assert!(archived.len() >= 2, "{archived:?}");
    let live_first = segment_lsns(&log)[0];
    let gap_of = |error: Error| match error {
        Error::Gap {
            first_missing,
            next_present,
            ..
        } => (first_missing, next_present),
        other => panic!("not a gap: {other}"),
    };

    // The archive's last segment gone: the hole ends where the log starts.
    let last = segments(&archive).pop().unwrap();
    let saved = std::fs::read(&last).unwrap();
    std::fs::remove_file(&last).unwrap();
    let error = read_archive_and_log(&archive, &log).unwrap_err();
    let message = error.to_string();
    assert_eq!(gap_of(error), (*archived.last().unwrap(), Some(live_first)));
    assert!(
        message.contains(&format!(
            "LSN {} to {}",
            archived.last().unwrap(),
            live_first - 1
        )),
        "{message}"
    );
    std::fs::write(&last, saved).unwrap();

    // The archive's first segment gone: the hole starts at LSN 1.
    let first = segments(&archive).remove(0);
    std::fs::remove_file(&first).unwrap();
    let error = read_archive_and_log(&archive, &log).unwrap_err();
    assert_eq!(gap_of(error), (1, Some(archived[1])));
}

#[test]
fn issue_14_across_file_systems_a_segment_is_copied_synced_and_renamed_into_the_archive() {
    let root = tempfile::tempdir().unwrap();
    let log = root.path().join("wal");
    let archive = root.path().join("archive");
    closed_log_for_archiving(root.path());
    let fs = FaultyFs::new();
    fs.links_cross_devices(true);
    let open = |fs: &FaultyFs| {
        Wal::open_with(
            Arc::new(fs.clone()),
            &log,
            archive_options(&archive),
            u64::MAX,
            &mut |_| Ok(()),
        )
        .unwrap()
        .0
    };
    let wal = open(&fs);
    // The snapshot's own rename passes; the first copy's rename into place fails.
    fs.fail_rename_after(1);
    let error = wal.checkpoint(90, b"state@90").unwrap_err().to_string();
    assert!(error.contains(".wal.tmp"), "{error}");
    drop(wal);
    fs.fail_rename_after(u64::MAX);
    let wal = open(&fs);
    wal.checkpoint(95, b"state@95").unwrap();
    assert!(segment_lsns(&archive).len() >= 2);
    assert_eq!(
        read_archive_and_log(&archive, &log).unwrap(),
        expected_records(100)
    );
}

/// A record written under a larger append limit (a build with larger records, or before the
/// segments, and so the limit, were made smaller) is read back whole by a log opened with a
/// smaller one, also when it is the last record: never taken for a torn tail and cut.
#[test]
fn a_record_longer_than_the_append_limit_is_read_not_cut() {
    let dir = tempfile::tempdir().unwrap();
    let large = Options {
        segment_bytes: 10 << 20,
        record_bytes_max: 1 << 20,
        ..Options::default()
    };
    let (wal, _) = Wal::open(dir.path(), large).unwrap();
    wal.append(payload(1, 40)).unwrap().wait().unwrap();
    wal.append(payload(2, 600 << 10)).unwrap().wait().unwrap();
    wal.close().unwrap();
    let small = Options {
        segment_bytes: 10 << 20,
        record_bytes_max: 64 << 10,
        ..Options::default()
    };
    let mut lengths = Vec::new();
    crate::reader::read_from(dir.path(), small.record_bytes_max, 1, &mut |record| {
        lengths.push(record.payload.len());
        Ok(())
    })
    .unwrap();
    assert_eq!(lengths, vec![40, 600 << 10]);
    let (wal, recovered) = Wal::open(dir.path(), small).unwrap();
    assert_eq!(recovered.last_lsn, 2);
    assert!(recovered.torn_tail.is_none(), "{:?}", recovered.torn_tail);
    // Appends still keep to the smaller limit.
    assert!(wal.append(payload(3, 65 << 10)).is_err());
    wal.close().unwrap();
}
