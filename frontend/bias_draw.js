// Drawing for the bias view: the subgroup table, the scores-over-steps chart (SVG) and the example
// maps laid over their images (canvas). Pure builders: they take data, return elements, fetch nothing.

import { sequential } from './colormap.js';
import { el, svg } from './dom.js';

/** Subgroup keys: all images, then target (t) and protected (p) attribute 1 or 0. */
export const SUBGROUPS = ['all', 't1p1', 't1p0', 't0p1', 't0p0'];
/** One colour per score line, in order (the chance level is the same colour, dashed). */
export const SCORE_COLORS = ['#e65100', '#1565c0', '#2e7d32', '#6a1b9a', '#00838f', '#ad1457'];
const WIDTH = 320;
const HEIGHT = 150;
const PAD = { left: 30, right: 8, top: 8, bottom: 20 };

/**
 * A chart of each score's mean over all images against the steps, with its chance level dashed.
 * @param {{steps: number[], scores: {label: string,
 *   subgroups: Record<string, {mean: (number|null)[], chance: (number|null)[]}>}[]}} series
 * @param {string} run
 * @returns {{element: SVGSVGElement, mark: (step: number|null) => void}}
 */
export function scoreChart(series, run) {
  const attrs = { viewBox: `0 0 ${WIDTH} ${HEIGHT}`, class: 'xray-bias-chart', role: 'img' };
  const root = /** @type {SVGSVGElement} */ (svg('svg', attrs));
  root.dataset.run = run;
  root.setAttribute('aria-label', `Attention-IoU over steps, run ${run}`);
  const steps = series.steps || [];
  const lo = steps.length ? steps[0] : 0;
  const hi = steps.length ? steps[steps.length - 1] : 1;
  const x = (step) => PAD.left + (hi > lo ? (step - lo) / (hi - lo) : 0.5) * (WIDTH - PAD.left - PAD.right);
  const y = (v) => HEIGHT - PAD.bottom - v * (HEIGHT - PAD.top - PAD.bottom);
  for (const v of [0, 0.5, 1]) {
    root.append(svg('line', { x1: PAD.left, x2: WIDTH - PAD.right, y1: y(v), y2: y(v), class: 'xray-bias-grid' }));
    const label = svg('text', { x: PAD.left - 4, y: y(v) + 3, 'text-anchor': 'end', class: 'xray-bias-axis' });
    label.textContent = String(v);
    root.append(label);
  }
  for (const step of steps.length > 1 ? [lo, hi] : steps) {
    const label = svg('text', { x: x(step), y: HEIGHT - 6, 'text-anchor': 'middle', class: 'xray-bias-axis' });
    label.textContent = String(step);
    root.append(label);
  }
  (series.scores || []).forEach((score, i) => {
    const color = SCORE_COLORS[i % SCORE_COLORS.length];
    const all = score.subgroups.all || { mean: [], chance: [] };
    for (const [key, dashed] of [['chance', true], ['mean', false]]) {
      const points = steps.map((s, j) => [s, all[key][j]]).filter(([, v]) => typeof v === 'number');
      if (!points.length) continue;
      const d = points.map(([s, v], j) => `${j ? 'L' : 'M'}${x(s).toFixed(1)},${y(v).toFixed(1)}`).join('');
      const path = svg('path', {
        d,
        fill: 'none',
        stroke: color,
        'stroke-width': dashed ? 1 : 2,
        class: dashed ? 'xray-bias-chance-line' : 'xray-bias-line',
      });
      if (dashed) path.setAttribute('stroke-dasharray', '4 3');
      path.dataset.score = score.label;
      path.dataset.key = key;
      root.append(path);
      if (!dashed) for (const [s, v] of points) root.append(svg('circle', { cx: x(s), cy: y(v), r: 2.2, fill: color }));
    }
  });
  const marker = svg('line', { y1: PAD.top, y2: HEIGHT - PAD.bottom, class: 'xray-bias-marker' });
  root.append(marker);
  const mark = (step) => {
    marker.style.display = step === null || !steps.length ? 'none' : '';
    if (step !== null) {
      marker.setAttribute('x1', String(x(step)));
      marker.setAttribute('x2', String(x(step)));
    }
    root.dataset.step = step === null ? '' : String(step);
  };
  mark(null);
  return { element: root, mark };
}

/**
 * Paints an image (rows × cols × 3 bytes) with an attention map (rows × cols in [0, 1]) laid over
 * it: the map's colour, more opaque where the map is higher.
 * @param {HTMLCanvasElement} canvas
 * @param {Uint8Array} image
 * @param {Float32Array|null} map  null: the image alone.
 * @param {number} rows
 * @param {number} cols
 */
