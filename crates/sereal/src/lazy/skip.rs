//! Skipping items without reading them: the tight, table-driven loop that finds where an item
//! ends, which every walk over a body uses for what it does not select.

use super::doc::{IndexUse, LazyDoc};
use crate::cursor::Input;
use crate::de::Limits;
use crate::error::{Error, ErrorCode, Result};
use crate::header::Header;
use crate::tag::*;

impl<'a> LazyDoc<'a> {
    /// Skip `pending` consecutive items starting at `pos`; returns the position after them.
    /// Iterative and allocation-free. The tags that make up most of an events document (short
    /// strings, COPY / VARINT with a one- or two-byte varint, small integers) each take one
    /// well-predicted branch; every other tag is handled by one lookup in [`SKIP`] and
    /// branch-free arithmetic, plus a short loop for the tags that carry a varint. (A fully
    /// branch-free loop measured slower: each tag's length then waits on the previous one.)
    /// Each item needs at least one byte, so a lying count fails as soon as it exceeds what is
    /// left.
    pub(super) fn skip_n(&self, mut pos: usize, mut pending: usize) -> Result<usize> {
        let buf = self.body.buf;
        let len = buf.len();
        if pos.saturating_add(pending) > len {
            return Err(self.body.eof());
        }
        while pending > 0 {
            let Some(&tag) = buf.get(pos) else {
                return Err(self.body.eof());
            };
            pending -= 1;
            match tag & !TRACK_FLAG {
                SHORT_BINARY_0..=0x7f => {
                    pos += 1 + (tag & 0x1f) as usize;
                    continue;
                }
                VARINT | ZIGZAG | REFP | ALIAS | COPY => {
                    // Only the varint's length matters here; longer ones take the general path.
                    match (buf.get(pos + 1), buf.get(pos + 2)) {
                        (Some(&b1), _) if b1 < 0x80 => {
                            pos += 2;
                            continue;
                        }
                        (Some(_), Some(&b2)) if b2 < 0x80 => {
                            pos += 3;
                            continue;
                        }
                        _ => {}
                    }
                }
                0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => {
                    pos += 1;
                    continue;
                }
                _ => {}
            }
            let action = SKIP[tag as usize];
            pos += 1;
            if action & SKIP_VARINT == 0 {
                pos += (action & 0xff) as usize;
                pending += ((action >> 8) & 0x1f) as usize;
            } else {
                if action == SKIP_INVALID {
                    return Err(self.bad_tag(tag, pos - 1));
                }
                // The varint: only its value matters here, not its canonical form.
                let at = pos;
                let mut v: u64 = 0;
                let mut shift = 0u32;
                loop {
                    let b = *buf.get(pos).ok_or_else(|| self.body.eof())?;
                    pos += 1;
                    v |= ((b & 0x7f) as u64) << shift;
                    if b < 0x80 {
                        break;
                    }
                    shift += 7;
                    if shift > 63 {
                        return Err(self.body.err(ErrorCode::VarintOverflow, at));
                    }
                }
                let v = usize::try_from(v).unwrap_or(usize::MAX);
                // A string's length moves `pos`; an ARRAY/HASH count adds 1 or 2 items per unit.
                let to_pos = 0usize.wrapping_sub((action & SKIP_V_BYTES != 0) as usize);
                pos = pos.saturating_add(v & to_pos);
                let per_unit = ((action & SKIP_V_ITEMS) >> 10) as usize;
                let extra = ((action >> 8) & 0x03) as usize;
                pending = pending
                    .saturating_add(v.saturating_mul(per_unit))
                    .saturating_add(extra);
            }
            // Where `pending` grows (containers, wrappers) or a long item moved `pos`: a count
            // that cannot fit in what is left fails here, not after walking the rest. The fast
            // paths above move `pos` by at most 32 and are caught by `get` or the final check.
            if pos.saturating_add(pending) > len {
                return Err(self.body.eof());
            }
        }
        if pos > len {
            return Err(self.body.eof());
        }
        Ok(pos)
    }

