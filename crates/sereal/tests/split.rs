//! Tests of the splitter (`sereal::split`): chunk sizes, standalone decoding, element order and
//! values, back-references across chunk boundaries (COPY, REFP, ALIAS, OBJECTV), documents made
//! by the Perl reference (and decoded by it again), and hostile inputs.

mod common;

use sereal::split::{split, SplitOptions};
use sereal::{from_slice, to_vec, Compression, EncoderOptions, Limits, Value};

// ---------------------------------------------------------------------------------------------
// Helpers.

/// Deterministic xorshift64* generator.
struct Rng(u64);

impl Rng {
    fn next(&mut self) -> u64 {
        self.0 ^= self.0 >> 12;
        self.0 ^= self.0 << 25;
        self.0 ^= self.0 >> 27;
        self.0.wrapping_mul(0x2545_F491_4F6C_DD1D)
    }
    fn below(&mut self, n: u64) -> u64 {
        self.next() % n
    }
    fn pick<'a>(&mut self, items: &[&'a str]) -> &'a str {
        items[self.below(items.len() as u64) as usize]
    }
}

/// JSON text of `n` events: repeated strings across events (so `dedupe_strings` makes COPYs into
/// earlier elements), non-ASCII text, floats, negative and huge integers, booleans, nulls, nested
/// containers (some with 16+ members), and a few large events.
fn events_json(n: usize, seed: u64) -> String {
    let mut r = Rng(seed | 1);
    let hosts = [
        "web-001.ams4.example.com",
        "web-002.ams4.example.com",
        "db-17.fra1.example.com",
        "cache-3.lhr2.example.com",
    ];
    let services = ["checkout", "search", "payments", "inventory", "auth"];
    let levels = ["info", "warn", "error", "debug"];
    let words = [
        "alpha", "bravo", "charlie", "delta", "echo", "foxtrot", "golf", "hotel", "india",
    ];
    let uni = [
        "café ☕",
        "naïve façade",
        "Ünïcödé ✓",
        "日本語のテキスト",
        "emoji 🚀 launch",
    ];
    let mut out = String::from("[");
    for i in 0..n {
        if i > 0 {
            out.push(',');
        }
        let host = r.pick(&hosts);
        let service = r.pick(&services);
        let level = r.pick(&levels);
        let mut tags = Vec::new();
        for _ in 0..r.below(5) {
            tags.push(format!("\"{}\"", r.pick(&words)));
        }
        let latency = (r.below(1_000_000) as f64) / 1000.0 + 0.5;
        let msg = if r.below(50) == 0 {
            // A large event now and then.
            let mut m = String::new();
            for j in 0..(200 + r.below(400)) {
                m.push_str(words[(j as usize + i) % words.len()]);
                m.push(' ');
            }
            m
        } else {
            format!(
                "request {} finished with {} items",
                r.pick(&words),
                r.below(20)
            )
        };
        let mut wide = String::new();
        for k in 0..(if r.below(4) == 0 { 18 } else { 3 }) {
            if k > 0 {
                wide.push(',');
            }
            wide.push_str(&format!("\"k{k}\":{}", r.below(300)));
        }
        let list: Vec<String> = (0..(if r.below(6) == 0 { 20 } else { 2 }))
            .map(|j| (j * 7 % 13).to_string())
            .collect();
        out.push_str(&format!(
            concat!(
                "{{\"ts\":{},\"host\":\"{}\",\"service\":\"{}\",\"level\":\"{}\",\"msg\":\"{}\",",
                "\"latency\":{},\"status\":{},\"delta\":{},\"huge\":18446744073709551615,\"ok\":{},",
                "\"user\":null,\"tags\":[{}],\"ctx\":{{\"region\":\"eu-west-{}\",\"trace\":\"{:016x}{:016x}\",",
                "\"note\":\"{}\"}},\"wide\":{{{}}},\"list\":[{}],\"seq\":{}}}"
            ),
            1_700_000_000_000u64 + i as u64 * 37,
            host,
            service,
            level,
            msg,
            latency,
            [200, 200, 200, 404, 500][r.below(5) as usize],
            -(r.below(100_000) as i64),
            r.below(2) == 0,
            tags.join(","),
            r.below(3),
            r.next(),
            r.next(),
            r.pick(&uni),
            wide,
            list.join(","),
            i,
        ));
    }
    out.push(']');
    out
}

fn events_value(n: usize, seed: u64) -> Value {
    sereal::json::from_json_slice(events_json(n, seed).as_bytes()).expect("generated JSON parses")
}

fn encode(v: &Value, protocol: u8, compression: Compression, dedupe: bool) -> Vec<u8> {
    let opts = EncoderOptions {
        protocol,
        compression,
        dedupe_strings: dedupe,
        ..Default::default()
    };
    to_vec(v, &opts).expect("encode")
}

fn array_of(doc: &[u8]) -> Vec<Value> {
    match from_slice(doc).expect("document decodes") {
        Value::Array(items) => items,
        other => panic!("not an array: {other:?}"),
    }
}

/// Split and check everything a caller relies on: sizes, standalone decoding, order and values.
fn check(doc: &[u8], max: usize, opts: &SplitOptions) -> Result<Vec<Vec<u8>>, sereal::Error> {
    let chunks = split(doc, max, opts, &Limits::default())?;
    check_chunks(doc, max, opts, &chunks);
    Ok(chunks)
}

