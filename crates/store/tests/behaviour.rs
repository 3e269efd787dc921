//! The behaviour every backend must have, run against each by `store_test!`.

#[macro_use]
mod util;

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use sluice_store::{
    BlobKey, Counts, FaultyStore, Namespace, PutOutcome, Retention, Store, StoreError,
};

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

store_test!(put_then_get, |h| {
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
});

store_test!(chunks_are_never_overwritten, |h| {
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
});

store_test!(concurrent_puts_of_one_key_have_one_winner, |h| {
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
});

store_test!(epoch_index_merges_writers, |h| {
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
});

store_test!(counts_merge_by_addition, |h| {
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
});

store_test!(list_epochs_orders_and_filters, |h| {
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
});

store_test!(expiry_drops_only_old_partitions, |h| {
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
});

store_test!(reopen_keeps_everything, |h| {
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
});

store_test!(get_blobs_keeps_order, |h| {
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
});

store_test!(refuses_bad_arguments, |h| {
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
});

store_test!(faulty_wrapper_fails_on_demand, |h| {
    let (s, faults) = FaultyStore::new(h.store());
    let ev = Namespace::Events;
    faults.fail_next_writes(2);
    let k = |i: i64| format!("{E}:ams:WEB::{i}");
    let e1 = s.put_blob(&ev, BlobKey::new(E, &k(0)), b"a").unwrap_err();
    assert!(e1.is_transient(), "{e1:?}");
    assert!(s.add_to_epoch_index(E, "ams", &["WEB::0"]).is_err());
    // The failed writes never reached the inner store.
    assert_eq!(s.get_blob(&ev, BlobKey::new(E, &k(0))).unwrap(), None);
    assert!(s.get_epoch_index(E, "ams").unwrap().is_empty());
    s.put_blob(&ev, BlobKey::new(E, &k(0)), b"a").unwrap();
    faults.fail_writes(true);
    assert!(s.put_blob(&ev, BlobKey::new(E, &k(1)), b"b").is_err());
    assert!(s.flush().is_err());
    faults.fail_writes(false);
    faults.fail_reads(true);
    assert!(s.get_blob(&ev, BlobKey::new(E, &k(0))).is_err());
    assert!(s.get_blobs(&ev, &[BlobKey::new(E, &k(0))])[0].is_err());
    faults.fail_reads(false);
    assert_eq!(
        s.get_blob(&ev, BlobKey::new(E, &k(0))).unwrap().as_deref(),
        Some(&b"a"[..])
    );
    assert_eq!(faults.injected(), 6);
});
