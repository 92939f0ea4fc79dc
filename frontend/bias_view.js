// The bias view ([data-view=bias]): Attention-IoU evaluations written by `xray.attention_iou`. One
// column per shown run (the main run, then the compared ones), each with the subgroup table at the
// timeline's step (the run's nearest evaluation at or before it) with the chance level beside every
// score, the scores over steps, and the example maps laid over their images.
//
// Interface (self-contained; the app shell owns the state and the timeline):
//   const view = new BiasView({errors, onBack});  view.mount(container, {api, state});
//   (api: the functions of bias_api.js, the default; a test may pass its own)
//   await view.update(state);   // state: {run, compare, step, bias?}: reloads the shown runs' evaluations
//   view.steps();               // the evaluation steps of the shown runs, for the timeline
//   await view.showStep(step);  // follows the timeline
// Hooks: select[data-action=bias-evaluation], .xray-bias-run[data-run], td[data-score][data-subgroup]
// (data-mean, data-chance, data-count), svg.xray-bias-chart[data-run], canvas.xray-bias-example[data-map].

import * as biasApi from './bias_api.js';
import { el, loadStylesheet } from './dom.js';
import { stepAtOrBefore, unionSteps } from './steps.js';
import { exampleFigures, SCORE_COLORS, scoreChart, subgroupTable } from './bias_draw.js';

/** @typedef {typeof import('./bias_api.js')} BiasApi */

const NO_EVALUATION = 'No bias evaluation in the shown runs yet: call '
  + 'xray.attention_iou(loader, target=..., protected=..., masks=...) to write one.';

export class BiasView {
  /**
   * @param {{errors?: {set: Function, clear: Function}, onBack?: () => void,
   *   onEvaluation?: (name: string) => (void|Promise<void>), api?: BiasApi}} [deps]
   */
  constructor(deps = {}) {
    this.errors = deps.errors || null;
    this.onBack = deps.onBack || null;
    this.onEvaluation = deps.onEvaluation || null;
    /** @type {BiasApi} */ this.api = deps.api || biasApi;
    /** @type {string[]} */ this.runs = [];
    /** @type {Map<string, {evaluations: any[], series: any|null, signature: string}>} */ this.info = new Map();
    /** @type {Map<string, Promise<any>>} */ this.cache = new Map();
    /** @type {Map<string, any>} */ this.columns = new Map();
    this.evaluation = null;
    this.signature = null;
    this.step = null;
    this.seq = 0;
    this.build();
  }

  build() {
    this.element = el('section', 'xray-bias-view');
    this.element.dataset.view = 'bias';
    const header = el('header', 'xray-header xray-bias-header');
    const row = el('div', 'xray-title-row');
    if (this.onBack) {
      const back = /** @type {HTMLButtonElement} */ (el('button', 'xray-button', '← Graph'));
      back.type = 'button';
      back.dataset.action = 'back-to-graph';
      back.addEventListener('click', () => this.onBack && this.onBack());
      row.append(back);
    }
    this.title = el('h2', 'xray-layer-title', 'Attention-IoU');
    this.select = /** @type {HTMLSelectElement} */ (el('select', 'xray-select'));
    this.select.dataset.action = 'bias-evaluation';
    this.select.setAttribute('aria-label', 'Bias evaluation');
    this.select.addEventListener('change', () => this.chooseEvaluation(this.select.value));
    this.summary = el('span', 'xray-muted xray-bias-summary', '');
    row.append(this.title, this.select, this.summary);
    header.append(row);
    this.hint = el('div', 'xray-hint xray-muted', '');
    this.hint.id = 'xray-bias-hint';
    this.body = el('div', 'xray-bias-runs');
    this.element.append(header, this.hint, this.body);
  }

  /** @param {HTMLElement} container @param {{api?: BiasApi, state?: any}} [options] */
  mount(container, options = {}) {
    if (options.api) this.api = options.api;
    loadStylesheet('./bias_view.css', import.meta.url);
    container.append(this.element);
    return options.state ? this.update(options.state) : Promise.resolve();
  }

