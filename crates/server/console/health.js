// Health: per-second completeness from GET /v1/counts (stored on time, late, dropped by reason,
// kernel UDP drops; substream misses apart: they are not lost from the stream), and the
// essentials of /metrics (freshness, ingest and drops, substreams and their sheds, the store's
// bytes and oldest data, backpressure, the process), read every 5 s with rates between reads.

import { getText, metricSum, ndjson, parseMetrics, qs } from './api.js';
import { stackedBars } from './charts.js';
import { errorBox, fmtBytes, fmtDuration, fmtNum, fmtTime, go, h, timePicker, toUnix, withParams } from './ui.js';

const POLL_MS = 5000;

/** The upper bound of the bucket holding quantile `q` of histogram `name` (seconds). */
function quantile(ms, name, q) {
  const buckets = ms.filter((m) => m.name === name + '_bucket')
    .map((m) => [m.labels.le === '+Inf' ? Infinity : Number(m.labels.le), m.value]);
  const byLe = new Map();
  for (const [le, v] of buckets) byLe.set(le, (byLe.get(le) || 0) + v);
  const sorted = [...byLe.entries()].sort((a, b) => a[0] - b[0]);
  const total = sorted.length ? sorted[sorted.length - 1][1] : 0;
  if (!total) return NaN;
  return sorted.find(([, c]) => c >= q * total)[0];
}

