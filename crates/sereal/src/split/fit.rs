//! Fitting: how many elements go into each chunk, by a running compression ratio, checked by
//! building and measuring each chunk document (see "Fitting" in the [module
//! documentation](super)).

use super::emit::Emitter;
use super::SplitOptions;
use crate::compress::{self, Compression};
use crate::error::{Error, ErrorCode, Result};
use crate::header::{self, Encoding};
use crate::tag::*;
use crate::varint;

/// Length of the array prefix of a chunk of `count` elements: `ARRAYREF_n` below 16 (as the
/// reference encoder writes it), else `REFN ARRAY <count>`.
fn prefix_len(count: usize) -> usize {
    if count < 16 {
        1
    } else {
        2 + varint::len(count as u64)
    }
}

fn write_prefix(out: &mut [u8], count: usize) {
    if count < 16 {
        if let Some(b) = out.first_mut() {
            *b = ARRAYREF_0 | count as u8;
        }
        return;
    }
    let mut v = Vec::with_capacity(12);
    v.extend_from_slice(&[REFN, ARRAY]);
    varint::write(&mut v, count as u64);
    let n = v.len().min(out.len());
    out[..n].copy_from_slice(&v[..n]);
}

/// Candidate chunks compressed together (in parallel when threads allow). A chunk that fits is
/// kept; one that does not is refitted alone and the rest of its batch discarded. Fixed, so that
/// the chunks do not depend on the number of threads.
pub const BATCH: usize = 4;
/// Batched chunks aim this full (of `max_bytes`), going by the running compression ratio.
const BATCH_FILL: f64 = 0.96;
/// A chunk fitted alone first aims this full...
const FILL: f64 = 0.975;
/// ...is good enough at this fill...
const ACCEPT: f64 = 0.95;
/// ...grows towards this fill when it is not...
const GROW_FILL: f64 = 0.99;
/// ...and stops after this many compressions with the best fit found.
const MAX_PROBES: usize = 6;

/// Header + (possibly compressed) body, as the encoder writes them. `head` is the magic, the
/// version byte and the header suffix.
fn make_doc(
    head: &[u8],
    protocol: u8,
    compression: Compression,
    threshold: usize,
    body: &[u8],
) -> Result<Vec<u8>> {
    let mut doc = Vec::with_capacity(head.len() + body.len() / 2 + 16);
    doc.extend_from_slice(head);
    let version_at = 4;
    if compression != Compression::None && body.len() >= threshold {
        doc[version_at] = (compression.encoding().type_nibble() << 4) | protocol;
        if compress::compress_framed(compression, body, &mut doc)? {
            return Ok(doc);
        }
        doc.truncate(head.len());
    }
    doc[version_at] = protocol;
    doc.extend_from_slice(body);
    Ok(doc)
}

/// A chunk tried in a batch: first and end element, body, header.
type Candidate = (usize, usize, Vec<u8>, Vec<u8>);

/// The chunks being fitted: the elements, the output format, and the chunk being built.
pub(super) struct Splitter<'a> {
    elements: &'a [(usize, usize)],
    max_bytes: usize,
    /// Magic, version and header suffix of every chunk; without the suffix when each chunk gets
    /// its own element index (`index_per_byte`).
    head: Vec<u8>,
    /// Index bytes per body byte of the input, when the chunks carry element indexes.
    index_per_byte: Option<f64>,
    /// The input elements' origins (runs `(seq, n)` covering every element), or empty: each
    /// chunk's index carries the runs of its own elements.
    origins: Vec<(u64, u32)>,
    protocol: u8,
    compression: Compression,
    threshold: usize,
    allow_oversized: bool,
    threads: usize,
    /// Running estimate of compressed/raw body size.
    ratio: f64,
    em: Emitter<'a>,
    /// First element of the chunk being built.
    start: usize,
    /// Bytes reserved for the array prefix in `em.out`.
    prefix: usize,
    /// `ends[j]`: body length after element `start + j`.
    ends: Vec<usize>,
    emitted_total: usize,
    budget: usize,
}