  /** @param {string} message */
  clear(message) {
    this.signature = null;
    this.body.replaceChildren();
    this.columns.clear();
    this.hint.textContent = message;
    this.hint.hidden = !message;
  }

  /** @param {{run: string|null, compare?: string[], step?: number|null, bias?: string|null}} state */
  async update(state) {
    loadStylesheet('./bias_view.css', import.meta.url);
    const seq = ++this.seq;
    const runs = state.run ? [state.run, ...(state.compare || []).filter((r) => r !== state.run)] : [];
    const loaded = await Promise.all(runs.map((run) => this.loadRun(run)));
    if (seq !== this.seq) return;
    this.runs = runs.filter((_, i) => loaded[i]);
    const names = [...new Set(this.runs.flatMap((run) => this.info.get(run).evaluations.map((e) => e.name)))].sort();
    if (!names.length) {
      this.select.hidden = true;
      this.summary.textContent = '';
      this.clear(runs.length ? NO_EVALUATION : 'No run.');
      return;
    }
    const wanted = state.bias && names.includes(state.bias) ? state.bias : this.evaluation;
    this.evaluation = wanted && names.includes(wanted) ? wanted : names[0];
    this.select.replaceChildren(...names.map((name) => Object.assign(el('option', '', name), { value: name })));
    this.select.value = this.evaluation;
    this.select.hidden = names.length < 2;
    await Promise.all(this.runs.map((run) => this.loadSeries(run)));
    if (seq !== this.seq) return;
    const signature = JSON.stringify([this.runs, this.evaluation, this.runs.map((run) => this.info.get(run).series)]);
    if (signature !== this.signature) {
      this.signature = signature;
      this.buildColumns();
    }
    if (state.step !== undefined) await this.showStep(state.step);
  }

  /** @returns {number[]} The shown runs' steps of the chosen evaluation, sorted. */
  steps() {
    return unionSteps(this.runs.map((run) => this.runSteps(run)));
  }

  /** @param {string} run @returns {number[]} */
  runSteps(run) {
    const info = this.info.get(run);
    const evaluation = info && info.evaluations.find((e) => e.name === this.evaluation);
    return evaluation ? evaluation.steps : [];
  }

  /** @param {string} name */
  async chooseEvaluation(name) {
    this.evaluation = name;
    await Promise.all(this.runs.map((run) => this.loadSeries(run)));
    this.signature = null;
    this.buildColumns();
    // the app sets the timeline to this evaluation's steps (another evaluation may run at other steps)
    if (this.onEvaluation) await this.onEvaluation(name);
    else await this.showStep(this.step);
  }

  /** @param {string} run @returns {Promise<boolean>} Whether the run answered. */
  async loadRun(run) {
    try {
      const evaluations = await this.api.fetchBiasEvaluations(run);
      const signature = JSON.stringify(evaluations);
      const known = this.info.get(run);
      if (!known || known.signature !== signature) this.forget(run);
      const series = known && known.signature === signature ? known.series : null;
      this.info.set(run, { evaluations, series, signature });
      if (this.errors) this.errors.clear(`bias:${run}`);
      return true;
    } catch (e) {
      if (this.errors) this.errors.set(`bias:${run}`, e);
      return false;
    }
  }

  /** Drops what is cached of a run (its evaluations changed: new steps, or rewritten). @param {string} run */
  forget(run) {
    for (const key of [...this.cache.keys()]) if (key.split('\u0000')[1] === run) this.cache.delete(key);
  }

  /** @param {string} run */
  async loadSeries(run) {
    const info = this.info.get(run);
    if (!this.runSteps(run).length) { info.series = null; return; }
    try {
      info.series = await this.fetch('series', run, null);
    } catch (e) {
      info.series = null;
      if (this.errors) this.errors.set(`bias:${run}`, e);
    }
  }

