//! Splitter: cut a document whose body is an array into several complete, standalone documents
//! ("chunks") of at most `max_bytes` bytes each (whole document: header, framing, compressed
//! body), each holding a contiguous run of the elements, in order. Elements are never decoded
//! into [`Value`](crate::Value)s: their bytes are copied tag by tag.
//!
//! # The offset-fixup invariant
//!
//! Sereal items refer back to earlier items by absolute body offset: `COPY` (a de-duplicated
//! string or hash key, usually in an *earlier element*), `REFP`/`ALIAS` (a tracked item) and
//! `OBJECTV` (a class name). Moving an element into a new chunk changes every offset, and the
//! target may not be in the chunk at all. The splitter keeps this invariant for every chunk:
//!
//! > every back-reference written into a chunk points to an item emitted *earlier in the same
//! > chunk* that decodes exactly as the original target did; for `REFP`/`ALIAS` that item
//! > carries the track bit and stands for the same shared item throughout the chunk.
//!
//! It is kept with a per-chunk table from *old* body position to *new* position, filled only for
//! positions that some back-reference in the input names (found by a validating pre-scan), with
//! one slot per role:
//! - `copy`: the latest emission of the item that is a faithful copy of its bytes (no reference
//!   inside had to be inlined, no value `COPY` inside); a value `COPY` may point there. Hash keys
//!   and class names need a plain string there.
//! - `ident`: the latest emission of the item with the track bit; `REFP`/`ALIAS` point there.
//!   It is recorded *before* the item's children are walked, so cycles survive.
//! - `class`: the latest class-name string of an `OBJECT`; `OBJECTV` points there.
//!
//! When an element is copied, a back-reference whose target has the needed slot is rewritten to
//! the target's new offset. Otherwise the target is *inlined* in place of the reference, walked
//! with the same rules (so its own references are fixed up recursively) and recorded, so later
//! references in the chunk point at the inlined copy:
//! - `COPY x` becomes the item at `x` (the track bit of the `COPY` tag carried over);
//! - a key/class `COPY x` becomes the string at `x`, still a key (track bit dropped);
//! - `REFP x` becomes `REFN` followed by the item at `x` with the track bit set;
//! - `ALIAS x` becomes the item at `x` with the track bit set;
//! - `OBJECTV x` becomes `OBJECT` (or `OBJECT_FREEZE`) with the class string at `x`.
//!
//! The track bits of copied items are kept as they were, so a chunk decodes to exactly the
//! values (shared items included) that its elements had in the original document. Two more
//! rewrites keep Perl's view of the data intact:
//! - a `WEAKEN` whose referent is first seen in the chunk right there (inlined, or its first
//!   occurrence) is dropped: the strong reference may have stayed in another chunk, and Perl
//!   frees a referent that only weak references hold;
//! - `PAD` bytes are dropped (their track bit moves to the item they precede).
//!
//! A chunk's body is the reference encoder's array form: `ARRAYREF_n` below 16 elements, else
//! `REFN ARRAY <count>`, whatever form the input used. Its header carries the input's user
//! header, if any ([`SplitOptions::keep_user_header`]) — except an [element index](crate::index),
//! which describes the input's body: then each chunk carries a fresh index of its own elements
//! (protocol 2+), whatever `keep_user_header` says, with the origins of its own elements when
//! the input's index carries origins for all of the input's elements (cut at the chunk's
//! bounds; otherwise the chunks' indexes carry none).
//!
//! # Fitting
//!
//! Elements are emitted into a growing chunk body once; the body after each element is known, so
//! any prefix of the run can be tried without re-emitting. A candidate is sized with a running
//! compression ratio (seeded from the input document), compressed and measured exactly; nothing
//! is returned without its exact size having been checked. The first chunk is searched alone
//! (interpolating from the measured ratio, then halving), which calibrates the ratio; the rest
//! go in batches of [`BATCH`] candidates sized from the running ratio and compressed together,
//! on several threads if allowed. Every candidate that fits is kept; the first that does not is
//! searched alone and the rest of its batch discarded. So each chunk usually costs one
//! compression, and the chunks are the same whatever the number of threads.
//!
//! # Safety
//!
//! The input is fully validated by a pre-scan before anything is emitted (tags, lengths, key and
//! class-name types, back-references pointing strictly backwards at suitable items, no `COPY` of
//! a `COPY`) under the caller's [`Limits`]; recursion is bounded by `Limits::max_depth` and the
//! work of inlining by `Limits::max_decompressed_bytes`. Nothing in here panics on input.

