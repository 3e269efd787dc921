//! Blobs: building (encode → compress → chunk → trailer) and parsing (trailer → verify → decode).

use std::fmt;
use std::str::FromStr;

use sereal::{Compression, Decoder, Encoder, EncoderOptions, LazyDoc, Limits, SplitOptions, Value};
use sha1::{Digest, Sha1};

use crate::error::{kind_of, BlobError, Result};

/// The marker that starts the trailer.
pub const TRAILER_MAGIC: &[u8; 4] = b"=chk";
/// Length of the trailer: `=chk` + the 20-byte SHA-1 of the Sereal part.
pub const TRAILER_LEN: usize = 24;
/// Default chunk limit: 500 KB (decimal) of Sereal part, as the original system cut blobs.
pub const DEFAULT_CHUNK_LIMIT: usize = 500_000;
/// Smallest chunk limit accepted (below it not even a few small events would fit a chunk).
pub const MIN_CHUNK_LIMIT: usize = 64;
/// zstd level of [`Profile::default`].
// Measured (docs/decisions.md, "Blob format, keys and profiles", its "Bytes per event" section;
// why ingest needed the CPU: "Ingest: JSON to Sereal"): 2 is the knee of bytes against
// compressor CPU on event blobs (+1.1 % bytes for -11 % compressor time against 3; 1 is +10 %
// bytes); 6 only reaches the original profile's size at 3x the time, 19 0.9x at 100x.
pub const DEFAULT_ZSTD_LEVEL: i32 = 2;

/// How a blob's Sereal part is written.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Profile {
    /// What the original system stored: protocol 3, zlib level 6, `dedupe_strings`, the
    /// reference's compression threshold (1024 bytes). The same document
    /// `Sereal::Encoder->new({protocol_version => 3, compress => SRL_ZLIB, dedupe_strings => 1})`
    /// writes for the same events (header and decompressed body), so old tools read it.
    Original,
    /// The default for new data: protocol 5, zstd at `zstd_level`, `dedupe_strings`, and no
    /// compression threshold (every body is compressed when that makes it smaller).
    Default {
        /// zstd level, -7 (fastest) to 22 (smallest); [`DEFAULT_ZSTD_LEVEL`] by default.
        zstd_level: i32,
    },
}

impl Default for Profile {
    fn default() -> Profile {
        Profile::Default {
            zstd_level: DEFAULT_ZSTD_LEVEL,
        }
    }
}

impl Profile {
    /// The encoder settings of this profile.
    pub fn encoder_options(&self) -> EncoderOptions {
        match *self {
            Profile::Original => EncoderOptions::original_events(),
            Profile::Default { zstd_level } => EncoderOptions {
                protocol: 5,
                compression: Compression::Zstd { level: zstd_level },
                compress_threshold: 0,
                dedupe_strings: true,
                ..EncoderOptions::default()
            },
        }
    }

    /// The profile's name as configuration spells it: `original` or `default`.
    pub fn name(&self) -> &'static str {
        match self {
            Profile::Original => "original",
            Profile::Default { .. } => "default",
        }
    }

    fn check(&self) -> Result<()> {
        if let Profile::Default { zstd_level } = *self {
            if !(-7..=22).contains(&zstd_level) || zstd_level == 0 {
                return Err(BlobError::BadOption {
                    reason: format!("zstd level {zstd_level} is outside -7..=22 (0 excluded)"),
                });
            }
        }
        Ok(())
    }
}

impl fmt::Display for Profile {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(self.name())
    }
}

impl FromStr for Profile {
    type Err = BlobError;

    /// `original`, `default`, or `default:<zstd level>` (e.g. `default:19`).
    fn from_str(s: &str) -> Result<Profile> {
        let bad = || BlobError::BadOption {
            reason: format!(
                "unknown profile {:?}: expected `original`, `default` or `default:<zstd level>`",
                crate::error::shorten(s)
            ),
        };
        let p = match s {
            "original" => Profile::Original,
            "default" => Profile::default(),
            _ => match s.strip_prefix("default:") {
                Some(level) => Profile::Default {
                    zstd_level: level.parse().map_err(|_| bad())?,
                },
                None => return Err(bad()),
            },
        };
        p.check()?;
        Ok(p)
    }
}

