// Entry point of the Xray plugin page. TensorBoard's plugin_entry.html imports this module inside
// an iframe (<base href="plugin/xray/">) and calls render(). This module builds the page, owns the
// state (run, layer, step) and wires the controls to the API and the views.

import { KINDS, ApiError, fetchRuns, fetchLayers, fetchFrame } from './api.js';
import { FrameCache } from './cache.js';
import { RunPicker, LayerList, Scrubber, el } from './controls.js';
import { decodePanels } from './heatmap.js';
import { connectToHost, DATA_RELOADED, RUNS_CHANGED } from './host.js';
import { KindSection, stepAtOrBefore } from './section.js';

/** @typedef {import('./api.js').Kind} Kind */
/** @typedef {import('./api.js').LayerInfo} LayerInfo */
/** @typedef {import('./section.js').DecodedFrame} DecodedFrame */

/** How often the run list and the chosen run's layers are re-read without a host reload. */
const POLL_MS = 30000;
/** Delay before fetching frames while the scrubber is dragged. */
const DEBOUNCE_MS = 150;
/** Budget of the frame cache: bytes of decoded panel data. */
const CACHE_BYTES = 64 * 1024 * 1024;
/** A frame that answers 404 re-reads the layer list, at most this often. */
const STALE_REFRESH_MS = 5000;

/**
 * Bytes of decoded panel data a frame holds (what the cache budget counts).
 * @param {DecodedFrame} frame
 * @returns {number}
 */
function frameBytes(frame) {
  let bytes = 0;
  for (const panel of frame.decoded) bytes += panel.values.byteLength;
  return bytes;
}

/**
 * The steps recorded for each layer and kind of a run: {layer: {kind: [steps]}}.
 * @param {LayerInfo[]} layers
 * @returns {Record<string, Record<string, number[]>>}
 */
function recordedSteps(layers) {
  /** @type {Record<string, Record<string, number[]>>} */
  const out = {};
  for (const layer of layers) out[layer.name] = { ...(layer.kinds || {}) };
  return out;
}

/**
 * Whether a run's new layer list only adds to the old one (training went on). Anything else (a
 * layer, kind or step gone) means that the run was rewritten or TensorBoard purged steps.
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

/**
 * Loads style.css (next to this module) and resolves once it applied or failed (at most 3 s).
 * @returns {Promise<void>}
 */
function loadStylesheet() {
  if (document.querySelector('link[data-xray-style]')) return Promise.resolve();
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  // Same as './static/style.css' against the iframe's <base href="plugin/xray/">, but independent
  // of where TensorBoard mounts the module.
  link.href = new URL('./style.css', import.meta.url).href;
  link.dataset.xrayStyle = '';
  return new Promise((resolve) => {
    const done = () => resolve();
    link.addEventListener('load', done);
    link.addEventListener('error', done);
    setTimeout(done, 3000);
    document.head.append(link);
  });
}

/**
 * Sorted union of the steps of every recorded kind of a layer.
 * @param {LayerInfo} layer
 * @returns {number[]}
 */
export function layerSteps(layer) {
  const all = new Set();
  for (const steps of Object.values(layer.kinds || {})) for (const s of steps) all.add(s);
  return [...all].sort((a, b) => a - b);
}

/** The page-level error banner: one line per failing source, cleared when that source recovers. */
class ErrorBanner {
  constructor() {
    this.element = el('div', 'xray-error-banner');
    this.element.id = 'xray-error';
    this.element.setAttribute('role', 'alert');
    this.element.hidden = true;
    this.list = el('div', 'xray-error-lines');
    const close = /** @type {HTMLButtonElement} */ (el('button', 'xray-error-close', '×'));
    close.type = 'button';
    close.title = 'Dismiss';
    close.setAttribute('aria-label', 'Dismiss errors');
    close.addEventListener('click', () => this.clearAll());
    this.element.append(this.list, close);
    /** @type {Map<string, string>} */
    this.messages = new Map();
  }

  /**
   * @param {string} source
   * @param {unknown} error
   */
  set(source, error) {
    const message = error instanceof Error ? error.message : String(error);
    console.error(`[xray] ${source}:`, error);
    this.messages.set(source, message);
    this.update();
  }

  /** @param {string} source */
  clear(source) {
    if (this.messages.delete(source)) this.update();
  }

  clearAll() {
    this.messages.clear();
    this.update();
  }

  update() {
    this.list.replaceChildren(...[...this.messages.values()].map((m) => el('div', '', m)));
    this.element.hidden = this.messages.size === 0;
  }
}

