//! Against the Perl reference (`Sereal::Encoder` / `Sereal::Decoder` 5.003, `Digest::SHA`):
//! it reads our blobs (trailer, checksum, decode), and it writes the same `Original` document.

mod common;

use std::ffi::OsStr;
use std::path::PathBuf;

use common::{json_diff, mixed_events, run_perl, to_json, web_events};
use sereal::{Limits, Value};
use sluice_blob::{Blob, BlobBuilder, BlobOptions, Profile};
use sluice_test_support::perl::require_perl_sereal;

/// Reads each blob file named on the command line: strips the 24-byte trailer, checks `=chk` and
/// the SHA-1 with Digest::SHA, decodes with Sereal::Decoder, prints one JSON line per blob
/// (Render.pm: exact numbers, core booleans as true/false).
const PERL_READ: &str = r#"
use strict; use warnings;
use Digest::SHA qw(sha1);
use Sereal::Decoder ();
use Render;
binmode STDOUT;
for my $path (@ARGV) {
    open my $fh, '<:raw', $path or die "open $path: $!";
    my $blob = do { local $/; <$fh> };
    die "$path: shorter than the trailer\n" if length($blob) < 24;
    my $trailer = substr($blob, -24);
    my $srl = substr($blob, 0, length($blob) - 24);
    die "$path: no =chk trailer\n" unless substr($trailer, 0, 4) eq '=chk';
    die "$path: checksum mismatch\n" unless sha1($srl) eq substr($trailer, 4);
    my $events = Sereal::Decoder->new->decode($srl);
    die "$path: not an array\n" unless ref $events eq 'ARRAY';
    print Render::render_json($events);
}
"#;

/// Encodes the JSON events file ARGV[0] with the original options (ARGV[2]: canonical 0/1) into
/// ARGV[1]. JSON booleans become Perl's own true/false (aliased, so the reference writes
/// TRUE/FALSE as it does for `!!1`); numbers are decoded exactly (Render::decode_json_exact).
const PERL_ENCODE: &str = r#"
use strict; use warnings;
use experimental 'refaliasing';
use Scalar::Util qw(blessed);
use Sereal::Encoder qw(SRL_ZLIB);
use Render;
my ($in, $out, $canonical) = @ARGV;
open my $fh, '<:raw', $in or die "open $in: $!";
my $json = do { local $/; <$fh> };
my $events = Render::decode_json_exact($json);
sub is_jbool { blessed($_[0]) && $_[0]->isa('JSON::PP::Boolean') }
sub core_bools {
    my ($d) = @_;
    if (ref $d eq 'ARRAY') {
        for my $i (0 .. $#$d) {
            my $v = $d->[$i];
            if (is_jbool($v)) { if ($v) { \$d->[$i] = \!!1 } else { \$d->[$i] = \!!0 } }
            elsif (ref $v) { core_bools($v) }
        }
    } elsif (ref $d eq 'HASH') {
        for my $k (keys %$d) {
            my $v = $d->{$k};
            if (is_jbool($v)) { if ($v) { \$d->{$k} = \!!1 } else { \$d->{$k} = \!!0 } }
            elsif (ref $v) { core_bools($v) }
        }
    }
}
core_bools($events);
my $enc = Sereal::Encoder->new({ protocol_version => 3, compress => SRL_ZLIB, dedupe_strings => 1,
    ($canonical ? (canonical => 1) : ()) });
my $srl = $enc->encode($events);
open my $oh, '>:raw', $out or die "open $out: $!";
print {$oh} $srl;
close $oh or die;
"#;

fn write_blobs(dir: &std::path::Path, tag: &str, blobs: &[Blob]) -> Vec<PathBuf> {
    blobs
        .iter()
        .map(|b| {
            let p = dir.join(format!("{tag}.{}.blob", b.index()));
            std::fs::write(&p, b.as_bytes()).unwrap();
            p
        })
        .collect()
}

