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
 * The index of the first of the sorted `steps` at or after `step`.
 * @param {ArrayLike<number>} steps  Sorted ascending.
 * @param {number} step
 * @returns {number}  `steps.length` when every step is before `step`.
 */
export function indexAtOrAfter(steps, step) {
  const i = indexAtOrBefore(steps, step);
  return i >= 0 && steps[i] === step ? i : i + 1;
}

/**
 * Where a finding opens on the timeline, and what to say when its step has no capture. A non-finite
 * value opens at the first capture at or after its step, where it shows; every other finding, as a
 * URL's step, at the last capture at or before it.
 * @param {ArrayLike<number>} steps  Sorted steps recorded (not empty).
 * @param {number} step  The finding's step.
 * @param {boolean} after  Prefer the first capture after the step.
 * @returns {{index: number, note: string|null}}
 */
export function findingStep(steps, step, after) {
  const before = Math.max(0, indexAtOrBefore(steps, step));
  const next = indexAtOrAfter(steps, step);
  const index = after && next < steps.length ? next : before;
  const shown = steps[index];
  if (shown === step) return { index, note: null };
  const where = shown > step ? 'the first capture after it' : 'the last capture before it';
  return { index, note: `Step ${step} has no capture: showing step ${shown}, ${where}.` };
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

