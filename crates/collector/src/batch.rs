//! Events bound for another thread, in a few buffers.
//!
//! A [`ParsedEvent`] owns five heap blocks (three tags, the fragment's body and marks). Handed to
//! another thread, they are freed there, and allocators pay for freeing a block on a thread other
//! than the one that allocated it (mimalloc: an atomic push on the page's remote list, collected
//! and refilled later by the owner, with the cache misses of memory last written by the other
//! core). With two pipeline shards that cost a two-shard server 12 % of its CPU, most of what
//! sharding added per event (docs/decisions.md, "Two shards, one buffer per routed batch").
//!
//! Contract:
//! - An [`EventBatch`] keeps its events in order, each with its epoch, its group's tags and its
//!   body; [`EventBatch::iter`] gives them back as [`EventRef`]s, the same view
//!   [`ParsedEvent::as_event_ref`] gives, so the aggregator has one add path for both
//!   ([`Aggregator::add_batch`](crate::aggregate::Aggregator::add_batch)).
//! - A batch of N events of G groups holds G tag triples, one fragment list (three buffers) and
//!   the value trees of events that came as values (Sereal input), moved in as they are.
//! - Group tags are found by hash, so building a batch is linear in its events whatever their
//!   number of groups.

use hashbrown::HashTable;
use sereal::{FragmentList, FragmentRef, Value};

use crate::ingest::{EventBody, ParsedEvent};

/// An event's body, borrowed.
#[derive(Debug, Clone, Copy)]
pub enum BodyRef<'a> {
    /// Encoded ahead (see [`EventBody::Fragment`]).
    Fragment(FragmentRef<'a>),
    /// A value tree (see [`EventBody::Value`]).
    Value(&'a Value),
}

/// An accepted event, borrowed: its epoch, group tags and body.
#[derive(Debug, Clone, Copy)]
pub struct EventRef<'a> {
    /// The event's second.
    pub epoch: i64,
    /// Data-centre id.
    pub dc: &'a str,
    /// Event type.
    pub type_: &'a str,
    /// Subtype, possibly empty.
    pub subtype: &'a str,
    /// The whole event.
    pub body: BodyRef<'a>,
}

impl ParsedEvent {
    /// The event, borrowed.
    pub fn as_event_ref(&self) -> EventRef<'_> {
        EventRef {
            epoch: self.epoch,
            dc: &self.dc,
            type_: &self.type_,
            subtype: &self.subtype,
            body: match &self.event {
                EventBody::Fragment(f) => BodyRef::Fragment(f.as_ref()),
                EventBody::Value(v) => BodyRef::Value(v),
            },
        }
    }
}

/// Where one event of a batch is.
#[derive(Debug, Clone, Copy)]
struct Slot {
    epoch: i64,
    /// Index in `groups`.
    group: u32,
    /// Index in `fragments`, or in `values` with [`VALUE_BIT`] set.
    body: u32,
}

/// Marks a [`Slot::body`] that indexes `values`.
const VALUE_BIT: u32 = 1 << 31;

/// Events in order, in a few buffers (see the [module docs](self)).
#[derive(Debug, Default)]
pub struct EventBatch {
    /// Distinct (dc, type, subtype) of the events.
    groups: Vec<(String, String, String)>,
    /// Indices into `groups`, by the hash of their tags.
    group_index: HashTable<u32>,
    slots: Vec<Slot>,
    fragments: FragmentList,
    values: Vec<Value>,
}

impl EventBatch {
    /// An empty batch.
    pub fn new() -> EventBatch {
        EventBatch::default()
    }

    /// The events, in order, in one batch.
    pub fn from_events(events: Vec<ParsedEvent>) -> EventBatch {
        let mut batch = EventBatch::new();
        batch.slots.reserve_exact(events.len());
        // Each buffer allocated once at its size (growing by doubling cost copies and a third
        // more memory).
        let (mut fragments, mut bytes, mut marks) = (0, 0, 0);
        for e in &events {
            if let EventBody::Fragment(f) = &e.event {
                fragments += 1;
                bytes += f.len();
                marks += f.as_ref().mark_count();
            }
        }
        batch.fragments.reserve(fragments, bytes, marks);
        for e in events {
            batch.push(e);
        }
        batch
    }

