//! The element index: where each element of a document's top-level array starts, carried in the
//! document's **user header** so that a reader can jump to element *i* (or past a rejected one)
//! without walking the elements before it.
//!
//! Every Sereal decoder skips the user header unless asked for it (protocol 2 and later), so a
//! document with an index is still a standalone document that the reference (`Sereal::Decoder`)
//! and every older reader decode unchanged; `decode_with_header` sees one binary string.
//!
//! # Format, version 1
//!
//! ```text
//! user header body := BINARY <varint n> <payload: n bytes>        (one Sereal binary string)
//! payload  := "SLIX" <u8 version = 1>
//!             <varint count>      elements of the top-level array, ≥ 1
//!             <varint first>      body position (0-based, in the decompressed body) of element 0
//!             <varint body_len>   length of the decompressed body: the last element ends there
//!             <varint min_len>    smallest length of elements 0 .. count-2
//!             <u8 width>          bits per packed length, 0..=32
//!             <packed>            count-1 values `len_i - min_len`, `width` bits each, LSB first,
//!                                 zero-padded to a whole byte (element i+1 starts at
//!                                 start_i + len_i)
//!             <u32 le crc>        CRC-32 (IEEE) of every payload byte before it
//! ```
//!
//! Limits: `count`, `first`, `body_len` and every start fit in a `u32` (a writer leaves the index
//! out of a larger document); every element is at least one byte long. A 5 000-element chunk of
//! 450-byte events carries about 6 KB of index (≈ 10 bits per element), outside the compressed
//! body.
//!
//! # Format, version 2: with origins
//!
//! Version 1's fields, then the **origins** of the elements before the CRC: which source record
//! (a WAL sequence number; 0 = none) each element came from, as runs in element order.
//!
//! ```text
//! payload  := "SLIX" <u8 version = 2>
//!             <count> <first> <body_len> <min_len> <width> <packed>   as in version 1
//!             <varint nruns>      ≥ 1
//!             nruns × ( <varint zigzag(seq - previous seq)>   64-bit wrapping difference;
//!                                                             the previous seq of run 0 is 0
//!                       <varint n> )                          elements of the run, ≥ 1
//!             <u32 le crc>        CRC-32 (IEEE) of every payload byte before it
//! ```
//!
//! The runs' `n` must sum to `count`, else the index is damaged. Neighbouring runs may repeat a
//! seq (a run is at most `u32::MAX` elements). Records arrive mostly ascending, so a run costs
//! 2-3 bytes. A writer with no origins writes version 1, byte for byte as before.
//!
//! # Validation on read (a bad index is never used)
//!
//! [`ElementIndex::parse`] tells apart a user header that is not an index (any other value, or
//! another magic: ignored silently), an index of a newer version (ignored silently: read by
//! walking) and a damaged one (a reason; origins that do not add up to the elements included). Then [`ElementIndex::check`] binds it to the body it
//! came with: the body length, the array's element count and first position must be those of
//! the body, every start must lie inside it, and the first and last elements, walked, must end
//! where the index says. Together with the CRC this catches a flipped byte, an index copied onto
//! another body and a truncated one; a reader then walks the elements as if there were no index
//! (the lazy reader reports why in [`LazyDoc::element_index`](crate::LazyDoc::element_index)).
//! A deliberately forged index (recomputed CRC, plausible bounds) can make elements be read from
//! the wrong place, as a forged body can make them read wrong: the blob's SHA-1 trailer and the
//! writers are what vouch for both. Reading from a wrong place is still bounded and validated like
//! any hostile body (no panic, [`Limits`](crate::Limits) apply).

use crate::tag::{BINARY, SHORT_BINARY_0};
use crate::varint;

/// The magic that starts an index payload.
pub const MAGIC: &[u8; 4] = b"SLIX";
/// The index format version written without origins.
pub const VERSION: u8 = 1;
/// The index format version written with origins (the newest one read).
pub const VERSION_ORIGINS: u8 = 2;

/// Append the user header body of the index of an array whose elements start at `starts`
/// (body positions, increasing) in a body of `body_len` bytes. Returns `false` (and appends
/// nothing) when there is nothing to index or the document is beyond the format's limits.
pub fn write(starts: &[usize], body_len: usize, out: &mut Vec<u8>) -> bool {
    write_with_origins(starts, body_len, &[], out)
}

