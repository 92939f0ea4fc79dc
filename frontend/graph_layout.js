// Main-thread side of the layout worker (layout_worker.js): one module Worker loaded from the
// plugin's own static route (TensorBoard's CSP allows no blob: workers), one promise per request.
// A worker that fails (it could not load, it threw outside a request) or takes longer than
// LAYOUT_TIMEOUT_MS rejects what it has pending and is replaced by a fresh one at the next request;
// the view then lays out without it (graph_view.js).

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
 * @property {string[]} fallbacks  Containers ("" the top) laid out as a plain grid because dagre
 *   failed on them.
 */

/** A request not answered in this time gives the worker up. */
export const LAYOUT_TIMEOUT_MS = 30_000;

export class LayoutClient {
  constructor() {
    /** @type {Worker|null} */
    this.worker = null;
    /** @type {Map<number, {resolve: Function, reject: Function, timer: any}>} */
    this.pending = new Map();
    this.nextId = 1;
    /** @type {WeakMap<object, string>} */
    this.graphIds = new WeakMap();
  }

  /** @returns {Worker} */
  start() {
    if (this.worker) return this.worker;
    const worker = new Worker(new URL('./layout_worker.js', import.meta.url), { type: 'module' });
    this.graphIds = new WeakMap(); // a fresh worker knows no architecture yet
    worker.onmessage = (event) => {
      const { id, layout, error, ms } = event.data || {};
      const waiter = this.pending.get(id);
      if (!waiter) return;
      this.pending.delete(id);
      clearTimeout(waiter.timer);
      if (error) waiter.reject(new Error(`graph layout failed: ${error}`));
      else waiter.resolve({ layout: { fallbacks: [], ...layout }, ms });
    };
    worker.onerror = (event) => {
      event.preventDefault();
      this.fail(new Error(`graph layout worker failed: ${event.message || 'could not load'}`));
    };
    this.worker = worker;
    return worker;
  }

  /** Gives the worker up and rejects every pending request. @param {Error} error */
  fail(error) {
    if (this.worker) this.worker.terminate();
    this.worker = null;
    for (const waiter of this.pending.values()) {
      clearTimeout(waiter.timer);
      waiter.reject(error);
    }
    this.pending.clear();
  }

  /**
   * Lays out an architecture with the given groups expanded.
   * @param {object} arch  The architecture record (sent to the worker once).
   * @param {Iterable<string>} expanded
   * @returns {Promise<{layout: GraphLayout, ms: number}>}  ms: time spent in the worker.
   */
  layout(arch, expanded) {
    const worker = this.start();
    let graphId = this.graphIds.get(arch);
    if (!graphId) {
      graphId = `g${this.nextId++}`;
      this.graphIds.set(arch, graphId);
      worker.postMessage({ type: 'graph', graphId, arch });
    }
    const id = this.nextId++;
    return new Promise((resolve, reject) => {
      const timer = setTimeout(() => {
        if (this.pending.has(id)) this.fail(new Error(`graph layout took more than ${LAYOUT_TIMEOUT_MS / 1000} s`));
      }, LAYOUT_TIMEOUT_MS);
      this.pending.set(id, { resolve, reject, timer });
      worker.postMessage({ type: 'layout', id, graphId, expanded: [...expanded] });
    });
  }
}