// Layout: `scan` validates the input and finds the elements and the positions back-references
// name; `emit` copies elements into a chunk body, fixing up back-references; `fit` chooses how
// many elements go into each chunk and builds the chunk documents.

mod emit;
mod fit;
mod scan;

pub use fit::BATCH;

use crate::compress::Compression;
use crate::cursor::Input;
use crate::de::{open, Limits};
use crate::error::{Error, ErrorCode, Result};
use crate::header::{self, Encoding};
use crate::index::{ElementIndex, Parsed};
use crate::tag::*;
use crate::varint;
use emit::Emitter;
use fit::Splitter;
use scan::Scanner;

/// How the chunks are written. `Default`: same protocol and compression type as the input (at
/// the reference's default levels), the reference's compression threshold, user header kept,
/// oversized elements refused.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitOptions {
    /// Protocol version of the chunks, 1 to 5; `None` keeps the input's. Only the header and the
    /// offset base change: tags are copied as they are, so asking for an older protocol than the
    /// body's tags need (e.g. `YES`/`NO` below 5) is the caller's responsibility.
    pub protocol: Option<u8>,
    /// Compression of the chunks; `None` uses the input's type (Snappy, zlib level 6, zstd
    /// level 3, or none). zlib and zstd need protocol 3 or later.
    pub compression: Option<Compression>,
    /// Chunk bodies smaller than this many bytes are not compressed (reference default: 1024).
    pub compress_threshold: usize,
    /// Copy the input's user header (protocol 2+) into every chunk; it counts towards the size.
    pub keep_user_header: bool,
    /// When a single element cannot fit in `max_bytes` even alone, emit it as a chunk of its own
    /// that is larger than `max_bytes`, instead of failing with a "chunk too small" error.
    pub allow_oversized: bool,
    /// Threads used to compress candidate chunks: 0 for one per available CPU (at most
    /// [`BATCH`]), 1 to stay on the calling thread. The chunks are the same for any value.
    pub threads: usize,
}

impl Default for SplitOptions {
    fn default() -> Self {
        SplitOptions {
            protocol: None,
            compression: None,
            compress_threshold: 1024,
            keep_user_header: true,
            allow_oversized: false,
            threads: 0,
        }
    }
}