#[test]
fn perl_reads_our_blobs_and_chunks() {
    require_perl_sereal();
    let dir = tempfile::tempdir().unwrap();
    let events = mixed_events(21, 3_000);
    for profile in [Profile::Original, Profile::default()] {
        for limit in [sluice_blob::DEFAULT_CHUNK_LIMIT, 60_000] {
            let opts = BlobOptions {
                profile,
                chunk_limit: limit,
                ..BlobOptions::default()
            };
            let blobs = BlobBuilder::new(opts).unwrap().build(&events).unwrap();
            if limit < sluice_blob::DEFAULT_CHUNK_LIMIT {
                assert!(blobs.len() > 2, "{profile}: {} chunks", blobs.len());
            }
            let paths = write_blobs(dir.path(), &format!("{profile}-{limit}"), &blobs);
            let refs: Vec<&OsStr> = paths.iter().map(|p| p.as_os_str()).collect();
            let out = run_perl(PERL_READ, &refs);
            let lines: Vec<&[u8]> = out
                .split(|&b| b == b'\n')
                .filter(|l| !l.is_empty())
                .collect();
            assert_eq!(lines.len(), blobs.len(), "{profile}: one line per blob");
            for (b, line) in blobs.iter().zip(lines) {
                let theirs: serde_json::Value = serde_json::from_slice(line).unwrap();
                let ours = Blob::parse(b.as_bytes())
                    .unwrap()
                    .decode(&Limits::default())
                    .unwrap();
                if let Some(d) = json_diff(&theirs, &to_json(&ours), "$") {
                    panic!(
                        "{profile} chunk {}: Perl's decoding differs from ours: {d}",
                        b.index()
                    );
                }
            }
        }
    }
}

/// The events as the JSON text handed to Perl, and the same events as we read that text.
fn events_via_json(events: &[Value]) -> (Vec<u8>, Vec<Value>) {
    let text = serde_json::to_vec(&to_json(events)).unwrap();
    let ours = match sereal::json::from_json_slice(&text).unwrap() {
        Value::Array(v) => v,
        other => panic!("{other:?}"),
    };
    common::assert_same_events(&ours, events, "JSON round trip");
    (text, ours)
}

fn perl_encode(dir: &std::path::Path, json: &[u8], canonical: bool) -> Vec<u8> {
    let input = dir.join(format!("events-{canonical}.json"));
    let output = dir.join(format!("perl-{canonical}.srl"));
    std::fs::write(&input, json).unwrap();
    let flag = OsStr::new(if canonical { "1" } else { "0" });
    run_perl(PERL_ENCODE, &[input.as_os_str(), output.as_os_str(), flag]);
    std::fs::read(&output).unwrap()
}

fn header_bytes(doc: &[u8]) -> &[u8] {
    let h = sereal::header::parse(doc).unwrap();
    &doc[..h.body_offset]
}

#[test]
fn perl_encoder_writes_the_same_original_document_canonical() {
    require_perl_sereal();
    let dir = tempfile::tempdir().unwrap();
    for (name, events) in [
        ("web", web_events(31, 1_500)),
        ("mixed", mixed_events(32, 1_500)),
        ("tiny", web_events(33, 1)),
    ] {
        let (json, ours_in) = events_via_json(&events);
        let theirs = perl_encode(dir.path(), &json, true);
        let opts = BlobOptions {
            profile: Profile::Original,
            canonical: true,
            chunk_limit: usize::MAX,
            ..BlobOptions::default()
        };
        let blobs = BlobBuilder::new(opts).unwrap().build(&ours_in).unwrap();
        assert_eq!(blobs.len(), 1);
        let ours = blobs[0].sereal_part();
        assert_eq!(
            header_bytes(ours),
            header_bytes(&theirs),
            "{name}: headers differ"
        );
        let hdr = sereal::header::parse(ours).unwrap();
        if name != "tiny" {
            assert_eq!(hdr.encoding, sereal::header::Encoding::Zlib, "{name}");
        }
        let (ob, tb) = (
            sereal::de::body_bytes(ours, &Limits::default()).unwrap(),
            sereal::de::body_bytes(&theirs, &Limits::default()).unwrap(),
        );
        if ob != tb {
            let at = ob
                .iter()
                .zip(&tb)
                .position(|(a, b)| a != b)
                .unwrap_or(ob.len().min(tb.len()));
            panic!(
                "{name}: decompressed bodies differ at byte {at} (ours {} bytes, Perl's {})",
                ob.len(),
                tb.len()
            );
        }
    }
}

