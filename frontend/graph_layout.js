// Main-thread side of the layout worker (layout_worker.js): one module Worker loaded from the
// plugin's own static route (TensorBoard's CSP allows no blob: workers), one promise per request.

/**
 * @typedef {Object} Box
 * @property {number} x
 * @property {number} y
 * @property {number} width
 * @property {number} height
 * @property {boolean} expanded  An expanded group (its children are boxes of their own).
 */

/**
 * @typedef {Object} GraphLayout
 * @property {Record<string, Box>} boxes  By key (node id or "group:<name>").
 * @property {{src: string, dst: string, points: {x: number, y: number}[]}[]} edges  dagre's routes
 *   between siblings, absolute.
 * @property {number} width
 * @property {number} height
 */

export class LayoutClient {
  constructor() {
    this.worker = new Worker(new URL('./layout_worker.js', import.meta.url), { type: 'module' });
    /** @type {Map<number, {resolve: Function, reject: Function}>} */
    this.pending = new Map();
    this.nextId = 1;
    /** @type {WeakMap<object, string>} */
    this.graphIds = new WeakMap();
    this.worker.onmessage = (event) => {
      const { id, layout, error, ms } = event.data || {};
      const waiter = this.pending.get(id);
      if (!waiter) return;
      this.pending.delete(id);
      if (error) waiter.reject(new Error(`graph layout failed: ${error}`));
      else waiter.resolve({ layout, ms });
    };
    this.worker.onerror = (event) => {
      const error = new Error(`graph layout worker failed: ${event.message || 'could not load'}`);
      for (const waiter of this.pending.values()) waiter.reject(error);
      this.pending.clear();
    };
  }

  /**
   * Lays out an architecture with the given groups expanded.
   * @param {object} arch  The architecture record (sent to the worker once).
   * @param {Iterable<string>} expanded
   * @returns {Promise<{layout: GraphLayout, ms: number}>}  ms: time spent in the worker.
   */
  layout(arch, expanded) {
    let graphId = this.graphIds.get(arch);
    if (!graphId) {
      graphId = `g${this.nextId++}`;
      this.graphIds.set(arch, graphId);
      this.worker.postMessage({ type: 'graph', graphId, arch });
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      this.pending.set(id, { resolve, reject });
      this.worker.postMessage({ type: 'layout', id, graphId, expanded: [...expanded] });
    });
  }
}
