//! `sluice-bench`: throughput of our Sereal codec against the Perl reference
//! (`Sereal::Encoder` / `Sereal::Decoder`) on the same documents, in the same run.
//!
//! Run with `cargo run --release -p sluice-bench` (see `bench/README.md`; `--help` lists the
//! options). Prints a Markdown table of MB/s per case and direction, a table of the splitter
//! (`sereal::split`) beside the reference's decode + re-encode of the same documents, and a table
//! of sizes.
//! Exits non-zero only on errors (a failed encode/decode, a failed Perl run, bad arguments),
//! never because a target was missed.

// Decoded events are many small allocations; mimalloc halves the time spent in malloc/free
// compared with glibc (measured in bench/: plain event decode 85 -> 185 MB/s).
#[global_allocator]
static GLOBAL: mimalloc::MiMalloc = mimalloc::MiMalloc;

use std::hint::black_box;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::time::Instant;

use anyhow::{anyhow, bail, Context, Result};
use sereal::header::{self, Encoding};
use sereal::split::{split, SplitOptions};
use sereal::{Compression, Decoder, Encoder, EncoderOptions, Limits, Value};

/// The throughput target: ours at least this many times the reference, both directions.
const TARGET_RATIO: f64 = 2.0;

const USAGE: &str = "\
sluice-bench: Sereal codec throughput, ours vs the Perl reference

USAGE: cargo run --release -p sluice-bench -- [OPTIONS]

OPTIONS:
  --min-time SECS     minimum wall time of each timed loop (default 1.0)
  --min-iters N       minimum iterations of each timed loop (default 5)
  --reps N            repetitions per measurement; the median is reported (default 3)
  --events N          WEB events in the event documents (default 10000)
  --split-events N    WEB events in the splitter's documents (default 50000: ~3 MB compressed)
  --case TEXT         only run cases whose name contains TEXT (repeatable)
  --direction D       only measure `encode`, `decode` or `split` (e.g. under a profiler)
  --big PATH          the big.srl test vector (default: testdata/sereal/vectors/Perl_Splitter/big.srl)
  --perl-script PATH  the reference bench script (default: bench/perl/sereal_bench.pl)
  --no-perl           skip the Perl reference (its columns show n/a)
  --json PATH         also write the results as JSON to PATH
  --keep-docs         keep the temporary directory with the documents
  -h, --help          this text
";

#[derive(Debug, Clone)]
struct Args {
    min_time: f64,
    min_iters: u64,
    reps: usize,
    events: usize,
    split_events: usize,
    cases: Vec<String>,
    direction: Option<String>,
    big: PathBuf,
    perl_script: PathBuf,
    perl: bool,
    json: Option<PathBuf>,
    keep_docs: bool,
}

fn parse_args() -> Result<Args> {
    let manifest = Path::new(env!("CARGO_MANIFEST_DIR"));
    let mut a = Args {
        min_time: 1.0,
        min_iters: 5,
        reps: 3,
        events: 10_000,
        split_events: 50_000,
        cases: Vec::new(),
        direction: None,
        big: manifest.join("../testdata/sereal/vectors/Perl_Splitter/big.srl"),
        perl_script: manifest.join("perl/sereal_bench.pl"),
        perl: true,
        json: None,
        keep_docs: false,
    };
    let mut it = std::env::args().skip(1);
    while let Some(arg) = it.next() {
        let mut value = |name: &str| {
            it.next()
                .ok_or_else(|| anyhow!("{name} needs a value\n\n{USAGE}"))
        };
        match arg.as_str() {
            "--min-time" => a.min_time = value("--min-time")?.parse().context("--min-time")?,
            "--min-iters" => a.min_iters = value("--min-iters")?.parse().context("--min-iters")?,
            "--reps" => a.reps = value("--reps")?.parse::<usize>().context("--reps")?.max(1),
            "--events" => a.events = value("--events")?.parse().context("--events")?,
            "--split-events" => {
                a.split_events = value("--split-events")?.parse().context("--split-events")?
            }
            "--case" => a.cases.push(value("--case")?),
            "--direction" => {
                let d = value("--direction")?;
                if !["encode", "decode", "split"].contains(&d.as_str()) {
                    bail!("--direction must be encode, decode or split, not {d:?}");
                }
                a.direction = Some(d);
            }
            "--big" => a.big = value("--big")?.into(),
            "--perl-script" => a.perl_script = value("--perl-script")?.into(),
            "--no-perl" => a.perl = false,
            "--json" => a.json = Some(value("--json")?.into()),
            "--keep-docs" => a.keep_docs = true,
            "-h" | "--help" => {
                print!("{USAGE}");
                std::process::exit(0);
            }
            other => bail!("unknown argument {other:?}\n\n{USAGE}"),
        }
    }
    Ok(a)
}

