//! Test harness: a store of each backend, reopenable, and the `store_test!` macro that runs one
//! behaviour test against every backend (like ripgrep's `rgtest!`).

#![allow(dead_code)]

use std::sync::Arc;

use sluice_store::{EmbeddedOptions, EmbeddedStore, InMemoryStore, Retention, Store};

/// The backends every behaviour test runs against.
#[derive(Clone, Copy, Debug)]
pub enum Kind {
    Memory,
    Embedded,
}

/// A store under test that can be closed and reopened on the same data.
pub struct Harness {
    kind: Kind,
    retention: Retention,
    dir: tempfile::TempDir,
    memory: Option<InMemoryStore>,
    store: Option<Arc<dyn Store>>,
}

impl Harness {
    pub fn new(kind: Kind) -> Self {
        Harness {
            kind,
            retention: Retention::default(),
            dir: tempfile::tempdir().expect("temp dir"),
            memory: None,
            store: None,
        }
    }

    pub fn kind(&self) -> Kind {
        self.kind
    }

    /// Sets the retention used by the next open.
    pub fn set_retention(&mut self, r: Retention) {
        self.retention = r;
    }

    /// The open store (opened on first use).
    pub fn store(&mut self) -> Arc<dyn Store> {
        if let Some(s) = &self.store {
            return s.clone();
        }
        let s: Arc<dyn Store> = match self.kind {
            Kind::Memory => {
                let m = self
                    .memory
                    .get_or_insert_with(|| {
                        InMemoryStore::with_retention(self.retention).expect("retention")
                    })
                    .clone();
                Arc::new(m)
            }
            Kind::Embedded => {
                let opts = EmbeddedOptions {
                    retention: self.retention,
                    ..EmbeddedOptions::default()
                };
                Arc::new(
                    EmbeddedStore::open_with(self.dir.path(), opts).expect("open embedded store"),
                )
            }
        };
        self.store = Some(s.clone());
        s
    }

    /// Closes the store (the caller must have dropped its handles) and opens it again. The
    /// memory store's data is shared between handles, so "reopen" keeps it.
    pub fn reopen(&mut self) -> Arc<dyn Store> {
        self.store = None;
        self.store()
    }
}

/// `store_test!(name, |h| { ... })` defines `name::memory` and `name::embedded`, each running the
/// body with `h: Harness` of that backend.
macro_rules! store_test {
    ($name:ident, |$h:ident| $body:block) => {
        mod $name {
            #[allow(unused_imports)]
            use super::*;

            #[test]
            fn memory() {
                #[allow(unused_mut)]
                let mut $h = $crate::util::Harness::new($crate::util::Kind::Memory);
                $body
            }

            #[test]
            fn embedded() {
                #[allow(unused_mut)]
                let mut $h = $crate::util::Harness::new($crate::util::Kind::Embedded);
                $body
            }
        }
    };
}
