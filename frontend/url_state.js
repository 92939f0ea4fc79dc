// Shareable state: runs, view, layer, kind and step live in TensorBoard's URL hash as
// `p.xray.<key>=<value>` entries (`#xray&p.xray.run=a,b&p.xray.layer=conv1&p.xray.step=30`).
// They are read at start through the host's experimental.GetURLPluginData message and written
// back (history.replaceState on the host page, same origin) as the user navigates.

import { GET_URL_DATA } from './host.js';

export const PREFIX = 'p.xray.';

/**
 * The state keys a URL's plugin data sets.
 * @param {Record<string, string>|null|undefined} data  `p.xray.` entries without the prefix.
 * @returns {Partial<import('./state.js').XrayState>}
 */
export function parseUrlData(data) {
  const out = {};
  if (!data || typeof data !== 'object') return out;
  if (data.run) {
    const runs = String(data.run).split(',').map((r) => decodeURIComponent(r)).filter(Boolean);
    if (runs.length) {
      out.run = runs[0];
      out.compare = runs.slice(1);
    }
  }
  if (['graph', 'layer', 'health', 'bias'].includes(data.view)) out.view = data.view;
  if (data.stat && /^[A-Za-z0-9_.\-[\]]{1,64}$/.test(String(data.stat))) out.stat = String(data.stat);
  if (data.bias) out.bias = String(data.bias);
  if (data.layer) out.layer = String(data.layer);
  if (data.kind) out.kind = String(data.kind);
  if (data.step !== undefined && /^-?\d+$/.test(String(data.step))) out.step = Number(data.step);
  if (data.scale === 'fixed' || data.scale === 'frame') out.scale = data.scale;
  return out;
}

/**
 * The `p.xray.` entries (without prefix) for a state; empty values are left out.
 * @param {import('./state.js').XrayState} state
 * @returns {Record<string, string>}
 */
export function encodeUrlData(state) {
  const out = {};
  const runs = state.run === null ? [] : [state.run, ...state.compare];
  if (runs.length) out.run = runs.map((r) => encodeURIComponent(r)).join(',');
  out.view = state.view;
  if (state.layer) out.layer = state.layer;
  if (state.kind) out.kind = state.kind;
  if (state.step !== null && state.step !== undefined) out.step = String(state.step);
  if (state.scale === 'fixed') out.scale = 'fixed';
  if (state.stat) out.stat = state.stat;
  if (state.view === 'bias' && state.bias) out.bias = state.bias;
  return out;
}

/**
 * Reads the plugin data from the host (GetURLPluginData) and the host page's hash.
 * @param {import('./host.js').HostLink|null} host
 * @returns {Promise<Record<string, string>>}
 */
export async function readUrlData(host) {
  const fromHash = hashUrlData();
  let fromHost = {};
  if (host) {
    try {
      const data = await host.request(GET_URL_DATA, { pluginName: 'xray' }, 1500);
      if (data && typeof data === 'object') fromHost = data;
    } catch (_) {
      /* an older TensorBoard: the hash alone */
    }
  }
  // TensorBoard answers from the hash it parsed when its page loaded, which can be empty when the
  // page was opened on another tab's URL first; the hash as it is now fills the gaps.
  return { ...fromHash, ...fromHost };
}

/**
 * The plugin data in the host page's hash as it is now.
 * @returns {Record<string, string>}
 */
export function hashUrlData() {
  const out = {};
  for (const [key, value] of hashEntries(hostHash())) if (key.startsWith(PREFIX)) out[key.slice(PREFIX.length)] = value;
  return out;
}

/**
 * Calls `listener` when the host page's hash changes by navigation (a link pasted into the address
 * bar, back and forward); the state's own writes (history.replaceState) fire no such event.
 * @param {() => void} listener
 */
export function onHashNavigation(listener) {
  try {
    const win = window.parent && window.parent !== window ? window.parent : window;
    win.addEventListener('hashchange', listener);
  } catch (_) {
    /* a parent of another origin: its URL is not ours to follow */
  }
}

/**
 * Writes the plugin data into the host page's hash, keeping every other entry.
 * @param {Record<string, string>} data
 */
export function writeUrlData(data) {
  let win;
  try {
    win = window.parent && window.parent !== window ? window.parent : window;
    const entries = hashEntries(win.location.hash.slice(1)).filter(([key]) => !key.startsWith(PREFIX));
    const parts = entries.map(([k, v]) => (v === null ? k : `${encodeURIComponent(k)}=${encodeURIComponent(v)}`));
    for (const [key, value] of Object.entries(data)) parts.push(`${encodeURIComponent(PREFIX + key)}=${encodeURIComponent(value)}`);
    const hash = `#${parts.join('&')}`;
    if (hash !== win.location.hash) win.history.replaceState(win.history.state, '', hash);
  } catch (_) {
    /* a parent of another origin: the URL cannot carry the state */
  }
}

function hostHash() {
  try {
    const win = window.parent && window.parent !== window ? window.parent : window;
    return win.location.hash.slice(1);
  } catch (_) {
    return '';
  }
}

/**
 * `[key, value]` pairs of a hash in TensorBoard's format (`tab&k=v&...`); a bare word has value null.
 * @param {string} hash
 * @returns {[string, string|null][]}
 */
export function hashEntries(hash) {
  if (!hash) return [];
  return hash.split('&').filter(Boolean).map((part) => {
    const i = part.indexOf('=');
    if (i < 0) return [decodeURIComponent(part), null];
    return [decodeURIComponent(part.slice(0, i)), decodeURIComponent(part.slice(i + 1))];
  });
}
