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
        { size: 26, font: '10px Roboto, Arial, sans-serif', values: (u, vals) => vals.map((v) => String(v)) },
        { size: 52, font: '10px Roboto, Arial, sans-serif', values: (u, vals) => vals.map(formatValue) },
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
