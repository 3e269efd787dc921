//! How `sluice cat` and `sluice tail` print events: the one owner of the output formats, the time
//! zone they show times in, color, and the small words of messages ([`plural`]).
//!
//! | `--format` | one event as | times |
//! |---|---|---|
//! | `json` | the event's NDJSON line, unchanged (default when stdout is not a terminal) | `epoch` as stored |
//! | `pretty` | `TIME TYPE[/SUBTYPE] [dc] key=value …` (default on a terminal) | RFC 3339 in `--tz` |
//! | `table` | aligned columns with a header | RFC 3339 in `--tz` |
//! | `logfmt` | `time=… type=… key=value …` (values quoted when needed) | RFC 3339 in `--tz` |
//! | `sereal` | one Sereal document per event (`cat` only) | `epoch` as stored |
//!
//! # Contract
//! - `json` output is byte for byte what it was before formats existed (consumers parse it);
//!   it is never colored.
//! - The human formats show the event's `epoch` (when it is a number) as `time` in RFC 3339
//!   (`sluice_reader::time::format_time`: UTC with `Z`, or the `--tz` offset); the other fields
//!   follow in their stored order, nested values as compact JSON.
//! - Color only in `pretty` and `table`, only when stdout is a terminal and `NO_COLOR` is unset
//!   (or `--color always`).
//! - `table` fixes its columns from the first [`TABLE_SAMPLE`] events (or the first batch of a
//!   tail: [`Printer::end_batch`]): `time`, `type`, then fields in order of first appearance, at
//!   most [`TABLE_COLUMNS`]; a cell is cut at [`TABLE_CELL`] characters. Use `--select` to choose
//!   the columns.

use std::io::{self, IsTerminal, Write};

use anyhow::{bail, Result};
use clap::Args;
use serde_json::Value as Json;
use sluice_reader::{format_time, EventWriter, OutputFormat, Zone};

/// Events buffered to choose the columns of a table.
pub const TABLE_SAMPLE: usize = 100;
/// Most columns of a table.
pub const TABLE_COLUMNS: usize = 12;
/// Widest cell of a table, in characters.
pub const TABLE_CELL: usize = 40;

/// Output flags shared by `cat` and `tail`.
#[derive(Args, Clone, Debug)]
pub struct OutputArgs {
    /// Output format: json (NDJSON, the default when stdout is not a terminal), pretty (the
    /// default on a terminal), table, logfmt; `cat` also takes sereal.
    #[arg(long)]
    pub format: Option<String>,
    /// Time zone for times shown (pretty, table, logfmt) and for times given without an
    /// offset (`--from 2026-11-24T09:30`): UTC (default), an offset (+02:00) or an IANA name
    /// (Europe/Paris).
    #[arg(long, default_value = "UTC")]
    pub tz: String,
    /// Color: auto (when stdout is a terminal and NO_COLOR is unset), always, never.
    #[arg(long, default_value = "auto")]
    pub color: String,
}

/// An output format (see the [module docs](self)).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Format {
    /// NDJSON lines as stored.
    Json,
    /// One line per event for people.
    Pretty,
    /// Aligned columns.
    Table,
    /// `key=value` pairs.
    Logfmt,
    /// Sereal documents.
    Sereal,
}

