//! The output flags of `sluice cat` and `sluice tail` (`--format`, `--tz`, `--color`) and the
//! small words of messages ([`plural`]).
//!
//! The formats themselves (names, parsing, what each writes) are
//! [`sluice_reader::output`]'s, shared with the HTTP API; this module adds what only a
//! terminal program knows: the default format (`pretty` on a terminal, `json` otherwise) and
//! whether to color (a terminal, `NO_COLOR` unset, or `--color always`).

use std::io::{self, IsTerminal, Write};

use anyhow::{bail, Result};
use clap::Args;
use sluice_reader::{EventWriter, OutputFormat, Zone};

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

/// The formats `sluice tail` prints (all but Sereal, which only `cat` writes).
const TAIL_FORMATS: &[OutputFormat] = &[
    OutputFormat::Json,
    OutputFormat::Pretty,
    OutputFormat::Table,
    OutputFormat::Logfmt,
];

impl OutputArgs {
    /// The zone of `--tz`.
    pub fn zone(&self) -> Result<Zone> {
        Zone::parse(&self.tz).map_err(|e| anyhow::anyhow!("--tz: {e}"))
    }

    /// The format (the default depends on whether stdout is a terminal); `sereal` only if
    /// `sereal_ok`.
    pub fn format(&self, sereal_ok: bool) -> Result<OutputFormat> {
        let Some(name) = self.format.as_deref() else {
            return Ok(if io::stdout().is_terminal() {
                OutputFormat::Pretty
            } else {
                OutputFormat::Json
            });
        };
        let valid = if sereal_ok {
            OutputFormat::ALL
        } else {
            TAIL_FORMATS
        };
        OutputFormat::parse_among(name, valid).map_err(|e| anyhow::anyhow!("--format: {e}"))
    }

    fn color(&self) -> Result<bool> {
        Ok(match self.color.as_str() {
            "always" => true,
            "never" => false,
            "auto" => io::stdout().is_terminal() && std::env::var_os("NO_COLOR").is_none(),
            other => bail!("--color {other:?}: one of auto, always, never"),
        })
    }

    /// A writer of these flags into `out`.
    pub fn printer<W: Write>(&self, out: W, sereal_ok: bool) -> Result<EventWriter<W>> {
        let format = self.format(sereal_ok)?;
        Ok(EventWriter::styled(
            out,
            format,
            self.zone()?,
            self.color()?,
        ))
    }
}

/// Prints a read warning, or a notice (a substream result computed from the full blob), on
/// stderr.
pub fn print_warning(w: &sluice_reader::ReadWarning, notice: bool) {
    if notice {
        eprintln!("sluice: note: {w}");
    } else {
        eprintln!("sluice: warning: {w}");
    }
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
        String::from_utf8(p.into_inner()).unwrap()
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
