// Connections shared by the emitter and the reader: HTTP(S) requests with a timeout, tokens,
// a CA file, and TCP(+TLS) connections. node:http rather than fetch: fetch cannot trust an
// extra CA file without undici's dispatcher, which is not importable without a dependency.

import fs from 'node:fs';
import http from 'node:http';
import https from 'node:https';
import net from 'node:net';
import tls from 'node:tls';

/** An error of a request the server refused or that could not be made. */
export class SluiceError extends Error {
  /**
   * @param {string} message
   * @param {{status?: number, retryable?: boolean, written?: boolean}} [info]
   */
  constructor(message, info = {}) {
    super(message);
    this.name = 'SluiceError';
    /** HTTP status, when the server answered. */
    this.status = info.status;
    /** Whether resending may help (network errors, 5xx, 408, 429, `error unavailable`). */
    this.retryable = info.retryable ?? false;
    /** Whether the request had been sent whole before it failed (its outcome is unknown). */
    this.written = info.written ?? false;
  }
}

/** The token to use: the given one, else SLUICE_TOKEN; "" means none. */
export function resolveToken(token) {
  const t = token === undefined || token === null ? process.env.SLUICE_TOKEN ?? '' : token;
  if (typeof t !== 'string') throw new TypeError('token must be a string');
  if (/[\s]/.test(t)) throw new TypeError('token must not contain whitespace');
  return t;
}

/** The CA certificates (PEM text) of a CA file, else SLUICE_CA's, else undefined (system CAs). */
export function loadCa(ca) {
  const file = ca ?? process.env.SLUICE_CA;
  if (!file) return undefined;
  try {
    return fs.readFileSync(file);
  } catch (e) {
    throw new TypeError(`ca: cannot read ${file}: ${e.message}`);
  }
}

/** Parses "host:port" (or "[v6]:port"). */
export function hostPort(addr, what) {
  const m = /^(?:\[([^\]]+)\]|([^:]*)):(\d{1,5})$/.exec(String(addr));
  if (!m || Number(m[3]) > 65535) throw new TypeError(`${what}: expected host:port, got ${JSON.stringify(addr)}`);
  return { host: m[1] ?? (m[2] || '127.0.0.1'), port: Number(m[3]) };
}

/** Parses a base URL (http:// or https://). */
export function baseUrl(url, what) {
  let u;
  try {
    u = new URL(url);
  } catch {
    throw new TypeError(`${what}: expected a URL like http://127.0.0.1:8180, got ${JSON.stringify(url)}`);
  }
  if (u.protocol !== 'http:' && u.protocol !== 'https:') {
    throw new TypeError(`${what}: expected an http:// or https:// URL, got ${JSON.stringify(url)}`);
  }
  return u;
}

/** The URL of `path` (e.g. `/v1/events?x=1`) under the base URL `u` (its own path kept as a prefix). */
export function endpoint(u, path) {
  return new URL(`${u.origin}${u.pathname.replace(/\/+$/, '')}${path}`);
}

/**
 * One HTTP request. Resolves with `{status, body}` (body a Buffer) or, with `stream: true`,
 * `{status, res}` for a 200 (the body is read by the caller). Every phase is bounded by
 * `timeout` ms (connect, each socket read).
 */
export function request({ url, method = 'GET', headers = {}, body, token, ca, timeout, agent, stream = false }) {
  const u = url instanceof URL ? url : new URL(url);
  const mod = u.protocol === 'https:' ? https : http;
  const h = { ...headers };
  if (token) h.authorization = `Bearer ${token}`;
  if (body !== undefined) h['content-length'] = Buffer.byteLength(body);
  return new Promise((resolve, reject) => {
    let written = false;
    let done = false;
    const fail = (e) => {
      if (done) return;
      done = true;
      reject(new SluiceError(`${method} ${u.origin}${u.pathname}: ${e.message || e}`, { retryable: true, written }));
    };
    const req = mod.request(
      u,
      { method, headers: h, ca, agent, timeout },
      (res) => {
        if (stream && res.statusCode === 200) {
          done = true;
          resolve({ status: 200, res, req });
          return;
        }
        const chunks = [];
        res.on('data', (c) => chunks.push(c));
        res.on('end', () => {
          if (done) return;
          done = true;
          resolve({ status: res.statusCode, body: Buffer.concat(chunks), headers: res.headers });
        });
        res.on('error', fail);
        res.on('aborted', () => fail(new Error('response aborted')));
      },
    );
    req.on('timeout', () => req.destroy(new Error(`no answer within ${timeout} ms`)));
    req.on('error', fail);
    req.on('finish', () => {
      written = true;
    });
    req.end(body);
  });
}