export function paintOverlay(canvas, image, map, rows, cols) {
  canvas.width = cols;
  canvas.height = rows;
  const ctx = canvas.getContext('2d');
  if (!ctx) return;
  const data = ctx.createImageData(cols, rows);
  for (let i = 0; i < rows * cols; i++) {
    const t = map ? Math.min(1, Math.max(0, Number.isFinite(map[i]) ? map[i] : 0)) : 0;
    const [r, g, b] = sequential(t);
    const a = map ? 0.75 * t : 0;
    data.data[4 * i] = Math.round(image[3 * i] * (1 - a) + r * a);
    data.data[4 * i + 1] = Math.round(image[3 * i + 1] * (1 - a) + g * a);
    data.data[4 * i + 2] = Math.round(image[3 * i + 2] * (1 - a) + b * a);
    data.data[4 * i + 3] = 255;
  }
  ctx.putImageData(data, 0, 0);
}

/**
 * Bytes of a base64 string.
 * @param {string} base64
 * @returns {Uint8Array}
 */
export function decodeBytes(base64) {
  const text = atob(base64 || '');
  const out = new Uint8Array(text.length);
  for (let i = 0; i < text.length; i++) out[i] = text.charCodeAt(i);
  return out;
}

/**
 * Little-endian float32 values of a base64 string.
 * @param {string} base64
 * @returns {Float32Array}
 */
export function decodeFloats(base64) {
  const bytes = decodeBytes(base64);
  return new Float32Array(bytes.buffer, bytes.byteOffset, Math.floor(bytes.byteLength / 4));
}

/** @param {unknown} v @returns {string} */
function fmt(v) {
  return typeof v === 'number' && Number.isFinite(v) ? v.toFixed(3) : '–';
}

/** The heading of a subgroup column, with the attribute names. */
function subgroupTitle(key, target, protectedName) {
  if (key === 'all') return 'all';
  const sign = (c) => (c === '1' ? '=1' : '=0');
  return `${target}${sign(key[1])}, ${protectedName}${sign(key[3])}`;
}

/**
 * The subgroup table of one result: a row per score, a column per subgroup, each mean with its
 * chance level and count.
 * @param {any} result  A /bias/result body.
 * @returns {HTMLElement}
 */
export function subgroupTable(result) {
  const table = el('table', 'xray-bias-table');
  const target = (result.target && result.target.name) || 'target';
  const protectedName = (result.protected && result.protected.name) || 'protected';
  const head = el('tr');
  head.append(el('th', '', 'score'), ...SUBGROUPS.map((key) => {
    const th = el('th');
    const [a, b] = subgroupTitle(key, target, protectedName).split(', ');
    th.append(el('span', 'xray-bias-subgroup', b ? `${a},` : a));
    if (b) th.append(' ', el('span', 'xray-bias-subgroup', b));
    return th;
  }));
  table.append(head);
  for (const score of result.scores || []) {
    const row = el('tr');
    row.append(el('th', 'xray-bias-score', score.label));
    for (const key of SUBGROUPS) {
      const stats = (score.subgroups && score.subgroups[key]) || {};
      const cell = el('td');
      const count = stats.count ?? 0;
      Object.assign(cell.dataset, {
        score: score.label,
        subgroup: key,
        mean: String(stats.mean ?? ''),
        chance: String(stats.chance ?? ''),
        count: String(count),
      });
      const mean = el('span', 'xray-bias-mean', fmt(stats.mean));
      const numbers = typeof stats.mean === 'number' && typeof stats.chance === 'number';
      if (numbers && stats.mean > stats.chance) mean.classList.add('xray-bias-above');
      cell.append(mean, el('span', 'xray-bias-chance', `chance ${fmt(stats.chance)}`));
      cell.append(el('span', 'xray-bias-count', `n=${count}`));
      const where = subgroupTitle(key, target, protectedName);
      cell.title = `${score.label}, ${where}: mean ${fmt(stats.mean)} over ${count} of ${stats.images ?? 0} images; `
        + `a uniform map would score ${fmt(stats.chance)}`;
      row.append(cell);
    }
    table.append(row);
  }
  return table;
}

/**
 * One figure per example: the image under each of its maps.
 * @param {any} body  A /bias/examples body.
 * @returns {HTMLElement[]}
 */
export function exampleFigures(body) {
  const names = body.map_names || [];
  const attributes = body.attributes || names;
  return (body.examples || []).map((example) => {
    const figure = el('figure', 'xray-bias-example-figure');
    figure.dataset.subgroup = example.subgroup || '';
    const image = decodeBytes(example.image);
    const maps = el('div', 'xray-bias-example-maps');
    names.forEach((name, m) => {
      const canvas = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-bias-example'));
      canvas.dataset.map = name;
      canvas.title = `GradCAM map of ${name}`;
      paintOverlay(canvas, image, decodeFloats(example.maps[m]), example.rows, example.cols);
      const cell = el('div', 'xray-bias-example-cell');
      cell.append(canvas, el('span', 'xray-muted', name));
      maps.append(cell);
    });
    const labels = Array.isArray(example.labels)
      ? example.labels.map((v, i) => `${attributes[i] ?? i}=${v}`).join(', ')
      : '';
    figure.append(maps, el('figcaption', 'xray-muted', `#${example.index} ${labels}`));
    return figure;
  });
}
