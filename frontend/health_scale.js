// Colour scales of the training-health statistics (graph colours, their legend): log for magnitudes
// (grad_l2, update_ratio, ...), 0–1 for shares (dead_fraction, saturation), diverging around zero for
// signed ones (grad_mean). NaN and ±Inf take the heatmaps' colours of their own. One scale serves the
// graph's colours, the health matrix (packed RGBA) and their legend. Pure but for drawLegend().

import { LUT_SIZE, NAN_COLOR, INF_COLOR, cssColor, diverging, sequential } from './colormap.js';
import { statScale } from './health_api.js';
import { formatValue } from './format.js';
import { el, loadStylesheet } from './dom.js';

const LAST = LUT_SIZE - 1;
const LITTLE = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;
/** @param {number[]} rgb @returns {number} RGBA packed for a Uint32Array view of ImageData. */
const pack = ([r, g, b]) => (LITTLE ? ((255 << 24) | (b << 16) | (g << 8) | r) >>> 0 : ((r << 24) | (g << 16) | (b << 8) | 255) >>> 0);
const MAPS = {
  sequential: { css: Array.from({ length: LUT_SIZE }, (_, i) => cssColor(sequential(i / LAST))), packed: Uint32Array.from({ length: LUT_SIZE }, (_, i) => pack(sequential(i / LAST))) },
  diverging: { css: Array.from({ length: LUT_SIZE }, (_, i) => cssColor(diverging(i / LAST))), packed: Uint32Array.from({ length: LUT_SIZE }, (_, i) => pack(diverging(i / LAST))) },
};
export const NAN_CSS = cssColor(NAN_COLOR);
export const INF_CSS = cssColor(INF_COLOR);
const NAN_PACKED = pack(NAN_COLOR);
const INF_PACKED = pack(INF_COLOR);

/**
 * @typedef {Object} HealthScale
 * @property {'log'|'unit'|'diverging'|'linear'} kind
 * @property {number} lo
 * @property {number} hi
 * @property {boolean} empty  No finite value to colour (the range is a placeholder).
 * @property {(v: number) => string} color  CSS colour of a value (non-finite ones included).
 * @property {(v: number, present?: number|boolean) => number} packed  The same as packed RGBA (0: no value).
 * @property {(v: number) => number} position  Where a finite value sits on the bar, 0..1.
 * @property {(v: number) => boolean} dark  Whether text on the colour should be light.
 */

/**
 * The one colour scale of a statistic over the finite present values of some matrices (the graph's
 * colours, the matrix, their legends): log for magnitudes, 0–1 for shares, and for signed values a
 * diverging map centred on 0 (sequential when every value has one sign).
 * @param {string} stat
 * @param {{values: Float32Array, present: Uint8Array}[]} matrices
 * @returns {HealthScale}
 */
export function healthScale(stat, matrices) {
  const mode = statScale(stat);
  let lo = Infinity;
  let hi = -Infinity;
  for (const { values, present } of matrices) {
    for (let i = 0; i < values.length; i++) {
      const v = values[i];
      if (!present[i] || !Number.isFinite(v) || (mode === 'log' && !(v > 0))) continue;
      if (v < lo) lo = v;
      if (v > hi) hi = v;
    }
  }
  const empty = !(lo <= hi);
  if (mode === 'unit') return make('unit', 0, 1, (v) => v, 'sequential', empty);
  if (mode === 'log') {
    if (empty) [lo, hi] = [1e-8, 1];
    if (lo === hi) [lo, hi] = [lo / 10, hi * 10];
    const a = Math.log10(lo);
    const span = Math.log10(hi) - a;
    return make('log', lo, hi, (v) => (v > 0 ? (Math.log10(v) - a) / span : 0), 'sequential', empty);
  }
  if (empty) [lo, hi] = [-1, 1];
  if (lo < 0 && hi > 0) {
    const m = Math.max(-lo, hi);
    return make('diverging', -m, m, (v) => (v / m + 1) / 2, 'diverging', empty);
  }
  if (lo === hi) [lo, hi] = [lo - 1, hi + 1];
  return make('linear', lo, hi, (v) => (v - lo) / (hi - lo), 'sequential', empty);
}

function make(kind, lo, hi, unit, map, empty) {
  const { css, packed } = MAPS[map];
  const position = (v) => Math.min(1, Math.max(0, unit(v)));
  const index = (v) => Math.round(position(v) * LAST);
  return {
    kind,
    lo,
    hi,
    empty,
    map,
    position,
    color: (v) => (v !== v ? NAN_CSS : v === Infinity || v === -Infinity ? INF_CSS : css[index(v)]),
    packed: (v, present = 1) => (!present ? 0 : v !== v ? NAN_PACKED : v === Infinity || v === -Infinity ? INF_PACKED : packed[index(v)]),
    dark: (v) => Number.isFinite(v) && (kind === 'diverging' ? Math.abs(position(v) - 0.5) > 0.38 : position(v) < 0.45),
  };
}

/** @param {HealthScale} scale @returns {number[]} Values labelled under the bar. */
export function scaleTicks(scale) {
  if (scale.kind === 'unit') return [0, 0.25, 0.5, 0.75, 1];
  if (scale.kind === 'diverging') return [scale.lo, scale.lo / 2, 0, scale.hi / 2, scale.hi];
  if (scale.kind === 'linear') return [scale.lo, (scale.lo + scale.hi) / 2, scale.hi];
  const a = Math.log10(scale.lo);
  const b = Math.log10(scale.hi);
  return [0, 0.25, 0.5, 0.75, 1].map((t) => 10 ** (a + (b - a) * t));
}

/**
 * Fills a legend element: the statistic, a colour bar with numbers, and keys for NaN, ±Inf and no value.
 * @param {HTMLElement} legend
 * @param {string} label
 * @param {HealthScale} scale
 */
export function drawLegend(legend, label, scale) {
  loadHealthStyles();
  const lut = MAPS[scale.map].css;
  const bar = el('div', 'xray-health-bar');
  bar.style.background = `linear-gradient(to right, ${lut.filter((_, i) => i % 32 === 0 || i === LAST).join(', ')})`;
  const ticks = el('div', 'xray-health-ticks');
  for (const v of scaleTicks(scale)) {
    const t = el('span', '', formatValue(v));
    t.dataset.tick = String(v);
    t.style.left = `${scale.position(v) * 100}%`;
    ticks.append(t);
  }
  const scaleWords = { log: 'log scale', unit: '0–1', diverging: 'diverging around 0', linear: 'linear' }[scale.kind];
  const keys = el('span', 'xray-health-keys');
  for (const [css, text] of [[NAN_CSS, 'NaN'], [INF_CSS, '±Inf'], ['#fff', 'no value']]) {
    const s = el('span', 'xray-swatch');
    s.style.background = css;
    keys.append(s, el('span', '', text));
  }
  const box = el('div', 'xray-health-barbox');
  box.append(bar, ticks);
  legend.replaceChildren(el('span', 'xray-health-label', `${label} (${scaleWords})`), box, keys);
  legend.dataset.scale = scale.kind;
  legend.dataset.lo = String(scale.lo);
  legend.dataset.hi = String(scale.hi);
}

/** Loads uPlot's stylesheet and health_charts.css once (next to this module). */
export function loadHealthStyles() {
  for (const file of ['./vendor/uplot.css', './health_charts.css']) loadStylesheet(file, import.meta.url);
}