fn check_chunks(doc: &[u8], max: usize, opts: &SplitOptions, chunks: &[Vec<u8>]) {
    let original = array_of(doc);
    if doc.len() <= max {
        assert_eq!(
            chunks,
            &[doc.to_vec()],
            "a document that fits comes back unchanged"
        );
        return;
    }
    let mut all = Vec::with_capacity(original.len());
    for (i, c) in chunks.iter().enumerate() {
        let items = match from_slice(c) {
            Ok(Value::Array(items)) => items,
            other => panic!(
                "chunk {i} of {} does not decode to an array: {other:?}",
                chunks.len()
            ),
        };
        assert!(!items.is_empty(), "chunk {i} is empty");
        if c.len() > max {
            assert!(
                opts.allow_oversized && items.len() == 1,
                "chunk {i}: {} bytes > {max}",
                c.len()
            );
        }
        all.extend(items);
    }
    assert_eq!(all.len(), original.len(), "element count");
    for (i, (a, b)) in all.iter().zip(&original).enumerate() {
        if a != b {
            panic!(
                "element {i} differs:\n chunk: {}\n orig:  {}",
                sereal::json::to_string(a),
                sereal::json::to_string(b)
            );
        }
    }
}

/// Fill ratio of all chunks but the last (to see that fitting is not wasteful).
fn fill(chunks: &[Vec<u8>], max: usize) -> f64 {
    if chunks.len() < 2 {
        return 1.0;
    }
    let body: usize = chunks[..chunks.len() - 1].iter().map(Vec::len).sum();
    body as f64 / ((chunks.len() - 1) * max) as f64
}

fn header_of(doc: &[u8]) -> (u8, sereal::header::Encoding) {
    let h = sereal::header::parse(doc).expect("header");
    (h.version, h.encoding)
}

/// Split at many sizes; sizes that a single element cannot meet must fail with a limit error
/// naming the element, and succeed (with that element alone, oversized) when allowed.
fn check_many(doc: &[u8], sizes: &[usize], opts: &SplitOptions) -> usize {
    let mut ok = 0;
    for &max in sizes {
        match check(doc, max, opts) {
            Ok(chunks) => {
                ok += 1;
                if doc.len() > max {
                    assert!(chunks.len() >= 2 || chunks[0].len() <= max);
                }
            }
            Err(e) => {
                assert!(e.is_limit(), "max {max}: unexpected error {e}");
                assert!(e.to_string().contains("alone needs"), "{e}");
                let loose = SplitOptions {
                    allow_oversized: true,
                    ..opts.clone()
                };
                check(doc, max, &loose).expect("allowed oversized");
            }
        }
    }
    ok
}

// ---------------------------------------------------------------------------------------------
// Rust-encoded documents.

const SIZES: &[usize] = &[
    60, 150, 400, 1000, 1500, 3000, 7000, 16_000, 40_000, 100_000, 400_000,
];

#[test]
fn original_events_form_protocol3_zlib_dedupe() {
    let v = events_value(1500, 1);
    let doc = to_vec(&v, &EncoderOptions::original_events()).unwrap();
    assert_eq!(header_of(&doc), (3, sereal::header::Encoding::Zlib));
    let opts = SplitOptions::default();
    let ok = check_many(&doc, SIZES, &opts);
    assert!(ok >= 6);
    // Chunks keep the input's form.
    let chunks = check(&doc, 5000, &opts).unwrap();
    assert!(chunks.len() > 3);
    for c in &chunks {
        assert_eq!(header_of(c).0, 3);
        assert!(c.len() <= 5000);
    }
    let f = fill(&chunks, 5000);
    assert!(f > 0.85, "chunks only {f:.2} full");
    // Every size around the document's own.
    for max in [
        doc.len() - 1,
        doc.len(),
        doc.len() + 1,
        doc.len() / 2,
        doc.len() / 2 + 1,
    ] {
        check(&doc, max, &opts).unwrap();
    }
}

#[test]
fn protocol5_zstd() {
    let v = events_value(1200, 2);
    let doc = encode(&v, 5, Compression::Zstd { level: 3 }, false);
    assert_eq!(header_of(&doc), (5, sereal::header::Encoding::Zstd));
    check_many(&doc, SIZES, &SplitOptions::default());
    let chunks = check(&doc, 8000, &SplitOptions::default()).unwrap();
    for c in &chunks {
        assert_eq!(header_of(c), (5, sereal::header::Encoding::Zstd));
    }
    let f = fill(&chunks, 8000);
    assert!(f > 0.85, "chunks only {f:.2} full");
    // zstd with dedupe too.
    let doc = encode(&v, 5, Compression::Zstd { level: 3 }, true);
    check_many(&doc, &[500, 2000, 9000, 50_000], &SplitOptions::default());
}

