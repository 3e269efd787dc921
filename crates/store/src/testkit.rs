//! The contract suite of [`Store`]: the behaviour every backend must have, as public functions
//! that any backend's tests call (feature `testkit`).
//!
//! # Contract (of this module)
//! - Each function checks one item of the contract documented on [`Store`] and panics (test
//!   failure) when the backend breaks it. It needs nothing but the [`StoreHarness`] it is given:
//!   no network, no clock, no files of its own (a backend's harness owns its temp dirs).
//! - Every function starts from an empty store and may close and reopen it
//!   ([`StoreHarness::reopen`]): "reopen" must give back everything written before (a backend
//!   that keeps nothing across a reopen fails the durability items, on purpose).
//! - [`store_contract_tests!`](crate::store_contract_tests) expands to one `#[test]` per item,
//!   so a backend crate runs the suite unchanged with:
//!
//! ```ignore
//! // Cargo.toml: [dev-dependencies] sluice-store = { workspace = true, features = ["testkit"] }
//! use sluice_store::testkit::{Harness, StoreHarness};
//! sluice_store::store_contract_tests!(Harness::new(|retention| {
//!     std::sync::Arc::new(MyStore::connect_for_tests(retention).unwrap())
//! }));
//! ```
//!
//! [`CONTRACT`] lists the same functions by name, for a runner that cannot use `#[test]` (e.g.
//! one shared cluster session for all items).

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

// `ReadStore` is named by path only: with both traits in scope a store's read calls would be
// ambiguous (every `Store` is a `ReadStore`).
use crate::{BlobKey, Counts, CountsWrite, Namespace, PutOutcome, Retention, Store, StoreError};

/// A store under test that can be closed and reopened on the same data.
pub trait StoreHarness {
    /// The open store, opened on first use with the retention set last (default
    /// [`Retention::default`]).
    fn store(&mut self) -> Arc<dyn Store>;

    /// Closes the store (the caller has dropped its handles) and opens it again on the same
    /// data.
    fn reopen(&mut self) -> Arc<dyn Store>;

    /// Sets the retention of the next open (called before the first [`store`](Self::store)).
    fn set_retention(&mut self, retention: Retention);
}

/// A [`StoreHarness`] from an `open` function: `open(retention)` opens the backend on the
/// harness's data (the same data every time it is called).
pub struct Harness<F> {
    open: F,
    retention: Retention,
    store: Option<Arc<dyn Store>>,
}

impl<F: FnMut(Retention) -> Arc<dyn Store>> Harness<F> {
    /// A harness whose store `open` opens.
    pub fn new(open: F) -> Self {
        Harness {
            open,
            retention: Retention::default(),
            store: None,
        }
    }
}

impl<F: FnMut(Retention) -> Arc<dyn Store>> StoreHarness for Harness<F> {
    fn store(&mut self) -> Arc<dyn Store> {
        if let Some(s) = &self.store {
            return s.clone();
        }
        let s = (self.open)(self.retention);
        self.store = Some(s.clone());
        s
    }

    fn reopen(&mut self) -> Arc<dyn Store> {
        self.store = None;
        self.store()
    }

    fn set_retention(&mut self, retention: Retention) {
        self.retention = retention;
    }
}

/// One item of the contract suite.
pub type ContractItem = fn(&mut dyn StoreHarness);

/// Every item of the contract, by name (the order [`store_contract_tests!`](crate::store_contract_tests)
/// defines them in).
pub const CONTRACT: &[(&str, ContractItem)] = &[
    ("put_then_get", put_then_get),
    ("chunks_are_never_overwritten", chunks_are_never_overwritten),
    (
        "concurrent_puts_of_one_key_have_one_winner",
        concurrent_puts_of_one_key_have_one_winner,
    ),
    ("put_blobs_is_put_per_item", put_blobs_is_put_per_item),
    (
        "multi_batch_calls_are_independent",
        multi_batch_calls_are_independent,
    ),
    (
        "owned_puts_store_and_rewrite_the_same_bytes",
        owned_puts_store_and_rewrite_the_same_bytes,
    ),
    ("epoch_index_merges_writers", epoch_index_merges_writers),
    (
        "namespace_index_is_per_namespace",
        namespace_index_is_per_namespace,
    ),
    (
        "catalog_sets_deletes_and_survives",
        catalog_sets_deletes_and_survives,
    ),
    ("counts_merge_by_addition", counts_merge_by_addition),
    (
        "counts_once_apply_each_token_once",
        counts_once_apply_each_token_once,
    ),
    (
        "concurrent_retries_of_one_token_add_once",
        concurrent_retries_of_one_token_add_once,
    ),
    (
        "list_epochs_orders_and_filters",
        list_epochs_orders_and_filters,
    ),
    (
        "expiry_drops_only_old_partitions",
        expiry_drops_only_old_partitions,
    ),
    ("reopen_keeps_everything", reopen_keeps_everything),
    ("get_blobs_keeps_order", get_blobs_keeps_order),
    (
        "read_view_answers_as_the_store",
        read_view_answers_as_the_store,
    ),
    ("refuses_bad_arguments", refuses_bad_arguments),
];

