//! The formats for people: `pretty`, `table`, `logfmt` (see the [module docs](crate::output)).
//!
//! An event comes as JSON (the NDJSON mapping of a decoded event, or a line a server sent) and
//! is shown field by field: `epoch` (when a number) as `time` in RFC 3339 in the writer's
//! [`Zone`], the other fields in their stored order, nested values as compact JSON.

use std::io::{self, Write};

use serde_json::Value as Json;

use super::OutputFormat;
use crate::time::{format_time, Zone};

/// Events buffered to choose the columns of a table.
pub const TABLE_SAMPLE: usize = 100;
/// Most columns of a table.
pub const TABLE_COLUMNS: usize = 12;
/// Widest cell of a table, in characters.
pub const TABLE_CELL: usize = 40;
/// After the `window` of a reduce's row whose window the range cut (`"partial": true`).
pub const PARTIAL_MARK: &str = " ~partial";

/// The state of a human format: the zone, color, a table's columns, a reused line.
#[derive(Debug)]
pub(super) struct Human {
    pub(super) zone: Zone,
    pub(super) color: bool,
    table: Table,
    line: String,
    /// Rows of a reduce, not events: `window` is a time (see [`Human::fields`]).
    pub(super) rows: bool,
}

#[derive(Debug, Default)]
struct Table {
    columns: Option<Vec<String>>,
    widths: Vec<usize>,
    held: Vec<Vec<(String, String)>>,
}

impl Human {
    pub(super) fn new(zone: Zone, color: bool) -> Human {
        Human {
            zone,
            color,
            table: Table::default(),
            line: String::new(),
            rows: false,
        }
    }

    /// Writes one event in `format` (a table may hold it until its columns are fixed).
    pub(super) fn event<W: Write>(
        &mut self,
        format: OutputFormat,
        event: &Json,
        out: &mut W,
    ) -> io::Result<()> {
        let fields = self.fields(event);
        match format {
            OutputFormat::Logfmt => self.logfmt(&fields, out),
            OutputFormat::Table => {
                if self.table.columns.is_some() {
                    return self.write_row(&fields, false, out);
                }
                self.table.held.push(fields);
                if self.table.held.len() >= TABLE_SAMPLE {
                    self.fix_columns(out)?;
                }
                Ok(())
            }
            _ => self.pretty(&fields, out),
        }
    }

    /// A table still choosing its columns prints with what it holds.
    pub(super) fn end_batch<W: Write>(&mut self, out: &mut W) -> io::Result<()> {
        if self.table.columns.is_none() && !self.table.held.is_empty() {
            self.fix_columns(out)?;
        }
        Ok(())
    }

    /// `(name, text)` of an event's fields: `epoch` shown as `time`. A reduce's row shows its
    /// `window` start as a time too, `~` after it when the row is `partial` (the range cut the
    /// window), and no `partial` column.
    fn fields(&self, event: &Json) -> Vec<(String, String)> {
        let Json::Object(map) = event else {
            return vec![(String::new(), event.to_string())];
        };
        let mut out = Vec::with_capacity(map.len());
        let partial = self.rows && map.get("partial") == Some(&Json::Bool(true));
        for (k, v) in map {
            if self.rows && k == "window" {
                if let Some(start) = v.as_i64() {
                    let mut text = format_time(start as f64, &self.zone);
                    if partial {
                        text.push_str(PARTIAL_MARK);
                    }
                    out.push((k.clone(), text));
                    continue;
                }
            }
            if partial && k == "partial" {
                continue;
            }
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
        // time (a row's window) first, then type: the order a reader scans.
        let rows = self.rows;
        out.sort_by_key(|(k, _)| match k.as_str() {
            "time" => 0,
            "window" if rows => 0,
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

    fn pretty<W: Write>(&mut self, fields: &[(String, String)], out: &mut W) -> io::Result<()> {
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
        out.write_all(line.trim_end().as_bytes())?;
        out.write_all(b"\n")?;
        self.line = line;
        Ok(())
    }

    fn logfmt<W: Write>(&mut self, fields: &[(String, String)], out: &mut W) -> io::Result<()> {
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
        out.write_all(line.as_bytes())?;
        self.line = line;
        Ok(())
    }

    fn fix_columns<W: Write>(&mut self, out: &mut W) -> io::Result<()> {
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
        self.write_row(&header, true, out)?;
        for row in std::mem::take(&mut self.table.held) {
            self.write_row(&row, false, out)?;
        }
        Ok(())
    }

    fn write_row<W: Write>(
        &mut self,
        fields: &[(String, String)],
        header: bool,
        out: &mut W,
    ) -> io::Result<()> {
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
        out.write_all(line.as_bytes())
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