// ---------------------------------------------------------------------------------------------
// Timing
// ---------------------------------------------------------------------------------------------

/// Process CPU time in seconds (`CLOCK_PROCESS_CPUTIME_ID`), or `None` if the clock fails.
fn cpu_seconds() -> Option<f64> {
    let mut ts = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `ts` is a valid, writable timespec; clock_gettime only writes into it.
    let rc = unsafe { libc::clock_gettime(libc::CLOCK_PROCESS_CPUTIME_ID, &mut ts) };
    (rc == 0).then_some(ts.tv_sec as f64 + ts.tv_nsec as f64 * 1e-9)
}

/// Run `f` until both `min_time` seconds of wall time and `min_iters` iterations have passed;
/// return (iterations, CPU seconds — wall seconds if the CPU clock is unavailable).
fn timed_loop(min_time: f64, min_iters: u64, f: impl FnMut() -> Result<()>) -> Result<(u64, f64)> {
    timed_loop_wall(min_time, min_iters, f).map(|(iters, cpu, _)| (iters, cpu))
}

/// [`timed_loop`], also returning the wall seconds.
fn timed_loop_wall(
    min_time: f64,
    min_iters: u64,
    mut f: impl FnMut() -> Result<()>,
) -> Result<(u64, f64, f64)> {
    let wall0 = Instant::now();
    let cpu0 = cpu_seconds();
    let mut iters = 0u64;
    loop {
        f()?;
        iters += 1;
        if iters >= min_iters && wall0.elapsed().as_secs_f64() >= min_time {
            break;
        }
    }
    let wall = wall0.elapsed().as_secs_f64();
    let secs = match (cpu0, cpu_seconds()) {
        (Some(a), Some(b)) if b > a => b - a,
        _ => wall,
    };
    Ok((iters, secs, wall))
}

fn median(mut xs: Vec<f64>) -> f64 {
    xs.sort_by(|a, b| a.total_cmp(b));
    match xs.len() {
        0 => f64::NAN,
        n if n % 2 == 1 => xs[n / 2],
        n => (xs[n / 2 - 1] + xs[n / 2]) / 2.0,
    }
}

// ---------------------------------------------------------------------------------------------
// Cases
// ---------------------------------------------------------------------------------------------

struct Case {
    /// Shown in the table.
    name: String,
    /// File name stem of the document in the temp dir.
    file: String,
    /// The data that is encoded.
    value: Value,
    /// The document that is decoded; its size is the unit of MB/s in both directions.
    doc: Vec<u8>,
    /// Options for encoding (ours and the reference's).
    opts: EncoderOptions,
    /// Number of events in the document, for the sizes table.
    events: Option<usize>,
    /// JSON bytes of the same events, for the sizes table.
    json_bytes: Option<usize>,
}

fn events_case(
    name: &str,
    file: &str,
    value: &Value,
    opts: EncoderOptions,
    events: usize,
    json_bytes: usize,
) -> Result<Case> {
    let doc = sereal::to_vec(value, &opts).with_context(|| format!("encoding {name}"))?;
    // Sanity: our own round trip must be exact (in the JSON mapping: ASCII strings come back as
    // Perl-style binary strings, which is the same data).
    let back = Decoder::new()
        .decode(&doc)
        .with_context(|| format!("decoding {name}"))?;
    if sereal::json::to_string(&back) != sereal::json::to_string(value) {
        bail!("{name}: decode(encode(events)) differs from the events");
    }
    Ok(Case {
        name: name.to_string(),
        file: file.to_string(),
        value: value.clone(),
        doc,
        opts,
        events: Some(events),
        json_bytes: Some(json_bytes),
    })
}

