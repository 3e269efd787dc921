// The emitter: `emit(event)` from any program, never blocking, never throwing.
//
// `emit` serialises the event (JSON, tags filled in) onto a bounded memory queue and returns.
// One sender loop takes batches off it (or, with a disk buffer, off the buffer the queue is
// moved to every event-loop turn) and sends them: UDP datagrams (fire and forget), TCP lines
// (one JSON array a line, each answered `ok <accepted> <dropped>` once durable) or HTTP
// `POST /v1/events` (NDJSON). One batch is in flight at a time, so the order of events is kept
// and the disk buffer's cursor only moves forward.
//
// Failures a resend may fix (no connection, a timeout, 5xx, `error unavailable`) are retried
// with backoff (100 ms doubling to 5 s, jittered) for the retry budget (120 s of outage per
// batch); then the batch is dropped as `retry_budget`. With a disk buffer nothing is dropped
// for time: the batch stays on disk and is retried until it is delivered, and the buffer's
// cap decides (`buffer_full`). Every drop is counted in stats() and reported to the server
// (`POST /v1/drops`) once it answers again, so its completeness counts show `client:<reason>`.

import dgram from 'node:dgram';
import http from 'node:http';
import https from 'node:https';

import { DiskBuffer } from './buffer.js';
import { DropLedger } from './drops.js';
import { SluiceError, baseUrl, endpoint, errorText, hostPort, loadCa, request, resolveToken, tcpConnect } from './net.js';
import { dropKey, validTag } from './tags.js';

const DEFAULTS = {
  maxQueue: 100_000,
  batchSize: 1000,
  flushInterval: 200,
  maxPayloadBytes: 4 << 20,
  maxDatagramBytes: 8192,
  maxEventBytes: 64 << 10,
  timeout: 5000,
  retryBudget: 120_000,
  backoffInitial: 100,
  backoffMax: 5000,
  bufferMaxBytes: 256 << 20,
  maxDropRecords: 10_000,
};

const STAT_NAMES = [
  'emitted', 'sent', 'serverDropped', 'payloads', 'sendErrors', 'retries', 'resent', 'invalid', 'unauthorized',
];

