// Talking to the Sluice API from the console: the token (sessionStorage), JSON and NDJSON
// reads with progress, the Server-Sent Events tail over fetch (EventSource cannot send an
// Authorization header), and the Prometheus text of /metrics. Every call takes an AbortSignal.

const TOKEN_KEY = 'sluice.token';

/** The token the user pasted ('' when none). */
export function token() {
  return sessionStorage.getItem(TOKEN_KEY) || '';
}

/** Keeps `t` for this tab only ('' forgets it). */
export function setToken(t) {
  if (t) sessionStorage.setItem(TOKEN_KEY, t.trim());
  else sessionStorage.removeItem(TOKEN_KEY);
}

/** An answer the API refused: its status and its `error` text (which may hold a caret). */
export class ApiError extends Error {
  constructor(status, message) {
    super(message);
    this.status = status;
  }
}

/** A query string from an object; empty values are left out, arrays repeat the key. */
export function qs(params) {
  const q = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) {
    if (Array.isArray(v)) v.forEach((x) => q.append(k, x));
    else if (v !== undefined && v !== null && v !== '') q.append(k, v);
  }
  return q.toString();
}

async function request(path, signal) {
  const headers = {};
  const t = token();
  if (t) headers.Authorization = 'Bearer ' + t;
  const r = await fetch(path, { headers, signal, cache: 'no-store' });
  if (!r.ok) {
    let msg = r.statusText;
    try {
      const body = await r.text();
      try {
        msg = JSON.parse(body).error || body;
      } catch {
        msg = body || msg;
      }
    } catch { /* the body is gone: keep the status text */ }
    if (r.status === 401) msg += ' — paste a token with scope read (top right)';
    throw new ApiError(r.status, msg);
  }
  return r;
}

/** GET `path` as JSON. */
export async function getJson(path, signal) {
  return (await request(path, signal)).json();
}

/** GET `path` as text. */
export async function getText(path, signal) {
  return (await request(path, signal)).text();
}

/**
 * GET `path` as NDJSON, calling `onLine(obj)` per line and `onProgress({lines, bytes})` per
 * chunk; the `{"_sluice":…}` trailer is returned, not passed on. Stops early when `onLine`
 * returns false (the rest is cancelled).
 */
export async function ndjson(path, { signal, onLine, onProgress } = {}) {
  const r = await request(path, signal);
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let lines = 0;
  let bytes = 0;
  let trailer = null;
  const take = (line) => {
    if (!line.trim()) return true;
    const obj = JSON.parse(line);
    if (obj && typeof obj === 'object' && '_sluice' in obj && Object.keys(obj).length === 1) {
      trailer = obj._sluice;
      return true;
    }
    lines++;
    return onLine ? onLine(obj) !== false : true;
  };
  for (;;) {
    const { done, value } = await reader.read();
    if (done) break;
    bytes += value.length;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      const line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (!take(line)) {
        reader.cancel().catch(() => {});
        return { trailer, lines, bytes, stopped: true };
      }
    }
    if (onProgress) onProgress({ lines, bytes });
  }
  take(buf + dec.decode());
  return { trailer, lines, bytes, stopped: false };
}

/**
 * Follows the Server-Sent Events at `path`, calling `onEvent(name, data)` per event (data is
 * the text of its `data:` lines), until the stream ends or `signal` aborts.
 */
export async function sse(path, { signal, onEvent, onOpen }) {
  const r = await request(path, signal);
  if (onOpen) onOpen();
  const reader = r.body.getReader();
  const dec = new TextDecoder();
  let buf = '';
  let name = 'message';
  let data = [];
  for (;;) {
    const { done, value } = await reader.read();
    if (done) return;
    buf += dec.decode(value, { stream: true });
    let nl;
    while ((nl = buf.indexOf('\n')) >= 0) {
      let line = buf.slice(0, nl);
      buf = buf.slice(nl + 1);
      if (line.endsWith('\r')) line = line.slice(0, -1);
      if (line === '') {
        if (data.length) onEvent(name, data.join('\n'));
        name = 'message';
        data = [];
      } else if (line.startsWith('event:')) {
        name = line.slice(6).trim();
      } else if (line.startsWith('data:')) {
        data.push(line.slice(5).replace(/^ /, ''));
      }
    }
  }
}

/** The Prometheus text format as `[{name, labels, value}]` (comments skipped). */
export function parseMetrics(text) {
  const out = [];
  for (const line of text.split('\n')) {
    if (!line || line[0] === '#') continue;
    const m = /^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)/.exec(line);
    if (!m) continue;
    const labels = {};
    if (m[3]) {
      for (const l of m[3].matchAll(/([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"/g)) {
        labels[l[1]] = l[2].replace(/\\(.)/g, (_, c) => (c === 'n' ? '\n' : c));
      }
    }
    out.push({ name: m[1], labels, value: Number(m[4]) });
  }
  return out;
}

/** The sum of every series named `name` whose labels include `match`. */
export function metricSum(ms, name, match = {}) {
  let s = 0;
  for (const m of ms) {
    if (m.name !== name) continue;
    if (Object.entries(match).every(([k, v]) => m.labels[k] === v)) s += m.value;
  }
  return s;
}
