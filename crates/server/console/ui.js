// Small helpers every screen shares: building elements, the URL hash (every view is a URL),
// times and numbers as people read them.

/** `h('div.cls#id', {attr…, on: {click}}, children…)`: an element. */
export function h(spec, attrs = {}, ...children) {
  const m = /^([a-z0-9]+)((?:[.#][\w-]+)*)$/i.exec(spec);
  const e = document.createElement(m ? m[1] : 'div');
  if (m) {
    for (const p of m[2].match(/[.#][\w-]+/g) || []) {
      if (p[0] === '.') e.classList.add(p.slice(1));
      else e.id = p.slice(1);
    }
  }
  for (const [k, v] of Object.entries(attrs || {})) {
    if (v === undefined || v === null || v === false) continue;
    if (k === 'on') for (const [ev, f] of Object.entries(v)) e.addEventListener(ev, f);
    else if (k === 'dataset') Object.assign(e.dataset, v);
    // Through the CSSOM: the Content-Security-Policy allows no inline style attributes.
    else if (k === 'style') e.style.cssText = v;
    else if (k in e && typeof v !== 'string') e[k] = v;
    else e.setAttribute(k, v === true ? '' : v);
  }
  for (const c of children.flat()) {
    if (c === null || c === undefined || c === false) continue;
    e.append(c instanceof Node ? c : String(c));
  }
  return e;
}

/** The screen and its parameters from `location.hash` (`#/explore?from=-1h&…`). */
export function route() {
  const hash = location.hash.replace(/^#\/?/, '');
  const [screen, query = ''] = hash.split('?');
  return { screen: screen || 'explore', params: new URLSearchParams(query) };
}

/** The hash of `screen` with `params` (empty values left out). */
export function href(screen, params = {}) {
  const q = new URLSearchParams();
  const entries = params instanceof URLSearchParams ? params.entries() : Object.entries(params);
  for (const [k, v] of entries) if (v !== undefined && v !== null && v !== '') q.set(k, v);
  const s = q.toString();
  return '#/' + screen + (s ? '?' + s : '');
}

/** Goes to `screen` with `params` (a new history entry: the back button works); the same view
 * is mounted again. */
export function go(screen, params) {
  const target = href(screen, params);
  if (location.hash !== target) location.hash = target;
  // The same view again (Run after Cancel): mounted afresh at once.
  else window.dispatchEvent(new HashChangeEvent('hashchange'));
}

/** The params of the current view with `changes` applied (`''`/null removes a key). */
export function withParams(params, changes) {
  const p = new URLSearchParams(params);
  for (const [k, v] of Object.entries(changes)) {
    if (v === undefined || v === null || v === '') p.delete(k);
    else p.set(k, v);
  }
  return p;
}

/** Unix seconds of a time as the API takes it (`-5m`, `now`, digits, RFC 3339), or NaN. */
export function toUnix(text, now = Date.now() / 1000) {
  const t = String(text ?? '').trim();
  if (t === '' || t === 'now') return Math.floor(now);
  if (/^\d+$/.test(t)) return Number(t);
  const rel = /^([+-])\s*(\d+(?:\.\d+)?)\s*(ms|s|m|h|d|w)?$/.exec(t);
  if (rel) {
    const unit = { ms: 0.001, s: 1, m: 60, h: 3600, d: 86400, w: 604800 }[rel[3] || 's'];
    return Math.floor(now + (rel[1] === '-' ? -1 : 1) * Number(rel[2]) * unit);
  }
  const d = Date.parse(t);
  return Number.isNaN(d) ? NaN : Math.floor(d / 1000);
}

/** Unix seconds as `2026-11-29 05:40:12` (UTC). */
export function fmtTime(secs) {
  if (!Number.isFinite(secs)) return '';
  return new Date(secs * 1000).toISOString().replace('T', ' ').replace(/\.000Z$/, '').replace('Z', '');
}

/** 12345 → `12,345`. */
export function fmtNum(n) {
  if (n === null || n === undefined || Number.isNaN(n)) return '–';
  if (!Number.isInteger(n)) return n.toLocaleString('en-US', { maximumFractionDigits: 3 });
  return n.toLocaleString('en-US');
}

/** Bytes as `1.2 MiB`. */
export function fmtBytes(n) {
  if (!Number.isFinite(n)) return '–';
  const u = ['B', 'KiB', 'MiB', 'GiB', 'TiB'];
  let i = 0;
  while (n >= 1024 && i < u.length - 1) {
    n /= 1024;
    i++;
  }
  return (i ? n.toFixed(1) : n) + ' ' + u[i];
}

/** Seconds as `3d 4h`, `12m`, `850 ms`. */
export function fmtDuration(s) {
  if (!Number.isFinite(s)) return '–';
  if (s < 1) return Math.round(s * 1000) + ' ms';
  if (s < 120) return s.toFixed(s < 10 ? 2 : 0) + ' s';
  if (s < 7200) return Math.round(s / 60) + ' m';
  if (s < 172800) return (s / 3600).toFixed(1) + ' h';
  return (s / 86400).toFixed(1) + ' d';
}

/** The ranges of the time pickers. */
export const RANGES = [
  ['-5m', 'last 5 min'], ['-15m', 'last 15 min'], ['-1h', 'last hour'], ['-6h', 'last 6 h'],
  ['-1d', 'last day'], ['-7d', 'last 7 days'],
];

/** A time picker: a preset select plus absolute from/to fields; `onChange(from, to)`. */
export function timePicker(from, to, onChange) {
  const fromIn = h('input#from', { value: from, size: 20, title: 'from: -5m, now, Unix seconds or RFC 3339' });
  const toIn = h('input#to', { value: to, size: 20, title: 'to (exclusive)' });
  const sel = h('select#range', {
    on: { change: () => { if (sel.value) onChange(sel.value, 'now'); } },
  }, h('option', { value: '' }, 'custom'), RANGES.map(([v, l]) => h('option', { value: v, selected: v === from && (to === 'now' || !to) }, l)));
  const apply = () => onChange(fromIn.value.trim(), toIn.value.trim() || 'now');
  for (const i of [fromIn, toIn]) i.addEventListener('keydown', (e) => { if (e.key === 'Enter') apply(); });
  return h('span.timepicker', {}, sel, ' from ', fromIn, ' to ', toIn,
    h('button', { type: 'button', on: { click: apply } }, 'set'));
}

/** A `<pre>` for an API error (its caret lines kept). */
export function errorBox(e) {
  return h('pre.error', {}, e && e.message ? e.message : String(e));
}

/** A where-language literal for a JSON value. */
export function literal(v) {
  if (v === null || v === undefined) return 'null';
  if (typeof v === 'number' || typeof v === 'boolean') return String(v);
  return JSON.stringify(String(v));
}

/** A where-language path for dotted `segments` (a key that is not a plain name is quoted). */
export function pathOf(segments) {
  return segments.map((s) => (/^[A-Za-z_][A-Za-z0-9_]*$/.test(s) ? s : JSON.stringify(s))).join('.');
}
