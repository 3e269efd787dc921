//! `sluice sereal …`: decode, encode and dump Sereal documents.

use std::io::{Read, Write};
use std::path::PathBuf;

use anyhow::{bail, Context, Result};
use clap::{Args, Subcommand, ValueEnum};
use sereal::{Compression, Decoder, EncoderOptions, Limits};

/// Subcommands of `sluice sereal`.
#[derive(Subcommand)]
pub enum SerealCommand {
    /// Decode a Sereal document and print its body (JSON by default).
    Decode(DecodeArgs),
    /// Read JSON and write it as a Sereal document.
    Encode(EncodeArgs),
    /// Cut a document whose body is an array into standalone documents of at most N bytes.
    Split(SplitArgs),
}

/// Flags of `sluice sereal split`.
#[derive(Args)]
pub struct SplitArgs {
    /// Largest chunk, in bytes (whole document, compressed).
    #[arg(long, default_value_t = 500_000)]
    max_bytes: usize,
    /// Write chunk N to `<PREFIX>.<N>.srl`.
    #[arg(long)]
    out: PathBuf,
    /// The document to split, or `-` for standard input.
    file: PathBuf,
}

/// Flags of `sluice sereal decode`.
#[derive(Args)]
pub struct DecodeArgs {
    /// Print compact JSON (the default).
    #[arg(long, group = "format")]
    json: bool,
    /// Print indented JSON.
    #[arg(long, group = "format")]
    pretty: bool,
    /// Print every tag with its offset instead of the value.
    #[arg(long, group = "format")]
    dump: bool,
    /// Also print the user header (as a first JSON line, `null` when absent).
    #[arg(long)]
    header: bool,
    /// Print only these paths (comma-separated, e.g. `status,timings.total_ms,experiments[*].id`),
    /// one JSON object per element of a top-level array, read lazily without decoding the rest.
    #[arg(long, value_delimiter = ',', conflicts_with_all = ["dump", "header"])]
    select: Vec<String>,
    /// Print only elements for which this holds, e.g. `status >= 500 and path ~ "^/book"`
    /// (comparisons, and/or/not, exists, in, ~ regex, contains; see `sluice help where`).
    #[arg(long = "where", conflicts_with_all = ["dump", "header"])]
    filter: Option<String>,
    /// Maximum nesting depth.
    #[arg(long, default_value_t = Limits::default().max_depth)]
    max_depth: usize,
    /// Maximum decompressed body size in bytes.
    #[arg(long, default_value_t = Limits::default().max_decompressed_bytes)]
    max_decompressed: usize,
    /// The document to read, or `-` for standard input.
    file: PathBuf,
}

/// Compression choices on the command line.
#[derive(Clone, Copy, ValueEnum)]
enum CompressArg {
    None,
    Snappy,
    Zlib,
    Zstd,
}

/// Encoder flags, shared by every command that writes Sereal.
#[derive(Args)]
pub struct EncodeFlags {
    /// Protocol version to write.
    #[arg(long, default_value_t = 5, value_parser = clap::value_parser!(u8).range(3..=5))]
    protocol: u8,
    /// Body compression.
    #[arg(long, value_enum, default_value = "none")]
    compress: CompressArg,
    /// Compression level (zlib 1-9, default 6; zstd -7..22, default 3).
    #[arg(long, allow_hyphen_values = true)]
    level: Option<i32>,
    /// Do not compress bodies smaller than this many bytes.
    #[arg(long, default_value_t = 1024)]
    threshold: usize,
    /// De-duplicate repeated strings (longer than 3 bytes).
    #[arg(long)]
    dedupe: bool,
    /// Sort hash keys and use the canonical container form.
    #[arg(long)]
    canonical: bool,
}

