//! The log's bytes (the layout is in the [module docs](super)): segment file names, the record
//! header (length with the note flag, CRC-32, sequence number, time), and reading a segment's
//! bytes back into records, where a bad record is either a torn tail (the last segment) or
//! damage. The writer
//! ([`super::writer`]) and the replay ([`super::recovery`]) both follow this one layout.

use super::*;

pub(super) fn segment_name(first: u64) -> String {
    format!("wal-{first:020}.log")
}

pub(super) fn parse_segment_name(name: &str) -> Option<u64> {
    let digits = name.strip_prefix("wal-")?.strip_suffix(".log")?;
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    digits.parse().ok()
}

/// The bit of the `len` field that marks a [`RecordKind::Note`].
pub(super) const NOTE_FLAG: u32 = 1 << 31;
/// Largest payload or note of one record (the `len` field's other 31 bits).
pub(super) const MAX_RECORD: usize = (NOTE_FLAG - 1) as usize;

pub(super) fn record_crc(kind: RecordKind, seq: u64, now: i64, payload: &[u8]) -> u32 {
    let mut payload_crc = crc32fast::Hasher::new();
    payload_crc.update(payload);
    record_crc_with(kind, seq, now, &payload_crc)
}

/// [`record_crc`] from the payload's own CRC (computed before the log's lock is taken: the
/// sequence number that precedes the payload in the checksum is known only under it).
pub(super) fn record_crc_with(
    kind: RecordKind,
    seq: u64,
    now: i64,
    payload_crc: &crc32fast::Hasher,
) -> u32 {
    let mut h = crc32fast::Hasher::new();
    // Notes are checksummed differently so that a flipped kind bit fails the check.
    if kind == RecordKind::Note {
        h.update(b"note");
    }
    h.update(&seq.to_le_bytes());
    h.update(&now.to_le_bytes());
    h.combine(payload_crc);
    h.finalize()
}

/// A record's header: length (with the note flag), CRC, sequence number, time.
pub(super) fn record_header(
    kind: RecordKind,
    seq: u64,
    now: i64,
    payload_len: usize,
    payload_crc: &crc32fast::Hasher,
) -> [u8; HEADER_LEN] {
    let len = payload_len as u32
        | if kind == RecordKind::Note {
            NOTE_FLAG
        } else {
            0
        };
    let mut h = [0u8; HEADER_LEN];
    h[0..4].copy_from_slice(&len.to_le_bytes());
    h[4..8].copy_from_slice(&record_crc_with(kind, seq, now, payload_crc).to_le_bytes());
    h[8..16].copy_from_slice(&seq.to_le_bytes());
    h[16..24].copy_from_slice(&now.to_le_bytes());
    h
}

/// How one segment parsed.
pub(super) struct Parsed {
    /// Its records after the checkpoint.
    pub(super) records: Vec<RecordAt>,
    /// How many valid records it holds (those up to the checkpoint included).
    pub(super) count: u64,
    /// Length of the valid prefix.
    pub(super) valid_len: u64,
    /// Whether bytes follow the valid prefix that hold no record (a torn tail, or records
    /// re-logged in the next segment).
    pub(super) torn: bool,
    /// Whether the records after the valid prefix were re-logged in the next segment.
    pub(super) relogged: bool,
}

/// A valid record found in a segment's bytes: its header fields and where its payload is.
pub(super) struct RecordAt {
    pub(super) seq: u64,
    pub(super) now: i64,
    pub(super) kind: RecordKind,
    pub(super) payload: std::ops::Range<usize>,
}

