// The layer view: one section per recorded kind, one panel per shown run (plus their difference),
// all at the timeline's step: each run shows its nearest recorded step at or before it. Colours
// per frame, or fixed over the timeline. A button goes back to the graph with the layer marked.

import { KINDS, ApiError } from './api.js';
import { el } from './dom.js';
import { differenceBlocker, differenceFrame } from './compare.js';
import { stepAtOrBefore, unionSteps } from './steps.js';
import { KindSection } from './section.js';
import { LayerHealth } from './layer_health.js';
import { unitsOnLastDim } from './unit_outline.js';

/** @typedef {import('./api.js').LayerInfo} LayerInfo */
/** @typedef {{run: string, info: LayerInfo|null}} ShownRun */

/** Delay before fetching frames while the scrubber is dragged. */
const DEBOUNCE_MS = 120;
/** Steps prefetched ahead of (and one behind) the shown one. */
const PREFETCH_AHEAD = 6;

export class LayerView {
  /**
   * @param {{frames: import('./frames.js').FrameSource, errors: {set: Function, clear: Function},
   *   onBack: () => void, onScale: (mode: string) => void, onKind: (kind: string|null) => void,
   *   onStale: () => void, onWallTime: (t: number|null) => void}} deps
   */
  constructor(deps) {
    Object.assign(this, deps);
    /** @type {Map<string, KindSection>} */ this.sections = new Map();
    /** @type {ShownRun[]} */ this.shown = [];
    this.layer = null;
    this.scale = 'frame';
    this.kind = null;
    this.debounce = null;
    /** @type {Map<object, string>} latest key wanted by each panel */ this.wanted = new Map();
    this.health = new LayerHealth(); // charts, prune plan and dead units (layer_health.js)
    this.build();
  }

  build() {
    this.element = el('section', 'xray-layer-view');
    this.element.dataset.view = 'layer';
    const header = el('header', 'xray-header');
    const titleRow = el('div', 'xray-title-row');
    const back = /** @type {HTMLButtonElement} */ (el('button', 'xray-button', '← Graph'));
    back.type = 'button';
    back.dataset.action = 'back-to-graph';
    back.title = 'Back to the graph, with this layer marked';
    back.addEventListener('click', () => this.onBack());
    this.title = el('h2', 'xray-layer-title', '');
    this.title.id = 'xray-layer-title';
    this.type = el('span', 'xray-layer-title-type', '');
    this.summary = el('span', 'xray-muted', '');
    this.scaleSelect = /** @type {HTMLSelectElement} */ (el('select', 'xray-select'));
    this.scaleSelect.dataset.action = 'scale';
    this.scaleSelect.setAttribute('aria-label', 'Colour scale');
    for (const [value, text] of [['frame', 'Colours per frame'], ['fixed', 'Colours fixed over the timeline']]) {
      const option = /** @type {HTMLOptionElement} */ (el('option', '', text));
      option.value = value;
      this.scaleSelect.append(option);
    }
    this.scaleSelect.addEventListener('change', () => this.onScale(this.scaleSelect.value));
    this.kindSelect = /** @type {HTMLSelectElement} */ (el('select', 'xray-select'));
    this.kindSelect.dataset.action = 'kind';
    this.kindSelect.setAttribute('aria-label', 'Kinds shown');
    this.kindSelect.addEventListener('change', () => this.onKind(this.kindSelect.value || null));
    titleRow.append(back, this.title, this.type, this.summary, this.scaleSelect, this.kindSelect);
    header.append(titleRow);
    this.hint = el('div', 'xray-hint xray-muted', '');
    this.sectionsEl = el('div', 'xray-sections');
    this.element.append(header, this.hint, this.sectionsEl, this.health.element);
  }

  /** @param {string} message */
  clear(message) {
    clearTimeout(this.debounce);
    this.clearFrameErrors();
    this.sections.clear();
    this.wanted.clear();
    this.sectionsEl.replaceChildren();
    this.layer = null;
    this.title.textContent = '';
    this.type.textContent = '';
    this.summary.textContent = '';
    this.hint.textContent = message;
    this.hint.hidden = !message;
    this.hint.classList.remove('xray-hint-notice');
    this.health.element.hidden = true;
    this.health.signature = null;
  }

