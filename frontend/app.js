// The app shell: builds the page, keeps the shared state (state.js) and wires the views
// (graph_view.js, layer_view.js, bias_view.js, health_view.js), the findings (findings_list.js), the
// timeline and the URL state together. Loading on reloads is in app_load.js.

import { ComparePicker } from './compare_picker.js';
import { RunPicker, LayerList } from './controls.js';
import { ErrorBanner } from './error_banner.js';
import { FindingsList } from './findings_list.js';
import { FrameSource } from './frames.js';
import { GraphView } from './graph_view.js';
import { baseLayer, diffArchitectures } from './graph_model.js';
import { HealthView } from './health_view.js';
import { StatPicker } from './health_picker.js';
import { el, loadStylesheet } from './dom.js';
import { connectToHost, DATA_RELOADED, RUNS_CHANGED } from './host.js';
import { LayerView } from './layer_view.js';
import { BiasView } from './bias_view.js';
import { loadMethods } from './app_load.js';
import { RunData } from './run_data.js';
import { Store } from './state.js';
import { findingStep, indexAtOrBefore } from './steps.js';
import { Timeline } from './timeline.js';
import { closeMatches, didYouMean } from './close_matches.js';
import { stackStickyBars } from './sticky_bars.js';
import { encodeUrlData, onHashNavigation, parseUrlData, readUrlData, writeUrlData } from './url_state.js';

/** How often runs are re-read without a host reload. */
const POLL_MS = 30000;

export class XrayApp {
  constructor() {
    this.store = new Store();
    this.data = new RunData();
    this.frames = new FrameSource((run) => this.render());
    this.errors = new ErrorBanner();
    this.runPicker = new RunPicker((run) => this.selectRun(run));
    this.comparePicker = new ComparePicker((runs) => this.setCompare(runs));
    this.layerList = new LayerList((name) => this.openLayer(name));
    this.timeline = new Timeline((committed) => this.onStep(!committed), (step) => this.store.state.view === 'bias' || this.layerView.isReady(step));
    this.graph = new GraphView({ onOpenLayer: (layer) => this.openLayer(layer), onError: (e) => this.errors.set('graph', e) });
    this.layerView = new LayerView({
      frames: this.frames,
      errors: this.errors,
      onBack: () => this.showGraph(),
      onScale: (scale) => { this.store.set({ scale }); this.render(); },
      onKind: (kind) => { this.store.set({ kind }); this.render(); },
      onStale: () => this.staleRefresh(),
      onWallTime: (t) => this.timeline.setWallTime(t),
    });
    this.biasView = new BiasView({ errors: this.errors, onBack: () => this.showGraph(), onEvaluation: (bias) => { this.store.set({ bias }); return this.render(); } });
    this.healthView = new HealthView({
      onBack: () => this.showGraph(),
      onOpen: (layer, step, run, nonfinite) => this.openAt(layer, step, nonfinite), // a NaN cell: where the NaN shows
      onStats: (stats) => this.statPicker.setStats(stats),
    });
    this.findings = new FindingsList({
      errors: this.errors,
      onOpen: (finding) => this.openAt(finding.layer, finding.step, finding.rule === 'nonfinite'),
      onChange: (found) => {
        this.timeline.setMarks(this.findings.marks());
        this.graph.health.setFindings(found.filter((f) => f.run === this.store.state.run)); // badges (graph_health.js)
      },
    });
    this.statPicker = new StatPicker((stat) => { this.store.set({ stat }); this.render(); });
    this.followEnd = true;
    this.parkedAt = /** @type {number|null} */ (null); // a step parked on that the run lost (setTimeline)
    this.keep = null;
    this.loading = false;
    this.seq = 0;
    this.staleAt = 0;
    this.refreshing = null;
    this.refreshAgain = false;
    this.healthKey = null;
    this.urlReady = false;
    this.pendingUrl = {};
    this.askedLayer = null; // a layer the URL named, told about if the run lacks it
    let urlTimer = null;
    this.store.subscribe(() => {
      if (!this.urlReady) return;
      clearTimeout(urlTimer);
      urlTimer = setTimeout(() => writeUrlData(encodeUrlData(this.store.state)), 150);
    });
    this.build();
  }

