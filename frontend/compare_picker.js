// Picks the runs shown next to the main run: one checkbox per other run (input[data-compare-run]).

import { el } from './dom.js';

export class ComparePicker {
  /** @param {(runs: string[]) => void} onChange  The checked runs, in run-list order. */
  constructor(onChange) {
    this.onChange = onChange;
    this.element = el('div', 'xray-field xray-compare-picker');
    this.element.id = 'xray-compare';
    this.label = el('div', 'xray-field-label', 'Compare with');
    this.list = el('div', 'xray-compare-list');
    this.element.append(this.label, this.list);
    this.signature = '';
  }

  /**
   * @param {string[]} runs  Every run.
   * @param {string|null} main  The main run (not offered).
   * @param {string[]} checked
   */
  set(runs, main, checked) {
    const others = runs.filter((r) => r !== main);
    const signature = JSON.stringify(others);
    if (signature !== this.signature) {
      this.signature = signature;
      this.list.replaceChildren(...others.map((run) => {
        const label = el('label', 'xray-compare-run');
        const box = /** @type {HTMLInputElement} */ (el('input'));
        box.type = 'checkbox';
        box.dataset.compareRun = run;
        box.addEventListener('change', () => this.onChange(this.checked()));
        label.append(box, el('span', '', run));
        return label;
      }));
    }
    for (const box of this.boxes()) box.checked = checked.includes(box.dataset.compareRun);
    this.element.hidden = others.length === 0;
  }

  /** @returns {HTMLInputElement[]} */
  boxes() {
    return /** @type {HTMLInputElement[]} */ ([...this.list.querySelectorAll('input[data-compare-run]')]);
  }

  /** @returns {string[]} */
  checked() {
    return this.boxes().filter((b) => b.checked).map((b) => /** @type {string} */ (b.dataset.compareRun));
  }
}
