// The health view ([data-view=health]): one statistic of each shown run as a layers × steps matrix
// (rows in dataflow order, as /health gives them), the runs stacked on one shared step axis. The
// server is asked for at most as many columns as the plot is wide in device pixels (it bins longer
// runs, each bin holding its worst value). Hover reads a cell out; a click opens that layer at that
// step. Drawing is in health_draw.js.
// Hooks: .xray-health-matrix[data-run][data-stat][data-steps][data-columns], its rows
// .xray-health-row[data-layer][data-values], .xray-health-readout[data-layer][data-step][data-value].

import { el } from './dom.js';
import { ApiError } from './api.js';
import { fetchHealth, HEALTH_STATS } from './health_api.js';
import { drawMatrix } from './health_draw.js';
import { drawLegend, healthScale } from './health_scale.js';
import { formatValue } from './format.js';

const ROW_HEIGHT = 14;
const LABEL_WIDTH = 200;
const STAT_LABELS = Object.fromEntries(HEALTH_STATS.map((s) => [s.stat, s.label]));

/** @param {number} v @param {number} present */
function cellText(v, present) {
  return present ? String(v) : '';
}

export class HealthView {
  /**
   * @param {{errors?: {set: Function, clear: Function}, onBack?: () => void,
   *   onOpen?: (layer: string, step: number, run: string, nonfinite: boolean) => void, onStats?: (stats: string[]) => void}} deps
   */
  constructor(deps = {}) {
    this.deps = deps;
    this.seq = 0;
    /** @type {{run: string, matrix: import('./health_api.js').HealthMatrix|null, error: string|null}[]} */
    this.shown = [];
    this.stat = 'grad_l2';
    this.columns = 0;
    this.step = null;
    this.drawn = [];
    this.build();
  }

  build() {
    this.element = el('section', 'xray-health-view');
    this.element.dataset.view = 'health';
    const header = el('header', 'xray-header');
    const row = el('div', 'xray-title-row');
    const back = el('button', 'xray-button', '← Graph');
    back.dataset.action = 'back-to-graph';
    back.addEventListener('click', () => this.deps.onBack && this.deps.onBack());
    this.title = el('h2', 'xray-layer-title', 'Training health');
    this.summary = el('span', 'xray-muted', '');
    row.append(back, this.title, this.summary);
    const legendRow = el('div', 'xray-hm-legend-row');
    this.legend = el('div', 'xray-matrix-legend');
    this.readout = el('div', 'xray-health-readout xray-muted', 'Hover a cell to read it; click to open the layer at that step.');
    legendRow.append(this.legend, this.readout);
    header.append(row, legendRow);
    this.hint = el('div', 'xray-hint xray-muted', '');
    this.hint.hidden = true;
    this.body = el('div', 'xray-hm-body');
    this.element.append(header, this.hint, this.body);
  }

  /** CSS pixels of the plot (the matrix canvas) in the current layout. */
  plotWidth() {
    const w = this.body.clientWidth || this.element.clientWidth || 0;
    return Math.max(100, (w || 1000) - LABEL_WIDTH - 40);
  }

  /**
   * Reloads the shown runs' matrices of one statistic, then draws.
   * @param {{runs: string[], stat: string}} options
   */
  async update({ runs, stat }) {
    const seq = ++this.seq;
    const cssWidth = this.plotWidth();
    const columns = Math.max(1, Math.floor(cssWidth * (window.devicePixelRatio || 1)));
    const results = await Promise.all(runs.map((run) => fetchHealth(run, stat, columns).then(
      (matrix) => ({ run, matrix, error: null }),
      (e) => ({ run, matrix: null, error: e instanceof ApiError && e.status === 404 ? e.message : String(e.message || e) }),
    )));
    if (seq !== this.seq) return;
    this.stat = stat;
    this.columns = columns;
    this.shown = results;
    const stats = [...new Set(results.flatMap((r) => (r.matrix ? r.matrix.stats : [])))];
    if (stats.length && this.deps.onStats) this.deps.onStats(stats);
    this.draw(cssWidth);
  }

  /** Re-fetches when the plot's width in device pixels changed (window resize). */
  resized() {
    if (this.element.hidden || !this.shown.length) return;
    const columns = Math.floor(this.plotWidth() * (window.devicePixelRatio || 1));
    if (columns !== this.columns) this.update({ runs: this.shown.map((s) => s.run), stat: this.stat });
  }

  /** @param {number} cssWidth */
  draw(cssWidth) {
    const t0 = performance.now();
    const matrices = this.shown.map((s) => s.matrix).filter((m) => m && m.steps.length && m.layers.length);
    const scale = healthScale(this.stat, matrices);
    drawLegend(this.legend, STAT_LABELS[this.stat] || this.stat, scale);
    this.x0 = Math.min(...matrices.map((m) => m.steps[0]));
    this.x1 = Math.max(...matrices.map((m) => m.lastSteps[m.lastSteps.length - 1] + 1));
    this.cssWidth = cssWidth;
    this.drawn = [];
    const blocks = this.shown.map((s) => this.block(s, scale, cssWidth));
    this.body.replaceChildren(...blocks);
    if (matrices.length) this.body.append(this.axis(cssWidth));
    const label = STAT_LABELS[this.stat] || this.stat;
    this.summary.textContent = label;
    this.hint.hidden = this.shown.length > 0;
    this.hint.textContent = this.shown.length ? '' : 'No run shown.';
    this.element.dataset.drawMs = String(Math.round((performance.now() - t0) * 10) / 10);
    this.showStep(this.step);
  }

