//! The on-disk format of segments and records. Fixed-width, little-endian, checksummed.
//!
//! # Segment file
//!
//! A segment is named `{first_lsn:020}.wal`, so lexical order is LSN order. It is preallocated
//! (zero-filled) to the segment size and starts with a 32-byte header:
//!
//! | offset | size | field            | meaning                                              |
//! |--------|------|------------------|------------------------------------------------------|
//! | 0      | 8    | magic            | `WLTDWAL\0`                                          |
//! | 8      | 4    | format_version   | `1`                                                  |
//! | 12     | 4    | header_bytes     | `32`                                                 |
//! | 16     | 8    | first_lsn        | LSN of the first record in this segment              |
//! | 24     | 4    | reserved         | zero                                                 |
//! | 28     | 4    | header_crc       | CRC32C (Castagnoli) of bytes 0..28                   |
//!
//! # Record
//!
//! Records follow the header back to back. Each is a 24-byte header and its payload:
//!
//! | offset | size | field        | meaning                                                        |
//! |--------|------|--------------|----------------------------------------------------------------|
//! | 0      | 4    | crc          | CRC32C of bytes 4..24 of this header followed by the payload    |
//! | 4      | 4    | payload_len  | payload length in bytes, at most the configured maximum        |
//! | 8      | 8    | lsn          | log sequence number; contiguous, starting at 1, never reused   |
//! | 16     | 4    | batch_pos    | position of this record in the write that carried it (0 first)  |
//! | 20     | 4    | reserved     | zero                                                           |
//! | 24     | n    | payload      | opaque bytes                                                   |
//!
//! An all-zero record header marks the end of the data: LSNs start at 1, so no real record is all
//! zeros. `batch_pos` lets recovery tell a torn final write from corruption: every record of one
//! write has the same `lsn - batch_pos`, and the writer makes each write durable before it starts
//! the next, so after a crash only the records of the last write can be damaged (see
//! [`crate::recovery`]).

/// Magic at the start of every segment.
pub const SEGMENT_MAGIC: [u8; 8] = *b"WLTDWAL\0";
/// Version of the segment and record format described above.
pub const FORMAT_VERSION: u32 = 1;
/// Bytes in a segment header.
pub const SEGMENT_HEADER_BYTES: usize = 32;
/// Bytes in a record header.
pub const RECORD_HEADER_BYTES: usize = 24;

/// Most bytes of records the writer batches into one write (before the record that crosses it).
/// Recovery relies on it: non-zero bytes further than one write past damage cannot be a tear.
pub const BATCH_BYTES_LIMIT: usize = 8 << 20;

/// Records up to this size are read from a segment that can hold them even when the log's
/// append limit is lower: a record written under a larger limit (by a build with larger
/// records, or before segments were configured smaller, which lowers the limit) is whole and
/// checksummed, and must never be taken for a torn tail and cut.
pub const READ_BYTES_FLOOR: u32 = 16 << 20;

/// The longest payload read from a segment of `segment_len` bytes under an append limit of
/// `append_max` (see [`READ_BYTES_FLOOR`]); never more than the segment can hold, so small
/// segments read exactly as before.
#[must_use]
pub fn read_bytes_max(append_max: u32, segment_len: usize) -> u32 {
    let room = segment_len.saturating_sub(SEGMENT_HEADER_BYTES + RECORD_HEADER_BYTES);
    let room = u32::try_from(room).unwrap_or(u32::MAX);
    append_max.max(room.min(READ_BYTES_FLOOR))
}

/// Longest single write the writer can issue for records of at most `record_bytes_max` bytes.
pub const fn write_bytes_max(record_bytes_max: u32) -> usize {
    BATCH_BYTES_LIMIT + RECORD_HEADER_BYTES + record_bytes_max as usize
}

const _: () = assert!(SEGMENT_HEADER_BYTES.is_multiple_of(8));
const _: () = assert!(RECORD_HEADER_BYTES == 4 + 4 + 8 + 4 + 4);