    /// [`LazyDoc::skip_n`] of one item, with the scalars of event documents inline.
    #[inline(always)]
    pub(super) fn skip_one(&self, pos: usize) -> Result<usize> {
        let buf = self.body.buf;
        if let Some(&tag) = buf.get(pos) {
            let end = match tag & !TRACK_FLAG {
                SHORT_BINARY_0..=0x7f => pos + 1 + (tag & 0x1f) as usize,
                0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => pos + 1,
                // A varint of up to 10 bytes (what `skip_n` accepts): integers such as byte
                // counts and ids, and COPY offsets.
                VARINT | ZIGZAG | COPY => match (buf.get(pos + 1), buf.get(pos + 2)) {
                    (Some(&b1), _) if b1 < 0x80 => pos + 2,
                    (Some(_), Some(&b2)) if b2 < 0x80 => pos + 3,
                    _ => match buf
                        .get(pos + 3..)
                        .and_then(|r| r.iter().take(8).position(|&b| b < 0x80))
                    {
                        Some(k) => pos + 4 + k,
                        None => usize::MAX,
                    },
                },
                DOUBLE => pos + 9,
                _ => usize::MAX,
            };
            if end <= buf.len() {
                return Ok(end);
            }
        }
        self.skip_n(pos, 1)
    }

    #[cold]
    fn bad_tag(&self, tag: u8, at: usize) -> Error {
        match tag & !TRACK_FLAG {
            MANY => self.body.err(
                ErrorCode::UnsupportedTag("MANY (never implemented by any encoder)"),
                at,
            ),
            _ => self.body.err(ErrorCode::BadTag(tag), at),
        }
    }
}

/// In [`SKIP`]: the tag is followed by a varint (then the low bits below say what it counts).
const SKIP_VARINT: u16 = 0x8000;
/// With [`SKIP_VARINT`]: the varint is a byte length to skip (BINARY, STR_UTF8).
const SKIP_V_BYTES: u16 = 0x4000;
/// With [`SKIP_VARINT`]: items per unit of the varint (bits 10-11: 1 for ARRAY, 2 for HASH).
const SKIP_V_ITEMS: u16 = 0x0c00;
/// In [`SKIP`]: not a valid tag.
const SKIP_INVALID: u16 = 0xffff;

/// How to skip each tag byte. Without [`SKIP_VARINT`]: the low byte is the number of data bytes
/// after the tag and bits 8-12 the number of further items that belong to it (children, or the
/// item after a PAD/REFN/WEAKEN). With it: a varint follows, then see [`SKIP_V_BYTES`] and
/// [`SKIP_V_ITEMS`]; bits 8-9 are further items (1 for OBJECTV). The track flag changes nothing.
static SKIP: [u16; 256] = skip_table();

const fn skip_table() -> [u16; 256] {
    let mut t = [SKIP_INVALID; 256];
    let mut b = 0;
    while b < 256 {
        let tag = (b as u8) & !TRACK_FLAG;
        t[b] = match tag {
            0x00..=0x1f | UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => 0,
            0x60..=0x7f => (tag & 0x1f) as u16,
            0x40..=0x4f => ((tag & 0x0f) as u16) << 8,
            0x50..=0x5f => (2 * (tag & 0x0f) as u16) << 8,
            FLOAT => 4,
            DOUBLE => 8,
            LONG_DOUBLE | FLOAT_128 => 16,
            REFN | WEAKEN | PAD => 1 << 8,
            OBJECT | OBJECT_FREEZE | REGEXP => 2 << 8,
            VARINT | ZIGZAG | REFP | ALIAS | COPY => SKIP_VARINT,
            BINARY | STR_UTF8 => SKIP_VARINT | SKIP_V_BYTES,
            ARRAY => SKIP_VARINT | (1 << 10),
            HASH => SKIP_VARINT | (2 << 10),
            OBJECTV | OBJECTV_FREEZE => SKIP_VARINT | (1 << 8),
            _ => SKIP_INVALID,
        };
        b += 1;
    }
    t
}

/// Where each of `count` consecutive values starting at `elements[0]` starts, walking them
/// (structural checks only); positions are offset by `base`. `None` if they do not walk.
pub(crate) fn element_starts(elements: &[u8], base: usize, count: usize) -> Option<Vec<usize>> {
    let doc = LazyDoc {
        header: Header {
            version: crate::header::MAX_PROTOCOL,
            encoding: crate::header::Encoding::Raw,
            body_offset: 0,
            user_header: None,
        },
        body: Input::new(elements, 1, 0),
        limits: Limits::default(),
        id: 0,
        bounds: Vec::new(),
        index_use: IndexUse::Absent,
        origins: Vec::new(),
    };
    let mut starts = Vec::with_capacity(count);
    let mut pos = 0;
    for _ in 0..count {
        starts.push(pos + base);
        pos = doc.skip_n(pos, 1).ok()?;
    }
    Some(starts)
}
