// Where a frame's panels go on the heatmap canvas, without drawing: panels larger than the page (an
// LM head output [64, 50257]) pooled down, the grid of panels scaled up with nearest-neighbour
// sampling so that small (5×5, 8×8) panels stay visible, the canvas's backing scale, and hit tests.
// Pure: no DOM. heatmap.js draws what this lays out.

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
