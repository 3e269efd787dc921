// Reading events back from a running `sluice serve`: a time range (`GET /v1/events`, NDJSON)
// and the live stream (`GET /v1/tail`, Server-Sent Events with a resumable cursor).

import http from 'node:http';
import https from 'node:https';

import { SluiceError, baseUrl, endpoint, errorText, loadCa, request, resolveToken } from './net.js';

/** A time for `from` / `to`: Unix seconds, a Date, or a string the server parses (RFC 3339, `now`, `-5m`). */
function timeParam(t, what) {
  if (t instanceof Date) {
    if (Number.isNaN(t.getTime())) throw new TypeError(`${what}: invalid Date`);
    return String(Math.floor(t.getTime() / 1000));
  }
  if (typeof t === 'number') {
    if (!Number.isFinite(t)) throw new TypeError(`${what}: not a finite number`);
    // Date.now()-style milliseconds are taken too (the same rule as event epochs).
    return String(Math.floor(t >= 1e11 ? t / 1000 : t));
  }
  if (typeof t === 'string' && t !== '') return t;
  throw new TypeError(`${what}: expected Unix seconds, a Date or a time string, got ${JSON.stringify(t)}`);
}

function filterParams(q, o) {
  for (const k of ['dc', 'type', 'subtype', 'where']) {
    if (o[k] !== undefined && o[k] !== null) q.append(k, String(o[k]));
  }
  const sel = o.select === undefined || o.select === null ? [] : typeof o.select === 'string' ? o.select.split(',') : o.select;
  for (const p of sel) if (String(p).trim()) q.append('select', String(p).trim());
}

/** The events of one range read: an async iterable; `warnings` and `hints` are filled as it goes. */
export class Events {
  constructor(open) {
    this.open = open;
    /** Chunks that could not be read (skipped): `{key, reason}`. */
    this.warnings = [];
    /** Advice about an empty or odd answer (`hints: true`). */
    this.hints = [];
  }

  async *[Symbol.asyncIterator]() {
    const { res, req } = await this.open();
    try {
      for await (const line of lines(res)) {
        if (!line.trim()) continue;
        const v = JSON.parse(line);
        if (v && typeof v === 'object' && v._sluice && Object.keys(v).length === 1) {
          // The trailer line: warnings and hints, never an event.
          this.warnings.push(...(v._sluice.warnings ?? []));
          this.hints.push(...(v._sluice.hints ?? []));
          continue;
        }
        yield v;
      }
    } finally {
      req.destroy();
    }
  }

  /** All the events, as an array. */
  async toArray() {
    const out = [];
    for await (const e of this) out.push(e);
    return out;
  }
}

/**
 * A tail: an async iterable that follows the live stream for ever (or `idleTimeout` ms without
 * an event), reconnecting from its cursor after a failure or a server restart. `cursor` is the
 * resume token: read after an event, it covers that event and everything before it.
 */
export class Tail {
  constructor(reader, params) {
    this.reader = reader;
    this.params = params;
    /** The resume token (undefined until the first one is known). */
    this.cursor = params.cursor;
    /** Chunks that could not be read (skipped): `{key, reason}`. */
    this.warnings = [];
    /** Reconnections made. */
    this.reconnects = 0;
    this.stopped = false;
    this.req = null;
  }

  /** Stops the tail: a pending iteration ends. */
  close() {
    this.stopped = true;
    this.req?.destroy();
  }

