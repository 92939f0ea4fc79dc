// The page-level error banner: one line per failing source, cleared when that source recovers.

import { el } from './dom.js';

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
  }

  /** @param {string} source @param {unknown} error */
  set(source, error) {
    const message = error instanceof Error ? error.message : String(error);
    console.error(`[xray] ${source}:`, error);
    this.messages.set(source, message);
    this.update();
  }

  /** A notice, not an error (nothing failed; not logged as one): one line until cleared or dismissed. @param {string} source @param {string} message */
  note(source, message) {
    this.messages.set(source, message);
    this.update();
  }

  /** @param {string} source */
  clear(source) {
    if (this.messages.delete(source)) this.update();
  }

  clearAll() {
    this.messages.clear();
    this.update();
  }

  update() {
    this.list.replaceChildren(...[...this.messages.values()].map((m) => el('div', '', m)));
    this.element.hidden = this.messages.size === 0;
  }
}