#[test]
fn uncompressed_and_snappy() {
    let v = events_value(800, 3);
    for (protocol, dedupe) in [(5, false), (5, true), (4, true), (3, false)] {
        let doc = encode(&v, protocol, Compression::None, dedupe);
        assert_eq!(header_of(&doc), (protocol, sereal::header::Encoding::Raw));
        check_many(&doc, SIZES, &SplitOptions::default());
        let chunks = check(&doc, 20_000, &SplitOptions::default()).unwrap();
        for c in &chunks {
            assert_eq!(header_of(c), (protocol, sereal::header::Encoding::Raw));
        }
        let f = fill(&chunks, 20_000);
        assert!(f > 0.9, "chunks only {f:.2} full");
    }
    let doc = encode(&v, 3, Compression::Snappy, true);
    assert_eq!(header_of(&doc).1, sereal::header::Encoding::Snappy);
    check_many(&doc, &[700, 3000, 12_000, 60_000], &SplitOptions::default());
}

#[test]
fn output_options_change_protocol_and_compression() {
    let v = events_value(600, 4);
    let doc = encode(&v, 5, Compression::None, true);
    for (protocol, compression, enc) in [
        (
            3,
            Compression::Zlib { level: 9 },
            sereal::header::Encoding::Zlib,
        ),
        (
            4,
            Compression::Zstd { level: 1 },
            sereal::header::Encoding::Zstd,
        ),
        (5, Compression::Snappy, sereal::header::Encoding::Snappy),
        // Protocol 1: offsets count from the start of the document, header included.
        (1, Compression::None, sereal::header::Encoding::Raw),
        (2, Compression::Snappy, sereal::header::Encoding::Snappy),
    ] {
        let opts = SplitOptions {
            protocol: Some(protocol),
            compression: Some(compression),
            ..Default::default()
        };
        let chunks = check(&doc, 4000, &opts).unwrap();
        assert!(chunks.len() > 2);
        for c in &chunks[..chunks.len() - 1] {
            assert_eq!(header_of(c), (protocol, enc), "{compression:?}");
        }
    }
    // Compression below the threshold is not applied; a lower threshold applies it.
    let opts = SplitOptions {
        compression: Some(Compression::Zlib { level: 6 }),
        compress_threshold: 0,
        ..Default::default()
    };
    check_many(&doc, &[300, 900], &opts);
    // zlib needs protocol 3.
    let opts = SplitOptions {
        protocol: Some(2),
        compression: Some(Compression::Zlib { level: 6 }),
        ..Default::default()
    };
    assert!(split(&doc, 4000, &opts, &Limits::default()).is_err());
    let opts = SplitOptions {
        protocol: Some(9),
        ..Default::default()
    };
    assert!(split(&doc, 4000, &opts, &Limits::default()).is_err());
}

#[test]
fn fitting_document_is_returned_unchanged_and_small_limits_fail_cleanly() {
    let v = events_value(50, 5);
    let doc = to_vec(&v, &EncoderOptions::original_events()).unwrap();
    let chunks = split(
        &doc,
        doc.len(),
        &SplitOptions::default(),
        &Limits::default(),
    )
    .unwrap();
    assert_eq!(chunks, vec![doc.clone()]);
    // Nothing fits in 10 bytes: the first element is named.
    let e = split(&doc, 10, &SplitOptions::default(), &Limits::default()).unwrap_err();
    assert!(e.is_limit());
    assert!(e.to_string().contains("element 0 alone needs"), "{e}");
    // One element per chunk when allowed.
    let loose = SplitOptions {
        allow_oversized: true,
        ..Default::default()
    };
    let chunks = check(&doc, 10, &loose).unwrap();
    assert_eq!(chunks.len(), 50);
    // An empty array that does not fit.
    let empty = to_vec(&Value::Array(vec![]), &EncoderOptions::default()).unwrap();
    assert!(split(&empty, 3, &SplitOptions::default(), &Limits::default()).is_err());
    assert_eq!(
        split(&empty, 100, &SplitOptions::default(), &Limits::default()).unwrap(),
        vec![empty]
    );
}

#[test]
fn every_boundary_of_a_small_dedupe_document() {
    // Each element repeats strings and keys of earlier ones; split at every size from tiny to
    // whole so that every element boundary is a chunk boundary somewhere.
    let v = events_value(40, 6);
    let doc = encode(&v, 5, Compression::None, true);
    let loose = SplitOptions {
        allow_oversized: true,
        ..Default::default()
    };
    let mut max = 40;
    while max < doc.len() + 10 {
        check(&doc, max, &loose).unwrap();
        max += 1 + max / 20;
    }
}

#[test]
fn user_header_is_kept() {
    // Protocol 3, user header bitfield 1 with the body `SHORT_BINARY "meta"`.
    let v = events_value(200, 7);
    let plain = encode(&v, 3, Compression::None, true);
    let mut doc = b"=\xF3rl\x03\x06\x01\x64meta".to_vec();
    doc.extend_from_slice(&plain[6..]);
    let chunks = check(&doc, 8000, &SplitOptions::default()).unwrap();
    assert!(chunks.len() > 3);
    for c in &chunks {
        let d = sereal::Decoder::new().decode_document(c).unwrap();
        assert_eq!(d.user_header, Some(Value::Binary(b"meta".to_vec())));
    }
    let opts = SplitOptions {
        keep_user_header: false,
        ..Default::default()
    };
    for c in check(&doc, 8000, &opts).unwrap() {
        assert_eq!(
            sereal::Decoder::new()
                .decode_document(&c)
                .unwrap()
                .user_header,
            None
        );
    }
}

