//! Reading a body byte by byte: the bounds checks, varints, back-offsets and error offsets that
//! the decoder ([`crate::de`]), the lazy reader ([`crate::lazy`]), the splitter
//! ([`crate::split`]) and the dump ([`crate::dump`]) share.
//!
//! [`Input`] reads at positions its caller keeps (the lazy reader and the splitter jump around a
//! body); [`Cursor`] is an [`Input`] with its own position, for reading front to back (the
//! decoder). Every read is bounds-checked: running off the end is an EOF error whose offset is
//! the end of the input, never a panic. Positions are indices into the body; errors report them
//! shifted by the input's `error_base`, so that they are offsets in the document.

use crate::error::{Error, ErrorCode, Result};
use crate::varint;

/// The bytes of a body and how its indices relate to the document.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Input<'a> {
    /// The body bytes.
    pub(crate) buf: &'a [u8],
    /// Subtracted from a document offset (as written after REFP/ALIAS/COPY/OBJECTV) to get an
    /// index in `buf`.
    pub(crate) offset_base: usize,
    /// Added to an index in `buf` to report an error offset.
    pub(crate) error_base: usize,
}

impl<'a> Input<'a> {
    pub(crate) fn new(buf: &'a [u8], offset_base: usize, error_base: usize) -> Input<'a> {
        Input {
            buf,
            offset_base,
            error_base,
        }
    }

    /// Number of bytes in the body.
    #[inline]
    pub(crate) fn len(&self) -> usize {
        self.buf.len()
    }

    /// An error found at body index `at`.
    #[cold]
    pub(crate) fn err(&self, code: ErrorCode, at: usize) -> Error {
        Error::new(code, at + self.error_base)
    }

    /// The body ended too early.
    #[cold]
    pub(crate) fn eof(&self) -> Error {
        Error::eof(self.buf.len() + self.error_base)
    }

    /// The byte at `pos`.
    #[inline]
    pub(crate) fn byte_at(&self, pos: usize) -> Result<u8> {
        self.buf.get(pos).copied().ok_or_else(|| self.eof())
    }

    /// The varint at `*pos`, advancing it. Up to 3 bytes inline (all lengths and counts that
    /// matter, offsets in bodies of up to 2 MiB); longer ones, and all errors, through
    /// [`varint::read`].
    #[inline]
    pub(crate) fn varint_at(&self, pos: &mut usize) -> Result<u64> {
        let b = self.buf;
        let p = *pos;
        if let Some(&b0) = b.get(p) {
            if b0 < 0x80 {
                *pos = p + 1;
                return Ok(b0 as u64);
            }
            if let (Some(&b1), Some(&b2)) = (b.get(p + 1), b.get(p + 2)) {
                if b1 < 0x80 {
                    *pos = p + 2;
                    return Ok((b0 & 0x7f) as u64 | (b1 as u64) << 7);
                }
                if b2 < 0x80 {
                    *pos = p + 3;
                    return Ok((b0 & 0x7f) as u64 | ((b1 & 0x7f) as u64) << 7 | (b2 as u64) << 14);
                }
            }
        }
        varint::read(b, pos).map_err(|e| e.with_base(self.error_base))
    }

    /// The position `n` bytes after `pos`, which must be within the body.
    #[inline]
    pub(crate) fn skip(&self, pos: usize, n: u64) -> Result<usize> {
        usize::try_from(n)
            .ok()
            .and_then(|n| pos.checked_add(n))
            .filter(|&e| e <= self.buf.len())
            .ok_or_else(|| self.eof())
    }

    /// The `n` bytes at `pos` and the position after them.
    #[inline]
    pub(crate) fn slice(&self, pos: usize, n: u64) -> Result<(&'a [u8], usize)> {
        let end = self.skip(pos, n)?;
        Ok((&self.buf[pos..end], end))
    }

    /// A document offset (as written after REFP/ALIAS/COPY/OBJECTV) as a body index strictly
    /// before `before`, so that following back-references always terminates.
    #[inline]
    pub(crate) fn back_offset(&self, offset: u64, before: usize) -> Result<usize> {
        usize::try_from(offset)
            .ok()
            .and_then(|o| o.checked_sub(self.offset_base))
            .filter(|&i| i < before)
            .ok_or_else(|| self.err(ErrorCode::BadOffset(offset), before))
    }

    /// An element count (ARRAY, HASH) at `*pos`, advancing it; more than `max` is an
    /// element-count limit error at `at` (the container's tag).
    #[inline]
    pub(crate) fn count_at(&self, pos: &mut usize, at: usize, max: usize) -> Result<usize> {
        let n = self.varint_at(pos)?;
        if n > max as u64 {
            return Err(self.err(ErrorCode::ElementCountLimit(max), at));
        }
        Ok(n as usize)
    }

    /// A string length (BINARY, STR_UTF8) at `*pos`, advancing it; more than `max` is a
    /// string-length limit error at `at` (the string's tag).
    #[inline]
    pub(crate) fn string_len_at(&self, pos: &mut usize, at: usize, max: usize) -> Result<usize> {
        let n = self.varint_at(pos)?;
        if n > max as u64 {
            return Err(self.err(ErrorCode::StringLengthLimit(max), at));
        }
        Ok(n as usize)
    }
}

/// An [`Input`] read front to back from a position of its own.
#[derive(Debug, Clone, Copy)]
pub(crate) struct Cursor<'a> {
    /// What is read.
    pub(crate) input: Input<'a>,
    /// The next body index to read.
    pub(crate) pos: usize,
}