  /**
   * A cached read of one run's evaluation: its series (step null), or its result or examples at a step.
   * @param {'series'|'result'|'examples'} what
   * @param {string} run
   * @param {number|null} step
   */
  fetch(what, run, step) {
    const key = [what, run, this.evaluation, step].join('\u0000');
    if (!this.cache.has(key)) {
      const evaluation = this.evaluation;
      const pending = what === 'series' ? this.api.fetchBiasSeries(run, evaluation)
        : what === 'result' ? this.api.fetchBiasResult(run, evaluation, step)
          : this.api.fetchBiasExamples(run, evaluation, step);
      pending.catch(() => this.cache.delete(key));
      this.cache.set(key, pending);
    }
    return this.cache.get(key);
  }

  buildColumns() {
    this.columns.clear();
    this.hint.hidden = true;
    this.body.style.gridTemplateColumns = `repeat(${Math.max(1, this.runs.length)}, minmax(0, 1fr))`;
    this.body.replaceChildren(...this.runs.map((run) => {
      const column = el('div', 'xray-bias-run');
      column.dataset.run = run;
      const heading = el('h3', 'xray-bias-run-title', run);
      const stepLine = el('div', 'xray-muted xray-bias-step', '');
      const table = el('div', 'xray-bias-table-wrap');
      const series = this.info.get(run).series;
      const chart = scoreChart(series || { steps: [], scores: [] }, run);
      const legend = el('div', 'xray-bias-legend');
      ((series && series.scores) || []).forEach((score, i) => {
        const item = el('span', 'xray-bias-legend-item', score.label);
        item.style.setProperty('--swatch', SCORE_COLORS[i % SCORE_COLORS.length]);
        legend.append(item);
      });
      legend.append(el('span', 'xray-muted', 'all images; dashed: chance'));
      const examples = el('div', 'xray-bias-examples');
      column.append(heading, stepLine, table, chart.element, legend, examples);
      this.columns.set(run, { column, stepLine, table, chart, examples, shown: undefined });
      return column;
    }));
    const latest = this.runs.length && this.info.get(this.runs[0]).series;
    const t = latest && latest.target;
    const p = latest && latest.protected;
    this.summary.textContent = t && p ? `target ${t.name}, protected ${p.name}` : '';
  }

  /**
   * Shows each run's evaluation at or before `step`; with no step (null: the timeline has none yet),
   * each run's last evaluation.
   * @param {number|null} step
   */
  async showStep(step) {
    this.step = step;
    const seq = this.seq;
    await Promise.all(this.runs.map(async (run) => {
      const parts = this.columns.get(run);
      if (!parts) return;
      const steps = this.runSteps(run);
      const shown = step === null || step === undefined
        ? (steps.length ? steps[steps.length - 1] : null)
        : stepAtOrBefore(steps, step);
      parts.chart.mark(shown);
      if (shown === parts.shown) return;
      parts.shown = shown;
      parts.column.dataset.step = shown === null ? '' : String(shown);
      if (shown === null) {
        parts.stepLine.textContent = steps.length
          ? `not evaluated yet at step ${step} (first evaluation: step ${steps[0]})`
          : 'no evaluation of this name';
        parts.table.replaceChildren();
        parts.examples.replaceChildren();
        return;
      }
      const before = step !== null && shown !== step ? ` (the evaluation at or before step ${step})` : '';
      parts.stepLine.textContent = `step ${shown}${before}`;
      try {
        const [result, examples] = await Promise.all([
          this.fetch('result', run, shown),
          this.fetch('examples', run, shown).catch(() => null),
        ]);
        if (seq !== this.seq || parts.shown !== shown) return;
        parts.table.replaceChildren(subgroupTable(result));
        parts.stepLine.textContent += ` · layer ${result.layer} · ${result.images} images`;
        parts.examples.replaceChildren(...(examples ? exampleFigures(examples) : []));
        if (this.errors) this.errors.clear(`bias:${run}`);
      } catch (e) {
        if (parts.shown !== shown) return;
        parts.table.replaceChildren(el('div', 'xray-error-text', e instanceof Error ? e.message : String(e)));
        if (this.errors) this.errors.set(`bias:${run}`, e);
      }
    }));
  }
}
