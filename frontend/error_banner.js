// The page-level error banner: one line per failing source, cleared when that source recovers. It
// sits at the top of the main column, in flow, and stays above the sticky timeline and view headers
// when the view is scrolled (sticky_bars.js stacks them under it). A notice can offer actions
// (buttons after its text: "open '7'").

import { el } from './dom.js';

/** @typedef {{text: string, run: () => void}} BannerAction */

export class ErrorBanner {
  constructor() {
    this.element = el('div', 'xray-error-banner');
    this.element.id = 'xray-error';
    this.element.setAttribute('role', 'alert');
    this.element.hidden = true;
    this.list = el('div', 'xray-error-lines');
    const close = /** @type {HTMLButtonElement} */ (el('button', 'xray-error-close', '×'));
    close.type = 'button';
    close.title = 'Dismiss';
    close.setAttribute('aria-label', 'Dismiss errors');
    close.addEventListener('click', () => this.clearAll());
    this.element.append(this.list, close);
    /** @type {Map<string, string>} */
    this.messages = new Map();
    /** @type {Map<string, BannerAction[]>} */
    this.actions = new Map();
  }

  /** @param {string} source @param {unknown} error */
  set(source, error) {
    const message = error instanceof Error ? error.message : String(error);
    console.error(`[xray] ${source}:`, error);
    this.messages.set(source, message);
    this.actions.delete(source);
    this.update();
  }

  /**
   * A notice, not an error (nothing failed; not logged as one): one line until cleared or dismissed.
   * @param {string} source
   * @param {string} message
   * @param {BannerAction[]} [actions]  Buttons after the text; a click clears the line, then runs.
   */
  note(source, message, actions = []) {
    this.messages.set(source, message);
    if (actions.length) this.actions.set(source, actions);
    else this.actions.delete(source);
    this.update();
  }

  /** @param {string} source */
  clear(source) {
    this.actions.delete(source);
    if (this.messages.delete(source)) this.update();
  }

  clearAll() {
    this.messages.clear();
    this.actions.clear();
    this.update();
  }

  update() {
    this.list.replaceChildren(...[...this.messages].map(([source, message]) => {
      const line = el('div', 'xray-error-line', message);
      line.dataset.source = source;
      for (const action of this.actions.get(source) || []) {
        const button = /** @type {HTMLButtonElement} */ (el('button', 'xray-error-action', action.text));
        button.type = 'button';
        button.addEventListener('click', () => { this.clear(source); action.run(); });
        line.append(' ', button);
      }
      return line;
    }));
    this.element.hidden = this.messages.size === 0;
  }
}
