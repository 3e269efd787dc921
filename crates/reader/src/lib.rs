//! Reading events back. For now: [`filter`], the `--where` expression language evaluated on
//! decoded events or on values selected lazily from a blob. Range reads over a store, `cat` and
//! `tail` come with the pipeline.

#![deny(missing_docs)]
#![forbid(unsafe_code)]

pub mod filter;

pub use filter::{Filter, FilterError};
