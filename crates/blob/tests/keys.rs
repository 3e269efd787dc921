//! Keys of the events and epochs namespaces, and the epochs list.

use sluice_blob::{BlobError, ChunkId, EpochIndex, EpochKey, EventKey, IndexEntry};

#[test]
fn original_formats() {
    let k = EventKey::new(1_700_000_000, "ams4", "WEB", "www", ChunkId::plain(0)).unwrap();
    assert_eq!(k.to_string(), "1700000000:ams4:WEB:www:0");
    assert_eq!(k.epoch_key().to_string(), "1700000000-ams4");
    assert_eq!(k.index_entry().to_string(), "WEB:www:0");
    let k = EventKey::new(1_700_000_001, "lhr2", "type3", "", ChunkId::plain(12)).unwrap();
    assert_eq!(k.to_string(), "1700000001:lhr2:type3::12");
    assert_eq!(k.index_entry().to_string(), "type3::12");

    // The DESIGN.md example, exactly.
    let original = "type1:sub1:0|type1:sub1:1|type3::0";
    let index = EpochIndex::parse(original).unwrap();
    assert_eq!(index.len(), 3);
    assert_eq!(index.to_string(), original);
    let ek = EpochKey::parse("1700000000-ams4").unwrap();
    let keys: Vec<String> = index.event_keys(&ek).map(|k| k.to_string()).collect();
    assert_eq!(
        keys,
        [
            "1700000000:ams4:type1:sub1:0",
            "1700000000:ams4:type1:sub1:1",
            "1700000000:ams4:type3::0"
        ]
    );
    assert_eq!(EpochIndex::parse("").unwrap().to_string(), "");
    assert!(EpochIndex::parse("").unwrap().is_empty());
}

#[test]
fn parse_format_round_trips() {
    for s in [
        "0:a:T::0",
        "1700000000:ams4:WEB:www:0",
        "1700000000:ams4:WEB::4294967295",
        "9223372036854775807:dc-with-dash:LB:sub type with spaces:c1.7",
        "1700000000:lhr2:CRON:nightly:ams4-col_2.0",
        "1700000000:東京:WEB:ünïcode:x.1",
    ] {
        let k: EventKey = s.parse().unwrap_or_else(|e| panic!("{s}: {e}"));
        assert_eq!(k.to_string(), s);
        assert_eq!(EventKey::from_parts(&k.epoch_key(), &k.index_entry()), k);
        let e: IndexEntry = k.index_entry().to_string().parse().unwrap();
        assert_eq!(e, k.index_entry());
        let ek: EpochKey = k.epoch_key().to_string().parse().unwrap();
        assert_eq!(ek, k.epoch_key());
    }
    let ek = EpochKey::parse("1700000000-dc-with-dash").unwrap();
    assert_eq!((ek.epoch(), ek.dc()), (1_700_000_000, "dc-with-dash"));
}

