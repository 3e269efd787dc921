// Type definitions of @sluice/sdk (written by hand; the package is plain ESM JavaScript).

/** An event: any JSON object with a `type`; `subtype`, `epoch` and `dc` are its other tags. */
export interface SluiceEvent {
  /** The event's type (1-64 bytes, no ':', '|' or control characters). */
  type: string;
  /** Its subtype ("" when missing). */
  subtype?: string;
  /**
   * Its second: whole Unix seconds (the default: now), `Date.now()` milliseconds (>= 1e11),
   * float seconds, or an RFC 3339 string. Sent as given; the server stores the whole second.
   */
  epoch?: number | string;
  /** Its data centre (default: the emitter's `dc`, else the server's). */
  dc?: string;
  [field: string]: unknown;
}

/** Options of an {@link Emitter}: exactly one of `udp`, `tcp` or `http`. Times are in milliseconds. */
export interface EmitterOptions {
  /** `host:port` of the collector's UDP listener (fire and forget; `sluice serve`: 8182). */
  udp?: string;
  /** `host:port` of its TCP listener (acknowledged; 8181); `tls://host:port` for TLS. */
  tcp?: string;
  /** Base URL of its HTTP API (`http://127.0.0.1:8180`; `https://…` for TLS). */
  http?: string;
  /** Token for TCP and HTTP (`Authorization: Bearer …`, TCP `auth` line); default SLUICE_TOKEN; "" for none. */
  token?: string;
  /** TLS on TCP (HTTP follows its URL's scheme). */
  tls?: boolean;
  /** PEM file of the CA to trust (e.g. `DATA/tls/self-signed.pem`); default SLUICE_CA, else the system's CAs. */
  ca?: string;
  /** dc given to events that have none (default: the server's). */
  dc?: string;
  /** Events held in memory waiting to be sent; more are dropped as `queue_full` (default 100000). */
  maxQueue?: number;
  /** Events per batch; a full batch is sent at once (default 1000). */
  batchSize?: number;
  /** Most ms an event waits for its batch to fill (default 200). */
  flushInterval?: number;
  /** Largest HTTP body / TCP line, in bytes (default 4 MiB). */
  maxPayloadBytes?: number;
  /** Largest UDP datagram, in bytes (default 8192). */
  maxDatagramBytes?: number;
  /** Largest event (its JSON), in bytes; larger ones are dropped as `too_large` (default 64 KiB). */
  maxEventBytes?: number;
  /** Timeout of every network operation (connect, acknowledgement), ms (default 5000). */
  timeout?: number;
  /** Outage a batch is retried through before it is dropped as `retry_budget`, ms (default 120000; not with a disk buffer). */
  retryBudget?: number;
  /** First wait before a resend, ms, doubled each time with jitter (default 100). */
  backoffInitial?: number;
  /** Longest wait between resends, ms (default 5000). */
  backoffMax?: number;
  /** Directory of the disk buffer: events are kept there until delivered, across restarts of this process. */
  bufferDir?: string;
  /** Cap of the disk buffer in bytes; beyond it events are dropped as `buffer_full` (default 256 MiB). */
  bufferMaxBytes?: number;
  /** HTTP base URL drops are reported to (`POST /v1/drops`) for TCP and UDP emitters (HTTP emitters use their own). */
  dropsUrl?: string;
  /** Drop records kept for reporting, merged by (epoch, dc, type, subtype, reason) (default 10000). */
  maxDropRecords?: number;
  /** Told when events are lost or refused (`message`, number of events). */
  onError?: (message: string, events: number) => void;
}

/** Why an emitter dropped events (reported to the server as `client:<reason>`). */
export type DropReason =
  | 'queue_full'
  | 'buffer_full'
  | 'too_large'
  | 'retry_budget'
  | 'rejected'
  | 'closed'
  | 'send_error';

/** An emitter's counters since construction. */
export interface EmitterStats {
  /** Events taken by emit(). */
  emitted: number;
  /** Events the server accepted (acknowledged on TCP/HTTP; sent, for UDP). */
  sent: number;
  /** Events of accepted payloads the server itself dropped (it counts them in its own counts). */
  serverDropped: number;
  /** Requests / lines / datagrams sent. */
  payloads: number;
  sendErrors: number;
  retries: number;
  /** Events resent after a request was written whole but not answered (may be stored twice: at least once). */
  resent: number;
  /** emit() calls refused for their value (no `type`, not serialisable). */
  invalid: number;
  /** Events refused for the credentials (HTTP 401/403, TCP auth refused); never retried. */
  unauthorized: number;
  /** Events in the memory queue now. */
  queued: number;
  /** Events of the batch being sent now. */
  inFlight: number;
  /** Bytes in the disk buffer not yet delivered. */
  bufferedBytes: number;
  /** Events dropped, by reason. */
  dropped: Partial<Record<DropReason, number>>;
  droppedTotal: number;
  /** Dropped events the server has taken reports of. */
  dropsReported: number;
  /** Dropped events waiting to be reported. */
  dropsPending: number;
  /** Dropped events that cannot be reported (no valid tags, the record cap, refused reports). */
  dropsUnreported: number;
}

