//! Hostile input to the parsers of credentials and token records, on stable: the
//! invariants of the fuzz target `fuzz/fuzz_targets/auth.rs` over a few thousand generated
//! inputs (a deterministic xorshift generator: valid secrets, headers, pattern and scope lists
//! and catalog records, then truncated, byte-flipped, spliced with unicode, made huge).
//!
//! - Nothing panics: `bearer`, `Secret::parse`, `Allowed::parse`, `Scopes::parse`,
//!   `TokenRecord` from JSON.
//! - A parsed secret re-parses to itself, and `bearer("Bearer " + secret)` gives it back.
//! - A secret is accepted exactly when each byte is of its position's class.
//! - Pattern lists keep no blank, comma or control character and re-parse to themselves; a
//!   pattern matches as a plain `*`-glob does (a reference implementation).
//! - Scope lists re-parse to themselves and hold exactly the scopes named.
//! - A record that parses serializes and parses back to itself.

mod invariants;

use invariants::{check, Seen};
use sluice_auth::{bearer, Secret};

/// xorshift64*: deterministic, seeded by the test.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }

    fn below(&mut self, n: usize) -> usize {
        (self.next() % n as u64) as usize
    }

    fn pick<'a, T>(&mut self, from: &'a [T]) -> &'a T {
        &from[self.below(from.len())]
    }

    fn chance(&mut self, one_in: usize) -> bool {
        self.below(one_in) == 0
    }
}

const HEX: &[u8] = b"0123456789abcdef";
const B64URL: &[u8] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";

/// Spliced into inputs: whitespace of every kind, controls, combining and wide characters,
/// characters whose case mapping changes their length, separators of the formats.
const SNIPPETS: &[&str] = &[
    " ", "  ", "\t", "\r\n", "\0", "\u{7}", "\u{85}", "\u{a0}", "\u{2028}", "\u{3000}", "\u{feff}",
    "\u{202e}", "é", "e\u{301}", "İ", "ß", "ﬀ", "𝔅", "🦀", "_", "-", ",", "*", "**", "=", ":",
    "\"", "\\", "{", "}", "[", "]", "sluice_", "Bearer ", "bearer", "\u{ffff}",
];

fn secret_text(r: &mut Rng) -> String {
    let mut s = String::from("sluice_");
    s.extend((0..8).map(|_| *r.pick(HEX) as char));
    s.push('_');
    s.extend((0..43).map(|_| *r.pick(B64URL) as char));
    s
}

fn header(r: &mut Rng) -> Vec<u8> {
    let scheme = r.pick(&[
        "Bearer", "bearer", "BEARER", "bEaReR", "Basic", "Bearer:", "Token", "", "Bearerx",
    ]);
    let sep = r.pick(&[" ", "  ", "\t", "", " \u{a0}"]);
    let lead = r.pick(&["", " ", "\t", "\u{3000}"]);
    let trail = r.pick(&["", " ", "\t ", "\r\n", "\u{85}", "x"]);
    format!("{lead}{scheme}{sep}{}{trail}", secret_text(r)).into_bytes()
}

fn pattern_lists(r: &mut Rng) -> Vec<u8> {
    const PATTERNS: &[&str] = &[
        "ams*",
        "*",
        "WEB",
        "LB*",
        "a**b",
        "",
        " x ",
        "é*",
        "*B*",
        "\u{7}",
        "W*B*B",
        "🦀*🦀",
    ];
    let list = |r: &mut Rng| {
        let n = r.below(5);
        let mut parts: Vec<String> = (0..n).map(|_| r.pick(PATTERNS).to_string()).collect();
        if r.chance(10) {
            parts.push("a".repeat(254 + r.below(4))); // around the 255-byte limit
        }
        parts.join(*r.pick(&[",", ", ", " ,", ",,"]))
    };
    let mut v = list(r).into_bytes();
    v.push(0);
    v.extend(list(r).into_bytes());
    v
}

fn scope_list(r: &mut Rng) -> Vec<u8> {
    const WORDS: &[&str] = &[
        "ingest",
        "read",
        "admin",
        " admin ",
        "ADMIN",
        "",
        "readx",
        "in gest",
        "\u{a0}read",
        "*",
    ];
    let n = 1 + r.below(4);
    let words: Vec<&str> = (0..n).map(|_| *r.pick(WORDS)).collect();
    words.join(",").into_bytes()
}

fn record(r: &mut Rng) -> Vec<u8> {
    let mut v = serde_json::json!({
        "id": String::from_utf8(secret_text(r).as_bytes()[7..15].to_vec()).unwrap(),
        "name": r.pick(&["ci", "team-a", "", "x y", "é"]),
        "scopes": r.pick(&[&["read"][..], &["ingest", "read"], &["admin"], &[], &["root"]]),
        "created": *r.pick(&[0i64, 1_700_000_000, -1, i64::MAX, i64::MIN]),
        "hash": "0".repeat(*r.pick(&[64usize, 0, 63, 65])),
    });
    if r.chance(2) {
        v["dcs"] = serde_json::json!(["ams*"]);
        v["types"] = serde_json::json!(["WEB", "LB*"]);
    }
    if r.chance(2) {
        v["allowed"] = serde_json::json!({"dcs": ["x"], "types": []});
    }
    if r.chance(3) {
        v["expires"] = serde_json::json!(r.pick(&[serde_json::json!(null), 5.into(), 1.5.into()]));
    }
    if r.chance(3) {
        v["revoked"] = serde_json::json!(r.pick(&[serde_json::json!(null), 7.into(), "x".into()]));
    }
    if r.chance(4) {
        v["extra"] = serde_json::json!({"nested": [1, [2, [3]]]});
    }
    serde_json::to_vec(&v).unwrap()
}

