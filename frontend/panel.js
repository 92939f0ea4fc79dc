// One heatmap panel: one run's frame of one kind of the shown layer (or the difference of two
// runs): info line, note, canvas, colour bar, hover read-out and a PNG export. It draws what it is
// given; the app fetches. The container carries data-run, data-layer, data-kind, data-step and
// data-state, always set to what it shows now.

import { el } from './dom.js';
import { makeScale, cssColor, NAN_COLOR, INF_COLOR } from './colormap.js';
import { drawColorbar } from './colorbar.js';
import { drawHeatmap } from './heatmap.js';
import { hitTest, shownPanels, tileWidthOf } from './heatmap_layout.js';
import { formatValue } from './format.js';
import { describeFrame, describePooling, KIND_TITLES } from './frame_text.js';
import { originalIndex } from './tensor_index.js';
import { savePng } from './export.js';
import { deadRects, drawOutlines } from './unit_outline.js';

/** @typedef {import('./api.js').Kind} Kind */
/** @typedef {import('./frame_text.js').DecodedFrame} DecodedFrame */

export class RunPanel {
  /**
   * @param {Kind} kind
   * @param {string} run  The run shown ("a − b" for a difference panel).
   * @param {string} layer
   */
  constructor(kind, run, layer) {
    this.kind = kind;
    this.run = run;
    this.layer = layer;
    /** @type {number[]} */ this.steps = [];
    /** @type {DecodedFrame|null} */ this.frame = null;
    /** @type {{min: number, max: number}|null} */ this.range = null;
    this.layout = null;
    this.tileWidth = null;
    this.shown = null;

    this.element = el('div', 'xray-panel');
    Object.assign(this.element.dataset, { run, layer, kind, state: 'empty' });
    const head = el('div', 'xray-panel-head');
    this.runLabel = el('span', 'xray-panel-run', run);
    this.stepBadge = el('span', 'xray-kind-step', '');
    const png = /** @type {HTMLButtonElement} */ (el('button', 'xray-mini-button', 'PNG'));
    png.type = 'button';
    png.dataset.action = 'export-png';
    png.title = 'Save this panel as a PNG';
    png.addEventListener('click', () => this.exportPng());
    head.append(this.runLabel, this.stepBadge, png);
    this.info = el('div', 'xray-kind-info', '');
    this.note = el('div', 'xray-kind-note', '');
    this.note.hidden = true;
    this.error = el('div', 'xray-kind-error', '');
    this.error.hidden = true;
    this.wrap = el('div', 'xray-canvas-wrap');
    this.canvas = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-heatmap'));
    Object.assign(this.canvas.dataset, { kind, run, state: 'empty' });
    this.canvas.setAttribute('role', 'img');
    this.canvas.width = 0;
    this.canvas.height = 0;
    this.overlay = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-dead-overlay'));
    this.overlay.hidden = true;
    /** @type {{units: number[], lastDim: boolean, frame: any}|null} */ this.dead = null;
    this.wrap.append(this.canvas, this.overlay);
    this.legend = el('div', 'xray-legend');
    this.legend.hidden = true;
    this.colorbar = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-colorbar'));
    this.colorbar.dataset.kind = kind;
    this.nonfiniteKey = el('span', 'xray-nonfinite-key');
    this.nonfiniteKey.append(swatch(NAN_COLOR), el('span', '', 'NaN'), swatch(INF_COLOR), el('span', '', '±Inf'));
    this.nonfiniteKey.hidden = true;
    this.readout = el('span', 'xray-readout xray-muted', '');
    this.legend.append(this.colorbar, this.nonfiniteKey, this.readout);
    this.element.append(head, this.info, this.note, this.error, this.wrap, this.legend);
    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => this.clearReadout());
  }

  /** @param {number[]} steps  Sorted steps this run recorded for the kind. */
  setSteps(steps) {
    this.steps = steps;
  }

  /** @param {string} state */
  setState(state) {
    this.element.dataset.state = state;
    this.canvas.dataset.state = state;
  }

  /** @param {number|null} step */
  setStep(step) {
    for (const node of [this.element, this.canvas]) {
      if (step === null) delete node.dataset.step;
      else node.dataset.step = String(step);
    }
  }

  showLoading(requested, shownStep) {
    this.setState('loading');
    this.element.classList.add('xray-loading');
    this.setNote(requested, shownStep);
  }

  /**
   * @param {DecodedFrame} frame
   * @param {number} requested  The step the timeline is on.
   * @param {number} width  Available width in CSS pixels.
   * @param {{min: number, max: number}|null} range  A fixed colour range, or null for the frame's own.
   */
  showFrame(frame, requested, width, range) {
    this.frame = frame;
    this.range = range;
    this.error.hidden = true;
    this.element.classList.remove('xray-loading', 'xray-missing');
    this.setNote(requested, frame.step);
    this.info.title = frame.meta && frame.meta.selector ? `selector: ${frame.meta.selector}` : '';
    this.wrap.hidden = false;
    this.draw(width);
    this.setStep(frame.step);
    this.setState('ready');
    this.canvas.setAttribute('aria-label', `${KIND_TITLES[this.kind] || this.kind} of ${frame.layer} in ${this.run} at step ${frame.step}: ${this.info.textContent}`);
  }

  /** @param {number} width */
  draw(width) {
    const frame = this.frame;
    if (!frame) return;
    const stats = this.range ? { ...this.range, signed: this.range.min < 0 && this.range.max > 0 } : frame;
    const scale = makeScale(stats);
    if (!this.shown || this.shown.frame !== frame || this.shown.width !== width) {
      this.shown = { frame, width, shown: shownPanels(frame.decoded, width) };
    }
    const { panels, ky, kx } = this.shown.shown;
    const tileWidth = tileWidthOf(frame.decoded, frame.meta && frame.meta.original_shape);
    this.tileWidth = kx === 1 && ky === 1 ? tileWidth : null;
    this.layout = drawHeatmap(this.canvas, panels, scale, width, { tileWidth: this.tileWidth });
    const parts = [describeFrame(frame), describePooling(ky, kx), this.range ? 'colours fixed over the timeline' : ''];
    this.info.textContent = parts.filter(Boolean).join(' · ');
    this.canvas.dataset.pool = `${ky}x${kx}`;
    drawColorbar(this.colorbar, scale, { width: Math.min(320, Math.max(200, width / 3)) });
    this.nonfiniteKey.hidden = !(frame.nonfinite > 0);
    this.legend.hidden = false;
    this.drawDead();
  }

  /**
   * Outlines dead units of the shown frame (null: no health data at its step).
   * @param {number[]|null} units
   * @param {boolean} lastDim  Units on the last dimension (linear layers), else dimension 1.
   */
  setDeadUnits(units, lastDim) {
    this.dead = units ? { units, lastDim, frame: this.frame } : null;
    this.drawDead();
  }

  drawDead() {
    const d = this.dead;
    const shown = Boolean(d && d.frame === this.frame && this.layout);
    if (shown) this.element.dataset.deadUnits = d.units.join(',');
    else delete this.element.dataset.deadUnits;
    const rects = shown ? deadRects(this.layout, this.frame.meta || {}, d.lastDim, new Set(d.units)) : [];
    this.overlay.hidden = rects.length === 0;
    if (rects.length) drawOutlines(this.overlay, this.layout, rects);
    this.overlay.dataset.outlined = rects.map((r) => r.unit).join(',');
  }

  /** Nothing at or before the requested step (or this run lacks the layer or kind). */
  showNotRecorded(requested, message) {
    this.clearPicture();
    this.element.classList.remove('xray-loading');
    this.element.classList.add('xray-missing');
    this.stepBadge.textContent = '';
    const first = this.steps.length ? this.steps[0] : null;
    this.note.textContent =
      message ||
      (first === null ? 'Nothing recorded for this kind.' : `Not recorded at or before step ${requested}; first recorded at step ${first}.`);
    this.note.hidden = false;
    this.setState('missing');
  }

  /** @param {string} message */
  showError(message) {
    this.clearPicture();
    this.element.classList.remove('xray-loading');
    this.error.textContent = message;
    this.error.hidden = false;
    this.setState('error');
  }

  clearPicture() {
    this.frame = null;
    this.shown = null;
    this.layout = null;
    this.info.textContent = '';
    this.wrap.hidden = true; // never leave an older step's picture under an error
    this.legend.hidden = true;
    this.setStep(null);
    this.drawDead();
  }

  setNote(requested, shown) {
    this.stepBadge.textContent = `step ${shown}`;
    const exact = shown === requested;
    this.note.hidden = exact;
    this.note.textContent = exact ? '' : `Not recorded at step ${requested}; showing the nearest earlier step, ${shown}.`;
  }

  /** The read-out and its hooks (``data-index``, ``data-value``) say nothing. */
  clearReadout() {
    this.readout.textContent = '';
    delete this.readout.dataset.index;
    delete this.readout.dataset.value;
  }

  /** @param {MouseEvent} event */
  hover(event) {
    if (!this.layout || !this.frame) return;
    const rect = this.canvas.getBoundingClientRect();
    const sx = this.layout.width / (rect.width || 1);
    const sy = this.layout.height / (rect.height || 1);
    const hit = hitTest(this.layout, (event.clientX - rect.left) * sx, (event.clientY - rect.top) * sy);
    if (!hit) {
      this.clearReadout();
      return;
    }
    const shown = /** @type {any} */ (hit.panel);
    const label = shown.index !== null && shown.index !== undefined ? `#${shown.index} ` : '';
    const ky = shown.ky || 1;
    const kx = shown.kx || 1;
    let where;
    let tensor = '';
    delete this.readout.dataset.index;
    if (ky > 1 || kx > 1) {
      const rows = span(hit.row * ky, Math.min(shown.srcRows, (hit.row + 1) * ky) - 1);
      const cols = span(hit.col * kx, Math.min(shown.srcCols, (hit.col + 1) * kx) - 1);
      where = `max-abs of [${rows}, ${cols}]`;
    } else {
      where = this.tileWidth
        ? `in ${Math.floor(hit.col / this.tileWidth)} [${hit.row}, ${hit.col % this.tileWidth}]`
        : `[${hit.row}, ${hit.col}]`;
      const position = this.layout.cells.findIndex((cell) => cell.panel === hit.panel);
      const index = originalIndex(this.frame.meta || {}, Math.max(0, position), hit.row, hit.col);
      if (index) {
        tensor = `tensor[${index.join(', ')}] · `;
        this.readout.dataset.index = index.join(',');
      }
    }
    this.readout.dataset.value = String(hit.value);
    this.readout.textContent = `${tensor}${label}${where} = ${formatValue(hit.value)}`;
  }

  exportPng() {
    if (!this.frame) return;
    savePng(this.canvas, `${this.run}_${this.layer}_${this.kind}_step${this.frame.step}.png`);
  }
}

function span(first, last) {
  return last > first ? `${first}–${last}` : String(first);
}

function swatch(rgb) {
  const s = el('span', 'xray-swatch');
  s.style.background = cssColor(rgb);
  return s;
}
