// Loading for the app shell (app.js): re-reads the runs on every host reload and poll, the shown
// runs' layers (run_data.js) and findings (findings_list.js), applies the URL state once the runs are
// known (and again when a link is pasted into the open tab), and checks that a run was not rewritten
// under the same name. Mixed into XrayApp's prototype; `this` is the app.

import { fetchFrame, fetchRuns } from './api.js';
import { closeMatches, didYouMean } from './close_matches.js';
import { initialState } from './state.js';
import { encodeUrlData, hashUrlData, parseUrlData } from './url_state.js';

/** A frame that answers 404 re-reads the layer lists, at most this often. */
const STALE_REFRESH_MS = 5000;

/** @this {import('./app.js').XrayApp} */
function refresh() {
  if (this.refreshing) {
    this.refreshAgain = true;
    return this.refreshing;
  }
  this.refreshing = (async () => {
    do {
      this.refreshAgain = false;
      await this.refreshOnce();
    } while (this.refreshAgain);
  })().finally(() => { this.refreshing = null; });
  return this.refreshing;
}

/** @this {import('./app.js').XrayApp} */
async function refreshOnce() {
  let runs;
  try {
    runs = await fetchRuns();
    this.errors.clear('runs');
  } catch (e) {
    this.errors.set('runs', e);
    return;
  }
  for (const known of [...this.data.layers.keys()]) if (!runs.includes(known)) { this.data.forget(known); this.frames.forget(known); }
  this.status.textContent = `Updated ${new Date().toLocaleTimeString()}`;
  this.empty.hidden = runs.length > 0;
  this.content.hidden = runs.length === 0;
  this.layerList.element.hidden = runs.length === 0;
  const s = this.store.state;
  const url = this.pendingUrl;
  this.pendingUrl = {};
  if (url.step !== undefined) {
    this.keep = { step: url.step, atEnd: false };
    this.followEnd = false;
  }
  // A mistyped run in a link shows its closest match, where there is one.
  const closest = url.run && !runs.includes(url.run) ? closeMatches(url.run, runs)[0] : undefined;
  const run = [url.run, closest, s.run].find((r) => r && runs.includes(r)) || runs[0] || null;
  const compare = (url.compare || s.compare).filter((r) => r !== run && runs.includes(r));
  // A link naming what this logdir lacks says so, instead of silently showing something else.
  const missing = [url.run, ...(url.compare || [])].filter((r) => r && !runs.includes(r));
  const named = missing.map((r) => `'${r}'${didYouMean(closeMatches(r, runs))}`).join(', ');
  if (missing.length) this.errors.note('url-run', `The link's run${missing.length > 1 ? 's' : ''} ${named} ${missing.length > 1 ? 'are' : 'is'} not in this logdir${run ? `; showing '${run}'` : ''}.`);
  if (url.layer) this.askedLayer = url.layer;
  this.store.set({ runs, run, compare, ...pick(url, URL_VIEW_KEYS) });
  if (run === null) {
    this.runPicker.setRuns([], null);
    this.layerList.setLayers([], null);
    return;
  }
  await this.loadShown();
}

/** Loads the layers (and architectures) and the findings of the shown runs, then draws. @this {import('./app.js').XrayApp} */
async function loadShown() {
  const seq = ++this.seq;
  const runs = this.store.shownRuns;
  const findings = this.findings.update(runs);
  const results = await Promise.all(runs.map((run, i) => this.data.load(run, i < 2).then(
    (result) => { this.errors.clear(`layers:${run}`); return result; },
    (error) => { this.errors.set(`layers:${run}`, error); return null; },
  )));
  if (seq !== this.seq) return;
  this.loading = false;
  this.layerList.setBusy(false);
  results.forEach((result, i) => { if (result && result.rewritten) this.frames.forget(runs[i]); });
  const unchanged = results.every((r) => r && !r.changed);
  this.healthKey = null; // runs grow: the matrices are read again
  await Promise.all([this.render(), findings]);
  if (unchanged) this.validateShown();
}

/** @this {import('./app.js').XrayApp} */
function staleRefresh() {
  if (Date.now() < this.staleAt) return;
  this.staleAt = Date.now() + STALE_REFRESH_MS;
  this.refresh();
}

/**
 * After a reload that changed no step, checks that the shown run was not rewritten under the same
 * name with the same steps: fetches one shown frame again and compares run_id and wall time.
 * @this {import('./app.js').XrayApp}
 */
async function validateShown() {
  const panel = this.layerView.firstPanel();
  const frame = panel && panel.frame;
  if (!frame || this.store.state.view !== 'layer') return;
  let fresh;
  try {
    fresh = await fetchFrame(panel.run, frame.layer, frame.kind, frame.step);
  } catch (_) {
    return; // gone or unreachable: the next reload tells
  }
  if ((fresh.meta.run_id || null) === (frame.meta.run_id || null) && fresh.wall_time === frame.wall_time) return;
  this.frames.forget(panel.run);
  this.layerView.showStep(this.timeline.step, false);
}

/** A link pasted into the address bar of the open tab: show what it names, as a fresh load would. @this {import('./app.js').XrayApp} */
function followUrl() {
  const data = hashUrlData();
  if (JSON.stringify(data) === JSON.stringify(encodeUrlData(this.store.state))) return; // our own state
  this.errors.clear('url-run');
  this.errors.clear('url-layer');
  const url = parseUrlData(data);
  // What the link leaves out is as a fresh load has it (no kind filter, the graph view, ...), not the tab's
  // state before the link.
  const fresh = initialState();
  const reset = Object.fromEntries(URL_VIEW_KEYS.filter((key) => url[key] === undefined && key in fresh).map((key) => [key, fresh[key]]));
  if (Object.keys(reset).length) this.store.set(reset);
  this.pendingUrl = url;
  this.refresh();
}

/** The keys of what is shown that a link names (run, compare and step are settled apart). */
const URL_VIEW_KEYS = ['view', 'layer', 'kind', 'scale', 'bias', 'stat'];

function pick(object, keys) {
  const out = {};
  for (const key of keys) if (object[key] !== undefined) out[key] = object[key];
  return out;
}

/** The methods mixed into XrayApp. */
export const loadMethods = { refresh, refreshOnce, loadShown, staleRefresh, validateShown, followUrl };
