//! Body compression: the framing of each document type and the limits that make bombs harmless.

use crate::error::{Error, ErrorCode, Result};
use crate::header::Encoding;
use crate::varint;

/// The compressed body of a document, located and validated.
#[derive(Debug)]
pub(crate) struct Framed<'a> {
    /// The compressed bytes.
    pub data: &'a [u8],
    /// Offset of `data` in the document.
    pub data_offset: usize,
    /// Declared uncompressed size, where the framing carries one (zlib).
    pub declared_len: Option<u64>,
    /// Offset of the first byte after the compressed data.
    pub end: usize,
}

/// Find the compressed data of a document whose body (framing included) starts at `pos`.
pub(crate) fn locate(doc: &[u8], encoding: Encoding, mut pos: usize) -> Result<Framed<'_>> {
    let mut declared_len = None;
    if encoding == Encoding::SnappyLegacy {
        return Ok(Framed {
            data: &doc[pos..],
            data_offset: pos,
            declared_len,
            end: doc.len(),
        });
    }
    if encoding == Encoding::Zlib {
        declared_len = Some(varint::read(doc, &mut pos)?);
    }
    let compressed_len = varint::read(doc, &mut pos)?;
    let end = usize::try_from(compressed_len)
        .ok()
        .and_then(|l| pos.checked_add(l))
        .filter(|&e| e <= doc.len())
        .ok_or_else(|| Error::eof(doc.len()))?;
    Ok(Framed {
        data: &doc[pos..end],
        data_offset: pos,
        declared_len,
        end,
    })
}

thread_local! {
    /// One zstd decompression context per thread, reused across documents (creating one costs
    /// more than decoding a small document).
    static ZSTD_DCTX: std::cell::RefCell<zstd::zstd_safe::DCtx<'static>> =
        std::cell::RefCell::new(zstd::zstd_safe::DCtx::create());
    /// One libdeflate decompressor per thread (it holds its decoding tables).
    static LIBDEFLATE: std::cell::RefCell<libdeflater::Decompressor> =
        std::cell::RefCell::new(libdeflater::Decompressor::new());
}

