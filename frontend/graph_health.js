// The architecture view coloured by a training-health statistic (state.stat) at the timeline's step:
// each module node takes its layer's latest present value at or before the step, a collapsed group its
// worst member (non-finite first, then the largest magnitude). The unbinned /health matrix is fetched
// once per (run, stat, reload) and indexed per layer, so that scrubbing only binary-searches and sets
// fills and attributes of the elements already drawn (no layout). Nodes of layers with findings carry
// badges. Hooks: data-value on coloured nodes and groups, .xray-finding-badge[data-rule],
// .xray-health-legend[data-stat][data-scale].

import { el, svg } from './dom.js';
import { ancestors } from './graph_model.js';
import { HEALTH_STATS, fetchHealth } from './health_api.js';
import { drawLegend, healthScale } from './health_scale.js';
import { indexAtOrBefore } from './steps.js';

/** Letters of the finding badges. */
const RULE_BADGES = { nonfinite: '!', dead_units: '†', vanishing_gradient: '↓', zero_gradient: '0', exploding_gradient: '↑', saturation: 'S', update_ratio: 'u' };

/**
 * Per layer: the steps where it has a value and those values (present columns only), for binary search.
 * @param {import('./health_api.js').HealthMatrix} m
 * @returns {Map<string, {steps: Float64Array, values: Float32Array}>}
 */
export function indexMatrix(m) {
  const out = new Map();
  const n = m.steps.length;
  m.layers.forEach((layer, row) => {
    let count = 0;
    for (let c = 0; c < n; c++) count += m.present[row * n + c] ? 1 : 0;
    const steps = new Float64Array(count);
    const values = new Float32Array(count);
    for (let c = 0, k = 0; c < n; c++) {
      if (!m.present[row * n + c]) continue;
      steps[k] = m.lastSteps[c] ?? m.steps[c];
      values[k++] = m.values[row * n + c];
    }
    out.set(layer, { steps, values });
  });
  return out;
}

/** The value at the latest step at or before `step`, or undefined. */
export function valueAt(series, step) {
  const i = indexAtOrBefore(series.steps, step);
  return i < 0 ? undefined : series.values[i];
}

/** Whether `a` is worse than `b` (non-finite first, then the larger magnitude). */
function worse(a, b) {
  if (b === undefined) return true;
  const fa = Number.isFinite(a);
  const fb = Number.isFinite(b);
  if (fa !== fb) return !fa;
  return fa && Math.abs(a) > Math.abs(b);
}

export class GraphHealth {
  /** @param {import('./graph_view.js').GraphView} view */
  constructor(view) {
    this.view = view;
    this.element = el('div', 'xray-health-legend xray-muted');
    this.element.hidden = true;
    /** @type {Map<string, Promise<any>>} */ this.cache = new Map();
    this.token = null;
    this.run = null;
    this.stat = null;
    this.step = null;
    this.seq = 0;
    /** @type {Map<string, {steps: Float64Array, values: Float32Array}>|null} */ this.series = null;
    this.scale = null;
    /** @type {Map<string, any[]>} */ this.findings = new Map();
    /** @type {{g: SVGElement, rect: Element, layers: string[], value?: number}[]} */ this.targets = [];
    this.lastMs = 0;
  }

  /**
   * Colours by `stat` of `run` at `step`; `token` changes on every data reload (the run's layer list).
   * @param {string|null} run
   * @param {string|null} stat
   * @param {number|null} step
   * @param {object|undefined} token
   */
  async set(run, stat, step, token) {
    const seq = ++this.seq;
    if (token !== this.token) this.cache.clear();
    this.token = token;
    this.step = step;
    if (!run) return;
    try {
      const data = stat ? await this.cached(`health\u0000${run}\u0000${stat}`, () => fetchHealth(run, stat).then((m) => ({ m, series: indexMatrix(m), scale: healthScale(stat, [m]) }))) : null;
      if (seq !== this.seq) return;
      this.run = run;
      this.stat = stat;
      this.series = data ? data.series : null;
      this.scale = data ? data.scale : null;
      this.element.hidden = !data;
      if (data) {
        drawLegend(this.element, (HEALTH_STATS.find((s) => s.stat === stat) || { label: stat }).label, data.scale);
        this.element.dataset.stat = stat;
        this.element.dataset.run = run;
      }
    } catch (error) {
      if (seq !== this.seq) return;
      this.series = null;
      this.element.hidden = false;
      this.element.textContent = `No ${stat} colours: ${error instanceof Error ? error.message : error}`;
    }
    this.paint();
  }

