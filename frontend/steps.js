// Recorded steps: every view shows, for the timeline's step, the nearest recorded step at or before
// it. One rule, one binary search, used by the layer view, the timeline, the graph's health colours
// and the bias view.

/**
 * The index of the last of the sorted `steps` at or before `step`.
 * @param {ArrayLike<number>} steps  Sorted ascending.
 * @param {number} step
 * @returns {number}  -1 when every step is after `step` (or there is none).
 */
export function indexAtOrBefore(steps, step) {
  let lo = 0;
  let hi = steps.length - 1;
  let found = -1;
  while (lo <= hi) {
    const mid = (lo + hi) >> 1;
    if (steps[mid] <= step) {
      found = mid;
      lo = mid + 1;
    } else {
      hi = mid - 1;
    }
  }
  return found;
}

/**
 * The recorded step to show for a requested step: the requested one or the nearest earlier one.
 * A caller that wants a default when no step is requested (the bias view shows the last
 * evaluation) says so at its call site: this never guesses.
 * @param {ArrayLike<number>} steps  Sorted steps recorded.
 * @param {number} requested
 * @returns {number|null}  null when there is no step at or before `requested`.
 */
export function stepAtOrBefore(steps, requested) {
  const i = indexAtOrBefore(steps, requested);
  return i < 0 ? null : steps[i];
}

/**
 * Sorted union of step lists (the steps of the shown runs, for the one timeline).
 * @param {Iterable<Iterable<number>>} lists
 * @returns {number[]}
 */
export function unionSteps(lists) {
  const all = new Set();
  for (const list of lists) for (const s of list) all.add(s);
  return [...all].sort((a, b) => a - b);
}