/// One to three mutations: truncation, byte flips, deletions, splices, duplication, huge.
fn mutate(r: &mut Rng, mut v: Vec<u8>) -> Vec<u8> {
    for _ in 0..1 + r.below(3) {
        match r.below(8) {
            0 => v.truncate(r.below(v.len() + 1)),
            1 if !v.is_empty() => {
                let at = r.below(v.len());
                v[at] ^= 1 + r.below(255) as u8;
            }
            2 if !v.is_empty() => {
                v.remove(r.below(v.len()));
            }
            3 | 4 => {
                let at = r.below(v.len() + 1);
                let s = r.pick(SNIPPETS).as_bytes();
                v.splice(at..at, s.iter().copied());
            }
            5 if !v.is_empty() => {
                let at = r.below(v.len());
                v[at] = v[at].to_ascii_uppercase();
            }
            6 => {
                let copy = v.clone();
                v.extend(copy);
            }
            7 if r.chance(8) => {
                // Huge: around the header limit, or far past it.
                let target = *r.pick(&[500usize, 511, 512, 513, 4096, 1 << 20]);
                let pad = *r.pick(b" a\t");
                v.resize(target.max(v.len()), pad);
            }
            _ => {}
        }
    }
    v
}

#[test]
fn generated_inputs_keep_the_invariants() {
    let mut r = Rng(0x5eed_a17e_0000_0022);
    let mut seen = Seen::default();
    let makers: [fn(&mut Rng) -> Vec<u8>; 5] = [
        |r| secret_text(r).into_bytes(),
        header,
        pattern_lists,
        scope_list,
        record,
    ];
    for i in 0..5000 {
        let base = makers[i % makers.len()](&mut r);
        check(&base, &mut seen); // unmutated: the accepting paths
        let hostile = mutate(&mut r, base);
        check(&hostile, &mut seen);
    }
    eprintln!("parsed: {seen:?}");
    // Each accepting path was taken often (the generator is not degenerate).
    for (what, n) in [
        ("bearer", seen.bearer),
        ("secret", seen.secret),
        ("allowed", seen.allowed),
        ("scopes", seen.scopes),
        ("record", seen.record),
    ] {
        assert!(n >= 100, "{what}: only {n} accepted: {seen:?}");
    }
}

/// Every byte at every position of a secret: accepted exactly when the byte is of the
/// position's class (`sluice_`, 8 lowercase hex, `_`, 43 base64url).
#[test]
fn each_byte_of_a_secret_is_checked() {
    let mut r = Rng(22);
    let good = secret_text(&mut r);
    for at in 0..good.len() {
        for b in 0..=255u8 {
            let mut v = good.clone().into_bytes();
            v[at] = b;
            let class_ok = match at {
                0..=6 => b == b"sluice_"[at],
                7..=14 => HEX.contains(&b),
                15 => b == b'_',
                _ => B64URL.contains(&b),
            };
            let mut header = b"Bearer ".to_vec();
            header.extend(&v);
            let got = bearer(&header);
            assert_eq!(got.is_some(), class_ok, "byte {b:#04x} at {at}");
            if let Some(s) = got {
                assert_eq!(s.expose().as_bytes(), &v[..]);
            }
            if let Ok(text) = std::str::from_utf8(&v) {
                assert_eq!(Secret::parse(text).is_some(), class_ok);
            }
        }
    }
    // Lengths: one short, one long, truncated anywhere.
    assert!(Secret::parse(&good[..good.len() - 1]).is_none());
    assert!(Secret::parse(&format!("{good}A")).is_none());
    for n in 0..good.len() {
        assert!(bearer(format!("Bearer {}", &good[..n]).as_bytes()).is_none());
    }
}

/// A valid secret inside a huge value is not looked at; many lines, NULs, invalid UTF-8 and
/// very long pattern and scope lists return.
#[test]
fn huge_values_are_refused_without_work() {
    let mut r = Rng(7);
    let good = secret_text(&mut r);
    let mut seen = Seen::default();
    for pad in [1usize << 10, 1 << 16, 1 << 22] {
        let v = format!("Bearer {good}{}", " ".repeat(pad));
        assert!(bearer(v.as_bytes()).is_none(), "{pad} bytes of padding");
        check(v.as_bytes(), &mut seen);
        let many = format!("{good}\n").repeat(pad / 60 + 1);
        check(many.as_bytes(), &mut seen);
        check(&vec![0u8; pad], &mut seen);
        check(&vec![0xffu8; pad], &mut seen);
        check("*,".repeat(pad / 2).as_bytes(), &mut seen);
        check("admin,".repeat(pad / 6).as_bytes(), &mut seen);
        check("[".repeat(pad).as_bytes(), &mut seen); // nested JSON past serde_json's limit
    }
    // A short padding is fine.
    assert!(bearer(format!("Bearer {good}{}", " ".repeat(100)).as_bytes()).is_some());
}