/// Settings of a [`BlobBuilder`].
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BlobOptions {
    /// How the Sereal part is written.
    pub profile: Profile,
    /// Largest Sereal part (trailer not counted) of one chunk, in bytes; default 500 KB.
    pub chunk_limit: usize,
    /// When one event alone does not fit in `chunk_limit`, store it as a chunk of its own that is
    /// larger than the limit (default `true`: losing the event would be worse than one big
    /// chunk). With `false` such a batch fails with a [`BlobError::Codec`] limit error.
    pub allow_oversized_events: bool,
    /// Sort hash keys (the reference's `canonical => 1`): the same events always give the same
    /// bytes, whatever order their keys came in. Off by default, as in the original system.
    pub canonical: bool,
    /// Threads the splitter may use to compress candidate chunks (0: one per CPU, at most 4;
    /// 1: the calling thread only). The chunks are the same for any value.
    pub split_threads: usize,
}

impl Default for BlobOptions {
    fn default() -> BlobOptions {
        BlobOptions {
            profile: Profile::default(),
            chunk_limit: DEFAULT_CHUNK_LIMIT,
            allow_oversized_events: true,
            canonical: false,
            split_threads: 0,
        }
    }
}

impl BlobOptions {
    /// The defaults with `profile`.
    pub fn with_profile(profile: Profile) -> BlobOptions {
        BlobOptions {
            profile,
            ..BlobOptions::default()
        }
    }
}

/// One stored blob: a complete Sereal document followed by `=chk` and its SHA-1.
#[derive(Clone, PartialEq, Eq)]
pub struct Blob {
    index: u32,
    bytes: Vec<u8>,
}

impl fmt::Debug for Blob {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("Blob")
            .field("index", &self.index)
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl Blob {
    /// Verify the trailer of `bytes` and give access to its Sereal part.
    ///
    /// Errors: [`BlobError::Truncated`] (shorter than the trailer), [`BlobError::MissingTrailer`]
    /// (no `=chk` where the trailer starts), [`BlobError::Corrupted`] (checksum mismatch).
    pub fn parse(bytes: &[u8]) -> Result<BlobRef<'_>> {
        BlobRef::parse(bytes)
    }

    /// [`parse`](Self::parse) without the SHA-1, for bytes a store checked: see
    /// [`BlobRef::parse_store_checked`].
    pub fn parse_store_checked(bytes: &[u8]) -> Result<BlobRef<'_>> {
        BlobRef::parse_store_checked(bytes)
    }

    /// Position of this chunk among the chunks of one build, from 0 (see
    /// [`ChunkId::offset`](crate::ChunkId::offset) to turn it into a key's chunk part).
    pub fn index(&self) -> u32 {
        self.index
    }

    /// The whole blob as stored: Sereal part + trailer.
    pub fn as_bytes(&self) -> &[u8] {
        &self.bytes
    }

    /// The whole blob as stored, by value.
    pub fn into_bytes(self) -> Vec<u8> {
        self.bytes
    }

    /// Length of the whole blob in bytes.
    pub fn len(&self) -> usize {
        self.bytes.len()
    }

    /// Always `false`: a blob holds at least its trailer and a Sereal header.
    pub fn is_empty(&self) -> bool {
        self.bytes.is_empty()
    }

    /// The Sereal document (everything before the trailer).
    pub fn sereal_part(&self) -> &[u8] {
        &self.bytes[..self.bytes.len() - TRAILER_LEN]
    }

    /// A view of this blob as if parsed (no need to verify what was just built).
    pub fn as_blob_ref(&self) -> BlobRef<'_> {
        BlobRef { bytes: &self.bytes }
    }
}

