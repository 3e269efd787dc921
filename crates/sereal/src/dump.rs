//! A tag-by-tag listing of a document with offsets, for debugging blobs by eye
//! (`sluice sereal decode --dump`).

use std::fmt::Write as _;

use crate::cursor::{Cursor, Input};
use crate::de::{open, Limits};
use crate::error::{ErrorCode, Result};
use crate::tag::{self, *};
use crate::varint;

/// List the header and every tag of the body of `doc`, one per line, indented by nesting.
/// Offsets are body offsets as REFP/COPY name them (1-based from protocol 2 on).
pub fn dump(doc: &[u8], limits: &Limits) -> Result<String> {
    let mut scratch = Vec::new();
    let body = open(doc, limits, &mut scratch)?;
    let h = &body.header;
    let mut out = String::new();
    let _ = writeln!(
        out,
        "header: protocol {} encoding {:?} body at {}{}{}",
        h.version,
        h.encoding,
        h.body_offset,
        match &h.user_header {
            Some(r) => format!(", user header {} bytes", r.len()),
            None => String::new(),
        },
        if body.compressed_end.is_some() {
            format!(", {} bytes decompressed", body.bytes.len())
        } else {
            String::new()
        },
    );
    // Errors report body offsets (an error base of 0), like the listing's offsets.
    let mut d = Dumper {
        cur: Cursor::new(Input::new(body.bytes, body.offset_base, 0)),
        out,
        limits,
        depth: 0,
    };
    d.item()?;
    while d.cur.peek().is_some_and(|b| b & !TRACK_FLAG == PAD) {
        let at = d.cur.pos;
        d.cur.pos += 1;
        d.line(at, PAD, "(trailing)");
    }
    Ok(d.out)
}

struct Dumper<'a> {
    cur: Cursor<'a>,
    out: String,
    limits: &'a Limits,
    depth: usize,
}

impl Dumper<'_> {
    fn line(&mut self, at: usize, tag: u8, text: &str) {
        let track = if tag & TRACK_FLAG != 0 {
            " [tracked]"
        } else {
            ""
        };
        let _ = writeln!(
            self.out,
            "{:>8} {:indent$}{}{}{}{}",
            at + self.cur.input.offset_base,
            "",
            tag::name(tag),
            if text.is_empty() { "" } else { " " },
            text,
            track,
            indent = self.depth * 2
        );
    }

    fn item(&mut self) -> Result<()> {
        if self.depth > self.limits.max_depth {
            return Err(self
                .cur
                .err(ErrorCode::DepthLimit(self.limits.max_depth), self.cur.pos));
        }
        let mut at = self.cur.pos;
        let mut raw = self.cur.byte()?;
        // PADs are listed but are not items: the item is what follows them.
        while raw & !TRACK_FLAG == PAD {
            self.line(at, raw, "");
            at = self.cur.pos;
            raw = self.cur.byte()?;
        }
        let t = raw & !TRACK_FLAG;
        match t {
            0x00..=0x0f => self.line(at, raw, &t.to_string()),
            0x10..=0x1f => self.line(at, raw, &(t as i64 - 32).to_string()),
            VARINT => {
                let v = self.cur.varint()?;
                self.line(at, raw, &v.to_string())
            }
            ZIGZAG => {
                let v = varint::unzigzag(self.cur.varint()?);
                self.line(at, raw, &v.to_string())
            }
            FLOAT => {
                let b = self.cur.take(4)?;
                let f = f32::from_le_bytes([b[0], b[1], b[2], b[3]]);
                self.line(at, raw, &f.to_string())
            }
            DOUBLE => {
                let b = self.cur.take(8)?;
                let mut a = [0u8; 8];
                a.copy_from_slice(b);
                self.line(at, raw, &f64::from_le_bytes(a).to_string())
            }
            LONG_DOUBLE | FLOAT_128 => {
                self.cur.take(16)?;
                self.line(at, raw, "(16 bytes)")
            }
            BINARY | STR_UTF8 => {
                let n = self.cur.varint()?;
                let s = self.cur.take(n)?;
                let text = format!("len {n} {:?}", preview(s));
                self.line(at, raw, &text)
            }
            SHORT_BINARY_0..=0x7f => {
                let s = self.cur.take((t & 0x1f) as u64)?;
                let text = format!("{:?}", preview(s));
                self.line(at, raw, &text)
            }
            REFP | ALIAS | COPY => {
                let o = self.cur.varint()?;
                self.line(at, raw, &format!("-> {o}"))
            }
            ARRAY | HASH => {
                let n = self.cur.varint()?;
                self.line(at, raw, &format!("count {n}"));
                let items = if t == HASH { n.saturating_mul(2) } else { n };
                self.children(items)?;
            }
            0x40..=0x4f => {
                self.line(at, raw, &format!("count {}", t & 0x0f));
                self.children((t & 0x0f) as u64)?;
            }
            0x50..=0x5f => {
                self.line(at, raw, &format!("count {}", t & 0x0f));
                self.children(2 * (t & 0x0f) as u64)?;
            }
            REFN | WEAKEN => {
                self.line(at, raw, "");
                self.children(1)?;
            }
            OBJECT | OBJECT_FREEZE | REGEXP => {
                self.line(at, raw, "");
                self.children(2)?;
            }
            OBJECTV | OBJECTV_FREEZE => {
                let o = self.cur.varint()?;
                self.line(at, raw, &format!("class at {o}"));
                self.children(1)?;
            }
            UNDEF | CANONICAL_UNDEF | TRUE | FALSE | YES | NO => self.line(at, raw, ""),
            _ => return Err(self.cur.err(ErrorCode::BadTag(raw), at)),
        }
        Ok(())
    }

    fn children(&mut self, n: u64) -> Result<()> {
        self.depth += 1;
        for _ in 0..n {
            // Every child takes at least one byte, so a lying count ends at end of input.
            self.item()?;
        }
        self.depth -= 1;
        Ok(())
    }
}

fn preview(s: &[u8]) -> String {
    let text = String::from_utf8_lossy(&s[..s.len().min(60)]).into_owned();
    if s.len() > 60 {
        format!("{text}…")
    } else {
        text
    }
}
