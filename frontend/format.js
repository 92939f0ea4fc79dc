// Number and shape formatting shared by the views. Pure functions, no DOM.

/**
 * Formats a value for a tick label or a read-out: 3 significant digits, exponent notation for very
 * small or very large magnitudes, and readable names for non-finite values.
 * @param {number|null|undefined} v
 * @returns {string}
 */
export function formatValue(v) {
  if (v === null || v === undefined) return '—';
  if (Number.isNaN(v)) return 'NaN';
  if (v === Infinity) return '+Inf';
  if (v === -Infinity) return '-Inf';
  if (v === 0) return '0';
  const a = Math.abs(v);
  if (a >= 1e4 || a < 1e-3) return v.toExponential(2).replace('e+', 'e');
  return String(Number(v.toPrecision(3)));
}

/**
 * Formats a shape such as [32, 6, 8, 8] as "32×6×8×8" ("scalar" for an empty shape).
 * @param {number[]|null|undefined} shape
 * @returns {string}
 */
export function formatShape(shape) {
  if (!Array.isArray(shape)) return '?';
  if (shape.length === 0) return 'scalar';
  return shape.join('×');
}
