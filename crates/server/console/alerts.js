// Alerts: the rules of GET /v1/alerts with their state, their active alerts and silences; a
// rule's backtest (GET /v1/alerts/NAME/test) drawn over its series: a line per label set,
// firing periods shaded, transitions marked. While the server has no alerts API (404) the
// screen says so.

import { getJson, qs } from './api.js';
import { lines } from './charts.js';
import { errorBox, fmtNum, fmtTime, go, h, timePicker, withParams } from './ui.js';

const labelText = (l) => Object.entries(l || {}).map(([k, v]) => `${k}=${v}`).join(', ') || '(no labels)';

/** Mounts Alerts in `root` for the view `p`. */
export function mount(root, p) {
  const from = p.get('from') || '-1d';
  const to = p.get('to') || 'now';
  const set = (changes) => go('alerts', withParams(p, changes));
  const ctl = new AbortController();
  const charts = [];
  const errors = h('div#errors');
  const body = h('div#alerts-body');
  root.append(h('div.bar', {}, h('span.muted', {}, 'backtest range '), timePicker(from, to, (f, t) => set({ from: f, to: t }))), errors, body);

  (async () => {
    let answer;
    try {
      answer = await getJson('/v1/alerts', ctl.signal);
    } catch (e) {
      if (e.name === 'AbortError') return;
      if (e.status === 404) {
        body.append(h('p.muted.empty#alerts-missing', {}, 'no alerts API on this server (GET /v1/alerts answered 404)'));
        return;
      }
      errors.append(errorBox(e));
      return;
    }
    const rules = answer.rules || [];
    const table = h('table#alerts-rules', {}, h('thead', {}, h('tr', {}, ['rule', 'rollup', 'expression', 'kind', 'for', 'state', 'alerts', 'silenced until'].map((t) => h('th', {}, t)))));
    const tb = h('tbody');
    for (const r of rules) {
      const forSecs = r.for_secs ?? r.for ?? '';
      tb.append(h('tr.row', { dataset: { rule: r.name }, on: { click: () => set({ rule: r.name }) } },
        h('td', {}, h('b', {}, r.name)), h('td', {}, r.rollup ?? ''), h('td', {}, r.expr ?? ''), h('td', {}, r.kind ?? ''),
        h('td', {}, typeof forSecs === 'number' ? `${forSecs} s` : String(forSecs)),
        h('td', {}, h('span', { class: `state ${r.state || 'inactive'}` }, r.state || 'inactive'), r.error ? h('div.error', {}, r.error) : null),
        h('td', {}, (r.alerts || []).map((a) => h('div', {}, h('span', { class: `state ${a.state}` }, a.state), ` ${labelText(a.labels)} = ${fmtNum(a.value)} since ${fmtTime(a.active_since)}`))),
        h('td', {}, r.silenced_until ? fmtTime(r.silenced_until) : '')));
    }
    if (!rules.length) tb.append(h('tr', {}, h('td.muted#alerts-none', { colSpan: 8 }, 'No rules (sluice alert add, docs/alerts.md).')));
    table.append(tb);
    body.append(h('section.panel', {}, h('div.panel-head', {}, h('b', {}, `Rules (${rules.length})`), h('span.muted', {}, ' · click one for its backtest')), table));
    const chosen = p.get('rule') || (rules[0] && rules[0].name);
    if (chosen) backtest(chosen);
  })();

  const backtest = async (name) => {
    const panel = h('section.panel#alerts-backtest', {}, h('div.panel-head', {}, h('b', {}, `Backtest of ${name}`), h('span.muted', {}, ` ${from} … ${to}`)));
    body.append(panel);
    let bt;
    try {
      bt = await getJson(`/v1/alerts/${encodeURIComponent(name)}/test?` + qs({ from, to }), ctl.signal);
    } catch (e) {
      if (e.name !== 'AbortError') panel.append(errorBox(e));
      return;
    }
    const points = bt.points || [];
    const keys = [...new Set(points.map((pt) => labelText(pt.labels)))].slice(0, 10);
    const xs = [...new Set(points.map((pt) => pt.t))].sort((a, b) => a - b);
    const idx = new Map(xs.map((x, i) => [x, i]));
    const series = keys.map((k) => ({ label: k, values: xs.map(() => null) }));
    const bands = [];
    const open = new Map();
    for (const pt of points) {
      const k = keys.indexOf(labelText(pt.labels));
      if (k >= 0) series[k].values[idx.get(pt.t)] = pt.value;
    }
    const transitions = (bt.transitions || []).slice().sort((a, b) => a.t - b.t);
    for (const tr of transitions) {
      const k = labelText(tr.labels);
      if (tr.status === 'firing') open.set(k, tr.t);
      else if (open.has(k)) {
        bands.push({ from: open.get(k), to: tr.t });
        open.delete(k);
      }
    }
    for (const t of open.values()) bands.push({ from: t, to: xs[xs.length - 1] ?? t });
    const marks = transitions.map((tr) => ({ t: tr.t, color: tr.status === 'firing' ? '#e15759' : '#59a14f' }));
    panel.dataset.points = points.length;
    panel.dataset.transitions = transitions.length;
    if (xs.length) {
      const el = h('div.chart');
      panel.append(el);
      charts.push(lines(el, { xs, series, bands, marks, height: 220 }));
    } else {
      panel.append(h('p.muted', {}, 'No points in this range.'));
    }
    panel.append(h('table', {}, h('thead', {}, h('tr', {}, ['time', 'labels', 'status', 'value'].map((t) => h('th', {}, t)))),
      h('tbody', {}, transitions.slice(-50).map((tr) => h('tr', {}, h('td', {}, fmtTime(tr.t)), h('td', {}, labelText(tr.labels)),
        h('td', {}, h('span', { class: `state ${tr.status === 'firing' ? 'firing' : 'inactive'}` }, tr.status)), h('td', {}, fmtNum(tr.value)))))));
  };

  return () => {
    ctl.abort();
    for (const c of charts) c.destroy();
  };
}
