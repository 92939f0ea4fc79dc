// One recorded kind of the chosen layer (weight, output, …): title, shape information, the heatmap
// canvas, its colour bar and a hover read-out. It shows what it is given; index.js fetches.

import { el } from './controls.js';
import { makeScale, cssColor, NAN_COLOR, INF_COLOR } from './colormap.js';
import { drawColorbar } from './colorbar.js';
import { drawHeatmap, hitTest, shownPanels, tileWidthOf } from './heatmap.js';
import { formatShape, formatValue } from './format.js';

/** @typedef {import('./api.js').Kind} Kind */
/** @typedef {import('./api.js').Frame} Frame */
/** @typedef {import('./heatmap.js').Panel} Panel */
/** @typedef {Frame & {decoded: Panel[]}} DecodedFrame */

/** @type {Record<Kind, string>} */
export const KIND_TITLES = {
  weight: 'Weight',
  weight_grad: 'Weight gradient',
  bias: 'Bias',
  bias_grad: 'Bias gradient',
  output: 'Output',
  activation: 'Activation',
  grad: 'Output gradient',
};

/** @type {Record<Kind, string>} */
const KIND_HINTS = {
  weight: 'the layer’s weight tensor',
  weight_grad: 'gradient of the loss with respect to the weight',
  bias: 'the layer’s bias vector',
  bias_grad: 'gradient of the loss with respect to the bias',
  output: 'what the layer returns for one sample of the batch',
  activation: 'the activation recorded for one sample of the batch',
  grad: 'gradient of the loss with respect to the layer’s output, for one sample',
};

/**
 * The recorded step to show for a requested step: the requested one or the nearest earlier one.
 * @param {number[]} steps  Sorted steps recorded for the kind.
 * @param {number} requested
 * @returns {number|null}  null when the kind has no step at or before `requested`.
 */