/** Sends events to a Sluice collector without ever blocking or failing the caller. */
export class Emitter {
  /** @param {import('../index.d.ts').EmitterOptions} opts */
  constructor(opts = {}) {
    const o = { ...DEFAULTS, ...opts };
    const given = ['udp', 'tcp', 'http'].filter((k) => o[k] !== undefined && o[k] !== null);
    if (given.length !== 1) throw new TypeError('give exactly one of udp, tcp or http');
    this.transport = given[0];
    const target = o[this.transport];
    this.target = String(target);
    for (const k of ['maxQueue', 'batchSize', 'maxPayloadBytes', 'maxDatagramBytes', 'maxEventBytes', 'timeout', 'bufferMaxBytes', 'maxDropRecords']) {
      if (!Number.isInteger(o[k]) || o[k] < 1) throw new TypeError(`${k} must be a positive integer, not ${o[k]}`);
    }
    for (const k of ['flushInterval', 'retryBudget', 'backoffInitial', 'backoffMax']) {
      if (typeof o[k] !== 'number' || !(o[k] >= 0)) throw new TypeError(`${k} must be a number of ms >= 0, not ${o[k]}`);
    }
    if (o.dc !== undefined && !validTag(o.dc)) throw new TypeError(`bad dc ${JSON.stringify(o.dc)}: 1-64 bytes, no ':' or '|'`);
    this.opts = o;
    this.dc = o.dc;

    let useTls = false;
    if (this.transport === 'http') {
      this.url = baseUrl(target, 'http');
      useTls = this.url.protocol === 'https:';
      if (o.tls) throw new TypeError('http: TLS follows the URL: use https://');
    } else {
      let addr = this.target;
      if (this.transport === 'tcp' && addr.startsWith('tls://')) {
        addr = addr.slice('tls://'.length);
        useTls = true;
      } else if (this.transport === 'tcp') {
        useTls = Boolean(o.tls);
      }
      this.addr = hostPort(addr, this.transport);
    }
    if (this.transport === 'udp') {
      if (o.token || o.tls || o.ca) {
        throw new TypeError('udp: no token or TLS (UDP carries no credentials; the collector takes it by source address): use tcp or http');
      }
      this.token = '';
    } else {
      this.token = resolveToken(o.token);
    }
    this.tls = useTls;
    if (!useTls && o.ca) throw new TypeError(`${this.transport}: ca needs TLS (https:// or tls: true)`);
    this.ca = useTls ? loadCa(o.ca) : undefined;
    // Where drops are reported: the HTTP target itself, or `dropsUrl` for TCP and UDP.
    this.dropsUrl = this.transport === 'http' ? this.url : o.dropsUrl ? baseUrl(o.dropsUrl, 'dropsUrl') : undefined;
    this.dropsCa = this.dropsUrl?.protocol === 'https:' ? loadCa(o.ca) : undefined;
    this.maxEventBytes = this.transport === 'udp' ? Math.min(o.maxEventBytes, o.maxDatagramBytes - 2) : o.maxEventBytes;
    this.batchBytes = this.transport === 'udp' ? o.maxPayloadBytes : o.maxPayloadBytes;

    this.queue = [];
    this.qHead = 0;
    this.closed = false;
    this.stopped = false;
    this.inFlight = 0;
    this.urgent = false;
    this.backlog = false;
    // The sender loop's three waits, each woken by its own events: idle (any emit), batching
    // (a full batch, flush, close), backoff (close only: emits must not cut an outage's backoff).
    this.idleWake = null;
    this.batchWake = null;
    this.backoffWake = null;
    this.counters = Object.fromEntries(STAT_NAMES.map((k) => [k, 0]));
    this.dropped = {};
    this.ledger = new DropLedger(o.maxDropRecords);
    this.onError = typeof o.onError === 'function' ? o.onError : null;
    this.buffer = o.bufferDir ? new DiskBuffer(o.bufferDir, o.bufferMaxBytes) : null;
    this.intakeScheduled = false;
    this.conn = null;
    this.udpSock = null;
    this.agent = this.transport === 'http' ? new (useTls ? https : http).Agent({ keepAlive: true, maxSockets: 2 }) : undefined;
    this.loop = this.#run().catch((e) => this.#report(`sender stopped: ${e.stack || e}`, 0));
    // What the buffer holds from an earlier process is sent first.
    if (this.buffer?.hasPending()) this.backlog = true;
  }

  /**
   * Queues `event` (an object with a `type`; `subtype`, `epoch`, `dc` optional) to be sent and
   * returns at once: true if queued, false if dropped (counted in stats()). `epoch` defaults to
   * the current whole second; any value given (ms, float seconds, RFC 3339) is sent as given.
   * Never throws. Do not rely on later changes to `event`: it is serialised here.
   */
  emit(event) {
    try {
      if (this.closed) {
        this.#drop('closed', event, 1, false);
        return false;
      }
      if (event === null || typeof event !== 'object' || Array.isArray(event) || typeof event.type !== 'string') {
        this.counters.invalid += 1;
        return false;
      }
      let ev = event;
      if (ev.epoch === undefined || (this.dc !== undefined && ev.dc === undefined)) {
        ev = { ...event };
        if (ev.epoch === undefined) ev.epoch = Math.floor(Date.now() / 1000);
        if (this.dc !== undefined && ev.dc === undefined) ev.dc = this.dc;
      }
      const line = JSON.stringify(ev);
      if (Buffer.byteLength(line) > this.maxEventBytes) {
        this.#drop('too_large', ev);
        return false;
      }
      if (this.queue.length - this.qHead >= this.opts.maxQueue) {
        this.#drop('queue_full', ev);
        return false;
      }
      this.queue.push(line);
      this.counters.emitted += 1;
      if (this.buffer) this.#scheduleIntake();
      else this.#wake(this.queue.length - this.qHead >= this.opts.batchSize, false);
      return true;
    } catch {
      // Not serialisable (a BigInt, a cycle): counted, never thrown at the caller.
      this.counters.invalid += 1;
      return false;
    }
  }