impl<'a> Splitter<'a> {
    /// A splitter of `elements` (their byte ranges in the input) into chunks of at most
    /// `max_bytes`, each with the header `head` (`index_per_byte`: plus an element index of its
    /// own, with its elements' part of `origins`), emitted by `em`. `ratio` seeds the
    /// compression estimate; `budget` caps the bytes emitted in all.
    #[allow(clippy::too_many_arguments)]
    pub(super) fn new(
        elements: &'a [(usize, usize)],
        max_bytes: usize,
        opts: &SplitOptions,
        head: Vec<u8>,
        index_per_byte: Option<f64>,
        origins: Vec<(u64, u32)>,
        protocol: u8,
        compression: Compression,
        ratio: f64,
        em: Emitter<'a>,
        budget: usize,
    ) -> Splitter<'a> {
        Splitter {
            elements,
            max_bytes,
            head,
            index_per_byte,
            origins,
            protocol,
            compression,
            threshold: opts.compress_threshold,
            allow_oversized: opts.allow_oversized,
            threads: match opts.threads {
                0 => std::thread::available_parallelism().map_or(1, |n| n.get()),
                t => t,
            }
            .min(BATCH),
            ratio,
            em,
            start: 0,
            prefix: 0,
            ends: Vec::new(),
            emitted_total: 0,
            budget,
        }
    }

    fn reset(&mut self, start: usize, prefix: usize) {
        self.start = start;
        self.prefix = prefix;
        self.ends.clear();
        self.em.reset(prefix);
    }

    fn emitted(&self) -> usize {
        self.start + self.ends.len()
    }

    /// Emit the next element into the chunk body.
    fn push_next(&mut self) -> Result<()> {
        let Some(&(s, e)) = self.elements.get(self.emitted()) else {
            return Ok(());
        };
        let before = self.em.out.len();
        self.em.depth = 2;
        let (end, _) = self.em.value(s, false)?;
        if end != e {
            return Err(self.em.err(
                ErrorCode::UnsupportedTag("splitter: element bounds disagree"),
                s,
            ));
        }
        self.emitted_total += self.em.out.len() - before;
        if self.emitted_total > self.budget {
            return Err(self
                .em
                .err(ErrorCode::DecompressedSizeLimit(self.em.cap), s));
        }
        self.ends.push(self.em.out.len());
        Ok(())
    }

    /// Body length of the chunk `start..k` (`k > start`, already emitted).
    fn raw(&self, k: usize) -> usize {
        self.ends
            .get(k - self.start - 1)
            .copied()
            .unwrap_or(self.prefix)
    }

    /// The header of the chunk `start..k` (emitted): the shared head, or the head with the
    /// chunk's own element index.
    fn chunk_head(&self, k: usize) -> Vec<u8> {
        if self.index_per_byte.is_none() || k <= self.start {
            return self.head.clone();
        }
        let count = k - self.start;
        let mut starts = Vec::with_capacity(count);
        starts.push(self.prefix);
        starts.extend_from_slice(&self.ends[..count - 1]);
        let origins = crate::index::cut_origins(&self.origins, self.start, k);
        let mut user = Vec::new();
        crate::index::write_with_origins(&starts, self.raw(k), &origins, &mut user);
        let mut head = self.head.clone();
        head.pop(); // the empty suffix
        let (magic, version) = (&head[..4], head[4]);
        let mut out = Vec::with_capacity(head.len() + user.len() + 8);
        header::write_with_user_header(&mut out, version & 0x0f, Encoding::Raw, &user);
        out[..4].copy_from_slice(magic);
        out
    }

    /// Estimated document size for a body of `raw` bytes.
    fn estimate(&self, raw: usize) -> f64 {
        let index = self.index_per_byte.map_or(0.0, |r| r * raw as f64);
        let plain = (self.head.len() + raw) as f64 + index;
        if self.compression == Compression::None || raw < self.threshold {
            return plain;
        }
        let mut framing = varint::len((raw + raw / 4 + 256) as u64);
        if let Compression::Zlib { .. } = self.compression {
            framing += varint::len(raw as u64);
        }
        let packed = (self.head.len() + framing) as f64 + raw as f64 * self.ratio + index;
        packed.min(plain)
    }

    /// The largest `k` in `lo < k < hi` whose estimated size is within `fill * max_bytes`,
    /// emitting elements as far as needed; `lo` if none.
    fn guess(&mut self, lo: usize, hi: usize, fill: f64) -> Result<usize> {
        let goal = self.max_bytes as f64 * fill;
        let top = hi.saturating_sub(1).min(self.elements.len());
        while self.emitted() < top
            && self.estimate(self.raw(self.emitted().max(self.start + 1))) <= goal
        {
            let was = self.emitted();
            self.push_next()?;
            if self.emitted() == was {
                break;
            }
        }
        let top = top.min(self.emitted());
        if top <= lo {
            return Ok(lo);
        }
        // ends are increasing, so the estimate is (almost) monotonic: binary search.
        let (mut l, mut h) = (lo, top); // invariant: l fits (or is lo), answer in l..=h
        while l < h {
            let m = l + (h - l).div_ceil(2);
            if self.estimate(self.raw(m)) <= goal {
                l = m;
            } else {
                h = m - 1;
            }
        }
        Ok(l)
    }

    /// Emit the exact chunk body for elements `start..k` (right array prefix) into `em.out`;
    /// returns its length.
    fn body(&mut self, k: usize) -> Result<usize> {
        let count = k - self.start;
        let p = prefix_len(count);
        if p != self.prefix {
            let start = self.start;
            self.reset(start, p);
        }
        while self.emitted() < k {
            let was = self.emitted();
            self.push_next()?;
            if self.emitted() == was {
                break;
            }
        }
        write_prefix(&mut self.em.out[..p], count);
        Ok(self.raw(k))
    }

    /// Build the document for elements `start..k` exactly; returns it, its body length and its
    /// header length.
    fn probe(&mut self, k: usize) -> Result<(Vec<u8>, usize, usize)> {
        let end = self.body(k)?;
        let head = self.chunk_head(k);
        let body = self.em.out.get(..end).unwrap_or(&[]);
        Ok((
            make_doc(&head, self.protocol, self.compression, self.threshold, body)?,
            end,
            head.len(),
        ))
    }

    fn learn(&mut self, doc: &[u8], raw: usize, head: usize) {
        if self.compression != Compression::None && raw >= self.threshold && raw > 0 {
            // Framing included: a slight overestimate.
            let packed = doc.len().saturating_sub(head) as f64;
            self.ratio = (packed / raw as f64).clamp(0.0005, 1.0);
        }
    }

    /// All the chunks: the first fitted alone (which calibrates the ratio), then batches.
    pub(super) fn run(&mut self) -> Result<Vec<Vec<u8>>> {
        let n = self.elements.len();
        let mut chunks = Vec::new();
        let (mut a, first) = self.next_chunk(0, 0)?;
        let mut last_count = a;
        chunks.push(first);
        let fill = if self.compression == Compression::None {
            1.0
        } else {
            BATCH_FILL
        };
        while a < n {
            // Candidates from the running ratio, each body kept for compression.
            let mut batch = Vec::with_capacity(BATCH);
            let mut s = a;
            while batch.len() < BATCH && s < n {
                self.reset(s, prefix_len(last_count.max(1)));
                let k = self.guess(s, n + 1, fill)?.max(s + 1);
                let end = self.body(k)?;
                let head = self.chunk_head(k);
                batch.push((s, k, self.em.out.get(..end).unwrap_or(&[]).to_vec(), head));
                last_count = k - s;
                s = k;
            }
            let docs = self.make_docs(&batch)?;
            for ((s, k, body, head), doc) in batch.iter().zip(docs) {
                if doc.len() <= self.max_bytes {
                    self.learn(&doc, body.len(), head.len());
                    chunks.push(doc);
                    a = *k;
                    continue;
                }
                let (k, doc) = self.next_chunk(*s, k - s)?;
                last_count = k - s;
                chunks.push(doc);
                a = k;
                break;
            }
        }
        Ok(chunks)
    }

    /// Compress a batch of bodies, spread over the threads.
    fn make_docs(&self, batch: &[Candidate]) -> Result<Vec<Vec<u8>>> {
        let (protocol, compression, threshold) = (self.protocol, self.compression, self.threshold);
        let one = |c: &Candidate| make_doc(&c.3, protocol, compression, threshold, &c.2);
        let threads = self.threads.min(batch.len());
        if threads <= 1 || compression == Compression::None {
            return batch.iter().map(one).collect();
        }
        let mut slots: Vec<Option<Result<Vec<u8>>>> = (0..batch.len()).map(|_| None).collect();
        std::thread::scope(|scope| {
            let mut handles = Vec::new();
            for t in 1..threads {
                let work = std::thread::Builder::new().spawn_scoped(scope, move || {
                    (t..batch.len())
                        .step_by(threads)
                        .map(|i| (i, one(&batch[i])))
                        .collect::<Vec<_>>()
                });
                match work {
                    Ok(h) => handles.push(h),
                    // No thread: do its share here.
                    Err(_) => {
                        for i in (t..batch.len()).step_by(threads) {
                            slots[i] = Some(one(&batch[i]));
                        }
                    }
                }
            }
            for i in (0..batch.len()).step_by(threads) {
                slots[i] = Some(one(&batch[i]));
            }
            for h in handles {
                if let Ok(done) = h.join() {
                    for (i, r) in done {
                        slots[i] = Some(r);
                    }
                }
            }
        });
        slots
            .into_iter()
            .map(|r| {
                r.unwrap_or_else(|| {
                    Err(Error::new(
                        ErrorCode::Compress("compression thread failed".into()),
                        0,
                    ))
                })
            })
            .collect()
    }

    /// Find and build the chunk starting at element `a`: returns its end and its bytes.
    fn next_chunk(&mut self, a: usize, last_count: usize) -> Result<(usize, Vec<u8>)> {
        let n = self.elements.len();
        let max = self.max_bytes;
        self.reset(a, prefix_len(last_count.max(1)));
        let mut lo = a; // largest k known to fit
        let mut best: Option<Vec<u8>> = None;
        let mut hi = n + 1; // smallest k known not to fit
        let mut single: Option<Vec<u8>> = None;
        let mut probes = 0;
        let mut misses = 0;
        let mut k = self.guess(a, hi, FILL)?.max(a + 1);
        loop {
            probes += 1;
            let (doc, raw, head) = self.probe(k)?;
            self.learn(&doc, raw, head);
            if doc.len() <= max {
                misses = 0;
                if k > lo {
                    lo = k;
                    best = Some(doc);
                }
            } else {
                misses += 1;
                hi = hi.min(k);
                if k == a + 1 {
                    single = Some(doc);
                }
            }
            if lo + 1 >= hi {
                break;
            }
            let best_len = best.as_ref().map_or(0, Vec::len);
            if lo > a && (lo == n || best_len as f64 >= max as f64 * ACCEPT || probes >= MAX_PROBES)
            {
                break;
            }
            let next = if lo > a {
                // Something fits: grow while the estimate says another element fits.
                let g = self.guess(lo, hi, GROW_FILL)?;
                if g <= lo {
                    break;
                }
                g
            } else {
                // Nothing fits yet: shrink, halving after repeated misses.
                let g = self.guess(a, hi, FILL)?.max(a + 1);
                let half = a + (hi - a) / 2;
                if misses >= 2 {
                    g.min(half).max(a + 1)
                } else {
                    g
                }
            };
            k = if next >= hi || next == k {
                lo + (hi - lo) / 2
            } else {
                next
            };
            k = k.clamp(lo + 1, hi - 1);
        }
        match best {
            Some(doc) if lo > a => Ok((lo, doc)),
            _ => {
                let doc = match single {
                    Some(d) => d,
                    None => self.probe(a + 1)?.0,
                };
                if self.allow_oversized {
                    return Ok((a + 1, doc));
                }
                let at = self.elements.get(a).map_or(0, |e| e.0);
                Err(self.em.err(
                    ErrorCode::ChunkTooSmall {
                        element: a,
                        needed: doc.len(),
                        limit: max,
                    },
                    at,
                ))
            }
        }
    }
}
