// One recorded kind of the shown layer: a title and one panel per shown run, side by side, plus a
// difference panel (first run − second run) when two runs are shown. It also offers the kind as an
// animated GIF over the timeline (drawn by the plugin, tb_plugin/gif.py).

import { el } from './dom.js';
import { KIND_HINTS, KIND_TITLES } from './frame_text.js';
import { RunPanel } from './panel.js';
import { gifUrl } from './export.js';

/** @typedef {import('./api.js').Kind} Kind */

export class KindSection {
  /**
   * @param {Kind} kind
   * @param {string} layer
   * @param {string[]} runs  Shown runs, first is the main one.
   */
  constructor(kind, layer, runs) {
    this.kind = kind;
    this.layer = layer;
    this.element = el('section', 'xray-kind');
    this.element.dataset.kind = kind;
    const head = el('div', 'xray-kind-head');
    this.title = el('h3', 'xray-kind-title', KIND_TITLES[kind] || kind);
    this.title.title = KIND_HINTS[kind] || '';
    const gif = /** @type {HTMLAnchorElement} */ (el('a', 'xray-mini-button', 'GIF'));
    gif.dataset.action = 'export-gif';
    gif.href = gifUrl(runs[0], layer, kind);
    gif.download = `${runs[0]}_${layer}_${kind}.gif`;
    gif.title = `An animated GIF of ${KIND_TITLES[kind] || kind} over every recorded step of ${runs[0]} (one colour scale)`;
    head.append(this.title, gif);
    this.row = el('div', 'xray-panel-row');
    /** @type {Map<string, RunPanel>} */
    this.panels = new Map(runs.map((run) => [run, new RunPanel(kind, run, layer)]));
    /** @type {RunPanel|null} */
    this.diff = runs.length >= 2 ? new RunPanel(kind, `${runs[0]} − ${runs[1]}`, layer) : null;
    if (this.diff) {
      this.diff.element.classList.add('xray-diff');
      this.diff.element.dataset.diff = `${runs[0]}|${runs[1]}`;
    }
    this.row.classList.toggle('xray-compare', runs.length > 1);
    this.row.append(...[...this.panels.values()].map((p) => p.element), ...(this.diff ? [this.diff.element] : []));
    this.element.append(head, this.row);
  }

  /** @returns {RunPanel[]} Every panel, the difference last. */
  allPanels() {
    return [...this.panels.values(), ...(this.diff ? [this.diff] : [])];
  }
}
