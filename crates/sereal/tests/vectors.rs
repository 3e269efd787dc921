//! Every document in `testdata/sereal/vectors` (made by other implementations) decodes; where an
//! Erlang `.eterm` says what it holds, we decode exactly that; every strict prefix is an EOF
//! error; and what we decode re-encodes to a document that decodes the same.

mod common;

use std::path::PathBuf;

use serde_json::{json, Value as J};

fn vector_files() -> Vec<PathBuf> {
    let dir = common::vectors_dir();
    let mut files = Vec::new();
    for entry in std::fs::read_dir(&dir).expect("vectors dir") {
        let sub = entry.expect("entry").path();
        if !sub.is_dir() {
            continue;
        }
        for f in std::fs::read_dir(&sub).expect("vector subdir") {
            let f = f.expect("entry").path();
            if f.extension().is_some_and(|e| e == "srl") {
                files.push(f);
            }
        }
    }
    files.sort();
    assert!(
        files.len() >= 40,
        "expected the shared vectors, found {}",
        files.len()
    );
    files
}

/// Decode every document in a file (some vectors are streams of documents); a trailing newline
/// after the last one is tolerated (one vector was saved with it).
fn decode_all(bytes: &[u8]) -> Vec<sereal::Value> {
    let mut dec = sereal::Decoder::new();
    let mut rest = bytes;
    let mut out = Vec::new();
    while !rest.is_empty() && rest != b"\n" {
        let d = dec
            .decode_document(rest)
            .unwrap_or_else(|e| panic!("document {} : {e}", out.len()));
        out.push(d.body);
        rest = &rest[d.len..];
    }
    out
}

#[test]
fn every_vector_decodes_and_round_trips() {
    for path in vector_files() {
        let bytes = std::fs::read(&path).expect("read vector");
        let docs = decode_all(&bytes);
        assert!(!docs.is_empty(), "{}", path.display());
        for v in &docs {
            for opts in [
                sereal::EncoderOptions::default(),
                sereal::EncoderOptions::original_events(),
                sereal::EncoderOptions {
                    compression: sereal::Compression::Zstd { level: 3 },
                    ..Default::default()
                },
            ] {
                let again = sereal::to_vec(v, &opts).expect("re-encode");
                let back = sereal::from_slice(&again).expect("decode our re-encoding");
                let (a, b) = (
                    sereal::json::to_json_value(&back),
                    sereal::json::to_json_value(v),
                );
                if let Some(d) = common::json_diff(&a, &b, "$") {
                    panic!("round trip of {}: {d}", path.display());
                }
            }
        }
    }
}

#[test]
fn strict_prefixes_are_eof() {
    for path in vector_files() {
        let bytes = std::fs::read(&path).expect("read vector");
        let first_len = sereal::Decoder::new()
            .decode_document(&bytes)
            .expect("decode")
            .len;
        let doc = &bytes[..first_len];
        // Big documents: every prefix near the ends plus a stride through the middle.
        let cuts: Vec<usize> = if doc.len() <= 4096 {
            (0..doc.len()).collect()
        } else {
            (0..256)
                .chain((256..doc.len() - 256).step_by(doc.len() / 64))
                .chain(doc.len() - 256..doc.len())
                .collect()
        };
        for cut in cuts {
            match sereal::from_slice(&doc[..cut]) {
                Ok(_) => panic!("{}: prefix of {cut} bytes decoded", path.display()),
                Err(e) => assert!(
                    e.is_eof(),
                    "{}: prefix {cut}: {e} is not EOF",
                    path.display()
                ),
            }
        }
    }
}

#[test]
fn erlang_expectations_hold() {
    let mut checked = 0;
    for path in vector_files() {
        let eterm = path.with_extension("eterm");
        let Ok(text) = std::fs::read_to_string(&eterm) else {
            continue;
        };
        let expected = Eterm::parse(&text).unwrap_or_else(|e| panic!("{}: {e}", eterm.display()));
        let bytes = std::fs::read(&path).expect("read vector");
        let got = sereal::json::to_json_value(&decode_all(&bytes)[0]);
        if let Some(d) = common::json_diff(&got, &expected, "$") {
            panic!("{}: {d}", path.display());
        }
        checked += 1;
    }
    assert!(checked >= 25, "only {checked} .eterm expectations found");
}