  async *[Symbol.asyncIterator]() {
    const { idleTimeout } = this.params;
    let last = Date.now();
    let backoff = 100;
    const left = () => (idleTimeout === undefined ? Infinity : idleTimeout - (Date.now() - last));
    try {
      while (!this.stopped) {
        if (left() <= 0) return;
        const q = new URLSearchParams();
        if (this.cursor !== undefined) q.append('cursor', this.cursor);
        else if (this.params.from !== undefined) q.append('from', timeParam(this.params.from, 'from'));
        filterParams(q, this.params);
        let opened;
        try {
          opened = await this.reader._get('/v1/tail', q, true);
        } catch (e) {
          // A request the server refuses (a bad filter or cursor, the token): retrying cannot help.
          if (e.status >= 400 && e.status < 500) throw e;
          if (this.stopped) return;
          this.warnings.push({ key: 'tail', reason: e.message });
          await sleep(Math.min(backoff, Math.max(0, left())));
          backoff = Math.min(backoff * 2, 5000);
          this.reconnects += 1;
          continue;
        }
        backoff = 100;
        const { res, req } = opened;
        this.req = req;
        // The server writes only when there is something new: a quiet stream is re-opened
        // from the cursor after the reader's timeout (or idleTimeout).
        const quiet = Math.min(this.reader.timeout * 6, left());
        let timer;
        const arm = () => {
          clearTimeout(timer);
          timer = setTimeout(() => req.destroy(), Math.max(50, Math.min(quiet, left())));
        };
        arm();
        let kind = 'message';
        let data = [];
        let pending = [];
        try {
          for await (const line of lines(res)) {
            arm();
            if (line.startsWith('event:')) {
              kind = line.slice(6).trim();
            } else if (line.startsWith('data:')) {
              data.push(line[5] === ' ' ? line.slice(6) : line.slice(5));
            } else if (line === '') {
              if (data.length) {
                const text = data.join('\n');
                if (kind === 'event') {
                  pending.push(JSON.parse(text));
                } else if (kind === 'cursor') {
                  if (pending.length) {
                    const batch = pending;
                    pending = [];
                    last = Date.now();
                    for (let i = 0; i < batch.length; i++) {
                      // The cursor moves as the batch's last event is handed out.
                      if (i === batch.length - 1) this.cursor = text;
                      yield batch[i];
                    }
                  } else {
                    this.cursor = text;
                  }
                } else if (kind === 'warning' || kind === 'notice') {
                  try {
                    this.warnings.push(JSON.parse(text));
                  } catch {
                    this.warnings.push({ key: kind, reason: text });
                  }
                }
              }
              kind = 'message';
              data = [];
            }
          }
        } catch {
          // quiet or broken: re-open from the cursor
        } finally {
          clearTimeout(timer);
          req.destroy();
        }
        if (!this.stopped) this.reconnects += 1;
      }
    } finally {
      this.req?.destroy();
    }
  }
}

/** Reads events from a running `sluice serve`. */
export class Reader {
  /** @param {import('../index.d.ts').ReaderOptions} opts */
  constructor({ server, token, ca, timeout = 10_000 } = {}) {
    this.url = baseUrl(server, 'server');
    this.token = resolveToken(token);
    this.ca = this.url.protocol === 'https:' ? loadCa(ca) : undefined;
    if (ca && this.url.protocol !== 'https:') throw new TypeError('ca needs an https:// server');
    this.timeout = timeout;
    this.agent = new (this.url.protocol === 'https:' ? https : http).Agent({ keepAlive: false });
  }

  /**
   * The events of `[from, to)` (to: default now + 1), in epoch order, filtered by dc, type,
   * subtype and `where`; with `select`, objects of the selected paths instead.
   */
  range(opts = {}) {
    if (opts.from === undefined) throw new TypeError('range: from is required');
    const q = new URLSearchParams();
    q.append('from', timeParam(opts.from, 'from'));
    if (opts.to !== undefined) q.append('to', timeParam(opts.to, 'to'));
    filterParams(q, opts);
    if (opts.hints) q.append('hints', '1');
    return new Events(() => this._get('/v1/events', q, true));
  }

  /** Follows the stream from `from` (default now) or `cursor`, filtered as range(). */
  tail(opts = {}) {
    return new Tail(this, { ...opts });
  }

  /** The completeness counts of `[from, to)`: one object per (epoch, dc, type, subtype). */
  async counts({ from, to, dc } = {}) {
    const q = new URLSearchParams();
    q.append('from', timeParam(from, 'from'));
    if (to !== undefined) q.append('to', timeParam(to, 'to'));
    if (dc !== undefined) q.append('dc', dc);
    const res = await this._get('/v1/counts', q, false);
    return res.body
      .toString('utf8')
      .split('\n')
      .filter((l) => l.trim())
      .map((l) => JSON.parse(l));
  }

  async _get(path, q, stream) {
    const url = endpoint(this.url, `${path}?${q}`);
    const r = await request({ url, token: this.token, ca: this.ca, timeout: this.timeout, agent: this.agent, stream });
    if (r.status !== 200) {
      let msg = errorText(r.body);
      if (r.status === 401 || r.status === 403) msg += ' (the token: token or SLUICE_TOKEN, scope read)';
      throw new SluiceError(`${this.url.origin}${path}: ${r.status}: ${msg}`, { status: r.status, retryable: r.status >= 500 });
    }
    return r;
  }
}

/** The lines of a response body (without their line ends). */
async function* lines(res) {
  res.setEncoding('utf8');
  let buf = '';
  for await (const chunk of res) {
    buf += chunk;
    let i;
    while ((i = buf.indexOf('\n')) >= 0) {
      yield buf.slice(0, i).replace(/\r$/, '');
      buf = buf.slice(i + 1);
    }
  }
  if (buf) yield buf;
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
