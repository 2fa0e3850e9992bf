//! The on-disk format, version 1.
//!
//! All integers are little-endian. All checksums are CRC32C (Castagnoli).
//!
//! # Directory
//!
//! ```text
//! wal.dir/
//!   00000000000000000001.wal    segment whose first record has index 1
//!   00000000000000004711.wal    next segment: its first index is the previous one's last + 1
//!   purged.meta                 purge marker (only after the first purge)
//! ```
//!
//! A segment file is named by its first index, zero-padded to 20 digits, so names sort
//! in log order. Segments are contiguous: each starts at the index after the previous
//! one's last record. A segment may hold no record at all (header only); its header
//! still fixes the index the next append must use.
//!
//! # Segment header ([`SEGMENT_HEADER_BYTES`] = 24 bytes)
//!
//! ```text
//! offset  size  field
//!      0     8  magic          b"QVRWAL\0\0"
//!      8     4  version        u32 = 1
//!     12     8  first_index    u64, equal to the index in the file name
//!     20     4  crc32c         of bytes 0..20
//! ```
//!
//! # Record frame ([`FRAME_HEADER_BYTES`] = 16 bytes, then the payload)
//!
//! ```text
//! offset  size  field
//!      0     4  len            u32, payload length, at most PAYLOAD_BYTES_MAX
//!      4     4  crc32c         of the index bytes followed by the payload
//!      8     8  index          u64
//!     16   len  payload
//! ```
//!
//! Frames follow the header back to back, with consecutive indexes. An all-zero frame
//! header is never valid (the CRC of an index is never zero), so zero-filled tails are
//! recognisable.
//!
//! # Purge marker `purged.meta` ([`MARKER_BYTES`] = 24 bytes)
//!
//! ```text
//!      0     8  magic          b"QVRPURGE"
//!      8     4  version        u32 = 1
//!     12     8  purged_index   u64: records <= purged_index are gone
//!     20     4  crc32c         of bytes 0..20
//! ```
//!
//! Replaced atomically (write `purged.meta.tmp`, fsync, rename, fsync the directory)
//! before any segment is deleted, so after a restart the log starts at
//! `purged_index + 1` even when segments holding older records survive. A purge at or
//! past the last record then starts an empty segment at `purged_index + 1` (its header
//! fixes the next index), and only then deletes the old segments, oldest first.
//!
//! # Recovery rule
//!
//! First, segments the purge marker wholly covers are deleted unread: every segment whose
//! successor starts at or below `purged_index + 1` (all its records precede the
//! successor's first). These are what a crash during a purge leaves, possibly ending
//! well below the segment a purge past the end started; they hold nothing the log still
//! has and are not checked.
//!
//! Then every remaining segment is read and every checksum verified. In the **last** segment
//! only, these are a *torn tail*, the expected result of a crash during a write: the
//! file ends inside a frame header or inside a payload; the final frame fails its CRC
//! and ends exactly at the end of the file; everything from some frame on is zero
//! bytes; the file is shorter than a header or all zeros (the segment is deleted). A
//! torn tail is cut off, logged with `tracing::warn!` naming file and offset, and
//! reported in [`crate::RecoveryReport`]. Anything else is [`crate::Error::Corrupt`]
//! with the file and offset, and the log does not open: a bad frame followed by more
//! (non-zero) data, a frame that looks torn but is followed somewhere by an intact
//! frame of the next index (a damaged length field), any bad frame in an earlier
//! segment, a bad magic, version or header CRC, an index out of sequence within or
//! across segments, a purge marker that does not reach the first segment.

/// Magic bytes opening every segment file.
pub const SEGMENT_MAGIC: [u8; 8] = *b"QVRWAL\0\0";
/// Magic bytes opening the purge marker.
pub const MARKER_MAGIC: [u8; 8] = *b"QVRPURGE";
/// The format version this code writes and reads.
pub const FORMAT_VERSION: u32 = 1;
/// Size of a segment header.
pub const SEGMENT_HEADER_BYTES: usize = 24;
/// Size of a record frame header (before the payload).
pub const FRAME_HEADER_BYTES: usize = 16;
/// Size of the purge marker file.
pub const MARKER_BYTES: usize = 24;
/// Largest payload one record may carry (256 MiB). Bounds the memory recovery and reads
/// need for one record.
pub const PAYLOAD_BYTES_MAX: u32 = 256 << 20;

/// File name of the segment whose first index is `first_index`.
pub fn segment_file_name(first_index: u64) -> String {
    format!("{first_index:020}.wal")
}

