// Live: the SSE tail (GET /v1/tail) with Explore's filters. Events are buffered and drawn at
// most RENDER_MS apart, newest first, keeping MAX_ROWS rows, so a stream of 1,000 events/s
// stays smooth; a sparkline shows events per second. Pause closes the stream and keeps its
// cursor; Resume (or a reconnect after an error or a server shutdown) continues from it, with
// no gap and no duplicate.

import { ApiError, qs, sse } from './api.js';
import { sparkline } from './charts.js';
import { filters } from './explore.js';
import { fmtNum, fmtTime, go, h, href, withParams } from './ui.js';

/** Rows kept on the page. */
const MAX_ROWS = 500;
/** Least time between two redraws of the rows. */
const RENDER_MS = 200;
/** Seconds the sparkline spans. */
const SPARK_SECS = 60;

/** Mounts Live in `root` for the view `p`. */
export function mount(root, p) {
  const f = filters(p);
  const set = (changes) => go('live', withParams(p, changes));
  const whereIn = h('input#where', { value: p.get('where') || '', placeholder: 'where', spellcheck: false });
  const typeIn = h('input#type', { value: p.get('type') || '', placeholder: 'type', size: 10 });
  const subIn = h('input#subtype', { value: p.get('subtype') || '', placeholder: 'subtype', size: 10 });
  const dcIn = h('input#dc', { value: p.get('dc') || '', placeholder: 'dc', size: 8 });
  const status = h('span#live-status.muted', { dataset: { state: 'connecting' } }, 'connecting…');
  const pause = h('button#live-pause', { type: 'button' }, 'Pause');
  const counter = h('span#live-count.muted');
  const errors = h('div#errors');
  const spark = h('div#live-rate.chart', { dataset: { total: 0 } });
  const tbody = h('tbody#live-rows');
  root.append(
    h('form.bar', { on: { submit: (e) => { e.preventDefault(); set({ where: whereIn.value.trim(), type: typeIn.value.trim(), subtype: subIn.value.trim(), dc: dcIn.value.trim() }); } } },
      whereIn, typeIn, subIn, dcIn, h('button', { type: 'submit' }, 'Follow'), pause, status, counter,
      h('a.button', { href: href('explore', f) }, '← Explore these filters')),
    errors,
    h('section.panel', {}, h('div.panel-head', {}, h('b', {}, 'Events per second'), h('span.muted', {}, ` (last ${SPARK_SECS} s)`)), spark),
    h('section.panel.results', {}, h('div.panel-head', {}, h('b', {}, 'Newest first'), h('span.muted', {}, ` (at most ${MAX_ROWS} kept)`)),
      h('table', {}, h('thead', {}, h('tr', {}, h('th', {}, 'time'), h('th', {}, 'dc'), h('th', {}, 'type'), h('th', {}, 'subtype'), h('th', {}, 'event'))), tbody)));

  let cursor = p.get('cursor') || null;
  let ctl = null;
  let paused = false;
  let stopped = false;
  let retry = 1000;
  let received = 0;
  let pending = [];
  const perSec = new Map();
  const state = (s, text) => {
    status.dataset.state = s;
    status.textContent = text;
  };

  const connect = async () => {
    ctl = new AbortController();
    const params = { ...f };
    if (cursor) params.cursor = cursor;
    else params.from = p.get('from') || 'now';
    state('connecting', 'connecting…');
    try {
      await sse('/v1/tail?' + qs(params), {
        signal: ctl.signal,
        onEvent: (name, data) => {
          if (name === 'event') {
            pending.push(data);
            received++;
            const sec = Math.floor(Date.now() / 1000);
            perSec.set(sec, (perSec.get(sec) || 0) + 1);
          } else if (name === 'cursor') {
            cursor = data;
            if (status.dataset.state !== 'live') state('live', 'live');
          } else if (name === 'hint') {
            errors.replaceChildren(h('div.hint', {}, 'hint: ' + data));
          } else if (name === 'warning' || name === 'notice') {
            errors.append(h('div.warning', {}, `${name}: ${data}`));
          } else if (name === 'shutdown') {
            state('reconnecting', 'server shutting down; will resume from the cursor');
          }
        },
      });
      if (!paused && !stopped) throw new Error('the stream ended');
    } catch (e) {
      if (paused || stopped) return;
      if (e instanceof ApiError && e.status >= 400 && e.status < 500) {
        state('error', 'refused');
        errors.replaceChildren(h('pre.error', {}, e.message));
        return;
      }
      state('reconnecting', `reconnecting in ${retry / 1000} s (${e.message})`);
      setTimeout(() => { if (!paused && !stopped) connect(); }, retry);
      retry = Math.min(retry * 2, 10000);
      return;
    }
  };
  // Once live, a later failure starts its backoff afresh.
  const resetRetry = setInterval(() => { if (status.dataset.state === 'live') retry = 1000; }, 5000);

  pause.addEventListener('click', () => {
    paused = !paused;
    if (paused) {
      if (ctl) ctl.abort();
      state('paused', `paused (resumes from cursor ${cursor || 'now'})`);
      pause.textContent = 'Resume';
    } else {
      pause.textContent = 'Pause';
      connect();
    }
  });

  // Rows: the newest batch first, trimmed to MAX_ROWS.
  const render = () => {
    if (pending.length === 0) return;
    const batch = pending.slice(-MAX_ROWS);
    pending = [];
    const frag = document.createDocumentFragment();
    for (let i = batch.length - 1; i >= 0; i--) {
      let ev;
      try {
        ev = JSON.parse(batch[i]);
      } catch {
        ev = { _unparsed: batch[i] };
      }
      frag.append(h('tr', { dataset: { event: batch[i] } },
        h('td', {}, typeof ev.epoch === 'number' ? fmtTime(ev.epoch) : ''), h('td', {}, ev.dc ?? ''),
        h('td', {}, ev.type ?? ''), h('td', {}, ev.subtype ?? ''), h('td.rest', {}, batch[i].slice(0, 300))));
    }
    tbody.prepend(frag);
    while (tbody.rows.length > MAX_ROWS) tbody.lastElementChild.remove();
    counter.textContent = `${fmtNum(received)} received, ${fmtNum(tbody.rows.length)} shown`;
  };
  const renderTimer = setInterval(render, RENDER_MS);

  const now = () => Math.floor(Date.now() / 1000);
  const series = () => {
    const t = now();
    const xs = [];
    const ys = [];
    for (let s = t - SPARK_SECS; s <= t; s++) {
      xs.push(s);
      ys.push(perSec.get(s) || 0);
    }
    for (const k of perSec.keys()) if (k < t - SPARK_SECS) perSec.delete(k);
    return [xs, ys];
  };
  const chart = sparkline(spark, { xs: series()[0], ys: series()[1] });
  const sparkTimer = setInterval(() => {
    chart.setData(series());
    spark.dataset.total = received;
  }, 1000);
  // The sparkline's total is exact at once (the test reads it after the rows).
  const totalTimer = setInterval(() => { spark.dataset.total = received; }, RENDER_MS);

  connect();
  return () => {
    stopped = true;
    if (ctl) ctl.abort();
    for (const t of [renderTimer, sparkTimer, totalTimer, resetRetry]) clearInterval(t);
    chart.destroy();
  };
}
