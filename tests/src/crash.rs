//! Payloads for the WAL crash test, shared by the child that writes them and the parent that
//! checks them after a SIGKILL.
//!
//! A payload names its writer and is otherwise fully determined by that name, so the parent can
//! regenerate the exact bytes of any acknowledged record from the child's `ACK` line, and can tell
//! a real child record from garbage without having seen it acknowledged:
//!
//! ```text
//! r{run}:t{thread}:c{counter}:  filler (0..=8 KiB, seeded by the name)  fnv1a64 (8 bytes, LE)
//! ```
//!
//! The checksum covers everything before it. No LSN is in the payload: the log assigns LSNs, and
//! the test checks that the log kept each payload at the LSN it acknowledged.

/// Segment size of the crash test's log: small, so that rotations happen every few dozen records.
pub const SEGMENT_BYTES: u64 = 256 * 1024;
/// Largest payload the crash test's log accepts.
pub const RECORD_BYTES_MAX: u32 = 16 * 1024;
/// Largest filler in a payload.
pub const FILLER_BYTES_MAX: u64 = 8 * 1024;

/// Options both the child and the parent open the log with (fsync on every write).
pub fn options() -> wal::Options {
    wal::Options {
        segment_bytes: SEGMENT_BYTES,
        record_bytes_max: RECORD_BYTES_MAX,
        fsync: wal::FsyncPolicy::Always,
        ..wal::Options::default()
    }
}

/// Who wrote a record: the child's run, its appender thread, and that thread's counter.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct Identity {
    pub run: u64,
    pub thread: u32,
    pub counter: u64,
}

/// The payload the child appends for `id`.
pub fn payload(id: Identity) -> Vec<u8> {
    let mut rng = XorShift::new(
        id.run
            .wrapping_mul(0x9E37_79B9_7F4A_7C15)
            .wrapping_add(u64::from(id.thread).wrapping_mul(0xC2B2_AE3D_27D4_EB4F))
            .wrapping_add(id.counter),
    );
    let filler_bytes = rng.below(FILLER_BYTES_MAX + 1) as usize;
    let mut bytes = format!("r{}:t{}:c{}:", id.run, id.thread, id.counter).into_bytes();
    let body_bytes = bytes.len() + filler_bytes;
    bytes.reserve(filler_bytes + 16);
    while bytes.len() < body_bytes {
        bytes.extend_from_slice(&rng.next_u64().to_le_bytes());
    }
    bytes.truncate(body_bytes);
    let sum = fnv1a64(&bytes);
    bytes.extend_from_slice(&sum.to_le_bytes());
    bytes
}

/// The writer of `bytes` if they are exactly a child payload; `None` for anything else.
pub fn identify(bytes: &[u8]) -> Option<Identity> {
    let split = bytes.len().checked_sub(8)?;
    let (body, sum) = bytes.split_at(split);
    if fnv1a64(body).to_le_bytes() != sum {
        return None;
    }
    let mut fields = body.splitn(4, |&b| b == b':');
    let mut number = |tag: u8| -> Option<u64> {
        let field = fields.next()?;
        let (&first, digits) = field.split_first()?;
        if first != tag {
            return None;
        }
        std::str::from_utf8(digits).ok()?.parse().ok()
    };
    let id = Identity {
        run: number(b'r')?,
        thread: u32::try_from(number(b't')?).ok()?,
        counter: number(b'c')?,
    };
    (payload(id) == bytes).then_some(id)
}

/// 64-bit FNV-1a: a short fingerprint for `ACK` lines and payload self-checks. Not cryptographic.
pub fn fnv1a64(bytes: &[u8]) -> u64 {
    bytes.iter().fold(0xCBF2_9CE4_8422_2325, |hash, &b| {
        (hash ^ u64::from(b)).wrapping_mul(0x0000_0100_0000_01B3)
    })
}

/// The `ACK` line the child prints once `lsn`, carrying `id`'s payload, is durable.
pub fn ack_line(lsn: u64, id: Identity, payload: &[u8]) -> String {
    format!(
        "ACK {lsn} {} {} {} {} {:016x}",
        id.run,
        id.thread,
        id.counter,
        payload.len(),
        fnv1a64(payload)
    )
}

/// An acknowledgement read back from the child's output.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ack {
    pub lsn: u64,
    pub id: Identity,
    pub payload_bytes: usize,
    pub payload_fnv: u64,
}

/// Parses a line made by [`ack_line`].
pub fn parse_ack(line: &str) -> Option<Ack> {
    let mut words = line.strip_prefix("ACK ")?.split(' ');
    let mut next = || words.next();
    let lsn = next()?.parse().ok()?;
    let id = Identity {
        run: next()?.parse().ok()?,
        thread: next()?.parse().ok()?,
        counter: next()?.parse().ok()?,
    };
    let payload_bytes = next()?.parse().ok()?;
    let payload_fnv = u64::from_str_radix(next()?, 16).ok()?;
    if next().is_some() {
        return None;
    }
    Some(Ack {
        lsn,
        id,
        payload_bytes,
        payload_fnv,
    })
}

/// xorshift64*: a tiny seeded generator, so a seed reproduces a run without a crate.
#[derive(Debug, Clone)]
pub struct XorShift(u64);

impl XorShift {
    /// A generator seeded by `seed` (any value, zero included).
    pub fn new(seed: u64) -> Self {
        // splitmix64 spreads nearby seeds apart and never yields the all-zero state for these.
        let mut z = seed.wrapping_add(0x9E37_79B9_7F4A_7C15);
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        XorShift((z ^ (z >> 31)) | 1)
    }

    pub fn next_u64(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    /// A number in `0..n` (`n` > 0); the modulo bias is irrelevant here.
    pub fn below(&mut self, n: u64) -> u64 {
        self.next_u64() % n
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn payloads_round_trip_and_reject_damage() {
        let mut lengths = std::collections::BTreeSet::new();
        for counter in 0..200 {
            let id = Identity {
                run: 7,
                thread: 3,
                counter,
            };
            let bytes = payload(id);
            assert!(bytes.len() as u64 <= FILLER_BYTES_MAX + 8 + 32);
            assert!(bytes.len() <= RECORD_BYTES_MAX as usize);
            lengths.insert(bytes.len());
            assert_eq!(identify(&bytes), Some(id));
            let mut flipped = bytes.clone();
            let at = (counter as usize * 31) % flipped.len();
            flipped[at] ^= 0x20;
            assert_eq!(identify(&flipped), None, "flip at {at}");
            let line = ack_line(42, id, &bytes);
            let ack = parse_ack(&line).expect("own ACK line parses");
            assert_eq!((ack.lsn, ack.id, ack.payload_bytes), (42, id, bytes.len()));
            assert_eq!(ack.payload_fnv, fnv1a64(&bytes));
        }
        assert!(lengths.len() > 100, "filler lengths vary");
        assert_eq!(identify(b"parent:1"), None);
        assert_eq!(identify(b""), None);
    }
}