/// The first index encoded in a segment file name, or `None` if `name` is not one.
pub fn parse_segment_file_name(name: &str) -> Option<u64> {
    let digits = name.strip_suffix(".wal")?;
    if digits.len() != 20 || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// Why a fixed-size header (segment header or purge marker) was rejected.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum HeaderError {
    /// The magic bytes are wrong: not a Quiver WAL file, or overwritten.
    BadMagic,
    /// A version this code does not read.
    UnsupportedVersion(u32),
    /// The header's CRC does not match its contents.
    ChecksumMismatch,
}

impl std::fmt::Display for HeaderError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            HeaderError::BadMagic => f.write_str("bad magic (not a Quiver WAL file)"),
            HeaderError::UnsupportedVersion(v) => write!(
                f,
                "unsupported format version {v} (this build reads version {FORMAT_VERSION})"
            ),
            HeaderError::ChecksumMismatch => f.write_str("header checksum mismatch"),
        }
    }
}

/// Encodes a 24-byte header: magic, version, one u64, CRC.
fn encode_fixed(magic: [u8; 8], value: u64) -> [u8; 24] {
    let mut out = [0u8; 24];
    out[0..8].copy_from_slice(&magic);
    out[8..12].copy_from_slice(&FORMAT_VERSION.to_le_bytes());
    out[12..20].copy_from_slice(&value.to_le_bytes());
    let crc = crc32c::crc32c(&out[0..20]);
    out[20..24].copy_from_slice(&crc.to_le_bytes());
    out
}

/// Decodes what [`encode_fixed`] wrote, checking magic first so the error says whether
/// this is a foreign file, a newer format, or damage.
fn decode_fixed(magic: [u8; 8], bytes: &[u8; 24]) -> Result<u64, HeaderError> {
    if bytes[0..8] != magic {
        return Err(HeaderError::BadMagic);
    }
    let crc_stored = u32::from_le_bytes(le4(&bytes[20..24]));
    let version = u32::from_le_bytes(le4(&bytes[8..12]));
    if crc32c::crc32c(&bytes[0..20]) != crc_stored {
        // A damaged version field shows up here too; the CRC decides.
        return Err(HeaderError::ChecksumMismatch);
    }
    if version != FORMAT_VERSION {
        return Err(HeaderError::UnsupportedVersion(version));
    }
    Ok(u64::from_le_bytes(le8(&bytes[12..20])))
}

/// Encodes a segment header.
pub fn encode_segment_header(first_index: u64) -> [u8; SEGMENT_HEADER_BYTES] {
    encode_fixed(SEGMENT_MAGIC, first_index)
}

/// Decodes a segment header into its first index.
pub fn decode_segment_header(bytes: &[u8; SEGMENT_HEADER_BYTES]) -> Result<u64, HeaderError> {
    decode_fixed(SEGMENT_MAGIC, bytes)
}

/// Encodes the purge marker.
pub fn encode_marker(purged_index: u64) -> [u8; MARKER_BYTES] {
    encode_fixed(MARKER_MAGIC, purged_index)
}

/// Decodes the purge marker into its purged index.
pub fn decode_marker(bytes: &[u8; MARKER_BYTES]) -> Result<u64, HeaderError> {
    decode_fixed(MARKER_MAGIC, bytes)
}

/// CRC of a record: over the index bytes, then the payload.
pub fn record_crc(index: u64, payload: &[u8]) -> u32 {
    crc32c::crc32c_append(crc32c::crc32c(&index.to_le_bytes()), payload)
}

/// Appends one record frame to `buf`.
///
/// The caller has checked `payload.len() <= PAYLOAD_BYTES_MAX`.
pub fn encode_frame(buf: &mut Vec<u8>, index: u64, payload: &[u8]) {
    debug_assert!(payload.len() <= PAYLOAD_BYTES_MAX as usize);
    let len = payload.len() as u32;
    buf.reserve(FRAME_HEADER_BYTES + payload.len());
    buf.extend_from_slice(&len.to_le_bytes());
    buf.extend_from_slice(&record_crc(index, payload).to_le_bytes());
    buf.extend_from_slice(&index.to_le_bytes());
    buf.extend_from_slice(payload);
}

/// The fixed part of a record frame, as read (not yet verified).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FrameHeader {
    /// Payload length.
    pub len: u32,
    /// Stored CRC.
    pub crc: u32,
    /// Stored index.
    pub index: u64,
}

