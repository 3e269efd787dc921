// The optional disk buffer: append-only NDJSON segment files (one event a line, as sent) and a
// cursor file naming the first byte not yet delivered. Events go to disk before they are sent,
// so what an emitter had not delivered when its process stopped (close, crash, SIGKILL) is
// sent first by the next emitter on the same directory.
//
// Synchronous fs calls: each call moves a whole batch (one write per event-loop turn of emits,
// one read per batch sent), small next to the network round trip, and it keeps the cursor
// and the segment list consistent without locks.

import fs from 'node:fs';
import path from 'node:path';

const SEGMENT_RE = /^seg-(\d{10})\.ndjson$/;
const CURSOR = 'cursor.json';

/** An append-only, size-capped queue of NDJSON lines in a directory. */
export class DiskBuffer {
  /**
   * @param {string} dir created if missing
   * @param {number} maxBytes cap on the bytes not yet delivered
   * @param {number} segmentBytes a new segment file is started beyond this size
   */
  constructor(dir, maxBytes, segmentBytes = Math.max(64 << 10, Math.min(16 << 20, Math.floor(maxBytes / 8)))) {
    this.dir = dir;
    this.maxBytes = maxBytes;
    this.segmentBytes = segmentBytes;
    fs.mkdirSync(dir, { recursive: true });
    this.#lock();
    let cursor = { seg: 0, off: 0 };
    try {
      const c = JSON.parse(fs.readFileSync(path.join(dir, CURSOR), 'utf8'));
      if (Number.isInteger(c.seg) && Number.isInteger(c.off) && c.off >= 0) cursor = c;
    } catch {
      // no cursor yet (or a torn one: then everything present is sent again, at least once)
    }
    this.segs = [];
    for (const name of fs.readdirSync(dir)) {
      const m = SEGMENT_RE.exec(name);
      if (!m) continue;
      const n = Number(m[1]);
      if (n < cursor.seg) {
        fs.rmSync(path.join(dir, name), { force: true });
        continue;
      }
      this.segs.push(n);
    }
    this.segs.sort((a, b) => a - b);
    // A segment may end in a torn line (the process died mid-write): cut it at its last newline.
    for (const n of this.segs) this.#trimTorn(n);
    if (this.segs.length === 0 || this.segs[0] !== cursor.seg) cursor = { seg: this.segs[0] ?? 0, off: 0 };
    this.cursor = cursor;
    // Appends always go to a new segment: earlier ones are never written again.
    this.writeSeg = (this.segs.at(-1) ?? 0) + 1;
    this.writeFd = null;
    this.writeSize = 0;
    this.pendingBytes = this.#sizeFromCursor();
  }