  build() {
    const root = el('div', 'xray-root');
    const sidebar = el('aside', 'xray-sidebar');
    const brand = el('div', 'xray-brand');
    brand.append(el('span', 'xray-brand-name', 'Xray'), el('span', 'xray-muted', 'layer tensors'));
    this.status = el('div', 'xray-status xray-muted', '');
    const healthButton = el('button', 'xray-button xray-health-open', 'Training health');
    healthButton.dataset.action = 'health-view';
    healthButton.addEventListener('click', () => { this.store.set({ view: 'health' }); this.render(); });
    const biasButton = el('button', 'xray-button xray-bias-open', 'Bias (Attention-IoU)');
    biasButton.dataset.action = 'bias-view';
    biasButton.addEventListener('click', () => { this.store.set({ view: 'bias' }); this.render(); });
    const buttons = el('div', 'xray-view-buttons');
    buttons.append(healthButton, biasButton);
    sidebar.append(brand, this.runPicker.element, this.comparePicker.element, buttons, this.layerList.element, this.status);
    const main = el('main', 'xray-main');
    this.empty = el('div', 'xray-empty');
    this.empty.id = 'xray-empty';
    this.empty.hidden = true;
    const p2 = el('p', '');
    p2.append('Add ', el('code', '', 'xray.take_graphs(step)'), ' to your training loop and point TensorBoard’s ',
      el('code', '', '--logdir'), ' at its log directory. This page looks again every 30 s and whenever TensorBoard reloads.');
    this.empty.append(el('p', 'xray-empty-title', 'No Xray data yet.'), p2);
    this.content = el('div', 'xray-content');
    this.content.hidden = true;
    this.timeline.element.append(this.statPicker.element);
    this.content.append(this.findings.element, this.timeline.element, this.graph.element, this.layerView.element, this.biasView.element, this.healthView.element);
    main.append(this.errors.element, this.empty, this.content);
    root.append(sidebar, main);
    document.body.append(root);
    stackStickyBars(main, this.errors.element, this.timeline.element);
    document.body.classList.add('xray-body');
    loadStylesheet('./health.css', import.meta.url);
  }

  async start() {
    const host = connectToHost({
      [DATA_RELOADED]: () => { this.frames.dropRanges(); return this.refresh(); },
      [RUNS_CHANGED]: () => this.refresh(),
    });
    this.pendingUrl = parseUrlData(await readUrlData(host));
    onHashNavigation(() => this.followUrl());
    setInterval(() => this.refresh(), POLL_MS);
    document.addEventListener('keydown', (e) => this.timeline.onKey(e, this.store.state.view === 'layer'));
    let resizeTimer = null;
    window.addEventListener('resize', () => {
      clearTimeout(resizeTimer);
      resizeTimer = setTimeout(() => { this.layerView.redraw(); this.healthView.resized(); }, 150);
    });
    await this.refresh();
    this.urlReady = true;
    writeUrlData(encodeUrlData(this.store.state)); // what the user chose while the first load ran
  }

  /** Draws everything from the state and the loaded data. */
  async render() {
    const s = this.store.state;
    const main = s.run;
    const shown = this.store.shownRuns;
    this.runPicker.setRuns(s.runs, main);
    this.comparePicker.set(s.runs, main, s.compare);
    if (main === null || !this.data.layers.has(main)) return;
    const layers = this.data.layers.get(main).layers;
    this.layerList.setLayers(layers, s.view === 'layer' ? s.layer : null);
    const arch = this.data.arch(main);
    let { view, layer } = s;
    if (!arch && view === 'graph' && layers.length) view = 'layer';
    // A layer of the model that no shown run recorded (health covers every layer, the plan only some)
    // opens too: its health charts, and a hint that it is not recorded; any other falls back.
    const known = layer && (shown.some((r) => this.data.layer(r, layer)) || this.data.hasModelLayer(main, layer.split('[')[0]));
    const asked = this.askedLayer;
    this.askedLayer = null;
    if (view === 'layer' && !known) {
      const fallback = layers.length ? layers[0].name : null;
      if (asked && asked === layer) this.noteMissingLayer(layer, main, fallback);
      layer = fallback;
    }
    this.store.set({ view, layer });
    this.graph.element.hidden = view !== 'graph';
    this.layerView.element.hidden = view !== 'layer';
    this.biasView.element.hidden = view !== 'bias';
    this.healthView.element.hidden = view !== 'health';
    this.statPicker.show(s.stat, view);
    const other = s.compare.length ? this.data.arch(s.compare[0]) : null;
    this.graph.setRecorded(this.data.marks(main));
    this.graph.setDiff(arch && other ? toDiff(diffArchitectures(arch, other), s.compare[0]) : null);
    const graphReady = this.graph.setArchitecture(arch);
    let steps;
    let healthReady = null;
    if (view === 'bias') {
      await this.biasView.update({ ...s, step: undefined });
      steps = this.biasView.steps();
    } else if (view === 'layer' && layer !== null) {
      this.layerView.show(layer, shown.map((run) => ({ run, info: this.data.layer(run, layer), lacks: this.data.lacksLayer(run, layer) })), { scale: s.scale, kind: s.kind });
      steps = this.layerView.steps();
      if (!steps.length) steps = this.data.steps(main); // a layer not recorded: the run's steps, for its health charts
    } else {
      if (view === 'layer') this.layerView.clear('This run has no recorded layers yet.');
      steps = this.data.steps(main);
    }
    if (view === 'health') {
      const stat = s.stat || 'grad_l2';
      const key = JSON.stringify([shown, stat]);
      if (key !== this.healthKey) {
        this.healthKey = key;
        healthReady = this.healthView.update({ runs: shown, stat });
      }
    }
    this.setTimeline(steps);
    this.graph.health.set(main, s.stat, this.timeline.step, this.data.layers.get(main)); // health colours of the graph (graph_health.js)
    if (view !== 'bias') this.timeline.setWallTime(null); // the layer view sets its frame's below (a cached one at once)
    if (view === 'layer') this.layerView.showStep(this.timeline.step, false);
    if (view === 'health') this.healthView.showStep(this.timeline.step);
    if (view === 'bias') this.biasView.showStep(this.timeline.step);
    await Promise.all([graphReady, healthReady]);
  }

