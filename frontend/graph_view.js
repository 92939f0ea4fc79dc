// The architecture view: the traced dataflow graph as a layered DAG in SVG, inputs at the top.
// Groups (containers) collapse and expand; layout runs in the layout worker, per group. Pan with
// the mouse, zoom with the wheel, search by name. Recorded layers are marked with their kinds, and
// clicking one opens its layer view. Stable hooks: [data-node-id], [data-layer], [data-group],
// [data-action=expand-all|collapse-all|fit], input[data-action=search].

import { el, svg } from './dom.js';
import { LayoutClient } from './graph_layout.js';
import { allGroups, ancestors, buildHierarchy, defaultExpanded, findNode, groupKey, moduleNode, visibleEdges } from './graph_model.js';
import { fallbackNotice, gridGraph, layOutAsGrid } from './graph_place.js';
import { edgePath, drawNode, drawGroup } from './graph_draw.js';
import { GraphHealth } from './graph_health.js';
import { PanZoom } from './graph_panzoom.js';

/** @typedef {import('./graph_layout.js').GraphLayout} GraphLayout */
/** @typedef {{layer: string, kinds: string[]}} RecordedMark */

export class GraphView {
  /**
   * @param {{onOpenLayer: (layer: string) => void, onError: (error: unknown) => void}} callbacks
   */
  constructor({ onOpenLayer, onError }) {
    this.onOpenLayer = onOpenLayer;
    this.onError = onError;
    this.client = null;
    /** @type {any} */ this.arch = null;
    /** @type {ReturnType<typeof buildHierarchy>|null} */ this.h = null;
    /** @type {Set<string>} */ this.expanded = new Set();
    /** @type {Map<string, RecordedMark>} */ this.recorded = new Map();
    /** @type {{only: Set<string>, changed: Set<string>, missing: string[], other: string}|null} */ this.diff = null;
    /** @type {GraphLayout|null} */ this.layout = null;
    this.lastLayoutMs = 0;
    this.fitted = false;
    this.seq = 0;
    /** @type {string|null} */ this.highlighted = null;
    this.health = new GraphHealth(this); // colours by a health statistic (graph_health.js)
    this.build();
  }

  build() {
    this.element = el('section', 'xray-graph-view');
    this.element.dataset.view = 'graph';
    this.element.id = 'xray-graph';
    const bar = el('div', 'xray-graph-bar');
    this.searchInput = /** @type {HTMLInputElement} */ (el('input', 'xray-filter xray-graph-search'));
    this.searchInput.type = 'search';
    this.searchInput.placeholder = 'Find a node by name (Enter)';
    this.searchInput.dataset.action = 'search';
    this.searchInput.setAttribute('aria-label', 'Find a node by name');
    this.searchInput.addEventListener('keydown', (e) => {
      if (e.key === 'Enter') this.search(this.searchInput.value);
    });
    const button = (action, text, title, onClick) => {
      const b = /** @type {HTMLButtonElement} */ (el('button', 'xray-button', text));
      b.type = 'button';
      b.dataset.action = action;
      b.title = title;
      b.addEventListener('click', onClick);
      return b;
    };
    this.status = el('span', 'xray-muted xray-graph-status', '');
    bar.append(
      this.searchInput,
      button('expand-all', 'Expand all', 'Open every group', () => this.setExpanded(allGroups(this.h))),
      button('collapse-all', 'Collapse all', 'Close every group', () => this.setExpanded(new Set())),
      button('fit', 'Fit', 'Fit the graph to the view', () => this.fit()),
      this.status,
    );
    this.legend = el('div', 'xray-graph-legend xray-muted', '');
    // Says when the graph is drawn by the plain grid instead of dagre ([data-graph-notice]).
    this.notice = el('div', 'xray-graph-notice', '');
    this.notice.dataset.graphNotice = '';
    this.notice.setAttribute('role', 'status');
    this.notice.hidden = true;
    this.canvas = el('div', 'xray-graph-canvas');
    this.svg = svg('svg', { class: 'xray-graph-svg' });
    this.viewport = svg('g', { class: 'xray-graph-viewport' });
    this.svg.append(this.viewport);
    this.canvas.append(this.svg);
    this.element.append(bar, this.legend, this.notice, this.health.element, this.canvas);
    this.svg.addEventListener('click', (e) => this.onClick(e));
    this.panzoom = new PanZoom(this.svg, this.viewport, this.canvas);
  }

