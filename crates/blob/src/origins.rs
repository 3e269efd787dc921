//! Origins: which WAL record each event of a chunk came from, as a chunk of the default profile
//! carries them in its element index ([`sereal::index`], format version 2). A live tail that
//! delivered record `seq`'s events from memory skips exactly those events when their chunk is
//! stored.

use sereal::{LazyDoc, Limits};

use crate::blob::BlobRef;

/// The origins of a chunk's events: runs `(seq, count)` in event order, `seq` being the WAL
/// sequence number of the record the events came from (0: the event had no WAL record). Always
/// at least one event; every run at least one event long.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Origins {
    runs: Vec<(u64, u32)>,
    /// Events of all runs.
    events: usize,
}

impl Origins {
    /// Origins from `runs` (in event order); `None` when there are none or a run is empty.
    pub fn from_runs(runs: Vec<(u64, u32)>) -> Option<Origins> {
        if runs.is_empty() || runs.iter().any(|&(_, n)| n == 0) {
            return None;
        }
        let events = runs.iter().map(|&(_, n)| n as usize).sum();
        Some(Origins { runs, events })
    }

    /// The origins of a document opened for lazy reading, from its element index once checked
    /// against the body; `None` without them.
    pub fn of(doc: &LazyDoc<'_>) -> Option<Origins> {
        Origins::from_runs(doc.origins()?.to_vec())
    }

    /// The runs `(seq, count)`, in event order.
    pub fn runs(&self) -> &[(u64, u32)] {
        &self.runs
    }

    /// Each event's seq, in event order.
    pub fn seqs(&self) -> impl Iterator<Item = u64> + '_ {
        self.runs
            .iter()
            .flat_map(|&(seq, n)| std::iter::repeat_n(seq, n as usize))
    }

    /// The largest seq of any event.
    pub fn max_seq(&self) -> u64 {
        self.runs.iter().map(|&(seq, _)| seq).max().unwrap_or(0)
    }

    /// Events described.
    pub fn len(&self) -> usize {
        self.events
    }

    /// Always `false`: origins describe at least one event.
    pub fn is_empty(&self) -> bool {
        self.events == 0
    }
}

impl BlobRef<'_> {
    /// The origins of this blob's events, from its element index: `None` when it has no index,
    /// an index without origins (the original profile, an older writer), or one that does not
    /// check against the body (damaged): a caller must take `None` as "unknown", never as "no
    /// event came from a WAL record". Decompresses the body (under the default [`Limits`]) to
    /// check the index; a reader that opens the document anyway can use [`Origins::of`].
    pub fn origins(&self) -> Option<Origins> {
        let mut scratch = Vec::new();
        let doc = self.lazy(&Limits::default(), &mut scratch).ok()?;
        Origins::of(&doc)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn runs_expand_to_each_events_seq() {
        let o = Origins::from_runs(vec![(7, 2), (0, 1), (9, 3)]).expect("valid runs");
        assert_eq!(o.seqs().collect::<Vec<_>>(), vec![7, 7, 0, 9, 9, 9]);
        assert_eq!((o.len(), o.max_seq(), o.is_empty()), (6, 9, false));
        assert_eq!(o.runs(), &[(7, 2), (0, 1), (9, 3)]);
    }

    /// A default-profile blob of `n` small events, event `i` from record `seq(i)`.
    fn blob_with_origins(n: usize, seq: impl Fn(usize) -> u64) -> Vec<u8> {
        let builder = crate::BlobBuilder::with_profile(crate::Profile::default()).unwrap();
        let mut enc = sereal::ArrayEncoder::new(builder.encoder_options().clone()).unwrap();
        for i in 0..n {
            let text = format!(r#"{{"id":{i},"path":"/p/{}"}}"#, i % 7);
            enc.push(&sereal::json::from_json_slice(text.as_bytes()).unwrap())
                .unwrap();
            enc.push_origin(seq(i));
        }
        let mut doc = Vec::new();
        enc.finish_into(&mut doc).unwrap();
        crate::with_trailer(&doc)
    }

    #[test]
    fn a_blob_gives_its_origins_and_none_from_a_damaged_index() {
        let bytes = blob_with_origins(40, |i| 100 + (i / 15) as u64);
        let blob = crate::Blob::parse(&bytes).unwrap();
        let want: Vec<u64> = (0..40).map(|i| 100 + (i / 15) as u64).collect();
        assert_eq!(blob.origins().map(|o| o.seqs().collect()), Some(want));
        // Any flipped bit of the index (the trailer recomputed, as if the writer had made it):
        // never origins other than the true ones.
        let uh = sereal::header::parse(blob.sereal_part())
            .unwrap()
            .user_header
            .unwrap();
        let doc = blob.sereal_part();
        let mut none = 0;
        for at in uh {
            for bit in 0..8 {
                let mut bad = doc.to_vec();
                bad[at] ^= 1 << bit;
                let bad = crate::with_trailer(&bad);
                let Ok(parsed) = crate::Blob::parse(&bad) else {
                    continue;
                };
                match parsed.origins() {
                    None => none += 1,
                    Some(o) => panic!("byte {at} bit {bit}: origins {:?}", o.runs()),
                }
            }
        }
        assert!(none > 0);
    }

    #[test]
    fn empty_runs_are_not_origins() {
        assert_eq!(Origins::from_runs(Vec::new()), None);
        assert_eq!(Origins::from_runs(vec![(3, 1), (4, 0)]), None);
    }
}
