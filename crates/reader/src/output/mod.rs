//! Writing a read's events out: the output formats, their names, and a writer per format.
//!
//! [`write_items`] writes a stream as NDJSON (one event per line, [`sereal::json`]
//! mapping) or as Sereal: **one Sereal document per event** (protocol 5, uncompressed), concatenated. Each
//! document is self-delimiting ([`sereal::Document::len`] / Perl's `decode_with_offset`), so a
//! consumer reads them in sequence and a stream can be cut after any event (HTTP streaming,
//! `head`); per-event documents lose the cross-event string de-duplication of a blob, which is
//! the price of that.

use std::fmt;
use std::io::{self, Write};
use std::str::FromStr;

use sereal::{Encoder, EncoderOptions, Value};

use crate::item::{ReadItem, ReadWarning};

/// Output format of [`write_items`].
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub enum OutputFormat {
    /// NDJSON: one event per line.
    #[default]
    Json,
    /// One Sereal document (protocol 5, uncompressed) per event, concatenated.
    Sereal,
}

impl FromStr for OutputFormat {
    type Err = String;
    fn from_str(s: &str) -> Result<OutputFormat, String> {
        match s {
            "json" | "ndjson" => Ok(OutputFormat::Json),
            "sereal" => Ok(OutputFormat::Sereal),
            other => Err(format!("unknown format {other:?}: json or sereal")),
        }
    }
}

/// Writes events one at a time in an [`OutputFormat`].
pub struct EventWriter<W: Write> {
    out: W,
    format: OutputFormat,
    encoder: Option<Encoder>,
    buf: Vec<u8>,
}

impl<W: Write> fmt::Debug for EventWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("format", &self.format)
            .finish()
    }
}

impl<W: Write> EventWriter<W> {
    /// A writer of `format` into `out` (wrap `out` in a `BufWriter` if it is unbuffered).
    pub fn new(out: W, format: OutputFormat) -> EventWriter<W> {
        EventWriter {
            out,
            format,
            encoder: None,
            buf: Vec::new(),
        }
    }

    /// Writes one event (a JSON line, or a Sereal document).
    pub fn write(&mut self, value: &Value) -> io::Result<()> {
        match self.format {
            OutputFormat::Json => {
                self.buf.clear();
                sereal::json::to_writer(&mut self.buf, value)?;
                self.buf.push(b'\n');
                self.out.write_all(&self.buf)
            }
            OutputFormat::Sereal => {
                if self.encoder.is_none() {
                    self.encoder =
                        Some(Encoder::new(EncoderOptions::default()).map_err(io::Error::other)?);
                }
                let enc = self.encoder.as_mut().expect("just set");
                self.buf.clear();
                enc.encode_into(value, &mut self.buf)
                    .map_err(io::Error::other)?;
                self.out.write_all(&self.buf)
            }
        }
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer, to write around the events (e.g. other formats of them).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The underlying writer.
    pub fn into_inner(self) -> W {
        self.out
    }
}

/// What [`write_items`] wrote.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct WriteSummary {
    /// Events written.
    pub events: u64,
    /// Warnings met (each also given to the callback).
    pub warnings: u64,
    /// Notices met (each also given to the callback, with `true`).
    pub notices: u64,
}

/// Writes the events of `items` to `out` in `format`, passing each warning to `on_warning` (e.g.
/// print it on stderr) as it comes (notices are only counted). Stops only on a write error (e.g.
/// a closed pipe). The caller exits non-zero if the summary counts warnings.
pub fn write_items<W: Write>(
    items: impl IntoIterator<Item = ReadItem>,
    format: OutputFormat,
    out: W,
    mut on_warning: impl FnMut(&ReadWarning),
) -> io::Result<WriteSummary> {
    write_items_noting(items, format, out, |w, notice| {
        if !notice {
            on_warning(w)
        }
    })
}

/// [`write_items`], passing notices too (with `true`; warnings with `false`).
pub fn write_items_noting<W: Write>(
    items: impl IntoIterator<Item = ReadItem>,
    format: OutputFormat,
    out: W,
    mut on_warning: impl FnMut(&ReadWarning, bool),
) -> io::Result<WriteSummary> {
    let mut w = EventWriter::new(out, format);
    let mut summary = WriteSummary::default();
    for item in items {
        match item {
            ReadItem::Event(e) => {
                w.write(&e.value)?;
                summary.events += 1;
            }
            ReadItem::Warning(warning) => {
                on_warning(&warning, false);
                summary.warnings += 1;
            }
            ReadItem::Notice(notice) => {
                on_warning(&notice, true);
                summary.notices += 1;
            }
        }
    }
    w.flush()?;
    Ok(summary)
}
