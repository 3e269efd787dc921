//! Tests of the lazy reader (`sereal::lazy`): everything it extracts must equal what a full
//! decode followed by walking the `Value` gives, for documents from our encoder (all protocols,
//! compressions, dedupe and canonical modes), from the Perl reference (shared refs, aliases,
//! objects, weak refs, protocol 1/2 offsets) and written by hand (PAD, WEAKEN, OBJECTV, COPY of
//! containers, broken back-references). Malformed input must error, never panic or hang.

use std::process::Command;
use std::time::Instant;

use sereal::lazy::{Item, LazyDoc, Path, Scalar, Selector, Step};
use sereal::{Compression, EncoderOptions, Limits, Value};

mod common;

/// The dump tags of the Perl-only constructs the Perl documents must exercise.
const PERL_TAGS: [&str; 9] = [
    "REFP",
    "ALIAS",
    "COPY",
    "OBJECTV",
    "WEAKEN",
    "OBJECT_FREEZE",
    "REGEXP",
    "[tracked]",
    "PAD",
];

// ---------------------------------------------------------------------------------------------
// Helpers
// ---------------------------------------------------------------------------------------------

/// The reference semantics, written independently of the library: look through Shared, Ref and
/// Object; key = first entry with equal bytes; index (negative from the end); `[*]` = array
/// elements or hash values.
fn reference(steps: &[Step], v: &Value, out: &mut Vec<Value>) {
    if steps.is_empty() {
        out.push(v.clone());
        return;
    }
    let mut v = v;
    loop {
        match v {
            Value::Shared(a) => v = a,
            Value::Ref(b) => v = b,
            Value::Object(o) => v = &o.value,
            _ => break,
        }
    }
    match (&steps[0], v) {
        (Step::Key(k), Value::Hash(h)) => {
            if let Some((_, c)) = h.iter().find(|(key, _)| key.as_bytes() == k.as_bytes()) {
                reference(&steps[1..], c, out);
            }
        }
        (Step::Index(i), Value::Array(a)) => {
            let idx = if *i >= 0 { *i } else { a.len() as i64 + *i };
            if idx >= 0 && (idx as usize) < a.len() {
                reference(&steps[1..], &a[idx as usize], out);
            }
        }
        (Step::Wildcard, Value::Array(a)) => a.iter().for_each(|c| reference(&steps[1..], c, out)),
        (Step::Wildcard, Value::Hash(h)) => {
            h.iter().for_each(|(_, c)| reference(&steps[1..], c, out))
        }
        _ => {}
    }
}

fn expect(path: &Path, v: &Value) -> Vec<Value> {
    let mut out = Vec::new();
    reference(path.steps(), v, &mut out);
    // The library's own evaluator over decoded values agrees too.
    let own: Vec<Value> = path.eval(v).into_iter().cloned().collect();
    assert_eq!(
        own, out,
        "Path::eval disagrees with the reference for {path}"
    );
    out
}

fn paths(list: &[&str]) -> Vec<Path> {
    list.iter()
        .map(|p| Path::parse(p).unwrap_or_else(|e| panic!("{p}: {e}")))
        .collect()
}

/// The top-level elements of a decoded body, when it is an array (looking through Shared/Ref).
fn top_array(v: &Value) -> Option<&[Value]> {
    let mut v = v;
    loop {
        match v {
            Value::Shared(a) => v = a,
            Value::Ref(b) => v = b,
            Value::Object(o) => v = &o.value,
            Value::Array(a) => return Some(a),
            _ => return None,
        }
    }
}

/// Check every lazy operation against the full decode, for one item and its decoded value.
fn check_item(label: &str, item: &Item<'_>, full: &Value, paths: &[Path], selector: &mut Selector) {
    assert_eq!(&item.decode().unwrap(), full, "{label}: decode");
    let mut all = Vec::new();
    for p in paths {
        let want = expect(p, full);
        let got = item
            .get(p)
            .unwrap_or_else(|e| panic!("{label}: get {p}: {e}"));
        assert_eq!(got, want, "{label}: get {p}");
        // Handles: decoding each gives the same values, scalar accessors agree with Value's.
        let handles = item
            .select_items(std::slice::from_ref(p))
            .unwrap()
            .pop()
            .unwrap();
        assert_eq!(handles.len(), want.len(), "{label}: select_items {p}");
        for (h, w) in handles.iter().zip(&want) {
            assert_eq!(&h.decode().unwrap(), w, "{label}: handle decode {p}");
            check_scalar(label, h, w);
        }
        all.push(want);
    }
    assert_eq!(item.select(paths).unwrap(), all, "{label}: select");
    let mut out = vec![vec![Value::Undef; 3]; paths.len() + 2]; // stale content must go
    selector.select_into(item, &mut out).unwrap();
    assert_eq!(out, all, "{label}: Selector::select_into");
    // Navigation by handle.
    let mut v = full;
    loop {
        match v {
            Value::Shared(a) => v = a,
            Value::Ref(b) => v = b,
            Value::Object(o) => v = &o.value,
            _ => break,
        }
    }
    match v {
        Value::Hash(h) => {
            let entries: Vec<_> = item
                .entries()
                .unwrap()
                .unwrap()
                .map(|e| e.unwrap())
                .collect();
            assert_eq!(entries.len(), h.len(), "{label}: entries");
            for ((k, vi), (hk, hv)) in entries.iter().zip(h) {
                assert_eq!(*k, hk.as_bytes());
                assert_eq!(&vi.decode().unwrap(), hv);
            }
            for (hk, hv) in h {
                let Some(ks) = hk.as_str() else { continue };
                // First entry with this key (the reference semantics).
                let first = &h
                    .iter()
                    .find(|(k2, _)| k2.as_bytes() == hk.as_bytes())
                    .unwrap()
                    .1;
                let f = item
                    .field(ks)
                    .unwrap()
                    .unwrap_or_else(|| panic!("{label}: field {ks}"));
                assert_eq!(&f.decode().unwrap(), first);
                let _ = hv;
            }
            assert!(item.field("no such key, surely").unwrap().is_none());
            assert!(item.element(0).unwrap().is_none());
        }
        Value::Array(a) => {
            let elems: Vec<_> = item
                .elements()
                .unwrap()
                .unwrap()
                .map(|e| e.unwrap())
                .collect();
            assert_eq!(elems.len(), a.len(), "{label}: elements");
            for (i, (e, w)) in elems.iter().zip(a).enumerate() {
                assert_eq!(&e.decode().unwrap(), w);
                assert_eq!(
                    item.element(i as i64).unwrap().unwrap().decode().unwrap(),
                    *w
                );
                assert_eq!(
                    item.element(i as i64 - a.len() as i64)
                        .unwrap()
                        .unwrap()
                        .decode()
                        .unwrap(),
                    *w
                );
            }
            assert!(item.element(a.len() as i64).unwrap().is_none());
            assert!(item.field("x").unwrap().is_none());
        }
        _ => {
            assert!(item.entries().unwrap().is_none());
            assert!(item.elements().unwrap().is_none());
        }
    }
}

