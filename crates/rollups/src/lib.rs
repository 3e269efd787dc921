//! Rollups: aggregates (count, sum, min, max, quantiles, distinct counts, conditional counts)
//! computed once at write time per (step, group) as mergeable states, and merged at query time
//! to any step that is a multiple of the rollup's.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod query;
pub mod row;
pub mod states;

pub use query::{query, RollupAnswer, RollupError, RollupQuery};
pub use row::RollupRow;
pub use states::{read_states, GroupValues, StateMerger};
