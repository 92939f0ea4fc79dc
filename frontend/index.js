// Entry point of the Xray plugin page. TensorBoard's plugin_entry.html imports this module inside an
// iframe (<base href="plugin/xray/">) and calls render(), which loads the stylesheet and starts the
// app (app.js). Every view lives in a module of its own; see README.md for the map and the hooks.

import { XrayApp } from './app.js';

/**
 * Loads style.css (next to this module) and resolves once it applied or failed (at most 3 s).
 * @returns {Promise<void>}
 */
function loadStylesheet() {
  if (document.querySelector('link[data-xray-style]')) return Promise.resolve();
  const link = document.createElement('link');
  link.rel = 'stylesheet';
  link.href = new URL('./style.css', import.meta.url).href;
  link.dataset.xrayStyle = '';
  return new Promise((resolve) => {
    const done = () => resolve();
    link.addEventListener('load', done);
    link.addEventListener('error', done);
    setTimeout(done, 3000);
    document.head.append(link);
  });
}

/**
 * Builds the page. Called once by TensorBoard's plugin_entry.html.
 * @returns {Promise<void>}
 */
export async function render() {
  if (document.querySelector('.xray-root')) return;
  await loadStylesheet();
  const app = new XrayApp();
  window.xrayApp = app; // for scripts and the speed bench: the app and its state
  await app.start();
}
