// Where frames come from: a byte-bounded LRU cache over the binary frame route, rewrite detection
// by run_id, a small prefetch queue (so playing is smooth), and each run's colour ranges over the
// whole timeline (for the fixed colour scale).

import { fetchFrame, fetchRanges } from './api.js';
import { FrameCache } from './cache.js';

/** @typedef {import('./frame_text.js').DecodedFrame} DecodedFrame */

/** Budget of the frame cache: bytes of decoded panel data. */
const CACHE_BYTES = 96 * 1024 * 1024;
/** Frames fetched at once by the prefetcher. */
const PREFETCH_PARALLEL = 4;

/** @param {DecodedFrame} frame */
export function frameBytes(frame) {
  let bytes = 0;
  for (const panel of frame.decoded) bytes += panel.values.byteLength;
  return bytes;
}

export class FrameSource {
  /** @param {(run: string) => void} onRewritten  A run turned out rewritten (its cache is gone). */
  constructor(onRewritten) {
    this.onRewritten = onRewritten;
    /** @type {FrameCache<DecodedFrame>} */
    this.cache = new FrameCache(CACHE_BYTES, frameBytes);
    /** @type {Map<string, Set<string>>} run_id values seen per run */
    this.runIds = new Map();
    /** @type {Map<string, Promise<Record<string, {min: number, max: number}>>>} */
    this.ranges = new Map();
    /** @type {{run: string, layer: string, kind: string, step: number}[]} */
    this.queue = [];
    this.active = 0;
  }

  /** @returns {string} */
  key(run, layer, kind, step) {
    return FrameCache.key(run, layer, kind, step);
  }

  /** The frame if it already arrived. */
  peek(run, layer, kind, step) {
    return this.cache.peek(this.key(run, layer, kind, step));
  }

  /**
   * The frame, fetched once however many ask.
   * @returns {Promise<DecodedFrame>}
   */
  async load(run, layer, kind, step) {
    const key = this.key(run, layer, kind, step);
    const frame = await this.cache.get(key, () => fetchFrame(run, layer, kind, step));
    if (this.noteRunId(run, key, frame)) this.onRewritten(run);
    return frame;
  }

  /**
   * Fetches frames in the background, nearest first, a few at a time; replaces the queue.
   * @param {{run: string, layer: string, kind: string, step: number}[]} wanted
   */
  prefetch(wanted) {
    this.queue = wanted.filter((w) => !this.cache.entries.has(this.key(w.run, w.layer, w.kind, w.step)));
    this.pump();
  }

  pump() {
    while (this.active < PREFETCH_PARALLEL && this.queue.length) {
      const { run, layer, kind, step } = this.queue.shift();
      this.active++;
      this.load(run, layer, kind, step)
        .catch(() => {}) // shown frames report their own errors
        .finally(() => {
          this.active--;
          this.pump();
        });
    }
  }

  /**
   * Each kind's value range over every step of a layer (from the recorder's statistics).
   * @returns {Promise<Record<string, {min: number, max: number}>>}
   */
  rangesOf(run, layer) {
    const key = JSON.stringify([run, layer]);
    if (!this.ranges.has(key)) {
      const promise = fetchRanges(run, layer).catch((error) => {
        this.ranges.delete(key);
        throw error;
      });
      this.ranges.set(key, promise);
    }
    return this.ranges.get(key);
  }

  /**
   * Notes a frame's run_id; a new one in a run that had another means the run was rewritten.
   * @returns {boolean}  Whether the run's cache was cleared.
   */
  noteRunId(run, key, frame) {
    const id = frame.meta && frame.meta.run_id;
    if (!id) return false;
    let ids = this.runIds.get(run);
    if (!ids) this.runIds.set(run, (ids = new Set()));
    if (ids.has(id)) return false;
    const rewritten = ids.size > 0;
    ids.add(id);
    if (rewritten) this.cache.clearRun(run, key);
    return rewritten;
  }

  /** Forgets a run's frames (rewritten or gone); keeps `except`. */
  forget(run, except) {
    this.cache.clearRun(run, except);
    this.runIds.delete(run);
    for (const key of [...this.ranges.keys()]) if (JSON.parse(key)[0] === run) this.ranges.delete(key);
  }

  /** After a reload: ranges may have grown. */
  dropRanges() {
    this.ranges.clear();
  }
}