/// The big.srl vector: decoded as is; re-encoded with the options its header implies (protocol
/// and compression from the header, the reference's default level; `dedupe_strings` is not
/// recorded in a document, so we take whichever setting reproduces the document's size best).
fn big_case(path: &Path) -> Result<(Case, String)> {
    let doc = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    let h = header::parse(&doc).with_context(|| format!("{}: bad header", path.display()))?;
    let compression = match h.encoding {
        Encoding::Raw => Compression::None,
        Encoding::Snappy | Encoding::SnappyLegacy => Compression::Snappy,
        Encoding::Zlib => Compression::Zlib { level: 6 },
        Encoding::Zstd => Compression::Zstd { level: 3 },
    };
    let value = Decoder::new()
        .decode(&doc)
        .with_context(|| format!("decoding {}", path.display()))?;
    let base = EncoderOptions {
        protocol: h.version.max(3),
        compression,
        ..Default::default()
    };
    let mut best: Option<(usize, EncoderOptions, usize)> = None;
    for dedupe in [false, true] {
        let opts = EncoderOptions {
            dedupe_strings: dedupe,
            ..base.clone()
        };
        let n = sereal::to_vec(&value, &opts)
            .context("re-encoding big.srl")?
            .len();
        let dist = n.abs_diff(doc.len());
        if !matches!(&best, Some(b) if dist >= b.0) {
            best = Some((dist, opts, n));
        }
    }
    let (_, opts, ours_len) = best.expect("two candidates");
    let note = format!(
        "big.srl: header says protocol {}, {:?} body; re-encoded with protocol {}, {}, dedupe_strings {} \
         (our output {} bytes vs the vector's {} bytes)",
        h.version,
        h.encoding,
        opts.protocol,
        compression_label(opts.compression),
        if opts.dedupe_strings { "on" } else { "off" },
        ours_len,
        doc.len()
    );
    let case = Case {
        name: format!(
            "big.srl (Perl_Splitter), v{} {}",
            opts.protocol,
            compression_label(opts.compression)
        ),
        file: "big".into(),
        value,
        doc,
        opts,
        events: None,
        json_bytes: None,
    };
    Ok((case, note))
}

fn compression_label(c: Compression) -> String {
    match c {
        Compression::None => "plain".into(),
        Compression::Snappy => "snappy".into(),
        Compression::Zlib { level } => format!("zlib {level}"),
        Compression::Zstd { level } => format!("zstd {level}"),
    }
}

fn perl_flags(opts: &EncoderOptions) -> Vec<String> {
    let mut v = vec!["--protocol".to_string(), opts.protocol.to_string()];
    let (name, level) = match opts.compression {
        Compression::None => ("none", None),
        Compression::Snappy => ("snappy", None),
        Compression::Zlib { level } => ("zlib", Some(level as i64)),
        Compression::Zstd { level } => ("zstd", Some(level as i64)),
    };
    v.extend(["--compress".to_string(), name.to_string()]);
    if let Some(l) = level {
        v.extend(["--level".to_string(), l.to_string()]);
    }
    v.extend([
        "--dedupe".to_string(),
        (opts.dedupe_strings as u8).to_string(),
    ]);
    v
}

// ---------------------------------------------------------------------------------------------
// Measurements
// ---------------------------------------------------------------------------------------------

fn ours_encode(case: &Case, args: &Args) -> Result<f64> {
    let mut enc = Encoder::new(case.opts.clone())?;
    let mut out = Vec::with_capacity(case.doc.len() * 2);
    let (iters, secs) = timed_loop(args.min_time, args.min_iters, || {
        out.clear();
        enc.encode_into(black_box(&case.value), &mut out)?;
        black_box(&out);
        Ok(())
    })?;
    Ok(case.doc.len() as f64 * iters as f64 / secs / 1e6)
}