impl FrameHeader {
    /// Splits a 16-byte frame header into its fields.
    pub fn decode(bytes: &[u8; FRAME_HEADER_BYTES]) -> FrameHeader {
        FrameHeader {
            len: u32::from_le_bytes(le4(&bytes[0..4])),
            crc: u32::from_le_bytes(le4(&bytes[4..8])),
            index: u64::from_le_bytes(le8(&bytes[8..16])),
        }
    }

    /// Bytes this frame occupies on disk, header included.
    pub fn frame_bytes(&self) -> u64 {
        FRAME_HEADER_BYTES as u64 + u64::from(self.len)
    }
}

/// Checks one whole frame read back from disk: length, CRC, and index. On success
/// returns the payload's byte range within `frame`.
pub fn verify_frame(frame: &[u8], index_expected: u64) -> Result<std::ops::Range<usize>, String> {
    let Some(head) = frame.first_chunk::<FRAME_HEADER_BYTES>() else {
        return Err(format!(
            "frame of {} bytes is shorter than its header",
            frame.len()
        ));
    };
    let header = FrameHeader::decode(head);
    let payload = &frame[FRAME_HEADER_BYTES..];
    if header.len as usize != payload.len() {
        return Err(format!(
            "frame length field says {} bytes, expected {}",
            header.len,
            payload.len()
        ));
    }
    if record_crc(header.index, payload) != header.crc {
        return Err(format!("record checksum mismatch (index {index_expected})"));
    }
    if header.index != index_expected {
        return Err(format!(
            "record has index {}, expected {index_expected}",
            header.index
        ));
    }
    Ok(FRAME_HEADER_BYTES..frame.len())
}

fn le4(bytes: &[u8]) -> [u8; 4] {
    let mut out = [0u8; 4];
    out.copy_from_slice(bytes);
    out
}

fn le8(bytes: &[u8]) -> [u8; 8] {
    let mut out = [0u8; 8];
    out.copy_from_slice(bytes);
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn segment_header_round_trips_and_names_its_fault() {
        let header = encode_segment_header(4711);
        assert_eq!(decode_segment_header(&header), Ok(4711));

        let mut bad_magic = header;
        bad_magic[0] ^= 0xff;
        assert_eq!(
            decode_segment_header(&bad_magic),
            Err(HeaderError::BadMagic)
        );

        let mut bad_index = header;
        bad_index[13] ^= 0x01;
        assert_eq!(
            decode_segment_header(&bad_index),
            Err(HeaderError::ChecksumMismatch)
        );

        // A well-formed header from a future version is reported as such, not as damage.
        let mut future = header;
        future[8..12].copy_from_slice(&2u32.to_le_bytes());
        let crc = crc32c::crc32c(&future[0..20]);
        future[20..24].copy_from_slice(&crc.to_le_bytes());
        assert_eq!(
            decode_segment_header(&future),
            Err(HeaderError::UnsupportedVersion(2))
        );

        // A marker is not a segment header.
        assert_eq!(
            decode_segment_header(&encode_marker(4711)),
            Err(HeaderError::BadMagic)
        );
        assert_eq!(decode_marker(&encode_marker(9)), Ok(9));
    }

    #[test]
    fn frame_round_trips_and_detects_flips() {
        let mut buf = Vec::new();
        encode_frame(&mut buf, 7, b"hello");
        assert_eq!(buf.len(), FRAME_HEADER_BYTES + 5);
        assert_eq!(verify_frame(&buf, 7), Ok(FRAME_HEADER_BYTES..buf.len()));
        assert!(verify_frame(&buf, 8).is_err());
        for byte in 0..buf.len() {
            let mut flipped = buf.clone();
            flipped[byte] ^= 0x10;
            assert!(
                verify_frame(&flipped, 7).is_err(),
                "flip at {byte} undetected"
            );
        }
    }

    #[test]
    fn zero_frame_header_is_never_valid() {
        assert_ne!(record_crc(0, &[]), 0);
        let zeros = [0u8; FRAME_HEADER_BYTES];
        assert!(verify_frame(&zeros, 0).is_err());
    }

    #[test]
    fn segment_file_names_sort_in_index_order() {
        assert_eq!(segment_file_name(42), "00000000000000000042.wal");
        assert_eq!(
            parse_segment_file_name(&segment_file_name(u64::MAX)),
            Some(u64::MAX)
        );
        assert_eq!(parse_segment_file_name("42.wal"), None);
        assert_eq!(parse_segment_file_name("0000000000000000004x.wal"), None);
        assert_eq!(parse_segment_file_name("00000000000000000042.tmp"), None);
        assert!(segment_file_name(9) < segment_file_name(10));
    }
}
