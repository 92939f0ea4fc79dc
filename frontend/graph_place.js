// Where the visible boxes go, one container at a time, bottom-up: each expanded container's children
// are laid out by a shape function (dagre in the worker, layout_worker.js; the plain grid below when
// that fails) and an expanded group's box is sized by its own layout. Pure, no DOM and no dagre, so
// that the view can lay out without the worker when the worker fails.

import { boxSize, edgesByContainer, GROUP_HEADER, GROUP_PAD } from './graph_model.js';

/**
 * @typedef {Object} Shape  A container's layout by child index.
 * @property {{x: number, y: number, width: number, height: number}[]} pos
 * @property {{x: number, y: number}[][]} points  Route of each edge, in edge order ([] to let the
 *   view draw a curve).
 * @property {number} width
 * @property {number} height
 * @property {string} [fallback]  Why the grid stands in for the shape function.
 */
/**
 * @typedef {Object} Graph
 * @property {any} h  The hierarchy (graph_model.js).
 * @property {Map<string, [string, string][]>} edges  Edges among each container's children.
 * @property {Map<string, any>} cache  Container + expansion state inside it -> its layout.
 * @property {Map<string, Shape>} shapes  Shape signature -> the layout of that shape.
 */
/** @typedef {(sizes: {width: number, height: number}[], edges: [number, number][]) => Shape} ShapeFn */

const GAP_X = 18;
const GAP_Y = 26;
/** The grid puts at most this many boxes side by side. */
export const GRID_COLUMNS = 8;

/**
 * A layered layout without dagre and without recursion: each child one row below its deepest
 * producer among the earlier children (execution order), rows wrapped at GRID_COLUMNS boxes, centred.
 * @type {ShapeFn}
 */
export function gridShape(sizes, edges) {
  const rank = sizes.map(() => 0);
  const incoming = sizes.map(() => []);
  for (const [a, b] of edges) if (a < b) incoming[b].push(a);
  for (let i = 0; i < sizes.length; i++) for (const a of incoming[i]) rank[i] = Math.max(rank[i], rank[a] + 1);
  const rows = [];
  sizes.forEach((_, i) => {
    (rows[rank[i]] = rows[rank[i]] || []).push(i);
  });
  const lines = [];
  for (const row of rows) if (row) for (let i = 0; i < row.length; i += GRID_COLUMNS) lines.push(row.slice(i, i + GRID_COLUMNS));
  const widthOf = (line) => line.reduce((w, i) => w + sizes[i].width, 0) + GAP_X * (line.length - 1);
  const width = Math.max(0, ...lines.map(widthOf));
  const pos = new Array(sizes.length);
  let y = 0;
  for (const line of lines) {
    let x = (width - widthOf(line)) / 2;
    const height = Math.max(...line.map((i) => sizes[i].height));
    for (const i of line) {
      pos[i] = { x, y: y + (height - sizes[i].height) / 2, width: sizes[i].width, height: sizes[i].height };
      x += sizes[i].width + GAP_X;
    }
    y += height + GAP_Y;
  }
  return { pos, points: edges.map(() => []), width, height: Math.max(0, y - GAP_Y) };
}

/**
 * A shape function that falls back to the grid where `shapeFn` throws (dagre recurses, and a long
 * chain can exhaust the stack); the grid's shape then says why. Children without edges among them
 * (the items of a list whose dataflow runs through a sibling group) go in the grid too: dagre would
 * put them all on one rank, one very wide row.
 * @param {ShapeFn} shapeFn
 * @returns {ShapeFn}
 */
export function withGridFallback(shapeFn) {
  return (sizes, edges) => {
    if (!edges.length && sizes.length > GRID_COLUMNS) return gridShape(sizes, edges);
    try {
      return shapeFn(sizes, edges);
    } catch (error) {
      return { ...gridShape(sizes, edges), fallback: String((error && error.message) || error) };
    }
  };
}

/**
 * Positions of a container's children (relative), from the shape cache when a container of the same
 * shape (child sizes and edges, in order) was laid out before.
 */
function layoutContainer(graph, keys, sizes, edges, shapeFn) {
  const index = new Map(keys.map((k, i) => [k, i]));
  const sizeList = keys.map((k) => sizes.get(k));
  const indexEdges = edges.map(([a, b]) => [index.get(a), index.get(b)]);
  const signature = `${sizeList.map((s) => `${s.width}x${s.height}`).join(',')}|${indexEdges.map(([a, b]) => `${a}>${b}`).join(',')}`;
  let shape = graph.shapes.get(signature);
  if (!shape) {
    shape = shapeFn(sizeList, indexEdges);
    graph.shapes.set(signature, shape);
  }
  const pos = {};
  keys.forEach((key, i) => {
    pos[key] = shape.pos[i];
  });
  const edgePoints = edges.map(([a, b], i) => ({ src: a, dst: b, points: shape.points[i] || [] }));
  return { pos, edgePoints, width: shape.width, height: shape.height, fallback: shape.fallback };
}