fn ours_decode(case: &Case, args: &Args) -> Result<f64> {
    let mut dec = Decoder::new();
    let (iters, secs) = timed_loop(args.min_time, args.min_iters, || {
        let v = dec.decode(black_box(&case.doc))?;
        black_box(&v);
        Ok(())
    })?;
    Ok(case.doc.len() as f64 * iters as f64 / secs / 1e6)
}

#[derive(Debug, Clone)]
struct PerlResult {
    encode_mbps: f64,
    decode_mbps: f64,
    encoded_bytes: usize,
}

/// The reference's encode and decode of the document at `doc_path` with `opts`; `name` names
/// the case in errors.
fn perl_run(name: &str, opts: &EncoderOptions, doc_path: &Path, args: &Args) -> Result<PerlResult> {
    let out = Command::new("perl")
        .arg(&args.perl_script)
        .arg("--file")
        .arg(doc_path)
        .args(perl_flags(opts))
        .args([
            "--min-time",
            &args.min_time.to_string(),
            "--min-iters",
            &args.min_iters.to_string(),
        ])
        .output()
        .context("running perl")?;
    if !out.status.success() {
        bail!(
            "{}: the Perl reference bench failed ({}):\n{}",
            name,
            out.status,
            String::from_utf8_lossy(&out.stderr)
        );
    }
    let j: serde_json::Value = serde_json::from_slice(&out.stdout).with_context(|| {
        format!(
            "parsing the Perl bench output {:?}",
            String::from_utf8_lossy(&out.stdout)
        )
    })?;
    let num = |k: &str| {
        j.get(k)
            .and_then(serde_json::Value::as_f64)
            .ok_or_else(|| anyhow!("Perl output lacks {k}"))
    };
    Ok(PerlResult {
        encode_mbps: num("encode_mbps")?,
        decode_mbps: num("decode_mbps")?,
        encoded_bytes: num("encoded_bytes")? as usize,
    })
}

/// Is the Perl reference usable here? `Err` carries the reason when not.
fn perl_available(script: &Path) -> std::result::Result<String, String> {
    if !script.is_file() {
        return Err(format!("{} not found", script.display()));
    }
    match Command::new("perl")
        .args([
            "-MSereal::Encoder",
            "-MSereal::Decoder",
            "-e",
            "print $Sereal::Encoder::VERSION",
        ])
        .output()
    {
        Ok(o) if o.status.success() => Ok(String::from_utf8_lossy(&o.stdout).into_owned()),
        Ok(o) => Err(format!(
            "perl lacks Sereal: {}",
            String::from_utf8_lossy(&o.stderr).trim()
        )),
        Err(e) => Err(format!("cannot run perl: {e}")),
    }
}

/// (case name, bytes of the reference's encoding of the case's data).
type PerlSizes = Vec<(String, usize)>;

// ---------------------------------------------------------------------------------------------
// The splitter
// ---------------------------------------------------------------------------------------------

/// A document cut into chunks of at most `max` bytes by `sereal::split` (default options: the
/// chunks keep the input's protocol and compression). The anchor is the reference decoding the
/// same document and encoding its data again with the same options: what a splitter without
/// `sereal::split` does (decode the array, encode runs of its elements).
struct SplitCase {
    name: String,
    file: String,
    doc: Vec<u8>,
    max: usize,
    /// The options the document was written with (the reference's re-encode uses them).
    opts: EncoderOptions,
}

struct SplitRow {
    case: String,
    doc_bytes: usize,
    max: usize,
    chunks: usize,
    /// MB/s of the document per CPU second, compressing on the calling thread (`threads: 1`).
    ours_one: f64,
    /// The same per wall second.
    ours_one_wall: f64,
    /// MB/s of the document per wall second, compressing on every core (`threads: 0`).
    ours_all_wall: f64,
    /// The reference's decode + re-encode of the same document, MB/s per CPU second.
    perl: Option<f64>,
}

