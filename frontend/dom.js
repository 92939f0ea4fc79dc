// Small DOM helpers shared by the views: elements (HTML and SVG) with a class and attributes,
// stylesheets loaded once, canvases sized for the screen.

const SVG_NS = 'http://www.w3.org/2000/svg';

/**
 * Creates an element with a class and optional text.
 * @param {string} tag
 * @param {string} [className]
 * @param {string} [text]
 * @returns {HTMLElement}
 */
export function el(tag, className, text) {
  const node = document.createElement(tag);
  if (className) node.className = className;
  if (text !== undefined) node.textContent = text;
  return node;
}

/**
 * Creates an SVG element with attributes.
 * @param {string} tag
 * @param {Record<string, string|number>} [attrs]
 * @returns {SVGElement}
 */
export function svg(tag, attrs = {}) {
  const node = document.createElementNS(SVG_NS, tag);
  for (const [k, v] of Object.entries(attrs)) node.setAttribute(k, String(v));
  return /** @type {SVGElement} */ (node);
}

/**
 * Adds a stylesheet to the page once (by its resolved URL); resolves when it applied or failed (at
 * most 3 s), so a caller can wait for it before measuring.
 * @param {string} path  Relative to `base`.
 * @param {string} base  The importing module's `import.meta.url`.
 * @returns {Promise<void>}
 */
export function loadStylesheet(path, base) {
  const href = new URL(path, base).href;
  if ([...document.querySelectorAll('link[rel=stylesheet]')].some((link) => link.href === href)) return Promise.resolve();
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = href;
  link.dataset.xrayStyle = path;
  return new Promise((resolve) => {
    const done = () => resolve();
    link.addEventListener('load', done);
    link.addEventListener('error', done);
    setTimeout(done, 3000);
    document.head.append(link);
  });
}

/**
 * Sizes a canvas to `cssWidth` × `cssHeight` CSS pixels with a backing store of `dpr` device pixels
 * per CSS pixel, and returns its 2-D context scaled to CSS pixels and cleared.
 * @param {HTMLCanvasElement} canvas
 * @param {number} cssWidth
 * @param {number} cssHeight
 * @param {number} [dpr]
 * @returns {CanvasRenderingContext2D}
 */
export function sizeCanvas(canvas, cssWidth, cssHeight, dpr = window.devicePixelRatio || 1) {
  canvas.width = Math.max(1, Math.floor(cssWidth * dpr));
  canvas.height = Math.max(1, Math.floor(cssHeight * dpr));
  canvas.style.width = `${cssWidth}px`;
  canvas.style.height = `${cssHeight}px`;
  const ctx = /** @type {CanvasRenderingContext2D} */ (canvas.getContext('2d'));
  ctx.setTransform(dpr, 0, 0, dpr, 0, 0);
  ctx.clearRect(0, 0, cssWidth, cssHeight);
  return ctx;
}