impl AsRef<[u8]> for Blob {
    fn as_ref(&self) -> &[u8] {
        &self.bytes
    }
}

/// A blob whose trailer has been verified: its Sereal part, ready to decode or read lazily.
#[derive(Clone, Copy, PartialEq, Eq)]
pub struct BlobRef<'a> {
    /// The whole blob; at least [`TRAILER_LEN`] bytes, verified.
    bytes: &'a [u8],
}

impl fmt::Debug for BlobRef<'_> {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("BlobRef")
            .field("len", &self.bytes.len())
            .finish()
    }
}

impl<'a> BlobRef<'a> {
    /// See [`Blob::parse`].
    pub fn parse(bytes: &'a [u8]) -> Result<BlobRef<'a>> {
        let len = bytes.len();
        if len < TRAILER_LEN {
            return Err(BlobError::Truncated { len });
        }
        let (sereal, trailer) = bytes.split_at(len - TRAILER_LEN);
        if &trailer[..4] != TRAILER_MAGIC {
            return Err(BlobError::MissingTrailer { len });
        }
        let actual = sha1(sereal);
        if actual[..] != trailer[4..] {
            return Err(BlobError::Corrupted {
                reason: format!(
                    "SHA-1 of the {}-byte Sereal part is {}, the trailer says {}",
                    sereal.len(),
                    hex(&actual),
                    hex(&trailer[4..])
                ),
            });
        }
        Ok(BlobRef { bytes })
    }

    /// Like [`parse`](Self::parse) (length and `=chk` checked) but without computing the SHA-1:
    /// only for bytes a store has just checked against a checksum it computed from them at
    /// write time (`sluice_store::Store::checks_each_read`), when they
    /// had this trailer already (every blob is written by [`BlobBuilder`] or copied after
    /// [`parse`](Self::parse)). Damage to the document itself still fails its decoding.
    pub fn parse_store_checked(bytes: &'a [u8]) -> Result<BlobRef<'a>> {
        let len = bytes.len();
        if len < TRAILER_LEN {
            return Err(BlobError::Truncated { len });
        }
        if &bytes[len - TRAILER_LEN..len - 20] != TRAILER_MAGIC {
            return Err(BlobError::MissingTrailer { len });
        }
        Ok(BlobRef { bytes })
    }

    /// The Sereal document (everything before the trailer), e.g. for
    /// [`LazyDoc::open`](sereal::LazyDoc::open).
    pub fn sereal_part(&self) -> &'a [u8] {
        &self.bytes[..self.bytes.len() - TRAILER_LEN]
    }

    /// The 20-byte SHA-1 of the Sereal part, as the trailer carries it (verified).
    pub fn checksum(&self) -> [u8; 20] {
        let mut out = [0u8; 20];
        out.copy_from_slice(&self.bytes[self.bytes.len() - 20..]);
        out
    }

    /// The whole blob, trailer included.
    pub fn as_bytes(&self) -> &'a [u8] {
        self.bytes
    }

    /// The Sereal header of the document (protocol version, compression).
    pub fn header(&self) -> Result<sereal::header::Header> {
        Ok(sereal::header::parse(self.sereal_part())?)
    }

    /// Decode the events, under `limits`.
    pub fn decode(&self, limits: &Limits) -> Result<Vec<Value>> {
        self.decode_with(&mut Decoder::with_limits(limits.clone()))
    }

    /// Decode the events with a reusable decoder (its buffers and limits).
    pub fn decode_with(&self, decoder: &mut Decoder) -> Result<Vec<Value>> {
        let body = decoder.decode(self.sereal_part())?;
        match body {
            Value::Array(events) => Ok(events),
            Value::Shared(inner) => match std::sync::Arc::try_unwrap(inner) {
                Ok(Value::Array(events)) => Ok(events),
                Ok(other) => Err(BlobError::NotAnArray {
                    found: kind_of(&other),
                }),
                Err(shared) => match shared.resolve() {
                    Value::Array(events) => Ok(events.clone()),
                    other => Err(BlobError::NotAnArray {
                        found: kind_of(other),
                    }),
                },
            },
            other => Err(BlobError::NotAnArray {
                found: kind_of(&other),
            }),
        }
    }

