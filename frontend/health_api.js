// Client of the training-health routes (tb_plugin/http_api.md: /health, /findings, /health_layer,
// /health_vector, /prune). Values come back as numbers: NaN, Infinity and -Infinity where recorded,
// and `null` where a layer has no value at a step.

import { ApiError, getJson, toNumber } from './api.js';

/** The built-in statistics a user picks from, in menu order, with their scale. */
export const HEALTH_STATS = /** @type {const} */ ([
  { stat: 'grad_l2', label: 'gradient L2', scale: 'log' },
  { stat: 'update_ratio', label: 'update ratio', scale: 'log' },
  { stat: 'dead_fraction', label: 'dead fraction', scale: 'unit' },
  { stat: 'saturation', label: 'saturation', scale: 'unit' },
  { stat: 'grad_absmax', label: 'gradient abs max', scale: 'log' },
  { stat: 'grad_mean', label: 'gradient mean', scale: 'linear' },
  { stat: 'grad_l1', label: 'gradient L1', scale: 'log' },
  { stat: 'grad_var', label: 'gradient variance', scale: 'log' },
  { stat: 'weight_l2', label: 'weight L2', scale: 'log' },
  { stat: 'channel_var', label: 'channel variance (mean)', scale: 'log' },
]);

/**
 * How a statistic is coloured: 'log' (positive magnitudes), 'unit' (shares in [0, 1]) or 'linear'.
 * @param {string} stat
 * @returns {'log'|'unit'|'linear'}
 */
export function statScale(stat) {
  const known = HEALTH_STATS.find((s) => s.stat === stat);
  return known ? known.scale : 'linear';
}

/**
 * @typedef {Object} HealthMatrix
 * @property {string} run
 * @property {string} stat
 * @property {string[]} layers      Rows, in dataflow order.
 * @property {number[]} steps       The first step of each column.
 * @property {number[]} lastSteps   The last step of each column (equal to steps when not binned).
 * @property {boolean} binned
 * @property {number} totalSteps    Steps before binning.
 * @property {Float32Array} values  layers × columns, row-major; NaN/±Inf where recorded so.
 * @property {Uint8Array} present   layers × columns: 1 where the layer has a value in the column.
 * @property {string[]} stats       Every statistic the run holds.
 */

/**
 * One statistic of a run as a layers × steps matrix; with `columns`, at most that many columns, each
 * bin showing its worst value (binned on the server).
 * @param {string} run
 * @param {string} stat
 * @param {number} [columns]
 * @returns {Promise<HealthMatrix>}
 */
export async function fetchHealth(run, stat, columns) {
  const params = { run, stat };
  if (columns) params.columns = Math.max(1, Math.floor(columns));
  const body = await getJson('health', params);
  const values = new Float32Array(decodeBase64(body.values));
  const present = new Uint8Array(decodeBase64(body.present));
  return {
    run: body.run,
    stat: body.stat,
    layers: body.layers || [],
    steps: body.steps || [],
    lastSteps: body.last_steps,
    binned: Boolean(body.binned),
    totalSteps: body.total_steps,
    values,
    present,
    stats: body.stats || [],
  };
}

/**
 * @typedef {Object} Finding
 * @property {string} rule
 * @property {string} layer
 * @property {number} step
 * @property {number} last_step
 * @property {number|null} value
 * @property {string} message
 */

/**
 * The findings of a run, and whether it was recorded with training health (`health=False`: none).
 * @param {string} run
 * @returns {Promise<{findings: Finding[], health: boolean}>}
 */
export async function fetchFindings(run) {
  const body = await getJson('findings', { run });
  return { findings: (body.findings || []).map((f) => ({ ...f, value: toNumber(f.value) })), health: body.health !== false };
}

/**
 * Every statistic of one layer over every measured iteration (at most `columns` points per
 * statistic when given), and its epoch aggregates where written.
 * @param {string} run
 * @param {string} layer
 * @param {number} [columns]
 * @returns {Promise<{stats: Record<string, {steps: number[], values: (number|null)[]}>, epochs: Record<string, {epochs: number[], mean: number[], var: number[]}>}>}
 */
export async function fetchLayerHealth(run, layer, columns) {
  const params = { run, layer };
  if (columns) params.columns = Math.max(1, Math.floor(columns));
  let body;
  try {
    body = await getJson('health_layer', params);
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return { stats: {}, epochs: {} };
    throw e;
  }
  const stats = {};
  for (const [stat, series] of Object.entries(body.stats || {})) stats[stat] = { steps: series.steps, values: series.values.map(toNumber) };
  const epochs = {};
  for (const [stat, e] of Object.entries(body.epochs || {})) epochs[stat] = { epochs: e.epochs, mean: e.mean.map(toNumber), var: e.var.map(toNumber) };
  return { stats, epochs };
}

/**
 * A per-unit vector (`channel_var`, `dead`) of a layer at the latest health step at or before `step`;
 * null when there is none.
 * @param {string} run
 * @param {string} stat
 * @param {string} layer
 * @param {number} step
 * @returns {Promise<{step: number, values: number[]}|null>}
 */
export async function fetchHealthVector(run, stat, layer, step) {
  try {
    const body = await getJson('health_vector', { run, stat, layer, step });
    return { step: body.step, values: body.values.map(toNumber) };
  } catch (e) {
    if (e instanceof ApiError && e.status === 404) return null;
    throw e;
  }
}

/**
 * What `xray.prune(dry_run=True)` would mask, as of the recorder's last write.
 * @param {string} run
 * @returns {Promise<{health: boolean, step: number|null, entries: {layer: string, units: number[], parameters: number, reason: string|null}[]}>}
 */
export async function fetchPrunePlan(run) {
  const body = await getJson('prune', { run });
  return { health: body.health !== false, step: body.step ?? null, entries: body.entries || [] };
}

/** @param {string} text */
function decodeBase64(text) {
  const raw = atob(text || '');
  const bytes = new Uint8Array(raw.length);
  for (let i = 0; i < raw.length; i++) bytes[i] = raw.charCodeAt(i);
  return bytes.buffer;
}
