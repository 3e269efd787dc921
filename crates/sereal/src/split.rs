//! Splitter (being written).
