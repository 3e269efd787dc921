//! The invariants of the auth parsers over one input, shared by the fuzz target
//! (`fuzz/fuzz_targets/auth.rs`, which includes this file) and the stable test
//! (`crates/auth/tests/hostile.rs`): nothing panics; a parsed secret re-parses to itself, also
//! through `Bearer <secret>`; pattern lists keep no blank, comma or control character and
//! re-parse to themselves; a pattern matches as a plain `*`-glob does; scope lists hold exactly
//! the scopes named; a record re-parses to itself.

#![allow(dead_code)]

use sluice_auth::{bearer, Allowed, Scope, Scopes, Secret, TokenRecord};

/// How many inputs each parser accepted (a generator that never reaches the accepting paths
/// tests nothing).
#[derive(Debug, Default)]
pub struct Seen {
    pub bearer: usize,
    pub secret: usize,
    pub allowed: usize,
    pub scopes: usize,
    pub record: usize,
}

/// Every invariant over `data`: as an `Authorization` value, a secret, two pattern lists split
/// at the first NUL, a scope list and a catalog record.
pub fn check(data: &[u8], seen: &mut Seen) {
    check_bearer(data, seen);
    let text = String::from_utf8_lossy(data);
    check_secret(&text, seen);
    let (a, b) = match data.iter().position(|&b| b == 0) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let (a, b) = (String::from_utf8_lossy(a), String::from_utf8_lossy(b));
    check_allowed(&a, &b, seen);
    check_glob(&a, &b);
    check_scopes(&text, seen);
    check_record(data, seen);
}

fn check_bearer(value: &[u8], seen: &mut Seen) {
    let Some(s) = bearer(value) else { return };
    seen.bearer += 1;
    // Only ever a secret's exact form, taken from the value as given.
    assert_eq!(Secret::parse(s.expose()).as_ref(), Some(&s));
    let text = std::str::from_utf8(value).expect("a bearer value is UTF-8");
    assert!(text.contains(s.expose()));
    assert!(text.trim_start()[..6].eq_ignore_ascii_case("bearer"));
    check_secret(s.expose(), seen);
}

fn check_secret(text: &str, seen: &mut Seen) {
    let Some(s) = Secret::parse(text) else { return };
    seen.secret += 1;
    assert_eq!(s.expose(), text);
    assert_eq!(Secret::parse(s.expose()).as_ref(), Some(&s));
    assert_eq!(
        bearer(format!("Bearer {}", s.expose()).as_bytes()).as_ref(),
        Some(&s)
    );
    assert_eq!(
        bearer(format!(" bEaReR  {}\t", s.expose()).as_bytes()).as_ref(),
        Some(&s)
    );
    let id = s.id();
    assert!(id.len() == 8 && id.bytes().all(|b| matches!(b, b'0'..=b'9' | b'a'..=b'f')));
    assert!(s.matches(&s.hash_hex()));
    // The random part never shows in Debug.
    assert!(!format!("{s:?}").contains(&text[16..]));
}

fn check_allowed(dcs: &str, types: &str, seen: &mut Seen) {
    let Ok(a) = Allowed::parse(dcs, types) else {
        return;
    };
    seen.allowed += 1;
    for p in a.dcs.iter().chain(&a.types) {
        assert!(!p.is_empty() && p.len() <= 255, "{p:?}");
        assert_eq!(p.trim(), p);
        assert!(
            !p.contains(',') && !p.chars().any(char::is_control),
            "{p:?}"
        );
    }
    assert_eq!(a.is_all(), a.dcs.is_empty() && a.types.is_empty());
    let again = Allowed::parse(&a.dcs.join(","), &a.types.join(",")).expect("re-parses");
    assert_eq!(again, a);
    // Each pattern reaches its own text with every star taken as nothing.
    for p in &a.dcs {
        assert!(a.allows_dc(&p.replace('*', "")), "{p:?}");
    }
    let _ = a.allows(dcs, types);
}

/// `Allowed`'s matching against a plain `*`-glob, pattern `p`, text `t`.
fn check_glob(p: &str, t: &str) {
    if p.len() > 64 || t.len() > 256 {
        return; // the reference is quadratic
    }
    let a = Allowed {
        dcs: vec![p.to_owned()],
        types: Vec::new(),
    };
    assert_eq!(
        a.allows_dc(t),
        glob(p.as_bytes(), t.as_bytes()),
        "{p:?} ~ {t:?}"
    );
}

/// The reference: `*` matches any run of bytes, anything else itself.
fn glob(p: &[u8], t: &[u8]) -> bool {
    // m[j]: p[..i] matches t[..j]
    let mut m = vec![false; t.len() + 1];
    m[0] = true;
    for &c in p {
        if c == b'*' {
            for j in 1..=t.len() {
                m[j] = m[j] || m[j - 1];
            }
        } else {
            for j in (1..=t.len()).rev() {
                m[j] = m[j - 1] && t[j - 1] == c;
            }
            m[0] = false;
        }
    }
    m[t.len()]
}

fn check_scopes(text: &str, seen: &mut Seen) {
    let Ok(s) = Scopes::parse(text) else { return };
    seen.scopes += 1;
    let shown = s.to_text();
    assert!(!shown.is_empty());
    assert_eq!(Scopes::parse(&shown).as_ref(), Ok(&s));
    for scope in [Scope::Ingest, Scope::Read, Scope::Admin] {
        let named = text.split(',').any(|w| w.trim() == scope.as_str());
        assert_eq!(s.has(scope), named, "{scope:?} in {text:?}");
    }
}

fn check_record(json: &[u8], seen: &mut Seen) {
    let Ok(r) = serde_json::from_slice::<TokenRecord>(json) else {
        return;
    };
    seen.record += 1;
    let again: TokenRecord =
        serde_json::from_slice(&serde_json::to_vec(&r).expect("serializes")).expect("re-parses");
    assert_eq!(again, r);
    let _ = r.public();
    let _ = r.spec.validate();
    let probe = Secret::parse(&format!("sluice_{}_{}", "0".repeat(8), "A".repeat(43)));
    let _ = probe.expect("a secret's form").matches(&r.hash);
}