/// Splits once and checks the chunks (each within `max`, each decoding on its own, the elements
/// all there in order), so that the timed loop times a correct split; returns the chunk count.
fn split_checked(case: &SplitCase) -> Result<usize> {
    let chunks = split(
        &case.doc,
        case.max,
        &SplitOptions::default(),
        &Limits::default(),
    )
    .with_context(|| format!("{}: split", case.name))?;
    let mut dec = Decoder::new();
    let whole = match dec.decode(&case.doc)? {
        Value::Array(items) => items,
        _ => bail!("{}: not an array document", case.name),
    };
    let mut at = 0;
    for (i, c) in chunks.iter().enumerate() {
        if c.len() > case.max {
            bail!(
                "{}: chunk {i} has {} bytes > {}",
                case.name,
                c.len(),
                case.max
            );
        }
        let Value::Array(items) = dec.decode(c)? else {
            bail!("{}: chunk {i} is not an array", case.name);
        };
        if whole.get(at..at + items.len()) != Some(&items[..]) {
            bail!("{}: chunk {i} differs from elements {at}..", case.name);
        }
        at += items.len();
    }
    if at != whole.len() {
        bail!(
            "{}: the chunks hold {at} of {} elements",
            case.name,
            whole.len()
        );
    }
    Ok(chunks.len())
}

/// (CPU MB/s on one thread, wall MB/s on one thread, wall MB/s on all threads) of splitting
/// `case`.
fn ours_split(case: &SplitCase, args: &Args) -> Result<(f64, f64, f64)> {
    let mb = case.doc.len() as f64 / 1e6;
    let run = |threads| {
        let opts = SplitOptions {
            threads,
            ..Default::default()
        };
        timed_loop_wall(args.min_time, args.min_iters, || {
            let chunks = split(black_box(&case.doc), case.max, &opts, &Limits::default())?;
            black_box(&chunks);
            Ok(())
        })
    };
    let (iters, cpu, wall) = run(1)?;
    let (iters_all, _, wall_all) = run(0)?;
    Ok((
        mb * iters as f64 / cpu,
        mb * iters as f64 / wall,
        mb * iters_all as f64 / wall_all,
    ))
}

fn measure_split(
    args: &Args,
    cases: &[SplitCase],
    perl: bool,
    tmp: &Path,
) -> Result<Vec<SplitRow>> {
    let mut rows = Vec::new();
    for case in cases {
        let chunks = split_checked(case)?;
        let doc_path = tmp.join(format!("{}.srl", case.file));
        std::fs::write(&doc_path, &case.doc)
            .with_context(|| format!("writing {}", doc_path.display()))?;
        eprintln!(
            "measuring split of {} ({} bytes, {chunks} chunks of ≤ {}) ...",
            case.name,
            case.doc.len(),
            case.max
        );
        let (mut one, mut one_wall, mut all, mut anchor) = (vec![], vec![], vec![], vec![]);
        for _ in 0..args.reps {
            let (o, w, a) =
                ours_split(case, args).with_context(|| format!("{}: split", case.name))?;
            one.push(o);
            one_wall.push(w);
            all.push(a);
            if perl {
                let p = perl_run(&case.name, &case.opts, &doc_path, args)?;
                // Both loops time the same document size: seconds per MB add up.
                anchor.push(1.0 / (1.0 / p.decode_mbps + 1.0 / p.encode_mbps));
            }
        }
        rows.push(SplitRow {
            case: case.name.clone(),
            doc_bytes: case.doc.len(),
            max: case.max,
            chunks,
            ours_one: median(one),
            ours_one_wall: median(one_wall),
            ours_all_wall: median(all),
            perl: (!anchor.is_empty()).then(|| median(anchor)),
        });
    }
    Ok(rows)
}

fn print_split_table(rows: &[SplitRow], args: &Args, cores: usize) {
    println!();
    println!("## Splitter (sereal::split) vs the Perl reference's decode + re-encode");
    println!();
    println!(
        "| document | bytes | chunk ≤ | chunks | ours MB/s (1 thread, CPU) | reference decode + encode MB/s | \
         ratio | target | ours MB/s wall: 1 thread | all {cores} cores |"
    );
    println!("|---|---:|---:|---:|---:|---:|---:|---|---:|---:|");
    for r in rows {
        let (perl_col, ratio_col, target_col) = verdict_columns(r.ours_one, r.perl);
        println!(
            "| {} | {} | {} | {} | {:.1} | {perl_col} | {ratio_col} | {target_col} | {:.1} | {:.1} |",
            r.case, r.doc_bytes, r.max, r.chunks, r.ours_one, r.ours_one_wall, r.ours_all_wall
        );
    }
    println!();
    println!(
        "MB/s = 10^6 bytes of the input document per second, median of {} runs of ≥ {} s and ≥ {} \
         iterations each; the chunks keep the input's protocol and compression (zlib 6, zstd 3). \
         The ratio compares ours on one thread (process CPU time) with the reference's CPU time to \
         decode the document and encode its data again with the same options (bench/perl/sereal_bench.pl, \
         the same run): the work of a splitter without sereal::split. The wall columns are the latency \
         of a split on one thread (`threads: 1`) and with candidate chunks compressed in parallel \
         (`threads: 0`); on a shared machine they depend on its load.",
        args.reps, args.min_time, args.min_iters
    );
}

