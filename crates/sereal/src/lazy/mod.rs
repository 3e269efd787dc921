//! Lazy reader: walk a Sereal document without building a tree, extract the values at given
//! [`Path`]s and skip everything else.
//!
//! The body of the document is kept whole (decompressed once into a caller's buffer), because
//! `COPY`, `REFP`, `ALIAS` and `OBJECTV` point back to earlier offsets anywhere in it. Handles
//! ([`Item`]) are spans of that body, like `serde_json`'s `RawValue`: nothing is decoded until it
//! is asked for. Skipping a value is a tight loop over tags that allocates nothing and does not
//! recurse.
//!
//! The events-blob shape (an array of hashes) is served by [`LazyDoc::items`], and the fast path
//! for "three fields out of thirty" is [`Item::select`] (or a reusable [`Selector`]), which makes
//! one pass over an item for all paths and stops as soon as nothing more can match.
//!
//! ```
//! use sereal::lazy::{LazyDoc, Path};
//! use sereal::Value;
//!
//! let json = br#"[{"type":"WEB","http":{"status":200},"tags":["a","b"]},
//!                 {"type":"LB","http":{"status":503},"tags":[]}]"#;
//! let events = sereal::json::from_json_slice(json).unwrap();
//! let doc = sereal::to_vec(&events, &sereal::EncoderOptions::original_events()).unwrap();
//!
//! let paths = [Path::parse("http.status").unwrap(), Path::parse("tags[*]").unwrap()];
//! let mut scratch = Vec::new(); // decompression buffer, reusable across documents
//! let lazy = LazyDoc::open(&doc, &sereal::Limits::default(), &mut scratch).unwrap();
//! let mut rows = Vec::new();
//! for item in lazy.items().unwrap() {
//!     let item = item.unwrap();
//!     // Compare a field without allocating.
//!     let is_web = item.field("type").unwrap().map_or(Ok(false), |t| t.str_eq("WEB")).unwrap();
//!     rows.push((is_web, item.select(&paths).unwrap()));
//! }
//! assert_eq!(rows[0].0, true);
//! assert_eq!(rows[0].1, vec![vec![Value::Int(200)], vec![Value::Binary(b"a".to_vec()), Value::Binary(b"b".to_vec())]]);
//! assert_eq!(rows[1].1, vec![vec![Value::Int(503)], vec![]]);
//! ```
//!
//! # Path semantics
//! A step passes transparently through every kind of reference and wrapper: `REFN` chains,
//! `REFP`, `ALIAS`, `COPY`, `WEAKEN`, `PAD`, tracked items and blessed objects (`OBJECT`,
//! `OBJECTV` and their `_FREEZE` forms: a step into an object looks into its blessed data).
//! A key step matches the first hash entry whose key has the same bytes (binary and UTF-8 keys
//! alike, as [`Value::get`] does); `[i]` indexes an array (`[-1]` is its last element); `[*]`
//! yields every element of an array or every value of a hash, in document order. A step that
//! does not apply (a missing key, an index out of range, a key into an array or a scalar) yields
//! nothing; it is not an error.
//!
//! Selected values are materialised exactly as [`crate::from_slice`] would decode them at that
//! place (`Shared`, `Ref` and `Object` wrappers included), resolving back-references by jumping
//! to their targets.
//!
//! # Validation
//! The lazy reader validates what it reads: every tag it passes over is checked for being a
//! known tag with its data inside the body, every back-reference it follows must point strictly
//! backwards, and decoding a selected value applies the same rules and [`Limits`] as the full
//! decoder. Parts of the document it only skips are checked structurally (tags, lengths, counts)
//! but not semantically (a `REFP` inside a skipped value is not resolved).
//!
//! # Element index
//! A document whose user header holds an [element index](crate::index) that checks out against
//! its body ([`LazyDoc::element_index`]) has its top-level elements located without a walk:
//! [`LazyDoc::items`] and [`Selector::next_selected`] jump to the next element, and a selection
//! stops as soon as its paths are found. Elements that are jumped over are not read at all (not
//! even structurally). An index that does not check out is never used.
//!
//! # Costs and limits
//! Nothing recurses without a bound: skipping is iterative, walking a path and decoding a value
//! stop at [`Limits::max_depth`] (every container, reference and jump counts as a level).
//! Back-references only ever jump backwards, so COPY/REFP loops are errors, not hangs. One
//! selection ([`Item::get`], [`Item::select`], a [`Selector`] call) may visit at most
//! [`Limits::max_values`] items along its paths (wildcards through shared references could
//! otherwise be exponential), and what it materialises is charged against `max_values` and
//! `max_total_string_bytes` like a full decode, each reference being charged its target's size.
//!
//! [`Limits`]: crate::Limits
//! [`Limits::max_depth`]: crate::Limits::max_depth
//! [`Limits::max_values`]: crate::Limits::max_values
//! [`Value::get`]: crate::Value::get

// Layout, in the order a read goes through it:
// - `path`: `Path` and `Step`, parsing and printing path expressions, `Path::eval` on a `Value`.
// - `doc`: `LazyDoc` (header, body, element index) and reading structure: strings, keys, and
//   following wrappers to a container or scalar (`resolve`).
// - `skip`: finding where an item ends without reading it (`skip_n` and its tag table).
// - `item`: `Item` handles and what they read without decoding; `Items`, `Entries`,
//   `ItemDecoder`.
// - `walker`: the general one-pass walk of many paths of any kind.
// - `plan`: the specialised walk of plain key paths (`a.b.c`) with per-document key caches.
// - `selector`: `Selector`, the reusable selection, which picks `plan` or `walker`.

mod doc;
mod item;
mod path;
mod plan;
mod selector;
mod skip;
mod walker;

pub use doc::{IndexUse, LazyDoc};
pub use item::{Entries, Item, ItemDecoder, Items, Scalar};
pub use path::{Path, Step};
pub use selector::Selector;

pub(crate) use skip::element_starts;
