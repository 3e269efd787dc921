//! What a column file holds, kept in its footer: the blob chunks it was made from.
//!
//! Each entry is one stored chunk: its second, subtype, chunk id, the blob's SHA-1 and its event
//! count. The rows of a file are in the same order as its entries (second, then subtype and
//! chunk in the blob index's order), so a reader takes a chunk's rows from a file exactly when
//! the file lists the chunk, and reads every other chunk from its blob: the answer is the same
//! either way. `sluice columns verify` compares the SHA-1s with the blobs still stored.
//!
//! The footer key is [`COVERS_KEY`]; the value is JSON, compact (one array per chunk) because an
//! hour file lists thousands of chunks: `{"v":1,"dc":…,"type":…,"owner":…,"from":…,"to":…,
//! "chunks":[[epoch,"subtype","chunk","sha1 hex",events],…]}`.

use serde::{Deserialize, Serialize};

/// The footer key of the covers.
pub const COVERS_KEY: &str = "sluice.covers";
/// The footer key of the (dc, type)'s sticky schema when the file was written.
pub const SCHEMA_KEY: &str = "sluice.schema";
/// The covers format written.
const VERSION: u32 = 1;

/// One chunk a file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CoveredChunk {
    /// Its second.
    pub epoch: i64,
    /// Its subtype.
    pub subtype: String,
    /// Its chunk id, as the index spells it.
    pub chunk: String,
    /// The blob's SHA-1, lower-case hex.
    pub sha1: String,
    /// How many events (rows) it gave.
    pub events: u64,
}

/// Everything one file holds.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Covers {
    /// The dc.
    pub dc: String,
    /// The type.
    pub type_: String,
    /// The collector that wrote the file.
    pub owner: String,
    /// First second the file spans.
    pub from: i64,
    /// One past the last second it spans.
    pub to: i64,
    /// The chunks, in row order.
    pub chunks: Vec<CoveredChunk>,
}

/// Why a footer's covers cannot be used (the file is then ignored by readers and reported).
#[derive(Debug, thiserror::Error)]
#[error("covers: {0}")]
pub struct CoversError(String);

#[derive(Serialize, Deserialize)]
struct Wire {
    v: u32,
    dc: String,
    #[serde(rename = "type")]
    type_: String,
    owner: String,
    from: i64,
    to: i64,
    chunks: Vec<(i64, String, String, String, u64)>,
}

impl Covers {
    /// The footer value.
    pub fn to_json(&self) -> String {
        let wire = Wire {
            v: VERSION,
            dc: self.dc.clone(),
            type_: self.type_.clone(),
            owner: self.owner.clone(),
            from: self.from,
            to: self.to,
            chunks: self
                .chunks
                .iter()
                .map(|c| {
                    (
                        c.epoch,
                        c.subtype.clone(),
                        c.chunk.clone(),
                        c.sha1.clone(),
                        c.events,
                    )
                })
                .collect(),
        };
        serde_json::to_string(&wire).unwrap_or_default()
    }

    /// Parses a footer value, checking what a reader relies on: the version, chunks inside
    /// `[from, to)` and in row order by second.
    pub fn from_json(text: &str) -> Result<Covers, CoversError> {
        let wire: Wire = serde_json::from_str(text).map_err(|e| CoversError(e.to_string()))?;
        if wire.v != VERSION {
            return Err(CoversError(format!("unknown version {}", wire.v)));
        }
        let mut last = i64::MIN;
        for (epoch, ..) in &wire.chunks {
            if *epoch < wire.from || *epoch >= wire.to || *epoch < last {
                return Err(CoversError(format!(
                    "chunk of second {epoch} out of order or outside [{}, {})",
                    wire.from, wire.to
                )));
            }
            last = *epoch;
        }
        Ok(Covers {
            dc: wire.dc,
            type_: wire.type_,
            owner: wire.owner,
            from: wire.from,
            to: wire.to,
            chunks: wire
                .chunks
                .into_iter()
                .map(|(epoch, subtype, chunk, sha1, events)| CoveredChunk {
                    epoch,
                    subtype,
                    chunk,
                    sha1,
                    events,
                })
                .collect(),
        })
    }

    /// Rows in the file.
    pub fn events(&self) -> u64 {
        self.chunks.iter().map(|c| c.events).sum()
    }
}

/// Lower-case hex of a SHA-1.
pub fn sha1_hex(sha1: &[u8; 20]) -> String {
    sha1.iter().map(|b| format!("{b:02x}")).collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn covers_round_trip_and_bad_ones_are_refused() {
        let c = Covers {
            dc: "ams1".into(),
            type_: "WEB".into(),
            owner: "c1".into(),
            from: 60,
            to: 120,
            chunks: vec![
                CoveredChunk {
                    epoch: 60,
                    subtype: "".into(),
                    chunk: "0".into(),
                    sha1: sha1_hex(&[7; 20]),
                    events: 3,
                },
                CoveredChunk {
                    epoch: 61,
                    subtype: "x".into(),
                    chunk: "c1.0".into(),
                    sha1: sha1_hex(&[9; 20]),
                    events: 2,
                },
            ],
        };
        assert_eq!(Covers::from_json(&c.to_json()).unwrap(), c);
        assert_eq!(c.events(), 5);
        let mut late = c.clone();
        late.chunks[1].epoch = 120;
        assert!(Covers::from_json(&late.to_json()).is_err());
        let mut unordered = c.clone();
        unordered.chunks.swap(0, 1);
        assert!(Covers::from_json(&unordered.to_json()).is_err());
        assert!(Covers::from_json("{").is_err());
    }
}
