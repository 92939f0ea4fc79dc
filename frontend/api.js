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
 * @property {import('./heatmap_layout.js').RawPanel[]} panels
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
 * The latest architecture record of a run, or null when it has none (404).
 * @param {string} run
 * @returns {Promise<any|null>}
 */
export async function fetchArchitecture(run) {
  try {
    return await getJson('architecture', { run });
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/**
 * Each recorded kind's value range over every step of a layer (null where unknown).
 * @param {string} run
 * @param {string} layer
 * @returns {Promise<Record<string, {min: number, max: number}|null>>}
 */
export async function fetchRanges(run, layer) {
  const body = await getJson('ranges', { run, layer });
  return body.ranges || {};
}

/**
 * One recorded frame from the binary route (tb_plugin/frame_transport.py), decoded.
 * @param {string} run
 * @param {string} layer
 * @param {Kind} kind
 * @param {number} step
 * @returns {Promise<Frame & {decoded: import('./heatmap_layout.js').Panel[]}>}
 */
export async function fetchFrame(run, layer, kind, step) {
  const query = new URLSearchParams({ run, layer, kind, step: String(step) });
  let response;
  try {
    response = await fetch(`./frame_bin?${query}`);
  } catch (e) {
    throw new ApiError(`Could not reach TensorBoard (frame): ${e.message || e}`, 0);
  }
  const buffer = await response.arrayBuffer();
  if (!response.ok) {
    const text = new TextDecoder().decode(buffer);
    let detail = text.trim().slice(0, 200) || response.statusText;
    try {
      detail = JSON.parse(text).error || detail;
    } catch (_) {
      /* not JSON */
    }
    throw new ApiError(`frame: ${detail} (HTTP ${response.status})`, response.status);
  }
  return decodeFrameBody(buffer);
}

/**
 * Decodes a binary frame body: "XRF1", uint32 JSON length, JSON, then float32 or float16 values.
 * @param {ArrayBuffer} buffer
 */
export function decodeFrameBody(buffer) {
  const view = new DataView(buffer);
  const magic = String.fromCharCode(...new Uint8Array(buffer, 0, 4));
  if (magic !== 'XRF1') throw new ApiError('frame: the server answered something that is not an Xray frame', 200);
  const length = view.getUint32(4, true);
  const body = JSON.parse(new TextDecoder().decode(new Uint8Array(buffer, 8, length)));
  let offset = 8 + length;
  const half = body.encoding === 'f16';
  const decoded = body.panels.map((p) => {
    const count = p.rows * p.cols;
    const values = half ? halfToFloat(view, offset, count) : floatsAt(buffer, view, offset, count);
    offset += count * (half ? 2 : 4);
    return { index: p.index, rows: p.rows, cols: p.cols, values };
  });
  return {
    ...body,
    meta: body.meta || {},
    panels: [],
    decoded,
    min: toNumber(body.min),
    max: toNumber(body.max),
    wall_time: toNumber(body.wall_time),
    nonfinite: toNumber(body.nonfinite) ?? 0,
    signed: Boolean(body.signed),
  };
}

const LITTLE_ENDIAN = new Uint8Array(new Uint32Array([1]).buffer)[0] === 1;

function floatsAt(buffer, view, offset, count) {
  if (LITTLE_ENDIAN) return new Float32Array(buffer.slice(offset, offset + 4 * count));
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) out[i] = view.getFloat32(offset + 4 * i, true);
  return out;
}

function halfToFloat(view, offset, count) {
  const out = new Float32Array(count);
  for (let i = 0; i < count; i++) {
    const h = view.getUint16(offset + 2 * i, true);
    const sign = h & 0x8000 ? -1 : 1;
    const exp = (h >> 10) & 0x1f;
    const frac = h & 0x3ff;
    if (exp === 0) out[i] = sign * 2 ** -14 * (frac / 1024);
    else if (exp === 31) out[i] = frac ? NaN : sign * Infinity;
    else out[i] = sign * 2 ** (exp - 15) * (1 + frac / 1024);
  }
  return out;
}

/**
 * One recorded frame from the JSON route, with `min`, `max` and `wall_time` as numbers.
 * @param {string} run
 * @param {string} layer
 * @param {Kind} kind
 * @param {number} step
 * @returns {Promise<Frame>}
 */
export async function fetchFrameJson(run, layer, kind, step) {
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
