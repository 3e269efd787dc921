//! Varints (little-endian base-128) and zigzag, as the spec defines them.

use crate::error::{Error, ErrorCode, Result};

/// Read a varint at `*pos`, advancing it. At most 10 bytes; more is an overflow error.
#[inline]
pub fn read(buf: &[u8], pos: &mut usize) -> Result<u64> {
    // Fast path: one byte (lengths, small counts, most offsets in small documents), or two
    // (COPY offsets into the first 16 KiB of a body, where an events blob's keys are: most keys
    // of most events). Longer varints and all errors take the cold path.
    if let Some(&b) = buf.get(*pos) {
        if b < 0x80 {
            *pos += 1;
            return Ok(b as u64);
        }
        if let Some(&b1) = buf.get(*pos + 1) {
            if b1 < 0x80 {
                *pos += 2;
                return Ok((b & 0x7f) as u64 | (b1 as u64) << 7);
            }
        }
    }
    read_slow(buf, pos)
}

#[cold]
fn read_slow(buf: &[u8], pos: &mut usize) -> Result<u64> {
    let start = *pos;
    let mut value: u64 = 0;
    let mut shift = 0u32;
    loop {
        let Some(&b) = buf.get(*pos) else {
            return Err(Error::eof(*pos));
        };
        *pos += 1;
        if shift == 63 && b > 1 {
            return Err(Error::new(ErrorCode::VarintOverflow, start));
        }
        value |= ((b & 0x7f) as u64) << shift;
        if b < 0x80 {
            return Ok(value);
        }
        shift += 7;
        if shift > 63 {
            return Err(Error::new(ErrorCode::VarintOverflow, start));
        }
    }
}

/// Append `v` as a canonical (shortest) varint.
#[inline]
pub fn write(out: &mut Vec<u8>, mut v: u64) {
    while v >= 0x80 {
        out.push((v as u8) | 0x80);
        v >>= 7;
    }
    out.push(v as u8);
}

/// Number of bytes the canonical varint of `v` takes.
pub fn len(mut v: u64) -> usize {
    let mut n = 1;
    while v >= 0x80 {
        v >>= 7;
        n += 1;
    }
    n
}

/// Write `v` into exactly `width` bytes (`width >= len(v)`), padding with continuation bytes the
/// way the reference encoder does when it reserves room for a length before compressing.
pub fn write_padded(out: &mut [u8], mut v: u64) {
    let width = out.len();
    for (i, slot) in out.iter_mut().enumerate() {
        let last = i + 1 == width;
        let byte = (v & 0x7f) as u8;
        v >>= 7;
        *slot = if last { byte } else { byte | 0x80 };
    }
    debug_assert_eq!(v, 0, "value does not fit the reserved varint width");
}

/// Zigzag-decode a varint payload into a signed integer.
#[inline]
pub fn unzigzag(v: u64) -> i64 {
    ((v >> 1) as i64) ^ -((v & 1) as i64)
}

/// Zigzag-encode a signed integer.
#[inline]
pub fn zigzag(v: i64) -> u64 {
    ((v << 1) ^ (v >> 63)) as u64
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trip_and_padding() {
        for v in [
            0u64,
            1,
            127,
            128,
            300,
            16383,
            16384,
            u32::MAX as u64,
            u64::MAX,
        ] {
            let mut out = Vec::new();
            write(&mut out, v);
            assert_eq!(out.len(), len(v));
            let mut pos = 0;
            assert_eq!(read(&out, &mut pos).unwrap(), v);
            assert_eq!(pos, out.len());
        }
        let mut padded = [0u8; 2];
        write_padded(&mut padded, 40);
        assert_eq!(padded, [0xa8, 0x00]);
        let mut pos = 0;
        assert_eq!(read(&padded, &mut pos).unwrap(), 40);
    }

    #[test]
    fn overflow_and_eof() {
        let mut pos = 0;
        assert!(read(&[0xff; 11], &mut pos).unwrap_err().code() == &ErrorCode::VarintOverflow);
        let mut pos = 0;
        assert!(read(&[0x80, 0x80], &mut pos).unwrap_err().is_eof());
        // 2^64-1 is the largest accepted value.
        let mut pos = 0;
        let max = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01];
        assert_eq!(read(&max, &mut pos).unwrap(), u64::MAX);
        let mut pos = 0;
        let over = [0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x02];
        assert!(read(&over, &mut pos).is_err());
    }

    #[test]
    fn zigzag_round_trip() {
        for v in [0i64, -1, 1, -64, 63, i64::MIN, i64::MAX] {
            assert_eq!(unzigzag(zigzag(v)), v);
        }
        assert_eq!(zigzag(i64::MIN), u64::MAX);
    }
}
