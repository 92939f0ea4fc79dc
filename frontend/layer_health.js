// The layer view's training health, below the heatmaps: what xray.prune(dry_run=True) would mask for
// the layer ([data-prune][data-layer][data-units]), charts of its statistics over every measured
// iteration (one series per shown run, the timeline's step marked), the per-channel variance at the
// step, epoch aggregates; and the dead units of a panel's step for the heatmaps' outlines.

import { el } from './dom.js';
import { baseLayer } from './graph_model.js';
import { HealthChart } from './health_charts.js';
import { fetchHealthVector, fetchLayerHealth, fetchPrunePlan } from './health_api.js';
import { loadHealthStyles } from './health_scale.js';

/** The charts over steps, in order: statistic, title, axis kind. */
const STEP_CHARTS = [
  ['grad_mean', 'gradient mean', ''],
  ['grad_absmax', 'gradient abs max', 'log'],
  ['grad_l2', 'gradient L2', 'log'],
  ['weight_l2', 'weight L2', 'log'],
  ['update_ratio', 'update ratio', 'log'],
  ['dead_fraction', 'dead fraction', 'unit'],
  ['saturation', 'saturation', 'unit'],
];
const VECTOR_DEBOUNCE_MS = 100;

/**
 * The step range every step chart of a layer shares (so the step marker sits at one place in all of
 * them, whatever each statistic's pace), or undefined without steps.
 * @param {{stats: Object<string, {steps: number[]}>}[]} healths
 * @returns {[number, number]|undefined}
 */
function sharedSteps(healths) {
  let lo = Infinity;
  let hi = -Infinity;
  for (const h of healths) {
    for (const [stat] of STEP_CHARTS) {
      const steps = h.stats[stat] && h.stats[stat].steps;
      if (steps && steps.length) {
        lo = Math.min(lo, steps[0]);
        hi = Math.max(hi, steps[steps.length - 1]);
      }
    }
  }
  return lo <= hi ? [lo, hi > lo ? hi : lo + 1] : undefined;
}

export class LayerHealth {
  constructor() {
    loadHealthStyles();
    this.element = el('section', 'xray-health-section');
    this.element.hidden = true;
    this.title = el('h3', 'xray-kind-title', 'Training health');
    this.prune = el('div', 'xray-prune', '');
    this.prune.hidden = true;
    this.grid = el('div', 'xray-health-grid');
    this.element.append(this.title, this.prune, this.grid);
    /** @type {HealthChart[]} */ this.charts = [];
    /** @type {HealthChart|null} */ this.vector = null;
    /** @type {Map<string, Promise<any>>} */ this.cache = new Map();
    this.signature = null;
    this.tokens = [];
    this.step = null;
    this.lacking = new Set();
    this.withVector = new Set();
    this.seq = 0;
    this.timer = null;
  }

  /**
   * Shows the health of a layer for the shown runs; refetches when the layer, the runs or the data
   * (a reload gives new `info` objects) changed.
   * @param {string} layer
   * @param {{run: string, info: any, lacks?: boolean}[]} shown  `lacks`: the run's model has no such layer (not asked)
   * @param {number} width  Width of the section, CSS pixels.
   */
  show(layer, shown, width) {
    const runs = shown.map((s) => s.run);
    const signature = JSON.stringify([baseLayer(layer), runs]);
    const tokens = shown.map((s) => s.info);
    if (signature === this.signature && tokens.every((t, i) => t === this.tokens[i])) return;
    if (tokens.some((t, i) => t !== this.tokens[i])) this.cache.clear();
    this.signature = signature;
    this.tokens = tokens;
    this.lacking = new Set(shown.filter((s) => s.lacks).map((s) => s.run));
    this.load(baseLayer(layer), runs, shown[0] && shown[0].info, width);
  }

  cached(key, load) {
    if (!this.cache.has(key)) this.cache.set(key, load().catch((e) => { this.cache.delete(key); throw e; }));
    return this.cache.get(key);
  }

