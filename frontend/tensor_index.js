// Where a drawn value sits in the original tensor. A stored frame is `full[batch_index]` (when
// batch_index is not null) with only `indices` kept along dimension `dim` of the full tensor; a
// frame of rank 3+ is drawn one panel per entry of its first axis, an entry of rank 3+ tiled
// side by side (h × (C·w)). This inverts both, so the read-out names the exact element.

/**
 * The shape of the stored frame.
 * @param {import('./api.js').FrameMeta} meta
 * @returns {number[]|null}
 */
export function storedShape(meta) {
  const shape = Array.isArray(meta.original_shape) ? meta.original_shape.slice() : null;
  if (!shape) return null;
  if (typeof meta.dim === 'number' && Array.isArray(meta.indices) && meta.dim < shape.length) {
    shape[meta.dim] = meta.indices.length;
  }
  if (meta.batch_index !== null && meta.batch_index !== undefined) shape.shift();
  return shape;
}

/**
 * The index in the original tensor of a drawn value.
 * @param {import('./api.js').FrameMeta} meta
 * @param {number} panel  Position of the panel in the frame (0 for a single panel).
 * @param {number} row
 * @param {number} col
 * @returns {number[]|null}  null when the frame's header does not say enough.
 */
export function originalIndex(meta, panel, row, col) {
  const stored = storedShape(meta);
  if (!stored) return null;
  let coords;
  if (stored.length === 0) coords = [];
  else if (stored.length === 1) coords = [col];
  else if (stored.length === 2) coords = [row, col];
  else {
    const entry = stored.slice(1);
    if (entry.length === 2) coords = [panel, row, col];
    else {
      const w = entry[entry.length - 1];
      let c = Math.floor(col / w);
      const lead = entry.slice(0, -2);
      const leadCoords = new Array(lead.length);
      for (let i = lead.length - 1; i >= 0; i--) {
        leadCoords[i] = c % lead[i];
        c = Math.floor(c / lead[i]);
      }
      coords = [panel, ...leadCoords, row, col % w];
    }
  }
  const batched = meta.batch_index !== null && meta.batch_index !== undefined;
  const full = batched ? [meta.batch_index, ...coords] : coords;
  if (typeof meta.dim === 'number' && Array.isArray(meta.indices) && meta.dim < full.length) {
    const kept = meta.indices[full[meta.dim]];
    if (kept === undefined) return null;
    full[meta.dim] = kept;
  }
  return full;
}