// ---------------------------------------------------------------------------------------------
// The real document from Perl's splitter.

fn big_srl() -> Vec<u8> {
    std::fs::read(common::vectors_dir().join("Perl_Splitter/big.srl")).expect("big.srl")
}

#[test]
fn perl_splitter_big_srl() {
    let doc = big_srl();
    for max in [100_000, 500_000] {
        let chunks = check(&doc, max, &SplitOptions::default()).unwrap();
        eprintln!(
            "big.srl ({} bytes) at {max}: {} chunks, fill {:.3}",
            doc.len(),
            chunks.len(),
            fill(&chunks, max)
        );
        assert!(chunks.len() >= doc.len() / max);
    }
    // Recompressed output (the production form).
    for max in [100_000, 500_000] {
        let opts = SplitOptions {
            compression: Some(Compression::Zlib { level: 6 }),
            ..Default::default()
        };
        let chunks = check(&doc, max, &opts).unwrap();
        eprintln!(
            "big.srl as zlib at {max}: {} chunks, fill {:.3}",
            chunks.len(),
            fill(&chunks, max)
        );
        assert!(chunks
            .iter()
            .all(|c| header_of(c).1 == sereal::header::Encoding::Zlib));
    }
}

/// An events document of at least `bytes` in the original form (protocol 3, zlib, dedupe).
fn original_events_of_size(bytes: usize) -> Value {
    let sample = to_vec(
        &events_value(2_000, 100),
        &EncoderOptions::original_events(),
    )
    .unwrap();
    let wanted = 2_000 * bytes / sample.len() + 1;
    let mut items = Vec::new();
    let mut seed = 100;
    while items.len() < wanted {
        if let Value::Array(more) = events_value(20_000.min(wanted - items.len()), seed) {
            items.extend(more);
        }
        seed += 1;
    }
    let mut items = Value::Array(items);
    while to_vec(&items, &EncoderOptions::original_events())
        .unwrap()
        .len()
        < bytes
    {
        if let (Value::Array(all), Value::Array(more)) =
            (&mut items, events_value(wanted / 8, seed))
        {
            all.extend(more);
        }
        seed += 1;
    }
    items
}

/// Multi-megabyte compressed documents (the production forms) at the production chunk size:
/// valid chunks, the same whether candidates are compressed on one thread or on all, and a
/// compressed document cut into uncompressed chunks. (How fast: `make bench`, the splitter table.)
#[test]
fn big_compressed_documents_split_the_same_on_one_thread_and_on_all() {
    const MAX: usize = 500_000;
    let items = original_events_of_size(2_000_000);
    let zlib = to_vec(&items, &EncoderOptions::original_events()).unwrap();
    let zstd = encode(&items, 5, Compression::Zstd { level: 3 }, false);
    {
        let opts = SplitOptions {
            compression: Some(Compression::None),
            ..Default::default()
        };
        let chunks = check(&zlib, MAX, &opts).unwrap();
        assert!(chunks.len() > zlib.len() / MAX, "{}", chunks.len());
        assert!(chunks
            .iter()
            .all(|c| header_of(c).1 == sereal::header::Encoding::Raw));
    }
    for (name, d) in [("zlib+dedupe p3", &zlib), ("zstd p5", &zstd)] {
        assert!(d.len() > 3 * MAX, "{name}: {} bytes", d.len());
        let mut results = Vec::new();
        for threads in [1, 0] {
            let opts = SplitOptions {
                threads,
                ..Default::default()
            };
            let chunks = split(d, MAX, &opts, &Limits::default()).unwrap();
            eprintln!(
                "{name} {} bytes ({} events) at {MAX}, threads {threads}: {} chunks, fill {:.3}",
                d.len(),
                items.as_array().map_or(0, |a| a.len()),
                chunks.len(),
                fill(&chunks, MAX)
            );
            assert!(chunks.len() > d.len() / MAX, "{name}: {}", chunks.len());
            results.push(chunks);
        }
        assert_eq!(
            results[0], results[1],
            "{name}: chunks do not depend on the number of threads"
        );
        check_chunks(d, MAX, &SplitOptions::default(), &results[0]);
    }
}

#[test]
fn chunks_do_not_depend_on_threads() {
    let v = events_value(3000, 12);
    let doc = to_vec(&v, &EncoderOptions::original_events()).unwrap();
    for max in [3000, 20_000] {
        let with_threads = |threads| {
            let opts = SplitOptions {
                threads,
                ..Default::default()
            };
            split(&doc, max, &opts, &Limits::default()).unwrap()
        };
        let one = with_threads(1);
        let many = with_threads(3);
        assert!(one.len() > 2);
        assert_eq!(one, many);
    }
}

// ---------------------------------------------------------------------------------------------
// Documents made by the Perl reference, decoded again by it.

const PERL_PRELUDE: &str = r#"
use strict; use warnings;
use Sereal::Encoder qw(SRL_SNAPPY SRL_ZLIB SRL_ZSTD);
use Sereal::Decoder;
use Scalar::Util qw(blessed reftype refaddr weaken);
package My::Frozen;
sub new { my ($class, %a) = @_; return bless {%a}, $class }
sub FREEZE { my ($self, $s) = @_; return ($self->{name}, $self->{n}) }
sub THAW { my ($class, $s, @v) = @_; return bless [@v], $class }
package main;
"#;

