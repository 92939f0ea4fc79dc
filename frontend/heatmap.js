// Draws a frame's panels as a grid of heatmaps on one canvas, at the places heatmap_layout.js gives
// them (pooled when larger than the page, scaled up when small).

import { fillRgba } from './colormap.js';
import { sizeCanvas } from './dom.js';
import { backingScale, layoutPanels } from './heatmap_layout.js';

/** @typedef {import('./colormap.js').Scale} Scale */
/** @typedef {import('./heatmap_layout.js').Panel} Panel */
/** @typedef {import('./heatmap_layout.js').Layout} Layout */

const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';

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