  /**
   * The findings whose layers get a badge: the main run's, as the findings list read them (no second
   * request); the badges are redrawn at once.
   * @param {{layer: string, rule: string, message: string}[]} findings
   */
  setFindings(findings) {
    this.findings = new Map();
    for (const f of findings) this.findings.set(f.layer, [...(this.findings.get(f.layer) || []), f]);
    this.paint();
  }

  cached(key, load) {
    if (!this.cache.has(key)) this.cache.set(key, load().catch((e) => { this.cache.delete(key); throw e; }));
    return this.cache.get(key);
  }

  /** After the graph drew its elements: finds the targets, adds the badges, colours. */
  paint() {
    const { h } = this.view;
    this.targets = [];
    if (!h) return;
    const viewport = this.view.viewport;
    for (const b of viewport.querySelectorAll('.xray-finding-badge')) b.remove();
    const byGroup = new Map();
    for (const g of viewport.querySelectorAll('[data-group][data-expanded=false]')) byGroup.set(`group:${g.dataset.group}`, { g, layers: new Set() });
    if (byGroup.size) {
      for (const node of h.nodes.values()) {
        if (node.kind !== 'module') continue;
        for (const key of ancestors(h, node.id)) if (byGroup.has(key)) byGroup.get(key).layers.add(node.module);
      }
    }
    const add = (g, layers) => {
      this.targets.push({ g, rect: g.querySelector('rect'), layers });
      const found = layers.flatMap((l) => this.findings.get(l) || []);
      const rules = new Map();
      for (const f of found) if (!rules.has(f.rule)) rules.set(f.rule, f);
      let x = Number(g.querySelector('rect').getAttribute('width')) - 9;
      for (const f of rules.values()) {
        const badge = svg('g', { class: 'xray-finding-badge', transform: `translate(${x},0)` });
        badge.dataset.rule = f.rule;
        badge.dataset.layer = f.layer;
        badge.append(svg('circle', { r: 7 }));
        const t = svg('text', { y: 3.5, 'text-anchor': 'middle' });
        t.textContent = RULE_BADGES[f.rule] || '?';
        const title = svg('title', {});
        title.textContent = f.message;
        badge.append(t, title);
        g.append(badge);
        x -= 16;
      }
    };
    for (const g of viewport.querySelectorAll('.xray-node[data-layer]')) add(g, [g.dataset.layer]);
    for (const { g, layers } of byGroup.values()) add(g, [...layers]);
    this.showStep(this.step);
  }

  /**
   * Recolours the drawn nodes for a step: no layout, no fetch.
   * @param {number|null} step
   */
  showStep(step) {
    const t0 = performance.now();
    this.step = step;
    const { series, scale } = this;
    for (const target of this.targets) {
      let value;
      if (series && step !== null) {
        for (const layer of target.layers) {
          const s = series.get(layer);
          const v = s && valueAt(s, step);
          if (v !== undefined && worse(v, value)) value = v;
        }
      }
      if (Object.is(value, target.value) && target.painted === Boolean(series)) continue;
      target.value = value;
      target.painted = Boolean(series);
      const { g, rect } = target;
      if (value === undefined) {
        delete g.dataset.value;
        g.classList.remove('xray-health-coloured', 'xray-health-dark');
        if (rect) rect.style.fill = '';
      } else {
        g.dataset.value = String(value);
        g.classList.add('xray-health-coloured');
        g.classList.toggle('xray-health-dark', scale.dark(value));
        if (rect) rect.style.fill = scale.color(value);
      }
    }
    this.lastMs = performance.now() - t0;
    this.element.dataset.step = String(step);
  }
}