/// Decompress `framed` into `out` (cleared first), refusing to produce more than `limit` bytes.
pub(crate) fn decompress(
    encoding: Encoding,
    framed: &Framed<'_>,
    limit: usize,
    out: &mut Vec<u8>,
) -> Result<()> {
    // Cleared by each branch (the zlib fast path overwrites the old bytes instead).
    let at = framed.data_offset;
    let too_big = |n: usize| Error::new(ErrorCode::DecompressedSizeLimit(n), at);
    let bad = |e: String| Error::new(ErrorCode::Decompress(e), at);
    match encoding {
        Encoding::Raw => unreachable!("raw bodies are not decompressed"),
        Encoding::Snappy | Encoding::SnappyLegacy => {
            out.clear();
            let len = snap::raw::decompress_len(framed.data).map_err(|e| bad(e.to_string()))?;
            if len > limit {
                return Err(too_big(limit));
            }
            out.resize(len, 0);
            let n = snap::raw::Decoder::new()
                .decompress(framed.data, out)
                .map_err(|e| bad(e.to_string()))?;
            out.truncate(n);
        }
        Encoding::Zlib => {
            let declared = framed.declared_len.unwrap_or(0);
            if declared > limit as u64 {
                return Err(too_big(limit));
            }
            // Fast path: libdeflate inflates a whole buffer in one call about twice as fast as
            // zlib-rs's streaming inflate, and our framing gives the exact output size. It is
            // used only when it succeeds with exactly the declared size; anything else (bad data,
            // a wrong declared length) goes through flate2 below, whose errors are the reported
            // ones. The buffer is resized without clearing it first: libdeflate overwrites all of
            // it on success, and skipping the zero fill saves a pass over a megabyte per chunk.
            // Deflate cannot expand more than ~1032:1, so a declared size beyond that is a lie
            // that would fail anyway: skip the fast path rather than zero-fill a buffer of that
            // size for it (flate2 below only grows its buffer as output actually comes).
            let plausible = (framed.data.len() as u64)
                .saturating_mul(1032)
                .saturating_add(1024);
            if declared > 0 && declared <= plausible {
                let n = declared as usize;
                out.resize(n, 0);
                let ok = LIBDEFLATE.with(|d| d.borrow_mut().zlib_decompress(framed.data, out));
                if matches!(ok, Ok(got) if got == n) {
                    return Ok(());
                }
            }
            out.clear();
            // Trust the declared size only as a capacity hint: a lying header cannot make us
            // write past `limit`, and a mismatch is reported after inflating.
            out.reserve(declared as usize);
            let mut inflater = flate2::Decompress::new(true);
            loop {
                if out.len() == out.capacity() {
                    if out.len() >= limit {
                        // Probe one more byte: a stream that still has output is over the limit.
                        let mut probe = [0u8; 1];
                        let before = inflater.total_out();
                        let consumed = inflater.total_in() as usize;
                        let _ = inflater.decompress(
                            &framed.data[consumed..],
                            &mut probe,
                            flate2::FlushDecompress::Finish,
                        );
                        if inflater.total_out() > before {
                            return Err(too_big(limit));
                        }
                        break;
                    }
                    let grow = (out.capacity().max(4096)).min(limit - out.len());
                    out.reserve_exact(grow);
                }
                let consumed = inflater.total_in() as usize;
                let produced = out.len();
                let status = inflater
                    .decompress_vec(
                        &framed.data[consumed..],
                        out,
                        flate2::FlushDecompress::Finish,
                    )
                    .map_err(|e| bad(e.to_string()))?;
                let stalled = inflater.total_in() as usize == consumed && out.len() == produced;
                match status {
                    flate2::Status::StreamEnd => break,
                    // No progress with room to spare: the stream is cut short.
                    _ if stalled && out.len() < out.capacity() => {
                        return Err(Error::eof(framed.end))
                    }
                    _ => continue,
                }
            }
            // `reserve` may have granted more than asked; the limit still holds.
            if out.len() > limit {
                return Err(too_big(limit));
            }
            if out.len() as u64 != declared {
                return Err(Error::new(
                    ErrorCode::LengthMismatch {
                        declared,
                        actual: out.len() as u64,
                    },
                    at,
                ));
            }
        }
        Encoding::Zstd => {
            use std::io::Read;
            out.clear();
            let hint = zstd::zstd_safe::get_frame_content_size(framed.data)
                .ok()
                .flatten();
            if hint.is_some_and(|h| h > limit as u64) {
                return Err(too_big(limit));
            }
            // A frame that declares its size (ours always do) is decoded in one call into the
            // output, with a context reused by the thread: ~25 % less CPU than the streaming
            // decoder, which also sets up a fresh context and window per document. zstd checks
            // that the output has exactly the declared size, and the output cannot outgrow the
            // capacity reserved for it. Only the first frame is read, as the streaming path does.
            if let (Some(size), Ok(frame_len)) = (
                hint,
                zstd::zstd_safe::find_frame_compressed_size(framed.data),
            ) {
                out.reserve_exact(size as usize);
                let frame = framed
                    .data
                    .get(..frame_len)
                    .ok_or_else(|| Error::eof(framed.end))?;
                let r = ZSTD_DCTX.with(|dctx| dctx.borrow_mut().decompress(out, frame));
                return match r {
                    Ok(n) if n as u64 == size => Ok(()),
                    Ok(n) => Err(Error::new(
                        ErrorCode::LengthMismatch {
                            declared: size,
                            actual: n as u64,
                        },
                        at,
                    )),
                    Err(code) => Err(bad(zstd::zstd_safe::get_error_name(code).to_string())),
                };
            }
            out.reserve(hint.unwrap_or(0) as usize);
            let decoder = zstd::stream::read::Decoder::with_buffer(framed.data)
                .map_err(|e| bad(e.to_string()))?;
            let read = decoder
                .single_frame()
                .take(limit as u64 + 1)
                .read_to_end(out)
                .map_err(|e| bad(e.to_string()))?;
            if read > limit {
                return Err(too_big(limit));
            }
        }
    }
    Ok(())
}

/// Which compressor an encoder uses, with its level.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Compression {
    /// No compression.
    None,
    /// Snappy (document type 2, incremental framing).
    Snappy,
    /// zlib at a level 1-9 (protocol 3+; the reference default is 6).
    Zlib {
        /// Compression level, 1 (fastest) to 9 (best).
        level: u32,
    },
    /// Zstandard at a level 1-22 (protocol 4+; the reference default is 3).
    Zstd {
        /// Compression level, 1 (fastest) to 22 (best); negative levels are zstd's fast modes.
        level: i32,
    },
}