/// Defines one `#[test]` per item of the [`Store`](crate::Store) contract (see
/// [`testkit`](crate::testkit)), each running on a fresh harness made by `$harness` (an
/// expression giving a [`StoreHarness`](crate::testkit::StoreHarness), evaluated once per test).
/// Use it inside a module of its own per backend.
#[macro_export]
macro_rules! store_contract_tests {
    ($harness:expr) => {
        $crate::store_contract_tests!(@each $harness;
            put_then_get,
            chunks_are_never_overwritten,
            concurrent_puts_of_one_key_have_one_winner,
            put_blobs_is_put_per_item,
            multi_batch_calls_are_independent,
            owned_puts_store_and_rewrite_the_same_bytes,
            epoch_index_merges_writers,
            namespace_index_is_per_namespace,
            catalog_sets_deletes_and_survives,
            counts_merge_by_addition,
            counts_once_apply_each_token_once,
            concurrent_retries_of_one_token_add_once,
            list_epochs_orders_and_filters,
            expiry_drops_only_old_partitions,
            reopen_keeps_everything,
            get_blobs_keeps_order,
            read_view_answers_as_the_store,
            refuses_bad_arguments
        );
    };
    (@each $harness:expr; $($name:ident),+) => {
        $(
            #[test]
            fn $name() {
                let mut harness = $harness;
                $crate::testkit::$name(&mut harness);
            }
        )+
    };
}

const E: i64 = 1_700_000_000;

fn blob(seed: u64, len: usize) -> Vec<u8> {
    let mut x = seed.wrapping_mul(0x9E37_79B9_7F4A_7C15) | 1;
    (0..len)
        .map(|_| {
            x ^= x << 13;
            x ^= x >> 7;
            x ^= x << 17;
            x as u8
        })
        .collect()
}

fn set(items: &[&str]) -> BTreeSet<String> {
    items.iter().map(|s| s.to_string()).collect()
}

/// Blobs of several sizes read back; absent keys, epochs and namespaces give `None`.
pub fn put_then_get(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    for (i, len) in [0usize, 1, 1000, 64 << 10, 500 << 10]
        .into_iter()
        .enumerate()
    {
        let key = format!("{E}:ams:WEB::{i}");
        let data = blob(i as u64, len);
        assert_eq!(
            s.put_blob(&ev, BlobKey::new(E, &key), &data).unwrap(),
            PutOutcome::Written
        );
        assert_eq!(s.get_blob(&ev, BlobKey::new(E, &key)).unwrap(), Some(data));
    }
    // Absent: another key, another epoch, another namespace.
    assert_eq!(s.get_blob(&ev, BlobKey::new(E, "nope")).unwrap(), None);
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(E + 1, &format!("{E}:ams:WEB::0")))
            .unwrap(),
        None
    );
    let sub = Namespace::Substream("errors".into());
    assert_eq!(
        s.get_blob(&sub, BlobKey::new(E, &format!("{E}:ams:WEB::1")))
            .unwrap(),
        None
    );
    // The same key in another namespace is another blob.
    let k = format!("{E}:ams:WEB::1");
    s.put_blob(&sub, BlobKey::new(E, &k), b"sub").unwrap();
    assert_eq!(
        s.get_blob(&sub, BlobKey::new(E, &k)).unwrap().as_deref(),
        Some(&b"sub"[..])
    );
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(E, &k)).unwrap(),
        Some(blob(1, 1))
    );
}

/// Write-once: identical bytes are `AlreadyPresent`, different bytes `Exists`, also after a reopen.
pub fn chunks_are_never_overwritten(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let k = BlobKey::new(E, "1700000000:ams:WEB::0");
    assert_eq!(s.put_blob(&ev, k, b"first").unwrap(), PutOutcome::Written);
    assert_eq!(
        s.put_blob(&ev, k, b"first").unwrap(),
        PutOutcome::AlreadyPresent
    );
    let err = s.put_blob(&ev, k, b"second").unwrap_err();
    assert!(
        matches!(err, StoreError::Exists { ref key } if key == k.key),
        "{err:?}"
    );
    assert_eq!(s.get_blob(&ev, k).unwrap().as_deref(), Some(&b"first"[..]));
    drop(s);
    let s = h.reopen();
    assert!(matches!(
        s.put_blob(&ev, k, b"third"),
        Err(StoreError::Exists { .. })
    ));
    assert_eq!(
        s.put_blob(&ev, k, b"first").unwrap(),
        PutOutcome::AlreadyPresent
    );
}

/// Eight threads put one key with different bytes: one `Written`, seven `Exists`.
pub fn concurrent_puts_of_one_key_have_one_winner(h: &mut dyn StoreHarness) {
    let s = h.store();
    let k = "1700000000:ams:WEB::0";
    let outcomes: Vec<_> = std::thread::scope(|scope| {
        let hs: Vec<_> = (0..8u64)
            .map(|i| {
                let s = s.clone();
                scope.spawn(move || {
                    s.put_blob(&Namespace::Events, BlobKey::new(E, k), &blob(i, 1000))
                })
            })
            .collect();
        hs.into_iter().map(|h| h.join().unwrap()).collect()
    });
    let written = outcomes
        .iter()
        .filter(|o| matches!(o, Ok(PutOutcome::Written)))
        .count();
    let exists = outcomes
        .iter()
        .filter(|o| matches!(o, Err(StoreError::Exists { .. })))
        .count();
    assert_eq!((written, exists), (1, 7), "{outcomes:?}");
}

