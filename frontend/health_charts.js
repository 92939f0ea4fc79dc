// Small uPlot charts of a layer's training health (vendor/uplot.esm.js): one statistic over the
// measured iterations (one series per shown run), a per-unit vector at the timeline's step, or epoch
// aggregates. The timeline's step is a vertical marker moved without redrawing the data. Hook:
// .xray-health-chart[data-stat][data-layer][data-run][data-axis] with data-step = the marked step.

import uPlot from './vendor/uplot.esm.js';
import { el } from './dom.js';
import { formatValue } from './format.js';

/** One colour per shown run, main run first. */
export const RUN_COLORS = ['#ef6c00', '#1565c0', '#2e7d32', '#6a1b9a', '#c62828'];
const HEIGHT = 140;
const AXIS_FONT = '10px Roboto, Arial, sans-serif';
/** uPlot's y axis: tick length and gap before the labels, CSS px; the least room between two labels. */
const Y_TICK = 4;
const Y_GAP = 4;
const Y_LABEL_SPACE = 18;
/** Steps, epochs and units are whole numbers: x ticks at 1-2-5 multiples of 1 and up, never 0.2. */
const WHOLE_INCRS = Array.from({ length: 30 }, (_, i) => [1, 2, 5][i % 3] * 10 ** Math.floor(i / 3));

let measureContext = null;

/** Width in CSS px of the widest of an axis's labels (nulls are labels uPlot leaves out). */
function labelsWidth(values) {
  if (measureContext === null) measureContext = document.createElement('canvas').getContext('2d') || false;
  let widest = 0;
  for (const v of values || []) {
    if (v === null || v === undefined || v === '') continue;
    const text = String(v);
    widest = Math.max(widest, measureContext ? (measureContext.font = AXIS_FONT, measureContext.measureText(text).width) : text.length * 6);
  }
  return widest;
}

/**
 * Room of the y axis: the widest label, the tick and the gap (so "5.00e-11" is never cut on the left),
 * at least the room of the widest label formatValue writes, so that every chart of a layer has the same
 * plot width and their step markers line up.
 */
function yAxisSize(u, values) {
  return Math.ceil(Math.max(labelsWidth(values), labelsWidth(['-8.88e-88']))) + Y_TICK + Y_GAP + 4;
}

/** A tick label of a log axis: "0.01", "1", "100", "1e-5", "2e4". */
export function logLabel(v) {
  if (v === null || v === undefined) return null;
  if (v >= 1e-3 && v < 1e4) return String(Number(v.toPrecision(3)));
  const [mantissa, exponent] = v.toExponential().split('e');
  return `${Number(Number(mantissa).toPrecision(3))}e${exponent.replace('+', '')}`;
}

/**
 * The splits of a log axis that get a label, a tick and a grid line: the powers of ten, every k-th of
 * them when they would be closer than Y_LABEL_SPACE px; with fewer than two powers of ten in range,
 * 1-2-5 steps as far as they fit. Others are null (uPlot draws nothing there).
 */
function logSplits(u, splits, axisIdx) {
  const key = u.axes[axisIdx].scale;
  const isDecade = (v) => v > 0 && Math.abs(Math.log10(v) - Math.round(Math.log10(v))) < 1e-9;
  const position = (v) => u.valToPos(v, key);
  let keep = splits.map((v) => (isDecade(v) ? v : null));
  const decades = keep.filter((v) => v !== null);
  if (decades.length >= 2) {
    const gap = Math.abs(position(decades[0]) - position(decades[1])) || 1;
    const every = Math.max(1, Math.ceil(Y_LABEL_SPACE / gap));
    const last = decades.length - 1; // counted from the top, so the largest power of ten keeps its label
    keep = keep.map((v) => (v !== null && (last - decades.indexOf(v)) % every === 0 ? v : null));
    return keep;
  }
  let previous = null;
  return splits.map((v) => {
    const lead = Number(v.toExponential()[0]);
    if (!(v > 0) || ![1, 2, 5].includes(lead)) return null;
    if (previous !== null && Math.abs(position(v) - position(previous)) < Y_LABEL_SPACE) return null;
    previous = v;
    return v;
  });
}

/**
 * Aligned uPlot data of several runs' series: x is the union of their x values; non-finite values
 * and, on a log axis, values ≤ 0 become gaps, listed apart (so a gradient that is exactly 0 is said,
 * not silently missing).
 * @param {{x: number[], y: (number|null)[]}[]} series
 * @param {boolean} log
 * @returns {{data: any[], nonfinite: {run: number, x: number, v: number}[], nonpositive: {run: number, x: number, v: number}[], positive: boolean}}
 */
export function alignSeries(series, log) {
  const nonfinite = [];
  const nonpositive = [];
  let positive = false;
  const tables = series.map((s, run) => {
    const y = s.y.map((v, i) => {
      if (v === null || v === undefined) return null;
      if (!Number.isFinite(v)) {
        nonfinite.push({ run, x: s.x[i], v });
        return null;
      }
      if (log && !(v > 0)) {
        nonpositive.push({ run, x: s.x[i], v });
        return null;
      }
      positive = positive || v > 0;
      return v;
    });
    return [Float64Array.from(s.x), y];
  });
  if (!tables.length) return { data: [[]], nonfinite, nonpositive, positive };
  const data = tables.length === 1 ? tables[0] : uPlot.join(tables);
  return { data, nonfinite, nonpositive, positive };
}