/// Item's scalar accessors against Value's (both look through Shared/ALIAS/COPY, not Ref).
fn check_scalar(label: &str, h: &Item<'_>, v: &Value) {
    assert_eq!(h.as_str().unwrap(), v.as_str(), "{label}: as_str");
    assert_eq!(h.as_i64().unwrap(), v.as_i64(), "{label}: as_i64");
    let (a, b) = (h.as_f64().unwrap(), v.as_f64());
    assert!(
        a == b || (a.is_some_and(f64::is_nan) && b.is_some_and(f64::is_nan)),
        "{label}: as_f64"
    );
    let vb = match v.resolve() {
        Value::Bool(b) => Some(*b),
        _ => None,
    };
    assert_eq!(h.as_bool().unwrap(), vb, "{label}: as_bool");
    match (h.scalar().unwrap(), v.resolve()) {
        (Some(Scalar::Str { bytes, utf8 }), Value::String(s)) => {
            assert!(utf8);
            assert_eq!(bytes, s.as_bytes());
            assert!(h.str_eq(s).unwrap());
        }
        (Some(Scalar::Str { bytes, .. }), Value::Binary(b)) => assert_eq!(bytes, &b[..]),
        (Some(Scalar::Undef), Value::Undef) => {}
        (Some(Scalar::Int(i)), Value::Int(j)) => assert_eq!(i, *j),
        (Some(Scalar::UInt(i)), Value::UInt(j)) => assert_eq!(i, *j),
        (Some(Scalar::Float(_)), Value::Float(_)) | (Some(Scalar::Bool(_)), Value::Bool(_)) => {}
        (
            None,
            Value::Array(_) | Value::Hash(_) | Value::Ref(_) | Value::Object(_) | Value::Regexp(_),
        ) => {}
        (s, v) => panic!("{label}: scalar {s:?} vs {v:?}"),
    }
}

/// Check a whole document: root, and each top-level element if the body is an array.
fn check_doc(label: &str, doc: &[u8], paths: &[Path]) -> usize {
    let full = sereal::from_slice(doc).unwrap_or_else(|e| panic!("{label}: full decode: {e}"));
    let mut scratch = vec![0xAA; 7]; // stale content must not matter
    let lazy = LazyDoc::open(doc, &Limits::default(), &mut scratch).unwrap();
    let mut selector = Selector::new(paths.to_vec());
    let root = lazy.root().unwrap();
    assert_eq!(root.end(), lazy.body().len(), "{label}: root span");
    assert_eq!(root.as_bytes(), lazy.body());
    check_item(&format!("{label} root"), &root, &full, paths, &mut selector);
    let Some(elems) = top_array(&full) else {
        assert!(lazy.items().is_err(), "{label}: items() on a non-array");
        return 0;
    };
    let items = lazy.items().unwrap();
    assert_eq!(items.remaining(), elems.len());
    let mut n = 0;
    for (i, (item, want)) in items.zip(elems).enumerate() {
        let item = item.unwrap();
        check_item(
            &format!("{label} item {i}"),
            &item,
            want,
            paths,
            &mut selector,
        );
        n += 1;
    }
    assert_eq!(n, elems.len());
    check_fused(label, &lazy, paths);
    n
}

/// Paths made only of key steps (the ones `Selector::next_selected` plans as a key tree).
fn key_only(paths: &[Path]) -> Vec<Path> {
    paths
        .iter()
        .filter(|p| p.steps().iter().all(|s| matches!(s, Step::Key(_))))
        .cloned()
        .collect()
}

/// `Selector::next_selected` (one pass per element) agrees with `Items::next` followed by
/// `select_items`, for `paths` (the general walk if any has an index or wildcard) and for their
/// key-only subset (the key plan), also with duplicate and prefix paths.
fn check_fused(label: &str, lazy: &LazyDoc<'_>, paths: &[Path]) {
    let keys = key_only(paths);
    let mut dup = keys.clone();
    dup.extend(keys.iter().take(2).cloned());
    for ps in [paths.to_vec(), keys, dup] {
        if ps.is_empty() {
            continue;
        }
        let mut sel = Selector::new(ps.clone());
        let mut fused = lazy.items().unwrap();
        let mut handles = vec![Vec::new(); 9]; // stale content must go
        for (i, item) in lazy.items().unwrap().enumerate() {
            let item = item.unwrap();
            let got = sel
                .next_selected(&mut fused, &mut handles)
                .unwrap()
                .unwrap();
            assert_eq!(
                (got.start(), got.end()),
                (item.start(), item.end()),
                "{label} item {i}: span"
            );
            let want = item.select_items(&ps).unwrap();
            assert_eq!(handles.len(), want.len(), "{label} item {i}");
            let mut dec = lazy.item_decoder();
            for (p, (g, w)) in ps.iter().zip(handles.iter().zip(&want)) {
                assert_eq!(g.len(), w.len(), "{label} item {i}: {p}");
                for (a, b) in g.iter().zip(w) {
                    assert_eq!(
                        (a.start(), a.end()),
                        (b.start(), b.end()),
                        "{label} item {i}: {p}"
                    );
                    assert_eq!(
                        dec.decode(a).unwrap(),
                        b.decode().unwrap(),
                        "{label} item {i}: {p}"
                    );
                }
            }
        }
        assert_eq!(fused.remaining(), 0);
        assert!(sel.next_selected(&mut fused, &mut handles).is_none());
    }
}

fn raw_doc(body: &[u8]) -> Vec<u8> {
    let mut d = b"=\xF3rl\x05\x00".to_vec();
    d.extend_from_slice(body);
    d
}

fn unhex(s: &str) -> Vec<u8> {
    (0..s.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&s[i..i + 2], 16).unwrap())
        .collect()
}

/// Every lazy operation on a (possibly broken) document; must not panic. Returns whether
/// anything errored.
fn exercise(doc: &[u8], paths: &[Path]) -> bool {
    let mut scratch = Vec::new();
    let lazy = match LazyDoc::open(doc, &Limits::default(), &mut scratch) {
        Ok(l) => l,
        Err(_) => return true,
    };
    let mut failed = false;
    match lazy.root() {
        Ok(root) => {
            failed |= root.decode().is_err();
            failed |= root.select(paths).is_err();
        }
        Err(_) => failed = true,
    }
    match lazy.items() {
        Ok(items) => {
            for item in items {
                match item {
                    Ok(item) => {
                        let _ = item.decode();
                        let _ = item.select(paths);
                        let _ = item.select_items(paths);
                        let _ = item.field("type");
                        let _ = item.element(-1);
                        let _ = item.scalar();
                        if let Ok(Some(entries)) = item.entries() {
                            for (_, v) in entries.flatten() {
                                let _ = v.as_str();
                                let _ = v.get(&paths[0]);
                            }
                        }
                    }
                    Err(_) => failed = true,
                }
            }
        }
        Err(_) => failed = true,
    }
    // The fused pass, with the general walk and with the key plan.
    for ps in [paths.to_vec(), key_only(paths)] {
        if ps.is_empty() {
            continue;
        }
        let mut sel = Selector::new(ps);
        let mut handles = Vec::new();
        if let Ok(mut items) = lazy.items() {
            while let Some(item) = sel.next_selected(&mut items, &mut handles) {
                match item {
                    Ok(_) => {
                        let mut dec = lazy.item_decoder();
                        for h in handles.iter().flatten() {
                            let _ = dec.decode(h);
                        }
                    }
                    Err(_) => failed = true,
                }
            }
        }
    }
    failed
}