/// Events with references across elements: a shared hash and array (REFP), a shared scalar ref,
/// weak refs, blessed objects of repeated classes (OBJECTV), repeated strings, and short chains of
/// elements pointing at the previous element.
const PERL_EVENTS: &str = r#"
my $sh = { name => "shared hash", list => [1, 2, 3] };
my $sa = [qw(alpha beta gamma)];
my $x = "a shared scalar";
my @ev;
for my $i (1 .. 400) {
    my $e = {
        id => $i,
        shared => $sh,
        arr => $sa,
        sref => \$x,
        obj => bless({ v => $i, name => "object number " . ($i % 7) }, "My::Class" . ($i % 3)),
        text => "event text that repeats " . ($i % 5),
        uni => "caf\x{e9} \x{2615} " . ($i % 4),
        filler => ("f" x (20 + $i % 40)),
        nested => { deep => [ "value " . ($i % 9), { k => "value " . ($i % 9) } ] },
        re => ($i % 4 ? qr/event \d+ (x|y)/i : qr/other/),
    };
    $e->{prev} = $ev[-1] if @ev && $i % 10;
    if ($i % 3 == 0) { $e->{weak} = $sh; weaken($e->{weak}); }
    push @ev, $e;
}
\@ev
"#;

const PERL_FROZEN: &str = r#"
my @ev = map { { id => $_, f => My::Frozen->new(name => "frozen " . ($_ % 4), n => $_), g => My::Frozen->new(name => "other", n => 1) } } 1 .. 300;
\@ev
"#;

/// Runs `script` after the prelude, `input` on its stdin; its stdout.
fn perl(script: &str, input: &[u8]) -> Vec<u8> {
    sluice_test_support::perl::run_perl(
        None,
        &format!(
            "{PERL_PRELUDE}
{script}"
        ),
        &[],
        input,
    )
}

fn perl_encode(data: &str, opts: &str) -> Vec<u8> {
    perl(
        &format!("my $data = do {{ {data} }}; binmode STDOUT; print Sereal::Encoder->new({{ {opts} }})->encode($data);"),
        b"",
    )
}

/// Decode each framed document in Perl and print it as canonical JSON, one line each.
const PERL_RENDER: &str = r#"
use JSON::PP; use re ();
my $json = JSON::PP->new->utf8->canonical->allow_nonref;
my $dec = Sereal::Decoder->new;
sub r {
    my ($v, $d) = @_;
    die "too deep\n" if $d > 300;
    return $v unless ref $v;
    my $c = blessed $v;
    if (re::is_regexp($v)) {
        my ($p, $m) = re::regexp_pattern($v);
        my $o = { '$regexp' => $p, '$flags' => $m };
        return (!defined $c || $c eq 'Regexp') ? $o : { '$object' => $c, '$value' => $o };
    }
    my $t = reftype $v;
    my $o = $t eq 'ARRAY' ? [ map { r($_, $d + 1) } @$v ]
          : $t eq 'HASH' ? { map { ($_ => r($v->{$_}, $d + 1)) } keys %$v }
          : ($t eq 'SCALAR' || $t eq 'REF') ? r($$v, $d + 1)
          : die "type $t\n";
    return defined $c ? { '$object' => $c, '$value' => $o } : $o;
}
binmode STDIN; binmode STDOUT;
while (read(STDIN, my $len, 8) == 8) {
    $len = unpack "Q<", $len;
    read(STDIN, my $doc, $len) == $len or die "short read\n";
    print $json->encode(r($dec->decode($doc), 0)), "\n";
}
"#;

fn frame(docs: &[&[u8]]) -> Vec<u8> {
    let mut out = Vec::new();
    for d in docs {
        out.extend_from_slice(&(d.len() as u64).to_le_bytes());
        out.extend_from_slice(d);
    }
    out
}

/// Numbers compared as f64 (Perl prints `1.0` as `1`), everything else as is.
fn normalize(j: &serde_json::Value) -> serde_json::Value {
    use serde_json::Value as J;
    match j {
        J::Number(n) => J::from(n.as_f64().unwrap()),
        J::Array(a) => J::Array(a.iter().map(normalize).collect()),
        J::Object(m) => J::Object(m.iter().map(|(k, v)| (k.clone(), normalize(v))).collect()),
        other => other.clone(),
    }
}

/// Perl decodes the original and every chunk: the chunks' arrays concatenate to the original's,
/// and each chunk renders as our decoder's JSON of it.
fn perl_agrees(doc: &[u8], chunks: &[Vec<u8>]) {
    let mut docs: Vec<&[u8]> = vec![doc];
    docs.extend(chunks.iter().map(Vec::as_slice));
    let out = perl(PERL_RENDER, &frame(&docs));
    let lines: Vec<serde_json::Value> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .map(|l| serde_json::from_slice(l).unwrap())
        .collect();
    assert_eq!(lines.len(), docs.len());
    let original = lines[0].as_array().unwrap().clone();
    let mut all = Vec::new();
    for (i, (line, chunk)) in lines[1..].iter().zip(chunks).enumerate() {
        let ours = normalize(&sereal::json::to_json_value(&from_slice(chunk).unwrap()));
        assert!(normalize(line) == ours, "chunk {i}: Perl and Rust disagree");
        all.extend(line.as_array().unwrap().iter().cloned());
    }
    assert!(
        all == original,
        "Perl: chunks do not concatenate to the original"
    );
}