/** "what at step 3, 5 (run), …": the first four points of a list, for a chart's note. */
function listed(what, points, o) {
  if (!points.length) return '';
  const shown = points.slice(0, 4).map((n) => `${formatValue(n.v)} at ${o.axis} ${n.x}${o.runs.length > 1 ? ` (${o.runs[n.run]})` : ''}`);
  return `${what}: ${shown.join(', ')}${points.length > 4 ? `, … (${points.length})` : ''}`;
}

export class HealthChart {
  /**
   * @param {{stat: string, title: string, layer: string, runs: string[], axis: 'step'|'unit'|'epoch',
   *   width: number, log?: boolean, unit?: boolean, bars?: boolean, xRange?: [number, number],
   *   series: {x: number[], y: (number|null)[]}[]}} o  xRange: the x axis shared by a layer's step charts
   */
  constructor(o) {
    this.o = o;
    this.element = el('div', 'xray-health-chart');
    Object.assign(this.element.dataset, { stat: o.stat, layer: o.layer, run: o.runs.join(','), axis: o.axis });
    this.head = el('div', 'xray-health-chart-title', o.title);
    this.scaleNote = el('span', 'xray-health-chart-scale', 'log axis');
    this.scaleNote.title = 'The y axis is logarithmic: each grid line is ten times the one below';
    this.scaleNote.hidden = true;
    this.head.append(this.scaleNote);
    this.note = el('div', 'xray-health-chart-note xray-muted', '');
    this.plot = el('div', 'xray-health-chart-plot');
    this.element.append(this.head, this.plot, this.note);
    this.marker = el('div', 'xray-health-marker');
    this.marker.hidden = true;
    this.u = null;
    this.step = null;
    this.setSeries(o.series);
  }

  /** @param {{x: number[], y: (number|null)[]}[]} series */
  setSeries(series) {
    const { o } = this;
    const { data, nonfinite, nonpositive, positive } = alignSeries(series, Boolean(o.log));
    const log = Boolean(o.log) && positive;
    this.element.dataset.points = String(data[0].length);
    this.element.dataset.yScale = log ? 'log' : 'linear';
    this.scaleNote.hidden = !log;
    this.element.dataset.nonfinite = nonfinite.map((n) => n.x).join(',');
    const notes = [listed('non-finite', nonfinite, o), log ? listed('≤ 0, not drawn on the log axis', nonpositive, o) : ''];
    this.note.textContent = notes.filter(Boolean).join('; ') || (data[0].length ? '' : 'no values');
    const shape = JSON.stringify([log, data.length]);
    if (this.u && this.shape === shape) {
      this.u.setData(data);
      this.setStep(this.step);
      return;
    }
    if (this.u) this.u.destroy();
    this.shape = shape;
    const opts = {
      width: o.width,
      height: HEIGHT,
      legend: { show: o.runs.length > 1, live: false },
      cursor: { drag: { x: false, y: false }, points: { show: false } },
      scales: { x: o.xRange ? { time: false, range: o.xRange } : { time: false }, y: log ? { distr: 3, log: 10 } : o.unit ? { range: [0, 1] } : {} },
      axes: [
        { size: 26, font: AXIS_FONT, incrs: WHOLE_INCRS, values: (u, vals) => vals.map((v) => (v === null ? null : String(v))) },
        {
          font: AXIS_FONT,
          size: yAxisSize,
          space: Y_LABEL_SPACE,
          gap: Y_GAP,
          ticks: { size: Y_TICK, ...(log ? { filter: logSplits } : {}) },
          ...(log ? { filter: logSplits, grid: { filter: logSplits }, values: (u, vals) => vals.map(logLabel) }
            : { values: (u, vals) => vals.map((v) => (v === null ? null : formatValue(v))) }),
        },
      ],
      series: [
        { label: o.axis },
        ...o.runs.map((run, i) => ({
          label: run,
          stroke: RUN_COLORS[i % RUN_COLORS.length],
          fill: o.bars ? `${RUN_COLORS[i % RUN_COLORS.length]}88` : undefined,
          width: 1.4,
          spanGaps: !o.bars,
          points: { show: data[0].length < 40 },
          paths: o.bars && o.runs.length === 1 ? uPlot.paths.bars({ size: [0.8, 40] }) : undefined,
        })),
      ],
      hooks: { ready: [(u) => u.over.append(this.marker)], draw: [(u) => { this.u = u; this.placeMarker(); }] },
    };
    this.u = new uPlot(opts, data, this.plot);
    this.setStep(this.step);
  }

  /**
   * Moves the step marker (no data redrawn): hidden when the step is outside the x range.
   * @param {number|null} step
   */
  setStep(step) {
    this.step = step;
    if (step === null || step === undefined) {
      delete this.element.dataset.step;
      this.marker.hidden = true;
      return;
    }
    this.element.dataset.step = String(step);
    this.placeMarker();
  }

  /** Puts the marker at the step (after every draw too: scales are set on uPlot's first draw). */
  placeMarker() {
    const { u, step } = this;
    const scale = u && u.data[0].length ? u.scales.x : null;  // min and max are set on the first draw
    if (step === null || this.o.axis !== 'step' || !scale || scale.min === null || step < scale.min || step > scale.max + 1e-9) {
      this.marker.hidden = true;
      return;
    }
    const left = u.valToPos(step, 'x');
    this.marker.hidden = !Number.isFinite(left);
    this.marker.style.left = `${left}px`;
  }

  destroy() {
    if (this.u) this.u.destroy();
    this.u = null;
  }
}
