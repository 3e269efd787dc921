// Rollups: the registered rollups (GET /v1/rollups), and for the chosen one a chart per
// aggregation (count, quantiles, distinct…) over its groups (GET /v1/rollups/NAME), with the
// groups to draw and the step (a multiple of the rollup's own) chosen in the URL.

import { getJson, qs } from './api.js';
import { lines } from './charts.js';
import { errorBox, fmtDuration, fmtNum, go, h, timePicker, toUnix, withParams } from './ui.js';

/** Groups drawn when none are chosen (the largest by count). */
const DEFAULT_GROUPS = 6;
/** Step multiples offered. */
const MULTIPLES = [1, 3, 6, 30, 60, 360, 1440, 8640];

/** Mounts Rollups in `root` for the view `p`. */
export function mount(root, p) {
  const from = p.get('from') || '-1h';
  const to = p.get('to') || 'now';
  const set = (changes) => go('rollups', withParams(p, changes));
  const ctl = new AbortController();
  const charts = [];
  const side = h('aside.side#rollup-list', {}, h('h3', {}, 'Rollups'));
  const body = h('section.results#rollup-body');
  const errors = h('div#errors');
  root.append(h('div.bar', {}, timePicker(from, to, (f, t) => set({ from: f, to: t }))), errors, h('div.split', {}, side, body));

  (async () => {
    let defs;
    try {
      defs = (await getJson('/v1/rollups', ctl.signal)).rollups || [];
    } catch (e) {
      if (e.name !== 'AbortError') errors.append(errorBox(e));
      return;
    }
    if (defs.length === 0) {
      body.append(h('p.muted.empty#rollups-none', {}, 'No rollups registered. Add one with `sluice rollup add NAME --type T --group-by F --agg count,p99:ms --step 10s` (docs/rollups.md).'));
      return;
    }
    const name = p.get('name') || defs[0].name;
    for (const d of defs) {
      side.append(h('a.rollup-link', { href: '#', dataset: { name: d.name }, class: d.name === name ? 'rollup-link active' : 'rollup-link', on: { click: (e) => { e.preventDefault(); set({ name: d.name, groups: '', step: '' }); } } },
        h('b', {}, d.name), h('div.muted', {}, `${d.type || '*'} · ${(d.transform?.aggs || []).join(', ')} · every ${fmtDuration(d.transform?.step || 0)}`)));
    }
    const def = defs.find((d) => d.name === name);
    if (!def) {
      errors.append(h('pre.error', {}, `no rollup named ${JSON.stringify(name)}`));
      return;
    }
    const base = def.transform?.step || 10;
    const span = toUnix(to) - toUnix(from);
    const step = Number(p.get('step')) || base;
    const stepSel = h('select#step', { on: { change: () => set({ step: stepSel.value === String(base) ? '' : stepSel.value }) } },
      MULTIPLES.map((m) => m * base).filter((s) => s === base || !(span > 0) || s <= span / 2)
        .map((s) => h('option', { value: s, selected: s === step }, fmtDuration(s))));
    const head = h('div.panel-head', {}, h('b', {}, name), h('label.muted', {}, ' step ', stepSel), h('span#rollup-note.muted'));
    body.append(head);
    let answer;
    try {
      answer = await getJson(`/v1/rollups/${encodeURIComponent(name)}?` + qs({ from, to, step }), ctl.signal);
    } catch (e) {
      if (e.name !== 'AbortError') errors.append(errorBox(e));
      return;
    }
    draw(def, answer, step);
  })();

  const draw = (def, answer, step) => {
    const groupBy = def.transform?.group_by || [];
    const aggs = def.transform?.aggs || [];
    const rows = answer.rows || [];
    const keyOf = (r) => groupBy.map((g) => String(r[g] ?? 'null')).join(' · ') || 'all';
    const counts = new Map();
    for (const r of rows) counts.set(keyOf(r), (counts.get(keyOf(r)) || 0) + (Number(r.count) || 1));
    const ranked = [...counts.entries()].sort((a, b) => b[1] - a[1]).map(([k]) => k);
    const chosen = p.get('groups') ? p.get('groups').split('|').filter((g) => counts.has(g)) : ranked.slice(0, DEFAULT_GROUPS);
    const xsSet = new Set(rows.map((r) => r.start));
    const xs = [...xsSet].sort((a, b) => a - b);
    const idx = new Map(xs.map((x, i) => [x, i]));
    document.getElementById('rollup-note').textContent = ` ${fmtNum(rows.length)} rows, ${fmtNum(counts.size)} groups` + (answer.other_events ? `, ${fmtNum(answer.other_events)} events in _other` : '');

    const picker = h('details.groups#rollup-groups', { open: counts.size <= 12 }, h('summary', {}, `Groups (${chosen.length} of ${counts.size} drawn)`),
      ranked.slice(0, 100).map((g) => h('label.group', {}, h('input', { type: 'checkbox', checked: chosen.includes(g), on: { change: (e) => {
        const next = e.target.checked ? chosen.concat(g) : chosen.filter((x) => x !== g);
        set({ groups: next.join('|') });
      } } }), ` ${g} `, h('span.count', {}, fmtNum(counts.get(g))))));
    const body = document.getElementById('rollup-body');
    body.append(picker);
    if (rows.length === 0) {
      body.append(h('p.muted.empty', {}, 'No states in this range.'));
      return;
    }
    for (const agg of aggs) {
      const series = chosen.map((g) => {
        const values = xs.map(() => null);
        for (const r of rows) if (keyOf(r) === g && r[agg] !== undefined) values[idx.get(r.start)] = r[agg];
        return { label: g, values };
      });
      const total = agg === 'count' ? rows.reduce((s, r) => s + (Number(r.count) || 0), 0) : undefined;
      const el = h('div.chart');
      const panel = h('section.panel.rollup-chart', { dataset: { agg, total } }, h('div.panel-head', {}, h('b', {}, agg), h('span.muted', {}, ` per ${fmtDuration(step)}`), total !== undefined ? h('span.muted', {}, ` · ${fmtNum(total)} in all groups`) : null), el);
      body.append(panel);
      charts.push(lines(el, { xs, series, yLabel: agg, height: 180 }));
    }
  };

  return () => {
    ctl.abort();
    for (const c of charts) c.destroy();
  };
}
