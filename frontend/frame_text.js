// Words and step arithmetic about frames, shared by the views. Pure functions, no DOM.

import { formatShape, formatValue } from './format.js';

/** @typedef {import('./api.js').Kind} Kind */
/** @typedef {import('./api.js').Frame} Frame */
/** @typedef {import('./heatmap_layout.js').Panel} Panel */
/** @typedef {Frame & {decoded: Panel[]}} DecodedFrame */

/** @type {Record<Kind, string>} */
export const KIND_TITLES = {
  weight: 'Weight',
  weight_grad: 'Weight gradient',
  bias: 'Bias',
  bias_grad: 'Bias gradient',
  output: 'Output',
  activation: 'Activation',
  grad: 'Output gradient',
};

/** @type {Record<Kind, string>} */
export const KIND_HINTS = {
  weight: 'the layer’s weight tensor',
  weight_grad: 'gradient of the loss with respect to the weight',
  bias: 'the layer’s bias vector',
  bias_grad: 'gradient of the loss with respect to the bias',
  output: 'what the layer returns for one sample of the batch',
  activation: 'the activation recorded for one sample of the batch',
  grad: 'gradient of the loss with respect to the layer’s output, for one sample',
};

/**
 * How pooled panels are shown, for the info line: "" when drawn whole.
 * @param {number} ky  Source rows per shown row.
 * @param {number} kx  Source columns per shown column.
 * @returns {string}
 */
export function describePooling(ky, kx) {
  if (ky <= 1 && kx <= 1) return '';
  let ratio = `1:${ky} down rows × 1:${kx} across columns`;
  if (ky === kx) ratio = `1:${kx}`;
  else if (ky <= 1) ratio = `1:${kx} across columns`;
  else if (kx <= 1) ratio = `1:${ky} down rows`;
  return `shown at ${ratio} (max-abs pooled)`;
}

/**
 * "a" or "a–b" for the source indices [first, last] of a pooled cell.
 * @param {number} first
 * @param {number} last
 * @returns {string}
 */
function span(first, last) {
  return last > first ? `${first}–${last}` : String(first);
}

/**
 * The one-line description of a frame's tensor.
 * @param {Frame} frame
 * @returns {string}
 */
export function describeFrame(frame) {
  const meta = frame.meta || {};
  const parts = [`shape ${formatShape(meta.original_shape)}`];
  if (Array.isArray(meta.indices)) {
    const dim = typeof meta.dim === 'number' ? meta.dim : null;
    const total =
      dim !== null && Array.isArray(meta.original_shape) ? meta.original_shape[dim] : undefined;
    const of = total !== undefined ? ` of ${total}` : '';
    parts.push(`${meta.indices.length}${of} selected${dim !== null ? ` along dim ${dim}` : ''}`);
  }
  if (meta.batch_index !== null && meta.batch_index !== undefined) {
    parts.push(`sample ${meta.batch_index}`);
  }
  if (meta.dtype) parts.push(meta.dtype);
  parts.push(`range ${formatValue(frame.min)} … ${formatValue(frame.max)}`);
  parts.push(`${frame.nonfinite} non-finite`);
  return parts.join(' · ');
}
