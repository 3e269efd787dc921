// Explore: a query (the --where language, type/subtype/dc, a time range) drawn as a histogram
// stacked by type or by a chosen field (drag to zoom), the newest matching events in a table
// (columns to choose, JSON per row), and a facet per field (top values; a click adds a filter).
// State lives in the URL hash; every request of a run shares one AbortController (Cancel).

import { ApiError, ndjson, qs } from './api.js';
import { stackedBars, COLORS } from './charts.js';
import { errorBox, fmtNum, fmtTime, go, h, href, literal, pathOf, timePicker, toUnix, withParams } from './ui.js';

/** Rows the table keeps (the newest of the range). */
const TABLE_ROWS = 200;
/** Series of the histogram before the rest are summed as `other`. */
const MAX_SERIES = 8;
/** Bin widths (seconds) the histogram picks from. */
const WINDOWS = [1, 2, 5, 10, 15, 30, 60, 120, 300, 600, 900, 1800, 3600, 7200, 10800, 21600, 43200, 86400];
const DEFAULT_COLS = ['epoch', 'dc', 'type', 'subtype'];

/** The filters of `p` as API parameters. */
export function filters(p) {
  return { dc: p.get('dc'), type: p.get('type'), subtype: p.get('subtype'), where: p.get('where') };
}

function windowFor(from, to) {
  const span = to - from;
  if (!Number.isFinite(span) || span <= 0) return 60;
  return WINDOWS.find((w) => span / w <= 120) || 86400;
}

/** Paths of `obj` as [segments] (maps flattened two levels deep; arrays kept whole). */
function paths(obj, prefix = [], out = []) {
  for (const [k, v] of Object.entries(obj)) {
    const p = prefix.concat(k);
    if (v && typeof v === 'object' && !Array.isArray(v) && prefix.length < 2) paths(v, p, out);
    else out.push(p);
  }
  return out;
}

function at(obj, segments) {
  let v = obj;
  for (const s of segments) v = v == null ? undefined : v[s];
  return v;
}

function cell(v) {
  if (v === undefined) return '';
  if (v === null) return 'null';
  if (typeof v === 'object') return JSON.stringify(v);
  return String(v);
}

