// Pan (drag) and zoom (wheel, around the pointer) of an SVG viewport group; fit and centre.

const MIN_ZOOM = 0.05;
const MAX_ZOOM = 3;

export class PanZoom {
  /**
   * @param {SVGSVGElement|SVGElement} svgElement  Receives the pointer and wheel events.
   * @param {SVGElement} viewport  The group that is transformed.
   * @param {HTMLElement} container  Gives the visible size.
   */
  constructor(svgElement, viewport, container) {
    this.svg = svgElement;
    this.viewport = viewport;
    this.container = container;
    this.view = { x: 20, y: 20, k: 1 };
    /** True while (and just after) a drag, so that the click that ends it opens nothing. */
    this.dragged = false;
    this.bind();
  }

  size() {
    return { w: this.container.clientWidth || 800, h: this.container.clientHeight || 600 };
  }

  /** Scales `width` × `height` to fit (at most 1.2×), centred horizontally, from the top. */
  fit(width, height) {
    const { w, h } = this.size();
    const k = Math.min(1.2, Math.max(MIN_ZOOM, Math.min((w - 40) / (width || 1), (h - 40) / (height || 1))));
    this.set({ k, x: (w - width * k) / 2, y: 20 });
  }

  /** Puts the point (x, y) of the graph at the centre, at zoom 0.8 or more. */
  centre(x, y) {
    const { w, h } = this.size();
    const k = Math.max(this.view.k, 0.8);
    this.set({ k, x: w / 2 - x * k, y: h / 2 - y * k });
  }

  set(view) {
    this.view = view;
    this.viewport.setAttribute('transform', `translate(${view.x},${view.y}) scale(${view.k})`);
  }

  bind() {
    let start = null;
    this.svg.addEventListener('pointerdown', (e) => {
      this.dragged = false;
      start = { x: e.clientX, y: e.clientY, vx: this.view.x, vy: this.view.y };
    });
    window.addEventListener('pointermove', (e) => {
      if (!start) return;
      const dx = e.clientX - start.x;
      const dy = e.clientY - start.y;
      if (Math.abs(dx) + Math.abs(dy) > 3) this.dragged = true;
      if (this.dragged) this.set({ ...this.view, x: start.vx + dx, y: start.vy + dy });
    });
    window.addEventListener('pointerup', () => {
      start = null;
      setTimeout(() => {
        this.dragged = false;
      }, 0);
    });
    this.svg.addEventListener(
      'wheel',
      (e) => {
        e.preventDefault();
        const rect = this.svg.getBoundingClientRect();
        const px = e.clientX - rect.left;
        const py = e.clientY - rect.top;
        const k = Math.min(MAX_ZOOM, Math.max(MIN_ZOOM, this.view.k * Math.exp(-e.deltaY * 0.0015)));
        const f = k / this.view.k;
        this.set({ k, x: px - (px - this.view.x) * f, y: py - (py - this.view.y) * f });
      },
      { passive: false },
    );
  }
}