/** The whole page. */
class XrayApp {
  constructor() {
    /** @type {string[]} */
    this.runs = [];
    /** @type {string|null} */
    this.run = null;
    /** @type {LayerInfo[]} */
    this.layers = [];
    /** @type {LayerInfo|null} */
    this.layer = null;
    /** @type {Map<Kind, KindSection>} */
    this.sections = new Map();
    /** @type {FrameCache<DecodedFrame>} */
    this.cache = new FrameCache(CACHE_BYTES, frameBytes);
    /**
     * Layers and steps last seen for each run, to tell a rewritten run.
     * @type {Map<string, Record<string, Record<string, number[]>>>}
     */
    this.recorded = new Map();
    /**
     * meta.run_id values seen in each run's frames (forgotten when the run turns out rewritten).
     * @type {Map<string, Set<string>>}
     */
    this.runIds = new Map();
    /**
     * The layer (and step) to show again once the layers of a newly chosen run arrive.
     * @type {{name: string, step: number|null, atEnd: boolean}|null}
     */
    this.keep = null;
    this.staleRefreshAt = 0;
    /** @type {ReturnType<typeof setTimeout>|null} */
    this.debounce = null;
    /** Latest key wanted by each section; stale answers are dropped. @type {Map<KindSection, string>} */
    this.wanted = new Map();
    this.refreshing = null;
    this.refreshAgain = false;
    this.layersSeq = 0;

    this.errors = new ErrorBanner();
    this.runPicker = new RunPicker((run) => this.selectRun(run));
    this.layerList = new LayerList((name) => this.selectLayer(name));
    this.scrubber = new Scrubber((_index, committed) => this.showStep(!committed));
    this.build();
  }

  build() {
    const root = el('div', 'xray-root');
    const sidebar = el('aside', 'xray-sidebar');
    const brand = el('div', 'xray-brand');
    brand.append(el('span', 'xray-brand-name', 'Xray'), el('span', 'xray-muted', 'layer tensors'));
    this.status = el('div', 'xray-status xray-muted', '');
    sidebar.append(brand, this.runPicker.element, this.layerList.element, this.status);

    const main = el('main', 'xray-main');
    this.empty = el('div', 'xray-empty');
    this.empty.id = 'xray-empty';
    this.empty.hidden = true;
    const p1 = el('p', 'xray-empty-title', 'No Xray data yet.');
    const p2 = el('p', '');
    p2.append(
      'Add ',
      el('code', '', 'xray.take_graphs(step)'),
      ' to your training loop and point TensorBoard’s ',
      el('code', '', '--logdir'),
      ' at its log directory. This page looks again every 30 s and whenever TensorBoard reloads.',
    );
    this.empty.append(p1, p2);

    this.view = el('div', 'xray-view');
    this.view.hidden = true;
    const header = el('header', 'xray-header');
    const titleRow = el('div', 'xray-title-row');
    this.layerTitle = el('h2', 'xray-layer-title', '');
    this.layerTitle.id = 'xray-layer-title';
    this.layerType = el('span', 'xray-layer-title-type', '');
    this.layerSummary = el('span', 'xray-muted', '');
    titleRow.append(this.layerTitle, this.layerType, this.layerSummary);
    header.append(titleRow, this.scrubber.element);
    this.sectionsEl = el('div', 'xray-sections');
    this.hint = el('div', 'xray-hint xray-muted', 'Loading…');
    this.view.append(header, this.hint, this.sectionsEl);

    main.append(this.errors.element, this.empty, this.view);
    root.append(sidebar, main);
    document.body.append(root);
    document.body.classList.add('xray-body');
  }