#[test]
fn perl_encoder_non_canonical_same_header_same_data() {
    require_perl_sereal();
    let dir = tempfile::tempdir().unwrap();
    let events = mixed_events(41, 2_000);
    let (json, ours_in) = events_via_json(&events);
    let theirs = perl_encode(dir.path(), &json, false);
    let blobs = BlobBuilder::with_profile(Profile::Original)
        .unwrap()
        .build(&ours_in)
        .unwrap();
    assert_eq!(blobs.len(), 1);
    let ours = blobs[0].sereal_part();
    assert_eq!(header_bytes(ours), header_bytes(&theirs));
    // Perl's hash order is its own: compare what the documents hold.
    let a = sereal::from_slice(ours).unwrap();
    let b = sereal::from_slice(&theirs).unwrap();
    if let Some(d) = json_diff(
        &sereal::json::to_json_value(&a),
        &sereal::json::to_json_value(&b),
        "$",
    ) {
        panic!("our document and Perl's hold different data: {d}");
    }
    // And Perl's document, given our trailer, is a blob we read.
    let blob = sluice_blob::with_trailer(&theirs);
    let got = Blob::parse(&blob)
        .unwrap()
        .decode(&Limits::default())
        .unwrap();
    common::assert_same_events(&got, &events, "Perl's document as a blob");
}

/// Like `PERL_READ`, and also decodes with `decode_with_header`: the body must be the same, and
/// the user header (our element index: one binary string) is printed as the hex of its first 5
/// bytes (`none` without one) on a line after the body's JSON.
const PERL_READ_WITH_HEADER: &str = r#"
use strict; use warnings;
use Digest::SHA qw(sha1);
use Sereal::Decoder ();
use Render;
binmode STDOUT;
for my $path (@ARGV) {
    open my $fh, '<:raw', $path or die "open $path: $!";
    my $blob = do { local $/; <$fh> };
    my $srl = substr($blob, 0, length($blob) - 24);
    die "$path: checksum mismatch\n" unless sha1($srl) eq substr($blob, -20);
    my $dec = Sereal::Decoder->new;
    die "$path: does not look like Sereal\n" unless Sereal::Decoder::looks_like_sereal($srl);
    my $events = $dec->decode($srl);
    my ($header, $body) = @{ $dec->decode_with_header($srl) };
    my $json = Render::render_json($events);
    die "$path: decode_with_header's body differs\n" unless Render::render_json($body) eq $json;
    print $json;
    print defined $header ? (ref $header ? "ref\n" : unpack("H*", substr($header, 0, 5)) . "\n") : "none\n";
}
"#;

#[test]
fn perl_reads_documents_with_an_element_index_unchanged() {
    require_perl_sereal();
    let dir = tempfile::tempdir().unwrap();
    let events = mixed_events(51, 2_000);
    // The default profile (indexed, also when split), and the original v3 + zlib form with an
    // index added (as an original-profile writer with an index would write it).
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    for limit in [sluice_blob::DEFAULT_CHUNK_LIMIT, 60_000] {
        let opts = BlobOptions {
            chunk_limit: limit,
            ..BlobOptions::default()
        };
        for b in BlobBuilder::new(opts).unwrap().build(&events).unwrap() {
            blobs.push((format!("default-{limit}.{}", b.index()), b.into_bytes()));
        }
    }
    let v3 = sereal::EncoderOptions {
        element_index: true,
        ..sereal::EncoderOptions::original_events()
    };
    let doc = sereal::to_vec(&Value::Array(events.clone()), &v3).unwrap();
    assert_eq!(sereal::header::parse(&doc).unwrap().version, 3);
    blobs.push(("original-indexed".into(), sluice_blob::with_trailer(&doc)));
    assert!(blobs.len() > 3);
    let mut paths = Vec::new();
    for (name, bytes) in &blobs {
        // Every one of them carries an index our reader uses.
        let blob = Blob::parse(bytes).unwrap();
        let mut scratch = Vec::new();
        let lazy = blob.lazy(&Limits::default(), &mut scratch).unwrap();
        assert!(
            matches!(lazy.element_index(), sereal::lazy::IndexUse::Used(_)),
            "{name}: {:?}",
            lazy.element_index()
        );
        let p = dir.path().join(format!("{name}.blob"));
        std::fs::write(&p, bytes).unwrap();
        paths.push(p);
    }
    let refs: Vec<&OsStr> = paths.iter().map(|p| p.as_os_str()).collect();
    let out = run_perl(PERL_READ_WITH_HEADER, &refs);
    let lines: Vec<&[u8]> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 2 * blobs.len(), "two lines per blob");
    let mut all = Vec::new();
    for ((name, bytes), pair) in blobs.iter().zip(lines.chunks(2)) {
        let theirs: serde_json::Value = serde_json::from_slice(pair[0]).unwrap();
        let ours = Blob::parse(bytes)
            .unwrap()
            .decode(&Limits::default())
            .unwrap();
        if let Some(d) = json_diff(&theirs, &to_json(&ours), "$") {
            panic!("{name}: Perl's decoding differs from ours: {d}");
        }
        // The user header Perl sees is our index: "SLIX" + version 1.
        assert_eq!(pair[1], b"534c495801", "{name}");
        if name.starts_with("default-60000") || name == "original-indexed" {
            all.extend(ours);
        }
    }
    // The split chunks together, and the v3 document, hold every event.
    common::assert_same_events(&all[..events.len()], &events, "chunks");
    common::assert_same_events(&all[events.len()..], &events, "v3 indexed");
}