export function stepAtOrBefore(steps, requested) {
  let lo = 0;
  let hi = steps.length - 1;
  let found = null;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] <= requested) {
      found = steps[mid];
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

/**
 * How pooled panels are shown, for the info line: "" when drawn whole.
 * @param {number} ky  Source rows per shown row.
 * @param {number} kx  Source columns per shown column.
 * @returns {string}
 */
export function describePooling(ky, kx) {
  if (ky <= 1 && kx <= 1) return '';
  let ratio = `1:${ky} down rows × 1:${kx} across columns`;
  if (ky === kx) ratio = `1:${kx}`;
  else if (ky <= 1) ratio = `1:${kx} across columns`;
  else if (kx <= 1) ratio = `1:${ky} down rows`;
  return `shown at ${ratio} (max-abs pooled)`;
}

/**
 * "a" or "a–b" for the source indices [first, last] of a pooled cell.
 * @param {number} first
 * @param {number} last
 * @returns {string}
 */
function span(first, last) {
  return last > first ? `${first}–${last}` : String(first);
}

/**
 * The one-line description of a frame's tensor.
 * @param {Frame} frame
 * @returns {string}
 */
export function describeFrame(frame) {
  const meta = frame.meta || {};
  const parts = [`shape ${formatShape(meta.original_shape)}`];
  if (Array.isArray(meta.indices)) {
    const dim = typeof meta.dim === 'number' ? meta.dim : null;
    const total =
      dim !== null && Array.isArray(meta.original_shape) ? meta.original_shape[dim] : undefined;
    const of = total !== undefined ? ` of ${total}` : '';
    parts.push(`${meta.indices.length}${of} selected${dim !== null ? ` along dim ${dim}` : ''}`);
  }
  if (meta.batch_index !== null && meta.batch_index !== undefined) {
    parts.push(`sample ${meta.batch_index}`);
  }
  if (meta.dtype) parts.push(meta.dtype);
  parts.push(`range ${formatValue(frame.min)} … ${formatValue(frame.max)}`);
  parts.push(`${frame.nonfinite} non-finite`);
  return parts.join(' · ');
}

export class KindSection {
  /** @param {Kind} kind */
  constructor(kind) {
    this.kind = kind;
    /** @type {number[]} */
    this.steps = [];
    /** @type {DecodedFrame|null} */
    this.frame = null;
    /** @type {import('./heatmap.js').Layout|null} */
    this.layout = null;
    /** @type {number|null} Columns per tile of a tiled conv filter panel. */
    this.tileWidth = null;
    /**
     * Panels as drawn, for the frame and width they were pooled for.
     * @type {{frame: DecodedFrame, width: number, shown: import('./heatmap.js').Shown}|null}
     */
    this.shown = null;

    this.element = el('section', 'xray-kind');
    this.element.dataset.kind = kind;
    const head = el('div', 'xray-kind-head');
    this.title = el('h3', 'xray-kind-title', KIND_TITLES[kind] || kind);
    this.title.title = KIND_HINTS[kind] || '';
    this.stepBadge = el('span', 'xray-kind-step', '');
    head.append(this.title, this.stepBadge);
    this.info = el('div', 'xray-kind-info', '');
    this.note = el('div', 'xray-kind-note', '');
    this.note.hidden = true;
    this.error = el('div', 'xray-kind-error', '');
    this.error.hidden = true;
    this.wrap = el('div', 'xray-canvas-wrap');
    /** @type {HTMLCanvasElement} */
    this.canvas = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-heatmap'));
    this.canvas.dataset.kind = kind;
    this.canvas.dataset.state = 'empty';
    this.canvas.setAttribute('role', 'img');
    this.canvas.width = 0;
    this.canvas.height = 0;
    this.wrap.append(this.canvas);
    const legend = el('div', 'xray-legend');
    legend.hidden = true; // until a frame is drawn (an undrawn canvas would take 300×150 px)
    this.legend = legend;
    /** @type {HTMLCanvasElement} */
    this.colorbar = /** @type {HTMLCanvasElement} */ (el('canvas', 'xray-colorbar'));
    this.colorbar.dataset.kind = kind;
    this.nonfiniteKey = el('span', 'xray-nonfinite-key');
    this.nonfiniteKey.append(
      swatch(NAN_COLOR), el('span', '', 'NaN'), swatch(INF_COLOR), el('span', '', '±Inf'),
    );
    this.nonfiniteKey.hidden = true;
    this.readout = el('span', 'xray-readout xray-muted', '');
    legend.append(this.colorbar, this.nonfiniteKey, this.readout);
    this.element.append(head, this.info, this.note, this.error, this.wrap, legend);

    this.canvas.addEventListener('mousemove', (e) => this.hover(e));
    this.canvas.addEventListener('mouseleave', () => {
      this.readout.textContent = '';
    });
  }

  /** @param {number[]} steps  Sorted steps recorded for this kind. */
  setSteps(steps) {
    this.steps = steps;
  }

  /**
   * Marks the section as waiting for the frame of `shownStep` (the old picture stays, dimmed).
   * @param {number} requested
   * @param {number} shownStep
   */
  showLoading(requested, shownStep) {
    this.canvas.dataset.state = 'loading';
    this.element.classList.add('xray-loading');
    this.setNote(requested, shownStep);
  }

  /**
   * Draws a frame.
   * @param {DecodedFrame} frame
   * @param {number} requested  The step the scrubber is on.
   * @param {number} width      Available width in CSS pixels.
   */
  showFrame(frame, requested, width) {
    this.frame = frame;
    this.error.hidden = true;
    this.element.classList.remove('xray-loading', 'xray-missing');
    this.setNote(requested, frame.step);
    this.info.title = frame.meta && frame.meta.selector ? `selector: ${frame.meta.selector}` : '';
    this.wrap.hidden = false;
    this.draw(width);
    this.canvas.dataset.step = String(frame.step);
    this.canvas.dataset.state = 'ready';
    this.canvas.setAttribute(
      'aria-label',
      `${KIND_TITLES[this.kind] || this.kind} of ${frame.layer} at step ${frame.step}: ${this.info.textContent}`,
    );
  }

  /**
   * Redraws the current frame for a new width.
   * @param {number} width
   */
  draw(width) {
    const frame = this.frame;
    if (!frame) return;
    const scale = makeScale(frame);
    if (!this.shown || this.shown.frame !== frame || this.shown.width !== width) {
      this.shown = { frame, width, shown: shownPanels(frame.decoded, width) };
    }
    const { panels, ky, kx } = this.shown.shown;
    const tileWidth = tileWidthOf(frame.decoded, frame.meta && frame.meta.original_shape);
    this.tileWidth = kx === 1 && ky === 1 ? tileWidth : null; // tiles do not survive pooling
    this.layout = drawHeatmap(this.canvas, panels, scale, width, { tileWidth: this.tileWidth });
    const pooling = describePooling(ky, kx);
    this.info.textContent = [describeFrame(frame), pooling].filter(Boolean).join(' · ');
    this.canvas.dataset.pool = `${ky}x${kx}`;
    drawColorbar(this.colorbar, scale, { width: Math.min(320, Math.max(200, width / 3)) });
    this.nonfiniteKey.hidden = !(frame.nonfinite > 0);
    this.legend.hidden = false;
  }

  /**
   * The kind has nothing recorded at or before the requested step.
   * @param {number} requested
   */
  showNotRecorded(requested) {
    this.frame = null;
    this.shown = null;
    this.layout = null;
    this.error.hidden = true;
    this.element.classList.remove('xray-loading');
    this.element.classList.add('xray-missing');
    this.stepBadge.textContent = '';
    const first = this.steps.length ? this.steps[0] : null;
    this.note.textContent =
      first === null
        ? 'Nothing recorded for this kind.'
        : `Not recorded at or before step ${requested}; first recorded at step ${first}.`;
    this.note.hidden = false;
    this.info.textContent = '';
    this.wrap.hidden = true;
    this.canvas.dataset.state = 'missing';
    delete this.canvas.dataset.step;
    this.legend.hidden = true;
  }

  /**
   * The frame could not be loaded (the page-level banner shows the error too).
   * @param {string} message
   */
  showError(message) {
    this.frame = null;
    this.shown = null;
    this.layout = null;
    this.element.classList.remove('xray-loading');
    this.error.textContent = message;
    this.error.hidden = false;
    this.info.textContent = '';
    this.wrap.hidden = true; // never leave an older step's picture under an error
    this.legend.hidden = true;
    this.canvas.dataset.state = 'error';
    delete this.canvas.dataset.step;
  }

  /**
   * @param {number} requested
   * @param {number} shown
   */
  setNote(requested, shown) {
    this.stepBadge.textContent = `step ${shown}`;
    if (shown === requested) {
      this.note.hidden = true;
      this.note.textContent = '';
    } else {
      this.note.textContent = `Not recorded at step ${requested}; showing the nearest earlier step, ${shown}.`;
      this.note.hidden = false;
    }
  }

  /** @param {MouseEvent} event */
  hover(event) {
    if (!this.layout) return;
    const rect = this.canvas.getBoundingClientRect();
    const sx = this.layout.width / (rect.width || 1);
    const sy = this.layout.height / (rect.height || 1);
    const hit = hitTest(this.layout, (event.clientX - rect.left) * sx, (event.clientY - rect.top) * sy);
    if (!hit) {
      this.readout.textContent = '';
      return;
    }
    const shown = /** @type {import('./heatmap.js').ShownPanel} */ (hit.panel);
    const panel = shown.index !== null && shown.index !== undefined ? `#${shown.index} ` : '';
    const ky = shown.ky || 1;
    const kx = shown.kx || 1;
    let where;
    if (ky > 1 || kx > 1) {
      const rows = span(hit.row * ky, Math.min(shown.srcRows, (hit.row + 1) * ky) - 1);
      const cols = span(hit.col * kx, Math.min(shown.srcCols, (hit.col + 1) * kx) - 1);
      where = `max-abs of [${rows}, ${cols}]`;
    } else if (this.tileWidth) {
      where = `in ${Math.floor(hit.col / this.tileWidth)} [${hit.row}, ${hit.col % this.tileWidth}]`;
    } else {
      where = `[${hit.row}, ${hit.col}]`;
    }
    this.readout.textContent = `${panel}${where} = ${formatValue(hit.value)}`;
  }
}

/**
 * A small coloured square for the non-finite legend.
 * @param {import('./colormap.js').RGB} rgb
 * @returns {HTMLElement}
 */
function swatch(rgb) {
  const s = el('span', 'xray-swatch');
  s.style.background = cssColor(rgb);
  return s;
}