struct Row {
    case: String,
    direction: &'static str,
    ours: f64,
    perl: Option<f64>,
}

// ---------------------------------------------------------------------------------------------
// Main
// ---------------------------------------------------------------------------------------------

fn main() {
    if let Err(e) = run() {
        eprintln!("sluice-bench: error: {e:#}");
        std::process::exit(1);
    }
}

fn run() -> Result<()> {
    let args = parse_args()?;
    let started = Instant::now();
    if cfg!(debug_assertions) {
        eprintln!("warning: this is a debug build; run with `cargo run --release -p sluice-bench`");
    }

    let perl = if args.perl {
        match perl_available(&args.perl_script) {
            Ok(v) => Some(v),
            Err(why) => {
                eprintln!("warning: Perl reference unavailable ({why}); its columns show n/a");
                None
            }
        }
    } else {
        None
    };

    // --- the documents -----------------------------------------------------------------------
    let gen_cfg = sluice_gen::GenConfig::web(1, args.events);
    let events_value = sluice_gen::events_array(&gen_cfg);
    let json_bytes = sluice_gen::events_json_lines(&gen_cfg).len() - args.events; // without '\n's
    let n = args.events;
    let mut cases = vec![
        events_case(
            &format!("events ({n} WEB), v3 plain"),
            "events_v3_plain",
            &events_value,
            EncoderOptions {
                protocol: 3,
                ..Default::default()
            },
            n,
            json_bytes,
        )?,
        events_case(
            &format!("events ({n} WEB), v3 zlib 6 + dedupe [original]"),
            "events_v3_zlib_dedupe",
            &events_value,
            EncoderOptions::original_events(),
            n,
            json_bytes,
        )?,
        events_case(
            &format!("events ({n} WEB), v5 zstd 3 + dedupe"),
            "events_v5_zstd_dedupe",
            &events_value,
            EncoderOptions {
                protocol: 5,
                compression: Compression::Zstd { level: 3 },
                dedupe_strings: true,
                ..Default::default()
            },
            n,
            json_bytes,
        )?,
    ];
    drop(events_value);
    let mut split_cases = Vec::new();
    if args.direction.as_deref().unwrap_or("split") == "split" {
        let m = args.split_events;
        let value = sluice_gen::events_array(&sluice_gen::GenConfig::web(2, m));
        for (label, file, opts) in [
            (
                "v3 zlib 6 + dedupe [original]",
                "split_v3_zlib_dedupe",
                EncoderOptions::original_events(),
            ),
            (
                "v5 zstd 3 + dedupe",
                "split_v5_zstd_dedupe",
                EncoderOptions {
                    protocol: 5,
                    compression: Compression::Zstd { level: 3 },
                    dedupe_strings: true,
                    ..Default::default()
                },
            ),
        ] {
            split_cases.push(SplitCase {
                name: format!("events ({m} WEB), {label}"),
                file: file.into(),
                doc: sereal::to_vec(&value, &opts).with_context(|| format!("encoding {label}"))?,
                max: 500_000,
                opts,
            });
        }
    }
    let mut notes = Vec::new();
    if args.big.is_file() {
        let (case, note) = big_case(&args.big)?;
        if args.direction.as_deref().unwrap_or("split") == "split" {
            for max in [100_000, 500_000] {
                split_cases.push(SplitCase {
                    name: "big.srl (Perl_Splitter)".into(),
                    file: "split_big".into(),
                    doc: case.doc.clone(),
                    max,
                    opts: case.opts.clone(),
                });
            }
        }
        cases.push(case);
        notes.push(note);
    } else {
        eprintln!(
            "warning: {} not found; skipping the big.srl case",
            args.big.display()
        );
    }
    if !args.cases.is_empty() {
        let chosen = |name: &str, file: &str| {
            args.cases
                .iter()
                .any(|f| name.contains(f.as_str()) || file.contains(f.as_str()))
        };
        cases.retain(|c| chosen(&c.name, &c.file));
        split_cases.retain(|c| chosen(&c.name, &c.file));
    }

    let tmp = std::env::temp_dir().join(format!("sluice-bench-{}", std::process::id()));
    std::fs::create_dir_all(&tmp).with_context(|| format!("creating {}", tmp.display()))?;
    let result = measure_all(&args, &cases, perl.is_some(), &tmp)
        .and_then(|r| Ok((r, measure_split(&args, &split_cases, perl.is_some(), &tmp)?)));
    if args.keep_docs {
        eprintln!("documents kept in {}", tmp.display());
    } else {
        let _ = std::fs::remove_dir_all(&tmp);
    }
    let ((rows, perl_sizes), split_rows) = result?;

    // --- report ------------------------------------------------------------------------------
    if !rows.is_empty() {
        println!();
        println!("## Sereal codec throughput: ours vs the Perl reference");
        println!();
        println!("| case | direction | ours MB/s | Perl reference MB/s | ratio | target |");
        println!("|---|---|---:|---:|---:|---|");
        for r in &rows {
            let (perl_col, ratio_col, target_col) = verdict_columns(r.ours, r.perl);
            println!(
                "| {} | {} | {:.1} | {} | {} | {} |",
                r.case, r.direction, r.ours, perl_col, ratio_col, target_col
            );
        }
        println!();
        println!(
            "MB/s = 10^6 bytes of the Sereal document per second of process CPU time, median of {} runs of \
             ≥ {} s and ≥ {} iterations each. Both directions and both sides count the same document size; \
             for compressed documents that is the compressed document's size (so their MB/s are not \
             comparable with the plain cases', only their ratios are).",
            args.reps, args.min_time, args.min_iters
        );
        if let Some(v) = &perl {
            println!("Reference: Perl Sereal::Encoder/Decoder {v}, run by bench/perl/sereal_bench.pl on the same documents.");
        }
        for note in &notes {
            println!("{note}.");
        }
    }
    if !split_rows.is_empty() {
        let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
        print_split_table(&split_rows, &args, cores);
    }

    println!();
    println!("## Event document sizes ({n} WEB events from sluice_gen, seed 1)");
    println!();
    println!("| profile | document bytes | bytes/event (ours) | bytes/event (Perl reference) | vs JSON |");
    println!("|---|---:|---:|---:|---:|");
    println!(
        "| JSON lines (compact, for comparison) | {} | {:.1} | | 100 % |",
        json_bytes,
        json_bytes as f64 / n as f64
    );
    for c in cases.iter().filter(|c| c.events.is_some()) {
        let events = c.events.unwrap_or(1) as f64;
        let perl_col = perl_sizes
            .iter()
            .find(|(name, _)| name == &c.name)
            .map(|(_, b)| format!("{:.1}", *b as f64 / events))
            .unwrap_or_else(|| "n/a".into());
        let vs_json = c
            .json_bytes
            .map(|j| format!("{:.1} %", 100.0 * c.doc.len() as f64 / j as f64))
            .unwrap_or_default();
        println!(
            "| {} | {} | {:.1} | {} | {} |",
            c.name.split(", ").nth(1).unwrap_or(&c.name),
            c.doc.len(),
            c.doc.len() as f64 / events,
            perl_col,
            vs_json
        );
    }
    println!();
    println!("(The Perl reference writes hash keys in its own order, so its sizes can differ slightly from ours.)");
    println!();
    println!("Total bench time: {:.1} s", started.elapsed().as_secs_f64());

    if let Some(path) = &args.json {
        let j = serde_json::json!({
            "rows": rows.iter().map(|r| serde_json::json!({
                "case": r.case, "direction": r.direction, "ours_mbps": r.ours,
                "perl_mbps": r.perl, "ratio": r.perl.map(|p| r.ours / p),
            })).collect::<Vec<_>>(),
            "sizes": cases.iter().map(|c| serde_json::json!({
                "case": c.name, "doc_bytes": c.doc.len(), "events": c.events,
            })).collect::<Vec<_>>(),
            "split": split_rows.iter().map(|r| serde_json::json!({
                "case": r.case, "doc_bytes": r.doc_bytes, "max_bytes": r.max, "chunks": r.chunks,
                "ours_mbps_one_thread": r.ours_one, "ours_mbps_one_thread_wall": r.ours_one_wall,
                "ours_mbps_all_threads_wall": r.ours_all_wall,
                "perl_decode_encode_mbps": r.perl, "ratio": r.perl.map(|p| r.ours_one / p),
            })).collect::<Vec<_>>(),
            "reps": args.reps, "min_time_s": args.min_time, "perl_version": perl,
        });
        std::fs::write(path, serde_json::to_string_pretty(&j)?)
            .with_context(|| format!("writing {}", path.display()))?;
    }
    Ok(())
}