#[test]
fn perl_documents_with_cross_element_references() {
    let cases: &[(&str, &str)] = &[
        ("", "protocol 5 raw"),
        ("aliased_dedupe_strings => 1", "ALIAS"),
        ("dedupe_strings => 1, compress => SRL_ZLIB", "zlib + COPY"),
        ("dedupe_strings => 1, compress => SRL_ZSTD", "zstd"),
        ("protocol_version => 1", "v1 offsets"),
        (
            "protocol_version => 1, compress => SRL_SNAPPY, dedupe_strings => 1",
            "v1 snappy",
        ),
        (
            "protocol_version => 2, compress => SRL_SNAPPY, aliased_dedupe_strings => 1",
            "v2 snappy",
        ),
        ("protocol_version => 3, dedupe_strings => 1", "v3"),
    ];
    for (i, (opts, name)) in cases.iter().enumerate() {
        let doc = perl_encode(PERL_EVENTS, opts);
        let mut ok_sizes = Vec::new();
        for max in [2500, 4000, 9000, 30_000] {
            match check(&doc, max, &SplitOptions::default()) {
                Ok(chunks) => {
                    assert!(doc.len() <= max || chunks.len() > 1);
                    ok_sizes.push((max, chunks));
                }
                Err(e) => panic!("{name} at {max}: {e}"),
            }
        }
        // Perl decodes the chunks too (a few cases, to keep the test fast).
        perl_agrees(&doc, &ok_sizes[0].1);
        if i % 2 == 0 {
            perl_agrees(&doc, &ok_sizes[1].1);
        }
        eprintln!(
            "{name}: {} bytes, chunk counts {:?}",
            doc.len(),
            ok_sizes
                .iter()
                .map(|(m, c)| (*m, c.len()))
                .collect::<Vec<_>>()
        );
    }
}

#[test]
fn cross_chunk_references_are_rewritten_or_inlined() {
    // In the original, every later element refers back into the first ones (REFP to the shared
    // hash, array and scalar, ALIAS to repeated strings, OBJECTV to class names, COPY to keys).
    // In every chunk those must name items of the same chunk: check the tags and offsets.
    let doc = perl_encode(PERL_EVENTS, "aliased_dedupe_strings => 1");
    let original = sereal::dump::dump(&doc, &Limits::default()).unwrap();
    for tag in ["REFP", "ALIAS", "OBJECTV", "COPY", "WEAKEN"] {
        assert!(original.contains(tag), "test data lacks {tag}");
    }
    let chunks = check(&doc, 3000, &SplitOptions::default()).unwrap();
    assert!(chunks.len() > 10);
    for (i, c) in chunks.iter().enumerate() {
        let listing = sereal::dump::dump(c, &Limits::default()).unwrap();
        // Tracked items, classes and a shared hash are re-created in each chunk.
        assert!(listing.contains("[tracked]"), "chunk {i}");
        assert!(
            listing
                .lines()
                .any(|l| l.split_whitespace().nth(1) == Some("OBJECT")),
            "chunk {i}"
        );
        // Every back-reference points at an earlier offset of this chunk's body.
        let mut offsets = std::collections::HashSet::new();
        for line in listing.lines().skip(1) {
            let mut words = line.split_whitespace();
            let at: usize = words.next().unwrap().parse().unwrap();
            offsets.insert(at);
            let tag = words.next().unwrap();
            if matches!(tag, "REFP" | "ALIAS" | "COPY") {
                let target: usize = line
                    .rsplit("-> ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    target < at && offsets.contains(&target),
                    "chunk {i}: {line}"
                );
            }
            if tag == "OBJECTV" {
                let target: usize = line
                    .rsplit("class at ")
                    .next()
                    .unwrap()
                    .split_whitespace()
                    .next()
                    .unwrap()
                    .parse()
                    .unwrap();
                assert!(
                    target < at && offsets.contains(&target),
                    "chunk {i}: {line}"
                );
            }
        }
    }
}

#[test]
fn perl_documents_recompressed() {
    let doc = perl_encode(PERL_EVENTS, "aliased_dedupe_strings => 1");
    for (protocol, compression) in [
        (3, Compression::Zlib { level: 6 }),
        (5, Compression::Zstd { level: 3 }),
        (1, Compression::None),
    ] {
        let opts = SplitOptions {
            protocol: Some(protocol),
            compression: Some(compression),
            compress_threshold: 0,
            ..Default::default()
        };
        let chunks = check(&doc, 2500, &opts).unwrap();
        perl_agrees(&doc, &chunks);
    }
}

#[test]
fn perl_frozen_objects() {
    let doc = perl_encode(PERL_FROZEN, "freeze_callbacks => 1, dedupe_strings => 1");
    let chunks = check(&doc, 900, &SplitOptions::default()).unwrap();
    assert!(chunks.len() > 3);
    perl_agrees(&doc, &chunks);
}