impl Compression {
    pub(crate) fn encoding(self) -> Encoding {
        match self {
            Compression::None => Encoding::Raw,
            Compression::Snappy => Encoding::Snappy,
            Compression::Zlib { .. } => Encoding::Zlib,
            Compression::Zstd { .. } => Encoding::Zstd,
        }
    }

    /// The upper bound the reference encoder uses to size the length varint it reserves before
    /// compressing; we reserve the same width so our framing bytes match the reference's.
    fn reserve_bound(self, body_len: usize) -> usize {
        let n = body_len;
        match self {
            Compression::None => n,
            // csnappy_max_compressed_length
            Compression::Snappy => 32 + n + n / 6,
            // miniz mz_compressBound
            Compression::Zlib { .. } => {
                (128 + (n * 110) / 100).max(128 + n + ((n / (31 * 1024)) + 1) * 5)
            }
            // ZSTD_compressBound
            Compression::Zstd { .. } => {
                let small = if n < (128 << 10) {
                    ((128 << 10) - n) >> 11
                } else {
                    0
                };
                n + (n >> 8) + small
            }
        }
    }
}

/// Largest output buffer kept between documents (a huge document's is freed after use).
const MAX_KEPT_SCRATCH: usize = 4 << 20;

thread_local! {
    /// This thread's zstd compression context (with its level) and output buffer.
    static ZSTD: std::cell::RefCell<Option<(i32, zstd::bulk::Compressor<'static>, Vec<u8>)>> =
        const { std::cell::RefCell::new(None) };
}

/// Compress `body` and append the framed result to `out`. Returns `false` (appending nothing)
/// when the compressed data is not smaller than the body, the reference's rule.
pub(crate) fn compress_framed(
    compression: Compression,
    body: &[u8],
    out: &mut Vec<u8>,
) -> Result<bool> {
    let start = out.len();
    if let Compression::Zlib { .. } = compression {
        varint::write(out, body.len() as u64);
    }
    let width = varint::len(compression.reserve_bound(body.len()) as u64);
    let len_at = out.len();
    out.resize(len_at + width, 0);
    let data_at = out.len();
    let fail = |e: String| Error::new(ErrorCode::Compress(e), 0);
    match compression {
        Compression::None => unreachable!("no compression requested"),
        Compression::Snappy => {
            let max = snap::raw::max_compress_len(body.len());
            out.resize(data_at + max, 0);
            let n = snap::raw::Encoder::new()
                .compress(body, &mut out[data_at..])
                .map_err(|e| fail(e.to_string()))?;
            out.truncate(data_at + n);
        }
        Compression::Zlib { level } => {
            let mut z = flate2::Compress::new(flate2::Compression::new(level.min(9)), true);
            out.reserve(body.len() / 2 + 64);
            loop {
                let consumed = z.total_in() as usize;
                if out.len() == out.capacity() {
                    out.reserve(out.capacity() / 2 + 64);
                }
                let status = z
                    .compress_vec(&body[consumed..], out, flate2::FlushCompress::Finish)
                    .map_err(|e| fail(e.to_string()))?;
                if status == flate2::Status::StreamEnd {
                    break;
                }
            }
        }
        Compression::Zstd { level } => ZSTD.with(|cell| {
            // A context per thread, kept: making one per document (about a megabyte of tables,
            // fresh pages each time) cost more than compressing small documents.
            let mut cell = cell.borrow_mut();
            let (ctx, scratch) = match &mut *cell {
                Some((l, ctx, scratch)) if *l == level => (ctx, scratch),
                slot => {
                    let ctx =
                        zstd::bulk::Compressor::new(level).map_err(|e| fail(e.to_string()))?;
                    let (_, ctx, scratch) = slot.insert((level, ctx, Vec::new()));
                    (ctx, scratch)
                }
            };
            scratch.clear();
            scratch.reserve(zstd::zstd_safe::compress_bound(body.len()));
            ctx.compress_to_buffer(body, scratch)
                .map_err(|e| fail(e.to_string()))?;
            out.extend_from_slice(scratch);
            if scratch.capacity() > MAX_KEPT_SCRATCH {
                *scratch = Vec::new();
            }
            Ok(())
        })?,
    }
    let compressed_len = out.len() - data_at;
    // The reference keeps the plain body unless the compressed data alone (framing not
    // counted) is smaller than the body.
    if compressed_len >= body.len() {
        out.truncate(start);
        return Ok(false);
    }
    varint::write_padded(&mut out[len_at..data_at], compressed_len as u64);
    Ok(true)
}
