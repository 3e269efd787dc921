//! The scalar writers every encoder shares: an integer, a float and a string tag with its bytes,
//! written as the Perl reference writes them. The whole-document encoder ([`crate::ser`]) and the
//! fragment writer ([`crate::fragment`]) both call these, so that a fragment is byte for byte
//! what a push of the same value writes; keeping them apart from both keeps the edges one way.

use crate::tag::*;
use crate::varint;

/// An integer as the reference writes it (small ones in the tag byte).
#[inline]
pub(crate) fn write_int(body: &mut Vec<u8>, i: i64) {
    if (0..16).contains(&i) {
        body.push(POS_0 | i as u8);
    } else if (-16..0).contains(&i) {
        body.push((i + 32) as u8);
    } else if i > 0 {
        body.push(VARINT);
        varint::write(body, i as u64);
    } else {
        body.push(ZIGZAG);
        varint::write(body, varint::zigzag(i));
    }
}

/// A float: `FLOAT` when it survives the round trip through `f32`, else `DOUBLE`.
#[inline]
pub(crate) fn write_float(body: &mut Vec<u8>, f: f64) {
    let narrow = f as f32;
    if narrow as f64 == f || f.is_nan() {
        body.push(FLOAT);
        body.extend_from_slice(&narrow.to_le_bytes());
    } else {
        body.push(DOUBLE);
        body.extend_from_slice(&f.to_le_bytes());
    }
}

/// A string tag and its bytes; returns where the bytes start in `body`. Always inlined: called
/// for every key and string of every event, its register saves cost as much as its work.
#[inline(always)]
pub(crate) fn write_raw_string(body: &mut Vec<u8>, bytes: &[u8], utf8: bool) -> usize {
    body.reserve(bytes.len() + 11);
    if utf8 {
        body.push(STR_UTF8);
        varint::write(body, bytes.len() as u64);
    } else if bytes.len() < 32 {
        body.push(SHORT_BINARY_0 | bytes.len() as u8);
    } else {
        body.push(BINARY);
        varint::write(body, bytes.len() as u64);
    }
    let data = body.len();
    body.extend_from_slice(bytes);
    data
}
