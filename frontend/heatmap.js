// Decodes a frame's panels and draws them as a grid of heatmaps on one canvas, each panel scaled up
// with nearest-neighbour sampling so that small (5×5, 8×8) panels stay visible, and panels larger
// than the page (an LM head output [64, 50257]) pooled down so that the canvas stays drawable.

import { fillRgba } from './colormap.js';
import { sizeCanvas } from './dom.js';

/** @typedef {import('./colormap.js').Scale} Scale */

/**
 * A panel as the server sends it.
 * @typedef {Object} RawPanel
 * @property {number|null} index  Position along the selection dimension (null for a single panel).
 * @property {number} rows
 * @property {number} cols
 * @property {string} data  base64 of rows*cols little-endian float32.
 */

/**
 * A decoded panel.
 * @typedef {Object} Panel
 * @property {number|null} index
 * @property {number} rows
 * @property {number} cols
 * @property {Float32Array} values  Row-major, rows*cols values.
 */

/**
 * A panel as drawn: a decoded panel, or one pooled down by `ky` rows × `kx` columns from a source
 * panel of `srcRows` × `srcCols` (max-abs pooling; see poolPanel).
 * @typedef {Panel & {ky: number, kx: number, srcRows: number, srcCols: number}} ShownPanel
 */

/**
 * Where the panels landed on the canvas, in CSS pixels.
 * @typedef {Object} Layout
 * @property {number} width
 * @property {number} height
 * @property {number} sx       Horizontal pixels per value.
 * @property {number} sy       Vertical pixels per value.
 * @property {number} labelHeight
 * @property {{panel: Panel, x: number, y: number}[]} cells  Top-left of each panel's image.
 */

/**
 * Panels ready to lay out: pooled by `ky` × `kx` when the largest one would not fit.
 * @typedef {Object} Shown
 * @property {ShownPanel[]} panels
 * @property {number} ky  Source rows per shown row.
 * @property {number} kx  Source columns per shown column.
 */

/** Smallest side of a drawn panel, in CSS pixels, when the cap below allows it. */
export const MIN_PANEL_SIDE = 48;
/** Larger sides tried, largest first, when the panels still fit in as few rows (or two). */
const PREFERRED_SIDES = [128, 112, 96, 80, 64];
/** Largest side a panel is scaled up to (a larger one is drawn 1:1, or pooled: see shownPanels). */
const MAX_PANEL_SIDE = 480;
/** A very thin panel (a vector) is stretched across its short side to at least this. */
const MIN_THIN_SIDE = 28;
/** Longest side, in CSS pixels, a panel is shown at before it is pooled (whatever the page width). */
export const MAX_SHOWN_SIDE = 4096;
/** Tallest a panel is shown before it is pooled, unless the page is wider. */
const MIN_ROW_CAP = 512;
/** Chromium's limits for a canvas backing store: per side and in area. */
const MAX_CANVAS_SIDE = 32767;
const MAX_CANVAS_AREA = 268435456;
const GAP = 8;
const LABEL_HEIGHT = 15;
const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';

const LITTLE_ENDIAN_HOST = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

/**
 * Decodes base64 little-endian float32 data.
 * @param {string} base64
 * @returns {Float32Array}
 */
export function decodeFloat32(base64) {
  const bin = atob(base64);
  if (bin.length % 4 !== 0) {
    throw new Error(`Panel data has ${bin.length} bytes, not a multiple of 4`);
  }
  const bytes = new Uint8Array(bin.length);
  for (let i = 0; i < bin.length; i++) bytes[i] = bin.charCodeAt(i);
  if (LITTLE_ENDIAN_HOST) return new Float32Array(bytes.buffer);
  const view = new DataView(bytes.buffer);
  const out = new Float32Array(bin.length / 4);
  for (let i = 0; i < out.length; i++) out[i] = view.getFloat32(4 * i, true);
  return out;
}

/**
 * Decodes the panels of a frame and checks their sizes.
 * @param {RawPanel[]} rawPanels
 * @returns {Panel[]}
 */
export function decodePanels(rawPanels) {
  return rawPanels.map((p) => {
    const values = decodeFloat32(p.data);
    if (values.length !== p.rows * p.cols) {
      throw new Error(
        `Panel ${p.index ?? ''} should hold ${p.rows}×${p.cols} values, got ${values.length}`,
      );
    }
    return { index: p.index, rows: p.rows, cols: p.cols, values };
  });
}

/**
 * Pools a panel by blocks of `ky` rows × `kx` columns, keeping in each block the value of largest
 * magnitude with its sign (so that outliers stay visible); a block with a NaN shows NaN, and ±Inf
 * wins over finite values. The last block of a row or column may be smaller.
 * @param {Panel} panel
 * @param {number} ky
 * @param {number} kx
 * @returns {ShownPanel}
 */