#[test]
fn chunk_ids() {
    assert_eq!(ChunkId::parse("0").unwrap(), ChunkId::plain(0));
    assert_eq!(ChunkId::parse("17").unwrap().n(), 17);
    let c = ChunkId::parse("ams4-c2.3").unwrap();
    assert_eq!((c.collector_id(), c.n()), (Some("ams4-c2"), 3));
    assert_eq!(c.to_string(), "ams4-c2.3");
    assert_eq!(c.offset(2).unwrap().to_string(), "ams4-c2.5");
    assert_eq!(ChunkId::plain(4).offset(1).unwrap(), ChunkId::plain(5));
    assert!(ChunkId::plain(u32::MAX).offset(1).is_err());
    for bad in [
        "",
        "-1",
        "+1",
        "01",
        "1.5",
        "4294967296",
        "a.",
        ".1",
        "a.01",
        "a.b.1",
        "1a.2",
        "_a.1",
        "a b.1",
        "a:b.1",
        "a|b.1",
        "x",
        "0x10",
        "é.1",
        " 1",
        "1 ",
    ] {
        match ChunkId::parse(bad) {
            Err(BlobError::BadKey { reason, .. }) => assert!(!reason.is_empty()),
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    let long = format!("{}.1", "a".repeat(65));
    assert!(ChunkId::parse(&long).is_err());
    assert!(ChunkId::parse(&format!("{}.1", "a".repeat(64))).is_ok());
    assert!(ChunkId::collector("9lives", 0).is_err());
    // Order: plain first, numerically; then by collector, then number.
    let mut v: Vec<ChunkId> = ["b.0", "10", "a.2", "2", "a.10", "0"]
        .iter()
        .map(|s| s.parse().unwrap())
        .collect();
    v.sort();
    let s: Vec<String> = v.iter().map(|c| c.to_string()).collect();
    assert_eq!(s, ["0", "2", "10", "a.2", "a.10", "b.0"]);
}

#[test]
fn bad_keys_are_rejected_with_reasons() {
    for bad in [
        "",
        "1700000000",
        "1700000000:ams4:WEB:www",
        "1700000000:ams4:WEB:www:0:extra",
        "-1:ams4:WEB:www:0",
        "01700000000:ams4:WEB:www:0",
        "17e8:ams4:WEB:www:0",
        "99999999999999999999:ams4:WEB:www:0",
        "1700000000::WEB:www:0",
        "1700000000:ams4::www:0",
        "1700000000:ams4:WEB:www:",
        "1700000000:ams4:WEB:www:00",
        "1700000000:ams4:WEB|x:www:0",
        "1700000000:am\ns4:WEB:www:0",
        "1700000000:ams4:WEB:w\tw:0",
        "1700000000:ams4:WEB:www:9lives.0",
    ] {
        match EventKey::parse(bad) {
            Err(e @ BlobError::BadKey { .. }) => {
                assert!(e.to_string().starts_with("bad key"), "{e}")
            }
            other => panic!("{bad:?} accepted or wrong error: {other:?}"),
        }
    }
    for bad in [
        "",
        "1700000000",
        "1700000000-",
        "-1700000000-ams4",
        "x-ams4",
        "017-ams4",
        "1700000000-a:b",
        "1700000000-a|b",
    ] {
        assert!(
            matches!(EpochKey::parse(bad), Err(BlobError::BadKey { .. })),
            "{bad:?}"
        );
    }
    // Constructors validate too.
    assert!(EventKey::new(-5, "a", "T", "", ChunkId::plain(0)).is_err());
    assert!(EventKey::new(5, "a:b", "T", "", ChunkId::plain(0)).is_err());
    assert!(EventKey::new(5, "a", "", "", ChunkId::plain(0)).is_err());
    assert!(EventKey::new(5, "a", "T", "x|y", ChunkId::plain(0)).is_err());
    assert!(EventKey::new(5, &"d".repeat(65), "T", "", ChunkId::plain(0)).is_err());
    assert!(EventKey::new(5, &"d".repeat(64), "T", "", ChunkId::plain(0)).is_ok());
    assert!(EpochKey::new(5, "").is_err());
    assert!(IndexEntry::new("T", "a\nb", ChunkId::plain(0)).is_err());
    // Errors quote at most ~120 characters of a huge key.
    let huge = "x".repeat(100_000);
    let msg = EventKey::parse(&huge).unwrap_err().to_string();
    assert!(msg.len() < 400, "{}", msg.len());
}

#[test]
fn bad_index_lists_are_rejected() {
    for (bad, entry) in [
        ("|", 0),
        ("a::0|", 1),
        ("a::0||b::0", 1),
        ("a::0|b:0", 1),
        ("a:s:0:1", 0),
        ("a::x", 0),
        ("::0", 0),
        ("a::0|b::1|c::01", 2),
        ("a::0\n", 0),
    ] {
        match EpochIndex::parse(bad) {
            Err(BlobError::BadIndex { entry: e, reason }) => {
                assert_eq!(e, entry, "{bad:?}: {reason}");
                assert!(!reason.is_empty());
            }
            other => panic!("{bad:?}: {other:?}"),
        }
    }
    assert!(matches!(
        EpochIndex::parse_bytes(b"a::0|\xff::1"),
        Err(BlobError::BadIndex { entry: 1, .. })
    ));
    assert_eq!(EpochIndex::parse_bytes(b"a::0").unwrap().len(), 1);
}

#[test]
fn merge_is_a_set_union_in_a_fixed_order() {
    let a = EpochIndex::parse("WEB:www:0|WEB:www:1|CRON::0").unwrap();
    let b = EpochIndex::parse("WEB:www:c2.0|WEB:www:1|LB:edge:0").unwrap();
    let ab = a.union(&b);
    let ba = b.union(&a);
    assert_eq!(ab, ba);
    assert_eq!(
        ab.to_string(),
        "CRON::0|LB:edge:0|WEB:www:0|WEB:www:1|WEB:www:c2.0"
    );
    assert_eq!(ab.union(&ab), ab, "idempotent");
    assert_eq!(ab.union(&a), ab);
    for e in a.iter().chain(b.iter()) {
        assert!(ab.contains(e), "{e} lost");
    }
    // Order independent of input order and duplicates.
    let shuffled =
        EpochIndex::parse("WEB:www:c2.0|CRON::0|WEB:www:1|LB:edge:0|WEB:www:0|CRON::0").unwrap();
    assert_eq!(shuffled, ab);
    // Numeric, not lexicographic, chunk order.
    assert_eq!(
        EpochIndex::parse("T::10|T::9|T::c.10|T::c.9")
            .unwrap()
            .to_string(),
        "T::9|T::10|T::c.9|T::c.10"
    );
}

/// Several collectors writing the same (epoch, dc, type, subtype), late chunks included: every
/// chunk gets its own key and the merged metadata lists them all, in any merge order.
#[test]
fn several_collectors_never_collide() {
    let collectors = ["ams4-a", "ams4-b", "ams4-c"];
    let mut per_collector = Vec::new();
    let mut all_keys = std::collections::HashSet::new();
    for (ci, c) in collectors.iter().enumerate() {
        let mut idx = EpochIndex::new();
        // Each flushes twice (an on-time flush of 2 chunks, then late events: 1 chunk).
        for chunks in [2u32, 1] {
            let first = idx.next_chunk("WEB", "www", Some(c)).unwrap();
            for i in 0..chunks {
                let key = EventKey::new(
                    1_700_000_000,
                    "ams4",
                    "WEB",
                    "www",
                    first.offset(i).unwrap(),
                )
                .unwrap();
                assert!(all_keys.insert(key.to_string()), "{key} written twice");
                idx.insert_key(&key);
            }
        }
        if ci == 0 {
            // An old-style sole writer's plain chunks in the same epoch.
            idx.merge(&EpochIndex::parse("WEB:www:0|WEB:www:1").unwrap());
        }
        per_collector.push(idx);
    }
    let forward = per_collector
        .iter()
        .fold(EpochIndex::new(), |acc, i| acc.union(i));
    let backward = per_collector
        .iter()
        .rev()
        .fold(EpochIndex::new(), |acc, i| acc.union(i));
    assert_eq!(forward, backward);
    assert_eq!(forward.len(), 3 * 3 + 2);
    assert_eq!(
        forward.next_chunk("WEB", "www", None).unwrap(),
        ChunkId::plain(2)
    );
    assert_eq!(
        forward
            .next_chunk("WEB", "www", Some("ams4-b"))
            .unwrap()
            .to_string(),
        "ams4-b.3"
    );
    assert_eq!(
        forward
            .next_chunk("LB", "", Some("ams4-b"))
            .unwrap()
            .to_string(),
        "ams4-b.0"
    );
    let text = forward.to_string();
    assert_eq!(
        text,
        "WEB:www:0|WEB:www:1|WEB:www:ams4-a.0|WEB:www:ams4-a.1|WEB:www:ams4-a.2|WEB:www:ams4-b.0|WEB:www:ams4-b.1|WEB:www:ams4-b.2|WEB:www:ams4-c.0|WEB:www:ams4-c.1|WEB:www:ams4-c.2"
    );
    assert_eq!(EpochIndex::parse(&text).unwrap(), forward);
}

/// Property-style: generated components round-trip when valid and are refused (never panic)
/// when not.
#[test]
fn generated_keys_round_trip_or_are_refused() {
    let alphabet: Vec<char> = "aZ09_-.: |\n\t\u{0}é東/\\%".chars().collect();
    let mut x: u64 = 12345;
    let mut next = move |n: usize| {
        x = x
            .wrapping_mul(6364136223846793005)
            .wrapping_add(1442695040888963407);
        ((x >> 33) as usize) % n
    };
    let mut accepted = 0;
    for _ in 0..20_000 {
        let len = next(8);
        let s: String = (0..len).map(|_| alphabet[next(alphabet.len())]).collect();
        let valid_component =
            !s.is_empty() && !s.contains([':', '|']) && !s.chars().any(char::is_control);
        let key = format!("1700000000:{s}:WEB:{s}:{}", next(5));
        match EventKey::parse(&key) {
            Ok(k) => {
                assert!(valid_component, "{key:?} accepted");
                assert_eq!(k.to_string(), key);
                assert_eq!(k.dc(), s);
                accepted += 1;
            }
            Err(e) => {
                assert!(!valid_component, "{key:?} refused: {e}");
            }
        }
        // Arbitrary strings in every position: never a panic, always round-trip when accepted.
        for text in [
            s.clone(),
            format!("{s}:{s}:0"),
            format!("1-{s}"),
            format!("{s}.{}", next(3)),
        ] {
            if let Ok(k) = EventKey::parse(&text) {
                assert_eq!(k.to_string(), text);
            }
            if let Ok(k) = EpochKey::parse(&text) {
                assert_eq!(k.to_string(), text);
            }
            if let Ok(i) = EpochIndex::parse(&text) {
                // Valid lists re-format to a canonical list that parses to the same set.
                assert_eq!(EpochIndex::parse(&i.to_string()).unwrap(), i);
            }
            if let Ok(c) = ChunkId::parse(&text) {
                assert_eq!(c.to_string(), text);
            }
        }
    }
    assert!(accepted > 1000, "too few valid keys generated: {accepted}");
}
