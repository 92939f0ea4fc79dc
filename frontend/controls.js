// The page's controls: run picker, layer list and step scrubber. Each owns its DOM and reports the
// user's choices through callbacks; none of them fetches anything.

/** @typedef {import('./api.js').LayerInfo} LayerInfo */

import { el } from './dom.js';
import { KIND_BADGES } from './graph_draw.js';

/** A <select id="xray-run"> of the runs that hold Xray data. */
export class RunPicker {
  /** @param {(run: string) => void} onChange */
  constructor(onChange) {
    this.element = el('div', 'xray-field');
    const label = /** @type {HTMLLabelElement} */ (el('label', 'xray-field-label', 'Run'));
    label.htmlFor = 'xray-run';
    /** @type {HTMLSelectElement} */
    this.select = /** @type {HTMLSelectElement} */ (el('select', 'xray-select'));
    this.select.id = 'xray-run';
    this.select.addEventListener('change', () => onChange(this.select.value));
    this.element.append(label, this.select);
    /** @type {string[]} */
    this.runs = [];
  }

  /**
   * @param {string[]} runs
   * @param {string|null} selected
   */
  setRuns(runs, selected) {
    const same = runs.length === this.runs.length && runs.every((r, i) => r === this.runs[i]);
    if (!same) {
      this.runs = runs.slice();
      this.select.replaceChildren(
        ...runs.map((run) => {
          const option = /** @type {HTMLOptionElement} */ (el('option', '', run));
          option.value = run;
          return option;
        }),
      );
    }
    this.select.disabled = runs.length === 0;
    if (selected !== null) this.select.value = selected;
  }
}

/** The list of recorded layers; each is a <button data-layer="name">. */
export class LayerList {
  /** @param {(name: string) => void} onSelect */
  constructor(onSelect) {
    this.onSelect = onSelect;
    this.element = el('div', 'xray-layers');
    const header = el('div', 'xray-field-label', 'Layers');
    /** @type {HTMLInputElement} */
    this.filter = /** @type {HTMLInputElement} */ (el('input', 'xray-filter'));
    this.filter.type = 'search';
    this.filter.placeholder = 'Filter layers';
    this.filter.setAttribute('aria-label', 'Filter layers');
    this.filter.addEventListener('input', () => this.applyFilter());
    this.list = el('div', 'xray-layer-list');
    this.list.setAttribute('role', 'listbox');
    this.element.append(header, this.filter, this.list);
    /** @type {string} */
    this.signature = '';
    /** @type {string|null} */
    this.selected = null;
  }

  /**
   * Replaces the list (kept as is when nothing changed, so that focus and scroll survive a refresh).
   * @param {LayerInfo[]} layers
   * @param {string|null} selected
   */
  setLayers(layers, selected) {
    const signature = JSON.stringify(layers.map((l) => [l.name, l.type, Object.keys(l.kinds)]));
    if (signature !== this.signature) {
      this.signature = signature;
      this.list.replaceChildren(...layers.map((layer) => this.makeButton(layer)));
      if (layers.length === 0) this.list.append(el('div', 'xray-muted', 'No recorded layers.'));
      this.applyFilter();
    }
    this.setSelected(selected);
  }

  /**
   * @param {LayerInfo} layer
   * @returns {HTMLButtonElement}
   */
  makeButton(layer) {
    const button = /** @type {HTMLButtonElement} */ (el('button', 'xray-layer'));
    button.type = 'button';
    button.dataset.layer = layer.name;
    button.setAttribute('role', 'option');
    const kinds = Object.keys(layer.kinds || {});
    button.title = `${layer.name}${layer.type ? ` (${layer.type})` : ''}\nrecorded: ${kinds.join(', ')}`;
    const name = el('span', 'xray-layer-name', layer.name);
    const type = el('span', 'xray-layer-type', layer.type || '—');
    const badges = el('span', 'xray-layer-kinds');
    for (const kind of kinds) badges.append(el('span', 'xray-badge', KIND_BADGES[kind] || kind));
    button.append(name, type, badges);
    button.addEventListener('click', () => this.onSelect(layer.name));
    return button;
  }

  /**
   * Marks the list as out of date while another run's layers load (its buttons then do nothing).
   * @param {boolean} busy
   */
  setBusy(busy) {
    this.element.classList.toggle('xray-busy', busy);
    this.list.setAttribute('aria-busy', String(busy));
  }