impl<'a> Cursor<'a> {
    /// A cursor at the start of `input`.
    pub(crate) fn new(input: Input<'a>) -> Cursor<'a> {
        Cursor { input, pos: 0 }
    }

    /// The body bytes.
    #[inline]
    pub(crate) fn buf(&self) -> &'a [u8] {
        self.input.buf
    }

    /// The next byte, without reading it.
    #[inline]
    pub(crate) fn peek(&self) -> Option<u8> {
        self.input.buf.get(self.pos).copied()
    }

    /// Bytes left after the position (0 if it is past the end).
    #[inline]
    pub(crate) fn remaining(&self) -> usize {
        self.input.buf.len().saturating_sub(self.pos)
    }

    /// Read one byte.
    #[inline]
    pub(crate) fn byte(&mut self) -> Result<u8> {
        match self.input.buf.get(self.pos) {
            Some(&b) => {
                self.pos += 1;
                Ok(b)
            }
            None => Err(self.input.eof()),
        }
    }

    /// Read a varint (see [`Input::varint_at`]).
    #[inline]
    pub(crate) fn varint(&mut self) -> Result<u64> {
        self.input.varint_at(&mut self.pos)
    }

    /// Read `n` bytes.
    #[inline]
    pub(crate) fn take(&mut self, n: u64) -> Result<&'a [u8]> {
        let (s, end) = self.input.slice(self.pos, n)?;
        self.pos = end;
        Ok(s)
    }

    /// See [`Input::err`].
    #[cold]
    pub(crate) fn err(&self, code: ErrorCode, at: usize) -> Error {
        self.input.err(code, at)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_and_bounds() {
        let input = Input::new(&[0x05, 0xac, 0x02, 0x80, 0x80, 0x01, b'a', b'b'], 1, 10);
        let mut c = Cursor::new(input);
        assert_eq!(c.byte().unwrap(), 5);
        assert_eq!(c.varint().unwrap(), 300);
        assert_eq!(c.varint().unwrap(), 1 << 14);
        assert_eq!(c.peek(), Some(b'a'));
        assert_eq!(c.remaining(), 2);
        assert_eq!(c.take(2).unwrap(), b"ab");
        let e = c.take(1).unwrap_err();
        assert!(e.is_eof());
        assert_eq!(e.offset(), 18);
        assert!(c.byte().unwrap_err().is_eof());
        assert_eq!(input.skip(2, 6).unwrap(), 8);
        assert!(input.skip(2, 7).is_err());
        assert!(input.skip(2, u64::MAX).is_err());
    }

    #[test]
    fn varint_errors_carry_the_base() {
        let input = Input::new(&[0x80, 0x80], 1, 100);
        let e = input.varint_at(&mut 0).unwrap_err();
        assert!(e.is_eof());
        assert_eq!(e.offset(), 102);
        let over = [0xff; 11];
        let input = Input::new(&over, 1, 100);
        let e = input.varint_at(&mut 0).unwrap_err();
        assert_eq!(e.code(), &ErrorCode::VarintOverflow);
        assert_eq!(e.offset(), 100);
    }

    #[test]
    fn back_offsets_point_backwards() {
        let input = Input::new(&[0; 16], 1, 4);
        assert_eq!(input.back_offset(1, 5).unwrap(), 0);
        assert_eq!(input.back_offset(5, 5).unwrap(), 4);
        let e = input.back_offset(6, 5).unwrap_err();
        assert_eq!(e.code(), &ErrorCode::BadOffset(6));
        assert_eq!(e.offset(), 9);
        assert!(input.back_offset(0, 5).is_err());
        assert!(input.back_offset(u64::MAX, 5).is_err());
    }

    #[test]
    fn limited_varints() {
        let input = Input::new(&[0x03, 0x09], 1, 0);
        let mut p = 0;
        assert_eq!(input.count_at(&mut p, 7, 3).unwrap(), 3);
        let e = input.count_at(&mut p, 7, 3).unwrap_err();
        assert_eq!(e.code(), &ErrorCode::ElementCountLimit(3));
        assert_eq!(e.offset(), 7);
        let mut p = 1;
        let e = input.string_len_at(&mut p, 1, 8).unwrap_err();
        assert_eq!(e.code(), &ErrorCode::StringLengthLimit(8));
    }
}
