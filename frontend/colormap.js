// Colour maps: pure functions, no DOM.
//
// Signed data uses a diverging blue-white-red map centred on zero (ColorBrewer RdBu, reversed so that
// negative is blue), scaled symmetrically so that equal magnitudes get equal intensity. Unsigned
// data uses a sequential viridis map from min to max. NaN is magenta and ±Inf grey: neither colour
// occurs in either map.

/** @typedef {[number, number, number]} RGB */

/**
 * @typedef {Object} Scale
 * @property {'diverging'|'sequential'|'empty'} kind  'empty' when no value is finite.
 * @property {number} lo    Value drawn at the left end of the colour bar.
 * @property {number} hi    Value drawn at the right end of the colour bar.
 * @property {number|null} min  Smallest finite value of the data (null when none).
 * @property {number|null} max  Largest finite value of the data (null when none).
 * @property {Uint8Array} lut   LUT_SIZE RGB entries, lut[3*i .. 3*i+2], from lo (i = 0) to hi.
 */

/** Entries of a look-up table; odd, so that zero of a diverging scale has an exact entry. */
export const LUT_SIZE = 255;
const LAST = LUT_SIZE - 1;

/** Colour of NaN values. @type {RGB} */
export const NAN_COLOR = [255, 0, 255];
/** Colour of +Inf and -Inf values. @type {RGB} */
export const INF_COLOR = [128, 128, 128];

/** ColorBrewer RdBu (11 classes), reversed: dark blue, …, near-white, …, dark red. @type {RGB[]} */
const DIVERGING_STOPS = [
  [5, 48, 97], [33, 102, 172], [67, 147, 195], [146, 197, 222], [209, 229, 240],
  [247, 247, 247],
  [253, 219, 199], [244, 165, 130], [214, 96, 77], [178, 24, 43], [103, 0, 31],
];

/** matplotlib viridis sampled at 9 evenly spaced points. @type {RGB[]} */
const SEQUENTIAL_STOPS = [
  [68, 1, 84], [71, 44, 122], [59, 81, 139], [44, 113, 142], [33, 144, 141],
  [39, 173, 129], [92, 200, 99], [170, 220, 50], [253, 231, 37],
];

/**
 * Linear interpolation through evenly spaced colour stops.
 * @param {RGB[]} stops
 * @param {number} t  Position in [0, 1]; clamped; NaN maps to 0.5.
 * @returns {RGB}
 */
function interpolate(stops, t) {
  if (Number.isNaN(t)) t = 0.5;
  const x = Math.min(1, Math.max(0, t)) * (stops.length - 1);
  const i = Math.min(stops.length - 2, Math.floor(x));
  const f = x - i;
  const a = stops[i];
  const b = stops[i + 1];
  return [
    Math.round(a[0] + (b[0] - a[0]) * f),
    Math.round(a[1] + (b[1] - a[1]) * f),
    Math.round(a[2] + (b[2] - a[2]) * f),
  ];
}

/**
 * Diverging blue-white-red map.
 * @param {number} t  0 = most negative, 0.5 = zero, 1 = most positive.
 * @returns {RGB}
 */
export function diverging(t) {
  return interpolate(DIVERGING_STOPS, t);
}

/**
 * Sequential viridis-like map.
 * @param {number} t  0 = min, 1 = max.
 * @returns {RGB}
 */
export function sequential(t) {
  return interpolate(SEQUENTIAL_STOPS, t);
}

/**
 * Samples a colour map into an RGB look-up table of LUT_SIZE entries.
 * @param {(t: number) => RGB} map
 * @returns {Uint8Array}
 */
function buildLut(map) {
  const lut = new Uint8Array(LUT_SIZE * 3);
  for (let i = 0; i < LUT_SIZE; i++) {
    const [r, g, b] = map(i / LAST);
    lut[3 * i] = r;
    lut[3 * i + 1] = g;
    lut[3 * i + 2] = b;
  }
  return lut;
}

const DIVERGING_LUT = buildLut(diverging);
const SEQUENTIAL_LUT = buildLut(sequential);

/**
 * Builds the scale for a frame from the server's `min`, `max` and `signed`.
 * Signed data: diverging, symmetric range [-m, m] with m = max(|min|, |max|), zero in the middle.
 * Otherwise: sequential from min to max (a constant frame takes the middle colour).
 * @param {{min: number|null, max: number|null, signed: boolean}} stats
 * @returns {Scale}
 */
export function makeScale({ min, max, signed }) {
  const finite = (v) => typeof v === 'number' && Number.isFinite(v);
  if (!finite(min) || !finite(max)) {
    return { kind: 'empty', lo: 0, hi: 0, min: null, max: null, lut: SEQUENTIAL_LUT };
  }
  if (signed || (min < 0 && max > 0)) {
    const m = Math.max(Math.abs(min), Math.abs(max));
    return { kind: 'diverging', lo: -m, hi: m, min, max, lut: DIVERGING_LUT };
  }
  return { kind: 'sequential', lo: min, hi: max, min, max, lut: SEQUENTIAL_LUT };
}

/**
 * Position of a finite value on the scale, in [0, 1] (0.5 for a degenerate range).
 * @param {Scale} scale
 * @param {number} v
 * @returns {number}
 */
export function unitOf(scale, v) {
  const span = scale.hi - scale.lo;
  if (!(span > 0)) return 0.5;
  return Math.min(1, Math.max(0, (v - scale.lo) / span));
}

/**
 * Writes the colours of `values` into an RGBA buffer (4 bytes per value, alpha 255).
 * @param {Float32Array|number[]} values
 * @param {Scale} scale
 * @param {Uint8ClampedArray} out  At least 4 * values.length bytes.
 */
export function fillRgba(values, scale, out) {
  const { lut, lo } = scale;
  const span = scale.hi - scale.lo;
  const k = span > 0 ? LAST / span : 0;
  const mid = LAST >> 1;
  for (let j = 0, o = 0; j < values.length; j++, o += 4) {
    const v = values[j];
    let r;
    let g;
    let b;
    if (v === v && v !== Infinity && v !== -Infinity) {
      let i = k === 0 ? mid : Math.round((v - lo) * k);
      if (i < 0) i = 0;
      else if (i > LAST) i = LAST;
      r = lut[3 * i];
      g = lut[3 * i + 1];
      b = lut[3 * i + 2];
    } else {
      [r, g, b] = v !== v ? NAN_COLOR : INF_COLOR;
    }
    out[o] = r;
    out[o + 1] = g;
    out[o + 2] = b;
    out[o + 3] = 255;
  }
}

/**
 * CSS colour string of an RGB triple.
 * @param {RGB} rgb
 * @returns {string}
 */
export function cssColor([r, g, b]) {
  return `rgb(${r}, ${g}, ${b})`;
}