/// All measurements; per case, the repetitions interleave ours and the reference's so that
/// machine noise falls on both alike.
fn measure_all(
    args: &Args,
    cases: &[Case],
    perl: bool,
    tmp: &Path,
) -> Result<(Vec<Row>, PerlSizes)> {
    let mut rows = Vec::new();
    let mut perl_sizes = Vec::new();
    let wants = |d: &str| args.direction.as_deref().unwrap_or(d) == d;
    if !wants("encode") && !wants("decode") {
        return Ok((rows, perl_sizes));
    }
    for case in cases {
        let doc_path = tmp.join(format!("{}.srl", case.file));
        std::fs::write(&doc_path, &case.doc)
            .with_context(|| format!("writing {}", doc_path.display()))?;
        eprintln!("measuring {} ({} bytes) ...", case.name, case.doc.len());
        let (mut enc, mut dec, mut penc, mut pdec) = (vec![], vec![], vec![], vec![]);
        let mut perl_bytes = None;
        for _ in 0..args.reps {
            if wants("encode") {
                enc.push(
                    ours_encode(case, args).with_context(|| format!("{}: encode", case.name))?,
                );
            }
            if wants("decode") {
                dec.push(
                    ours_decode(case, args).with_context(|| format!("{}: decode", case.name))?,
                );
            }
            if perl {
                let p = perl_run(&case.name, &case.opts, &doc_path, args)?;
                penc.push(p.encode_mbps);
                pdec.push(p.decode_mbps);
                perl_bytes = Some(p.encoded_bytes);
            }
        }
        if let Some(b) = perl_bytes {
            perl_sizes.push((case.name.clone(), b));
        }
        let perl_med = |v: Vec<f64>| (!v.is_empty()).then(|| median(v));
        if wants("encode") {
            rows.push(Row {
                case: case.name.clone(),
                direction: "encode",
                ours: median(enc),
                perl: perl_med(penc),
            });
        }
        if wants("decode") {
            rows.push(Row {
                case: case.name.clone(),
                direction: "decode",
                ours: median(dec),
                perl: perl_med(pdec),
            });
        }
    }
    Ok((rows, perl_sizes))
}

/// The anchor, ratio and target columns of a row: ours (MB/s) over the reference's of the same
/// run, `met` at [`TARGET_RATIO`] or more; `n/a` without the reference.
fn verdict_columns(ours: f64, perl: Option<f64>) -> (String, String, String) {
    match perl {
        Some(p) if p > 0.0 => {
            let ratio = ours / p;
            let verdict = if ratio >= TARGET_RATIO {
                "met"
            } else {
                "MISSED"
            };
            (
                format!("{p:.1}"),
                format!("{ratio:.2}×"),
                format!("≥ {TARGET_RATIO}× {verdict}"),
            )
        }
        _ => ("n/a".into(), "n/a".into(), format!("≥ {TARGET_RATIO}×")),
    }
}