  /**
   * One run's matrix.
   * @param {{run: string, matrix: any, error: string|null}} shown
   */
  block({ run, matrix, error }, scale, cssWidth) {
    const section = el('section', 'xray-health-matrix');
    section.dataset.run = run;
    section.dataset.stat = this.stat;
    const title = el('div', 'xray-hm-title');
    title.append(el('span', 'xray-hm-run', run));
    section.append(title);
    if (!matrix || !matrix.steps.length || !matrix.layers.length) {
      section.dataset.steps = '';
      section.dataset.state = error ? 'error' : 'empty';
      title.append(el('span', 'xray-muted', error || `no values of ${this.stat} yet`));
      return section;
    }
    section.dataset.state = 'ready';
    section.dataset.steps = matrix.steps.join(',');
    section.dataset.columns = String(this.columns);
    const n = matrix.steps.length;
    title.append(el('span', 'xray-muted', matrix.binned
      ? `${matrix.totalSteps} steps in ${n} columns (each the worst of its steps)`
      : `${n} step${n === 1 ? '' : 's'}`));
    const grid = el('div', 'xray-hm-grid');
    const labels = el('div', 'xray-hm-labels');
    labels.style.width = `${LABEL_WIDTH}px`;
    matrix.layers.forEach((layer, r) => {
      const row = el('div', 'xray-health-row', layer);
      row.dataset.layer = layer;
      row.title = layer;
      row.style.height = `${ROW_HEIGHT}px`;
      const values = new Array(n);
      for (let j = 0; j < n; j++) values[j] = cellText(matrix.values[r * n + j], matrix.present[r * n + j]);
      row.dataset.values = values.join(',');
      row.addEventListener('click', () => this.open(matrix, r, n - 1));
      labels.append(row);
    });
    const plot = el('div', 'xray-hm-plot');
    const canvas = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-hm-canvas'));
    const cursor = el('div', 'xray-hm-cursor');
    cursor.hidden = true;
    plot.append(canvas, cursor);
    grid.append(labels, plot);
    section.append(grid);
    const columns = drawMatrix(canvas, matrix, scale, { cssWidth, rowHeight: ROW_HEIGHT, x0: this.x0, x1: this.x1 });
    const cell = (event) => {
      const rect = canvas.getBoundingClientRect();
      const px = Math.floor(((event.clientX - rect.left) / rect.width) * canvas.width);
      const r = Math.floor((event.clientY - rect.top) / ROW_HEIGHT);
      const j = px >= 0 && px < columns.length ? columns[px] : -1;
      return r >= 0 && r < matrix.layers.length && j >= 0 ? { r, j } : null;
    };
    canvas.addEventListener('mousemove', (event) => this.read(matrix, cell(event)));
    canvas.addEventListener('mouseleave', () => this.read(matrix, null));
    canvas.addEventListener('click', (event) => {
      const c = cell(event);
      if (c) this.open(matrix, c.r, c.j);
    });
    this.drawn.push({ matrix, cursor });
    return section;
  }

  /** A shared step axis under the matrices. */
  axis(cssWidth) {
    const axis = el('div', 'xray-hm-axis');
    axis.style.marginLeft = `${LABEL_WIDTH}px`;
    axis.style.width = `${cssWidth}px`;
    const span = this.x1 - this.x0;
    const raw = Math.max(1, span / 6);
    const unit = 10 ** Math.floor(Math.log10(raw));
    const every = [1, 2, 5, 10].map((k) => k * unit).find((k) => k >= raw) || 10 * unit;
    for (let step = Math.ceil(this.x0 / every) * every; step < this.x1; step += every) {
      const tick = el('span', 'xray-hm-tick', String(step));
      tick.style.left = `${(((step - this.x0) + 0.5) / span) * 100}%`;
      axis.append(tick);
    }
    return axis;
  }

  /** Hover read-out of a cell (null: none). */
  read(matrix, c) {
    const r = this.readout;
    if (!c) {
      for (const key of ['run', 'layer', 'step', 'lastStep', 'value']) delete r.dataset[key];
      r.textContent = 'Hover a cell to read it; click to open the layer at that step.';
      return;
    }
    const n = matrix.steps.length;
    const i = c.r * n + c.j;
    const first = matrix.steps[c.j];
    const last = matrix.lastSteps[c.j];
    const present = matrix.present[i];
    const value = matrix.values[i];
    r.dataset.run = matrix.run;
    r.dataset.layer = matrix.layers[c.r];
    r.dataset.step = String(first);
    r.dataset.lastStep = String(last);
    r.dataset.value = cellText(value, present);
    const steps = last > first ? `steps ${first}–${last}` : `step ${first}`;
    r.textContent = `${matrix.run} · ${matrix.layers[c.r]} · ${steps} · ${present ? formatValue(value) : 'no value'}`;
  }

  open(matrix, r, j) {
    const i = r * matrix.steps.length + j;
    const nonfinite = Boolean(matrix.present[i]) && !Number.isFinite(matrix.values[i]);
    if (this.deps.onOpen) this.deps.onOpen(matrix.layers[r], matrix.steps[j], matrix.run, nonfinite);
  }

  /** Marks the timeline's step on every matrix. @param {number|null} step */
  showStep(step) {
    this.step = step;
    for (const { cursor } of this.drawn) {
      const ok = step !== null && step !== undefined && this.x1 > this.x0 && step >= this.x0 && step < this.x1;
      cursor.hidden = !ok;
      if (ok) cursor.style.left = `${(((step - this.x0) + 0.5) / (this.x1 - this.x0)) * 100}%`;
    }
  }
}