  start() {
    connectToHost({
      [DATA_RELOADED]: () => {
        this.refresh();
      },
      [RUNS_CHANGED]: () => {
        this.refresh();
      },
    });
    setInterval(() => this.refresh(), POLL_MS);
    document.addEventListener('keydown', (e) => this.onKey(e));
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => this.redraw(), 150);
    });
    return this.refresh();
  }

  /**
   * Re-reads the run list and the chosen run's layers, keeping the selection. Calls made while one
   * is running are folded into one more pass.
   * @returns {Promise<void>}
   */
  refresh() {
    if (this.refreshing) {
      this.refreshAgain = true;
      return this.refreshing;
    }
    this.refreshing = (async () => {
      do {
        this.refreshAgain = false;
        await this.refreshOnce();
      } while (this.refreshAgain);
    })().finally(() => {
      this.refreshing = null;
    });
    return this.refreshing;
  }

  async refreshOnce() {
    let runs;
    try {
      runs = await fetchRuns();
      this.errors.clear('runs');
    } catch (e) {
      this.errors.set('runs', e);
      return;
    }
    this.runs = runs;
    for (const known of [...this.recorded.keys()]) if (!runs.includes(known)) this.forgetRun(known);
    this.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
    if (runs.length === 0) {
      this.run = null;
      this.layers = [];
      this.layer = null;
      this.clearView('');
      this.runPicker.setRuns([], null);
      this.layerList.setLayers([], null);
      this.empty.hidden = false;
      this.view.hidden = true;
      this.layerList.element.hidden = true;
      return;
    }
    this.empty.hidden = true;
    this.view.hidden = false;
    this.layerList.element.hidden = false;
    const run = this.run !== null && runs.includes(this.run) ? this.run : runs[0];
    this.runPicker.setRuns(runs, run);
    if (run !== this.run) await this.selectRun(run);
    else await this.loadLayers(false);
  }

  /**
   * @param {string} run
   * @returns {Promise<void>}
   */
  async selectRun(run) {
    if (run === this.run && this.layers.length) return;
    // Until the new run's layers arrive nothing is selected, so that neither the scrubber nor the
    // old layer list asks the new run for the old run's layers; the same layer (and step) comes
    // back afterwards if the new run has it.
    if (this.layer) {
      const steps = this.scrubber.steps;
      this.keep = {
        name: this.layer.name,
        step: this.scrubber.step,
        atEnd: this.scrubber.index >= steps.length - 1,
      };
    }
    this.run = run;
    this.layers = [];
    this.layer = null;
    this.runPicker.setRuns(this.runs, run);
    this.layerList.setSelected(null);
    this.layerList.setBusy(true);
    this.clearView('Loading layers…');
    await this.loadLayers(true);
  }

  /**
   * Forgets what is known of a run that left the logdir (or was rewritten).
   * @param {string} run
   */
  forgetRun(run) {
    this.cache.clearRun(run);
    this.recorded.delete(run);
    this.runIds.delete(run);
  }

  /**
   * Notes the run_id of a frame that arrived. A run_id not seen before in this run, once another
   * was, means the run was rewritten under the same name: its cached frames are dropped.
   * @param {string} run
   * @param {string} key  The frame's cache key (kept).
   * @param {DecodedFrame} frame
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

  /**
   * Loads the layers of the current run.
   * @param {boolean} fresh  A newly chosen run (else a refresh that keeps layer and step).
   */
  async loadLayers(fresh) {
    const run = this.run;
    if (run === null) return;
    const seq = ++this.layersSeq;
    if (fresh) this.hint.textContent = 'Loading layers…';
    let response;
    try {
      response = await fetchLayers(run);
      this.errors.clear('layers');
    } catch (e) {
      if (seq === this.layersSeq) {
        this.errors.set('layers', e);
        if (fresh && run === this.run && !this.layers.length) {
          this.layerList.setBusy(false);
          this.layerList.setLayers([], null);
          this.hint.textContent = 'Could not load the layers of this run.';
        }
      }
      return;
    }
    if (seq !== this.layersSeq || run !== this.run) return;
    this.layerList.setBusy(false);
    const recorded = recordedSteps(response.layers);
    const before = this.recorded.get(run);
    this.recorded.set(run, recorded);
    const rewritten = before !== undefined && !onlyGrew(before, recorded);
    if (rewritten) {
      this.cache.clearRun(run);
      this.runIds.delete(run);
    }
    this.layers = response.layers;
    const wanted = this.layer ? this.layer.name : this.keep ? this.keep.name : null;
    const keep = wanted !== null ? this.layers.find((l) => l.name === wanted) : undefined;
    const name = keep ? keep.name : this.layers.length ? this.layers[0].name : null;
    const restore = this.keep;
    this.keep = null;
    this.layerList.setLayers(this.layers, name);
    if (name === null) {
      this.layer = null;
      this.clearView('This run has no recorded layers yet.');
    } else if (fresh || !keep || !this.layer) {
      this.selectLayer(name, keep && restore && !restore.atEnd ? restore.step : null);
    } else {
      const shown = this.updateLayer(keep);
      if (rewritten && !shown) this.showStep(false);
      else if (!rewritten && !shown) await this.validate(run);
    }
  }

  /**
   * After a reload that changed nothing visible, checks that the run was not rewritten under the
   * same name with the same steps: fetches the smallest shown frame again and compares its run_id
   * and wall time with the cached one.
   * @param {string} run
   * @returns {Promise<void>}
   */
  async validate(run) {
    let probe = null;
    for (const section of this.sections.values()) {
      const frame = section.frame;
      if (!frame || frame.run !== run) continue;
      if (!probe || frameBytes(frame) < frameBytes(probe.frame)) probe = { section, frame };
    }
    if (!probe) return;
    const { frame } = probe;
    let fresh;
    try {
      fresh = await fetchFrame(run, frame.layer, frame.kind, frame.step);
    } catch (_) {
      return; // gone or unreachable: the next reload's layer list or the frame fetches tell
    }
    if (run !== this.run) return;
    const sameId = (fresh.meta.run_id || null) === (frame.meta.run_id || null);
    if (sameId && fresh.wall_time === frame.wall_time) return;
    this.cache.clearRun(run);
    this.runIds.delete(run);
    this.showStep(false);
  }

  /** @param {string} message */
  clearView(message) {
    clearTimeout(this.debounce);
    this.debounce = null;
    this.clearFrameErrors();
    this.sections.clear();
    this.wanted.clear();
    this.sectionsEl.replaceChildren();
    this.layerTitle.textContent = '';
    this.layerType.textContent = '';
    this.layerSummary.textContent = '';
    this.scrubber.setSteps([], 0);
    this.hint.textContent = message;
    this.hint.hidden = false;
  }

  /**
   * Shows a layer of the current run, at its latest recorded step (or at `step`, or the nearest
   * recorded step before it).
   * @param {string} name
   * @param {number|null} [step]
   */
  selectLayer(name, step = null) {
    const layer = this.layers.find((l) => l.name === name);
    if (!layer) return;
    this.layer = layer;
    this.layerList.setSelected(name);
    this.layerTitle.textContent = layer.name;
    this.layerType.textContent = layer.type || '';
    this.buildSections(layer);
    const steps = layerSteps(layer);
    let index = steps.length - 1;
    if (step !== null) {
      const s = stepAtOrBefore(steps, step);
      index = s === null ? 0 : steps.indexOf(s);
    }
    this.scrubber.setSteps(steps, index);
    this.updateSummary(steps);
    this.showStep(false);
  }

  /**
   * A refresh brought new data for the shown layer: keep the step, or follow the newest step when
   * the scrubber was at the end.
   * @param {LayerInfo} layer
   * @returns {boolean}  Whether the frames were shown again (the steps or kinds changed).
   */
  updateLayer(layer) {
    const oldSteps = this.scrubber.steps;
    const atEnd = this.scrubber.index >= oldSteps.length - 1;
    const oldStep = this.scrubber.step;
    const sameKinds =
      this.layer !== null &&
      JSON.stringify(Object.keys(layer.kinds)) === JSON.stringify(Object.keys(this.layer.kinds));
    this.layer = layer;
    this.layerType.textContent = layer.type || '';
    if (!sameKinds) this.buildSections(layer);
    else for (const [kind, section] of this.sections) section.setSteps(layer.kinds[kind] || []);
    const steps = layerSteps(layer);
    let index = steps.length - 1;
    if (!atEnd && oldStep !== null) {
      const s = stepAtOrBefore(steps, oldStep);
      index = s === null ? 0 : steps.indexOf(s);
    }
    const changed = !sameKinds || JSON.stringify(steps) !== JSON.stringify(oldSteps);
    this.scrubber.setSteps(steps, index);
    this.updateSummary(steps);
    if (changed) this.showStep(false);
    return changed;
  }

  /** @param {number[]} steps */
  updateSummary(steps) {
    this.layerSummary.textContent = steps.length
      ? `${steps.length} recorded step${steps.length === 1 ? '' : 's'}, ${steps[0]}–${steps[steps.length - 1]}`
      : 'no recorded steps';
  }

  /** @param {LayerInfo} layer */
  buildSections(layer) {
    this.clearFrameErrors();
    this.sections.clear();
    this.wanted.clear();
    const kinds = KINDS.filter((k) => Array.isArray(layer.kinds[k]) && layer.kinds[k].length);
    for (const kind of kinds) {
      const section = new KindSection(kind);
      section.setSteps(layer.kinds[kind]);
      this.sections.set(kind, section);
    }
    this.sectionsEl.replaceChildren(...[...this.sections.values()].map((s) => s.element));
    this.hint.hidden = kinds.length > 0;
    this.hint.textContent = kinds.length ? '' : 'This layer has no recorded kinds.';
  }

  /**
   * Shows the scrubber's step in every section: cached frames at once, others fetched (after a
   * short delay while dragging).
   * @param {boolean} debounced
   */
  showStep(debounced) {
    const requested = this.scrubber.step;
    if (requested === null || this.run === null || this.layer === null) return;
    const run = this.run;
    const layer = this.layer.name;
    /** @type {{section: KindSection, key: string, step: number}[]} */
    const pending = [];
    for (const [kind, section] of this.sections) {
      const shown = stepAtOrBefore(section.steps, requested);
      if (shown === null) {
        this.wanted.delete(section);
        this.errors.clear(`frame:${kind}`);
        section.showNotRecorded(requested);
        continue;
      }
      const key = FrameCache.key(run, layer, kind, shown);
      this.wanted.set(section, key);
      const cached = this.cache.peek(key);
      if (cached) {
        this.errors.clear(`frame:${kind}`);
        section.showFrame(cached, requested, this.availableWidth());
      } else {
        section.showLoading(requested, shown);
        pending.push({ section, key, step: shown });
      }
    }
    clearTimeout(this.debounce);
    this.debounce = null;
    if (!pending.length) return;
    const go = () => {
      this.debounce = null;
      for (const { section, key, step } of pending) {
        if (this.wanted.get(section) !== key) continue;
        this.loadFrame(section, key, run, layer, step, requested);
      }
    };
    if (debounced) this.debounce = setTimeout(go, DEBOUNCE_MS);
    else go();
  }

  /**
   * @param {KindSection} section
   * @param {string} key
   * @param {string} run
   * @param {string} layer
   * @param {number} step
   * @param {number} requested
   */
  async loadFrame(section, key, run, layer, step, requested) {
    const source = `frame:${section.kind}`;
    let frame;
    try {
      frame = await this.cache.get(key, async () => {
        const raw = await fetchFrame(run, layer, section.kind, step);
        const decoded = decodePanels(raw.panels);
        return { ...raw, panels: [], decoded };
      });
    } catch (e) {
      if (this.wanted.get(section) !== key) return;
      const message = e instanceof Error ? e.message : String(e);
      section.showError(message);
      this.errors.set(source, e);
      // A 404 for a step the layer list offered: the list is stale (a rewritten or purged run).
      if (e instanceof ApiError && e.status === 404 && Date.now() >= this.staleRefreshAt) {
        this.staleRefreshAt = Date.now() + STALE_REFRESH_MS;
        this.refresh();
      }
      return;
    }
    const rewritten = this.noteRunId(run, key, frame);
    if (this.wanted.get(section) !== key) return;
    this.errors.clear(source);
    section.showFrame(frame, requested, this.availableWidth());
    if (rewritten && run === this.run) this.showStep(false); // the other kinds, from the new run
  }

  /** Clears the banner lines of frame errors (the sections they were about are going away). */
  clearFrameErrors() {
    for (const kind of KINDS) this.errors.clear(`frame:${kind}`);
  }

  /** @returns {number} Width available to a heatmap, in CSS pixels. */
  availableWidth() {
    for (const section of this.sections.values()) {
      if (!section.wrap.hidden && section.wrap.clientWidth > 0) return section.wrap.clientWidth;
    }
    // sections padding (2 × 16) + section border (2 × 1) + section padding (2 × 12)
    const width = this.sectionsEl.clientWidth || document.documentElement.clientWidth - 300;
    return Math.max(160, width - 58);
  }

  redraw() {
    const width = this.availableWidth();
    for (const section of this.sections.values()) section.draw(width);
  }

  /** @param {KeyboardEvent} event */
  onKey(event) {
    if (event.key !== 'ArrowLeft' && event.key !== 'ArrowRight') return;
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const target = /** @type {HTMLElement|null} */ (event.target);
    if (target && (/^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName) || target.isContentEditable)) {
      return; // the range input moves itself; text fields and selects keep their arrows
    }
    event.preventDefault();
    this.scrubber.move(event.key === 'ArrowLeft' ? -1 : 1);
  }
}

/**
 * Builds the page. Called once by TensorBoard's plugin_entry.html.
 * @returns {Promise<void>}
 */
export async function render() {
  if (document.querySelector('.xray-root')) return;
  await loadStylesheet();
  const app = new XrayApp();
  await app.start();
}