/** Mounts Health in `root` for the view `p`. */
export function mount(root, p) {
  const from = p.get('from') || '-15m';
  const to = p.get('to') || 'now';
  const set = (changes) => go('health', withParams(p, changes));
  const ctl = new AbortController();
  const charts = [];
  const errors = h('div#errors');
  const countsPanel = h('section.panel#health-counts', {}, h('div.panel-head', {}, h('b', {}, 'Completeness per second'), h('span#counts-note.muted')));
  const cards = h('div.cards#health-metrics');
  root.append(h('div.bar', {}, timePicker(from, to, (f, t) => set({ from: f, to: t }))), errors, countsPanel, cards);

  (async () => {
    const per = new Map();
    const reasons = new Set();
    const misses = new Map();
    let stored = 0;
    try {
      await ndjson('/v1/counts?' + qs({ from, to, dc: p.get('dc') }), {
        signal: ctl.signal,
        onLine: (r) => {
          const e = per.get(r.epoch) || { stored: 0, late: 0, kernel: 0, dropped: {} };
          e.stored += r.stored || 0;
          e.late += r.late || 0;
          e.kernel += r.kernel_dropped || 0;
          stored += r.stored || 0;
          for (const [why, n] of Object.entries(r.dropped || {})) {
            if (why.startsWith('substream:')) misses.set(why, (misses.get(why) || 0) + n);
            else {
              reasons.add(why);
              e.dropped[why] = (e.dropped[why] || 0) + n;
            }
          }
          per.set(r.epoch, e);
        },
      });
    } catch (e) {
      if (e.name !== 'AbortError') errors.append(errorBox(e));
      return;
    }
    countsPanel.dataset.stored = stored;
    const lo = toUnix(from);
    const hi = toUnix(to);
    const epochs = [...per.keys()].sort((a, b) => a - b);
    const start = Number.isFinite(lo) ? lo : epochs[0];
    const end = Number.isFinite(hi) ? hi : epochs[epochs.length - 1] + 1;
    // One bar per second up to 30 min, else per minute.
    const w = end - start > 1800 ? 60 : 1;
    const xs = [];
    for (let x = Math.floor(start / w) * w; x < end && xs.length < 5000; x += w) xs.push(x);
    const at = (x) => {
      const acc = { stored: 0, late: 0, kernel: 0, dropped: {} };
      for (let s = x; s < x + w; s++) {
        const e = per.get(s);
        if (!e) continue;
        acc.stored += e.stored;
        acc.late += e.late;
        acc.kernel += e.kernel;
        for (const [k, v] of Object.entries(e.dropped)) acc.dropped[k] = (acc.dropped[k] || 0) + v;
      }
      return acc;
    };
    const cells = xs.map(at);
    const red = ['#e15759', '#ff9da7', '#c0392b', '#9c755f', '#b07aa1'];
    const series = [
      { label: 'stored on time', color: '#59a14f', values: cells.map((c) => c.stored - c.late) },
      { label: 'late', color: '#edc948', values: cells.map((c) => c.late) },
      ...[...reasons].map((why, i) => ({ label: `dropped: ${why}`, color: red[i % red.length], values: cells.map((c) => c.dropped[why] || 0) })),
      { label: 'kernel UDP drops', color: '#7b3294', values: cells.map((c) => c.kernel) },
    ];
    const incomplete = epochs.filter((e) => per.get(e).kernel > 0 || Object.keys(per.get(e).dropped).length > 0);
    const dropped = series.slice(2).reduce((s, x) => s + x.values.reduce((a, b) => a + b, 0), 0);
    countsPanel.dataset.dropped = dropped;
    countsPanel.dataset.incomplete = incomplete.length;
    document.getElementById('counts-note').textContent =
      ` ${fmtNum(epochs.length)} seconds with data · ${fmtNum(stored)} stored · ${fmtNum(dropped)} dropped · ${fmtNum(incomplete.length)} seconds incomplete` + (w > 1 ? ' · bars per minute' : '');
    const el = h('div.chart');
    countsPanel.append(el);
    charts.push(stackedBars(el, { xs, series, height: 200, yLabel: w > 1 ? 'events / min' : 'events / s', onSelect: (a, b) => set({ from: String(a), to: String(b) }) }));
    if (incomplete.length) {
      countsPanel.append(h('details', {}, h('summary', {}, `Incomplete seconds (${incomplete.length}, the last 50)`),
        h('table', {}, h('tbody', {}, incomplete.slice(-50).map((e) => h('tr', {}, h('td', {}, fmtTime(e)),
          h('td', {}, Object.entries(per.get(e).dropped).map(([k, v]) => `${k} ${v}`).join(', ')), h('td', {}, per.get(e).kernel ? `kernel ${per.get(e).kernel}` : '')))))));
    }
    if (misses.size) {
      countsPanel.append(h('div.muted', {}, 'Substream misses in this range: ', [...misses.entries()].map(([k, v]) => `${k.slice(10)} ${fmtNum(v)}`).join(', ')));
    }
  })();

  let prev = null;
  const poll = async () => {
    let text;
    try {
      text = await getText('/metrics', ctl.signal);
    } catch (e) {
      if (e.name !== 'AbortError') cards.replaceChildren(errorBox(e));
      return;
    }
    const ms = parseMetrics(text);
    const now = performance.now() / 1000;
    const sum = (n, l) => metricSum(ms, n, l);
    const rate = (n, l) => (prev ? (sum(n, l) - metricSum(prev.ms, n, l)) / (now - prev.t) : NaN);
    const by = (n, label) => {
      const out = new Map();
      for (const m of ms) if (m.name === n) out.set(m.labels[label], (out.get(m.labels[label]) || 0) + m.value);
      return [...out.entries()].filter(([, v]) => v > 0).sort((a, b) => b[1] - a[1]);
    };
    const row = (label, value, key, raw) => [h('span', {}, label), h('span.v', { dataset: key ? { metric: key, value: raw } : undefined }, value)];
    const card = (title, ...rows) => h('section.panel.card', {}, h('h3', {}, title), h('div.kv', {}, rows.flat()));
    const ins = sum('sluice_events_in_total');
    const http5 = ms.filter((m) => m.name === 'sluice_http_responses_total' && /^5/.test(m.labels.status)).reduce((s, m) => s + m.value, 0);
    const oldest = sum('sluice_store_oldest_partition_timestamp_seconds');
    const subs = by('sluice_substream_results_total', 'substream');
    const missRows = ms.filter((m) => m.name === 'sluice_substream_misses_total' && m.value > 0);
    const started = sum('process_start_time_seconds');
    cards.replaceChildren(
      card('Ingest',
        row('events in', fmtNum(ins), 'events_in', ins),
        row('events in / s', prev ? fmtNum(Math.round(rate('sluice_events_in_total'))) : '…'),
        row('stored (flushed)', fmtNum(sum('sluice_events_flushed_total'))),
        row('late', fmtNum(sum('sluice_events_late_total'))),
        ...by('sluice_events_dropped_total', 'reason').map(([r, v]) => row(`dropped: ${r}`, fmtNum(v))),
        row('UDP kernel drops', fmtNum(sum('sluice_udp_kernel_drops_total')), 'udp_kernel', sum('sluice_udp_kernel_drops_total')),
        row('payloads shed', fmtNum(sum('sluice_payloads_shed_total')))),
      card('Freshness',
        row('event second → readable, p50 ≤', fmtDuration(quantile(ms, 'sluice_freshness_seconds', 0.5))),
        row('p99 ≤', fmtDuration(quantile(ms, 'sluice_freshness_seconds', 0.99)), 'freshness_p99', quantile(ms, 'sluice_freshness_seconds', 0.99)),
        row('flush lag', fmtDuration(sum('sluice_flush_lag_seconds'))),
        row('pending events', fmtNum(sum('sluice_pending_events'))),
        row('pending bytes', `${fmtBytes(sum('sluice_pending_bytes'))} of ${fmtBytes(sum('sluice_max_pending_bytes'))}`),
        row('backpressure', sum('sluice_backpressure') ? 'ON' : 'off', 'backpressure', sum('sluice_backpressure'))),
      card('Store',
        row('bytes', fmtBytes(sum('sluice_store_bytes')), 'store_bytes', sum('sluice_store_bytes')),
        row('partitions', fmtNum(sum('sluice_store_partitions'))),
        row('oldest partition', oldest ? `${fmtTime(oldest)} (${fmtDuration(Date.now() / 1000 - oldest)} ago)` : '–'),
        row('blobs written', fmtNum(sum('sluice_blobs_written_total'))),
        row('store errors', fmtNum(sum('sluice_store_errors_total'))),
        row('spool', `${fmtNum(sum('sluice_spool_batches'))} batches, ${fmtBytes(sum('sluice_spool_bytes'))}`),
        row('disk free', fmtBytes(sum('sluice_disk_free_bytes'))),
        row('disk unavailable', sum('sluice_disk_unavailable') ? 'YES' : 'no')),
      card('Substreams',
        ...(subs.length ? subs.map(([n, v]) => row(`${n} results`, fmtNum(v))) : [row('results', 'none')]),
        ...missRows.map((m) => row(`${m.labels.substream} missed: ${m.labels.reason}`, fmtNum(m.value))),
        row('shed (queue full)', fmtNum(metricSum(ms, 'sluice_substream_misses_total', { reason: 'queue_full' })), 'substream_shed', metricSum(ms, 'sluice_substream_misses_total', { reason: 'queue_full' }))),
      card('Process',
        row('version', (ms.find((m) => m.name === 'sluice_build_info') || { labels: {} }).labels.version || '–'),
        row('up', started ? fmtDuration(Date.now() / 1000 - started) : '–'),
        row('memory (RSS)', fmtBytes(sum('process_resident_memory_bytes'))),
        row('CPU', prev ? `${(100 * rate('process_cpu_seconds_total')).toFixed(0)} %` : '…'),
        row('open fds', `${fmtNum(sum('process_open_fds'))} of ${fmtNum(sum('process_max_fds'))}`),
        row('threads', fmtNum(sum('process_threads'))),
        row('HTTP connections', fmtNum(sum('sluice_http_connections'))),
        row('tail streams', fmtNum(sum('sluice_tail_streams'))),
        row('HTTP 5xx answers', fmtNum(http5)),
        row('WAL errors', fmtNum(sum('sluice_wal_errors_total')))));
    prev = { ms, t: now };
  };
  poll();
  const timer = setInterval(poll, POLL_MS);

  return () => {
    ctl.abort();
    clearInterval(timer);
    for (const c of charts) c.destroy();
  };
}