/** Mounts Explore in `root` for the view `p`. */
export function mount(root, p) {
  const from = p.get('from') || '-1h';
  const to = p.get('to') || 'now';
  const stack = p.get('stack') || 'type';
  const cols = (p.get('cols') || DEFAULT_COLS.join(',')).split(',').filter(Boolean);
  const open = new Set((p.get('facets') || 'dc,type,subtype').split(',').filter(Boolean));
  const set = (changes) => go('explore', withParams(p, changes));
  const ctl = new AbortController();
  const charts = [];

  // The query bar.
  const whereIn = h('input#where', { value: p.get('where') || '', placeholder: 'where: status >= 500 and path ~ "^/api"', spellcheck: false });
  const typeIn = h('input#type', { value: p.get('type') || '', placeholder: 'type', size: 10, list: 'types' });
  const subIn = h('input#subtype', { value: p.get('subtype') || '', placeholder: 'subtype', size: 10, list: 'subtypes' });
  const dcIn = h('input#dc', { value: p.get('dc') || '', placeholder: 'dc', size: 8 });
  const stackIn = h('input#stack', { value: stack, size: 10, title: 'stack the histogram by this field' });
  const submit = () => set({ where: whereIn.value.trim(), type: typeIn.value.trim(), subtype: subIn.value.trim(), dc: dcIn.value.trim(), stack: stackIn.value.trim() === 'type' ? '' : stackIn.value.trim() });
  const cancel = h('button#cancel', { type: 'button', hidden: true, on: { click: () => ctl.abort() } }, 'Cancel');
  const progress = h('span#progress.muted');
  const bar = h('form#query.bar', { on: { submit: (e) => { e.preventDefault(); submit(); } } },
    whereIn, typeIn, subIn, dcIn,
    h('label.muted', {}, 'stack by ', stackIn),
    h('button#run', { type: 'submit' }, 'Run'), cancel, progress,
    h('datalist#types'), h('datalist#subtypes'));
  const timeBar = h('div.bar', {}, timePicker(from, to, (f, t) => set({ from: f, to: t })),
    h('a.button', { href: href('live', filters(p)) }, 'Live with these filters →'));
  const errors = h('div#errors');
  const hints = h('div#hints.hints');
  const total = h('span#hist-total', {}, '…');
  const legend = h('div#hist-legend.legend');
  const hist = h('div#histogram.chart');
  const facets = h('aside#facets', {}, h('h3', {}, 'Fields'));
  const colPick = h('details#columns', {}, h('summary', {}, 'Columns'));
  const table = h('table#results', {}, h('thead'), h('tbody'));
  const tableNote = h('span#table-note.muted');
  root.append(bar, timeBar, errors, hints,
    h('section.panel', {}, h('div.panel-head', {}, h('b', {}, 'Events over time '), total, h('span.muted', {}, ' · drag to zoom')), hist, legend),
    h('div.split', {}, facets, h('section.panel.results', {}, h('div.panel-head', {}, h('b', {}, 'Newest events '), tableNote, colPick), table)));

  const fromAbs = toUnix(from);
  const toAbs = toUnix(to);
  const win = windowFor(fromAbs, toAbs);
  const base = { from, to, ...filters(p) };
  const started = performance.now();
  let running = 0;
  const busy = (delta, what) => {
    running += delta;
    cancel.hidden = running === 0;
    if (running === 0) progress.textContent = ctl.signal.aborted ? 'cancelled' : `done in ${((performance.now() - started) / 1000).toFixed(2)} s`;
    else if (what) progress.textContent = what;
  };
  const tick = setInterval(() => {
    if (running > 0 && !progress.textContent.startsWith('reading')) progress.textContent = `running… ${((performance.now() - started) / 1000).toFixed(1)} s`;
  }, 250);
  const fail = (e) => {
    if (e.name === 'AbortError') return;
    errors.append(errorBox(e));
  };

  // The pickers offer the types and subtypes the histogram and the facets saw (no extra read).
  const offer = (id, v) => {
    const dl = document.getElementById(id);
    if (dl && v && !dl.querySelector(`option[value="${CSS.escape(v)}"]`)) dl.append(h('option', { value: v }));
  };

  // The histogram, then the table from the newest bins.
  const run = async () => {
    busy(1, 'running…');
    const bins = new Map();
    const groups = new Map();
    try {
      const res = await ndjson('/v1/events?' + qs({ ...base, group_by: stack, agg: 'count', window: String(win), hints: 1 }), {
        signal: ctl.signal,
        onLine: (r) => {
          const g = cell(r[stack]);
          const row = bins.get(r.window) || new Map();
          row.set(g, (row.get(g) || 0) + r.count);
          bins.set(r.window, row);
          groups.set(g, (groups.get(g) || 0) + r.count);
        },
      });
      for (const x of (res.trailer && res.trailer.hints) || []) hints.append(h('div.hint', {}, 'hint: ' + x));
      for (const w of (res.trailer && res.trailer.warnings) || []) hints.append(h('div.warning', {}, `warning: ${w.key}: ${w.reason}`));
    } catch (e) {
      busy(-1);
      fail(e);
      total.textContent = '';
      return;
    }
    drawHistogram(bins, groups);
    busy(-1);
    await fillTable(bins);
  };

  const drawHistogram = (bins, groups) => {
    const ranked = [...groups.entries()].sort((a, b) => b[1] - a[1]);
    const shown = ranked.slice(0, MAX_SERIES).map(([g]) => g);
    const hasOther = ranked.length > MAX_SERIES;
    const lo = Number.isFinite(fromAbs) ? Math.floor(fromAbs / win) * win : Math.min(...bins.keys());
    const hi = Number.isFinite(toAbs) ? toAbs : Math.max(...bins.keys()) + win;
    const xs = [];
    for (let x = lo; x < hi && xs.length < 2000; x += win) xs.push(x);
    for (const k of bins.keys()) if (!xs.includes(k)) xs.push(k);
    xs.sort((a, b) => a - b);
    const series = shown.map((g, i) => ({ label: g, color: COLORS[i % COLORS.length], values: xs.map((x) => bins.get(x)?.get(g) || 0) }));
    if (hasOther) {
      const keep = new Set(shown);
      series.push({ label: 'other', color: '#999', values: xs.map((x) => [...(bins.get(x) || new Map()).entries()].filter(([g]) => !keep.has(g)).reduce((s, [, n]) => s + n, 0)) });
    }
    const sum = ranked.reduce((s, [, n]) => s + n, 0);
    if (stack === 'type') for (const [g] of ranked) offer('types', g);
    total.textContent = `${fmtNum(sum)} events`;
    total.dataset.total = sum;
    legend.replaceChildren(...ranked.map(([g, n], i) => h('span.legend-item', {
      dataset: { series: g, total: n },
      title: `${stack} == ${g}: add as a filter`,
      on: { click: () => addFilter(stack.split('.'), g === 'null' ? null : g) },
    }, h('i', { style: `background:${i < MAX_SERIES ? COLORS[i % COLORS.length] : '#999'}` }), `${g === '' ? '(empty)' : g} ${fmtNum(n)}`)));
    if (sum === 0) {
      hist.replaceChildren(h('p.muted.empty', {}, 'No events match in this range.'));
      return;
    }
    charts.push(stackedBars(hist, { xs, series, legend: false, yLabel: `events / ${win} s`, onSelect: (a, b) => set({ from: String(a), to: String(b) }) }));
    // User Timing marks (devtools' Performance panel; the browser test reports them).
    performance.mark('sluice:histogram-drawn');
  };

  // The newest TABLE_ROWS events: read from the bin where they start (the histogram tells).
  const fillTable = async (bins) => {
    const keys = [...bins.keys()].sort((a, b) => b - a);
    let n = 0;
    let start = null;
    for (const k of keys) {
      n += [...bins.get(k).values()].reduce((s, c) => s + c, 0);
      if (n >= TABLE_ROWS) {
        start = k;
        break;
      }
    }
    const tfrom = start !== null && start > fromAbs ? String(start) : from;
    const rows = [];
    busy(1, 'reading events…');
    try {
      await ndjson('/v1/events?' + qs({ ...base, from: tfrom }), {
        signal: ctl.signal,
        onLine: (ev) => {
          rows.push(ev);
          if (rows.length > TABLE_ROWS * 2) rows.splice(0, rows.length - TABLE_ROWS);
        },
        onProgress: ({ lines, bytes }) => {
          progress.textContent = `reading events… ${fmtNum(lines)} (${fmtNum(Math.round(bytes / 1024))} KiB)`;
        },
      });
    } catch (e) {
      fail(e);
    } finally {
      busy(-1);
    }
    const newest = rows.slice(-TABLE_ROWS).reverse();
    tableNote.textContent = `${fmtNum(newest.length)} shown, newest first`;
    tableNote.dataset.rows = newest.length;
    drawTable(newest);
    drawFacets(newest);
    performance.mark('sluice:table-drawn');
  };

  const drawTable = (events) => {
    const seen = new Map();
    for (const ev of events) for (const s of paths(ev)) seen.set(s.join('.'), s);
    colPick.replaceChildren(h('summary', {}, 'Columns'), ...[...seen.keys()].map((k) => h('label', {},
      h('input', { type: 'checkbox', checked: cols.includes(k), dataset: { col: k }, on: { change: (e) => {
        const next = e.target.checked ? cols.concat(k) : cols.filter((c) => c !== k);
        set({ cols: next.join(',') === DEFAULT_COLS.join(',') ? '' : next.join(',') });
      } } }), ' ', k)));
    const colSegs = cols.map((c) => seen.get(c) || c.split('.'));
    table.tHead.replaceChildren(h('tr', {}, cols.map((c) => h('th', {}, c)), h('th', {}, 'event')));
    const body = h('tbody');
    const shownCols = new Set(cols.map((c) => c.split('.')[0]));
    for (const ev of events) {
      const rest = Object.fromEntries(Object.entries(ev).filter(([k]) => !shownCols.has(k)));
      const tr = h('tr.row', { dataset: { event: JSON.stringify(ev) } },
        colSegs.map((s, i) => h('td', {}, cols[i] === 'epoch' && typeof ev.epoch === 'number' ? fmtTime(ev.epoch) : cell(at(ev, s)))),
        h('td.rest', {}, JSON.stringify(rest).slice(0, 240)));
      tr.addEventListener('click', () => {
        const next = tr.nextElementSibling;
        if (next && next.classList.contains('detail')) next.remove();
        else tr.after(h('tr.detail', {}, h('td', { colSpan: cols.length + 1 }, h('pre.json', {}, JSON.stringify(ev, null, 2)))));
      });
      body.append(tr);
    }
    table.tBodies[0].replaceWith(body);
  };

  const addFilter = (segments, value) => {
    const cond = `${pathOf(segments)} == ${literal(value)}`;
    const w = (p.get('where') || '').trim();
    set({ where: w ? `${w.includes(' or ') ? '(' + w + ')' : w} and ${cond}` : cond });
  };

  // The sidebar: every field of the table's events; an open one shows its top values over the
  // whole query (the server's count_by), each a filter to add.
  const drawFacets = (events) => {
    const presence = new Map();
    for (const ev of events) for (const s of paths(ev)) {
      const k = s.join('.');
      const e = presence.get(k) || { segs: s, n: 0 };
      e.n++;
      presence.set(k, e);
    }
    const list = [...presence.entries()].sort((a, b) => b[1].n - a[1].n);
    facets.replaceChildren(h('h3', {}, 'Fields'));
    for (const [k, { segs, n }] of list) {
      const box = h('div.facet', { dataset: { field: k } });
      const head = h('button.facet-name', { type: 'button', on: { click: () => {
        if (open.has(k)) open.delete(k);
        else open.add(k);
        set({ facets: [...open].join(',') });
      } } }, `${open.has(k) ? '▾' : '▸'} ${k}`, h('span.muted', {}, ` ${Math.round((100 * n) / Math.max(1, events.length))}%`));
      box.append(head);
      facets.append(box);
      if (open.has(k)) loadFacet(box, segs);
    }
  };

  const loadFacet = async (box, segs) => {
    const path = pathOf(segs);
    const ul = h('ul.values', {}, h('li.muted', {}, '…'));
    box.append(ul);
    busy(1);
    try {
      const vals = [];
      await ndjson('/v1/events?' + qs({ ...base, count_by: path, top: 8 }), {
        signal: ctl.signal,
        onLine: (r) => {
          const key = Object.keys(r).find((x) => x !== 'count' && x !== 'window');
          vals.push([r[key], r.count]);
        },
      });
      if (path === 'type' || path === 'subtype') for (const [v] of vals) offer(path + 's', cell(v));
      ul.replaceChildren(...vals.map(([v, c]) => h('li', {},
        h('a.facet-value', { href: '#', dataset: { value: cell(v) }, on: { click: (e) => { e.preventDefault(); addFilter(segs, v); } } }, v === '' ? '(empty)' : cell(v)),
        h('span.count', {}, fmtNum(c)))));
    } catch (e) {
      if (e.name !== 'AbortError') ul.replaceChildren(h('li.error', {}, e instanceof ApiError ? e.message : String(e)));
    } finally {
      busy(-1);
    }
  };

  run();
  return () => {
    ctl.abort();
    clearInterval(tick);
    for (const c of charts) c.destroy();
  };
}
