// Draws a horizontal colour bar with tick labels (min / 0 / max for diverging scales, min / mid /
// max for sequential ones) onto a canvas.

import { formatValue } from './format.js';
import { unitOf, LUT_SIZE } from './colormap.js';
import { sizeCanvas } from './dom.js';

/** @typedef {import('./colormap.js').Scale} Scale */

const BAR_HEIGHT = 12;
const TICK = 4;
const FONT = '11px Roboto, "Helvetica Neue", Arial, sans-serif';
const PAD = 28; // room for the end labels, which are centred on the bar ends

/**
 * Tick values of a scale.
 * @param {Scale} scale
 * @returns {number[]}
 */
export function colorbarTicks(scale) {
  if (scale.kind === 'empty') return [];
  if (scale.kind === 'diverging') return [scale.lo, 0, scale.hi];
  if (scale.hi === scale.lo) return [scale.lo];
  return [scale.lo, (scale.lo + scale.hi) / 2, scale.hi];
}

/**
 * Draws the colour bar.
 * @param {HTMLCanvasElement} canvas
 * @param {Scale} scale
 * @param {{width?: number}} [options]  CSS width in pixels (default 280).
 */
export function drawColorbar(canvas, scale, options = {}) {
  const cssWidth = options.width ?? 280;
  const cssHeight = BAR_HEIGHT + TICK + 16;
  const ctx = sizeCanvas(canvas, cssWidth, cssHeight);

  const x0 = PAD;
  const barWidth = cssWidth - 2 * PAD;
  ctx.font = FONT;
  ctx.textBaseline = 'top';
  ctx.textAlign = 'center';

  if (scale.kind === 'empty') {
    ctx.fillStyle = '#ddd';
    ctx.fillRect(x0, 0, barWidth, BAR_HEIGHT);
    ctx.fillStyle = '#555';
    ctx.fillText('no finite values', x0 + barWidth / 2, BAR_HEIGHT + TICK);
    return;
  }

  const { lut } = scale;
  for (let x = 0; x < barWidth; x++) {
    const i = Math.round((x / Math.max(1, barWidth - 1)) * (LUT_SIZE - 1));
    ctx.fillStyle = `rgb(${lut[3 * i]}, ${lut[3 * i + 1]}, ${lut[3 * i + 2]})`;
    ctx.fillRect(x0 + x, 0, 1, BAR_HEIGHT);
  }
  ctx.strokeStyle = '#999';
  ctx.lineWidth = 1;
  ctx.strokeRect(x0 - 0.5, 0.5, barWidth + 1, BAR_HEIGHT - 1);

  ctx.fillStyle = '#333';
  ctx.strokeStyle = '#333';
  for (const v of colorbarTicks(scale)) {
    const x = Math.round(x0 + unitOf(scale, v) * (barWidth - 1)) + 0.5;
    ctx.beginPath();
    ctx.moveTo(x, BAR_HEIGHT);
    ctx.lineTo(x, BAR_HEIGHT + TICK);
    ctx.stroke();
    ctx.fillText(formatValue(v), x, BAR_HEIGHT + TICK + 1);
  }
}
