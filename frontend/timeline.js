// The one timeline: the step scrubber (controls.js), play/pause with a speed setting, and the
// step's wall time. Playing waits for the next step's frames (the app prefetches them), so it
// never shows half-loaded steps. Steps with severe findings are marked over the scrubber's track.
// Hooks: [data-action=play], select[data-action=speed], [data-timeline-mark][data-step][data-rule].

import { Scrubber } from './controls.js';
import { el } from './dom.js';
import { findingStep, indexAtOrBefore } from './steps.js';

/** Steps per second offered by the speed setting. */
export const SPEEDS = [1, 2, 4, 8, 16];

export class Timeline {
  /**
   * @param {(committed: boolean) => void} onMove
   * @param {(step: number) => boolean} isReady  Whether a step's frames are loaded.
   */
  constructor(onMove, isReady) {
    this.isReady = isReady;
    this.scrubber = new Scrubber((_index, committed) => onMove(committed));
    this.element = el('div', 'xray-timeline');
    this.playButton = /** @type {HTMLButtonElement} */ (el('button', 'xray-button xray-play', '▶ Play'));
    this.playButton.type = 'button';
    this.playButton.dataset.action = 'play';
    this.playButton.title = 'Play through the recorded steps (space)';
    this.playButton.addEventListener('click', () => this.toggle());
    this.speed = /** @type {HTMLSelectElement} */ (el('select', 'xray-select xray-speed'));
    this.speed.dataset.action = 'speed';
    this.speed.setAttribute('aria-label', 'Playing speed');
    for (const s of SPEEDS) {
      const option = /** @type {HTMLOptionElement} */ (el('option', '', `${s} step${s === 1 ? '' : 's'}/s`));
      option.value = String(s);
      this.speed.append(option);
    }
    this.speed.value = '4';
    this.wallTime = el('span', 'xray-muted xray-wall-time', '');
    this.wallTime.id = 'xray-wall-time';
    this.element.append(this.playButton, this.speed, this.scrubber.element, this.wallTime);
    this.timer = null;
    this.playing = false;
    /** @type {{step: number, rule: string, layer?: string, run?: string}[]} */
    this.marks = [];
  }

  get steps() { return this.scrubber.steps; }
  get index() { return this.scrubber.index; }
  get step() { return this.scrubber.step; }

  setSteps(steps, index) {
    this.scrubber.setSteps(steps, index);
    this.playButton.disabled = steps.length <= 1;
    if (steps.length <= 1) this.pause();
    this.drawMarks();
  }

  /**
   * Marks steps over the scrubber's track (the steps of severe findings); a mark sits where its
   * step falls between the recorded steps, and a click moves to the capture a finding opens at
   * (steps.js: findingStep; a non-finite value's first capture at or after it).
   * @param {{step: number, rule: string, layer?: string, run?: string}[]} marks
   */
  setMarks(marks) {
    this.marks = marks.slice();
    this.drawMarks();
  }

  drawMarks() {
    const steps = this.scrubber.steps;
    const seen = new Set();
    const nodes = [];
    for (const mark of this.marks) {
      const key = `${mark.step}:${mark.rule}`;
      if (seen.has(key) || !steps.length) continue;
      seen.add(key);
      const node = el('span', `xray-timeline-mark xray-mark-${mark.rule}`);
      node.dataset.timelineMark = '';
      node.dataset.step = String(mark.step);
      node.dataset.rule = mark.rule;
      if (mark.run) node.dataset.run = mark.run;
      const others = this.marks.filter((m) => m.step === mark.step && m.rule === mark.rule).map((m) => m.layer).filter(Boolean);
      node.title = `step ${mark.step}: ${mark.rule}${others.length ? ` in ${[...new Set(others)].join(', ')}` : ''}`;
      node.style.left = `${markPosition(steps, mark.step) * 100}%`;
      node.addEventListener('click', () => {
        this.scrubber.setSteps(steps, findingStep(steps, mark.step, mark.rule === 'nonfinite').index);
        this.scrubber.changed(true);
      });
      nodes.push(node);
    }
    this.scrubber.marks.replaceChildren(...nodes);
  }

  /** @param {number} delta */
  move(delta) {
    this.scrubber.move(delta);
  }

  /**
   * The timeline's keys, on the whole page: arrows step, Home and End jump, space plays (`canPlay`).
   * Ignored with a modifier and in form fields.
   * @param {KeyboardEvent} event
   * @param {boolean} canPlay
   */
  onKey(event, canPlay) {
    if (event.altKey || event.ctrlKey || event.metaKey || event.shiftKey) return;
    const target = /** @type {HTMLElement|null} */ (event.target);
    if (target && (/^(INPUT|SELECT|TEXTAREA)$/.test(target.tagName) || target.isContentEditable)) return;
    const moves = { ArrowLeft: -1, ArrowRight: 1, Home: -Infinity, End: Infinity };
    if (event.key in moves) {
      event.preventDefault();
      const delta = moves[event.key];
      this.move(Number.isFinite(delta) ? delta : delta > 0 ? this.steps.length : -this.steps.length);
    } else if (event.key === ' ' && canPlay) {
      event.preventDefault();
      this.toggle();
    }
  }

  /** @param {number|null} wallTime  Seconds since the epoch. */
  setWallTime(wallTime) {
    this.wallTime.textContent = typeof wallTime === 'number' && Number.isFinite(wallTime)
      ? new Date(wallTime * 1000).toLocaleString()
      : '';
  }

  toggle() {
    if (this.playing) this.pause();
    else this.play();
  }

  play() {
    if (this.scrubber.steps.length <= 1) return;
    if (this.scrubber.index >= this.scrubber.steps.length - 1) {
      this.scrubber.setSteps(this.scrubber.steps, 0); // from the start again
      this.scrubber.changed(true);
    }
    this.playing = true;
    this.playButton.textContent = '❚❚ Pause';
    this.playButton.dataset.playing = 'true';
    this.tick();
  }

  pause() {
    this.playing = false;
    clearTimeout(this.timer);
    this.timer = null;
    this.playButton.textContent = '▶ Play';
    this.playButton.dataset.playing = 'false';
  }

  tick() {
    clearTimeout(this.timer);
    if (!this.playing) return;
    const delay = 1000 / Number(this.speed.value || 4);
    this.timer = setTimeout(() => {
      const steps = this.scrubber.steps;
      const next = this.scrubber.index + 1;
      if (next >= steps.length) return this.pause();
      if (this.isReady(steps[next])) this.scrubber.move(1);
      this.tick(); // not ready: wait for the prefetch rather than show a half-loaded step
    }, delay);
  }
}

/**
 * Where a step sits on a scrubber over `steps` (0 to 1): between two recorded steps in proportion.
 * @param {number[]} steps  Sorted.
 * @param {number} step
 */
export function markPosition(steps, step) {
  const n = steps.length;
  if (n <= 1 || step <= steps[0]) return 0;
  if (step >= steps[n - 1]) return 1;
  const i = indexAtOrBefore(steps, step);
  return (i + (step - steps[i]) / (steps[i + 1] - steps[i])) / (n - 1);
}