impl OutputArgs {
    /// The zone of `--tz`.
    pub fn zone(&self) -> Result<Zone> {
        Zone::parse(&self.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))
    }

    /// The format (the default depends on whether stdout is a terminal); `sereal` only if
    /// `sereal_ok`.
    pub fn format(&self, sereal_ok: bool) -> Result<Format> {
        let Some(name) = self.format.as_deref() else {
            return Ok(if io::stdout().is_terminal() {
                Format::Pretty
            } else {
                Format::Json
            });
        };
        Ok(match name {
            "json" | "ndjson" => Format::Json,
            "pretty" => Format::Pretty,
            "table" => Format::Table,
            "logfmt" => Format::Logfmt,
            "sereal" if sereal_ok => Format::Sereal,
            "sereal" => bail!("--format sereal: only `sluice cat` writes Sereal"),
            other => bail!("--format {other:?}: one of json, pretty, table, logfmt, sereal"),
        })
    }

    fn color(&self) -> Result<bool> {
        Ok(match self.color.as_str() {
            "always" => true,
            "never" => false,
            "auto" => io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            other => bail!("--color {other:?}: one of auto, always, never"),
        })
    }

    /// A printer of these flags into `out`.
    pub fn printer<W: Write>(&self, out: W, sereal_ok: bool) -> Result<Printer<W>> {
        let format = self.format(sereal_ok)?;
        let color = self.color()? && matches!(format, Format::Pretty | Format::Table);
        Ok(Printer {
            format,
            zone: self.zone()?,
            color,
            writer: EventWriter::new(
                out,
                if format == Format::Sereal {
                    OutputFormat::Sereal
                } else {
                    OutputFormat::Json
                },
            ),
            table: Table::default(),
            line: String::new(),
        })
    }
}

/// Prints events in one [`Format`].
pub struct Printer<W: Write> {
    format: Format,
    zone: Zone,
    color: bool,
    writer: EventWriter<W>,
    table: Table,
    line: String,
}

#[derive(Default)]
struct Table {
    columns: Option<Vec<String>>,
    widths: Vec<usize>,
    held: Vec<Vec<(String, String)>>,
}

impl<W: Write> Printer<W> {
    /// The format printed.
    pub fn format(&self) -> Format {
        self.format
    }

    /// Prints a decoded event.
    pub fn value(&mut self, v: &sereal::Value) -> io::Result<()> {
        if matches!(self.format, Format::Json | Format::Sereal) {
            return self.writer.write(v);
        }
        let mut buf = Vec::new();
        sereal::json::to_writer(&mut buf, v)?;
        let json: Json = serde_json::from_slice(&buf).map_err(io::Error::other)?;
        self.human(&json)
    }

    /// Prints an event given as one JSON text (no newline).
    pub fn json_line(&mut self, line: &[u8]) -> io::Result<()> {
        match self.format {
            Format::Json | Format::Sereal => {
                let out = self.writer.get_mut();
                out.write_all(line)?;
                out.write_all(b"\n")
            }
            _ => match serde_json::from_slice::<Json>(line) {
                Ok(json) => self.human(&json),
                // Not JSON (never from a server): shown as it is rather than dropped.
                Err(_) => {
                    let out = self.writer.get_mut();
                    out.write_all(line)?;
                    out.write_all(b"\n")
                }
            },
        }
    }

    /// The end of a batch (a tail's poll): a table still choosing its columns prints with
    /// what it has, so a slow stream is not held back. Then flushes.
    pub fn end_batch(&mut self) -> io::Result<()> {
        if self.format == Format::Table
            && self.table.columns.is_none()
            && !self.table.held.is_empty()
        {
            self.fix_columns()?;
        }
        self.writer.flush()
    }

    /// Prints what is held and flushes.
    pub fn finish(&mut self) -> io::Result<()> {
        self.end_batch()
    }

    fn human(&mut self, event: &Json) -> io::Result<()> {
        let fields = self.fields(event);
        match self.format {
            Format::Pretty => self.pretty(&fields),
            Format::Logfmt => self.logfmt(&fields),
            Format::Table => {
                if self.table.columns.is_some() {
                    return self.table_row(&fields);
                }
                self.table.held.push(fields);
                if self.table.held.len() >= TABLE_SAMPLE {
                    self.fix_columns()?;
                }
                Ok(())
            }
            Format::Json | Format::Sereal => unreachable!("handled by the callers"),
        }
    }

    /// `(name, text)` of an event's fields: `epoch` shown as `time`.
    fn fields(&self, event: &Json) -> Vec<(String, String)> {
        let Json::Object(map) = event else {
            return vec![(String::new(), event.to_string())];
        };
        let mut out = Vec::with_capacity(map.len());
        for (k, v) in map {
            if k == "epoch" {
                if let Some(e) = v.as_f64() {
                    out.push(("time".to_owned(), format_time(e, &self.zone)));
                    continue;
                }
            }
            let text = match v {
                Json::String(s) => s.clone(),
                Json::Null => "null".to_owned(),
                other => other.to_string(),
            };
            out.push((k.clone(), text));
        }
        // time first, then type: the order a reader scans.
        out.sort_by_key(|(k, _)| match k.as_str() {
            "time" => 0,
            "type" => 1,
            _ => 2,
        });
        out
    }