  /**
   * Waits until every event emitted so far is delivered or given up on (and, with a disk
   * buffer, the buffer is empty). Resolves false if `timeout` ms passed first.
   */
  async flush({ timeout } = {}) {
    const end = timeout === undefined ? Infinity : Date.now() + timeout;
    this.urgent = true;
    this.#wake(true, false);
    try {
      while (!this.#idle()) {
        if (Date.now() >= end) return false;
        await sleep(Math.min(20, end - Date.now()));
      }
      return true;
    } finally {
      this.urgent = false;
    }
  }

  /**
   * Sends what is queued (waiting at most `timeout` ms, default 5000), reports pending drops,
   * and stops. Without a disk buffer, events still queued then are dropped as `closed`; with
   * one they stay on disk for the next emitter. Later emit() calls return false. Resolves true
   * if everything was delivered.
   */
  async close({ timeout = 5000 } = {}) {
    if (this.stopped) return this.#idle();
    this.closed = true;
    this.closeDeadline = Date.now() + timeout;
    const closedBefore = this.dropped.closed ?? 0;
    let ok = await this.flush({ timeout });
    this.stopped = true;
    this.#wake(true, true);
    await Promise.race([this.loop, sleep(Math.max(0, this.closeDeadline - Date.now()) + 100)]);
    if (this.buffer) {
      this.#intake();
    } else {
      const left = this.queue.slice(this.qHead);
      this.queue = [];
      this.qHead = 0;
      for (const line of left) this.#drop('closed', safeParse(line));
      if (left.length) this.#report(`closed with ${left.length} event(s) not sent`, left.length);
    }
    if ((this.dropped.closed ?? 0) > closedBefore) ok = false;
    if (this.dropsUrl && this.ledger.records.size > 0) {
      await this.ledger.report(this.#reportArgs(true));
    }
    this.conn?.close();
    this.conn = null;
    this.udpSock?.close();
    this.udpSock = null;
    this.agent?.destroy();
    this.buffer?.close();
    return ok;
  }

  /** Counters since construction; `dropped` by reason. */
  stats() {
    return {
      ...this.counters,
      queued: this.queue.length - this.qHead,
      inFlight: this.inFlight,
      bufferedBytes: this.buffer ? this.buffer.pendingBytes : 0,
      dropped: { ...this.dropped },
      droppedTotal: Object.values(this.dropped).reduce((a, b) => a + b, 0),
      dropsReported: this.ledger.reported,
      dropsPending: this.ledger.pending(),
      dropsUnreported: this.ledger.unrecorded,
    };
  }

  // ---- internals ----------------------------------------------------------------------------

  #idle() {
    return this.queue.length === this.qHead && this.inFlight === 0 && !(this.buffer && this.buffer.hasPending());
  }

