// The one statistic picker, select[data-action=health-stat]: which training-health statistic the
// health matrix shows and the graph is coloured by. Its options are the run's recorded statistics
// (the built-in list until /health told which), plus, for the graph, "no colours" (value "").

import { el } from './dom.js';
import { HEALTH_STATS } from './health_api.js';

export class StatPicker {
  /** @param {(stat: string|null) => void} onChange */
  constructor(onChange) {
    this.element = el('label', 'xray-stat-picker');
    this.element.append(el('span', 'xray-muted', 'Health'));
    this.select = /** @type {HTMLSelectElement} */ (el('select', 'xray-select'));
    this.select.dataset.action = 'health-stat';
    this.select.setAttribute('aria-label', 'Training-health statistic');
    this.select.addEventListener('change', () => onChange(this.select.value || null));
    this.element.append(this.select);
    /** @type {string[]} */
    this.stats = HEALTH_STATS.map((s) => s.stat);
    this.signature = '';
    this.setStats(this.stats);
  }

  /**
   * The statistics offered: built-in ones in menu order, then the run's own.
   * @param {string[]} recorded
   */
  setStats(recorded) {
    const builtin = HEALTH_STATS.filter((s) => recorded.includes(s.stat));
    const custom = recorded.filter((s) => !HEALTH_STATS.some((b) => b.stat === s)).sort();
    const options = [['', 'no colours'], ...builtin.map((s) => [s.stat, s.label]), ...custom.map((s) => [s, s])];
    const signature = JSON.stringify(options);
    if (signature === this.signature) return;
    this.signature = signature;
    this.stats = recorded.slice();
    const value = this.select.value;
    this.select.replaceChildren(...options.map(([stat, label]) => {
      const option = /** @type {HTMLOptionElement} */ (el('option', '', label));
      option.value = stat;
      return option;
    }));
    this.select.value = value;
  }

  /**
   * Shows the state's statistic; in the health view "no colours" is not offered (it shows grad_l2).
   * @param {string|null} stat
   * @param {'graph'|'health'|string} view
   */
  show(stat, view) {
    this.element.hidden = view !== 'graph' && view !== 'health';
    const none = /** @type {HTMLOptionElement|null} */ (this.select.querySelector('option[value=""]'));
    if (none) none.hidden = view === 'health';
    const value = view === 'health' ? stat || 'grad_l2' : stat || '';
    if (value && !this.select.querySelector(`option[value="${CSS.escape(value)}"]`)) {
      const option = /** @type {HTMLOptionElement} */ (el('option', '', value));
      option.value = value;
      this.select.append(option);
    }
    this.select.value = value;
  }
}