/// Concurrent index adds of one (epoch, dc) merge by union, and survive a reopen.
pub fn epoch_index_merges_writers(h: &mut dyn StoreHarness) {
    let s = h.store();
    // 6 collectors write overlapping entries of the same (epoch, dc) at once.
    std::thread::scope(|scope| {
        for w in 0..6 {
            let s = s.clone();
            scope.spawn(move || {
                for chunk in 0..20 {
                    let mine = format!("WEB::c{w}-{chunk}");
                    let shared = format!("CRON:nightly:{chunk}");
                    s.add_to_epoch_index(
                        E,
                        "ams",
                        &[mine.as_str(), shared.as_str(), shared.as_str()],
                    )
                    .unwrap();
                }
            });
        }
    });
    let mut want = BTreeSet::new();
    for w in 0..6 {
        for chunk in 0..20 {
            want.insert(format!("WEB::c{w}-{chunk}"));
            want.insert(format!("CRON:nightly:{chunk}"));
        }
    }
    assert_eq!(s.get_epoch_index(E, "ams").unwrap(), want);
    assert!(s.get_epoch_index(E, "lhr").unwrap().is_empty());
    assert!(s.get_epoch_index(E + 1, "ams").unwrap().is_empty());
    drop(s);
    assert_eq!(h.reopen().get_epoch_index(E, "ams").unwrap(), want);
}

/// Each namespace has its own index: a substream's entries are not in the events index nor in
/// another substream's; `Events` through the namespace methods is the epoch index itself; the
/// entries merge by union and survive a reopen.
pub fn namespace_index_is_per_namespace(h: &mut dyn StoreHarness) {
    let s = h.store();
    let a = Namespace::Substream("errors".into());
    let b = Namespace::Substream("slow".into());
    s.add_to_epoch_index(E, "ams", &["WEB::0", "WEB::1"])
        .unwrap();
    s.add_to_namespace_index(&a, E, "ams", &["WEB::0"]).unwrap();
    s.add_to_namespace_index(&a, E, "ams", &["WEB::1", "WEB::0"])
        .unwrap();
    s.add_to_namespace_index(&b, E, "ams", &["CRON::0"])
        .unwrap();
    s.add_to_namespace_index(&Namespace::Events, E, "ams", &["WEB::2"])
        .unwrap();
    let set = |v: &[&str]| v.iter().map(|e| e.to_string()).collect::<BTreeSet<_>>();
    let check = |s: &dyn Store| {
        assert_eq!(
            s.get_epoch_index(E, "ams").unwrap(),
            set(&["WEB::0", "WEB::1", "WEB::2"])
        );
        assert_eq!(
            s.get_namespace_index(&Namespace::Events, E, "ams").unwrap(),
            set(&["WEB::0", "WEB::1", "WEB::2"])
        );
        assert_eq!(
            s.get_namespace_index(&a, E, "ams").unwrap(),
            set(&["WEB::0", "WEB::1"])
        );
        assert_eq!(
            s.get_namespace_index(&b, E, "ams").unwrap(),
            set(&["CRON::0"])
        );
        assert!(s.get_namespace_index(&a, E, "lhr").unwrap().is_empty());
        assert!(s.get_namespace_index(&a, E + 1, "ams").unwrap().is_empty());
        // A substream's index never lists the epoch for `list_epochs` on its own.
        assert!(s.list_epochs(None, E + 1, E + 2).unwrap().is_empty());
    };
    check(&*s);
    drop(s);
    check(&*h.reopen());
}

/// Catalog records: set, overwrite (last write wins), delete (twice is fine), per kind, and
/// kept across a reopen; bad names are refused.
pub fn catalog_sets_deletes_and_survives(h: &mut dyn StoreHarness) {
    let s = h.store();
    assert!(s.get_catalog("substream").unwrap().is_empty());
    s.put_catalog("substream", "errors", Some(b"v1")).unwrap();
    s.put_catalog("substream", "slow", Some(b"s")).unwrap();
    s.put_catalog("substream", "errors", Some(b"v2")).unwrap();
    s.put_catalog("other", "errors", Some(b"o")).unwrap();
    s.put_catalog("substream", "gone", Some(b"g")).unwrap();
    s.put_catalog("substream", "gone", None).unwrap();
    s.put_catalog("substream", "gone", None).unwrap();
    let want: BTreeMap<String, Vec<u8>> = [
        ("errors".to_string(), b"v2".to_vec()),
        ("slow".to_string(), b"s".to_vec()),
    ]
    .into();
    assert_eq!(s.get_catalog("substream").unwrap(), want);
    assert_eq!(s.get_catalog("other").unwrap().len(), 1);
    assert!(s.put_catalog("", "x", Some(b"")).is_err());
    assert!(s.put_catalog("substream", "", Some(b"")).is_err());
    assert!(s.put_catalog("substream", "a\0b", Some(b"")).is_err());
    assert!(s
        .put_catalog("substream", "big", Some(&vec![0u8; (1 << 20) + 1]))
        .is_err());
    drop(s);
    let s = h.reopen();
    assert_eq!(s.get_catalog("substream").unwrap(), want);
    // Records are not time data: expiry far in the future keeps them.
    s.expire(E + 100 * 86_400 * 365).unwrap();
    assert_eq!(s.get_catalog("substream").unwrap(), want);
}

