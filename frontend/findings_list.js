// The findings of the shown runs (GET /findings), listed above the views: root causes first (non-finite
// values and exploding gradients, highlighted as severe, then dead units, which make the gradients
// before them zero or vanishing), then the others by step. Only the list is ordered so; /findings
// keeps the recorder's order. Collapsible; a run without findings says so in one line. A click on a
// finding opens its layer at its step.
// Hooks: .xray-findings, [data-finding][data-rule][data-layer][data-step][data-run],
// .xray-findings-none[data-run][data-health] (off: recorded with health=False).

import { el } from './dom.js';
import { fetchFindings } from './health_api.js';
import { formatValue } from './format.js';

/** Rules whose steps are marked on the timeline, most severe first. */
export const SEVERE_RULES = ['nonfinite', 'exploding_gradient'];
/** Rules listed first, in this order: the causes that other findings (zero or vanishing gradients) follow from. */
export const ROOT_CAUSE_RULES = [...SEVERE_RULES, 'dead_units'];

/** @typedef {import('./health_api.js').Finding & {run: string}} RunFinding */

/**
 * Root causes first (ROOT_CAUSE_RULES, in order), then the main run's before the compared runs', then
 * by step and layer.
 * @param {RunFinding[]} findings
 * @param {string[]} [runs]  The shown runs, main run first.
 * @returns {RunFinding[]}
 */
export function sortFindings(findings, runs = []) {
  const rank = (f) => { const i = ROOT_CAUSE_RULES.indexOf(f.rule); return i < 0 ? ROOT_CAUSE_RULES.length : i; };
  const order = (f) => { const i = runs.indexOf(f.run); return i < 0 ? runs.length : i; };
  return findings.slice().sort((a, b) => rank(a) - rank(b) || order(a) - order(b) || a.step - b.step || a.layer.localeCompare(b.layer));
}

export class FindingsList {
  /**
   * @param {{onOpen: (finding: RunFinding) => void, onChange?: (findings: RunFinding[]) => void,
   *   errors?: {set: Function, clear: Function}}} deps
   */
  constructor(deps) {
    this.deps = deps;
    this.seq = 0;
    /** @type {RunFinding[]} */
    this.findings = [];
    this.signature = '';
    this.element = el('details', 'xray-findings');
    this.element.open = true;
    this.summary = el('summary', 'xray-findings-summary', 'Findings');
    this.list = el('ol', 'xray-findings-list');
    this.none = el('div', 'xray-findings-nones');
    this.element.append(this.summary, this.none, this.list);
    this.element.hidden = true;
  }

  /**
   * Re-reads the findings of the shown runs (runs grow: called on every refresh).
   * @param {string[]} runs
   */
  async update(runs) {
    const seq = ++this.seq;
    const results = await Promise.all(runs.map((run) => fetchFindings(run).then(
      (findings) => { if (this.deps.errors) this.deps.errors.clear(`findings:${run}`); return findings; },
      (error) => { if (this.deps.errors) this.deps.errors.set(`findings:${run}`, error); return null; },
    )));
    if (seq !== this.seq) return;
    const all = [];
    results.forEach((found, i) => { if (found) for (const f of found.findings) all.push({ ...f, run: runs[i] }); });
    this.findings = sortFindings(all, runs);
    const signature = JSON.stringify([runs, results.map((r) => r !== null), this.findings]);
    if (signature === this.signature) return;
    this.signature = signature;
    this.render(runs, results);
    if (this.deps.onChange) this.deps.onChange(this.findings);
  }

  /** @param {string[]} runs @param {({findings: object[], health: boolean}|null)[]} results */
  render(runs, results) {
    this.element.hidden = runs.length === 0;
    this.none.replaceChildren(...runs.flatMap((run, i) => {
      const found = results[i];
      if (!found || found.findings.length) return [];
      // A run recorded with health=False was never checked: not "no findings", which reads as healthy.
      const text = found.health ? `${run}: no findings` : `${run}: training health was off (recorded with health=False), nothing was checked`;
      const line = el('div', 'xray-findings-none xray-muted', text);
      line.dataset.run = run;
      line.dataset.health = found.health ? 'on' : 'off';
      return [line];
    }));
    const severe = this.findings.filter((f) => SEVERE_RULES.includes(f.rule)).length;
    const count = this.findings.length;
    this.summary.textContent = count
      ? `Findings: ${count}${severe ? ` (${severe} severe)` : ''}`
      : 'Findings';
    this.summary.classList.toggle('xray-findings-severe', severe > 0);
    this.list.replaceChildren(...this.findings.map((f) => this.item(f, runs.length > 1)));
  }

  /** @param {RunFinding} f @param {boolean} showRun */
  item(f, showRun) {
    const li = el('li', `xray-finding${SEVERE_RULES.includes(f.rule) ? ' xray-finding-severe' : ''}`);
    li.dataset.finding = '';
    li.dataset.rule = f.rule;
    li.dataset.layer = f.layer;
    li.dataset.step = String(f.step);
    li.dataset.run = f.run;
    li.tabIndex = 0;
    li.setAttribute('role', 'button');
    const steps = f.last_step !== undefined && f.last_step !== null && f.last_step !== f.step
      ? `steps ${f.step}–${f.last_step}` : `step ${f.step}`;
    li.title = `Open ${f.layer} at step ${f.step}`;
    li.append(
      el('span', 'xray-finding-rule', f.rule),
      el('span', 'xray-finding-layer', f.layer),
      el('span', 'xray-finding-steps', steps),
      el('span', 'xray-finding-value', f.value === null || f.value === undefined ? '' : formatValue(f.value)),
      el('span', 'xray-finding-message', f.message || ''),
    );
    if (showRun) li.prepend(el('span', 'xray-finding-run', f.run));
    li.addEventListener('click', () => this.deps.onOpen(f));
    li.addEventListener('keydown', (e) => {
      if (e.key === 'Enter' || e.key === ' ') { e.preventDefault(); e.stopPropagation(); this.deps.onOpen(f); }
    });
    return li;
  }

  /** Steps to mark on the timeline: those of severe findings. */
  marks() {
    return this.findings.filter((f) => SEVERE_RULES.includes(f.rule)).map((f) => ({ step: f.step, rule: f.rule, layer: f.layer, run: f.run }));
  }
}