    /// Open the Sereal part for lazy reading (decompressing into `scratch`, which is cleared;
    /// reuse it across blobs), e.g. to iterate over the events with
    /// [`LazyDoc::items`](sereal::LazyDoc::items) and pick paths with a
    /// [`Selector`](sereal::lazy::Selector) without materialising the rest.
    pub fn lazy<'s>(&self, limits: &Limits, scratch: &'s mut Vec<u8>) -> Result<LazyDoc<'s>>
    where
        'a: 's,
    {
        Ok(LazyDoc::open(self.sereal_part(), limits, scratch)?)
    }
}

/// Builds blobs, reusing one encoder and its buffers across calls.
#[derive(Debug)]
pub struct BlobBuilder {
    opts: BlobOptions,
    encoder: Encoder,
    split_opts: SplitOptions,
    /// Limits for splitting our own output: only recursion is bounded.
    split_limits: Limits,
    doc: Vec<u8>,
}

impl BlobBuilder {
    /// A builder with `opts`. Errors: an out-of-range option ([`BlobError::BadOption`]).
    pub fn new(opts: BlobOptions) -> Result<BlobBuilder> {
        opts.profile.check()?;
        if opts.chunk_limit < MIN_CHUNK_LIMIT {
            return Err(BlobError::BadOption {
                reason: format!(
                    "chunk limit {} is below the minimum of {MIN_CHUNK_LIMIT} bytes",
                    opts.chunk_limit
                ),
            });
        }
        let mut enc_opts = opts.profile.encoder_options();
        enc_opts.canonical = opts.canonical;
        enc_opts.element_index = writes_element_index(&opts.profile);
        let split_opts = SplitOptions {
            protocol: None,
            compression: Some(enc_opts.compression),
            compress_threshold: enc_opts.compress_threshold,
            keep_user_header: true,
            allow_oversized: opts.allow_oversized_events,
            threads: opts.split_threads,
        };
        // The splitter pre-scans what we just encoded: nothing to defend against but depth.
        let huge = usize::MAX / 4;
        let split_limits = Limits {
            max_depth: enc_opts.max_depth + 8,
            max_decompressed_bytes: huge,
            max_string_bytes: huge,
            max_elements: huge,
            max_values: huge,
            max_total_string_bytes: huge,
        };
        let encoder = Encoder::new(enc_opts)?;
        Ok(BlobBuilder {
            opts,
            encoder,
            split_opts,
            split_limits,
            doc: Vec::new(),
        })
    }

    /// A builder with the default options and `profile`.
    pub fn with_profile(profile: Profile) -> Result<BlobBuilder> {
        BlobBuilder::new(BlobOptions::with_profile(profile))
    }

    /// The options in force.
    pub fn options(&self) -> &BlobOptions {
        &self.opts
    }

    /// The blob(s) holding `events`, in order: one blob, or chunks numbered from 0 when the
    /// Sereal document is over the chunk limit. Each is a complete blob that decodes alone.
    ///
    /// This copies the events into one array to encode it; [`BlobBuilder::build_array`] takes
    /// the array directly. Errors: an event that is not a map ([`BlobError::NotAnEvent`]), an
    /// encoder error (e.g. nesting deeper than 512), one event too big for a chunk when
    /// [`BlobOptions::allow_oversized_events`] is off.
    pub fn build(&mut self, events: &[Value]) -> Result<Vec<Blob>> {
        check_events(events)?;
        self.build_checked(&Value::Array(events.to_vec()))
    }

    /// Like [`BlobBuilder::build`], given the events as one [`Value::Array`] (no copy).
    pub fn build_array(&mut self, array: &Value) -> Result<Vec<Blob>> {
        match array {
            Value::Array(events) => check_events(events)?,
            other => {
                return Err(BlobError::NotAnArray {
                    found: kind_of(other),
                })
            }
        }
        self.build_checked(array)
    }