/// Concurrent counts adds of one (epoch, dc, type, subtype) sum, and survive a reopen.
pub fn counts_merge_by_addition(h: &mut dyn StoreHarness) {
    let s = h.store();
    std::thread::scope(|scope| {
        for w in 0..4u64 {
            let s = s.clone();
            scope.spawn(move || {
                for _ in 0..25 {
                    let c = Counts {
                        stored: 10,
                        late: w,
                        dropped: BTreeMap::from([
                            ("malformed".to_string(), 1),
                            (format!("r{w}"), 2),
                        ]),
                        kernel_dropped: 0,
                    };
                    s.add_counts(E, "ams", "WEB", "", &c).unwrap();
                }
            });
        }
    });
    let kd = Counts {
        kernel_dropped: 7,
        ..Counts::default()
    };
    s.add_counts(E, "ams", "", "", &kd).unwrap();
    s.add_counts(E, "ams", "", "", &kd).unwrap();
    let check = |s: &Arc<dyn Store>| {
        let got = s.get_counts(E, "ams").unwrap();
        assert_eq!(got.len(), 2, "{got:?}");
        let web = &got[&("WEB".to_string(), String::new())];
        assert_eq!(web.stored, 1000);
        assert_eq!(web.late, 25 * (1 + 2 + 3));
        assert_eq!(web.dropped["malformed"], 100);
        for w in 0..4 {
            assert_eq!(web.dropped[&format!("r{w}")], 50);
        }
        assert_eq!(got[&(String::new(), String::new())].kernel_dropped, 14);
        assert!(s.get_counts(E, "lhr").unwrap().is_empty());
    };
    check(&s);
    drop(s);
    check(&h.reopen());
}

/// `list_epochs` is ordered by epoch then dc, half-open, filtered by dc; counts alone list nothing.
pub fn list_epochs_orders_and_filters(h: &mut dyn StoreHarness) {
    let s = h.store();
    // Written out of order, across three hourly partitions, two dcs.
    let written = [
        (E + 7200, "ams"),
        (E + 5, "lhr"),
        (E, "lhr"),
        (E, "ams"),
        (E + 3599, "ams"),
        (E + 3600, "lhr"),
    ];
    for (epoch, dc) in written {
        s.add_to_epoch_index(epoch, dc, &["WEB::0"]).unwrap();
    }
    // Counts alone do not make an epoch listed.
    s.add_counts(
        E + 1,
        "ams",
        "WEB",
        "",
        &Counts {
            stored: 1,
            ..Counts::default()
        },
    )
    .unwrap();
    let all = s.list_epochs(None, E - 10_000, E + 10_000).unwrap();
    let want: Vec<(i64, String)> = [
        (E, "ams"),
        (E, "lhr"),
        (E + 5, "lhr"),
        (E + 3599, "ams"),
        (E + 3600, "lhr"),
        (E + 7200, "ams"),
    ]
    .iter()
    .map(|(e, d)| (*e, d.to_string()))
    .collect();
    assert_eq!(all, want);
    // Half-open range [from, to).
    let mid = s.list_epochs(None, E + 5, E + 3600).unwrap();
    assert_eq!(
        mid,
        vec![(E + 5, "lhr".to_string()), (E + 3599, "ams".to_string())]
    );
    let ams = s.list_epochs(Some("ams"), E, E + 10_000).unwrap();
    assert_eq!(
        ams.iter().map(|(e, _)| *e).collect::<Vec<_>>(),
        vec![E, E + 3599, E + 7200]
    );
    assert!(s.list_epochs(None, E + 10, E + 10).unwrap().is_empty());
    assert!(s
        .list_epochs(Some("fra"), E - 10_000, E + 10_000)
        .unwrap()
        .is_empty());
    drop(s);
    assert_eq!(
        h.reopen()
            .list_epochs(None, E - 10_000, E + 10_000)
            .unwrap(),
        want
    );
}

/// `expire` drops only wholly expired partitions (retention 2 h, hourly partitions).
pub fn expiry_drops_only_old_partitions(h: &mut dyn StoreHarness) {
    // Keep 2 hours, in hourly partitions. Epoch base aligned to the hour for readability.
    h.set_retention(Retention {
        period_secs: 7200,
        partition_secs: 3600,
    });
    let s = h.store();
    let base = E - E.rem_euclid(3600);
    let ev = Namespace::Events;
    for hour in 0..5i64 {
        let epoch = base + hour * 3600 + 10;
        let key = format!("{epoch}:ams:WEB::0");
        s.put_blob(&ev, BlobKey::new(epoch, &key), &blob(hour as u64, 2000))
            .unwrap();
        s.add_to_epoch_index(epoch, "ams", &["WEB::0"]).unwrap();
        s.add_counts(
            epoch,
            "ams",
            "WEB",
            "",
            &Counts {
                stored: 1,
                ..Counts::default()
            },
        )
        .unwrap();
    }
    let present = |s: &Arc<dyn Store>, hour: i64| {
        let epoch = base + hour * 3600 + 10;
        s.get_blob(&ev, BlobKey::new(epoch, &format!("{epoch}:ams:WEB::0")))
            .unwrap()
            .is_some()
    };
    // At the very end of hour 2 + 2 h of retention, hours 0 and 1 are wholly older than 2 h;
    // hour 2 still has epochs younger than that and stays.
    let now = base + 4 * 3600;
    let report = s.expire(now).unwrap();
    assert_eq!(report.partitions_dropped, 2, "{report:?}");
    assert!(!present(&s, 0) && !present(&s, 1));
    assert!(present(&s, 2) && present(&s, 3) && present(&s, 4));
    assert!(s.get_epoch_index(base + 10, "ams").unwrap().is_empty());
    assert!(s.get_counts(base + 10, "ams").unwrap().is_empty());
    let listed: Vec<i64> = s
        .list_epochs(None, base, base + 5 * 3600)
        .unwrap()
        .into_iter()
        .map(|(e, _)| e)
        .collect();
    assert_eq!(
        listed,
        vec![
            base + 2 * 3600 + 10,
            base + 3 * 3600 + 10,
            base + 4 * 3600 + 10
        ]
    );
    // Expiring again at the same time does nothing.
    assert_eq!(s.expire(now).unwrap().partitions_dropped, 0);
    // One second later hour 2 goes too.
    assert_eq!(s.expire(now + 1).unwrap().partitions_dropped, 0);
    assert_eq!(s.expire(now + 3600).unwrap().partitions_dropped, 1);
    assert!(!present(&s, 2) && present(&s, 3));
    // A late write into an expired hour is accepted (and will go at the next expiry).
    let old = base + 20;
    s.put_blob(&ev, BlobKey::new(old, "late"), b"x").unwrap();
    assert!(s
        .get_blob(&ev, BlobKey::new(old, "late"))
        .unwrap()
        .is_some());
    assert_eq!(s.expire(now + 3600).unwrap().partitions_dropped, 1);
    drop(s);
    let s = h.reopen();
    assert!(!present(&s, 2) && present(&s, 3) && present(&s, 4));
    assert_eq!(s.get_blob(&ev, BlobKey::new(old, "late")).unwrap(), None);
}

