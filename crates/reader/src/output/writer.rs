//! [`EventWriter`]: events written one at a time in any [`OutputFormat`].

use std::fmt;
use std::io::{self, Write};

use serde_json::Value as Json;
use sereal::{Encoder, EncoderOptions, Value};

use super::human::Human;
use super::OutputFormat;
use crate::time::Zone;

/// Writes events one at a time in an [`OutputFormat`].
pub struct EventWriter<W: Write> {
    out: W,
    format: OutputFormat,
    /// Set up on the first Sereal event.
    encoder: Option<Encoder>,
    buf: Vec<u8>,
    /// The human formats' state (set up only for them).
    human: Option<Box<Human>>,
}

impl<W: Write> fmt::Debug for EventWriter<W> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("EventWriter")
            .field("format", &self.format)
            .finish()
    }
}

impl<W: Write> EventWriter<W> {
    /// A writer of `format` into `out` (wrap `out` in a `BufWriter` if it is unbuffered);
    /// human formats show times in UTC, without color.
    pub fn new(out: W, format: OutputFormat) -> EventWriter<W> {
        EventWriter::styled(out, format, Zone::utc(), false)
    }

    /// A writer whose human formats show times in `zone`, and with `color` ANSI colors (only
    /// `pretty` and `table` have any; the others ignore it).
    pub fn styled(out: W, format: OutputFormat, zone: Zone, color: bool) -> EventWriter<W> {
        let color = color && matches!(format, OutputFormat::Pretty | OutputFormat::Table);
        EventWriter {
            out,
            format,
            encoder: None,
            buf: Vec::new(),
            human: format.is_human().then(|| Box::new(Human::new(zone, color))),
        }
    }

    /// Marks what is written as a reduce's rows, not events: the human formats show `window`
    /// as a time in the writer's zone (with a mark when the row is `partial`); `json` and
    /// `sereal` keep the rows as they are (Unix seconds).
    pub fn rows(mut self) -> EventWriter<W> {
        if let Some(h) = &mut self.human {
            h.rows = true;
        }
        self
    }

    /// The format written.
    pub fn format(&self) -> OutputFormat {
        self.format
    }

    /// Writes one decoded event (a JSON line, a Sereal document, or a human rendering).
    pub fn write(&mut self, value: &Value) -> io::Result<()> {
        match self.format {
            OutputFormat::Sereal => {
                let enc = match &mut self.encoder {
                    Some(enc) => enc,
                    slot => slot
                        .insert(Encoder::new(EncoderOptions::default()).map_err(io::Error::other)?),
                };
                self.buf.clear();
                enc.encode_into(value, &mut self.buf)
                    .map_err(io::Error::other)?;
                self.out.write_all(&self.buf)
            }
            OutputFormat::Json => {
                self.buf.clear();
                sereal::json::to_writer(&mut self.buf, value)?;
                self.buf.push(b'\n');
                self.out.write_all(&self.buf)
            }
            _ => {
                self.buf.clear();
                sereal::json::to_writer(&mut self.buf, value)?;
                let json: Json = serde_json::from_slice(&self.buf).map_err(io::Error::other)?;
                self.human_event(&json)
            }
        }
    }

    /// Writes one event given as a JSON text (no newline), as a server sends it: as it is for
    /// `json` (and `sereal`, whose caller asked the server for Sereal instead), rendered for
    /// the human formats. A line that is not JSON is shown as it is rather than dropped.
    pub fn json_line(&mut self, line: &[u8]) -> io::Result<()> {
        if self.format.is_human() {
            if let Ok(json) = serde_json::from_slice::<Json>(line) {
                return self.human_event(&json);
            }
        }
        self.out.write_all(line)?;
        self.out.write_all(b"\n")
    }

    fn human_event(&mut self, json: &Json) -> io::Result<()> {
        match &mut self.human {
            Some(h) => h.event(self.format, json, &mut self.out),
            None => Ok(()),
        }
    }

    /// The end of a batch (a tail's poll): a table still choosing its columns prints with
    /// what it has, so a slow stream is not held back. Then flushes.
    pub fn end_batch(&mut self) -> io::Result<()> {
        if self.format == OutputFormat::Table {
            if let Some(h) = &mut self.human {
                h.end_batch(&mut self.out)?;
            }
        }
        self.out.flush()
    }

    /// Writes what is held (a table's first rows) and flushes.
    pub fn finish(&mut self) -> io::Result<()> {
        self.end_batch()
    }

    /// Flushes the underlying writer.
    pub fn flush(&mut self) -> io::Result<()> {
        self.out.flush()
    }

    /// The underlying writer, to write around the events (e.g. other formats of them).
    pub fn get_mut(&mut self) -> &mut W {
        &mut self.out
    }

    /// The underlying writer (a table's held rows are lost: call [`EventWriter::finish`]
    /// first).
    pub fn into_inner(self) -> W {
        self.out
    }
}