  /**
   * Shows an architecture. The same object keeps the expansion state and the worker's cache.
   * @param {any} arch
   */
  async setArchitecture(arch) {
    if (arch === this.arch) {
      if (!this.fitted && this.layout) this.fit();
      return;
    }
    this.arch = arch;
    this.h = arch ? buildHierarchy(arch) : null;
    this.gridGraph = null;
    this.expanded = this.h ? defaultExpanded(this.h) : new Set();
    this.fitted = false;
    await this.relayout();
  }

  /** @param {Map<string, RecordedMark>} recorded  By module name. */
  setRecorded(recorded) {
    this.recorded = recorded;
    if (this.layout) this.render();
  }

  /** @param {{only: Set<string>, changed: Set<string>, missing: string[], other: string}|null} diff */
  setDiff(diff) {
    this.diff = diff;
    if (this.layout) this.render();
  }

  /** @param {Set<string>} expanded */
  async setExpanded(expanded) {
    if (!this.h) return;
    this.expanded = expanded;
    await this.relayout();
  }

  /** @param {string} key  A group key. */
  toggle(key) {
    const next = new Set(this.expanded);
    if (next.has(key)) {
      for (const k of [...next]) if (k === key || ancestors(this.h, k).includes(key)) next.delete(k);
    } else next.add(key);
    return this.setExpanded(next);
  }

  async relayout() {
    const seq = ++this.seq;
    if (!this.arch || !this.h) {
      this.layout = null;
      this.viewport.replaceChildren();
      this.status.textContent = 'This run has no architecture record.';
      return;
    }
    this.client = this.client || new LayoutClient();
    this.element.dataset.state = 'layout';
    let layout;
    let ms;
    let notice = '';
    try {
      ({ layout, ms } = await this.client.layout(this.arch, this.expanded));
      if (seq !== this.seq) return;
      if (layout.fallbacks.length) notice = fallbackNotice(layout.fallbacks, 'dagre could not lay out');
    } catch (error) {
      if (seq !== this.seq) return;
      // The worker failed as a whole: lay out here, without dagre, rather than leave the graph empty.
      try {
        this.gridGraph = this.gridGraph || gridGraph(this.h, this.arch.edges || []);
        ({ layout, ms, notice } = layOutAsGrid(this.gridGraph, this.expanded, error));
      } catch {
        this.element.dataset.state = 'error';
        this.onError(error);
        return;
      }
    }
    this.layout = layout;
    this.lastLayoutMs = ms;
    this.showNotice(notice);
    try {
      this.render();
    } catch (error) {
      this.element.dataset.state = 'error';
      this.onError(error);
      return;
    }
    if (!this.fitted) this.fit();
    this.element.dataset.state = 'ready';
  }

  /** @param {string} text  Empty hides the notice. */
  showNotice(text) {
    this.notice.textContent = text;
    this.notice.hidden = !text;
    if (text) this.element.dataset.layoutFallback = 'grid';
    else delete this.element.dataset.layoutFallback;
  }

  render() {
    const { h, layout } = this;
    if (!h || !layout) return;
    const groupsLayer = svg('g', { class: 'xray-graph-groups' });
    const edgesLayer = svg('g', { class: 'xray-graph-edges' });
    const nodesLayer = svg('g', { class: 'xray-graph-nodes' });
    const recordedInside = this.recordedPerGroup();
    for (const [key, box] of Object.entries(layout.boxes)) {
      if (key.startsWith('group:')) groupsLayer.append(drawGroup(this.h, key, box, recordedInside.get(key) || 0));
      else nodesLayer.append(drawNode(this.h, key, box, this.recorded, this.diff));
    }
    const routes = new Map(layout.edges.map((e) => [`${e.src}\u0000${e.dst}`, e.points]));
    for (const { src, dst } of visibleEdges(h, this.arch.edges || [], this.expanded)) {
      const a = layout.boxes[src];
      const b = layout.boxes[dst];
      if (!a || !b) continue;
      const path = svg('path', { class: 'xray-edge', d: edgePath(a, b, routes.get(`${src}\u0000${dst}`)) });
      path.dataset.src = src;
      path.dataset.dst = dst;
      edgesLayer.append(path);
    }
    this.viewport.replaceChildren(groupsLayer, edgesLayer, nodesLayer);
    const boxes = Object.keys(layout.boxes).length;
    this.status.textContent = `${h.nodes.size} nodes, ${h.groups.size} groups · ${boxes} boxes shown · laid out in ${Math.round(this.lastLayoutMs)} ms`;
    this.legend.textContent = this.legendText();
    if (this.highlighted) this.mark(this.highlighted);
    this.health.paint();
  }

