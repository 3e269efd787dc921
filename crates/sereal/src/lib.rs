//! A Sereal codec: decoder, encoder, lazy path reader and splitter, byte-compatible with the Perl
//! reference implementation (`Sereal::Encoder` / `Sereal::Decoder`). No I/O happens in here.
//!
//! Modules, in the order data flows through them:
//! - [`header`]: magic, version/type byte, user header.
//! - `compress` (private): Snappy / zlib / zstd framing, bounded decompression.
//! - `cursor` (private): bounds-checked reading of a body (bytes, varints, back-offsets, error
//!   offsets), shared by the decoder, the lazy reader, the splitter and the dump.
//! - [`de`]: [`Decoder`] — document to [`Value`], under explicit [`Limits`].
//! - [`ser`]: [`Encoder`] — [`Value`] to document, identical bytes to the reference.
//! - [`lazy`]: [`LazyDoc`](lazy::LazyDoc) — walk a body without building a tree and extract
//!   values at paths like `timings.total_ms` or `experiments[*].id`.
//! - [`split`]: cut a document whose body is an array into standalone documents of at most N
//!   bytes each, fixing up back-references, without decoding elements.
//! - [`json`]: the documented JSON mapping of [`Value`].
//! - [`dump`]: a tag-by-tag listing with offsets, for reading blobs by eye.
//!
//! ```
//! let value = sereal::json::from_json_slice(br#"[{"cpu":5},{"cpu":99}]"#).unwrap();
//! let opts = sereal::EncoderOptions { protocol: 3, ..Default::default() };
//! let doc = sereal::to_vec(&value, &opts).unwrap();
//! assert_eq!(doc, b"=\xF3rl\x03\x00\x42\x51\x63cpu\x05\x51\x2f\x03\x20\x63");
//! assert_eq!(sereal::from_slice(&doc).unwrap(), value);
//! ```

#![deny(missing_docs)]
#![forbid(unsafe_code)]

mod compress;
mod cursor;
pub mod de;
pub mod dump;
mod error;
mod fragment;
pub mod header;
pub mod index;
pub mod json;
pub mod lazy;
mod scalars;
pub mod ser;
pub mod split;
pub mod tag;
mod value;
pub mod varint;

pub use compress::Compression;
pub use de::{from_slice, Decoder, Document, Limits};
pub use error::{Category, Error, Result};
pub use fragment::{
    EncodedKey, Fragment, FragmentList, FragmentRef, FragmentWriter, ENCODED_KEY_MAX,
};
pub use lazy::{LazyDoc, Path};
pub use ser::{to_vec, ArrayEncoder, Encoder, EncoderOptions};
pub use split::{split, SplitOptions};
pub use value::{Hash, Key, Object, Regexp, Value};