#[test]
fn perl_weak_references_keep_their_referents() {
    // Each node is first reached through a weak reference, and held strongly only by the next
    // element: a chunk boundary between the two must not leave the weak one holding nothing.
    let data = r#"
        my @nodes = map { { node => $_, payload => "n" x 30 } } 1 .. 80;
        my @ev;
        for my $i (0 .. 79) {
            my $w = [ "weak $i", $nodes[$i] ]; weaken($w->[1]); push @ev, $w;
            push @ev, [ "strong $i", $nodes[$i] ];
        }
        \@ev
    "#;
    let doc = perl_encode(data, "");
    for max in [200, 333, 1000] {
        let chunks = check(&doc, max, &SplitOptions::default()).unwrap();
        perl_agrees(&doc, &chunks);
    }
}

#[test]
fn perl_cycles_survive() {
    // Our decoder refuses cycles, so only Perl checks these chunks: each element refers to
    // itself, and all refer to a shared ring that refers to itself.
    let data = r#"
        my $ring = { name => "ring" }; $ring->{me} = $ring;
        my @ev;
        for my $i (1 .. 200) { my $e = { id => $i, ring => $ring, pad => "x" x 30 }; $e->{self} = $e; push @ev, $e }
        \@ev
    "#;
    for opts in ["", "dedupe_strings => 1, compress => SRL_ZLIB"] {
        let doc = perl_encode(data, opts);
        let chunks = split(&doc, 700, &SplitOptions::default(), &Limits::default()).unwrap();
        assert!(chunks.len() > 5);
        for c in &chunks {
            assert!(c.len() <= 700);
        }
        let docs: Vec<&[u8]> = chunks.iter().map(Vec::as_slice).collect();
        let out = perl(
            r#"
            my $dec = Sereal::Decoder->new; my ($n, $next) = (0, 1);
            binmode STDIN;
            while (read(STDIN, my $len, 8) == 8) {
                $len = unpack "Q<", $len; read(STDIN, my $doc, $len) == $len or die;
                my $a = $dec->decode($doc);
                my $ring = $a->[0]{ring};
                $ring->{me} == $ring or die "ring lost its cycle\n";
                for my $e (@$a) {
                    $e->{self} == $e or die "self-reference broken\n";
                    $e->{ring} == $ring or die "ring not shared within the chunk\n";
                    $e->{id} == $next++ or die "order\n";
                    $n++;
                }
            }
            print "$n\n";
            "#,
            &frame(&docs),
        );
        assert_eq!(String::from_utf8(out).unwrap().trim(), "200");
    }
}

// ---------------------------------------------------------------------------------------------
// Hostile input.

fn err_of(doc: &[u8], max: usize) -> sereal::Error {
    split(doc, max, &SplitOptions::default(), &Limits::default()).expect_err("must fail")
}

/// A raw protocol 3 document with the given body.
fn raw_doc(body: &[u8]) -> Vec<u8> {
    let mut d = b"=\xF3rl\x03\x00".to_vec();
    d.extend_from_slice(body);
    d
}

#[test]
fn truncated_documents_fail_cleanly() {
    let v = events_value(30, 9);
    let mut docs = vec![
        encode(&v, 5, Compression::None, true),
        to_vec(&v, &EncoderOptions::original_events()).unwrap(),
        encode(&v, 5, Compression::Zstd { level: 3 }, false),
        encode(&v, 3, Compression::Snappy, true),
        perl_encode(PERL_EVENTS, "aliased_dedupe_strings => 1"),
    ];
    docs.push(perl_encode(PERL_EVENTS, "protocol_version => 1"));
    for doc in &docs {
        let step = (doc.len() / 400).max(1);
        let mut cut = 0;
        while cut < doc.len() {
            for max in [100, usize::MAX] {
                let e = split(
                    &doc[..cut],
                    max,
                    &SplitOptions::default(),
                    &Limits::default(),
                );
                assert!(
                    e.is_err(),
                    "prefix of {cut} bytes of {} accepted",
                    doc.len()
                );
            }
            cut += if cut < 64 { 1 } else { step };
        }
    }
}