/// Everything written before a reopen reads back after it; writes after a reopen append.
pub fn reopen_keeps_everything(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let sub = Namespace::Substream("web-errors".into());
    let mut keys = Vec::new();
    for i in 0..40i64 {
        let epoch = E + i * 450; // spans several partitions
        let key = format!("{epoch}:ams:WEB::{i}");
        s.put_blob(
            &ev,
            BlobKey::new(epoch, &key),
            &blob(i as u64, 100 + i as usize * 997),
        )
        .unwrap();
        s.put_blob(&sub, BlobKey::new(epoch, &key), &blob(1000 + i as u64, 50))
            .unwrap();
        s.add_to_epoch_index(epoch, "ams", &[&format!("WEB::{i}")])
            .unwrap();
        keys.push((epoch, key));
    }
    s.flush().unwrap();
    drop(s);
    let s = h.reopen();
    for (i, (epoch, key)) in keys.iter().enumerate() {
        let k = BlobKey::new(*epoch, key);
        assert_eq!(
            s.get_blob(&ev, k).unwrap(),
            Some(blob(i as u64, 100 + i * 997))
        );
        assert_eq!(
            s.get_blob(&sub, k).unwrap(),
            Some(blob(1000 + i as u64, 50))
        );
        assert_eq!(
            s.get_epoch_index(*epoch, "ams").unwrap(),
            set(&[&format!("WEB::{i}")])
        );
    }
    // Writes after a reopen append to the same partitions.
    let (epoch, _) = &keys[0];
    s.put_blob(&ev, BlobKey::new(*epoch, "after"), b"after")
        .unwrap();
    drop(s);
    let s = h.reopen();
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(*epoch, "after"))
            .unwrap()
            .as_deref(),
        Some(&b"after"[..])
    );
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(keys[39].0, &keys[39].1))
            .unwrap(),
        Some(blob(39, 100 + 39 * 997))
    );
}

/// `get_blobs` answers in the order of its keys, `None` for the absent ones.
pub fn get_blobs_keeps_order(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let names: Vec<String> = (0..60).map(|i| format!("{E}:ams:WEB::{i}")).collect();
    for (i, n) in names.iter().enumerate() {
        if i % 3 != 0 {
            s.put_blob(
                &ev,
                BlobKey::new(E + i as i64, n),
                &blob(i as u64, 3000 + i),
            )
            .unwrap();
        }
    }
    let keys: Vec<BlobKey<'_>> = names
        .iter()
        .enumerate()
        .map(|(i, n)| BlobKey::new(E + i as i64, n))
        .collect();
    let got = s.get_blobs(&ev, &keys);
    assert_eq!(got.len(), 60);
    for (i, r) in got.into_iter().enumerate() {
        let want = (i % 3 != 0).then(|| blob(i as u64, 3000 + i));
        assert_eq!(r.unwrap(), want, "key {i}");
    }
}