  #drop(reason, ev, count = 1, record = true) {
    this.dropped[reason] = (this.dropped[reason] ?? 0) + count;
    if (record) this.ledger.add(dropKey(ev), reason, count);
  }

  #report(message, events) {
    try {
      if (this.onError) this.onError(message, events);
    } catch {
      // the callback's own failure is not the caller's problem
    }
  }

  /** Wakes the idle wait; `batch`: the batching wait too; `backoff`: a retry's wait too. */
  #wake(batch, backoff) {
    const fns = [this.idleWake, batch ? this.batchWake : null, backoff ? this.backoffWake : null];
    for (const f of fns) if (f) f();
  }

  #scheduleIntake() {
    if (this.intakeScheduled) return;
    this.intakeScheduled = true;
    setImmediate(() => {
      this.intakeScheduled = false;
      this.#intake();
      this.#wake(this.urgent, false);
    });
  }

  /** Moves the memory queue to the disk buffer (what does not fit under its cap: `buffer_full`). */
  #intake() {
    if (!this.buffer || this.qHead === this.queue.length) return;
    const lines = this.queue.slice(this.qHead);
    this.queue = [];
    this.qHead = 0;
    const keep = [];
    let bytes = 0;
    for (const line of lines) {
      const n = Buffer.byteLength(line) + 1;
      if (!this.buffer.fits(bytes + n)) {
        this.#drop('buffer_full', safeParse(line));
        continue;
      }
      bytes += n;
      keep.push(line);
    }
    try {
      this.buffer.append(keep);
    } catch (e) {
      for (const line of keep) this.#drop('buffer_full', safeParse(line));
      this.#report(`disk buffer write failed: ${e.message}`, keep.length);
    }
  }

  /** The next batch: `{lines, commit}` or undefined. */
  #take() {
    const maxBytes = this.batchBytes;
    if (this.buffer) {
      this.#intake();
      const got = this.buffer.read(this.opts.batchSize, maxBytes);
      if (!got) return undefined;
      this.backlog = got.lines.length >= this.opts.batchSize || this.buffer.pendingBytes > maxBytes;
      return { lines: got.lines, commit: () => this.buffer.commit(got.end) };
    }
    const lines = [];
    let bytes = 0;
    while (this.qHead < this.queue.length && lines.length < this.opts.batchSize) {
      const line = this.queue[this.qHead];
      const n = Buffer.byteLength(line) + 1;
      if (lines.length > 0 && bytes + n > maxBytes) break;
      lines.push(line);
      bytes += n;
      this.qHead += 1;
    }
    if (this.qHead > 4096 && this.qHead * 2 > this.queue.length) {
      this.queue = this.queue.slice(this.qHead);
      this.qHead = 0;
    }
    this.backlog = this.#pendingCount() >= this.opts.batchSize;
    return lines.length ? { lines, commit: () => {} } : undefined;
  }

  #pendingCount() {
    return this.queue.length - this.qHead;
  }

  async #run() {
    for (;;) {
      if (this.stopped) return;
      const hasWork = this.#pendingCount() > 0 || (this.buffer && this.buffer.hasPending());
      if (!hasWork) {
        // Nothing to do: wait for emit() with no timer, so an idle emitter never keeps Node alive.
        await new Promise((r) => (this.idleWake = r));
        this.idleWake = null;
        continue;
      }
      if (!this.urgent && !this.closed && !this.backlog && this.#pendingCount() < this.opts.batchSize) {
        // Let a batch gather for flushInterval (cut short by a full batch, flush or close).
        await this.#sleep(this.opts.flushInterval, 'batchWake');
      }
      if (this.stopped) return;
      const batch = this.#take();
      if (!batch) {
        this.backlog = false;
        if (this.buffer?.hasPending()) await this.#sleep(this.opts.flushInterval, 'batchWake');
        continue;
      }
      this.inFlight = batch.lines.length;
      try {
        const done = await this.#deliver(batch.lines);
        if (done) batch.commit();
        else if (this.buffer) return; // closing: the rest stays on disk
      } catch (e) {
        this.#report(`internal error sending a batch: ${e.stack || e}`, batch.lines.length);
        batch.commit();
      } finally {
        this.inFlight = 0;
      }
    }
  }

  /** Sleeps `ms`, or less when the wait named `slot` is woken. */
  #sleep(ms, slot) {
    return new Promise((resolve) => {
      const t = setTimeout(done, ms);
      // With a disk buffer the events are safe on disk: waiting must not keep Node alive.
      if (this.buffer) t.unref();
      const self = this;
      function done() {
        clearTimeout(t);
        if (self[slot] === done) self[slot] = null;
        resolve();
      }
      this[slot] = done;
    });
  }

  /**
   * Delivers one batch, retrying within the budget. Resolves true when the batch is settled
   * (delivered, refused, or dropped), false when the emitter is closing and the batch is not
   * (with a disk buffer it stays there).
   */
  async #deliver(lines) {
    if (this.transport === 'udp') {
      await this.#sendUdp(lines);
      await this.#maybeReportDrops();
      return true;
    }
    let delay = this.opts.backoffInitial;
    let firstFailure;
    // Once an attempt was written whole and not answered, the server may hold the batch: each
    // later attempt may store it again (at least once). Counted once per batch in `resent`.
    let ambiguous = false;
    let resentCounted = false;
    for (;;) {
      if (ambiguous && !resentCounted) {
        this.counters.resent += lines.length;
        resentCounted = true;
      }
      let r;
      try {
        r = this.transport === 'tcp' ? await this.#sendTcp(lines) : await this.#sendHttp(lines);
      } catch (e) {
        if (!(e instanceof SluiceError) || !e.retryable) throw e;
        this.counters.sendErrors += 1;
        if (e.written) ambiguous = true;
        this.lastError = e.message;
        firstFailure ??= Date.now();
        const wait = delay * (0.5 + Math.random() / 2);
        if (this.closed && Date.now() + wait > (this.closeDeadline ?? 0)) {
          if (this.buffer) return false;
          for (const l of lines) this.#drop('closed', safeParse(l));
          this.#report(`closed with a batch of ${lines.length} not delivered: ${e.message}`, lines.length);
          return true;
        }
        if (!this.buffer && Date.now() - firstFailure + wait > this.opts.retryBudget) {
          for (const l of lines) this.#drop('retry_budget', safeParse(l));
          this.#report(`gave up after ${Math.round((Date.now() - firstFailure) / 1000)} s: ${e.message}`, lines.length);
          return true;
        }
        this.counters.retries += 1;
        await this.#sleep(wait, 'backoffWake');
        delay = Math.min(delay * 2, this.opts.backoffMax);
        continue;
      }
      this.counters.payloads += 1;
      if (r.kind === 'ok') {
        this.counters.sent += r.accepted;
        this.counters.serverDropped += r.dropped;
      } else if (r.kind === 'too_large' && lines.length > 1) {
        // Over the server's body limit: halves go separately.
        const half = Math.ceil(lines.length / 2);
        await this.#deliver(lines.slice(0, half));
        return this.#deliver(lines.slice(half));
      } else if (r.kind === 'unauthorized') {
        // Counted, not reported: a report with the same credentials would be refused too.
        this.counters.unauthorized += lines.length;
        this.#report(`${r.message}; ${lines.length} event(s) not sent (check the token: token or SLUICE_TOKEN)`, lines.length);
      } else {
        const reason = r.kind === 'too_large' ? 'too_large' : 'rejected';
        for (const l of lines) this.#drop(reason, safeParse(l));
        this.#report(`the collector refused ${lines.length} event(s): ${r.message}`, lines.length);
      }
      await this.#maybeReportDrops();
      return true;
    }
  }

  #reportArgs(force = false) {
    return { url: this.dropsUrl, token: this.token, ca: this.dropsCa, timeout: this.opts.timeout, agent: this.transport === 'http' ? this.agent : undefined, force };
  }

  async #maybeReportDrops() {
    if (this.dropsUrl && this.ledger.records.size > 0) await this.ledger.report(this.#reportArgs());
  }

  async #sendHttp(lines) {
    const res = await request({
      url: endpoint(this.url, '/v1/events'),
      method: 'POST',
      headers: { 'content-type': 'application/x-ndjson' },
      body: lines.join('\n') + '\n',
      token: this.token,
      ca: this.ca,
      timeout: this.opts.timeout,
      agent: this.agent,
    });
    const s = res.status;
    if (s >= 500 || s === 408 || s === 429) {
      // Not acknowledged (503: shutting down, backpressure): resend.
      throw new SluiceError(`HTTP ${this.target}: ${s} ${errorText(res.body)}`, { status: s, retryable: true });
    }
    if (s === 200) {
      let a = {};
      try {
        a = JSON.parse(res.body.toString('utf8'));
      } catch {
        // a 200 without a readable answer: the payload is durable, the numbers unknown
      }
      return { kind: 'ok', accepted: Number(a.accepted ?? lines.length) || 0, dropped: Number(a.dropped_total ?? 0) || 0 };
    }
    const message = `HTTP ${s} ${errorText(res.body)}`;
    if (s === 401 || s === 403) return { kind: 'unauthorized', message };
    if (s === 413) return { kind: 'too_large', message };
    return { kind: 'rejected', message };
  }

  async #sendTcp(lines) {
    if (!this.conn || this.conn.closed) {
      this.conn = null;
      try {
        this.conn = await tcpConnect({ ...this.addr, tls: this.tls, ca: this.ca, token: this.token, timeout: this.opts.timeout });
      } catch (e) {
        if (e instanceof SluiceError && e.status === 401) return { kind: 'unauthorized', message: e.message };
        throw e;
      }
    }
    const conn = this.conn;
    conn.sock.ref();
    let line;
    try {
      line = await conn.exchange(`[${lines.join(',')}]\n`);
    } catch (e) {
      conn.close();
      this.conn = null;
      throw e;
    } finally {
      conn.sock.unref();
    }
    const parts = line.split(' ');
    if (parts[0] === 'ok' && parts.length >= 3) {
      return { kind: 'ok', accepted: Number(parts[1]) || 0, dropped: Number(parts[2]) || 0 };
    }
    if (parts[0] === 'error' && parts[1] === 'unavailable') {
      conn.close();
      this.conn = null;
      throw new SluiceError(`TCP ${this.target}: ${line}`, { retryable: true });
    }
    if (parts[0] === 'error' && (parts[1] === 'unauthorized' || parts[1] === 'forbidden')) {
      return { kind: 'unauthorized', message: `TCP ${this.target}: ${line}` };
    }
    if (parts[0] === 'error' && parts[1] === 'oversized') {
      conn.close();
      this.conn = null;
      return { kind: 'too_large', message: `TCP ${this.target}: ${line}` };
    }
    // Anything else: the collector refused the payload; resending would not help. A line
    // that is not a reply at all means the stream is out of step: start a new connection.
    if (parts[0] !== 'error') {
      conn.close();
      this.conn = null;
    }
    return { kind: 'rejected', message: `TCP ${this.target}: ${line}` };
  }

  async #sendUdp(lines) {
    if (!this.udpSock) {
      this.udpSock = dgram.createSocket(this.addr.host.includes(':') ? 'udp6' : 'udp4');
      this.udpSock.on('error', (e) => (this.lastError = e.message));
      this.udpSock.unref();
    }
    const max = this.opts.maxDatagramBytes;
    let cur = [];
    let bytes = 2;
    const datagrams = [];
    for (const l of lines) {
      const n = Buffer.byteLength(l) + 1;
      if (cur.length > 0 && bytes + n > max) {
        datagrams.push(cur);
        cur = [];
        bytes = 2;
      }
      cur.push(l);
      bytes += n;
    }
    if (cur.length) datagrams.push(cur);
    for (const d of datagrams) {
      const payload = Buffer.from(`[${d.join(',')}]`);
      try {
        await new Promise((resolve, reject) =>
          this.udpSock.send(payload, this.addr.port, this.addr.host, (e) => (e ? reject(e) : resolve())),
        );
        this.counters.payloads += 1;
        this.counters.sent += d.length;
      } catch (e) {
        // Fire and forget: a failed send is not retried (the collector never acknowledges UDP).
        this.counters.sendErrors += 1;
        for (const l of d) this.#drop('send_error', safeParse(l));
        this.#report(`UDP send failed: ${e.message}`, d.length);
      }
    }
  }
}

function safeParse(line) {
  try {
    return JSON.parse(line);
  } catch {
    return undefined;
  }
}

function sleep(ms) {
  return new Promise((r) => setTimeout(r, ms));
}