#[test]
fn bad_references_and_bodies_fail_cleanly() {
    // Body offsets are 1-based: the first body byte is offset 1.
    let cases: &[(&[u8], &str)] = &[
        // ARRAYREF_2 [COPY -> 4 (forward), "abc"]
        (b"\x42\x2f\x04\x63abc", "does not point back"),
        // COPY to itself
        (b"\x42\x2f\x02\x63abc", "does not point back"),
        // REFP to an untracked string
        (b"\x42\x63abc\x29\x02", "does not point back"),
        // REFP to the top-level array (tracked ARRAYREF)
        (b"\xc2\x63abc\x29\x01", "does not point back"),
        // COPY of a COPY
        (b"\x43\x64abcd\x2f\x02\x2f\x07", "COPY refers"),
        // hash key COPY of a non-string
        (b"\x42\x01\x51\x2f\x02\x01", "hash key must be a string"),
        // OBJECTV naming a non-string
        (b"\x42\x01\x2d\x02\x01", "class name must be a string"),
        // not arrays
        (b"\x51\x61a\x01", "not an array"),
        (b"\x28\x51\x61a\x01", "not an array"),
        (b"\x63abc", "not an array"),
        (b"\x01", "not an array"),
        // trailing bytes after the array
        (b"\x41\x01\x01", "trailing"),
        // bad tags
        (b"\x41\x3e\x00", "invalid tag"),
        (b"\x41\x36", "invalid tag"),
        (b"\x41\x3c\x01", "MANY"),
        // count larger than the input
        (b"\x28\x2b\x05\x01", "end of input"),
        (b"\x41\x26\x0a\x61", "end of input"),
        // varint overflow
        (
            b"\x41\x20\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\x01",
            "varint",
        ),
    ];
    for (body, msg) in cases {
        for max in [3, 1000] {
            let e = err_of(&raw_doc(body), max);
            assert!(e.to_string().contains(msg), "{body:x?}: {e} (wanted {msg})");
        }
    }
    // Not Sereal at all.
    assert!(err_of(b"hello world", 3).to_string().contains("magic"));
    assert!(err_of(b"", 3).is_eof());
    // A forward COPY deep in a document, reported at its offset.
    let mut body = b"\x28\x2b\x82\x01".to_vec(); // REFN ARRAY count 130
    for _ in 0..129 {
        body.extend_from_slice(b"\x64abcd");
    }
    body.extend_from_slice(b"\x2f\xff\x10"); // COPY -> far ahead
    let mut c = raw_doc(&body);
    let e = err_of(&c, 100);
    assert!(e.to_string().contains("does not point back"), "{e}");
    assert_eq!(
        e.offset(),
        6 + 4 + 129 * 5,
        "offset of the COPY tag in the document"
    );
    c.truncate(c.len() - 2);
    assert!(err_of(&c, 100).is_eof());
}

#[test]
fn depth_bombs_fail_cleanly() {
    // 100000 nested ARRAYREF_1 inside the top-level array.
    let mut body = b"\x41".to_vec();
    body.extend_from_slice(&[0x41; 100_000]);
    body.push(0x01);
    let e = err_of(&raw_doc(&body), 100);
    assert!(e.is_limit(), "{e}");
    // A chain of REFPs where each inlined target holds the next: fine in the original, too deep
    // once inlined into one chunk with a small depth limit.
    let data = r#"
        my @ev; my $prev;
        for my $i (1 .. 60) { my $e = { id => $i, prev => $prev, pad => "p" x 40 }; $prev = $e; push @ev, $e }
        \@ev
    "#;
    let doc = perl_encode(data, "");
    let limits = Limits {
        max_depth: 20,
        ..Limits::default()
    };
    let e = split(&doc, 400, &SplitOptions::default(), &limits).expect_err("too deep once inlined");
    assert!(e.is_limit(), "{e}");
    // With default limits the whole chain is inlined where needed.
    let loose = SplitOptions {
        allow_oversized: true,
        ..Default::default()
    };
    check(&doc, 400, &loose).unwrap();
}

#[test]
fn mutated_documents_never_panic() {
    let v = events_value(12, 11);
    let seeds = [
        encode(&v, 5, Compression::None, true),
        encode(&v, 3, Compression::None, false),
        to_vec(&v, &EncoderOptions::original_events()).unwrap(),
        encode(&v, 5, Compression::Zstd { level: 3 }, true),
        perl_encode(
            PERL_EVENTS.replace("1 .. 400", "1 .. 12").as_str(),
            "aliased_dedupe_strings => 1",
        ),
        perl_encode(
            PERL_EVENTS.replace("1 .. 400", "1 .. 12").as_str(),
            "dedupe_strings => 1",
        ),
    ];
    let mut r = Rng(0x5eed);
    let mut accepted = 0;
    for round in 0..6000 {
        let mut doc = seeds[round % seeds.len()].clone();
        for _ in 0..(1 + r.below(4)) {
            let i = r.below(doc.len() as u64) as usize;
            match r.below(4) {
                0 => doc[i] = r.next() as u8,
                1 => doc[i] ^= 1 << r.below(8),
                2 => {
                    doc.remove(i);
                }
                _ => doc.insert(i, r.next() as u8),
            }
            if doc.is_empty() {
                break;
            }
        }
        let max = [50, 300, 2000][round % 3];
        if let Ok(chunks) = split(
            &doc,
            max,
            &SplitOptions {
                allow_oversized: true,
                ..Default::default()
            },
            &Limits::default(),
        ) {
            accepted += 1;
            // Whatever the splitter accepts and our decoder accepts must round-trip.
            if let Ok(Value::Array(original)) = from_slice(&doc) {
                if doc.len() > max {
                    let mut all = Vec::new();
                    for c in &chunks {
                        match from_slice(c) {
                            Ok(Value::Array(items)) => all.extend(items),
                            other => panic!("round {round}: chunk does not decode: {other:?}"),
                        }
                    }
                    let same = all.len() == original.len()
                        && all.iter().zip(&original).all(|(a, b)| {
                            a == b || sereal::json::to_string(a) == sereal::json::to_string(b)
                        });
                    assert!(same, "round {round}: chunks differ from the original");
                }
            }
        }
    }
    eprintln!("mutation rounds accepted: {accepted}");
}
