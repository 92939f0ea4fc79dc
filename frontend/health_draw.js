// Drawing of the health matrix (health_view.js): one canvas per run, drawn through an ImageData at
// device resolution on a shared step axis, in the colours of health_scale.js.


/** @typedef {import('./health_api.js').HealthMatrix} HealthMatrix */

/** @typedef {import('./health_scale.js').HealthScale} HealthScale */

/**
 * For each device pixel of a canvas `width` pixels wide on the step axis [x0, x1), the column of
 * the matrix that covers it (-1: none). A column covers its first step up to the next column's.
 * @param {HealthMatrix} m
 * @param {number} width
 * @param {number} x0
 * @param {number} x1
 * @returns {Int32Array}
 */
export function pixelColumns(m, width, x0, x1) {
  const out = new Int32Array(width).fill(-1);
  const n = m.steps.length;
  if (!n || !(x1 > x0)) return out;
  const end = m.lastSteps[n - 1] + 1;
  let j = 0;
  for (let px = 0; px < width; px++) {
    const s = x0 + ((px + 0.5) / width) * (x1 - x0);
    if (s < m.steps[0] || s >= end) continue;
    while (j + 1 < n && m.steps[j + 1] <= s) j++;
    out[px] = j;
  }
  return out;
}

/**
 * Draws a matrix into its canvas (CSS size `cssWidth` × rows·rowHeight).
 * @param {HTMLCanvasElement} canvas
 * @param {HealthMatrix} m
 * @param {HealthScale} scale
 * @param {{cssWidth: number, rowHeight: number, x0: number, x1: number}} geometry
 * @returns {Int32Array} The column under each device pixel.
 */
export function drawMatrix(canvas, m, scale, { cssWidth, rowHeight, x0, x1 }) {
  const dpr = window.devicePixelRatio || 1;
  const rows = m.layers.length;
  const width = Math.max(1, Math.round(cssWidth * dpr));
  const rowPx = Math.max(1, Math.round(rowHeight * dpr));
  const height = Math.max(1, rows * rowPx);
  canvas.width = width;
  canvas.height = height;
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${(rows * rowPx) / dpr}px`;
  const columns = pixelColumns(m, width, x0, x1);
  const ctx = canvas.getContext('2d');
  const image = ctx.createImageData(width, height);
  const data = new Uint32Array(image.data.buffer);
  const line = new Uint32Array(width);
  const cols = m.steps.length;
  const gap = rowPx >= 6 ? 1 : 0;
  for (let r = 0; r < rows; r++) {
    const base = r * cols;
    let last = -2;
    let color = 0;
    for (let px = 0; px < width; px++) {
      const j = columns[px];
      if (j !== last) {
        last = j;
        color = j < 0 ? 0 : scale.packed(m.values[base + j], m.present[base + j]);
      }
      line[px] = color;
    }
    for (let y = 0; y < rowPx - gap; y++) data.set(line, (r * rowPx + y) * width);
  }
  ctx.putImageData(image, 0, 0);
  return columns;
}