  /**
   * Shows a layer of the given runs (rebuilding the sections when the kinds or runs changed).
   * @param {string} layer
   * @param {ShownRun[]} shown
   * @param {{scale: string, kind: string|null}} options
   */
  show(layer, shown, { scale, kind }) {
    const kinds = KINDS.filter((k) => shown.some((s) => s.info && (s.info.kinds[k] || []).length));
    // A kind asked for (a link's p.xray.kind) that the layer does not record: said, and the recorded kinds shown.
    const missingKind = kind && kinds.length && !kinds.includes(kind) ? kind : null;
    const visible = kinds.filter((k) => !kind || missingKind || k === kind);
    const signature = JSON.stringify([layer, shown.map((s) => s.run), visible]);
    const rebuild = signature !== this.signature;
    this.signature = signature;
    this.layer = layer;
    this.shown = shown;
    this.scale = scale;
    this.kind = kind;
    this.scaleSelect.value = scale;
    this.kindSelect.replaceChildren(...['', ...kinds, ...(missingKind ? [missingKind] : [])].map((k) => {
      const option = /** @type {HTMLOptionElement} */ (el('option', '', k === missingKind ? `${k} (not recorded)` : k || 'All kinds'));
      option.value = k;
      option.disabled = k === missingKind;
      return option;
    }));
    this.kindSelect.value = kind && (kinds.includes(kind) || kind === missingKind) ? kind : '';
    const main = shown[0] && shown[0].info;
    this.title.textContent = layer;
    this.type.textContent = (main && main.type) || '';
    const steps = this.steps();
    this.summary.textContent = steps.length
      ? `${steps.length} recorded step${steps.length === 1 ? '' : 's'}, ${steps[0]}–${steps[steps.length - 1]}`
      : 'no recorded steps';
    if (rebuild) {
      this.clearFrameErrors();
      this.wanted.clear();
      this.sections = new Map(visible.map((k) => [k, new KindSection(k, layer, shown.map((s) => s.run))]));
      this.sectionsEl.replaceChildren(...[...this.sections.values()].map((s) => s.element));
    }
    for (const [k, section] of this.sections) {
      for (const s of shown) section.panels.get(s.run).setSteps((s.info && s.info.kinds[k]) || []);
    }
    this.hint.hidden = visible.length > 0 && !missingKind;
    this.hint.classList.toggle('xray-hint-notice', Boolean(missingKind));
    this.hint.textContent = missingKind ? `Kind '${missingKind}' is not recorded for layer '${layer}'; recorded: ${kinds.join(', ')}.`
      : visible.length ? '' : main ? 'This layer has no recorded kinds.'
      : shown.some((s) => s.info) ? `${shown[0].run} did not record ${layer}.`
        : `${layer} is not recorded in ${shown.length > 1 ? 'these runs' : shown[0] ? shown[0].run : 'this run'}: the plan records none of its kinds (xray.set_plan() chooses them). Its training health is below.`;
    this.health.show(layer, shown, this.sectionsEl.clientWidth || document.documentElement.clientWidth - 300);
    return rebuild;
  }

  /** @returns {number[]} Union of the shown runs' steps of this layer. */
  steps() {
    return unionSteps(this.shown.flatMap((s) => Object.values((s.info && s.info.kinds) || {})));
  }

  /**
   * Shows the timeline's step in every panel: cached frames at once, others fetched.
   * @param {number|null} requested
   * @param {boolean} debounced  While dragging: fetch after a short pause.
   */
  showStep(requested, debounced) {
    if (requested === null || this.layer === null) return;
    this.health.showStep(requested);
    const layer = this.layer;
    const width = this.availableWidth();
    const pending = [];
    for (const [kind, section] of this.sections) {
      for (const s of this.shown) {
        const panel = section.panels.get(s.run);
        const steps = (s.info && s.info.kinds[kind]) || [];
        const step = stepAtOrBefore(steps, requested);
        if (step === null) {
          this.wanted.delete(panel);
          this.errors.clear(`frame:${kind}:${s.run}`);
          panel.showNotRecorded(requested, s.info ? undefined : `${s.run} did not record ${layer}.`);
          continue;
        }
        const key = this.frames.key(s.run, layer, kind, step);
        this.wanted.set(panel, key);
        const cached = this.frames.peek(s.run, layer, kind, step);
        if (cached) this.draw(panel, cached, requested, width);
        else {
          panel.showLoading(requested, step);
          pending.push({ panel, run: s.run, kind, step, key });
        }
      }
      this.updateDiff(section, requested, width);
    }
    clearTimeout(this.debounce);
    const go = () => {
      for (const p of pending) if (this.wanted.get(p.panel) === p.key) this.load(p, requested);
      this.prefetch(requested);
    };
    if (debounced && pending.length) this.debounce = setTimeout(go, DEBOUNCE_MS);
    else go();
  }

