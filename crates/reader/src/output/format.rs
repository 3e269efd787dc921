//! The output formats by name: the one table of names ([`OutputFormat::ALL`]) and the one
//! parser ([`OutputFormat::parse_among`]), whose error lists the names the caller takes.
//!
//! Every caller takes a subset: `sluice cat` all of them, `sluice tail` all but `sereal`, the
//! HTTP API and the client the wire formats ([`OutputFormat::WIRE`]). A name known but not
//! taken here is refused as such, so the message says where it would be taken.

use std::fmt;
use std::str::FromStr;

/// An output format (see the [module docs](crate::output) for what each writes).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default, Hash)]
#[non_exhaustive]
pub enum OutputFormat {
    /// NDJSON: one event per line, as stored.
    #[default]
    Json,
    /// One Sereal document (protocol 5, uncompressed) per event, concatenated.
    Sereal,
    /// One line per event for people: `TIME TYPE[/SUBTYPE] [dc] key=value …`.
    Pretty,
    /// Aligned columns with a header.
    Table,
    /// `key=value` pairs, values quoted when needed.
    Logfmt,
}

/// Why a format name was refused.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
#[non_exhaustive]
pub enum FormatError {
    /// No format has this name.
    #[error("unknown format {name:?}: one of {}", names(.valid))]
    Unknown {
        /// The name given.
        name: String,
        /// The formats the caller takes.
        valid: Vec<OutputFormat>,
    },
    /// A format, but not one this caller writes (e.g. `sereal` for `sluice tail`, `pretty` over
    /// HTTP).
    #[error("format {:?} is not written here: one of {}", .format.name(), names(.valid))]
    NotHere {
        /// The format named.
        format: OutputFormat,
        /// The formats the caller takes.
        valid: Vec<OutputFormat>,
    },
}

fn names(formats: &[OutputFormat]) -> String {
    let names: Vec<&str> = formats.iter().map(|f| f.name()).collect();
    names.join(", ")
}

impl OutputFormat {
    /// Every format, in the order help texts list them.
    pub const ALL: &'static [OutputFormat] = &[
        OutputFormat::Json,
        OutputFormat::Pretty,
        OutputFormat::Table,
        OutputFormat::Logfmt,
        OutputFormat::Sereal,
    ];

    /// The formats a machine reads, which a server sends (`GET /v1/events?format=`).
    pub const WIRE: &'static [OutputFormat] = &[OutputFormat::Json, OutputFormat::Sereal];

    /// The name of the format (`json`, `sereal`, `pretty`, `table`, `logfmt`).
    pub fn name(self) -> &'static str {
        match self {
            OutputFormat::Json => "json",
            OutputFormat::Sereal => "sereal",
            OutputFormat::Pretty => "pretty",
            OutputFormat::Table => "table",
            OutputFormat::Logfmt => "logfmt",
        }
    }

    /// The format named `name` (`ndjson` is another name of `json`), if it is one of `valid`.
    pub fn parse_among(name: &str, valid: &[OutputFormat]) -> Result<OutputFormat, FormatError> {
        let found = match name {
            "ndjson" => Some(OutputFormat::Json),
            _ => OutputFormat::ALL.iter().copied().find(|f| f.name() == name),
        };
        match found {
            Some(f) if valid.contains(&f) => Ok(f),
            Some(format) => Err(FormatError::NotHere {
                format,
                valid: valid.to_vec(),
            }),
            None => Err(FormatError::Unknown {
                name: name.to_owned(),
                valid: valid.to_vec(),
            }),
        }
    }

    /// Whether this is a format for people (pretty, table, logfmt), not for programs.
    pub fn is_human(self) -> bool {
        matches!(
            self,
            OutputFormat::Pretty | OutputFormat::Table | OutputFormat::Logfmt
        )
    }

    /// The wire format a server is asked for to print this one: Sereal for Sereal, NDJSON
    /// (rendered here) for the rest.
    pub fn wire(self) -> OutputFormat {
        match self {
            OutputFormat::Sereal => OutputFormat::Sereal,
            _ => OutputFormat::Json,
        }
    }
}

impl fmt::Display for OutputFormat {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

/// Any format's name ([`OutputFormat::ALL`]).
impl FromStr for OutputFormat {
    type Err = FormatError;
    fn from_str(s: &str) -> Result<OutputFormat, FormatError> {
        OutputFormat::parse_among(s, OutputFormat::ALL)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn names_round_trip_and_errors_list_the_valid_names() {
        for f in OutputFormat::ALL {
            assert_eq!(f.name().parse::<OutputFormat>(), Ok(*f));
        }
        assert_eq!("ndjson".parse::<OutputFormat>(), Ok(OutputFormat::Json));
        let e = OutputFormat::parse_among("xml", OutputFormat::WIRE).unwrap_err();
        assert_eq!(e.to_string(), "unknown format \"xml\": one of json, sereal");
        let e = OutputFormat::parse_among("pretty", OutputFormat::WIRE).unwrap_err();
        assert_eq!(
            e.to_string(),
            "format \"pretty\" is not written here: one of json, sereal"
        );
        let e = "xml".parse::<OutputFormat>().unwrap_err();
        assert_eq!(
            e.to_string(),
            "unknown format \"xml\": one of json, pretty, table, logfmt, sereal"
        );
    }
}
