// Entry point of the Xray plugin page. TensorBoard's plugin_entry.html imports this module inside an
// iframe (<base href="plugin/xray/">) and calls render(), which loads the stylesheet and starts the
// app (app.js). Every view lives in a module of its own; see README.md for the map and the hooks.

import { XrayApp } from './app.js';
import { loadStylesheet } from './dom.js';

/**
 * Builds the page. Called once by TensorBoard's plugin_entry.html.
 * @returns {Promise<void>}
 */
export async function render() {
  if (document.querySelector('.xray-root')) return;
  await loadStylesheet('./style.css', import.meta.url);
  const app = new XrayApp();
  window.xrayApp = app; // for scripts and the speed bench: the app and its state
  await app.start();
}
