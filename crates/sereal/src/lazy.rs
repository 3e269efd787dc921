//! Lazy reader (being written).
