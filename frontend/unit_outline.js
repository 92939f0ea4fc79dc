// Where a layer's units lie on a drawn heatmap, to outline dead ones. Units are the activation's
// dimension 1 (a conv's channels), or its last dimension for linear layers and LayerNorm (as
// xray_tb/health/scope.py counts them). A frame's panels map to the original tensor through
// tensor_index.js: for a conv output each panel is a channel, for a linear output the units are the
// columns of one panel.

import { originalIndex } from './tensor_index.js';
import { backingScale } from './heatmap_layout.js';
import { sizeCanvas } from './dom.js';

/** @param {string|null|undefined} type  The layer's module type. */
export function unitsOnLastDim(type) {
  return /^(Linear|LazyLinear|Bilinear|LayerNorm)$/.test(type || '');
}

/**
 * Rectangles (CSS pixels of the heatmap canvas) of the drawn cells that show a dead unit.
 * @param {import('./heatmap_layout.js').Layout} layout
 * @param {any} meta  The frame's meta (original_shape, dim, indices, batch_index).
 * @param {boolean} lastDim
 * @param {Set<number>} dead
 * @returns {{x: number, y: number, w: number, h: number, unit: number}[]}
 */
export function deadRects(layout, meta, lastDim, dead) {
  const rank = Array.isArray(meta.original_shape) ? meta.original_shape.length : 0;
  if (!rank || !dead.size) return [];
  const axis = lastDim ? rank - 1 : Math.min(1, rank - 1);
  const rects = [];
  layout.cells.forEach(({ panel, x, y }, p) => {
    const shown = /** @type {any} */ (panel);
    const rows = shown.srcRows || panel.rows;
    const cols = shown.srcCols || panel.cols;
    const kx = shown.kx || 1;
    const ky = shown.ky || 1;
    const unit = (r, c) => {
      const index = originalIndex(meta, p, r, c);
      return index ? index[axis] : undefined;
    };
    const u0 = unit(0, 0);
    const w = panel.cols * layout.sx;
    const h = panel.rows * layout.sy;
    const byCol = cols > 1 && unit(0, 1) !== u0;
    const byRow = rows > 1 && unit(1, 0) !== u0;
    if (!byCol && !byRow) {
      if (dead.has(u0)) rects.push({ x, y, w, h, unit: u0 });
    } else if (byCol) {
      let last = -1;
      for (let c = 0; c < cols; c++) {
        const u = unit(0, c);
        const sc = Math.floor(c / kx);
        if (sc !== last && dead.has(u)) {
          rects.push({ x: x + sc * layout.sx, y, w: layout.sx, h, unit: u });
          last = sc;
        }
      }
    } else {
      let last = -1;
      for (let r = 0; r < rows; r++) {
        const u = unit(r, 0);
        const sr = Math.floor(r / ky);
        if (sr !== last && dead.has(u)) {
          rects.push({ x, y: y + sr * layout.sy, w, h: layout.sy, unit: u });
          last = sr;
        }
      }
    }
  });
  return rects;
}

/**
 * Draws the outlines on an overlay canvas the size of the heatmap.
 * @param {HTMLCanvasElement} canvas
 * @param {{width: number, height: number}} layout
 * @param {{x: number, y: number, w: number, h: number}[]} rects
 */
export function drawOutlines(canvas, layout, rects) {
  const ctx = sizeCanvas(canvas, layout.width, layout.height, backingScale(layout.width, layout.height, window.devicePixelRatio || 1));
  ctx.strokeStyle = '#00e5ff';
  ctx.lineWidth = 2;
  ctx.setLineDash([4, 2]);
  for (const r of rects) ctx.strokeRect(r.x + 1, r.y + 1, Math.max(1, r.w - 2), Math.max(1, r.h - 2));
}