/// Whether `runs` describe exactly `count` elements: every run at least one element, their sum
/// `count`.
pub fn origins_fit(runs: &[(u64, u32)], count: usize) -> bool {
    let mut sum = 0u64;
    for &(_, n) in runs {
        if n == 0 {
            return false;
        }
        sum += u64::from(n);
    }
    sum == count as u64
}

/// The runs of elements `from..to` of the elements described by `runs` (cut at both ends).
pub fn cut_origins(runs: &[(u64, u32)], from: usize, to: usize) -> Vec<(u64, u32)> {
    let mut out = Vec::new();
    let mut at = 0usize;
    for &(seq, n) in runs {
        let end = at.saturating_add(n as usize);
        let (lo, hi) = (at.max(from), end.min(to));
        if lo < hi {
            // `hi - lo` ≤ `n`: it fits a u32.
            out.push((seq, (hi - lo) as u32));
        }
        if end >= to {
            break;
        }
        at = end;
    }
    out
}

/// [`write()`], with the elements' origins as runs `(seq, n)` in element order: a version 2
/// index. Without runs, or with runs that do not describe exactly the elements
/// ([`origins_fit`]), a version 1 index (the origins are then unknown to readers).
pub fn write_with_origins(
    starts: &[usize],
    body_len: usize,
    origins: &[(u64, u32)],
    out: &mut Vec<u8>,
) -> bool {
    let Some((&first, _)) = starts.split_first() else {
        return false;
    };
    if u32::try_from(body_len).is_err() || u32::try_from(starts.len()).is_err() || first >= body_len
    {
        return false;
    }
    let mut min_len = usize::MAX;
    let mut max_len = 0usize;
    for w in starts.windows(2) {
        if w[1] <= w[0] {
            return false;
        }
        let len = w[1] - w[0];
        min_len = min_len.min(len);
        max_len = max_len.max(len);
    }
    if starts.last().is_some_and(|&l| l >= body_len) {
        return false;
    }
    if starts.len() == 1 {
        min_len = 0;
        max_len = 0;
    }
    let width = usize::BITS - (max_len - min_len).leading_zeros();
    let with_origins = !origins.is_empty() && origins_fit(origins, starts.len());
    let origin_bytes = if with_origins {
        3 * origins.len() + 10
    } else {
        0
    };
    let mut payload =
        Vec::with_capacity(24 + (starts.len() * width as usize).div_ceil(8) + origin_bytes);
    payload.extend_from_slice(MAGIC);
    payload.push(if with_origins {
        VERSION_ORIGINS
    } else {
        VERSION
    });
    varint::write(&mut payload, starts.len() as u64);
    varint::write(&mut payload, first as u64);
    varint::write(&mut payload, body_len as u64);
    varint::write(&mut payload, min_len as u64);
    payload.push(width as u8);
    let (mut acc, mut bits) = (0u64, 0u32);
    for w in starts.windows(2) {
        acc |= ((w[1] - w[0] - min_len) as u64) << bits;
        bits += width;
        while bits >= 8 {
            payload.push(acc as u8);
            acc >>= 8;
            bits -= 8;
        }
    }
    if bits > 0 {
        payload.push(acc as u8);
    }
    if with_origins {
        varint::write(&mut payload, origins.len() as u64);
        let mut prev = 0u64;
        for &(seq, n) in origins {
            varint::write(&mut payload, varint::zigzag(seq.wrapping_sub(prev) as i64));
            varint::write(&mut payload, u64::from(n));
            prev = seq;
        }
    }
    let crc = crc32fast::hash(&payload);
    payload.extend_from_slice(&crc.to_le_bytes());
    out.push(BINARY);
    varint::write(out, payload.len() as u64);
    out.extend_from_slice(&payload);
    true
}

/// What a user header held, for [`ElementIndex::parse`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Parsed {
    /// Not an element index (another value, another magic): nothing to say.
    NotAnIndex,
    /// An index of a version this reader does not know: read by walking, nothing to say.
    Unsupported(u8),
    /// An index that is damaged: the reason.
    Bad(String),
    /// A well-formed index (still to be [checked](ElementIndex::check) against its body).
    Index(ElementIndex),
}

/// A parsed element index: the start of every element and the end of the last, and (version 2)
/// the elements' origins.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ElementIndex {
    /// `count + 1` body positions: element `i` is `bounds[i] .. bounds[i + 1]`.
    bounds: Vec<u32>,
    /// Runs `(seq, n)` in element order, summing to the count; empty in a version 1 index.
    origins: Vec<(u64, u32)>,
}