/// Empty, NUL-holding or oversized keys, bad namespaces and index entries are `InvalidArgument`.
pub fn refuses_bad_arguments(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let bad =
        |r: Result<PutOutcome, StoreError>| matches!(r, Err(StoreError::InvalidArgument { .. }));
    assert!(bad(s.put_blob(&ev, BlobKey::new(E, ""), b"x")));
    assert!(bad(s.put_blob(&ev, BlobKey::new(E, "a\0b"), b"x")));
    assert!(bad(s.put_blob(
        &ev,
        BlobKey::new(E, &"k".repeat(5000)),
        b"x"
    )));
    assert!(bad(s.put_blob(
        &Namespace::Substream(String::new()),
        BlobKey::new(E, "k"),
        b"x"
    )));
    assert!(matches!(
        s.add_to_epoch_index(E, "ams", &["a|b"]),
        Err(StoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        s.add_to_epoch_index(E, "ams", &[""]),
        Err(StoreError::InvalidArgument { .. })
    ));
    assert!(s.list_epochs(None, E - 10, E + 10).unwrap().is_empty());
    assert_eq!(
        Namespace::parse("substreams/x").unwrap(),
        Namespace::Substream("x".into())
    );
    assert_eq!(Namespace::parse("events").unwrap().to_string(), "events");
    assert!(Namespace::parse("other").is_err());
}

/// `put_blobs` gives, per item and in order, what `put_blob` would (new blobs `Written`,
/// identical ones `AlreadyPresent`, across partitions) and stops at the first item that fails
/// (`Exists`, `InvalidArgument`): the items after it are not stored.
pub fn put_blobs_is_put_per_item(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let old = format!("{E}:ams:WEB::0");
    s.put_blob(&ev, BlobKey::new(E, &old), b"old").unwrap();
    let keys: Vec<String> = (1..8).map(|i| format!("{E}:ams:WEB::{i}")).collect();
    let datas: Vec<Vec<u8>> = (1..8).map(|i| blob(i, 1000 * i as usize)).collect();
    let item = |i: usize, epoch: i64| (BlobKey::new(epoch, keys[i].as_str()), datas[i].as_slice());
    let ok = [
        item(0, E),
        (BlobKey::new(E, old.as_str()), &b"old"[..]),
        item(1, E + 7200),
        item(2, E),
        // The same key twice in one call: the second sees the first.
        item(2, E),
    ];
    let got = s.put_blobs(&ev, &ok);
    let outcomes: Vec<PutOutcome> = got.into_iter().map(|r| r.unwrap()).collect();
    use PutOutcome::{AlreadyPresent, Written};
    assert_eq!(
        outcomes,
        [Written, AlreadyPresent, Written, Written, AlreadyPresent]
    );
    let conflict = [
        item(3, E),
        (BlobKey::new(E, old.as_str()), &b"other"[..]),
        item(4, E),
    ];
    let got = s.put_blobs(&ev, &conflict);
    assert_eq!(got.len(), 2, "stops at the first failure: {got:?}");
    assert!(matches!(got[0], Ok(Written)), "{got:?}");
    assert!(matches!(got[1], Err(StoreError::Exists { .. })), "{got:?}");
    let bad = [(BlobKey::new(E + 3600, ""), &b"x"[..]), item(5, E + 3600)];
    let got = s.put_blobs(&ev, &bad);
    assert_eq!(got.len(), 1, "{got:?}");
    assert!(
        matches!(got[0], Err(StoreError::InvalidArgument { .. })),
        "{got:?}"
    );
    assert!(s.put_blobs(&ev, &[]).is_empty());
    drop(s);
    let s = h.reopen();
    let read = |epoch: i64, key: &str| s.get_blob(&ev, BlobKey::new(epoch, key)).unwrap();
    assert_eq!(read(E, &old).as_deref(), Some(&b"old"[..]));
    assert_eq!(read(E, &keys[0]), Some(datas[0].clone()));
    assert_eq!(read(E + 7200, &keys[1]), Some(datas[1].clone()));
    assert_eq!(read(E, &keys[2]), Some(datas[2].clone()));
    assert_eq!(read(E, &keys[3]), Some(datas[3].clone()));
    assert_eq!(read(E, &keys[4]), None, "attempted after a failure");
    assert_eq!(read(E + 3600, &keys[5]), None, "attempted after a failure");
    // A retry of a whole call (after an unknown outcome) is harmless.
    let again = s.put_blobs(&ev, &ok);
    assert_eq!(again.len(), ok.len());
    assert!(
        again.iter().all(|r| matches!(r, Ok(AlreadyPresent))),
        "{again:?}"
    );
}

/// `put_owned_blob_lists` (keys the caller owns, so only ever put with the same bytes) stores
/// each list as `put_blob_lists` does: up to its first failure (a bad key), the other lists
/// untouched; a retry of the whole call with the same bytes succeeds and changes nothing, also
/// after a reopen. `get_epoch_index_latest` lists every entry an add returned `Ok` for.
pub fn owned_puts_store_and_rewrite_the_same_bytes(h: &mut dyn StoreHarness) {
    let s = h.store();
    let ev = Namespace::Events;
    let keys: Vec<String> = (0..5).map(|i| format!("{E}:ams:WEB::c1.{i}")).collect();
    let datas: Vec<Vec<u8>> = (0..5).map(|i| blob(200 + i, 300 << (2 * i))).collect();
    let item = |i: usize| (BlobKey::new(E, keys[i].as_str()), datas[i].as_slice());
    let lists = vec![
        vec![item(0), item(1)],
        vec![(BlobKey::new(E, ""), &b"bad key"[..]), item(2)],
        Vec::new(),
        vec![item(3), item(4)],
    ];
    let stored = |r: &Result<PutOutcome, StoreError>| {
        matches!(r, Ok(PutOutcome::Written | PutOutcome::AlreadyPresent))
    };
    let got = s.put_owned_blob_lists(&ev, &lists);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(got[0].len() == 2 && got[0].iter().all(stored), "{got:?}");
    assert_eq!(got[1].len(), 1, "stops at its first failure: {got:?}");
    assert!(
        matches!(got[1][0], Err(StoreError::InvalidArgument { .. })),
        "{got:?}"
    );
    assert!(got[2].is_empty());
    assert!(got[3].len() == 2 && got[3].iter().all(stored), "{got:?}");
    let read = |s: &dyn crate::Store, i: usize| s.get_blob(&ev, BlobKey::new(E, &keys[i])).unwrap();
    assert_eq!(read(&*s, 2), None, "attempted after a failure");
    for i in [0, 1, 3, 4] {
        assert_eq!(read(&*s, i).as_ref(), Some(&datas[i]), "key {i}");
    }
    // A retry after an unknown outcome: the same keys and bytes.
    let again = s.put_owned_blob_lists(&ev, &[vec![item(0), item(1)], vec![item(4)]]);
    assert!(again.iter().flatten().all(stored), "{again:?}");
    assert_eq!(again.iter().map(Vec::len).sum::<usize>(), 3, "{again:?}");
    s.add_to_epoch_index(E, "ams", &["WEB::c1.0", "WEB::c1.1"])
        .unwrap();
    assert_eq!(
        s.get_epoch_index_latest(E, "ams").unwrap(),
        set(&["WEB::c1.0", "WEB::c1.1"])
    );
    drop(s);
    let s = h.reopen();
    for i in [0, 1, 3, 4] {
        assert_eq!(
            read(&*s, i).as_ref(),
            Some(&datas[i]),
            "key {i} after a reopen"
        );
    }
    let again = s.put_owned_blob_lists(&ev, &[vec![item(3)]]);
    assert!(again.iter().flatten().all(stored), "{again:?}");
    assert_eq!(read(&*s, 3).as_ref(), Some(&datas[3]));
    assert_eq!(
        s.get_epoch_index_latest(E, "ams").unwrap(),
        set(&["WEB::c1.0", "WEB::c1.1"])
    );
}

/// `put_blob_lists`, `add_to_epoch_indexes` and `add_counts_once_many` act as the single
/// calls, one per list/item, with one result each in input order: a failure in one list stops
/// only that list; counts tokens still apply once.
pub fn multi_batch_calls_are_independent(h: &mut dyn StoreHarness) {
    use crate::CountsAdd;
    let s = h.store();
    let ev = Namespace::Events;
    let old = format!("{E}:ams:CRON::0");
    s.put_blob(&ev, BlobKey::new(E, &old), b"old").unwrap();
    let keys: Vec<String> = (0..4).map(|i| format!("{E}:ams:WEB::{i}")).collect();
    let datas: Vec<Vec<u8>> = (0..4).map(|i| blob(100 + i, 500)).collect();
    let item = |i: usize| (BlobKey::new(E, keys[i].as_str()), datas[i].as_slice());
    let lists = vec![
        vec![item(0), item(1)],
        vec![(BlobKey::new(E, old.as_str()), &b"other"[..]), item(2)],
        Vec::new(),
        vec![item(3)],
    ];
    let got = s.put_blob_lists(&ev, &lists);
    assert_eq!(got.len(), 4, "{got:?}");
    assert!(
        got[0].iter().all(|r| matches!(r, Ok(PutOutcome::Written))),
        "{got:?}"
    );
    assert_eq!(got[0].len(), 2);
    assert_eq!(got[1].len(), 1, "stops at its first failure: {got:?}");
    assert!(
        matches!(got[1][0], Err(StoreError::Exists { .. })),
        "{got:?}"
    );
    assert!(got[2].is_empty());
    assert!(matches!(got[3][..], [Ok(PutOutcome::Written)]), "{got:?}");
    assert_eq!(s.get_blob(&ev, BlobKey::new(E, &keys[2])).unwrap(), None);
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(E, &keys[3])).unwrap(),
        Some(datas[3].clone())
    );
    let items = vec![
        (E, "ams", vec!["WEB::0", "WEB::1"]),
        (E + 1, "ams", vec!["WEB::5"]),
        (E, "fra", vec!["bad|entry"]),
    ];
    let got = s.add_to_epoch_indexes(&items);
    assert_eq!(got.len(), 3);
    assert!(got[0].is_ok() && got[1].is_ok(), "{got:?}");
    assert!(
        matches!(got[2], Err(StoreError::InvalidArgument { .. })),
        "{got:?}"
    );
    assert_eq!(
        s.get_epoch_index(E, "ams").unwrap(),
        set(&["WEB::0", "WEB::1"])
    );
    assert_eq!(s.get_epoch_index(E + 1, "ams").unwrap(), set(&["WEB::5"]));
    let (c3, c4) = (stored(3), stored(4));
    let adds = [
        CountsAdd {
            write: CountsWrite::new("c1", "WEB::0"),
            epoch: E,
            dc: "ams",
            event_type: "WEB",
            subtype: "",
            counts: &c3,
        },
        CountsAdd {
            write: CountsWrite::new("c1", "WEB::1"),
            epoch: E,
            dc: "ams",
            event_type: "WEB",
            subtype: "",
            counts: &c4,
        },
    ];
    for _ in 0..2 {
        let got = s.add_counts_once_many(&adds);
        assert!(got.len() == 2 && got.iter().all(Result::is_ok), "{got:?}");
    }
    let counts = s.get_counts(E, "ams").unwrap();
    assert_eq!(counts[&("WEB".to_string(), String::new())].stored, 7);
}