  /** @returns {Map<string, number>} Recorded layers inside each group (a reused one once). */
  recordedPerGroup() {
    const inside = new Map();
    for (const node of this.h.nodes.values()) {
      if (node.kind !== 'module' || !this.recorded.has(node.module)) continue;
      for (const g of ancestors(this.h, node.id)) inside.set(g, (inside.get(g) || new Set()).add(node.module));
    }
    return new Map([...inside].map(([g, modules]) => [g, modules.size]));
  }

  legendText() {
    const parts = [`${this.recorded.size} recorded layer${this.recorded.size === 1 ? '' : 's'} (orange)`];
    if (this.diff) {
      parts.push(`compared with ${this.diff.other}: ${this.diff.only.size} node(s) only in this run (red), ${this.diff.changed.size} changed (purple)`);
      if (this.diff.missing.length) parts.push(`${this.diff.missing.length} only in ${this.diff.other}: ${this.diff.missing.slice(0, 6).join(', ')}${this.diff.missing.length > 6 ? ', …' : ''}`);
    }
    return parts.join(' · ');
  }

  /** @param {MouseEvent} event */
  onClick(event) {
    if (this.panzoom.dragged) return;
    const target = /** @type {Element} */ (event.target);
    const node = target.closest('[data-node-id]');
    if (node) {
      const layer = /** @type {SVGElement} */ (node).dataset.layer;
      const mark = layer !== undefined ? this.recorded.get(layer) : undefined;
      if (mark) this.onOpenLayer(mark.layer);
      else if (layer !== undefined) this.status.textContent = `${layer} is not recorded in this run: add it to the plan to see its tensors.`;
      return;
    }
    const group = target.closest('[data-group]');
    if (group && (!group.classList.contains('xray-group-open') || target.closest('[data-action=toggle]'))) {
      this.toggle(groupKey(/** @type {SVGElement} */ (group).dataset.group));
    }
  }

  /**
   * Finds a node by name (module name, node id or op), opens its groups and centres it.
   * @param {string} text
   * @returns {Promise<boolean>}  Whether one was found.
   */
  async search(text) {
    if (!text.trim() || !this.h) return false;
    const found = findNode(this.h, text);
    if (!found) {
      this.status.textContent = `No node matches “${text.trim()}”.`;
      return false;
    }
    await this.reveal(found.id);
    return true;
  }

  /**
   * Opens the groups around a node, centres it and marks it.
   * @param {string} id
   */
  async reveal(id) {
    const hidden = ancestors(this.h, id).filter((g) => !this.expanded.has(g));
    if (hidden.length) await this.setExpanded(new Set([...this.expanded, ...hidden]));
    this.highlighted = id;
    this.mark(id);
    const box = this.layout && this.layout.boxes[id];
    if (box) this.panzoom.centre(box.x + box.width / 2, box.y + box.height / 2);
  }

  /**
   * Marks the first call of a recorded layer's module and centres it (the way back from a layer).
   * @param {string} moduleName
   */
  async highlightLayer(moduleName) {
    if (!this.h) return;
    const node = moduleNode(this.h, moduleName);
    if (node) await this.reveal(node.id);
  }

  /** @param {string} id */
  mark(id) {
    for (const old of this.viewport.querySelectorAll('.xray-highlight')) old.classList.remove('xray-highlight');
    const g = this.viewport.querySelector(`[data-node-id="${CSS.escape(id)}"]`);
    if (g) g.classList.add('xray-highlight');
  }

  fit() {
    if (!this.layout) return;
    this.panzoom.fit(this.layout.width, this.layout.height);
    this.fitted = this.canvas.clientWidth > 0; // fitted again once shown when it was hidden
  }
}