  /** @param {string|null} name */
  setSelected(name) {
    this.selected = name;
    for (const button of this.list.querySelectorAll('button.xray-layer')) {
      const on = /** @type {HTMLElement} */ (button).dataset.layer === name;
      button.classList.toggle('xray-selected', on);
      button.setAttribute('aria-selected', String(on));
    }
  }

  applyFilter() {
    const needle = this.filter.value.trim().toLowerCase();
    for (const button of this.list.querySelectorAll('button.xray-layer')) {
      const b = /** @type {HTMLElement} */ (button);
      const text = `${b.dataset.layer} ${b.querySelector('.xray-layer-type')?.textContent || ''}`;
      b.hidden = needle !== '' && !text.toLowerCase().includes(needle);
    }
  }
}

/** One step scrubber: <input type=range id="xray-step"> over a list of steps, with a label; marks over its track. */
export class Scrubber {
  /**
   * @param {(index: number, committed: boolean) => void} onMove  committed is false while dragging.
   */
  constructor(onMove) {
    this.onMove = onMove;
    /** @type {number[]} */
    this.steps = [];
    this.element = el('div', 'xray-scrubber');
    this.prev = /** @type {HTMLButtonElement} */ (el('button', 'xray-step-button', '◀'));
    this.prev.type = 'button';
    this.prev.title = 'Previous recorded step (←)';
    this.prev.setAttribute('aria-label', 'Previous step');
    this.next = /** @type {HTMLButtonElement} */ (el('button', 'xray-step-button', '▶'));
    this.next.type = 'button';
    this.next.title = 'Next recorded step (→)';
    this.next.setAttribute('aria-label', 'Next step');
    /** @type {HTMLInputElement} */
    this.input = /** @type {HTMLInputElement} */ (el('input', 'xray-range'));
    this.input.type = 'range';
    this.input.id = 'xray-step';
    this.input.min = '0';
    this.input.max = '0';
    this.input.step = '1';
    this.input.value = '0';
    this.input.setAttribute('aria-label', 'Step');
    this.label = el('span', 'xray-step-label', '');
    this.label.id = 'xray-step-label';
    this.label.setAttribute('aria-live', 'polite');
    this.position = el('span', 'xray-muted xray-step-position', '');
    /** The track: the range input with a layer of marks over it (Timeline.setMarks). */
    this.track = el('div', 'xray-range-wrap');
    this.marks = el('div', 'xray-marks');
    this.track.append(this.input, this.marks);
    this.element.append(this.prev, this.track, this.next, this.label, this.position);

    this.input.addEventListener('input', () => this.changed(false));
    this.input.addEventListener('change', () => this.changed(true));
    this.prev.addEventListener('click', () => this.move(-1));
    this.next.addEventListener('click', () => this.move(1));
  }

  /** @returns {number} */
  get index() {
    return Number(this.input.value);
  }

  /** @returns {number|null} The chosen step. */
  get step() {
    return this.steps.length ? this.steps[this.index] : null;
  }

  /**
   * @param {number[]} steps  Sorted.
   * @param {number} index
   */
  setSteps(steps, index) {
    this.steps = steps.slice();
    this.input.max = String(Math.max(0, steps.length - 1));
    this.input.value = String(Math.min(Math.max(0, index), Math.max(0, steps.length - 1)));
    this.input.disabled = steps.length <= 1;
    this.updateLabel();
  }

  /**
   * Moves by `delta` recorded steps (clamped) and reports it.
   * @param {number} delta
   */
  move(delta) {
    if (!this.steps.length) return;
    const next = Math.min(this.steps.length - 1, Math.max(0, this.index + delta));
    if (next === this.index) return;
    this.input.value = String(next);
    this.changed(true);
  }

  /** @param {boolean} committed */
  changed(committed) {
    this.updateLabel();
    this.onMove(this.index, committed);
  }

  updateLabel() {
    const step = this.step;
    this.label.textContent = step === null ? 'no steps' : `step ${step}`;
    this.position.textContent = this.steps.length ? `${this.index + 1} / ${this.steps.length}` : '';
    this.prev.disabled = this.index <= 0;
    this.next.disabled = this.index >= this.steps.length - 1;
  }
}
