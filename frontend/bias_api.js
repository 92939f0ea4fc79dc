// Client of the bias routes (tb_plugin/http_api.md: /bias/evaluations, /bias/result, /bias/series,
// /bias/examples): the Attention-IoU evaluations that `xray.attention_iou` wrote into a run. Bodies
// come back as the server wrote them; undefined means and chance levels are `null`.

import { getJson } from './api.js';

/**
 * @typedef {Object} BiasEvaluation
 * @property {string} name            As written (`"shape vs patch"`, or the `name=` given).
 * @property {number[]} steps         The steps it was written at, sorted.
 * @property {number[]} example_steps The steps that kept example maps.
 */

/**
 * A run's evaluations with their steps (an empty list when it has none).
 * @param {string} run
 * @returns {Promise<BiasEvaluation[]>}
 */
export async function fetchBiasEvaluations(run) {
  const body = await getJson('bias/evaluations', { run });
  return Array.isArray(body.evaluations) ? body.evaluations : [];
}

/**
 * One evaluation at one step: the layer, the attributes, each score by subgroup with its chance level.
 * @param {string} run
 * @param {string} evaluation
 * @param {number} step
 * @returns {Promise<any>}  The /bias/result body.
 */
export function fetchBiasResult(run, evaluation, step) {
  return getJson('bias/result', { run, evaluation, step });
}

/**
 * Every score of an evaluation over its steps, for the chart.
 * @param {string} run
 * @param {string} evaluation
 * @returns {Promise<any>}  The /bias/series body.
 */
export function fetchBiasSeries(run, evaluation) {
  return getJson('bias/series', { run, evaluation });
}

/**
 * The few images kept at a step with their maps (base64 RGB bytes and float32 maps).
 * @param {string} run
 * @param {string} evaluation
 * @param {number} step
 * @returns {Promise<any>}  The /bias/examples body.
 */
export function fetchBiasExamples(run, evaluation, step) {
  return getJson('bias/examples', { run, evaluation, step });
}