/// Split `doc`, whose body must be an array (`ARRAY`, `REFN ARRAY`, `ARRAYREF_n`, tracked or
/// not), into standalone documents of at most `max_bytes` bytes each, holding consecutive runs of
/// its elements in order; each decodes on its own to exactly its elements.
///
/// A document that already fits is validated and returned unchanged as the only chunk (whatever
/// `opts` say). Errors: anything invalid in the input (with its offset), a body that is not an
/// array (`NotAnArray`), a reference to the top-level array itself, a [`Limits`] overrun, and an
/// element that does not fit in `max_bytes` even alone (a [`Category::Limit`] error naming the
/// element index, unless [`SplitOptions::allow_oversized`]).
///
/// [`Category::Limit`]: crate::Category::Limit
pub fn split(
    doc: &[u8],
    max_bytes: usize,
    opts: &SplitOptions,
    limits: &Limits,
) -> Result<Vec<Vec<u8>>> {
    let mut scratch = Vec::new();
    let body = open(doc, limits, &mut scratch)?;
    if let Some(end) = body.compressed_end {
        if end != doc.len() {
            return Err(Error::new(ErrorCode::TrailingBytes, end));
        }
    }
    let hdr = body.header.clone();
    let bytes = body.bytes;
    let err_base = body.error_base;
    let in_base = body.offset_base;

    let input = Input::new(bytes, in_base, err_base);
    let mut scanner = Scanner::new(input, limits);
    let elements = scanner.run()?;

    if doc.len() <= max_bytes {
        return Ok(vec![doc.to_vec()]);
    }
    if elements.is_empty() {
        return Err(Error::new(
            ErrorCode::ChunkTooSmall {
                element: 0,
                needed: doc.len(),
                limit: max_bytes,
            },
            0,
        ));
    }

    // Output format.
    let protocol = opts.protocol.unwrap_or(hdr.version);
    if protocol == 0 || protocol > header::MAX_PROTOCOL {
        return Err(Error::new(ErrorCode::BadVersion(protocol), 0));
    }
    let compression = opts.compression.unwrap_or(match hdr.encoding {
        Encoding::Raw => Compression::None,
        Encoding::Snappy | Encoding::SnappyLegacy => Compression::Snappy,
        Encoding::Zlib => Compression::Zlib { level: 6 },
        Encoding::Zstd => Compression::Zstd { level: 3 },
    });
    if matches!(
        compression,
        Compression::Zlib { .. } | Compression::Zstd { .. }
    ) && protocol < 3
    {
        return Err(Error::new(
            ErrorCode::BadEncodingType(compression.encoding().type_nibble()),
            0,
        ));
    }
    let mut head = Vec::new();
    head.extend_from_slice(if protocol >= 3 {
        header::MAGIC_V3
    } else {
        header::MAGIC_V1
    });
    head.push(protocol);
    // An element index describes the input's body, not a chunk's: each chunk gets its own.
    let input_index = hdr
        .user_header
        .as_ref()
        .and_then(|r| doc.get(r.clone()))
        .filter(|uh| !matches!(ElementIndex::parse(uh), Parsed::NotAnIndex));
    let index_per_byte = match input_index {
        Some(uh) if protocol >= 2 => Some(uh.len() as f64 / bytes.len().max(1) as f64),
        _ => None,
    };
    // The input's origins go with its elements into the chunks, if they name every one.
    let origins = match input_index.map(ElementIndex::parse) {
        Some(Parsed::Index(index)) if index_per_byte.is_some() => index
            .origins()
            .filter(|runs| crate::index::origins_fit(runs, elements.len()))
            .map(<[_]>::to_vec)
            .unwrap_or_default(),
        _ => Vec::new(),
    };
    match (&hdr.user_header, opts.keep_user_header && protocol >= 2) {
        _ if input_index.is_some() => head.push(0),
        (Some(range), true) => {
            // The whole suffix: the bitfield byte, then the user meta data body.
            let suffix = doc
                .get(range.start.saturating_sub(1)..range.end)
                .unwrap_or(&[]);
            varint::write(&mut head, suffix.len() as u64);
            head.extend_from_slice(suffix);
        }
        _ => head.push(0),
    }
    let out_base = if protocol == 1 { head.len() } else { 1 };

    // Seed the compression ratio from the input when it used the same kind of compression.
    let mut ratio = 0.35;
    if compression != Compression::None
        && compression.encoding() == hdr.encoding
        && !bytes.is_empty()
    {
        let data = doc.len().saturating_sub(hdr.body_offset) as f64;
        ratio = (data / bytes.len() as f64).clamp(0.001, 1.0);
    }

    let targets = scanner.into_targets();
    let budget = limits
        .max_decompressed_bytes
        .saturating_add(bytes.len().saturating_mul(8));
    let emitter = Emitter::new(input, &targets.0, targets.1, out_base, limits);
    let mut s = Splitter::new(
        &elements,
        max_bytes,
        opts,
        head,
        index_per_byte,
        origins,
        protocol,
        compression,
        ratio,
        emitter,
        budget,
    );
    s.run()
}

/// Whether `t` (track bit cleared) is a string tag.
#[inline]
fn is_string_tag(t: u8) -> bool {
    matches!(t, BINARY | STR_UTF8 | SHORT_BINARY_0..=0x7f)
}
