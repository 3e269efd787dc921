//! The release order of the live hub: which payload records may go to tails now.
//!
//! Payload appends run concurrently (one per pipeline shard), so records finish appending out of
//! order: record 8 may be handed to the hub before record 7 is. A record `s` is released only
//! once no append still under way can produce a number at or below `s`. Before its append, a
//! shard takes a reservation at one past the highest record the hub has been told of (the log
//! numbers records in order, so that append's record is at least that); a record below every
//! reservation is final in its place — the same floor `Shards::append` keeps for checkpoints.
//! Durability is the hub's other condition (see the [hub](super)).

use std::collections::BTreeMap;

use sluice_collector::ParsedEvent;

/// Reservations under way and records waiting for release.
#[derive(Debug, Default)]
pub(crate) struct Order {
    /// The highest record the hub was told of (at start: the WAL's last record).
    pub last: u64,
    /// Appends under way: floor → how many.
    reserved: BTreeMap<u64, usize>,
    /// Records appended while tails were attached, with their accepted events, by seq.
    pending: BTreeMap<u64, Vec<ParsedEvent>>,
}

impl Order {
    /// The order after the WAL's record `last` (nothing before it goes to tails).
    pub fn after(last: u64) -> Order {
        Order {
            last,
            ..Order::default()
        }
    }

    /// Reserves before an append: its record will be at least the floor returned.
    pub fn reserve(&mut self) -> u64 {
        let floor = self.last + 1;
        *self.reserved.entry(floor).or_insert(0) += 1;
        floor
    }

    /// The append reserved at `floor` ended (appended as record `seq`, or failed: `None`).
    pub fn finish(&mut self, floor: u64, seq: Option<u64>) {
        if let Some(n) = self.reserved.get_mut(&floor) {
            *n -= 1;
            if *n == 0 {
                self.reserved.remove(&floor);
            }
        }
        if let Some(seq) = seq {
            self.last = self.last.max(seq);
        }
    }

    /// Keeps record `seq`'s events until it is released.
    pub fn hold(&mut self, seq: u64, events: Vec<ParsedEvent>) {
        self.pending.insert(seq, events);
    }

    /// The lowest and the highest held records that no append under way can precede (`None`:
    /// none yet).
    pub fn releasable(&self) -> Option<(u64, u64)> {
        let floor = self.reserved.keys().next().copied().unwrap_or(u64::MAX);
        let mut free = self.pending.range(..floor);
        let first = free.next().map(|(&s, _)| s)?;
        Some((first, free.next_back().map_or(first, |(&s, _)| s)))
    }

    /// Takes the held records up to `upto` (from [`releasable`](Self::releasable)), in order.
    pub fn take_upto(&mut self, upto: u64) -> Vec<(u64, Vec<ParsedEvent>)> {
        let rest = self.pending.split_off(&upto.saturating_add(1));
        std::mem::replace(&mut self.pending, rest)
            .into_iter()
            .collect()
    }

    /// Forgets every held record (no tail is left to take them).
    pub fn clear(&mut self) {
        self.pending.clear();
    }

    /// Records held now.
    #[cfg(test)]
    pub fn held(&self) -> usize {
        self.pending.len()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_record_waits_for_every_append_that_could_precede_it() {
        let mut o = Order::after(4);
        let a = o.reserve(); // will become 6
        let b = o.reserve(); // will become 5
        assert_eq!((a, b), (5, 5));
        o.finish(a, Some(6));
        o.hold(6, Vec::new());
        assert_eq!(o.releasable(), None, "the append of 5 is still under way");
        let c = o.reserve(); // after 6 was told: at least 7
        assert_eq!(c, 7);
        o.finish(b, Some(5));
        o.hold(5, Vec::new());
        assert_eq!(
            o.releasable(),
            Some((5, 6)),
            "7's append cannot precede 5 or 6"
        );
        let got: Vec<u64> = o.take_upto(6).into_iter().map(|(s, _)| s).collect();
        assert_eq!(got, vec![5, 6]);
        // A failed append only lifts its reservation.
        o.finish(c, None);
        assert_eq!((o.releasable(), o.last, o.held()), (None, 6, 0));
    }
}