/** Sends events to a Sluice collector without ever blocking or throwing at the caller. */
export class Emitter {
  constructor(options: EmitterOptions);
  readonly transport: 'udp' | 'tcp' | 'http';
  /** Queues an event; true if queued, false if dropped (counted in stats()). Never throws. */
  emit(event: SluiceEvent): boolean;
  /** Resolves true once everything emitted so far is delivered or given up on; false after `timeout` ms. */
  flush(options?: { timeout?: number }): Promise<boolean>;
  /** Sends what is left (at most `timeout` ms, default 5000), reports drops, stops. True if all was delivered. */
  close(options?: { timeout?: number }): Promise<boolean>;
  stats(): EmitterStats;
}

/** A time: Unix seconds (or ms >= 1e11), a Date, or a string the server parses (RFC 3339, `now`, `-5m`). */
export type TimeArg = number | Date | string;

/** Filters shared by range() and tail(). */
export interface Filters {
  dc?: string;
  type?: string;
  subtype?: string;
  /** The `--where` language (docs/query.md), e.g. `status >= 500 and path == "/x"`. */
  where?: string;
  /** Paths to return instead of whole events: each event becomes `{path: value}`. */
  select?: string | string[];
}

export interface ReaderOptions {
  /** Base URL of `sluice serve` (`http://127.0.0.1:8180`, `https://…`). */
  server: string;
  /** Token with scope `read`; default SLUICE_TOKEN; "" for none. */
  token?: string;
  /** PEM file of the CA to trust for https; default SLUICE_CA. */
  ca?: string;
  /** Timeout of connects and reads, ms (default 10000). */
  timeout?: number;
}

export interface Warning {
  key: string;
  reason: string;
}

/** The events of a range read. */
export class Events implements AsyncIterable<Record<string, unknown>> {
  /** Chunks that could not be read (skipped). */
  readonly warnings: Warning[];
  /** Advice about an empty or odd answer (with `hints: true`). */
  readonly hints: string[];
  [Symbol.asyncIterator](): AsyncIterator<Record<string, unknown>>;
  toArray(): Promise<Record<string, unknown>[]>;
}

/** A tail: follows the stream, reconnecting from its cursor. */
export class Tail implements AsyncIterable<Record<string, unknown>> {
  /** The resume token: pass it as `tail({cursor})` to continue with no gap and no repeat. */
  readonly cursor: string | undefined;
  readonly warnings: Warning[];
  /** Reconnections made so far. */
  readonly reconnects: number;
  [Symbol.asyncIterator](): AsyncIterator<Record<string, unknown>>;
  /** Stops the tail. */
  close(): void;
}

/** Reads events back from a running `sluice serve`. */
export class Reader {
  constructor(options: ReaderOptions);
  /** The events of `[from, to)` in epoch order. */
  range(options: Filters & { from: TimeArg; to?: TimeArg; hints?: boolean }): Events;
  /** The stream from `from` (default now) or `cursor`; ends after `idleTimeout` ms without an event. */
  tail(options?: Filters & { from?: TimeArg; cursor?: string; idleTimeout?: number }): Tail;
  /** Completeness counts of `[from, to)`: one object per (epoch, dc, type, subtype). */
  counts(options: { from: TimeArg; to?: TimeArg; dc?: string }): Promise<CountsRow[]>;
}

export interface CountsRow {
  epoch: number;
  dc: string;
  type: string;
  subtype: string;
  stored: number;
  late: number;
  /** Dropped events by reason; emitters' drops as `client:<reason>`. */
  dropped: Record<string, number>;
  kernel_dropped: number;
}

/** A request the server refused or that could not be made. */
export class SluiceError extends Error {
  /** The HTTP status, when the server answered. */
  readonly status?: number;
  /** Whether resending may help. */
  readonly retryable: boolean;
}

/** The whole second an epoch value stands for (seconds, ms >= 1e11, float, RFC 3339), or undefined. */
export function epochSecond(epoch: unknown): number | undefined;