    /// Appends `event` (a fragment is copied into the batch's list, a value moved in).
    pub fn push(&mut self, event: ParsedEvent) {
        let group = self.group_of(&event.dc, &event.type_, &event.subtype);
        let body = match event.event {
            EventBody::Fragment(f) => {
                self.fragments.push(f.as_ref());
                self.fragments.len() - 1
            }
            EventBody::Value(v) => {
                self.values.push(v);
                (self.values.len() - 1) | VALUE_BIT as usize
            }
        };
        self.slots.push(Slot {
            epoch: event.epoch,
            group,
            // A batch is one payload's events: far fewer than 2^31.
            body: body as u32,
        });
    }

    /// The index of group (`dc`, `type_`, `subtype`), added if new.
    fn group_of(&mut self, dc: &str, type_: &str, subtype: &str) -> u32 {
        // Payloads come in runs of one group: the last one first, without hashing.
        if let Some(last) = self.slots.last() {
            let (d, t, s) = &self.groups[last.group as usize];
            if d == dc && t == type_ && s == subtype {
                return last.group;
            }
        }
        let hash = tags_hash(dc, type_, subtype);
        let groups = &self.groups;
        let same = |&i: &u32| {
            let (d, t, s) = &groups[i as usize];
            d == dc && t == type_ && s == subtype
        };
        if let Some(&i) = self.group_index.find(hash, same) {
            return i;
        }
        let i = self.groups.len() as u32;
        self.groups
            .push((dc.to_string(), type_.to_string(), subtype.to_string()));
        let groups = &self.groups;
        self.group_index.insert_unique(hash, i, |&j| {
            let (d, t, s) = &groups[j as usize];
            tags_hash(d, t, s)
        });
        i
    }

    /// Number of events.
    pub fn len(&self) -> usize {
        self.slots.len()
    }

    /// Whether the batch holds no event.
    pub fn is_empty(&self) -> bool {
        self.slots.is_empty()
    }

    /// The events, in order.
    pub fn iter(&self) -> impl Iterator<Item = EventRef<'_>> + '_ {
        self.slots.iter().map(move |s| {
            let (dc, type_, subtype) = &self.groups[s.group as usize];
            let body = if s.body & VALUE_BIT != 0 {
                BodyRef::Value(&self.values[(s.body & !VALUE_BIT) as usize])
            } else {
                match self.fragments.get(s.body as usize) {
                    Some(f) => BodyRef::Fragment(f),
                    // Every slot indexes a fragment pushed with it.
                    None => unreachable!("batch slot without its fragment"),
                }
            };
            EventRef {
                epoch: s.epoch,
                dc,
                type_,
                subtype,
                body,
            }
        })
    }
}

fn tags_hash(dc: &str, type_: &str, subtype: &str) -> u64 {
    use std::hash::{Hash, Hasher};
    let mut h = rustc_hash::FxHasher::default();
    (dc, type_, subtype).hash(&mut h);
    h.finish()
}

#[cfg(test)]
mod tests {
    use super::*;
    use sereal::FragmentWriter;

    fn event(epoch: i64, dc: &str, t: &str, s: &str, n: i64) -> ParsedEvent {
        let mut w = FragmentWriter::new();
        w.begin_hash();
        w.key("n");
        w.int(n);
        w.end();
        ParsedEvent {
            epoch,
            dc: dc.into(),
            type_: t.into(),
            subtype: s.into(),
            event: EventBody::Fragment(w.finish().expect("a hash")),
        }
    }

    #[test]
    fn a_batch_gives_back_its_events_in_order() {
        let mut events = Vec::new();
        for n in 0..300 {
            let g = n % 7;
            events.push(event(100 + n / 50, &format!("dc{g}"), "WEB", "www", n));
        }
        events.push(ParsedEvent {
            epoch: 5,
            dc: "dc1".into(),
            type_: "WEB".into(),
            subtype: "www".into(),
            event: EventBody::Value(Value::Int(7)),
        });
        let batch = EventBatch::from_events(events.clone());
        assert_eq!(batch.len(), events.len());
        assert_eq!(batch.groups.len(), 7);
        for (got, want) in batch.iter().zip(&events) {
            let want = want.as_event_ref();
            assert_eq!(
                (got.epoch, got.dc, got.type_, got.subtype),
                (want.epoch, want.dc, want.type_, want.subtype)
            );
            match (got.body, want.body) {
                (BodyRef::Fragment(a), BodyRef::Fragment(b)) => {
                    assert_eq!(a.to_value().ok(), b.to_value().ok())
                }
                (BodyRef::Value(a), BodyRef::Value(b)) => assert_eq!(a, b),
                _ => panic!("body kind changed"),
            }
        }
    }
}