impl EncodeFlags {
    /// The encoder options these flags describe.
    pub fn options(&self) -> Result<EncoderOptions> {
        let compression = match self.compress {
            CompressArg::None => Compression::None,
            CompressArg::Snappy => Compression::Snappy,
            CompressArg::Zlib => {
                let level = self.level.unwrap_or(6);
                if !(1..=9).contains(&level) {
                    bail!("zlib level must be 1-9, got {level}");
                }
                Compression::Zlib {
                    level: level as u32,
                }
            }
            CompressArg::Zstd => {
                let level = self.level.unwrap_or(3);
                if !(-7..=22).contains(&level) {
                    bail!("zstd level must be -7..22, got {level}");
                }
                Compression::Zstd { level }
            }
        };
        if self.level.is_some() && matches!(self.compress, CompressArg::None | CompressArg::Snappy)
        {
            bail!("--level applies to zlib and zstd only");
        }
        Ok(EncoderOptions {
            protocol: self.protocol,
            compression,
            compress_threshold: self.threshold,
            dedupe_strings: self.dedupe,
            canonical: self.canonical,
            ..Default::default()
        })
    }
}

/// Flags of `sluice sereal encode`.
#[derive(Args)]
pub struct EncodeArgs {
    #[command(flatten)]
    flags: EncodeFlags,
    /// The JSON to read (one value), or `-` for standard input.
    file: PathBuf,
}

/// Run one `sluice sereal` subcommand.
pub fn run(cmd: SerealCommand) -> Result<()> {
    match cmd {
        SerealCommand::Decode(a) => decode(a),
        SerealCommand::Encode(a) => encode(a),
        SerealCommand::Split(a) => split(a),
    }
}

pub fn read_input(path: &PathBuf) -> Result<Vec<u8>> {
    let mut buf = Vec::new();
    if path.as_os_str() == "-" {
        std::io::stdin()
            .read_to_end(&mut buf)
            .context("reading standard input")?;
    } else {
        buf = std::fs::read(path).with_context(|| format!("reading {}", path.display()))?;
    }
    Ok(buf)
}

fn decode(a: DecodeArgs) -> Result<()> {
    let doc = read_input(&a.file)?;
    let limits = Limits {
        max_depth: a.max_depth,
        max_decompressed_bytes: a.max_decompressed,
        ..Limits::default()
    };
    let stdout = std::io::stdout();
    let mut out = std::io::BufWriter::new(stdout.lock());
    if !a.select.is_empty() || a.filter.is_some() {
        let filter = match &a.filter {
            Some(text) => Some(
                sluice_reader::Filter::parse(text)
                    .map_err(|e| anyhow::anyhow!("--where: {}", e.render(text)))?,
            ),
            None => None,
        };
        return select(&doc, &limits, &a.select, filter.as_ref(), &a.file, &mut out);
    }
    if a.dump {
        let text =
            sereal::dump::dump(&doc, &limits).with_context(|| format!("{}", a.file.display()))?;
        out.write_all(text.as_bytes())?;
        out.flush()?;
        return Ok(());
    }
    // A file may hold several documents back to back (a stream): print one JSON line each.
    let mut decoder = Decoder::with_limits(limits);
    let mut rest = &doc[..];
    let mut index = 0usize;
    // Trailing whitespace after the last document (a file saved with a final newline) is not
    // another document.
    while !rest.iter().all(u8::is_ascii_whitespace) || (index == 0 && !rest.is_empty()) {
        let at = doc.len() - rest.len();
        let d = decoder.decode_document(rest).map_err(|e| {
            anyhow::anyhow!("{}: document {index} at byte {at}: {e}", a.file.display())
        })?;
        if a.header {
            print_value(
                &mut out,
                d.user_header.as_ref().unwrap_or(&sereal::Value::Undef),
                a.pretty,
            )?;
        }
        print_value(&mut out, &d.body, a.pretty)?;
        rest = &rest[d.len..];
        index += 1;
    }
    if index == 0 {
        bail!("{}: empty input", a.file.display());
    }
    out.flush()?;
    Ok(())
}