    fn paint(&self, code: &str, text: &str) -> String {
        if self.color {
            format!("\x1b[{code}m{text}\x1b[0m")
        } else {
            text.to_owned()
        }
    }

    fn pretty(&mut self, fields: &[(String, String)]) -> io::Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        let get = |name: &str| {
            fields
                .iter()
                .find(|(k, _)| k == name)
                .map(|(_, v)| v.as_str())
        };
        if let Some(t) = get("time") {
            line.push_str(&self.paint("2", t));
            line.push(' ');
        }
        if let Some(t) = get("type") {
            let mut ty = t.to_owned();
            if let Some(s) = get("subtype").filter(|s| !s.is_empty()) {
                ty.push('/');
                ty.push_str(s);
            }
            line.push_str(&self.paint("1", &ty));
            line.push(' ');
        }
        if let Some(dc) = get("dc") {
            line.push_str(&self.paint("2", &format!("[{dc}]")));
            line.push(' ');
        }
        for (k, v) in fields {
            if matches!(k.as_str(), "time" | "type" | "subtype" | "dc") {
                continue;
            }
            line.push_str(&self.paint("36", k));
            line.push('=');
            // Nested values read better as the compact JSON they are than escaped again.
            if v.starts_with(['{', '[']) {
                line.push_str(v);
            } else {
                line.push_str(&logfmt_value(v));
            }
            line.push(' ');
        }
        let out = self.writer.get_mut();
        out.write_all(line.trim_end().as_bytes())?;
        out.write_all(b"\n")?;
        self.line = line;
        Ok(())
    }

    fn logfmt(&mut self, fields: &[(String, String)]) -> io::Result<()> {
        let mut line = std::mem::take(&mut self.line);
        line.clear();
        for (i, (k, v)) in fields.iter().enumerate() {
            if i > 0 {
                line.push(' ');
            }
            line.push_str(&logfmt_key(k));
            line.push('=');
            line.push_str(&logfmt_value(v));
        }
        line.push('\n');
        self.writer.get_mut().write_all(line.as_bytes())?;
        self.line = line;
        Ok(())
    }

    fn fix_columns(&mut self) -> io::Result<()> {
        let mut columns: Vec<String> = Vec::new();
        for row in &self.table.held {
            for (k, _) in row {
                if columns.len() < TABLE_COLUMNS && !columns.contains(k) {
                    columns.push(k.clone());
                }
            }
        }
        let mut widths: Vec<usize> = columns.iter().map(|c| c.chars().count()).collect();
        for row in &self.table.held {
            for (k, v) in row {
                if let Some(i) = columns.iter().position(|c| c == k) {
                    widths[i] = widths[i].max(v.chars().count().min(TABLE_CELL));
                }
            }
        }
        let header: Vec<(String, String)> = columns
            .iter()
            .map(|c| (c.clone(), c.to_uppercase()))
            .collect();
        self.table.columns = Some(columns);
        self.table.widths = widths;
        self.write_row(&header, true)?;
        for row in std::mem::take(&mut self.table.held) {
            self.table_row(&row)?;
        }
        Ok(())
    }

    fn table_row(&mut self, fields: &[(String, String)]) -> io::Result<()> {
        self.write_row(fields, false)
    }

    fn write_row(&mut self, fields: &[(String, String)], header: bool) -> io::Result<()> {
        let columns = self.table.columns.as_deref().unwrap_or_default();
        let mut line = String::new();
        for (i, (c, w)) in columns.iter().zip(&self.table.widths).enumerate() {
            let cell = fields
                .iter()
                .find(|(k, _)| k == c)
                .map_or("", |(_, v)| v.as_str());
            let mut cell: String = cell
                .chars()
                .map(|ch| if ch.is_control() { ' ' } else { ch })
                .collect();
            if cell.chars().count() > TABLE_CELL {
                cell = cell.chars().take(TABLE_CELL - 1).collect::<String>() + "…";
            }
            let pad = w.saturating_sub(cell.chars().count());
            let last = i + 1 == columns.len();
            let shown = if header { self.paint("1", &cell) } else { cell };
            line.push_str(&shown);
            if !last {
                line.push_str(&" ".repeat(pad + 2));
            }
        }
        let mut line = line.trim_end().to_owned();
        line.push('\n');
        self.writer.get_mut().write_all(line.as_bytes())
    }
}