// ---------------------------------------------------------------------------------------------
// A deterministic corpus of events as JSON
// ---------------------------------------------------------------------------------------------

struct Rng(u64);
impl Rng {
    fn next(&mut self) -> u64 {
        self.0 = self.0.wrapping_add(0x9E37_79B9_7F4A_7C15);
        let mut z = self.0;
        z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
        z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
        z ^ (z >> 31)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
}

fn event_json(i: usize, rng: &mut Rng) -> serde_json::Value {
    use serde_json::json;
    let hosts = [
        "web-01.dc1.example.com",
        "web-02.dc1.example.com",
        "api.example.com",
    ];
    let paths = [
        "/",
        "/search/hotels/in/amsterdam/with/a/long/path",
        "/checkout",
        "/api/v1/things/long/enough",
    ];
    let mut m = serde_json::Map::new();
    m.insert("type".into(), json!(["WEB", "CRON", "LB"][i % 3]));
    m.insert("id".into(), json!(i));
    m.insert(
        "request_id".into(),
        json!(format!("req-{:016x}", rng.next())),
    );
    m.insert("host".into(), json!(hosts[rng.below(3) as usize]));
    if i % 5 >= 1 {
        m.insert(
            "http".into(),
            json!({"status": ([200, 200, 404, 500, 301][rng.below(5) as usize]),
                   "method": if rng.below(4) == 0 { "POST" } else { "GET" },
                   "path": paths[rng.below(4) as usize]}),
        );
    }
    m.insert(
        "timings".into(),
        json!({"total_ms": (rng.below(100000) as f64) / 7.0, "db_ms": rng.below(3000), "queue_ms": -(rng.below(100) as i64), "half": 0.5}),
    );
    let n_exp = rng.below(4) as usize;
    let exps: Vec<_> = (0..n_exp)
        .map(|k| json!({"id": format!("exp_{}", (i + k) % 7), "variant": (["A", "B", "control"][k % 3])}))
        .collect();
    m.insert("experiments".into(), json!(exps));
    let n_tags = [0, 1, 3, 15, 16, 20][rng.below(6) as usize];
    let tags: Vec<_> = (0..n_tags)
        .map(|k| json!(format!("tag{}", (k * 7 + i) % 11)))
        .collect();
    m.insert("tags".into(), json!(tags));
    m.insert(
        "user.agent".into(),
        json!({"major": rng.below(120), "minor": rng.below(10), "name": "Firefox"}),
    );
    m.insert("ключ".into(), json!("значение"));
    m.insert(
        "flags".into(),
        json!({"ok": rng.below(2) == 0, "cached": false, "beta": null}),
    );
    if i % 4 == 1 {
        let big: serde_json::Map<String, serde_json::Value> = (0..20)
            .map(|k| (format!("k{k}"), json!(k * 1000 + i)))
            .collect();
        m.insert("bighash".into(), serde_json::Value::Object(big));
        m.insert(
            "big".into(),
            json!((0..18).map(|k| k as i64 - 9).collect::<Vec<_>>()),
        );
    }
    m.insert(
        "nested".into(),
        json!({"a": {"b": {"c": {"d": i, "e": [[1, 2], [3, [4, 5]]]}}}}),
    );
    m.insert("large".into(), json!(18446744073709551615u64));
    m.insert("neg".into(), json!(-1234567));
    m.insert("small".into(), json!(-5));
    m.insert("f".into(), json!(0.1));
    m.insert("empty_a".into(), json!([]));
    m.insert("empty_h".into(), json!({}));
    m.insert(
        "text".into(),
        json!("a string that is certainly longer than thirty-two bytes"),
    );
    m.insert("with.dot".into(), json!(i % 2 < 1));
    for k in 0..(i % 9) {
        m.insert(format!("pad_{k:02}"), json!(format!("padding value {k}")));
    }
    serde_json::Value::Object(m)
}

fn events_value(n: usize, seed: u64) -> Value {
    let mut rng = Rng(seed);
    let events: Vec<_> = (0..n).map(|i| event_json(i, &mut rng)).collect();
    let text = serde_json::to_vec(&serde_json::Value::Array(events)).unwrap();
    sereal::json::from_json_slice(&text).unwrap()
}

const EVENT_PATHS: &[&str] = &[
    "type",
    "id",
    "http.status",
    "http.method",
    "http.path",
    "http",
    "http[*]",
    "timings.total_ms",
    "timings.db_ms",
    "timings.queue_ms",
    "timings.half",
    "experiments[*].id",
    "experiments[0].id",
    "experiments[-1].variant",
    "experiments[*]",
    "experiments[1]",
    "tags[*]",
    "tags[0]",
    "tags[-1]",
    "tags[15]",
    "tags[-16]",
    "tags[99]",
    "tags[-99]",
    "\"user.agent\".major",
    "['user.agent'].minor",
    "[\"user.agent\"]",
    "user.agent",
    "ключ",
    "flags.ok",
    "flags.beta",
    "flags[*]",
    "bighash.k17",
    "bighash.k0",
    "bighash[*]",
    "big[15]",
    "big[-1]",
    "big[*]",
    "nested.a.b.c.d",
    "nested.a.b.c.e[1][1][0]",
    "nested.a.b.c.e[*][*]",
    "nested[*][*][*]",
    "large",
    "neg",
    "small",
    "f",
    "empty_a[*]",
    "empty_a[0]",
    "empty_h.x",
    "empty_h[*]",
    "text",
    "'with.dot'",
    "pad_03",
    "missing",
    "missing.deeper[0]",
    "type.x",
    "type[0]",
    "tags.x",
    "[*]",
    "[0]",
    "[-1].id",
    "[3].type",
    "[*].type",
    "id",
];

fn encoder_matrix() -> Vec<(String, EncoderOptions)> {
    let mut out = Vec::new();
    for protocol in [3u8, 4, 5] {
        for compression in [
            Compression::None,
            Compression::Snappy,
            Compression::Zlib { level: 6 },
            Compression::Zstd { level: 3 },
        ] {
            for dedupe_strings in [false, true] {
                for canonical in [false, true] {
                    let opts = EncoderOptions {
                        protocol,
                        compression,
                        compress_threshold: 0,
                        dedupe_strings,
                        canonical,
                        ..Default::default()
                    };
                    out.push((format!("p{protocol} {compression:?} dedupe={dedupe_strings} canonical={canonical}"), opts));
                }
            }
        }
    }
    out
}

// ---------------------------------------------------------------------------------------------
// Documents from our encoder
// ---------------------------------------------------------------------------------------------

#[test]
fn encoder_documents_match_full_decode() {
    let paths = paths(EVENT_PATHS);
    let mut docs = 0;
    for (n, seed) in [(5usize, 1u64), (40, 2)] {
        let value = events_value(n, seed);
        for (label, opts) in encoder_matrix() {
            let Ok(doc) = sereal::to_vec(&value, &opts) else {
                continue;
            };
            let items = check_doc(&format!("{n} events, {label}"), &doc, &paths);
            assert_eq!(items, n);
            docs += 1;
        }
    }
    assert!(docs >= 60, "only {docs} encoder configurations worked");
}

#[test]
fn dedupe_produces_copy_and_it_is_followed() {
    let value = events_value(10, 7);
    let opts = EncoderOptions {
        dedupe_strings: true,
        ..Default::default()
    };
    let doc = sereal::to_vec(&value, &opts).unwrap();
    let dump = sereal::dump::dump(&doc, &Limits::default()).unwrap();
    assert!(dump.contains("COPY"), "expected COPY tags in the document");
    // Values that are COPYs: the host and the long path string recur.
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let p = Path::parse("text").unwrap();
    let mut copies = 0;
    for item in lazy.items().unwrap() {
        let item = item.unwrap();
        let h = item
            .select_items(std::slice::from_ref(&p))
            .unwrap()
            .pop()
            .unwrap();
        if h[0].tag() == sereal::tag::COPY {
            copies += 1;
        }
        assert!(h[0]
            .str_eq("a string that is certainly longer than thirty-two bytes")
            .unwrap());
        assert_eq!(
            item.get(&p).unwrap()[0].as_str(),
            Some("a string that is certainly longer than thirty-two bytes")
        );
    }
    assert_eq!(copies, 9);
}

#[test]
fn non_array_and_scalar_roots() {
    let paths = paths(&["a", "a.b", "[*]", "[0]", "x[*]", "'a.b'"]);
    for json in [
        &br#"{"a":{"b":1},"x":[1,2,{"y":3}],"a.b":"dotted"}"#[..],
        br#"42"#,
        br#""just a string""#,
        br#"null"#,
        br#"[]"#,
        br#"[[1,2],[3]]"#,
        br#"{"a":[{"b":1},{"b":2}]}"#,
    ] {
        let value = sereal::json::from_json_slice(json).unwrap();
        for (label, opts) in encoder_matrix() {
            let Ok(doc) = sereal::to_vec(&value, &opts) else {
                continue;
            };
            check_doc(
                &format!("{} {label}", String::from_utf8_lossy(json)),
                &doc,
                &paths,
            );
        }
    }
    let doc = sereal::to_vec(
        &sereal::json::from_json_slice(b"{\"a\":1}").unwrap(),
        &Default::default(),
    )
    .unwrap();
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let err = lazy.items().unwrap_err();
    assert!(err.to_string().contains("not an array"), "{err}");
}

// ---------------------------------------------------------------------------------------------
// Documents from the Perl reference
// ---------------------------------------------------------------------------------------------

const PERL_SCRIPT: &str = r#"
use strict; use warnings;
use Sereal::Encoder qw(SRL_ZLIB SRL_ZSTD SRL_SNAPPY); use Scalar::Util qw(weaken);
package My::Frozen; sub FREEZE { my ($self, $s) = @_; return ($self->{v}, [1, 2]) } sub THAW { }
package main;
sub data {
  my $shared = { name => "shared-hash", n => 7 };
  my $arr = [1, 2, 3];
  my $str = "a string that is long enough";
  my $x = 42; my $y = "scalar";
  my $obj = bless { id => 5, tags => ["x", "y"] }, "My::Class";
  my $obj2 = bless { id => 6, tags => [] }, "My::Class";
  my $aobj = bless [10, 20, { deep => "yes" }], "My::Array";
  my $frozen = bless { v => "frozen value" }, "My::Frozen";
  my @events = (
    { a => $shared, b => $shared, c => $arr, d => [$arr, $arr], s => \$x, t => \$x, o => $obj, p => $obj2,
      q => [$obj, $obj2, $obj], rr => \\"deep", rrr => \\\$y, ao => $aobj, fz => $frozen },
    { a => $shared, u => $str, v => $str, w => "$str", o => $obj, ao => $aobj, k => "short", l => "short",
      "user.agent" => { major => 5 }, re => qr/ab+c/i },
    { fz => $frozen, list => [$str, $str, $y, $y, \$y], neg => -3, big => 2**40, f => 1.5, un => undef },
  );
  my $w = { k => 1, name => "weak target" };
  my $holder = { strong => $w, weak => $w }; weaken($holder->{weak});
  # A weak ref whose target only lives outside the data: the encoder writes PAD, not WEAKEN.
  my $outside = { k => 3, name => "held outside" }; push our @keep, $outside;
  $holder->{lonely} = $outside; weaken($holder->{lonely});
  push @events, $holder;
  my $cyc = { name => "cyc" }; $cyc->{self} = $cyc; weaken($cyc->{self});
  return (\@events, $cyc);
}
my @opts = (
  ["plain", {}],
  ["dedupe", {dedupe_strings => 1}],
  ["aliased", {aliased_dedupe_strings => 1}],
  ["freeze", {freeze_callbacks => 1, dedupe_strings => 1}],
  ["p1", {protocol_version => 1, dedupe_strings => 1}],
  ["p2", {protocol_version => 2, aliased_dedupe_strings => 1}],
  ["p3", {protocol_version => 3, dedupe_strings => 1}],
  ["zlib", {compress => SRL_ZLIB, compress_threshold => 0, dedupe_strings => 1}],
  ["zstd", {compress => SRL_ZSTD, compress_threshold => 0, aliased_dedupe_strings => 1}],
  ["snappy", {compress => SRL_SNAPPY, compress_threshold => 0}],
  ["canonical", {canonical => 1, dedupe_strings => 1}],
);
for my $o (@opts) {
  my ($events, $cyc) = data();
  my $e = Sereal::Encoder->new($o->[1]);
  print "$o->[0] ", unpack("H*", $e->encode($events)), "\n";
  print "cyc-$o->[0] ", unpack("H*", $e->encode($cyc)), "\n";
}
"#;

fn perl_docs() -> Vec<(String, Vec<u8>)> {
    let out = Command::new("perl")
        .arg("-e")
        .arg(PERL_SCRIPT)
        .output()
        .expect("these tests need perl with Sereal::Encoder installed");
    assert!(
        out.status.success(),
        "perl failed: {}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout)
        .unwrap()
        .lines()
        .map(|l| {
            let (label, hex) = l.split_once(' ').unwrap();
            (label.to_owned(), unhex(hex))
        })
        .collect()
}

const PERL_PATHS: &[&str] = &[
    "a",
    "a.name",
    "b.n",
    "b",
    "c[*]",
    "c",
    "d[*][1]",
    "d[1]",
    "d[*]",
    "s",
    "t",
    "o",
    "o.id",
    "o.tags[*]",
    "o.tags[-1]",
    "p.tags",
    "p.id",
    "q[*].id",
    "q[1].tags",
    "q[2]",
    "rr",
    "rrr",
    "rr.x",
    "ao[2].deep",
    "ao[*]",
    "ao[0]",
    "fz",
    "fz[*]",
    "fz[0]",
    "fz[1][1]",
    "u",
    "v",
    "w",
    "k",
    "l",
    "'user.agent'.major",
    "re",
    "list[*]",
    "list[4]",
    "list[1]",
    "neg",
    "big",
    "f",
    "un",
    "strong.k",
    "weak.k",
    "weak",
    "strong",
    "weak.name",
    "lonely",
    "lonely.name",
    "[*]",
    "[*][*]",
    "missing",
];

#[test]
fn perl_documents_match_full_decode() {
    let paths = paths(PERL_PATHS);
    let docs = perl_docs();
    assert!(docs.len() >= 20);
    let mut seen = Vec::new();
    for (label, doc) in &docs {
        if label.starts_with("cyc-") {
            continue;
        }
        let dump = sereal::dump::dump(doc, &Limits::default()).unwrap();
        for tag in PERL_TAGS {
            if dump.contains(tag) && !seen.contains(&tag) {
                seen.push(tag);
            }
        }
        assert_eq!(check_doc(&format!("perl {label}"), doc, &paths), 4);
    }
    for tag in PERL_TAGS {
        assert!(seen.contains(&tag), "no Perl document exercised {tag}");
    }
}

#[test]
fn perl_cyclic_structure() {
    // $cyc = { name => "cyc", self => weakened ref to $cyc }: the full decoder refuses the cycle,
    // the lazy reader can still walk through it and extract acyclic parts.
    for (label, doc) in perl_docs() {
        let Some(label) = label.strip_prefix("cyc-") else {
            continue;
        };
        assert!(
            sereal::from_slice(&doc).is_err(),
            "{label}: full decoder accepted a cycle"
        );
        let mut scratch = Vec::new();
        let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
        let root = lazy.root().unwrap();
        let get = |p: &str| root.get(&Path::parse(p).unwrap());
        assert_eq!(
            get("name").unwrap(),
            vec![Value::Binary(b"cyc".to_vec())],
            "{label}"
        );
        assert_eq!(
            get("self.self.self.name").unwrap(),
            vec![Value::Binary(b"cyc".to_vec())],
            "{label}"
        );
        assert!(
            get("self").is_err(),
            "{label}: materialising the cycle must fail"
        );
        assert!(root.decode().is_err(), "{label}");
        let r = get("self.self.name").unwrap();
        assert_eq!(r.len(), 1);
        assert!(root.field("self").unwrap().is_some());
    }
}

// ---------------------------------------------------------------------------------------------
// Hand-written documents
// ---------------------------------------------------------------------------------------------

#[test]
fn hand_written_pad_weaken_refp_alias_objectv_copy() {
    let any = paths(&[
        "k", "id", "x", "[*]", "[0]", "[-1]", "k[*]", "a.k", "r.x", "r",
    ]);
    let bodies: Vec<(&str, Vec<u8>)> = vec![
        // [ {k=>5}, {k=>7} ] with PADs everywhere a value may start, and a tracked PAD.
        (
            "pad",
            vec![
                0x3f, 0x3f, 0x42, 0x3f, 0x51, 0x61, b'k', 0x3f, 0x3f, 0x05, 0x51, 0x61, b'k', 0xbf,
                0x07,
            ],
        ),
        // [ REFN tracked-HASH {k=>1}, WEAKEN REFP -> that hash ]
        (
            "weaken-refp",
            vec![0x42, 0x28, 0xaa, 0x01, 0x61, b'k', 0x01, 0x30, 0x29, 0x03],
        ),
        // [ tracked "abc", ALIAS, ALIAS ]
        (
            "alias",
            vec![0x43, 0xe3, b'a', b'b', b'c', 0x2e, 0x02, 0x2e, 0x02],
        ),
        // [ OBJECT "Foo" {id=>1}, OBJECTV ->"Foo" {COPY->"id" => 2} ]
        (
            "objectv",
            vec![
                0x42, 0x2c, 0x63, b'F', b'o', b'o', 0x51, 0x62, b'i', b'd', 0x01, 0x2d, 0x03, 0x51,
                0x2f, 0x08, 0x02,
            ],
        ),
        // [ REFN REFN REFN {x=>9} ]
        (
            "refn-chain",
            vec![0x41, 0x28, 0x28, 0x28, 0x51, 0x61, b'x', 0x09],
        ),
        // [ {k=>1}, COPY of that hash ]
        (
            "copy-container",
            vec![0x42, 0x51, 0x61, b'k', 0x01, 0x2f, 0x02],
        ),
        // { a => tracked {k=>[1,2]}, b => REFP a, c => ALIAS a } as a hash root
        (
            "refp-in-hash",
            vec![
                0x53, 0x61, b'a', 0x28, 0xaa, 0x01, 0x61, b'k', 0x42, 0x01, 0x02, 0x61, b'b', 0x29,
                0x05, 0x61, b'c', 0x2e, 0x05,
            ],
        ),
        // [ tracked 42, REFP -> 42 (a scalar ref), tracked DOUBLE ]
        (
            "refp-scalar",
            vec![
                0x43, 0xa0, 0x2a, 0x29, 0x02, 0xa3, 0, 0, 0, 0, 0, 0, 0xf8, 0x3f,
            ],
        ),
        // [ REFN ARRAY 2 (PAD-prefixed element) , regexp ]
        (
            "regexp",
            vec![
                0x42, 0x28, 0x2b, 0x02, 0x3f, 0x01, 0x02, 0x31, 0x63, b'a', b'+', b'b', 0x61, b'i',
            ],
        ),
        // [ {k=>1, k=>2 (COPY key)}, {a=>{k=>3}, k=>4, a=>5} ]: duplicate keys, the first wins
        (
            "duplicate-keys",
            vec![
                0x42, 0x52, 0x61, b'k', 0x01, 0x2f, 0x03, 0x02, 0x53, 0x61, b'a', 0x51, 0x2f, 0x03,
                0x03, 0x2f, 0x03, 0x04, 0x2f, 0x0a, 0x05,
            ],
        ),
        // [ "abcd", REFN tracked-HASH {x => COPY "abcd"}, {r => REFP that hash}, COPY of {r => …} ]:
        // a COPY expansion may reach, through a REFP, an item that itself uses COPY.
        (
            "copy-then-refp",
            vec![
                0x44, 0x64, b'a', b'b', b'c', b'd', 0x28, 0xaa, 0x01, 0x61, b'x', 0x2f, 0x02, 0x51,
                0x61, b'r', 0x29, 0x08, 0x2f, 0x0e,
            ],
        ),
        // [ HASH (bare, count 1) with a STR_UTF8 key, LONG_DOUBLE 1.0 ]
        (
            "utf8-key",
            vec![
                0x42, 0x28, 0x2a, 0x01, 0x27, 0x02, 0xc3, 0xa9, 0x05, 0x24, 0, 0, 0, 0, 0, 0, 0,
                0x80, 0xff, 0x3f, 0, 0, 0, 0, 0, 0,
            ],
        ),
    ];
    for (label, body) in &bodies {
        let doc = raw_doc(body);
        check_doc(label, &doc, &any);
    }
    // Spot checks with explicit expected values.
    let doc = raw_doc(&bodies[0].1);
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let items: Vec<_> = lazy.items().unwrap().map(Result::unwrap).collect();
    let k = Path::parse("k").unwrap();
    assert_eq!(items[0].get(&k).unwrap(), vec![Value::Int(5)]);
    assert_eq!(items[1].get(&k).unwrap()[0].as_i64(), Some(7));

    let doc = raw_doc(
        &bodies
            .iter()
            .find(|(l, _)| *l == "duplicate-keys")
            .unwrap()
            .1,
    );
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let items: Vec<_> = lazy.items().unwrap().map(Result::unwrap).collect();
    assert_eq!(items[0].get(&k).unwrap(), vec![Value::Int(1)]);
    assert_eq!(
        items[0].get(&Path::parse("[*]").unwrap()).unwrap(),
        vec![Value::Int(1), Value::Int(2)]
    );
    let got = items[1].select(&paths(&["a.k", "a", "k", "a[*]"])).unwrap();
    assert_eq!(got[0], vec![Value::Int(3)]);
    assert_eq!(got[2], vec![Value::Int(4)]);
    assert_eq!(got[3], vec![Value::Int(3)]);

    let doc = raw_doc(&bodies[3].1);
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let items: Vec<_> = lazy.items().unwrap().map(Result::unwrap).collect();
    let id = Path::parse("id").unwrap();
    assert_eq!(items[1].get(&id).unwrap(), vec![Value::Int(2)]);
    match items[1].decode().unwrap() {
        Value::Object(o) => assert_eq!(o.class, "Foo"),
        v => panic!("{v:?}"),
    }
    assert_eq!(
        items[1].field("id").unwrap().unwrap().as_i64().unwrap(),
        Some(2)
    );

    let doc = raw_doc(&bodies[6].1);
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let root = lazy.root().unwrap();
    let got = root
        .select(&paths(&["b.k[1]", "c.k[*]", "a.k[0]"]))
        .unwrap();
    assert_eq!(
        got,
        vec![
            vec![Value::Int(2)],
            vec![Value::Int(1), Value::Int(2)],
            vec![Value::Int(1)]
        ]
    );
    // The value at "b" alone: decoding a REFP in isolation jumps to its target.
    let b = root.field("b").unwrap().unwrap();
    assert_eq!(b.as_bytes(), &[0x29, 0x05]);
    assert_eq!(
        b.decode().unwrap(),
        sereal::from_slice(&doc).unwrap().get("a").unwrap().clone()
    );
}

#[test]
fn protocol_1_offsets() {
    // Protocol 1: offsets count from the start of the document (header included).
    // [ tracked "abc", ALIAS -> it ]; the body starts at 6, so the string is at offset 7.
    let doc = b"=srl\x01\x00\x42\xe3abc\x2e\x07".to_vec();
    let full = sereal::from_slice(&doc).unwrap();
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let items: Vec<_> = lazy.items().unwrap().map(Result::unwrap).collect();
    assert_eq!(items[1].decode().unwrap(), full.as_array().unwrap()[1]);
    assert!(items[1].str_eq("abc").unwrap());
}

#[test]
fn broken_back_references_are_errors() {
    let cases: Vec<(&str, Vec<u8>)> = vec![
        // COPY pointing forward (to the string after it)
        (
            "copy-forward",
            vec![0x42, 0x2f, 0x04, 0x64, b'a', b'b', b'c', b'd'],
        ),
        // COPY pointing at itself
        ("copy-self", vec![0x41, 0x2f, 0x02]),
        // COPY of a COPY
        (
            "copy-of-copy",
            vec![0x43, 0x64, b'a', b'b', b'c', b'd', 0x2f, 0x02, 0x2f, 0x07],
        ),
        // COPY of a container that contains a COPY value
        (
            "copy-of-copy-inside",
            vec![
                0x43, 0x64, b'a', b'b', b'c', b'd', 0x51, 0x61, b'k', 0x2f, 0x02, 0x2f, 0x07,
            ],
        ),
        // REFP to an untracked item
        ("refp-untracked", vec![0x42, 0x01, 0x29, 0x02]),
        // REFP forward
        ("refp-forward", vec![0x42, 0x29, 0x04, 0x81]),
        // ALIAS at itself
        ("alias-self", vec![0x41, 0x2e, 0x02]),
        // ALIAS to offset 0 (before the body)
        ("alias-zero", vec![0x41, 0x2e, 0x00]),
        // key COPY pointing forward
        (
            "key-copy-forward",
            vec![0x41, 0x51, 0x2f, 0x05, 0x01, 0x61, b'k'],
        ),
        // key COPY to a non-string
        ("key-copy-int", vec![0x42, 0x01, 0x51, 0x2f, 0x02, 0x01]),
        // integer as a hash key
        ("int-key", vec![0x41, 0x51, 0x01, 0x01]),
        // OBJECTV pointing forward
        (
            "objectv-forward",
            vec![
                0x41, 0x2d, 0x09, 0x51, 0x61, b'k', 0x01, 0x63, b'F', b'o', b'o',
            ],
        ),
        // OBJECTV to a non-string
        (
            "objectv-int",
            vec![0x42, 0x01, 0x2d, 0x02, 0x51, 0x61, b'k', 0x01],
        ),
        // huge offset
        (
            "refp-huge",
            vec![
                0x41, 0x29, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01,
            ],
        ),
        // invalid tags
        ("reserved-tag", vec![0x41, 0x36]),
        ("many", vec![0x41, 0x3c, 0x01]),
        ("extend", vec![0x41, 0x3e, 0x00]),
    ];
    let all = paths(&["k", "[*]", "[0]"]);
    for (label, body) in &cases {
        let doc = raw_doc(body);
        assert!(
            sereal::from_slice(&doc).is_err(),
            "{label}: full decoder accepted it"
        );
        let mut scratch = Vec::new();
        let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
        let root = lazy.root();
        let errs = match root {
            Err(_) => true,
            Ok(root) => {
                let d = root.decode();
                let s = root.select(&all);
                let mut any_item_err = false;
                for item in lazy.items().unwrap() {
                    match item {
                        Err(_) => any_item_err = true,
                        Ok(item) => {
                            any_item_err |= item.decode().is_err();
                            any_item_err |= item.select(&all).is_err();
                        }
                    }
                }
                d.is_err() && s.is_err() && any_item_err
            }
        };
        assert!(
            errs,
            "{label}: lazy reader accepted a broken back-reference"
        );
    }
    // The error names an offset inside the document.
    let doc = raw_doc(&cases[0].1);
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    let err = item.decode().unwrap_err();
    assert!(err.to_string().contains("does not point back"), "{err}");
    assert_eq!(err.offset(), 7);
    assert!(item.str_bytes().is_err());
}

#[test]
fn depth_is_bounded() {
    // 100k nested REFNs around a hash: skipping is iterative, reading errors at the depth limit.
    let mut body = vec![0x41];
    body.resize(1 + 100_000, 0x28);
    body.extend_from_slice(&[0x51, 0x61, b'x', 0x09]);
    let doc = raw_doc(&body);
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let root = lazy.root().unwrap();
    assert_eq!(root.end(), body.len());
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    let err = item.get(&Path::parse("x").unwrap()).unwrap_err();
    assert!(err.is_limit(), "{err}");
    assert!(item.decode().unwrap_err().is_limit());
    assert!(sereal::from_slice(&doc).unwrap_err().is_limit());
    // A long run of PAD bytes, with and without the track flag, before a value: no recursion.
    let mut body = vec![0x41];
    for i in 0..1_000_000 {
        body.push(if i % 3 == 0 { 0xbf } else { 0x3f });
    }
    body.extend_from_slice(&[0x51, 0x61, b'x', 0x09]);
    let doc = raw_doc(&body);
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    assert_eq!(item.end(), body.len());
    assert_eq!(
        item.get(&Path::parse("x").unwrap()).unwrap(),
        vec![Value::Int(9)]
    );
    assert!(item.decode().is_ok());
    // Deeply nested arrays: same.
    let mut body = vec![0x41];
    body.resize(1 + 1_100, 0x41);
    body.push(0x01);
    let doc = raw_doc(&body);
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    let deep = Path::parse(&"[0]".repeat(1000)).unwrap();
    assert!(item.get(&deep).unwrap_err().is_limit());
    assert_eq!(
        item.get(&Path::parse("[0][0][0][1]").unwrap()).unwrap(),
        Vec::<Value>::new()
    );
    // With a higher limit the deep path resolves (what is left below it is 100 levels deep).
    let limits = Limits {
        max_depth: 2000,
        ..Limits::default()
    };
    let lazy = LazyDoc::open(&doc, &limits, &mut scratch).unwrap();
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    assert_eq!(item.get(&deep).unwrap().len(), 1);
}

#[test]
fn value_limits_apply_to_materialisation() {
    let value = events_value(3, 9);
    let doc = sereal::to_vec(&value, &Default::default()).unwrap();
    let limits = Limits {
        max_values: 10,
        ..Limits::default()
    };
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &limits, &mut scratch).unwrap();
    let item = lazy.items().unwrap().next().unwrap().unwrap();
    assert!(item.decode().unwrap_err().is_limit());
    assert_eq!(item.get(&Path::parse("type").unwrap()).unwrap().len(), 1);
}

#[test]
fn reference_chains_cannot_expand_exponentially() {
    // x0 = [1] tracked; x(n+1) = [REFP xn, REFP xn] tracked, 60 levels: 2^60 paths to x0.
    let body = common::reference_chain_body(60);
    let doc = raw_doc(&body);
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let last = lazy.items().unwrap().last().unwrap().unwrap();
    // Materialising it is charged like the full decoder charges it.
    assert!(last.decode().unwrap_err().is_limit());
    // Walking all paths through the DAG is bounded too, with values or handles, matching or not.
    let stars = "[*]".repeat(60);
    for p in [
        format!("{stars}[0]"),
        format!("{stars}[5]"),
        format!("{stars}.k"),
        stars.clone(),
    ] {
        let p = Path::parse(&p).unwrap();
        assert!(last.get(&p).unwrap_err().is_limit(), "{p}");
        assert!(
            last.select_items(std::slice::from_ref(&p))
                .unwrap_err()
                .is_limit(),
            "{p}"
        );
    }
    // One path down the chain is cheap; so is a handle to a huge value.
    let p = Path::parse(&format!("{}[0]", "[1]".repeat(60))).unwrap();
    assert_eq!(last.get(&p).unwrap(), vec![Value::Int(1)]);
    let p = Path::parse("[1][0][1][0]").unwrap();
    assert_eq!(
        last.select_items(std::slice::from_ref(&p)).unwrap()[0].len(),
        1
    );
    // A small chain agrees with its full decode.
    let small = lazy.items().unwrap().nth(4).unwrap().unwrap();
    let full = small.decode().unwrap();
    let p = Path::parse("[*][*][*][*]").unwrap();
    assert_eq!(small.get(&p).unwrap(), expect(&p, &full));
}

#[test]
fn copy_amplification_is_bounded() {
    // A 64 KiB string copied 500k times: selecting all of them hits the string-bytes limit.
    let body = common::copy_amplification_body();
    let doc = raw_doc(&body);
    let mut scratch = Vec::new();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let root = lazy.root().unwrap();
    assert!(root
        .get(&Path::parse("[*]").unwrap())
        .unwrap_err()
        .is_limit());
    assert!(root.decode().unwrap_err().is_limit());
    // One of them is fine; handles cost nothing.
    assert_eq!(
        root.get(&Path::parse("[-1]").unwrap()).unwrap()[0]
            .as_str()
            .map(str::len),
        Some(65536)
    );
    assert_eq!(lazy.items().unwrap().count(), 500_001);
    let h = root.element(-1).unwrap().unwrap();
    assert_eq!(h.str_bytes().unwrap().map(<[u8]>::len), Some(65536));
}

// ---------------------------------------------------------------------------------------------
// Malformed input
// ---------------------------------------------------------------------------------------------

#[test]
fn every_truncation_errors_and_never_panics() {
    let paths = paths(&["type", "http.status", "tags[*]", "a.name", "q[*].id", "[*]"]);
    let mut docs: Vec<(String, Vec<u8>)> = Vec::new();
    let value = events_value(4, 3);
    for (label, opts) in encoder_matrix()
        .into_iter()
        .filter(|(l, _)| l.starts_with("p5"))
    {
        docs.push((label, sereal::to_vec(&value, &opts).unwrap()));
    }
    for (label, doc) in perl_docs()
        .into_iter()
        .filter(|(l, _)| !l.starts_with("cyc-"))
    {
        docs.push((format!("perl {label}"), doc));
    }
    for (label, doc) in &docs {
        assert!(!exercise(doc, &paths), "{label}: the whole document failed");
        for cut in 0..doc.len() {
            let prefix = &doc[..cut];
            assert!(
                exercise(prefix, &paths),
                "{label}: prefix of {cut} bytes gave no error"
            );
        }
    }
}

#[test]
fn corrupted_bytes_never_panic() {
    let paths = paths(&[
        "type",
        "http.status",
        "tags[*]",
        "a.name",
        "q[*].id",
        "[*]",
        "o.tags[-1]",
    ]);
    let mut docs = vec![sereal::to_vec(
        &events_value(3, 5),
        &EncoderOptions {
            dedupe_strings: true,
            ..Default::default()
        },
    )
    .unwrap()];
    for (label, doc) in perl_docs() {
        if ["plain", "dedupe", "aliased", "freeze", "p1", "cyc-plain"].contains(&label.as_str()) {
            docs.push(doc);
        }
    }
    let mut rng = Rng(12345);
    for doc in &docs {
        for _ in 0..1500 {
            let mut d = doc.clone();
            for _ in 0..1 + rng.below(3) {
                // Keep the header intact so that the body gets exercised.
                let at = 6 + rng.below((d.len() - 6) as u64) as usize;
                d[at] = match rng.below(4) {
                    0 => rng.next() as u8,
                    1 => d[at] ^ 0x80,
                    2 => [0x29, 0x2e, 0x2f, 0x2d, 0x3f, 0x28, 0x2b, 0x2a][rng.below(8) as usize],
                    _ => d[at].wrapping_add(1),
                };
            }
            exercise(&d, &paths);
        }
    }
}

// ---------------------------------------------------------------------------------------------
// Paths
// ---------------------------------------------------------------------------------------------

#[test]
fn path_parsing() {
    let k = |s: &str| Step::Key(s.to_owned());
    let cases: Vec<(&str, Vec<Step>)> = vec![
        ("a", vec![k("a")]),
        ("http.status", vec![k("http"), k("status")]),
        (
            "experiments[*].id",
            vec![k("experiments"), Step::Wildcard, k("id")],
        ),
        ("a[0]", vec![k("a"), Step::Index(0)]),
        ("a[-1]", vec![k("a"), Step::Index(-1)]),
        ("tags[*]", vec![k("tags"), Step::Wildcard]),
        ("\"user.agent\".major", vec![k("user.agent"), k("major")]),
        ("['user.agent']", vec![k("user.agent")]),
        (
            "a[\"b.c\"][0][*]",
            vec![k("a"), k("b.c"), Step::Index(0), Step::Wildcard],
        ),
        ("[0].id", vec![Step::Index(0), k("id")]),
        ("[*]", vec![Step::Wildcard]),
        ("ключ.x", vec![k("ключ"), k("x")]),
        ("a-b_c$d:e/f", vec![k("a-b_c$d:e/f")]),
        ("\"\"", vec![k("")]),
        ("'it\\'s'.\"q\\\"\\\\\"", vec![k("it's"), k("q\"\\")]),
        ("\"a b\"", vec![k("a b")]),
        (
            "a[9223372036854775807]",
            vec![k("a"), Step::Index(i64::MAX)],
        ),
        (
            "a[-9223372036854775808]",
            vec![k("a"), Step::Index(i64::MIN)],
        ),
    ];
    for (text, steps) in cases {
        let p = Path::parse(text).unwrap_or_else(|e| panic!("{text}: {e}"));
        assert_eq!(p.steps(), &steps[..], "{text}");
        // Display is canonical and parses back to the same path.
        let shown = p.to_string();
        assert_eq!(Path::parse(&shown).unwrap(), p, "{text} shown as {shown}");
        assert_eq!(text.parse::<Path>().unwrap(), p);
    }
    assert_eq!(
        Path::parse("\"user.agent\".major").unwrap().to_string(),
        "\"user.agent\".major"
    );
    assert_eq!(Path::parse("['a'][0]").unwrap().to_string(), "a[0]");
    assert!(Path::from_steps(vec![]).is_err());
}

#[test]
fn bad_paths_are_errors() {
    for bad in [
        "",
        ".",
        "a.",
        ".a",
        "a..b",
        "a[",
        "a[]",
        "a[x]",
        "a[1",
        "a]",
        "]",
        "a b",
        " a",
        "a ",
        "\"abc",
        "'abc",
        "a.[0]",
        "a[--1]",
        "a[-]",
        "a[+1]",
        "a[99999999999999999999]",
        "a\"b\"",
        "a['x'",
        "[\"x\\q\"]",
        "a[*",
        "a[0]b",
        "a[0]]",
        "a.\"b",
        "a[1.5]",
        "a[ 1]",
        "a\tb",
        "[0]x",
        "a['b']c",
    ] {
        let err = Path::parse(bad).expect_err(bad);
        let text = err.to_string();
        assert!(text.contains("bad path"), "{bad:?}: {text}");
        assert!(
            err.offset() <= bad.len(),
            "{bad:?}: offset {} past the end",
            err.offset()
        );
    }
    let err = Path::parse("a[x]").unwrap_err();
    assert_eq!(err.offset(), 2);
}

// ---------------------------------------------------------------------------------------------
// Scale
// ---------------------------------------------------------------------------------------------

#[test]
fn select_on_10k_events() {
    let n = 10_000;
    let value = events_value(n, 42);
    let doc = sereal::to_vec(&value, &EncoderOptions::original_events()).unwrap();
    let paths = paths(&["http.status", "timings.total_ms", "experiments[*].id"]);

    let t = Instant::now();
    let full = sereal::from_slice(&doc).unwrap();
    let full_time = t.elapsed();
    let elems = full.as_array().unwrap();
    let t = Instant::now();
    let expected: Vec<Vec<Vec<Value>>> = elems
        .iter()
        .map(|e| {
            paths
                .iter()
                .map(|p| p.eval(e).into_iter().cloned().collect())
                .collect()
        })
        .collect();
    let walk_time = t.elapsed();

    let mut scratch = Vec::new();
    let t = Instant::now();
    let lazy = LazyDoc::open(&doc, &Limits::default(), &mut scratch).unwrap();
    let open_time = t.elapsed();
    let mut selector = Selector::new(paths.clone());
    let mut row = Vec::new();
    let mut got = Vec::with_capacity(n);
    let t = Instant::now();
    for item in lazy.items().unwrap() {
        selector.select_into(&item.unwrap(), &mut row).unwrap();
        got.push(row.clone());
    }
    let select_time = t.elapsed();
    assert_eq!(got.len(), n);
    assert_eq!(got, expected);

    let t = Instant::now();
    let mut webs = 0;
    for item in lazy.items().unwrap() {
        if item
            .unwrap()
            .field("type")
            .unwrap()
            .unwrap()
            .str_eq("WEB")
            .unwrap()
        {
            webs += 1;
        }
    }
    let field_time = t.elapsed();
    assert_eq!(webs, n.div_ceil(3));
    // Skipping alone (what iterating the items costs), best of a few runs.
    let skip_time = (0..5)
        .map(|_| {
            let t = Instant::now();
            assert_eq!(lazy.root().unwrap().end(), lazy.body().len());
            t.elapsed()
        })
        .min()
        .unwrap();
    eprintln!(
        "10k events, {} bytes ({} decompressed): full decode {:?} (+ path walk {:?}); lazy open {:?}, \
         select 3 paths {:?}, field compare {:?}, skip whole body {:?}",
        doc.len(),
        lazy.body().len(),
        full_time,
        walk_time,
        open_time,
        select_time,
        field_time,
        skip_time
    );
}