    /// Like [`BlobBuilder::build`], from JSON lines (one event per non-blank line), mapped to
    /// Sereal values by [`sereal::json`]. A line that is not JSON is a [`BlobError::Json`] naming
    /// the line.
    pub fn build_from_json_lines(&mut self, text: &[u8]) -> Result<Vec<Blob>> {
        let mut events = Vec::new();
        for (n, line) in text.split(|&b| b == b'\n').enumerate() {
            if line.iter().all(|b| b.is_ascii_whitespace()) {
                continue;
            }
            let event = sereal::json::from_json_slice(line).map_err(|e| BlobError::Json {
                line: n + 1,
                reason: e.to_string(),
            })?;
            events.push(event);
        }
        self.build_array(&Value::Array(events))
    }

    fn build_checked(&mut self, array: &Value) -> Result<Vec<Blob>> {
        self.doc.clear();
        self.encoder.encode_into(array, &mut self.doc)?;
        self.build_document(&self.doc)
    }

    /// The encoder settings of this builder's documents (profile and `canonical`): what a
    /// document given to [`BlobBuilder::build_document`] must be written with.
    pub fn encoder_options(&self) -> &EncoderOptions {
        self.encoder.options()
    }

    /// Like [`BlobBuilder::build`], given the events' array already encoded as one document with
    /// [`BlobBuilder::encoder_options`] (e.g. element by element with a
    /// [`sereal::ArrayEncoder`]). Its elements must be maps; this is not checked.
    pub fn build_document(&self, doc: &[u8]) -> Result<Vec<Blob>> {
        if doc.len() <= self.opts.chunk_limit {
            return Ok(vec![Blob {
                index: 0,
                bytes: with_trailer(doc),
            }]);
        }
        let chunks = sereal::split(
            doc,
            self.opts.chunk_limit,
            &self.split_opts,
            &self.split_limits,
        )?;
        chunks
            .into_iter()
            .enumerate()
            .map(|(i, mut doc)| {
                let index = u32::try_from(i).map_err(|_| BlobError::BadOption {
                    reason: "more than 2^32 chunks".into(),
                })?;
                append_trailer(&mut doc);
                Ok(Blob { index, bytes: doc })
            })
            .collect()
    }
}

/// Whether blobs of `profile` carry an element index in their Sereal user header (where each
/// event starts, so that readers skip events a `where` rejects without walking them; format:
/// [`sereal::index`]; readers that do not know it, the reference included, skip it).
/// `Default`: yes. `Original`: no — its documents stay byte for byte what the reference writes.
/// The splitter gives every chunk its own index.
pub fn writes_element_index(profile: &Profile) -> bool {
    matches!(profile, Profile::Default { .. })
}

fn check_events(events: &[Value]) -> Result<()> {
    for (index, e) in events.iter().enumerate() {
        if !matches!(e.resolve(), Value::Hash(_)) {
            return Err(BlobError::NotAnEvent {
                index,
                found: kind_of(e),
            });
        }
    }
    Ok(())
}

/// The SHA-1 of `data`.
pub fn sha1(data: &[u8]) -> [u8; 20] {
    Sha1::digest(data).into()
}

/// `sereal_doc` followed by its trailer, as a new vector.
pub fn with_trailer(sereal_doc: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(sereal_doc.len() + TRAILER_LEN);
    out.extend_from_slice(sereal_doc);
    append_trailer(&mut out);
    out
}

/// Append `=chk` + the SHA-1 of everything in `doc` (the Sereal part).
pub fn append_trailer(doc: &mut Vec<u8>) {
    let sum = sha1(doc);
    doc.reserve(TRAILER_LEN);
    doc.extend_from_slice(TRAILER_MAGIC);
    doc.extend_from_slice(&sum);
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}