impl ElementIndex {
    /// Parse the user header body `uh` (the bytes after the header's bitfield byte).
    pub fn parse(uh: &[u8]) -> Parsed {
        // The value must be one binary string; its bytes are the payload.
        let payload = match uh.first() {
            Some(&BINARY) => {
                let mut p = 1;
                match varint::read(uh, &mut p) {
                    Ok(n) if usize::try_from(n).ok() == uh.len().checked_sub(p) => &uh[p..],
                    _ => return Parsed::NotAnIndex,
                }
            }
            Some(&t) if (SHORT_BINARY_0..SHORT_BINARY_0 + 32).contains(&t) => {
                let n = (t & 0x1f) as usize;
                if uh.len() != 1 + n {
                    return Parsed::NotAnIndex;
                }
                &uh[1..]
            }
            _ => return Parsed::NotAnIndex,
        };
        if payload.len() < MAGIC.len() || &payload[..MAGIC.len()] != MAGIC {
            return Parsed::NotAnIndex;
        }
        let Some(&version) = payload.get(MAGIC.len()) else {
            return Parsed::Bad("truncated after the magic".into());
        };
        if version != VERSION && version != VERSION_ORIGINS {
            return Parsed::Unsupported(version);
        }
        match Self::parse_payload(payload, version == VERSION_ORIGINS) {
            Ok(index) => Parsed::Index(index),
            Err(reason) => Parsed::Bad(reason),
        }
    }

    /// A payload of version 1, or of version 2 (`with_origins`).
    fn parse_payload(payload: &[u8], with_origins: bool) -> Result<ElementIndex, String> {
        let Some(crc_at) = payload.len().checked_sub(4) else {
            return Err("shorter than its checksum".into());
        };
        let (data, crc) = payload.split_at(crc_at);
        let want = u32::from_le_bytes([crc[0], crc[1], crc[2], crc[3]]);
        let got = crc32fast::hash(data);
        if got != want {
            return Err(format!(
                "checksum mismatch (CRC-32 {got:08x}, recorded {want:08x})"
            ));
        }
        let mut p = MAGIC.len() + 1;
        let mut field = |name: &str| -> Result<u32, String> {
            let v = varint::read(data, &mut p).map_err(|e| format!("{name}: {e}"))?;
            u32::try_from(v).map_err(|_| format!("{name} {v} is beyond the format's 32 bits"))
        };
        let count = field("count")?;
        let first = field("first")?;
        let body_len = field("body_len")?;
        let min_len = field("min_len")?;
        let width = *data.get(p).ok_or("truncated before the width")? as u32;
        p += 1;
        if count == 0 {
            return Err("an index of no elements".into());
        }
        if width > 32 {
            return Err(format!("width {width} is over 32 bits"));
        }
        // Each element is at least a byte: bounds the allocation by the body the index claims
        // (which `check` then compares with the real one).
        if count >= body_len {
            return Err(format!("{count} elements cannot fit in {body_len} bytes"));
        }
        let need = ((count as u64 - 1) * width as u64).div_ceil(8);
        let rest = &data[p..];
        let packed_end = usize::try_from(need).ok().filter(|&n| {
            if with_origins {
                n < rest.len()
            } else {
                n == rest.len()
            }
        });
        let Some(packed_end) = packed_end else {
            return Err(format!(
                "{} bytes of packed lengths{}, {need} expected for {count} elements of {width} bits",
                rest.len(),
                if with_origins { " and origins" } else { "" },
            ));
        };
        let (packed, origin_bytes) = rest.split_at(packed_end);
        let origins = if with_origins {
            parse_origins(origin_bytes, count)?
        } else {
            Vec::new()
        };
        let mut bounds = Vec::with_capacity(count as usize + 1);
        let mut at = first as u64;
        bounds.push(first);
        let mask = if width == 32 {
            u32::MAX as u64
        } else {
            (1u64 << width) - 1
        };
        let (mut acc, mut bits, mut next) = (0u64, 0u32, 0usize);
        for _ in 1..count {
            while bits < width {
                acc |= (packed[next] as u64) << bits;
                next += 1;
                bits += 8;
            }
            let len = (acc & mask) + min_len as u64;
            acc >>= width;
            bits -= width;
            at += len;
            if len == 0 || at >= body_len as u64 {
                return Err(format!(
                    "element {} starts at {at}, past the body's {body_len} bytes",
                    bounds.len()
                ));
            }
            bounds.push(at as u32);
        }
        bounds.push(body_len);
        Ok(ElementIndex { bounds, origins })
    }