export function poolPanel(panel, ky, kx) {
  const { rows, cols, values } = panel;
  if (ky <= 1 && kx <= 1) {
    return { ...panel, ky: 1, kx: 1, srcRows: rows, srcCols: cols };
  }
  const outRows = Math.ceil(rows / ky);
  const outCols = Math.ceil(cols / kx);
  const out = new Float32Array(outRows * outCols);
  const best = new Float64Array(outCols); // |value| kept per shown column of the row; -1: none yet
  for (let orow = 0; orow < outRows; orow++) {
    const base = orow * outCols;
    best.fill(-1);
    const r1 = Math.min(rows, (orow + 1) * ky);
    for (let r = orow * ky; r < r1; r++) {
      const offset = r * cols;
      for (let c = 0, ocol = 0, next = kx; c < cols; c++) {
        if (c === next) {
          ocol++;
          next += kx;
        }
        const v = values[offset + c];
        if (v !== v) {
          best[ocol] = NaN; // no later comparison with NaN succeeds: the block stays NaN
          out[base + ocol] = NaN;
          continue;
        }
        const a = v < 0 ? -v : v;
        if (a > best[ocol]) {
          best[ocol] = a;
          out[base + ocol] = v;
        }
      }
    }
  }
  return { index: panel.index, rows: outRows, cols: outCols, values: out, ky, kx, srcRows: rows, srcCols: cols };
}

/**
 * Pools `panels` (all by the same factors) so that the largest fits `availableWidth` across and
 * max(availableWidth, MIN_ROW_CAP) down, both at most MAX_SHOWN_SIDE.
 * @param {Panel[]} panels
 * @param {number} availableWidth  CSS pixels.
 * @returns {Shown}
 */
export function shownPanels(panels, availableWidth) {
  const maxRows = Math.max(1, ...panels.map((p) => p.rows));
  const maxCols = Math.max(1, ...panels.map((p) => p.cols));
  const colCap = Math.max(16, Math.min(MAX_SHOWN_SIDE, Math.floor(availableWidth)));
  const rowCap = Math.min(MAX_SHOWN_SIDE, Math.max(colCap, MIN_ROW_CAP));
  const kx = Math.max(1, Math.ceil(maxCols / colCap));
  const ky = Math.max(1, Math.ceil(maxRows / rowCap));
  return { panels: panels.map((p) => poolPanel(p, ky, kx)), ky, kx };
}

/**
 * Pixels per value along each axis for panels of at most `rows` × `cols` values: an integer
 * (nearest-neighbour) factor that brings the short side to `target` pixels unless the long side
 * would pass MAX_PANEL_SIDE.
 * @param {number} rows
 * @param {number} cols
 * @param {number} [target]  Wanted short side in CSS pixels.
 * @returns {{sx: number, sy: number}}
 */
export function panelScale(rows, cols, target = MIN_PANEL_SIDE) {
  const shortSide = Math.max(1, Math.min(rows, cols));
  const longSide = Math.max(1, rows, cols);
  const s = Math.max(
    1,
    Math.min(Math.ceil(target / shortSide), Math.floor(MAX_PANEL_SIDE / longSide)),
  );
  let sx = s;
  let sy = s;
  if (rows * sy < MIN_THIN_SIDE) sy = Math.ceil(MIN_THIN_SIDE / Math.max(1, rows));
  if (cols * sx < MIN_THIN_SIDE) sx = Math.ceil(MIN_THIN_SIDE / Math.max(1, cols));
  return { sx, sy };
}

/**
 * Places panels on a grid that fits `availableWidth`. Panels are drawn as large as possible (up to
 * PREFERRED_SIDES[0]) as long as that needs no more grid rows than the minimum size does, or two.
 * @param {Panel[]} panels
 * @param {number} availableWidth  CSS pixels.
 * @returns {Layout}
 */
export function layoutPanels(panels, availableWidth) {
  const maxRows = Math.max(1, ...panels.map((p) => p.rows));
  const maxCols = Math.max(1, ...panels.map((p) => p.cols));
  const labelHeight = panels.some((p) => p.index !== null && p.index !== undefined)
    ? LABEL_HEIGHT
    : 0;
  const fit = (target) => {
    const { sx, sy } = panelScale(maxRows, maxCols, target);
    const cellW = maxCols * sx;
    const perRow = Math.max(
      1,
      Math.min(panels.length, Math.floor((availableWidth + GAP) / (cellW + GAP))),
    );
    return { sx, sy, cellW, perRow, gridRows: Math.ceil(panels.length / perRow) };
  };
  let chosen = fit(MIN_PANEL_SIDE);
  const allowedRows = Math.max(chosen.gridRows, 2);
  const sides = panels.length === 1 ? [320, 256, 192, ...PREFERRED_SIDES] : PREFERRED_SIDES;
  for (const target of sides) {
    const candidate = fit(target);
    if (candidate.gridRows <= allowedRows) {
      chosen = candidate;
      break;
    }
  }
  const { sx, sy, cellW, perRow, gridRows } = chosen;
  const cellH = maxRows * sy + labelHeight;
  const cells = panels.map((panel, i) => ({
    panel,
    x: (i % perRow) * (cellW + GAP),
    y: Math.floor(i / perRow) * (cellH + GAP) + labelHeight,
  }));
  return {
    width: Math.max(1, Math.min(panels.length, perRow) * (cellW + GAP) - GAP),
    height: Math.max(1, gridRows * (cellH + GAP) - GAP),
    sx,
    sy,
    labelHeight,
    cells,
  };
}