fn stored(n: u64) -> Counts {
    Counts {
        stored: n,
        dropped: BTreeMap::from([("shed".to_string(), 1)]),
        ..Counts::default()
    }
}

/// `add_counts_once` applies a (writer, batch) token once per (epoch, dc), also after a
/// reopen; other batches, writers, epochs and dcs are separate tokens; plain `add_counts`
/// still adds every time.
pub fn counts_once_apply_each_token_once(h: &mut dyn StoreHarness) {
    let s = h.store();
    let t = CountsWrite::new("c1", "WEB::c1.0");
    s.add_counts_once(t, E, "ams", "WEB", "", &stored(10))
        .unwrap();
    s.add_counts_once(t, E, "ams", "WEB", "", &stored(10))
        .unwrap();
    s.add_counts_once(
        CountsWrite::new("c1", "WEB::c1.1"),
        E,
        "ams",
        "WEB",
        "",
        &stored(5),
    )
    .unwrap();
    s.add_counts_once(
        CountsWrite::new("c2", "WEB::c1.0"),
        E,
        "ams",
        "WEB",
        "",
        &stored(3),
    )
    .unwrap();
    s.add_counts_once(t, E, "lhr", "WEB", "", &stored(7))
        .unwrap();
    s.add_counts_once(t, E + 1, "ams", "WEB", "", &stored(8))
        .unwrap();
    // The empty writer (a sole writer) is a writer like any other.
    s.add_counts_once(
        CountsWrite::new("", "WEB::0"),
        E,
        "ams",
        "API",
        "v1",
        &stored(2),
    )
    .unwrap();
    s.add_counts_once(
        CountsWrite::new("", "WEB::0"),
        E,
        "ams",
        "API",
        "v1",
        &stored(2),
    )
    .unwrap();
    s.add_counts(E, "ams", "WEB", "", &stored(100)).unwrap();
    s.add_counts(E, "ams", "WEB", "", &stored(100)).unwrap();
    let check = |s: &Arc<dyn Store>| {
        let web = (String::from("WEB"), String::new());
        let ams = s.get_counts(E, "ams").unwrap();
        assert_eq!(ams[&web].stored, 10 + 5 + 3 + 200, "{ams:?}");
        assert_eq!(ams[&web].dropped["shed"], 5, "{ams:?}");
        assert_eq!(ams[&("API".to_string(), "v1".to_string())].stored, 2);
        assert_eq!(s.get_counts(E, "lhr").unwrap()[&web].stored, 7);
        assert_eq!(s.get_counts(E + 1, "ams").unwrap()[&web].stored, 8);
    };
    check(&s);
    drop(s);
    let s = h.reopen();
    check(&s);
    // Retries after the reopen are still recognised.
    s.add_counts_once(t, E, "ams", "WEB", "", &stored(10))
        .unwrap();
    s.add_counts_once(t, E + 1, "ams", "WEB", "", &stored(8))
        .unwrap();
    check(&s);
    // A bad token is refused, not applied.
    assert!(matches!(
        s.add_counts_once(CountsWrite::new("c1", ""), E, "ams", "WEB", "", &stored(1)),
        Err(StoreError::InvalidArgument { .. })
    ));
    assert!(matches!(
        s.add_counts_once(
            CountsWrite::new("c\0", "b"),
            E,
            "ams",
            "WEB",
            "",
            &stored(1)
        ),
        Err(StoreError::InvalidArgument { .. })
    ));
    check(&s);
}