/// Parses a segment's bytes. `last`: the last segment, where a bad final record is a torn tail.
/// `first`: the sequence number its first record must carry. Records `≤ keep_after` are counted
/// but not returned. `next`: the first sequence number of the next segment: records from it on
/// were re-logged there after a failed write or fsync, so they (and anything bad from there on)
/// are ignored here.
pub(super) fn parse_segment(
    path: &Path,
    bytes: &[u8],
    last: bool,
    first: u64,
    keep_after: u64,
    next: Option<u64>,
) -> Result<Parsed> {
    let mut p = Parsed {
        records: Vec::new(),
        count: 0,
        valid_len: 0,
        torn: false,
        relogged: false,
    };
    let mut off = 0usize;
    while off < bytes.len() {
        let expect = first + p.count;
        if next == Some(expect) {
            // Everything from here on lives in the next segment.
            p.torn = true;
            p.relogged = true;
            break;
        }
        let rest = &bytes[off..];
        let field = |at: usize| -> [u8; 8] {
            let mut b = [0u8; 8];
            let n = if at < 8 { 4 } else { 8 };
            b[..n].copy_from_slice(&rest[at..at + n]);
            b
        };
        // Whether the record here is complete, fits and checks: `None` if so, else whether the
        // bad record may be a torn tail: the write of the last record cut short or with some of
        // its pages lost (its header names the expected number and it reaches the end of the
        // file), a header cut short, or a tail of zeros — and no intact record follows
        // (truncating must never lose one). Anything else is damage.
        let bad_is_torn = if rest.len() < HEADER_LEN {
            Some(true) // cut short
        } else {
            let (kind, len) = split_len(u64::from_le_bytes(field(0)) as u32);
            let crc = u64::from_le_bytes(field(4)) as u32;
            let seq = u64::from_le_bytes(field(8));
            let now = i64::from_le_bytes(field(16));
            match HEADER_LEN.checked_add(len).filter(|&e| e <= rest.len()) {
                Some(end) if record_crc(kind, seq, now, &rest[HEADER_LEN..end]) == crc => {
                    if seq != expect {
                        Some(false)
                    } else {
                        if seq > keep_after {
                            p.records.push(RecordAt {
                                seq,
                                now,
                                kind,
                                payload: off + HEADER_LEN..off + end,
                            });
                        }
                        p.count += 1;
                        off += end;
                        None
                    }
                }
                reach => {
                    let torn_write = seq == expect && reach.is_none_or(|end| end == rest.len());
                    let zeros = rest.iter().all(|&b| b == 0);
                    Some((torn_write || zeros) && !intact_record_after(rest, expect))
                }
            }
        };
        match bad_is_torn {
            None => {}
            // In an older segment a torn tail is harmless only when the next segment carries on
            // with the next number (a write that failed and was cut back or rolled past).
            Some(true) if last || next == Some(expect) => {
                p.torn = true;
                break;
            }
            Some(_) => {
                return Err(WalError::Corrupted {
                    segment: path.to_owned(),
                    offset: off as u64,
                })
            }
        }
    }
    p.valid_len = off as u64;
    Ok(p)
}

/// Whether an intact record with a sequence number `>= expect` starts anywhere in `rest[1..]`
/// (cheap checks on the header first, then the CRC).
pub(super) fn intact_record_after(rest: &[u8], expect: u64) -> bool {
    (1..rest.len().saturating_sub(HEADER_LEN - 1)).any(|at| {
        let h = &rest[at..at + HEADER_LEN];
        let word = |i: usize, n: usize| {
            h[i..i + n]
                .iter()
                .rev()
                .fold(0u64, |acc, &b| (acc << 8) | u64::from(b))
        };
        let ((kind, len), crc, seq, now) = (
            split_len(word(0, 4) as u32),
            word(4, 4) as u32,
            word(8, 8),
            word(16, 8) as i64,
        );
        seq >= expect
            && seq - expect < 1 << 32
            && len <= rest.len() - at - HEADER_LEN
            && record_crc(
                kind,
                seq,
                now,
                &rest[at + HEADER_LEN..at + HEADER_LEN + len],
            ) == crc
    })
}

/// The kind and payload length held by a record's `len` field.
pub(super) fn split_len(field: u32) -> (RecordKind, usize) {
    let kind = if field & NOTE_FLAG != 0 {
        RecordKind::Note
    } else {
        RecordKind::Payload
    };
    (kind, (field & !NOTE_FLAG) as usize)
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The checksum combined from the payload's own CRC is the one earlier versions computed over
    /// the concatenated bytes: logs they wrote still open.
    #[test]
    fn a_combined_checksum_is_the_checksum_of_the_bytes() {
        let (seq, now) = (123_456_789u64, 1_700_000_000i64);
        for payload in [&b""[..], b"{}", &[0xA5u8; 70_000][..]] {
            let mut plain = Vec::new();
            plain.extend_from_slice(&seq.to_le_bytes());
            plain.extend_from_slice(&now.to_le_bytes());
            plain.extend_from_slice(payload);
            assert_eq!(
                record_crc(RecordKind::Payload, seq, now, payload),
                crc32fast::hash(&plain)
            );
            let note = [&b"note"[..], &plain].concat();
            assert_eq!(
                record_crc(RecordKind::Note, seq, now, payload),
                crc32fast::hash(&note)
            );
        }
    }
}
