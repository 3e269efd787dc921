//! [`write_items`]: a whole read's items written in one format, warnings passed to a callback.

use std::io::{self, Write};

use super::{EventWriter, OutputFormat};
use crate::item::{ReadItem, ReadWarning};

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
