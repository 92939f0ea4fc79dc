// Client of the plugin's HTTP API (tb_plugin/http_api.md). URLs are relative to the iframe's
// <base href="plugin/xray/">, so --path_prefix and /experiment/<id>/ keep working.

/** The kinds a layer can record, in display order. */
export const KINDS = /** @type {const} */ (['weight', 'weight_grad', 'bias', 'bias_grad', 'output', 'activation', 'grad']);

/** @typedef {'weight'|'weight_grad'|'bias'|'bias_grad'|'output'|'activation'|'grad'} Kind */

/**
 * @typedef {Object} LayerInfo
 * @property {string} name
 * @property {string|null} type
 * @property {Partial<Record<Kind, number[]>>} kinds  Steps recorded for each kind.
 */

/**
 * @typedef {Object} LayersResponse
 * @property {string} run
 * @property {LayerInfo[]} layers
 * @property {number[]} steps  Union of every layer's steps (the page scrubs each layer's own steps).
 */

/**
 * @typedef {Object} FrameMeta
 * @property {string} [run_id]
 * @property {number[]} [original_shape]
 * @property {string} [dtype]
 * @property {number} [dim]
 * @property {number[]|null} [indices]
 * @property {number|null} [batch_index]
 * @property {string} [selector]
 */

/**
 * @typedef {Object} Frame
 * @property {string} run
 * @property {string} layer
 * @property {Kind} kind
 * @property {number} step
 * @property {number|null} wall_time
 * @property {FrameMeta} meta
 * @property {import('./heatmap.js').RawPanel[]} panels
 * @property {number|null} min
 * @property {number|null} max
 * @property {boolean} signed
 * @property {number} nonfinite
 */

/** An error answered by the server (or the network), with the server's message. */
export class ApiError extends Error {
  /**
   * @param {string} message
   * @param {number} status  HTTP status, 0 for a network failure.
   */
  constructor(message, status) {
    super(message);
    this.name = 'ApiError';
    this.status = status;
  }
}

const NON_FINITE = { NaN: NaN, Infinity: Infinity, '-Infinity': -Infinity };

/**
 * Maps TensorBoard's JSON encoding of non-finite floats ("NaN", "Infinity", "-Infinity") back to
 * numbers; other values pass through (null stays null).
 * @param {unknown} v
 * @returns {number|null}
 */
export function toNumber(v) {
  if (typeof v === 'number') return v;
  if (typeof v === 'string' && v in NON_FINITE) return NON_FINITE[v];
  if (v === null || v === undefined) return null;
  const n = Number(v);
  return Number.isNaN(n) ? null : n;
}

/**
 * GETs a route and parses its JSON; throws ApiError with the server's "error" message.
 * @param {string} route  Route without the leading "./", e.g. "runs".
 * @param {Record<string, string|number>} [params]
 * @returns {Promise<any>}
 */
export async function getJson(route, params = {}) {
  const query = new URLSearchParams();
  for (const [k, v] of Object.entries(params)) query.set(k, String(v));
  const qs = query.toString();
  const url = `./${route}${qs ? `?${qs}` : ''}`;
  let response;
  try {
    response = await fetch(url, { headers: { Accept: 'application/json' } });
  } catch (e) {
    throw new ApiError(`Could not reach TensorBoard (${route}): ${e.message || e}`, 0);
  }
  const text = await response.text();
  let body = null;
  try {
    body = text ? JSON.parse(text) : null;
  } catch (_) {
    body = null;
  }
  if (!response.ok) {
    const detail =
      body && typeof body.error === 'string'
        ? body.error
        : text.trim().slice(0, 200) || response.statusText;
    throw new ApiError(`${route}: ${detail} (HTTP ${response.status})`, response.status);
  }
  if (body === null) {
    throw new ApiError(`${route}: the server answered something that is not JSON`, response.status);
  }
  return body;
}

/**
 * Runs that hold Xray data, sorted by name.
 * @returns {Promise<string[]>}
 */
export async function fetchRuns() {
  const body = await getJson('runs');
  return Array.isArray(body.runs) ? body.runs : [];
}

/**
 * The recorded layers of a run.
 * @param {string} run
 * @returns {Promise<LayersResponse>}
 */
export async function fetchLayers(run) {
  const body = await getJson('layers', { run });
  return {
    run: body.run,
    layers: Array.isArray(body.layers) ? body.layers : [],
    steps: Array.isArray(body.steps) ? body.steps : [],
  };
}

/**
 * One recorded frame, with `min`, `max` and `wall_time` as numbers.
 * @param {string} run
 * @param {string} layer
 * @param {Kind} kind
 * @param {number} step
 * @returns {Promise<Frame>}
 */
export async function fetchFrame(run, layer, kind, step) {
  const body = await getJson('frame', { run, layer, kind, step });
  return {
    ...body,
    meta: body.meta || {},
    panels: Array.isArray(body.panels) ? body.panels : [],
    min: toNumber(body.min),
    max: toNumber(body.max),
    wall_time: toNumber(body.wall_time),
    nonfinite: toNumber(body.nonfinite) ?? 0,
    signed: Boolean(body.signed),
  };
}