  async load(layer, runs, info, width) {
    const seq = ++this.seq;
    this.layer = layer;
    this.runs = runs;
    const chartWidth = Math.max(240, Math.min(420, Math.floor((width - 40) / 3)));
    const none = { stats: {}, epochs: {} };
    // Cached at once (the heatmaps' dead units look here first); a run recorded without health is not asked.
    const [healths, plan] = await Promise.all([
      Promise.all(runs.map((run) => this.cached(`layer\u0000${run}\u0000${layer}`, async () => {
        const runPlan = await this.plan(run);
        return (runPlan && !runPlan.health) || this.lacking.has(run) ? none : fetchLayerHealth(run, layer, chartWidth);
      }).catch(() => none))),
      this.plan(runs[0]),
    ]);
    if (seq !== this.seq) return;
    for (const c of [...this.charts, ...(this.vector ? [this.vector] : [])]) c.destroy();
    this.charts = [];
    this.vector = null;
    this.showPrune(layer, plan, info);
    const xRange = sharedSteps(healths);
    const make = (stat, title, axis, kind, series) => new HealthChart({
      stat, title, layer, runs, axis, width: chartWidth, log: kind === 'log', unit: kind === 'unit', bars: axis === 'unit', series,
      xRange: axis === 'step' ? xRange : undefined,
    });
    for (const [stat, title, kind] of STEP_CHARTS) {
      if (!healths.some((h) => h.stats[stat])) continue;
      const series = healths.map((h) => (h.stats[stat] ? { x: h.stats[stat].steps, y: h.stats[stat].values } : { x: [], y: [] }));
      this.charts.push(make(stat, title, 'step', kind, series));
    }
    const epochStats = [...new Set(healths.flatMap((h) => Object.keys(h.epochs)))].sort();
    for (const stat of epochStats) {
      const series = healths.map((h) => (h.epochs[stat] ? { x: h.epochs[stat].epochs, y: h.epochs[stat].mean } : { x: [], y: [] }));
      const kind = STEP_CHARTS.find((c) => c[0] === stat);
      this.charts.push(make(stat, `${kind ? kind[1] : stat}: epoch mean`, 'epoch', kind ? kind[2] : '', series));
    }
    this.withVector = new Set(runs.filter((_, i) => healths[i].stats.channel_var));  // runs asked for it at a step
    if (this.withVector.size) {
      this.vector = make('channel_var', 'channel variance at the step', 'unit', 'log', runs.map(() => ({ x: [], y: [] })));
      this.charts.push(this.vector);
    }
    this.grid.replaceChildren(...this.charts.map((c) => c.element));
    this.element.hidden = this.charts.length === 0 && this.prune.hidden;
    this.showStep(this.step);
  }

  /** The run's prune plan, which also says whether it was recorded with training health (null: unknown). */
  plan(run) {
    return this.cached(`prune\u0000${run}`, () => fetchPrunePlan(run)).catch(() => null);
  }

  showPrune(layer, plan, info) {
    this.prune.hidden = !plan;
    if (!plan) return;
    if (!plan.health) {
      Object.assign(this.prune.dataset, { layer, prune: 'off', units: '', parameters: '0' });
      this.prune.textContent = 'Training health was off for this run (recorded with health=False): no statistics, dead units or prune plan.';
      return;
    }
    const entry = plan.entries.find((e) => e.layer === layer);
    Object.assign(this.prune.dataset, { layer, prune: entry ? (entry.reason ? 'blocked' : 'mask') : 'none' });
    this.prune.dataset.units = entry ? entry.units.join(',') : '';
    this.prune.dataset.parameters = String(entry ? entry.parameters : 0);
    if (!entry) {
      this.prune.textContent = `No dead units in ${layer} to prune${plan.step !== null ? ` (as of step ${plan.step})` : ''}.`;
      return;
    }
    const n = entry.units.length;
    const units = `${n} dead unit${n === 1 ? '' : 's'}: ${entry.units.slice(0, 40).join(', ')}${n > 40 ? ', …' : ''}`;
    this.prune.textContent = entry.reason
      ? `${units} — cannot be pruned: ${entry.reason}`
      : `${units} — pruning would mask ${entry.parameters.toLocaleString()} parameters (xray.prune(dry_run=True))`;
  }

  /**
   * Marks the step on every chart (no refetch) and, after a short pause, fetches the vector at it.
   * @param {number|null} step
   */
  showStep(step) {
    this.step = step;
    for (const c of this.charts) c.setStep(step);
    clearTimeout(this.timer);
    if (!this.vector || step === null) return;
    const vector = this.vector;
    this.timer = setTimeout(async () => {
      const results = await Promise.all(this.runs.map((run) => (this.withVector.has(run)
        ? this.vectorAt(run, this.layer, 'channel_var', step).catch(() => null) : null)));
      if (vector !== this.vector || step !== this.step) return;
      const n = Math.max(0, ...results.map((r) => (r ? r.values.length : 0)));
      const x = Array.from({ length: n }, (_, i) => i);
      vector.setSeries(results.map((r) => ({ x, y: x.map((i) => (r && i < r.values.length ? r.values[i] : null)) })));
      vector.element.dataset.vectorStep = results.map((r) => (r ? r.step : '')).join(',');
    }, VECTOR_DEBOUNCE_MS);
  }

  vectorAt(run, layer, stat, step) {
    return this.cached(`vector\u0000${run}\u0000${layer}\u0000${stat}\u0000${step}`, () => fetchHealthVector(run, stat, layer, step));
  }

  /**
   * The dead units of a layer at the latest health step at or before `step` (null: no health there).
   * @param {string} run
   * @param {string} layer
   * @param {number} step
   * @returns {Promise<number[]|null>}
   */
  async deadUnits(run, layer, step) {
    const plan = await this.plan(run);
    if ((plan && !plan.health) || this.lacking.has(run)) return null;  // no health of it: nothing to ask for
    const charts = this.cache.get(`layer\u0000${run}\u0000${baseLayer(layer)}`);
    const health = charts ? await charts.catch(() => null) : null;
    if (health && !health.stats.dead_fraction) return null;  // no activation follows the layer: no dead units
    const r = await this.vectorAt(run, baseLayer(layer), 'dead', step).catch(() => null);
    if (!r) return null;
    const units = [];
    r.values.forEach((v, i) => { if (v >= 0.5) units.push(i); });
    return units;
  }
}