  /** @param {number[]} steps */
  setTimeline(steps) {
    const keep = this.keep || { step: this.parkedAt ?? this.store.state.step, atEnd: this.followEnd };
    this.keep = null;
    this.parkedAt = null;
    let index = steps.length - 1;
    if (keep.opened !== undefined && steps.length) {
      const found = findingStep(steps, keep.step, keep.opened);
      index = found.index;
      if (found.note) this.errors.note('step', found.note);
    } else if (!keep.atEnd && keep.step !== null && keep.step !== undefined) {
      index = Math.max(0, indexAtOrBefore(steps, keep.step));
      // parked on a step the run lost (resumed from an earlier one): the last step, not following, until it is back
      if (steps.length && index === steps.length - 1 && keep.step > steps[index]) this.parkedAt = keep.step;
    }
    this.timeline.setSteps(steps, index);
    this.followEnd = this.parkedAt === null && index >= steps.length - 1;
    this.store.set({ step: this.timeline.step });
  }

  /** @param {boolean} dragging */
  onStep(dragging) {
    this.errors.clear('step');
    this.parkedAt = null; // the user moved: their step now
    const steps = this.timeline.steps;
    this.followEnd = this.timeline.index >= steps.length - 1;
    this.store.set({ step: this.timeline.step });
    if (this.store.state.view === 'layer') this.layerView.showStep(this.timeline.step, dragging);
    if (this.store.state.view === 'health') this.healthView.showStep(this.timeline.step);
    if (this.store.state.view === 'bias') this.biasView.showStep(this.timeline.step);
    this.graph.health.showStep(this.timeline.step); // recolours the graph, no layout (graph_health.js)
  }

  /** @param {string} run */
  async selectRun(run) {
    if (run === this.store.state.run) return;
    this.errors.clear('step'); // a finding's "no capture at that step" was said of the run shown before
    this.keep = { step: this.store.state.step, atEnd: this.followEnd };
    this.store.set({ run, compare: this.store.state.compare.filter((r) => r !== run) });
    this.loading = true;
    this.layerList.setBusy(true);
    this.layerList.setSelected(null);
    this.layerView.clear('Loading layers…');
    this.timeline.setSteps([], 0);
    await this.loadShown();
  }

  /** @param {string[]} compare */
  async setCompare(compare) {
    this.store.set({ compare });
    await this.loadShown();
  }

  /** @param {string} layer */
  openLayer(layer) {
    if (this.loading) return; // the list belongs to the run that is being replaced
    this.store.set({ view: 'layer', layer });
    return this.render();
  }

  /**
   * Opens a layer at a step (a finding, a cell of the health matrix): the timeline goes to the
   * nearest recorded step at or before it, or at or after it with `after` (steps.js: findingStep),
   * with a notice when the step has no capture.
   * @param {string} layer
   * @param {number} step
   * @param {boolean} [after]
   */
  openAt(layer, step, after = false) {
    if (this.loading) return;
    this.errors.clear('step');
    this.keep = { step, atEnd: false, opened: after };
    this.followEnd = false;
    this.store.set({ view: 'layer', layer });
    return this.render();
  }

  /** A link's layer the run lacks: said above the view with the run's close matches (each a button that opens it). */
  noteMissingLayer(layer, run, fallback) {
    const modules = ((this.data.arch(run) || {}).nodes || []).filter((n) => n.kind === 'module').map((n) => n.module);
    const close = closeMatches(layer, [...this.data.layers.get(run).layers.map((l) => l.name), ...modules]);
    this.errors.note('url-layer', `The link's layer '${layer}' is not in run '${run}'${didYouMean(close)}${fallback ? `; showing '${fallback}'` : ''}.`,
      close.map((name) => ({ text: `Open '${name}'`, run: () => this.openLayer(name) })));
  }

  async showGraph() {
    const layer = this.store.state.layer;
    this.store.set({ view: 'graph' });
    await this.render();
    if (layer) await this.graph.highlightLayer(baseLayer(layer));
  }
}

Object.assign(XrayApp.prototype, loadMethods);

function toDiff(diff, other) {
  return { only: new Set(diff.onlyA), changed: new Set(diff.changed), missing: diff.onlyB, other };
}