/// Eight threads retry the same tokens at once: each token's counts are added exactly once.
pub fn concurrent_retries_of_one_token_add_once(h: &mut dyn StoreHarness) {
    let s = h.store();
    std::thread::scope(|scope| {
        for _ in 0..8 {
            let s = s.clone();
            scope.spawn(move || {
                for b in 0..20 {
                    let batch = format!("WEB::w.{b}");
                    s.add_counts_once(
                        CountsWrite::new("w", &batch),
                        E,
                        "ams",
                        "WEB",
                        "",
                        &stored(1),
                    )
                    .unwrap();
                }
            });
        }
    });
    let got = s.get_counts(E, "ams").unwrap();
    assert_eq!(
        got[&("WEB".to_string(), String::new())].stored,
        20,
        "{got:?}"
    );
}

/// What a reader sees: epochs listed, two blobs, index entries + counts rows.
type ReadAll = (Vec<(i64, String)>, Vec<Option<Vec<u8>>>, usize);

fn read_all<R: crate::ReadStore + ?Sized>(r: &R) -> ReadAll {
    let listed = r.list_epochs(None, E - 10, E + 10).unwrap();
    let key = format!("{E}:ams:WEB::0");
    let blobs = r
        .get_blobs(
            &Namespace::Events,
            &[BlobKey::new(E, &key), BlobKey::new(E, "absent")],
        )
        .into_iter()
        .map(|b| b.unwrap())
        .collect();
    let n = r.get_epoch_index(E, "ams").unwrap().len() + r.get_counts(E, "ams").unwrap().len();
    (listed, blobs, n)
}

/// Any store is a [`ReadStore`](crate::ReadStore) whose answers are the store's own.
pub fn read_view_answers_as_the_store(h: &mut dyn StoreHarness) {
    let s = h.store();
    let key = format!("{E}:ams:WEB::0");
    s.put_blob(&Namespace::Events, BlobKey::new(E, &key), b"x")
        .unwrap();
    s.add_to_epoch_index(E, "ams", &["WEB::0"]).unwrap();
    s.add_counts(E, "ams", "WEB", "", &stored(1)).unwrap();
    let (listed, blobs, n) = read_all(&*s);
    assert_eq!(listed, vec![(E, "ams".to_string())]);
    assert_eq!(blobs, vec![Some(b"x".to_vec()), None]);
    assert_eq!(n, 2);
    assert_eq!(crate::ReadStore::retention(&*s), Store::retention(&*s));
}