/// Encodes a segment header.
pub fn encode_segment_header(first_lsn: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    let mut header = [0u8; SEGMENT_HEADER_BYTES];
    header[0..8].copy_from_slice(&SEGMENT_MAGIC);
    header[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    header[12..16].copy_from_slice(&(SEGMENT_HEADER_BYTES as u32).to_le_bytes());
    header[16..24].copy_from_slice(&first_lsn.to_le_bytes());
    let crc = crc32c::crc32c(&header[0..28]);
    header[28..32].copy_from_slice(&crc.to_le_bytes());
    header
}

/// Decodes a segment header, returning its first LSN, or why the bytes are not a header.
pub fn decode_segment_header(bytes: &[u8]) -> Result<u64, String> {
    let Some(header) = bytes.get(..SEGMENT_HEADER_BYTES) else {
        return Err(format!(
            "segment is {} bytes, shorter than its {SEGMENT_HEADER_BYTES}-byte header",
            bytes.len()
        ));
    };
    if header.get(0..8) != Some(&SEGMENT_MAGIC[..]) {
        return Err("bad segment magic".into());
    }
    let stored_crc = read_u32(header, 28);
    if crc32c::crc32c(header.get(0..28).unwrap_or_default()) != stored_crc {
        return Err("segment header checksum mismatch".into());
    }
    let version = read_u32(header, 8);
    if version != FORMAT_VERSION {
        return Err(format!("unsupported segment format version {version}"));
    }
    if read_u32(header, 12) as usize != SEGMENT_HEADER_BYTES {
        return Err("unexpected segment header length".into());
    }
    let first_lsn = read_u64(header, 16);
    if first_lsn == 0 {
        return Err("segment first LSN is zero".into());
    }
    Ok(first_lsn)
}

/// Appends one framed record to `buf`.
pub fn encode_record(buf: &mut Vec<u8>, lsn: u64, batch_pos: u32, payload: &[u8]) {
    debug_assert!(lsn > 0, "LSNs start at 1");
    let start = buf.len();
    buf.extend_from_slice(&[0u8; 4]);
    buf.extend_from_slice(&(payload.len() as u32).to_le_bytes());
    buf.extend_from_slice(&lsn.to_le_bytes());
    buf.extend_from_slice(&batch_pos.to_le_bytes());
    buf.extend_from_slice(&0u32.to_le_bytes());
    buf.extend_from_slice(payload);
    let crc = crc32c::crc32c(buf.get(start + 4..).unwrap_or_default());
    if let Some(slot) = buf.get_mut(start..start + 4) {
        slot.copy_from_slice(&crc.to_le_bytes());
    }
}

/// Bytes a record of `payload_len` takes on disk.
pub const fn record_bytes(payload_len: usize) -> usize {
    RECORD_HEADER_BYTES + payload_len
}

/// One record as found in a segment.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct RecordRef<'a> {
    pub lsn: u64,
    pub batch_pos: u32,
    pub payload: &'a [u8],
}

impl RecordRef<'_> {
    /// The LSN of the first record of the write that carried this one.
    pub fn write_first_lsn(&self) -> u64 {
        self.lsn.saturating_sub(u64::from(self.batch_pos))
    }

    /// Bytes this record takes on disk.
    pub fn bytes(&self) -> usize {
        record_bytes(self.payload.len())
    }
}

/// What lies at an offset of a segment.
#[derive(Debug, PartialEq, Eq)]
pub enum Parsed<'a> {
    /// A record whose framing and checksum are intact.
    Record(RecordRef<'a>),
    /// An all-zero header: the end of the written data.
    End,
    /// Not a valid record; the string says why.
    Invalid(String),
}

/// Parses the record at `offset` of `segment`. Never panics, whatever the bytes.
pub fn parse_record(segment: &[u8], offset: usize, payload_bytes_max: u32) -> Parsed<'_> {
    let Some(rest) = segment.get(offset..) else {
        return Parsed::Invalid("offset past the end of the segment".into());
    };
    let Some(header) = rest.get(..RECORD_HEADER_BYTES) else {
        if rest.iter().all(|&b| b == 0) {
            return Parsed::End;
        }
        return Parsed::Invalid(format!(
            "partial record header ({} of {RECORD_HEADER_BYTES} bytes)",
            rest.len()
        ));
    };
    if header.iter().all(|&b| b == 0) {
        return Parsed::End;
    }
    let stored_crc = read_u32(header, 0);
    let len = read_u32(header, 4);
    let lsn = read_u64(header, 8);
    let batch_pos = read_u32(header, 16);
    let reserved = read_u32(header, 20);
    if len > payload_bytes_max {
        return Parsed::Invalid(format!(
            "record length {len} exceeds the maximum of {payload_bytes_max}"
        ));
    }
    let Some(payload) = rest.get(RECORD_HEADER_BYTES..RECORD_HEADER_BYTES + len as usize) else {
        return Parsed::Invalid(format!(
            "record of {len} payload bytes runs past the end of the segment"
        ));
    };
    let crc = crc32c::crc32c_append(crc32c::crc32c(header.get(4..).unwrap_or_default()), payload);
    if crc != stored_crc {
        return Parsed::Invalid(format!("record checksum mismatch (LSN field {lsn})"));
    }
    if reserved != 0 || lsn == 0 || u64::from(batch_pos) >= lsn {
        return Parsed::Invalid(format!("malformed record header (LSN field {lsn})"));
    }
    Parsed::Record(RecordRef {
        lsn,
        batch_pos,
        payload,
    })
}

fn read_u32(bytes: &[u8], at: usize) -> u32 {
    let mut word = [0u8; 4];
    if let Some(src) = bytes.get(at..at + 4) {
        word.copy_from_slice(src);
    }
    u32::from_le_bytes(word)
}

fn read_u64(bytes: &[u8], at: usize) -> u64 {
    let mut word = [0u8; 8];
    if let Some(src) = bytes.get(at..at + 8) {
        word.copy_from_slice(src);
    }
    u64::from_le_bytes(word)
}

pub(crate) fn segment_file_name(first_lsn: u64) -> String {
    format!("{first_lsn:020}.wal")
}

pub(crate) fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}
