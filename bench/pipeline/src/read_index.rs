//! Row 2's variants: the profiles as written today, plus the default profile's blobs with their
//! element index removed (what blobs written before the index look like), so that one run shows
//! what the index itself saves.

use sluice_blob::{Profile, TRAILER_LEN};

/// (row name, profile, strip the element index before storing).
pub fn variants() -> [(&'static str, Profile, bool); 3] {
    [
        ("default (v5 zstd 2)", Profile::default(), false),
        (
            "default (v5 zstd 2), no element index (older blobs)",
            Profile::default(),
            true,
        ),
        ("original (v3 zlib 6)", Profile::Original, false),
    ]
}

/// `blob` (Sereal part + trailer) without the user header of its Sereal part, trailer
/// recomputed; unchanged when it has none.
pub fn strip_element_index(blob: Vec<u8>) -> Vec<u8> {
    let doc = &blob[..blob.len() - TRAILER_LEN];
    let Ok(h) = sereal::header::parse(doc) else {
        return blob;
    };
    if h.user_header.is_none() {
        return blob;
    }
    let mut out = Vec::with_capacity(blob.len());
    sereal::header::write(&mut out, h.version, h.encoding);
    out.extend_from_slice(&doc[h.body_offset..]);
    sluice_blob::append_trailer(&mut out);
    out
}