fn logfmt_key(k: &str) -> String {
    let clean: String = k
        .chars()
        .map(|c| {
            if c.is_whitespace() || c == '=' || c == '"' {
                '_'
            } else {
                c
            }
        })
        .collect();
    if clean.is_empty() {
        "_".to_owned()
    } else {
        clean
    }
}

/// A logfmt value: bare when it has no space, `=`, quote or control character, else quoted
/// with `\"`, `\\` and `\n`-style escapes.
fn logfmt_value(v: &str) -> String {
    let bare = !v.is_empty()
        && !v
            .chars()
            .any(|c| c.is_whitespace() || c == '=' || c == '"' || c.is_control());
    if bare {
        return v.to_owned();
    }
    let mut out = String::with_capacity(v.len() + 2);
    out.push('"');
    for c in v.chars() {
        match c {
            '"' => out.push_str("\\\""),
            '\\' => out.push_str("\\\\"),
            '\n' => out.push_str("\\n"),
            '\t' => out.push_str("\\t"),
            '\r' => out.push_str("\\r"),
            c if c.is_control() => out.push_str(&format!("\\u{{{:04x}}}", c as u32)),
            c => out.push(c),
        }
    }
    out.push('"');
    out
}

/// `1 event`, `2 events`: a count and its noun (regular plurals: `s` added).
pub fn plural(n: u64, noun: &str) -> String {
    if n == 1 {
        format!("{n} {noun}")
    } else {
        format!("{n} {noun}s")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn args(format: &str, tz: &str) -> OutputArgs {
        OutputArgs {
            format: Some(format.into()),
            tz: tz.into(),
            color: "never".into(),
        }
    }

    fn print(format: &str, tz: &str, lines: &[&str]) -> String {
        let mut p = args(format, tz).printer(Vec::new(), false).unwrap();
        for l in lines {
            p.json_line(l.as_bytes()).unwrap();
        }
        p.finish().unwrap();
        String::from_utf8(p.writer.into_inner()).unwrap()
    }

    const EV: &str = r#"{"epoch":1795512600,"type":"WEB","dc":"ams1","status":503,"path":"/a b","t":{"ms":1.5}}"#;

    #[test]
    fn formats() {
        assert_eq!(print("json", "UTC", &[EV]), format!("{EV}\n"));
        assert_eq!(
            print("pretty", "UTC", &[EV]),
            "2026-11-24T09:30:00Z WEB [ams1] status=503 path=\"/a b\" t={\"ms\":1.5}\n"
        );
        assert_eq!(
            print("logfmt", "+01:00", &[EV]),
            "time=2026-11-24T10:30:00+01:00 type=WEB dc=ams1 status=503 path=\"/a b\" \
             t=\"{\\\"ms\\\":1.5}\"\n"
        );
        let table = print(
            "table",
            "UTC",
            &[EV, r#"{"epoch":1795512601,"type":"LB","x":1}"#],
        );
        let rows: Vec<&str> = table.lines().collect();
        assert_eq!(rows.len(), 3, "{table}");
        assert!(rows[0].starts_with("TIME"), "{table}");
        assert!(rows[2].starts_with("2026-11-24T09:30:01Z  LB"), "{table}");
        assert_eq!(plural(1, "message"), "1 message");
        assert_eq!(plural(0, "message"), "0 messages");
    }
}