/**
 * The relative layout of a container, from the cache when its expansion state was seen before.
 * @param {Graph} graph
 * @param {string} container
 * @param {Set<string>} expanded
 * @param {ShapeFn} shapeFn
 */
export function containerLayout(graph, container, expanded, shapeFn) {
  const { h } = graph;
  const keys = h.children.get(container) || [];
  const openInside = [];
  const collect = (c) => {
    for (const k of h.children.get(c) || []) if (expanded.has(k)) { openInside.push(k); collect(k); }
  };
  collect(container);
  const cacheKey = `${container}\u0000${openInside.sort().join('\u0001')}`;
  const cached = graph.cache.get(cacheKey);
  if (cached) return cached;
  const sizes = new Map();
  const inner = new Map();
  for (const key of keys) {
    if (expanded.has(key) && h.children.has(key)) {
      const sub = containerLayout(graph, key, expanded, shapeFn);
      inner.set(key, sub);
      sizes.set(key, { width: Math.max(sub.width + 2 * GROUP_PAD, 120), height: sub.height + 2 * GROUP_PAD + GROUP_HEADER });
    } else {
      sizes.set(key, boxSize(h, key));
    }
  }
  const empty = { pos: {}, edgePoints: [], width: 0, height: 0, fallback: undefined };
  const own = keys.length ? layoutContainer(graph, keys, sizes, graph.edges.get(container) || [], shapeFn) : empty;
  const result = { ...own, inner };
  graph.cache.set(cacheKey, result);
  return result;
}

/**
 * Absolute boxes and edge routes of the whole visible graph.
 * @param {string} container
 * @param {string[]} fallbacks  Gains the containers laid out by the grid.
 */
function place(container, tree, dx, dy, boxes, edges, fallbacks) {
  if (tree.fallback) fallbacks.push(container);
  for (const [key, p] of Object.entries(tree.pos)) {
    const box = { x: p.x + dx, y: p.y + dy, width: p.width, height: p.height, expanded: tree.inner.has(key) };
    boxes[key] = box;
    const sub = tree.inner.get(key);
    if (sub) place(key, sub, box.x + (box.width - sub.width) / 2, box.y + GROUP_PAD + GROUP_HEADER, boxes, edges, fallbacks);
  }
  for (const e of tree.edgePoints) {
    edges.push({ src: e.src, dst: e.dst, points: e.points.map((pt) => ({ x: pt.x + dx, y: pt.y + dy })) });
  }
}

/**
 * The layout of the visible graph for a set of expanded groups.
 * @param {Graph} graph
 * @param {Set<string>} expanded
 * @param {ShapeFn} shapeFn
 * @returns {{boxes: Record<string, any>, edges: any[], width: number, height: number, fallbacks: string[]}}
 *   fallbacks: the containers ("" the top) that the grid laid out because the shape function failed.
 */
export function layoutGraph(graph, expanded, shapeFn) {
  const tree = containerLayout(graph, '', expanded, shapeFn);
  const boxes = {};
  const edges = [];
  const fallbacks = [];
  place('', tree, 0, 0, boxes, edges, fallbacks);
  return { boxes, edges, width: tree.width, height: tree.height, fallbacks };
}

/**
 * A graph to lay out on the main thread with the grid alone: the view's way on when the worker fails.
 * @param {any} h
 * @param {{src: string, dst: string}[]} edges  The architecture's.
 * @returns {Graph}
 */
export function gridGraph(h, edges) {
  return { h, edges: edgesByContainer(h, edges), cache: new Map(), shapes: new Map() };
}

/**
 * The notice for containers laid out by the grid.
 * @param {string[]} containers  Keys ("" the top level).
 * @param {string} what  What failed, before the names.
 */
export function fallbackNotice(containers, what) {
  const names = containers.map((k) => (k ? k.slice('group:'.length) : 'the top level'));
  const shown = names.slice(0, 3).join(', ') + (names.length > 3 ? ` and ${names.length - 3} more` : '');
  return `${what} ${shown}: drawn as a plain grid in execution order (collapse groups for a clearer graph).`;
}

/** The whole graph laid out here, as a plain grid, when the layout worker failed with ``error``:
 * ``{layout, ms, notice}``. */
export function layOutAsGrid(graph, expanded, error) {
  const started = performance.now();
  const layout = layoutGraph(graph, expanded, gridShape);
  const why = String(error instanceof Error ? error.message : error);
  const notice = `${why.charAt(0).toUpperCase()}${why.slice(1)}: the graph is drawn as a plain grid in execution order.`;
  return { layout, ms: performance.now() - started, notice };
}