    /// The elements' origins, runs `(seq, n)` in element order summing to [`len`](Self::len)
    /// (seq 0: no source record); `None` for a version 1 index.
    pub fn origins(&self) -> Option<&[(u64, u32)]> {
        (!self.origins.is_empty()).then_some(&self.origins[..])
    }

    /// Elements indexed.
    pub fn len(&self) -> usize {
        self.bounds.len() - 1
    }

    /// Always `false`: an index has at least one element.
    pub fn is_empty(&self) -> bool {
        self.len() == 0
    }

    /// Body length the index was written for.
    pub fn body_len(&self) -> usize {
        self.bounds[self.bounds.len() - 1] as usize
    }

    /// `count + 1` positions: element `i` spans `bounds()[i] .. bounds()[i + 1]`.
    pub fn bounds(&self) -> &[u32] {
        &self.bounds
    }

    /// [`ElementIndex::bounds`], by value.
    pub fn into_bounds(self) -> Vec<u32> {
        self.bounds
    }

    /// Check the index against the body it came with: the body's length, the top-level array's
    /// `count` and the position of its `first` element, and `ends_of(pos)` (the end of the value
    /// at `pos`, walked) for the first and the last element.
    pub fn check(
        &self,
        body_len: usize,
        count: usize,
        first: usize,
        mut end_of: impl FnMut(usize) -> Option<usize>,
    ) -> Result<(), String> {
        if self.body_len() != body_len {
            return Err(format!(
                "written for a body of {} bytes, this one has {body_len}",
                self.body_len()
            ));
        }
        if self.len() != count {
            return Err(format!(
                "lists {} elements, the array has {count}",
                self.len()
            ));
        }
        if self.bounds[0] as usize != first {
            return Err(format!(
                "element 0 at {}, the array's is at {first}",
                self.bounds[0]
            ));
        }
        let n = self.len();
        for i in [0, n - 1] {
            let (s, e) = (self.bounds[i] as usize, self.bounds[i + 1] as usize);
            if end_of(s) != Some(e) {
                return Err(format!(
                    "element {i} does not span {s}..{e} as the index says"
                ));
            }
        }
        Ok(())
    }
}