/** The `error` message of a JSON error body, else the body's text (shortened). */
export function errorText(body) {
  const text = body.toString('utf8');
  try {
    const j = JSON.parse(text);
    if (j && typeof j.error === 'string') return j.error;
  } catch {
    // not JSON: the text itself
  }
  return text.slice(0, 300);
}

/**
 * Opens a TCP (or TLS) connection and, with a token, authenticates it (`auth <token>` answered
 * `ok auth <name>`). Resolves with a {@link LineConn}.
 */
export async function tcpConnect({ host, port, tls: useTls, ca, token, timeout }) {
  const sock = await new Promise((resolve, reject) => {
    const opts = { host, port, timeout };
    const s = useTls
      ? tls.connect({ ...opts, ca, servername: net.isIP(host) ? undefined : host }, () => ok())
      : net.connect(opts, () => ok());
    const timer = setTimeout(() => s.destroy(new Error(`connect timed out after ${timeout} ms`)), timeout);
    function ok() {
      clearTimeout(timer);
      s.removeListener('error', onErr);
      resolve(s);
    }
    function onErr(e) {
      clearTimeout(timer);
      reject(new SluiceError(`TCP ${host}:${port}: ${e.message}`, { retryable: true }));
    }
    s.once('error', onErr);
  });
  const conn = new LineConn(sock, `${host}:${port}`, timeout);
  if (token) {
    const reply = await conn.exchange(`auth ${token}\n`);
    if (!reply.startsWith('ok auth')) {
      conn.close();
      throw new SluiceError(`TCP ${host}:${port}: auth refused: ${reply}`, { status: 401 });
    }
  }
  return conn;
}

/** A socket that sends a message and waits for its one reply line. */
export class LineConn {
  constructor(sock, what, timeout) {
    this.sock = sock;
    this.what = what;
    this.timeout = timeout;
    this.buf = '';
    this.waiter = null;
    this.closed = false;
    sock.setEncoding('utf8');
    sock.setNoDelay(true);
    sock.on('data', (d) => {
      this.buf += d;
      this.#deliver();
    });
    const end = (e) => {
      this.closed = true;
      const w = this.waiter;
      this.waiter = null;
      if (w) w.reject(new SluiceError(`TCP ${this.what}: ${e ? e.message : 'connection closed before the acknowledgement'}`, { retryable: true, written: w.written }));
    };
    sock.on('error', end);
    sock.on('close', () => end(null));
  }

  #deliver() {
    const i = this.buf.indexOf('\n');
    if (i < 0 || !this.waiter) return;
    const line = this.buf.slice(0, i).replace(/\r$/, '');
    this.buf = this.buf.slice(i + 1);
    const w = this.waiter;
    this.waiter = null;
    w.resolve(line);
  }

  /** Writes `text` and resolves with the next reply line (without its newline). */
  exchange(text) {
    if (this.closed) return Promise.reject(new SluiceError(`TCP ${this.what}: connection closed`, { retryable: true }));
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        this.waiter = null;
        this.close();
        reject(new SluiceError(`TCP ${this.what}: no acknowledgement within ${this.timeout} ms`, { retryable: true, written: true }));
      }, this.timeout);
      const w = {
        written: false,
        resolve: (l) => {
          clearTimeout(timer);
          resolve(l);
        },
        reject: (e) => {
          clearTimeout(timer);
          reject(e);
        },
      };
      this.waiter = w;
      this.sock.write(text, () => {
        w.written = true;
      });
      this.#deliver();
    });
  }

  close() {
    this.closed = true;
    this.sock.destroy();
  }
}
