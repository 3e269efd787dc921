//! The document header: magic, version/type byte, optional suffix with user meta data.

use crate::error::{Error, ErrorCode, Result};
use crate::varint;

/// Magic of protocol versions 1 and 2.
pub const MAGIC_V1: &[u8; 4] = b"=srl";
/// Magic of protocol version 3 and later ("s" with its high bit set).
pub const MAGIC_V3: &[u8; 4] = b"=\xF3rl";
/// Newest protocol version this codec reads and writes.
pub const MAX_PROTOCOL: u8 = 5;

/// How the body that follows the header is stored (the high nibble of the version-type byte).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Encoding {
    /// Plain body.
    Raw,
    /// Protocol 1 only: the rest of the document is one Snappy block.
    SnappyLegacy,
    /// `<varint compressed-len><snappy block>`.
    Snappy,
    /// `<varint uncompressed-len><varint compressed-len><zlib stream>` (protocol 3+).
    Zlib,
    /// `<varint compressed-len><zstd frame>` (protocol 4+).
    Zstd,
}

impl Encoding {
    /// The type nibble written in the version-type byte.
    pub fn type_nibble(self) -> u8 {
        match self {
            Encoding::Raw => 0,
            Encoding::SnappyLegacy => 1,
            Encoding::Snappy => 2,
            Encoding::Zlib => 3,
            Encoding::Zstd => 4,
        }
    }
}

/// A parsed document header.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Header {
    /// Protocol version, 1 to 5.
    pub version: u8,
    /// Body encoding (compression).
    pub encoding: Encoding,
    /// Offset of the first byte after the header (the body or its compression framing).
    pub body_offset: usize,
    /// Byte range of the user meta data body (protocol 2+), if the document carries one.
    pub user_header: Option<std::ops::Range<usize>>,
}

/// Parse the header at the start of `doc`.
pub fn parse(doc: &[u8]) -> Result<Header> {
    if doc.len() < 5 {
        // A prefix of a valid magic is a truncated document, anything else is not Sereal.
        let n = doc.len().min(4);
        if MAGIC_V1[..n] == doc[..n] || MAGIC_V3[..n] == doc[..n] {
            return Err(Error::eof(doc.len()));
        }
        return Err(Error::new(ErrorCode::BadMagic, 0));
    }
    let magic = &doc[..4];
    let version_type = doc[4];
    let version = version_type & 0x0f;
    let type_nibble = version_type >> 4;
    let new_magic = magic == MAGIC_V3;
    if !new_magic && magic != MAGIC_V1 {
        return Err(Error::new(ErrorCode::BadMagic, 0));
    }
    if version == 0 || version > MAX_PROTOCOL || new_magic != (version >= 3) {
        return Err(Error::new(ErrorCode::BadVersion(version), 4));
    }
    let encoding = match type_nibble {
        0 => Encoding::Raw,
        1 if version == 1 => Encoding::SnappyLegacy,
        2 => Encoding::Snappy,
        3 if version >= 3 => Encoding::Zlib,
        // The reference encoder writes zstd with a protocol-3 version nibble when asked to, so
        // accept it there too rather than refuse documents that exist in the wild.
        4 if version >= 3 => Encoding::Zstd,
        t => return Err(Error::new(ErrorCode::BadEncodingType(t), 4)),
    };
    let mut pos = 5;
    let suffix_len = varint::read(doc, &mut pos)? as usize;
    let suffix_start = pos;
    let suffix_end = suffix_start
        .checked_add(suffix_len)
        .filter(|&e| e <= doc.len())
        .ok_or_else(|| Error::eof(doc.len()))?;
    let mut user_header = None;
    if version >= 2 && suffix_len > 0 && doc[suffix_start] & 1 == 1 {
        user_header = Some(suffix_start + 1..suffix_end);
    }
    Ok(Header {
        version,
        encoding,
        body_offset: suffix_end,
        user_header,
    })
}

/// Append a header with no user meta data.
pub fn write(out: &mut Vec<u8>, version: u8, encoding: Encoding) {
    out.extend_from_slice(if version >= 3 { MAGIC_V3 } else { MAGIC_V1 });
    out.push((encoding.type_nibble() << 4) | version);
    out.push(0); // empty header suffix
}

/// Append a header whose suffix carries `user_body` (one encoded Sereal value, e.g. an
/// [element index](crate::index)) as user meta data. Protocol 2 and later only; with an empty
/// `user_body` or an older version this is [`write`].
pub fn write_with_user_header(
    out: &mut Vec<u8>,
    version: u8,
    encoding: Encoding,
    user_body: &[u8],
) {
    if version < 2 || user_body.is_empty() {
        return write(out, version, encoding);
    }
    out.extend_from_slice(if version >= 3 { MAGIC_V3 } else { MAGIC_V1 });
    out.push((encoding.type_nibble() << 4) | version);
    varint::write(out, 1 + user_body.len() as u64);
    out.push(1); // bitfield: user meta data present
    out.extend_from_slice(user_body);
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_versions_and_rejects_bad_magic() {
        let h = parse(b"=\xF3rl\x03\x00\x01").unwrap();
        assert_eq!(
            (h.version, h.encoding, h.body_offset),
            (3, Encoding::Raw, 6)
        );
        let h = parse(b"=srl\x22\x00").unwrap();
        assert_eq!((h.version, h.encoding), (2, Encoding::Snappy));
        assert!(parse(b"=srl\x03\x00\x01").is_err(), "old magic with v3");
        assert!(parse(b"=\xF3rl\x02\x00\x01").is_err(), "new magic with v2");
        assert!(parse(b"XXXX\x03\x00").is_err());
        assert!(parse(b"=\xF3r").unwrap_err().is_eof());
        assert!(
            parse(b"=\xF3rl\x03\x05\x01").unwrap_err().is_eof(),
            "suffix past the end"
        );
    }

    #[test]
    fn user_header_range() {
        // version 3, suffix of 3 bytes: bitfield 1, then the body `POS_1 POS_2`.
        let h = parse(b"=\xF3rl\x03\x03\x01\x01\x02\x07").unwrap();
        assert_eq!(h.user_header, Some(7..9));
        assert_eq!(h.body_offset, 9);
    }
}
