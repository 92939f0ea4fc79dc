// What the app knows of each run: its recorded layers and steps (/layers) and its architecture
// (/architecture), re-read on every reload. It tells a run that only grew (training went on) from
// one that was rewritten (a layer, kind or step gone), and keeps the same architecture object while
// the record is unchanged, so that the graph keeps its expansion state and layout cache.

import { fetchArchitecture, fetchLayers } from './api.js';

/** @typedef {import('./api.js').LayersResponse} LayersResponse */

/**
 * Whether a run's new layer list only adds to the old one.
 * @param {Record<string, Record<string, number[]>>} before
 * @param {Record<string, Record<string, number[]>>} after
 * @returns {boolean}
 */
export function onlyGrew(before, after) {
  for (const [layer, kinds] of Object.entries(before)) {
    const now = after[layer];
    if (!now) return false;
    for (const [kind, steps] of Object.entries(kinds)) {
      const have = new Set(now[kind] || []);
      if (!steps.every((step) => have.has(step))) return false;
    }
  }
  return true;
}

/** @param {import('./api.js').LayerInfo[]} layers */
function recordedSteps(layers) {
  const out = {};
  for (const layer of layers) out[layer.name] = { ...(layer.kinds || {}) };
  return out;
}

export class RunData {
  constructor() {
    /** @type {Map<string, LayersResponse>} */ this.layers = new Map();
    /** @type {Map<string, {text: string, arch: any, modules?: Set<string>}|null>} */ this.archs = new Map();
  }

  /**
   * Re-reads a run's layers (and architecture).
   * @param {string} run
   * @param {boolean} withArchitecture
   * @returns {Promise<{rewritten: boolean, changed: boolean}>}
   */
  async load(run, withArchitecture) {
    const [response, arch] = await Promise.all([
      fetchLayers(run),
      withArchitecture ? fetchArchitecture(run) : Promise.resolve(undefined),
    ]);
    const before = this.layers.get(run);
    const rewritten = before !== undefined && !onlyGrew(recordedSteps(before.layers), recordedSteps(response.layers));
    const changed = !before || JSON.stringify(before.layers) !== JSON.stringify(response.layers);
    this.layers.set(run, response);
    if (arch !== undefined) {
      const text = arch === null ? '' : JSON.stringify(arch);
      const known = this.archs.get(run);
      if (!known || known.text !== text) this.archs.set(run, arch === null ? { text, arch: null } : { text, arch });
    }
    return { rewritten, changed };
  }

  /** @param {string} run */
  forget(run) {
    this.layers.delete(run);
    this.archs.delete(run);
  }

  /** @returns {any|null} The run's architecture, when loaded. */
  arch(run) {
    const known = this.archs.get(run);
    return known ? known.arch : null;
  }

  /**
   * Whether the run's model has a layer ``name`` (a module call in its architecture), recorded or not:
   * training health covers every layer, the plan only some.
   * @returns {boolean}
   */
  hasModelLayer(run, name) {
    const known = this.archs.get(run);
    if (!known || !known.arch) return false;
    if (!known.modules) known.modules = new Set((known.arch.nodes || []).filter((n) => n.kind === 'module').map((n) => n.module));
    return known.modules.has(name);
  }

  /** Whether the run's traced model is known and has no layer `name` (so it has no health of it either). */
  lacksLayer(run, name) {
    const known = this.archs.get(run);
    return Boolean(known && known.arch) && !this.layer(run, name) && !this.hasModelLayer(run, name.split('[')[0]);
  }

  /** @returns {import('./api.js').LayerInfo|null} */
  layer(run, name) {
    const response = this.layers.get(run);
    return (response && response.layers.find((l) => l.name === name)) || null;
  }

  /** @returns {number[]} Every step the run recorded. */
  steps(run) {
    const response = this.layers.get(run);
    return response ? response.steps : [];
  }

  /**
   * The recorded layers of a run by module name, with their kinds (for marks on the graph).
   * @returns {Map<string, {layer: string, kinds: string[]}>}
   */
  marks(run) {
    const out = new Map();
    const response = this.layers.get(run);
    for (const layer of response ? response.layers : []) {
      const base = layer.name.split('[')[0];
      const known = out.get(base);
      const kinds = Object.keys(layer.kinds || {});
      if (known) known.kinds = [...new Set([...known.kinds, ...kinds])];
      else out.set(base, { layer: layer.name, kinds });
    }
    return out;
  }
}
