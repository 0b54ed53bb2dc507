//! Arbitrary bytes as a segment file, a record and a snapshot: the parsers must never panic,
//! whatever is on disk (STYLE.md §16), what they accept must be self-consistent, and recovery's
//! repair of a torn tail must be idempotent (STYLE.md §23).
//!
//! Run (needs nightly and `cargo install cargo-fuzz`), from `wal/`:
//! `cargo +nightly fuzz run segment fuzz/corpus/segment fuzz/seeds/segment -- -max_total_time=60`.
//! `fuzz/seeds/segment` holds a few valid segments (clean, torn, garbage after the end, a later
//! write after damage, header only) and a snapshot, so the fuzzer starts past the checksums.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use wal::fs::StdFs;
use wal::record::{parse_record, Parsed, RECORD_HEADER_BYTES, SEGMENT_HEADER_BYTES};
use wal::recovery::{scan_dir, Mode};

/// Small, so that random length fields often fit and the checksum path is exercised.
const RECORD_BYTES_MAX: u32 = 4096;

/// One directory per fuzzing process, reused for every input (each input rewrites its segment).
fn dir() -> &'static tempfile::TempDir {
    static DIR: OnceLock<tempfile::TempDir> = OnceLock::new();
    DIR.get_or_init(|| tempfile::tempdir().expect("create the fuzz directory"))
}

fuzz_target!(|bytes: &[u8]| {
    // The record parser at a few offsets, including ones past the end.
    let mut offsets = vec![0, 1, SEGMENT_HEADER_BYTES, bytes.len(), bytes.len() + 1];
    if let Some(&first) = bytes.first() {
        offsets.push(usize::from(first));
    }
    for offset in offsets {
        if let Parsed::Record(record) = parse_record(bytes, offset, RECORD_BYTES_MAX) {
            assert!(record.lsn > 0);
            assert!(u64::from(record.batch_pos) < record.lsn);
            assert!(record.payload.len() <= RECORD_BYTES_MAX as usize);
            assert_eq!(record.bytes(), RECORD_HEADER_BYTES + record.payload.len());
        }
    }

    // The snapshot decoder: what it accepts re-encodes to the same bytes, except the reserved
    // word at 36..40, which is neither checked nor covered by the checksum.
    if let Ok((lsn, payload)) = wal::snapshot::decode(bytes) {
        let encoded = wal::snapshot::encode(lsn, payload);
        assert_eq!(encoded.len(), bytes.len());
        assert_eq!(encoded.get(..36), bytes.get(..36));
        assert_eq!(encoded.get(40..), bytes.get(40..));
    }

    // The bytes as the only segment of a log directory: a read-only scan, then recovery's
    // repairing scan twice. Both scans must agree, and repair must be idempotent: the second
    // repair finds a clean log with the same records.
    let dir = dir().path();
    let segment = dir.join("00000000000000000001.wal");
    std::fs::write(&segment, bytes).expect("write the fuzz segment");
    let read_only = scan(dir, Mode::ReadOnly);
    let repaired = scan(dir, Mode::Repair);
    match (&read_only, &repaired) {
        (Ok(a), Ok(b)) => {
            assert_eq!(a, b, "read-only and repairing scans disagree");
            let again = scan(dir, Mode::Repair).expect("a repaired log scans again");
            assert_eq!(again.records, b.records, "repair lost or invented records");
            assert!(
                again.torn.is_none(),
                "repair left a torn tail: {:?}",
                again.torn
            );
            assert!(again.end_offset <= bytes.len() as u64);
        }
        (Err(_), Err(_)) => {}
        _ => panic!("read-only {read_only:?} but repair {repaired:?}"),
    }
});

#[derive(Debug, PartialEq, Eq)]
struct Outcome {
    /// LSN and payload length of every record visited.
    records: Vec<(u64, usize)>,
    next_lsn: u64,
    end_offset: u64,
    torn: Option<u64>,
}

fn scan(dir: &std::path::Path, mode: Mode) -> Result<Outcome, String> {
    let mut records = Vec::new();
    let scan = scan_dir(&StdFs, dir, RECORD_BYTES_MAX, mode, 1, &mut |record| {
        assert_eq!(
            record.lsn,
            records.len() as u64 + 1,
            "visited LSNs are contiguous from 1"
        );
        records.push((record.lsn, record.payload.len()));
        Ok(())
    })
    .map_err(|e| e.to_string())?;
    assert_eq!(scan.next_lsn, records.len() as u64 + 1);
    Ok(Outcome {
        records,
        next_lsn: scan.next_lsn,
        end_offset: scan.segments.last().map_or(0, |s| s.end_offset),
        torn: scan.torn.map(|(_, offset, _)| offset),
    })
}