/// The origin runs of a version 2 payload (`bytes`: after the packed lengths, before the CRC),
/// which must describe exactly `count` elements.
fn parse_origins(bytes: &[u8], count: u32) -> Result<Vec<(u64, u32)>, String> {
    let mut p = 0;
    let nruns = varint::read(bytes, &mut p).map_err(|e| format!("origin runs: {e}"))?;
    // Every run is at least one element: bounds the allocation by the count.
    if nruns == 0 || nruns > u64::from(count) {
        return Err(format!("{nruns} origin runs for {count} elements"));
    }
    let mut runs = Vec::with_capacity(nruns as usize);
    let (mut prev, mut sum) = (0u64, 0u64);
    for i in 0..nruns {
        let delta = varint::read(bytes, &mut p).map_err(|e| format!("origin run {i}: {e}"))?;
        let n = varint::read(bytes, &mut p).map_err(|e| format!("origin run {i}: {e}"))?;
        let n = u32::try_from(n)
            .ok()
            .filter(|&n| n > 0)
            .ok_or_else(|| format!("origin run {i} of {n} elements"))?;
        prev = prev.wrapping_add(varint::unzigzag(delta) as u64);
        sum += u64::from(n);
        runs.push((prev, n));
    }
    if sum != u64::from(count) {
        return Err(format!(
            "origin runs of {sum} elements, the index has {count}"
        ));
    }
    if p != bytes.len() {
        return Err(format!("{} bytes after the origin runs", bytes.len() - p));
    }
    Ok(runs)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn roundtrip(starts: &[usize], body_len: usize) -> ElementIndex {
        let mut uh = Vec::new();
        assert!(write(starts, body_len, &mut uh));
        match ElementIndex::parse(&uh) {
            Parsed::Index(i) => i,
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn round_trips_starts() {
        for starts in [
            vec![3],
            vec![3, 4],
            vec![3, 400, 900, 901, 1500],
            (0..1000).map(|i| 4 + i * 37 + (i % 7) * 3).collect(),
        ] {
            let body_len = starts.last().unwrap() + 5;
            let idx = roundtrip(&starts, body_len);
            let mut want: Vec<u32> = starts.iter().map(|&s| s as u32).collect();
            want.push(body_len as u32);
            assert_eq!(idx.bounds(), &want[..]);
        }
    }

    #[test]
    fn refuses_what_it_cannot_index() {
        let mut out = Vec::new();
        assert!(!write(&[], 10, &mut out));
        assert!(!write(&[5, 5], 10, &mut out));
        assert!(!write(&[5, 9], 9, &mut out));
        assert!(!write(&[1, 2], 1 << 33, &mut out));
        assert!(out.is_empty());
    }

    #[test]
    fn every_flipped_byte_is_caught_or_not_an_index() {
        let starts: Vec<usize> = (0..50).map(|i| 3 + i * 41 + (i % 5)).collect();
        let mut uh = Vec::new();
        assert!(write(&starts, 3000, &mut uh));
        for i in 0..uh.len() {
            for bit in 0..8 {
                let mut bad = uh.clone();
                bad[i] ^= 1 << bit;
                match ElementIndex::parse(&bad) {
                    Parsed::Index(idx) => panic!("byte {i} bit {bit}: accepted {idx:?}"),
                    Parsed::NotAnIndex | Parsed::Unsupported(_) | Parsed::Bad(_) => {}
                }
            }
        }
    }

    #[test]
    fn other_user_headers_are_not_indexes() {
        for uh in [
            &b""[..],
            b"\x01",
            b"\x63meta",
            b"\x26\x04SLIY",
            b"\x28\x2a\x00",
        ] {
            assert_eq!(ElementIndex::parse(uh), Parsed::NotAnIndex, "{uh:?}");
        }
        assert!(matches!(
            ElementIndex::parse(b"\x26\x04SLIX"),
            Parsed::Bad(_)
        ));
        let mut uh = Vec::new();
        assert!(write(&[3, 10], 20, &mut uh));
        uh[2 + MAGIC.len()] = 3; // version byte after BINARY + length
        assert_eq!(ElementIndex::parse(&uh), Parsed::Unsupported(3));
    }

    fn write_v2(starts: &[usize], body_len: usize, runs: &[(u64, u32)]) -> Vec<u8> {
        let mut uh = Vec::new();
        assert!(write_with_origins(starts, body_len, runs, &mut uh));
        uh
    }

    #[test]
    fn version_1_bytes_are_unchanged() {
        // Lengths 7 and 10: min_len 7, width 2, packed 0 | 3 << 2.
        let body = [b"SLIX".as_slice(), &[1, 3, 3, 30, 7, 2, 0x0c]].concat();
        let mut want = vec![BINARY, (body.len() + 4) as u8];
        want.extend_from_slice(&body);
        want.extend_from_slice(&crc32fast::hash(&body).to_le_bytes());
        let mut uh = Vec::new();
        assert!(write(&[3, 10, 20], 30, &mut uh));
        assert_eq!(uh, want);
        // No origins, or origins that do not describe the elements: version 1, same bytes.
        for runs in [&[][..], &[(5, 2)], &[(5, 3), (6, 1)], &[(5, 3), (6, 0)]] {
            let mut other = Vec::new();
            assert!(write_with_origins(&[3, 10, 20], 30, runs, &mut other));
            assert_eq!(other, want, "{runs:?}");
        }
        assert_eq!(roundtrip(&[3, 10, 20], 30).origins(), None);
    }

    #[test]
    fn version_2_round_trips_origins() {
        let starts: Vec<usize> = (0..100).map(|i| 4 + i * 9).collect();
        for runs in [
            vec![(0, 100)],
            vec![(7, 1), (7, 99)],
            vec![(u64::MAX, 40), (0, 10), (1, 10), (u64::MAX - 1, 40)],
            (0..100).map(|i| (1_000_000 - i * 3, 1)).collect(),
        ] {
            let uh = write_v2(&starts, 1000, &runs);
            let mut payload_at = 1;
            varint::read(&uh, &mut payload_at).unwrap();
            assert_eq!(uh[payload_at + MAGIC.len()], VERSION_ORIGINS);
            let Parsed::Index(idx) = ElementIndex::parse(&uh) else {
                panic!("{runs:?} did not parse");
            };
            assert_eq!(idx.origins(), Some(&runs[..]));
            // The bounds are those of the version 1 index of the same starts.
            assert_eq!(idx.bounds(), roundtrip(&starts, 1000).bounds());
        }
    }

    #[test]
    fn every_flipped_bit_of_a_version_2_index_is_caught() {
        let starts: Vec<usize> = (0..50).map(|i| 3 + i * 41 + (i % 5)).collect();
        let uh = write_v2(&starts, 3000, &[(10, 20), (12, 5), (11, 25)]);
        for i in 0..uh.len() {
            for bit in 0..8 {
                let mut bad = uh.clone();
                bad[i] ^= 1 << bit;
                if let Parsed::Index(idx) = ElementIndex::parse(&bad) {
                    panic!("byte {i} bit {bit}: accepted {idx:?}");
                }
            }
        }
    }

    /// `uh` (a version 2 index of `starts`) with its origins replaced by `origin_bytes` and the
    /// CRC recomputed: damage the CRC cannot catch.
    fn with_origin_bytes(starts: &[usize], body_len: usize, origin_bytes: &[u8]) -> Vec<u8> {
        let mut v1 = Vec::new();
        assert!(write(starts, body_len, &mut v1));
        let mut payload = v1[2..v1.len() - 4].to_vec();
        payload[MAGIC.len()] = VERSION_ORIGINS;
        payload.extend_from_slice(origin_bytes);
        let crc = crc32fast::hash(&payload);
        payload.extend_from_slice(&crc.to_le_bytes());
        let mut uh = vec![BINARY];
        varint::write(&mut uh, payload.len() as u64);
        uh.extend_from_slice(&payload);
        uh
    }

    #[test]
    fn origins_that_do_not_add_up_are_damage() {
        let starts = [3, 10, 20];
        // Sanity: the hand-made form of a good one parses.
        let good = with_origin_bytes(&starts, 30, &[2, 10, 2, 2, 1]);
        let Parsed::Index(idx) = ElementIndex::parse(&good) else {
            panic!("hand-made index did not parse");
        };
        assert_eq!(idx.origins(), Some(&[(5, 2), (6, 1)][..]));
        for (bytes, what) in [
            (&[2, 10, 2, 2, 2][..], "sum 4 of 3"),
            (&[2, 10, 1, 2, 1], "sum 2 of 3"),
            (&[2, 10, 3, 2, 0], "a run of 0"),
            (&[0], "no runs"),
            (&[4, 1, 1, 1, 1, 1, 1, 1, 1], "more runs than elements"),
            (&[1, 10, 3, 0], "a byte after the runs"),
            (&[2, 10, 2], "truncated"),
            (&[1, 10, 0x80, 0x80, 0x80, 0x80, 0x10], "a run beyond u32"),
        ] {
            match ElementIndex::parse(&with_origin_bytes(&starts, 30, bytes)) {
                Parsed::Bad(_) => {}
                other => panic!("{what}: {other:?}"),
            }
        }
    }

    #[test]
    fn cut_origins_takes_the_runs_of_a_range() {
        let runs = [(5, 3), (9, 2), (7, 4)];
        assert_eq!(cut_origins(&runs, 0, 9), runs.to_vec());
        assert_eq!(cut_origins(&runs, 0, 3), vec![(5, 3)]);
        assert_eq!(cut_origins(&runs, 2, 6), vec![(5, 1), (9, 2), (7, 1)]);
        assert_eq!(cut_origins(&runs, 3, 5), vec![(9, 2)]);
        assert_eq!(cut_origins(&runs, 8, 9), vec![(7, 1)]);
        assert_eq!(cut_origins(&runs, 4, 4), vec![]);
        let pieces: Vec<_> = [(0, 2), (2, 7), (7, 9)]
            .iter()
            .flat_map(|&(a, b)| cut_origins(&runs, a, b))
            .collect();
        assert_eq!(pieces, vec![(5, 2), (5, 1), (9, 2), (7, 2), (7, 2)]);
    }

    #[test]
    fn check_binds_the_index_to_its_body() {
        let idx = roundtrip(&[3, 10, 20], 30);
        let ends = |p: usize| match p {
            3 => Some(10),
            10 => Some(20),
            20 => Some(30),
            _ => None,
        };
        assert!(idx.check(30, 3, 3, ends).is_ok());
        assert!(idx.check(31, 3, 3, ends).is_err());
        assert!(idx.check(30, 2, 3, ends).is_err());
        assert!(idx.check(30, 3, 4, ends).is_err());
        assert!(idx.check(30, 3, 3, |_| Some(11)).is_err());
    }
}