#[test]
fn perl_reads_documents_whose_index_carries_origins() {
    require_perl_sereal();
    let dir = tempfile::tempdir().unwrap();
    let events = mixed_events(52, 2_000);
    // Each event's WAL record: runs of 1-40 events, mostly ascending, some without a record.
    let seqs: Vec<u64> = (0..events.len())
        .map(|i| {
            if i % 97 < 5 {
                0
            } else {
                10 + (i as u64 * 7 / 41)
            }
        })
        .collect();
    let mut blobs: Vec<(String, Vec<u8>)> = Vec::new();
    let mut want: Vec<Vec<u64>> = Vec::new();
    for limit in [sluice_blob::DEFAULT_CHUNK_LIMIT, 60_000] {
        let builder = BlobBuilder::new(BlobOptions {
            chunk_limit: limit,
            ..BlobOptions::default()
        })
        .unwrap();
        let mut enc = sereal::ArrayEncoder::new(builder.encoder_options().clone()).unwrap();
        for (e, &seq) in events.iter().zip(&seqs) {
            enc.push(e).unwrap();
            enc.push_origin(seq);
        }
        let mut doc = Vec::new();
        enc.finish_into(&mut doc).unwrap();
        let mut at = 0;
        for b in builder.build_document(&doc).unwrap() {
            let n = b.as_blob_ref().decode(&Limits::default()).unwrap().len();
            want.push(seqs[at..at + n].to_vec());
            at += n;
            blobs.push((format!("default-{limit}.{}", b.index()), b.into_bytes()));
        }
        assert_eq!(at, events.len());
    }
    assert!(blobs.len() > 3, "the 60 KB limit splits");
    let mut paths = Vec::new();
    for ((name, bytes), seqs) in blobs.iter().zip(&want) {
        let origins = Blob::parse(bytes).unwrap().origins();
        let got: Option<Vec<u64>> = origins.map(|o| o.seqs().collect());
        assert_eq!(got.as_ref(), Some(seqs), "{name}: its events' origins");
        let p = dir.path().join(format!("{name}.blob"));
        std::fs::write(&p, bytes).unwrap();
        paths.push(p);
    }
    let refs: Vec<&OsStr> = paths.iter().map(|p| p.as_os_str()).collect();
    let out = run_perl(PERL_READ_WITH_HEADER, &refs);
    let lines: Vec<&[u8]> = out
        .split(|&b| b == b'\n')
        .filter(|l| !l.is_empty())
        .collect();
    assert_eq!(lines.len(), 2 * blobs.len(), "two lines per blob");
    for ((name, bytes), pair) in blobs.iter().zip(lines.chunks(2)) {
        let theirs: serde_json::Value = serde_json::from_slice(pair[0]).unwrap();
        let ours = Blob::parse(bytes)
            .unwrap()
            .decode(&Limits::default())
            .unwrap();
        if let Some(d) = json_diff(&theirs, &to_json(&ours), "$") {
            panic!("{name}: Perl's decoding differs from ours: {d}");
        }
        // The user header Perl skips (and hands over as a string) is our index, version 2.
        assert_eq!(pair[1], b"534c495802", "{name}");
    }
}