#[test]
fn javascript_and_erlang_copies_agree() {
    let dir = common::vectors_dir();
    let mut compared = 0;
    for js in std::fs::read_dir(dir.join("JavaScript_example_srl")).expect("js dir") {
        let js = js.expect("entry").path();
        let name = js.file_name().expect("name").to_owned();
        for erl in [
            "Erlang_Sereal_test_cases_all",
            "Erlang_Sereal_test_cases_arrayref_list",
            "Erlang_Sereal_test_cases_maps_tuple",
            "Erlang_Sereal_test_cases_maps_map",
        ] {
            let other = dir.join(erl).join(&name);
            if other.exists() {
                let a = decode_all(&std::fs::read(&js).expect("read"));
                let b = decode_all(&std::fs::read(&other).expect("read"));
                let (a, b) = (
                    sereal::json::to_json_value(&a[0]),
                    sereal::json::to_json_value(&b[0]),
                );
                assert!(common::json_diff(&a, &b, "$").is_none(), "{name:?}");
                compared += 1;
            }
        }
    }
    assert!(compared >= 5);
}

#[test]
fn known_contents() {
    let dir = common::vectors_dir();
    let obj =
        decode_all(&std::fs::read(dir.join("ruby_test/example-perl-object.srl")).expect("read"));
    let j = sereal::json::to_json_value(&obj[0]);
    assert_eq!(j[0]["$object"], json!("HTTP::Tiny"));
    assert_eq!(j[0]["$value"]["max_redirect"], json!(5));
    let snappy = decode_all(
        &std::fs::read(dir.join("ruby_test/example-stream-snappy-i.srl")).expect("read"),
    );
    let plain = decode_all(
        &std::fs::read(dir.join("ruby_test/example-stream-no-snappy-i.srl")).expect("read"),
    );
    assert_eq!(snappy.len(), 100);
    for (i, (a, b)) in snappy.iter().zip(&plain).enumerate() {
        let (a, b) = (
            sereal::json::to_json_value(a),
            sereal::json::to_json_value(b),
        );
        if let Some(d) = common::json_diff(&a, &b, "$") {
            panic!("stream document {i}: the snappy and plain streams differ: {d}");
        }
    }
    let big = sereal::from_slice(&std::fs::read(dir.join("Perl_Splitter/big.srl")).expect("read"))
        .expect("big.srl");
    assert!(
        big.as_array().is_some_and(|a| !a.is_empty()),
        "big.srl is an array"
    );
}

/// Just enough of Erlang's term syntax to read the `.eterm` expectations: integers, atoms
/// (`undefined` is null), binaries `<<"...">>`, lists, tuples, maps `#{K => V}`, the `array`
/// record `{array, Size, _, _, Elements}` and jiffy-style `{[{K, V}, ...]}` objects.
struct Eterm<'a> {
    s: &'a [u8],
    pos: usize,
}

#[derive(Debug, Clone)]
enum Term {
    Int(i64),
    Float(f64),
    Atom(String),
    Bin(String),
    List(Vec<Term>),
    Tuple(Vec<Term>),
    Map(Vec<(Term, Term)>),
}

impl<'a> Eterm<'a> {
    fn parse(text: &'a str) -> Result<J, String> {
        let mut p = Eterm {
            s: text.as_bytes(),
            pos: 0,
        };
        let t = p.term()?;
        Ok(to_json(&t))
    }

    fn ws(&mut self) {
        while self.pos < self.s.len() {
            let c = self.s[self.pos];
            if c == b'%' {
                while self.pos < self.s.len() && self.s[self.pos] != b'\n' {
                    self.pos += 1;
                }
            } else if c.is_ascii_whitespace() {
                self.pos += 1;
            } else {
                break;
            }
        }
    }

