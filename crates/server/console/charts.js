// Charts over the vendored uPlot (a global from vendor/uPlot.iife.min.js): stacked bars for
// counts over time, lines for rollups and backtests, a sparkline for the live rate.

const uPlot = window.uPlot;

/** Series colours, in order. */
export const COLORS = ['#4e79a7', '#f28e2b', '#59a14f', '#e15759', '#76b7b2', '#edc948',
  '#b07aa1', '#ff9da7', '#9c755f', '#bab0ac'];

function width(el) {
  return Math.max(300, el.clientWidth || el.parentElement?.clientWidth || 800);
}

/** Keeps `chart` as wide as `el` while it is in the page. */
function fit(chart, el, height) {
  const ro = new ResizeObserver(() => chart.setSize({ width: width(el), height }));
  ro.observe(el);
  const destroy = chart.destroy.bind(chart);
  chart.destroy = () => {
    ro.disconnect();
    destroy();
  };
  return chart;
}

/**
 * Stacked bars: `xs` (Unix seconds, one per bar), `series` [{label, values, color?}] drawn on
 * top of each other; `onSelect(from, to)` when the user drags across a range (zoom).
 */
export function stackedBars(el, { xs, series, height = 220, onSelect, yLabel, legend = true }) {
  const stacked = [];
  let acc = xs.map(() => 0);
  for (const s of series) {
    acc = acc.map((a, i) => a + (s.values[i] || 0));
    stacked.push(acc.slice());
  }
  // uPlot draws series in order: the tallest stack first, each lower one over it.
  const order = series.map((_, i) => i).reverse();
  const bars = uPlot.paths.bars({ size: [0.9, 60] });
  const opts = {
    width: width(el),
    height,
    cursor: { drag: { x: true, y: false, setScale: false } },
    select: { show: true },
    legend: { show: legend, live: true },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    axes: [{}, { label: yLabel, size: 60 }],
    series: [{}].concat(order.map((i) => ({
      label: series[i].label,
      stroke: series[i].color || COLORS[i % COLORS.length],
      fill: series[i].color || COLORS[i % COLORS.length],
      width: 0,
      paths: bars,
      points: { show: false },
      value: (u, v, si, idx) => (idx == null ? '' : series[i].values[idx] ?? 0),
    }))),
    hooks: {
      setSelect: [(u) => {
        if (!onSelect || u.select.width < 3) return;
        const a = u.posToVal(u.select.left, 'x');
        const b = u.posToVal(u.select.left + u.select.width, 'x');
        u.setSelect({ left: 0, width: 0 }, false);
        onSelect(Math.floor(a), Math.ceil(b));
      }],
    },
  };
  return fit(new uPlot(opts, [xs].concat(order.map((i) => stacked[i])), el), el, height);
}

/**
 * Lines: `xs`, `series` [{label, values, color?, dash?, stepped?}]; `bands` [{from, to,
 * color}] shaded behind (x ranges); `marks` [{t, color}] vertical lines.
 */
export function lines(el, { xs, series, height = 200, bands = [], marks = [], yLabel }) {
  const opts = {
    width: width(el),
    height,
    scales: { x: { time: true } },
    axes: [{}, { label: yLabel, size: 60 }],
    legend: { show: true },
    series: [{}].concat(series.map((s, i) => ({
      label: s.label,
      stroke: s.color || COLORS[i % COLORS.length],
      width: 1.5,
      dash: s.dash,
      spanGaps: false,
      paths: s.stepped ? uPlot.paths.stepped({ align: 1 }) : undefined,
      points: { show: xs.length < 60 },
    }))),
    hooks: {
      drawClear: [(u) => {
        const ctx = u.ctx;
        ctx.save();
        for (const b of bands) {
          const x0 = u.valToPos(b.from, 'x', true);
          const x1 = u.valToPos(b.to, 'x', true);
          ctx.fillStyle = b.color || 'rgba(225,87,89,0.15)';
          ctx.fillRect(x0, u.bbox.top, Math.max(1, x1 - x0), u.bbox.height);
        }
        ctx.restore();
      }],
      draw: [(u) => {
        const ctx = u.ctx;
        ctx.save();
        for (const m of marks) {
          const x = u.valToPos(m.t, 'x', true);
          ctx.strokeStyle = m.color || '#e15759';
          ctx.lineWidth = 2;
          ctx.beginPath();
          ctx.moveTo(x, u.bbox.top);
          ctx.lineTo(x, u.bbox.top + u.bbox.height);
          ctx.stroke();
        }
        ctx.restore();
      }],
    },
  };
  return fit(new uPlot(opts, [xs].concat(series.map((s) => s.values)), el), el, height);
}

/** A small line without axes or legend, updated with `chart.setData([xs, ys])`. */
export function sparkline(el, { xs, ys, height = 90, color = COLORS[0] }) {
  const opts = {
    width: width(el),
    height,
    cursor: { show: false },
    legend: { show: false },
    scales: { x: { time: true }, y: { range: (u, min, max) => [0, Math.max(1, max)] } },
    axes: [{ show: false }, { show: true, size: 50, ticks: { show: false }, grid: { show: false } }],
    series: [{}, { stroke: color, fill: color + '33', width: 1.5, points: { show: false } }],
  };
  return fit(new uPlot(opts, [xs, ys], el), el, height);
}
