// Run comparison: the difference of two runs' frames (each run's step is steps.js's stepAtOrBefore).

/** @typedef {import('./frame_text.js').DecodedFrame} DecodedFrame */

/**
 * Why two frames cannot be subtracted, or null when they can: same original shape, same kept
 * indices and sample, same panel sizes.
 * @param {DecodedFrame} a
 * @param {DecodedFrame} b
 * @returns {string|null}
 */
export function differenceBlocker(a, b) {
  const ma = a.meta || {};
  const mb = b.meta || {};
  if (JSON.stringify(ma.original_shape) !== JSON.stringify(mb.original_shape)) {
    return `shapes differ (${(ma.original_shape || []).join('×')} vs ${(mb.original_shape || []).join('×')})`;
  }
  if (JSON.stringify(ma.indices) !== JSON.stringify(mb.indices) || ma.batch_index !== mb.batch_index) {
    return 'the runs kept different filters or samples';
  }
  if (a.decoded.length !== b.decoded.length || a.decoded.some((p, i) => p.rows !== b.decoded[i].rows || p.cols !== b.decoded[i].cols)) {
    return 'panel sizes differ';
  }
  return null;
}

/**
 * The frame a − b (value by value), with its own range.
 * @param {DecodedFrame} a
 * @param {DecodedFrame} b
 * @returns {DecodedFrame}
 */
export function differenceFrame(a, b) {
  let min = Infinity;
  let max = -Infinity;
  let nonfinite = 0;
  const decoded = a.decoded.map((panel, i) => {
    const other = b.decoded[i].values;
    const values = new Float32Array(panel.values.length);
    for (let j = 0; j < values.length; j++) {
      const v = panel.values[j] - other[j];
      values[j] = v;
      if (Number.isFinite(v)) {
        if (v < min) min = v;
        if (v > max) max = v;
      } else nonfinite++;
    }
    return { index: panel.index, rows: panel.rows, cols: panel.cols, values };
  });
  const finite = min <= max;
  return {
    ...a,
    run: `${a.run} − ${b.run}`,
    decoded,
    panels: [],
    min: finite ? min : null,
    max: finite ? max : null,
    signed: true,
    nonfinite,
  };
}