/**
 * Width of the sub-blocks of a tiled panel: a filter [C_in, kh, kw] arrives tiled into
 * kh × (C_in·kw), so its panels are split every kw columns. null when panels are not tiled.
 * @param {Panel[]} panels
 * @param {number[]|undefined} originalShape
 * @returns {number|null}
 */
export function tileWidthOf(panels, originalShape) {
  if (!Array.isArray(originalShape) || originalShape.length < 4 || panels.length === 0) return null;
  const w = originalShape[originalShape.length - 1];
  const cols = panels[0].cols;
  return w > 0 && cols > w && cols % w === 0 ? w : null;
}

/**
 * Device pixels per CSS pixel for a canvas of `width` × `height` CSS pixels: the device pixel ratio,
 * lowered where the backing store would pass the browser's limits (which leave a canvas blank).
 * @param {number} width
 * @param {number} height
 * @param {number} dpr
 * @returns {number}
 */
export function backingScale(width, height, dpr) {
  const w = Math.max(1, width);
  const h = Math.max(1, height);
  return Math.min(dpr, MAX_CANVAS_SIDE / w, MAX_CANVAS_SIDE / h, Math.sqrt(MAX_CANVAS_AREA / (w * h)));
}

/**
 * Draws the panels on `canvas` (resizing it) and returns the layout for hit tests.
 * @param {HTMLCanvasElement} canvas
 * @param {Panel[]} panels
 * @param {Scale} scale
 * @param {number} availableWidth  CSS pixels.
 * @param {{tileWidth?: number|null}} [options]  tileWidth: draw a separator every that many columns.
 * @returns {Layout}
 */
export function drawHeatmap(canvas, panels, scale, availableWidth, options = {}) {
  const tileWidth = options.tileWidth || null;
  const layout = layoutPanels(panels, availableWidth);
  const ctx = sizeCanvas(canvas, layout.width, layout.height, backingScale(layout.width, layout.height, window.devicePixelRatio || 1));
  ctx.imageSmoothingEnabled = false;
  ctx.font = FONT;
  ctx.textBaseline = 'bottom';
  ctx.textAlign = 'left';

  const scratch = document.createElement('canvas');
  const sctx = scratch.getContext('2d');
  for (const { panel, x, y } of layout.cells) {
    if (panel.rows === 0 || panel.cols === 0) continue;
    scratch.width = panel.cols;
    scratch.height = panel.rows;
    const image = sctx.createImageData(panel.cols, panel.rows);
    fillRgba(panel.values, scale, image.data);
    sctx.putImageData(image, 0, 0);
    const w = panel.cols * layout.sx;
    const h = panel.rows * layout.sy;
    ctx.drawImage(scratch, 0, 0, panel.cols, panel.rows, x, y, w, h);
    if (tileWidth && panel.cols > tileWidth) {
      ctx.fillStyle = 'rgba(255, 255, 255, 0.9)';
      for (let c = tileWidth; c < panel.cols; c += tileWidth) {
        ctx.fillRect(x + c * layout.sx - 1, y, 2, h);
      }
    }
    ctx.strokeStyle = 'rgba(0, 0, 0, 0.25)';
    ctx.lineWidth = 1;
    ctx.strokeRect(x + 0.5, y + 0.5, w - 1, h - 1);
    if (layout.labelHeight && panel.index !== null && panel.index !== undefined) {
      ctx.fillStyle = '#555';
      ctx.fillText(`#${panel.index}`, x, y - 2);
    }
  }
  return layout;
}

/**
 * The value under a point of the canvas (CSS pixels from its top-left), or null.
 * @param {Layout} layout
 * @param {number} px
 * @param {number} py
 * @returns {{panel: Panel, row: number, col: number, value: number}|null}
 */
export function hitTest(layout, px, py) {
  for (const { panel, x, y } of layout.cells) {
    const col = Math.floor((px - x) / layout.sx);
    const row = Math.floor((py - y) / layout.sy);
    if (col >= 0 && col < panel.cols && row >= 0 && row < panel.rows) {
      return { panel, row, col, value: panel.values[row * panel.cols + col] };
    }
  }
  return null;
}
