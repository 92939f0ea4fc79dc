// A small least-recently-used cache of frame promises, keyed by (run, layer, kind, step), so that
// scrubbing back over steps does not fetch again and concurrent requests for one frame share a fetch.

/**
 * @template T
 */
export class FrameCache {
  /** @param {number} [capacity] */
  constructor(capacity = 300) {
    this.capacity = capacity;
    /** @type {Map<string, Promise<T>>} */
    this.entries = new Map();
    /** @type {Map<string, T>} */
    this.resolved = new Map();
  }

  /**
   * @param {string} run
   * @param {string} layer
   * @param {string} kind
   * @param {number} step
   * @returns {string}
   */
  static key(run, layer, kind, step) {
    return JSON.stringify([run, layer, kind, step]);
  }

  /**
   * The value if it has already arrived (no fetch), else undefined.
   * @param {string} key
   * @returns {T|undefined}
   */
  peek(key) {
    return this.resolved.get(key);
  }

  /**
   * The cached promise for `key`, or the one `load` makes (dropped again if it fails).
   * @param {string} key
   * @param {() => Promise<T>} load
   * @returns {Promise<T>}
   */
  get(key, load) {
    let promise = this.entries.get(key);
    if (promise) {
      this.entries.delete(key);
      this.entries.set(key, promise);
      return promise;
    }
    promise = load().then(
      (value) => {
        if (this.entries.get(key) === promise) this.resolved.set(key, value);
        return value;
      },
      (error) => {
        if (this.entries.get(key) === promise) this.entries.delete(key);
        throw error;
      },
    );
    this.entries.set(key, promise);
    while (this.entries.size > this.capacity) {
      const oldest = this.entries.keys().next().value;
      this.entries.delete(oldest);
      this.resolved.delete(oldest);
    }
    return promise;
  }
}
