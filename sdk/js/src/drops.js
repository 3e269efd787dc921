// The drops an emitter reports to the server (`POST /v1/drops`, the SDK contract): merged by
// (epoch, dc, type, subtype, reason), bounded, sent in batches once the server answers again.

import { endpoint, errorText, request } from './net.js';

/** Reasons of the contract (plus `closed`: queued when the emitter closed, never sent). */
export const REASONS = ['retry_budget', 'queue_full', 'buffer_full', 'too_large', 'rejected', 'closed'];

/** Records sent per request. */
const REPORT_BATCH = 1000;
/** After a failed report, the next one waits this long (ms). */
const REPORT_PAUSE_MS = 5000;

/** Pending drop records, merged by key, at most `maxRecords` of them. */
export class DropLedger {
  constructor(maxRecords = 10000) {
    this.maxRecords = maxRecords;
    /** @type {Map<string, {epoch:number, dc?:string, type:string, subtype:string, reason:string, count:number}>} */
    this.records = new Map();
    /** Dropped events that could not be recorded (no key, the ledger full, a report refused). */
    this.unrecorded = 0;
    /** Events whose drops the server accepted. */
    this.reported = 0;
    this.pauseUntil = 0;
    this.inFlight = false;
  }

  /** Adds `count` drops of `reason` under `key` (from tags.dropKey; undefined: counted only). */
  add(key, reason, count = 1) {
    if (!key) {
      this.unrecorded += count;
      return;
    }
    const k = `${key.epoch}|${key.dc ?? ''}|${key.type}|${key.subtype}|${reason}`;
    const r = this.records.get(k);
    if (r) {
      r.count += count;
    } else if (this.records.size < this.maxRecords) {
      this.records.set(k, { ...key, reason, count });
    } else {
      this.unrecorded += count;
    }
  }

  /** Events waiting to be reported. */
  pending() {
    let n = 0;
    for (const r of this.records.values()) n += r.count;
    return n;
  }

  /**
   * Sends what is pending to `POST {url}/v1/drops`, best effort: records the server accepted
   * are removed; a 400 (a record it will never take) discards the batch; anything else keeps
   * them for a later try, not before REPORT_PAUSE_MS.
   */
  async report({ url, token, ca, timeout, agent, force = false }) {
    if (this.inFlight || this.records.size === 0 || (!force && Date.now() < this.pauseUntil)) return;
    this.inFlight = true;
    try {
      while (this.records.size > 0) {
        const keys = [...this.records.keys()].slice(0, REPORT_BATCH);
        const drops = keys.map((k) => this.records.get(k));
        const body = JSON.stringify({ drops });
        let res;
        try {
          res = await request({
            url: endpoint(url, '/v1/drops'),
            method: 'POST',
            headers: { 'content-type': 'application/json' },
            body,
            token,
            ca,
            timeout,
            agent,
          });
        } catch {
          this.pauseUntil = Date.now() + REPORT_PAUSE_MS;
          return;
        }
        if (res.status === 200) {
          for (const k of keys) this.records.delete(k);
          this.reported += drops.reduce((n, r) => n + r.count, 0);
          continue;
        }
        if (res.status === 400) {
          for (const k of keys) this.records.delete(k);
          this.unrecorded += drops.reduce((n, r) => n + r.count, 0);
          this.lastError = `drops refused: ${errorText(res.body)}`;
          continue;
        }
        this.lastError = `drops not taken: ${res.status} ${errorText(res.body)}`;
        this.pauseUntil = Date.now() + REPORT_PAUSE_MS;
        return;
      }
    } finally {
      this.inFlight = false;
    }
  }
}
