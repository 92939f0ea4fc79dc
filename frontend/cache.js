// A least-recently-used cache of frame promises, keyed by (run, layer, kind, step), so that scrubbing
// back over steps does not fetch again and concurrent requests for one frame share a fetch. It is
// bounded by the bytes of the values that arrived (decoded panels), not by their number, and can
// drop everything of one run when that run was rewritten.

/** Default budget: 64 MiB of decoded panel data. */
export const DEFAULT_MAX_BYTES = 64 * 1024 * 1024;

/**
 * @template T
 * @typedef {Object} Entry
 * @property {string} run
 * @property {Promise<T>} promise
 * @property {boolean} done   The value arrived (it then counts `bytes`).
 * @property {T} [value]
 * @property {number} bytes
 */

/**
 * @template T
 */
export class FrameCache {
  /**
   * @param {number} [maxBytes]  Budget for the values that arrived; the newest value is always kept.
   * @param {(value: T) => number} [sizeOf]  Bytes a value holds.
   */
  constructor(maxBytes = DEFAULT_MAX_BYTES, sizeOf = () => 0) {
    this.maxBytes = maxBytes;
    this.sizeOf = sizeOf;
    /** In least- to most-recently used order. @type {Map<string, Entry<T>>} */
    this.entries = new Map();
    this.bytes = 0;
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

  /** @returns {number} Entries held (arrived or in flight). */
  get size() {
    return this.entries.size;
  }

  /**
   * The value if it has already arrived (no fetch; marks it recently used), else undefined.
   * @param {string} key
   * @returns {T|undefined}
   */
  peek(key) {
    const entry = this.entries.get(key);
    if (!entry || !entry.done) return undefined;
    this.touch(key, entry);
    return entry.value;
  }

  /**
   * The cached promise for `key`, or the one `load` makes (dropped again if it fails).
   * @param {string} key
   * @param {() => Promise<T>} load
   * @returns {Promise<T>}
   */
  get(key, load) {
    const cached = this.entries.get(key);
    if (cached) {
      this.touch(key, cached);
      return cached.promise;
    }
    const run = JSON.parse(key)[0];
    /** @type {Entry<T>} */
    const entry = { run, promise: /** @type {Promise<T>} */ (/** @type {unknown} */ (null)), done: false, bytes: 0 };
    entry.promise = load().then(
      (value) => {
        if (this.entries.get(key) === entry) {
          entry.done = true;
          entry.value = value;
          entry.bytes = Math.max(0, this.sizeOf(value) || 0);
          this.bytes += entry.bytes;
          this.touch(key, entry);
          this.evict();
        }
        return value;
      },
      (error) => {
        if (this.entries.get(key) === entry) this.entries.delete(key);
        throw error;
      },
    );
    this.entries.set(key, entry);
    return entry.promise;
  }

  /**
   * Forgets every frame of `run` (in-flight fetches included: their answers are not stored).
   * @param {string} run
   * @param {string} [except]  A key to keep.
   */
  clearRun(run, except) {
    for (const [key, entry] of [...this.entries]) {
      if (entry.run === run && key !== except) this.remove(key, entry);
    }
  }

  clear() {
    this.entries.clear();
    this.bytes = 0;
  }

  /**
   * @param {string} key
   * @param {Entry<T>} entry
   */
  touch(key, entry) {
    this.entries.delete(key);
    this.entries.set(key, entry);
  }

  /**
   * @param {string} key
   * @param {Entry<T>} entry
   */
  remove(key, entry) {
    this.entries.delete(key);
    this.bytes -= entry.bytes;
  }

  /** Drops the least recently used values until the budget holds, keeping the newest one. */
  evict() {
    if (this.bytes <= this.maxBytes) return;
    let newest = null;
    for (const [key, entry] of this.entries) if (entry.done) newest = key;
    for (const [key, entry] of [...this.entries]) {
      if (this.bytes <= this.maxBytes) break;
      if (entry.done && key !== newest) this.remove(key, entry);
    }
  }
}