fn print_value(out: &mut impl Write, v: &sereal::Value, pretty: bool) -> Result<()> {
    if pretty {
        serde_json::to_writer_pretty(&mut *out, &sereal::json::to_json_value(v))?;
    } else {
        sereal::json::to_writer(&mut *out, v)?;
    }
    out.write_all(b"\n")?;
    Ok(())
}

fn encode(a: EncodeArgs) -> Result<()> {
    let opts = a.flags.options()?;
    let text = read_input(&a.file)?;
    let value = sereal::json::from_json_slice(&text).context("input is not valid JSON")?;
    let doc = sereal::to_vec(&value, &opts)?;
    let stdout = std::io::stdout();
    let mut out = stdout.lock();
    out.write_all(&doc)?;
    out.flush()?;
    Ok(())
}

/// `decode --select/--where`: elements are read lazily; only the paths that `--select` and
/// `--where` name are materialised, and a whole element only when it matches and no `--select`
/// was given. With `--select`, each element prints as one JSON object keyed by path: a path with
/// `[*]` gives an array of every match, any other its value or `null` when missing.
fn select(
    doc: &[u8],
    limits: &Limits,
    paths: &[String],
    filter: Option<&sluice_reader::Filter>,
    file: &std::path::Path,
    out: &mut impl Write,
) -> Result<()> {
    let mut all_paths: Vec<sereal::Path> = paths
        .iter()
        .map(|p| sereal::Path::parse(p))
        .collect::<std::result::Result<_, _>>()
        .context("--select")?;
    let n_select = all_paths.len();
    if let Some(f) = filter {
        all_paths.extend(f.paths().iter().cloned());
    }
    let many: Vec<bool> = all_paths[..n_select]
        .iter()
        .map(|p| {
            p.steps()
                .iter()
                .any(|s| matches!(s, sereal::lazy::Step::Wildcard))
        })
        .collect();
    let mut selector = sereal::lazy::Selector::new(all_paths);
    let mut scratch = Vec::new();
    let lazy = sereal::LazyDoc::open(doc, limits, &mut scratch)
        .with_context(|| file.display().to_string())?;
    let root = lazy.root().with_context(|| file.display().to_string())?;
    let items: Vec<sereal::lazy::Item<'_>> = match root.elements()? {
        Some(elements) => elements.collect::<std::result::Result<_, _>>()?,
        None => vec![root],
    };
    let mut found = Vec::new();
    for item in items {
        selector.select_into(&item, &mut found)?;
        if let Some(f) = filter {
            if !f.matches_selected(&found[n_select..]) {
                continue;
            }
        }
        if n_select == 0 {
            sereal::json::to_writer(&mut *out, &item.decode()?)?;
        } else {
            let mut obj = serde_json::Map::new();
            for ((path, values), many) in paths.iter().zip(&found).zip(&many) {
                let v = if *many {
                    serde_json::Value::Array(
                        values.iter().map(sereal::json::to_json_value).collect(),
                    )
                } else {
                    values
                        .first()
                        .map(sereal::json::to_json_value)
                        .unwrap_or(serde_json::Value::Null)
                };
                obj.insert(path.clone(), v);
            }
            serde_json::to_writer(&mut *out, &obj)?;
        }
        out.write_all(b"\n")?;
    }
    out.flush()?;
    Ok(())
}

fn split(a: SplitArgs) -> Result<()> {
    let doc = read_input(&a.file)?;
    let chunks = sereal::split(
        &doc,
        a.max_bytes,
        &sereal::SplitOptions::default(),
        &Limits::default(),
    )
    .with_context(|| a.file.display().to_string())?;
    for (i, chunk) in chunks.iter().enumerate() {
        let path = PathBuf::from(format!("{}.{i}.srl", a.out.display()));
        std::fs::write(&path, chunk).with_context(|| format!("writing {}", path.display()))?;
        println!("{}\t{} bytes", path.display(), chunk.len());
    }
    Ok(())
}