    fn eat(&mut self, tok: &str) -> bool {
        self.ws();
        if self.s[self.pos..].starts_with(tok.as_bytes()) {
            self.pos += tok.len();
            true
        } else {
            false
        }
    }

    fn seq(&mut self, close: &str) -> Result<Vec<Term>, String> {
        let mut items = Vec::new();
        if self.eat(close) {
            return Ok(items);
        }
        loop {
            items.push(self.term()?);
            if self.eat(close) {
                return Ok(items);
            }
            if !self.eat(",") {
                return Err(format!("expected , or {close} at {}", self.pos));
            }
        }
    }

    fn term(&mut self) -> Result<Term, String> {
        self.ws();
        if self.eat("<<") {
            let mut text = String::new();
            if self.eat("\"") {
                while self.pos < self.s.len() && self.s[self.pos] != b'"' {
                    text.push(self.s[self.pos] as char);
                    self.pos += 1;
                }
                self.pos += 1;
            }
            if !self.eat(">>") {
                return Err(format!("unterminated binary at {}", self.pos));
            }
            return Ok(Term::Bin(text));
        }
        if self.eat("#{") {
            let mut pairs = Vec::new();
            if !self.eat("}") {
                loop {
                    let k = self.term()?;
                    if !self.eat("=>") {
                        return Err(format!("expected => at {}", self.pos));
                    }
                    pairs.push((k, self.term()?));
                    if self.eat("}") {
                        break;
                    }
                    if !self.eat(",") {
                        return Err(format!("expected , in map at {}", self.pos));
                    }
                }
            }
            return Ok(Term::Map(pairs));
        }
        if self.eat("[") {
            return Ok(Term::List(self.seq("]")?));
        }
        if self.eat("{") {
            return Ok(Term::Tuple(self.seq("}")?));
        }
        let start = self.pos;
        while self.pos < self.s.len()
            && (self.s[self.pos].is_ascii_alphanumeric() || b"-_.+".contains(&self.s[self.pos]))
        {
            self.pos += 1;
        }
        // A term ends with `.`; it is not part of the last word.
        if self.pos > start && self.s[self.pos - 1] == b'.' {
            self.pos -= 1;
        }
        let word = std::str::from_utf8(&self.s[start..self.pos]).map_err(|e| e.to_string())?;
        if word.is_empty() {
            return Err(format!("unexpected byte at {start}"));
        }
        Ok(if let Ok(i) = word.parse::<i64>() {
            Term::Int(i)
        } else if let Ok(f) = word.parse::<f64>() {
            Term::Float(f)
        } else {
            Term::Atom(word.to_owned())
        })
    }
}

fn to_json(t: &Term) -> J {
    match t {
        Term::Int(i) => json!(i),
        Term::Float(f) => json!(f),
        Term::Atom(a) if a == "undefined" => J::Null,
        Term::Atom(a) => json!(a),
        Term::Bin(s) => json!(s),
        Term::List(items) => J::Array(items.iter().map(to_json).collect()),
        Term::Map(pairs) => J::Object(pairs.iter().map(|(k, v)| (key(k), to_json(v))).collect()),
        Term::Tuple(items) => match items.as_slice() {
            [Term::Atom(a), Term::Int(size), _, _, Term::Tuple(elems)] if a == "array" => {
                J::Array(elems.iter().take(*size as usize).map(to_json).collect())
            }
            [Term::List(pairs)] => J::Object(
                pairs
                    .iter()
                    .map(|p| match p {
                        Term::Tuple(kv) if kv.len() == 2 => (key(&kv[0]), to_json(&kv[1])),
                        other => panic!("unexpected proplist entry {other:?}"),
                    })
                    .collect(),
            ),
            _ => J::Array(items.iter().map(to_json).collect()),
        },
    }
}

fn key(t: &Term) -> String {
    match t {
        Term::Bin(s) | Term::Atom(s) => s.clone(),
        Term::Int(i) => i.to_string(),
        other => panic!("unexpected key {other:?}"),
    }
}