  async load({ panel, run, kind, step, key }, requested) {
    const source = `frame:${kind}:${run}`;
    let frame;
    try {
      frame = await this.frames.load(run, this.layer, kind, step);
    } catch (e) {
      if (this.wanted.get(panel) !== key) return;
      panel.showError(e instanceof Error ? e.message : String(e));
      this.errors.set(source, e);
      if (e instanceof ApiError && e.status === 404) this.onStale();
      return;
    }
    if (this.wanted.get(panel) !== key) return;
    this.errors.clear(source);
    this.draw(panel, frame, requested, this.availableWidth());
  }

  async draw(panel, frame, requested, width) {
    let range = null;
    if (this.scale === 'fixed') {
      try {
        const ranges = await this.frames.rangesOf(panel.run, this.layer);
        range = ranges[panel.kind] || null;
      } catch (_) {
        range = null; // per-frame colours, said in the info line
      }
      if (this.wanted.get(panel) !== this.frames.key(panel.run, frame.layer, frame.kind, frame.step)) return;
    }
    panel.showFrame(frame, requested, width, range);
    this.markDead(panel, frame);
    if (panel === this.firstPanel()) this.onWallTime(frame.wall_time);
    this.updateDiff(this.sections.get(panel.kind), requested, width); // drawn after a wait for ranges too
  }

  /** Outlines the dead units (health at the frame's step) of a run's output or activation panel. */
  markDead(panel, frame) {
    const s = this.shown.find((x) => x.run === panel.run);
    if (!s || (panel.kind !== 'output' && panel.kind !== 'activation')) return;
    this.health.deadUnits(panel.run, this.layer, frame.step).then((units) => {
      if (panel.frame === frame) panel.setDeadUnits(units, unitsOnLastDim(s.info && s.info.type));
    });
  }

  firstPanel() {
    const first = this.sections.values().next().value;
    return first && this.shown[0] ? first.panels.get(this.shown[0].run) : null;
  }

  /** The difference panel of a section: first run − second run, when both frames are loaded. */
  updateDiff(section, requested, width) {
    if (!section || !section.diff || this.shown.length < 2) return;
    const [a, b] = this.shown.map((s) => section.panels.get(s.run));
    const fa = a.element.dataset.state === 'ready' ? a.frame : null;
    const fb = b.element.dataset.state === 'ready' ? b.frame : null;
    if (!fa || !fb) {
      const absent = [a, b].find((p) => p.element.dataset.state === 'missing' || p.element.dataset.state === 'error');
      section.diff.showNotRecorded(requested, absent ? `No difference view: ${absent.run} has no frame to compare here.` : 'Waiting for both runs’ frames.');
      return;
    }
    const blocker = differenceBlocker(fa, fb);
    if (blocker) section.diff.showNotRecorded(requested, `No difference view: ${blocker}.`);
    else section.diff.showFrame(differenceFrame(fa, fb), requested, width, null);
  }

  /** Fetches the frames of the next steps of every panel in the background. */
  prefetch(requested) {
    const steps = this.steps();
    const at = steps.findIndex((s) => s >= requested);
    const ahead = steps.slice(Math.max(0, at), at + 1 + PREFETCH_AHEAD);
    if (at > 0) ahead.push(steps[at - 1]);
    this.frames.prefetch(ahead.flatMap((step) => this.panelFrames(step)));
  }

  /** Whether every panel's frame for `step` is loaded (playing waits for it). */
  isReady(step) {
    return this.panelFrames(step).every((f) => this.frames.peek(f.run, f.layer, f.kind, f.step));
  }

  /** The frame each panel shows at `step` (its run's latest of that kind at or before it), where there is one. */
  panelFrames(step) {
    const frames = [];
    for (const kind of this.sections.keys()) {
      for (const s of this.shown) {
        const shownStep = stepAtOrBefore((s.info && s.info.kinds[kind]) || [], step);
        if (shownStep !== null) frames.push({ run: s.run, layer: this.layer, kind, step: shownStep });
      }
    }
    return frames;
  }

  clearFrameErrors() {
    for (const key of [...(this.errors.messages ? this.errors.messages.keys() : [])]) {
      if (key.startsWith('frame:')) this.errors.clear(key);
    }
  }

  /** Width available to one panel, in CSS pixels. */
  availableWidth() {
    const columns = this.shown.length > 1 ? this.shown.length + 1 : 1;
    const total = this.sectionsEl.clientWidth || document.documentElement.clientWidth - 300;
    return Math.max(160, Math.floor((total - 58) / columns) - (columns > 1 ? 24 : 0));
  }

  redraw() {
    const width = this.availableWidth();
    for (const section of this.sections.values()) for (const panel of section.allPanels()) panel.draw(width);
  }
}
