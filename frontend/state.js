// The one small state object every view reads: which runs, view, layer, kind and step are shown.
// Views change it through set(); listeners hear which keys changed (the URL state writes it back).

/**
 * @typedef {Object} XrayState
 * @property {string[]} runs     Runs that hold Xray data.
 * @property {string|null} run   The main run (its graph and its steps).
 * @property {string[]} compare  Other runs shown next to it.
 * @property {'graph'|'layer'|'health'|'bias'} view
 * @property {string|null} layer
 * @property {string|null} kind  Only this kind is shown (null: every kind).
 * @property {number|null} step
 * @property {'frame'|'fixed'} scale  Colour range per frame, or fixed over the timeline.
 * @property {string|null} stat  The health statistic of the matrix and of the graph's colours (null: graph uncoloured).
 */

/** @returns {XrayState} */
export function initialState() {
  return { runs: [], run: null, compare: [], view: 'graph', layer: null, kind: null, step: null, scale: 'frame', stat: null };
}

export class Store {
  constructor() {
    /** @type {XrayState} */
    this.state = initialState();
    /** @type {((changed: Set<string>, state: XrayState) => void)[]} */
    this.listeners = [];
  }

  /** @returns {string[]} The main run and the compared runs, in order. */
  get shownRuns() {
    const { run, compare } = this.state;
    return run === null ? [] : [run, ...compare.filter((r) => r !== run)];
  }

  /**
   * Changes some keys and tells the listeners which changed.
   * @param {Partial<XrayState>} patch
   */
  set(patch) {
    const changed = new Set();
    for (const [key, value] of Object.entries(patch)) {
      if (JSON.stringify(this.state[key]) !== JSON.stringify(value)) {
        this.state[key] = value;
        changed.add(key);
      }
    }
    if (changed.size) for (const listener of this.listeners) listener(changed, this.state);
  }

  /** @param {(changed: Set<string>, state: XrayState) => void} listener */
  subscribe(listener) {
    this.listeners.push(listener);
  }
}