  /**
   * One emitter per directory: `lock.pid` holds the owner's pid, created exclusively. A file
   * left by a process that is gone (killed) is taken over. Node has no flock(2): a pid file is
   * the portable stand-in (a reused pid may refuse a start: remove the file then).
   */
  #lock() {
    const f = path.join(this.dir, 'lock.pid');
    for (let attempt = 0; attempt < 3; attempt++) {
      try {
        fs.writeFileSync(f, String(process.pid), { flag: 'wx' });
        this.lockFile = f;
        return;
      } catch (e) {
        if (e.code !== 'EEXIST') throw e;
      }
      let pid = 0;
      try {
        pid = Number(fs.readFileSync(f, 'utf8').trim());
      } catch {
        // removed meanwhile: try again
      }
      if (pid > 0 && alive(pid)) {
        throw new Error(`bufferDir ${this.dir} is in use by ${pid === process.pid ? 'another emitter of this process' : `process ${pid}`} (${f})`);
      }
      fs.rmSync(f, { force: true });
    }
    throw new Error(`bufferDir ${this.dir}: cannot take its lock ${f}`);
  }

  #file(n) {
    return path.join(this.dir, `seg-${String(n).padStart(10, '0')}.ndjson`);
  }

  #trimTorn(n) {
    const f = this.#file(n);
    const size = fs.statSync(f).size;
    if (size === 0) return;
    const fd = fs.openSync(f, 'r+');
    try {
      const tail = Buffer.alloc(Math.min(size, 1 << 20));
      fs.readSync(fd, tail, 0, tail.length, size - tail.length);
      if (tail[tail.length - 1] === 0x0a) return;
      const nl = tail.lastIndexOf(0x0a);
      fs.ftruncateSync(fd, nl < 0 ? size - tail.length : size - tail.length + nl + 1);
    } finally {
      fs.closeSync(fd);
    }
  }

  #sizeFromCursor() {
    let total = 0;
    for (const n of this.segs) total += fs.statSync(this.#file(n)).size;
    return Math.max(0, total - this.cursor.off);
  }

  /** Whether `bytes` more fit under the cap. */
  fits(bytes) {
    return this.pendingBytes + bytes <= this.maxBytes;
  }

  /** Appends lines (each without its newline), in one write. */
  append(lines) {
    if (lines.length === 0) return;
    if (this.writeFd === null || this.writeSize >= this.segmentBytes) {
      if (this.writeFd !== null) {
        fs.closeSync(this.writeFd);
        this.writeSeg += 1;
      }
      this.writeFd = fs.openSync(this.#file(this.writeSeg), 'a');
      this.writeSize = 0;
      this.segs.push(this.writeSeg);
      if (this.segs.length === 1) this.cursor = { seg: this.writeSeg, off: 0 };
    }
    const data = Buffer.from(lines.join('\n') + '\n');
    fs.writeSync(this.writeFd, data);
    this.writeSize += data.length;
    this.pendingBytes += data.length;
  }

  /**
   * The next lines to deliver from the cursor: at most `maxEvents` lines and `maxBytes` bytes
   * (at least one line). Returns `{lines, end}` (pass `end` to {@link commit}), or undefined
   * when everything is delivered.
   */
  read(maxEvents, maxBytes) {
    while (this.segs.length > 0) {
      const seg = this.cursor.seg;
      const f = this.#file(seg);
      const size = fs.statSync(f).size;
      if (this.cursor.off < size) {
        const want = Math.min(size - this.cursor.off, maxBytes + 1);
        const buf = Buffer.alloc(want);
        const fd = fs.openSync(f, 'r');
        let got;
        try {
          got = fs.readSync(fd, buf, 0, want, this.cursor.off);
        } finally {
          fs.closeSync(fd);
        }
        const lines = [];
        let start = 0;
        let used = 0;
        while (lines.length < maxEvents) {
          const nl = buf.indexOf(0x0a, start);
          if (nl < 0 || nl >= got) break;
          if (lines.length > 0 && nl + 1 > maxBytes) break;
          lines.push(buf.toString('utf8', start, nl));
          start = nl + 1;
          used = start;
        }
        if (lines.length === 0) {
          // One line longer than maxBytes (written under a larger limit): read it whole.
          const whole = fs.readFileSync(f).subarray(this.cursor.off);
          const nl = whole.indexOf(0x0a);
          if (nl < 0) return undefined; // only a line still being written
          return { lines: [whole.toString('utf8', 0, nl)], end: { seg, off: this.cursor.off + nl + 1 } };
        }
        return { lines, end: { seg, off: this.cursor.off + used } };
      }
      // This segment is delivered: move on unless it is the one being appended to.
      if (seg === this.writeSeg && this.writeFd !== null) return undefined;
      const next = this.segs.find((n) => n > seg);
      if (next === undefined) return undefined;
      this.commit({ seg: next, off: 0 });
    }
    return undefined;
  }

  /** Marks everything before `end` delivered: the cursor file is replaced, delivered segments deleted. */
  commit(end) {
    const delivered =
      end.seg === this.cursor.seg ? end.off - this.cursor.off : this.#remainder(this.cursor) + end.off;
    this.cursor = { seg: end.seg, off: end.off };
    this.pendingBytes = Math.max(0, this.pendingBytes - delivered);
    const tmp = path.join(this.dir, `${CURSOR}.tmp`);
    fs.writeFileSync(tmp, JSON.stringify(this.cursor));
    fs.renameSync(tmp, path.join(this.dir, CURSOR));
    while (this.segs.length > 0 && this.segs[0] < end.seg) {
      fs.rmSync(this.#file(this.segs.shift()), { force: true });
    }
  }

  #remainder(c) {
    try {
      return fs.statSync(this.#file(c.seg)).size - c.off;
    } catch {
      return 0;
    }
  }

  /** Whether lines wait to be delivered. */
  hasPending() {
    return this.pendingBytes > 0;
  }

  /** Flushes the appends to disk (fsync), closes the file and releases the directory. */
  close() {
    if (this.writeFd !== null) {
      fs.fsyncSync(this.writeFd);
      fs.closeSync(this.writeFd);
      this.writeFd = null;
    }
    if (this.lockFile) {
      fs.rmSync(this.lockFile, { force: true });
      this.lockFile = null;
    }
  }
}

function alive(pid) {
  try {
    process.kill(pid, 0);
    return true;
  } catch (e) {
    return e.code === 'EPERM';
  }
}
