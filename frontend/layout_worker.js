// Module Web Worker that lays out the architecture graph, Model Explorer style: dagre runs once per
// expanded container (root or group) on that container's children only, bottom-up, so that an
// expanded group's box is sized by its own layout. Results are cached per container and the
// expansion state inside it, so expanding one group lays out that group and its ancestors only.
// Containers of the same shape (the same child sizes and edges, in order: the blocks of a
// transformer, their heads) share one dagre run, so "expand all" costs one run per distinct shape.
//
// Messages in:  {type: 'graph', graphId, arch}            (once per architecture)
//               {type: 'layout', id, graphId, expanded}   (expanded: group keys)
// Messages out: {id, layout: {boxes, edges, width, height}, ms} or {id, error}

import { graphlib, layout as dagreLayout } from './vendor/dagre.esm.js';
import { buildHierarchy, boxSize, edgesByContainer, GROUP_HEADER, GROUP_PAD } from './graph_model.js';

/**
 * @typedef {Object} Graph
 * @property {any} h  The hierarchy (graph_model.js).
 * @property {Map<string, [string, string][]>} edges  Edges among each container's children.
 * @property {Map<string, any>} cache  Container + expansion state inside it -> its layout.
 * @property {Map<string, Shape>} shapes  Shape signature -> dagre's layout of that shape.
 */
/**
 * @typedef {Object} Shape  A container's layout by child index.
 * @property {{x: number, y: number, width: number, height: number}[]} pos
 * @property {{x: number, y: number}[][]} points  Route of each edge, in edge order.
 * @property {number} width
 * @property {number} height
 */

/** @type {Map<string, Graph>} */
const graphs = new Map();

const GRAPH_OPTIONS = { rankdir: 'TB', nodesep: 18, ranksep: 26, edgesep: 8, marginx: 0, marginy: 0 };

/**
 * Lays out children of the given sizes, linked by edges between child indices, with dagre.
 * @param {{width: number, height: number}[]} sizes
 * @param {[number, number][]} edges
 * @returns {Shape}
 */
function layoutShape(sizes, edges) {
  const g = new graphlib.Graph({ multigraph: false });
  g.setGraph({ ...GRAPH_OPTIONS });
  g.setDefaultEdgeLabel(() => ({}));
  sizes.forEach((size, i) => g.setNode(`n${i}`, { ...size }));
  for (const [a, b] of edges) g.setEdge(`n${a}`, `n${b}`);
  dagreLayout(g);
  const pos = sizes.map((_, i) => {
    const n = g.node(`n${i}`);
    return { x: n.x - n.width / 2, y: n.y - n.height / 2, width: n.width, height: n.height };
  });
  const points = edges.map(([a, b]) => (g.edge(`n${a}`, `n${b}`) || {}).points || []);
  const info = g.graph();
  return { pos, points, width: info.width || 0, height: info.height || 0 };
}

/**
 * Positions of a container's children (relative), from the graph's shape cache when a container
 * of the same shape was laid out before.
 * @param {Graph} graph
 * @param {string[]} keys
 * @param {Map<string, {width: number, height: number}>} sizes
 * @param {[string, string][]} edges
 */
function layoutContainer(graph, keys, sizes, edges) {
  const index = new Map(keys.map((k, i) => [k, i]));
  const sizeList = keys.map((k) => sizes.get(k));
  const indexEdges = edges.map(([a, b]) => [index.get(a), index.get(b)]);
  const signature = `${sizeList.map((s) => `${s.width}x${s.height}`).join(',')}|${indexEdges.map(([a, b]) => `${a}>${b}`).join(',')}`;
  let shape = graph.shapes.get(signature);
  if (!shape) {
    shape = layoutShape(sizeList, indexEdges);
    graph.shapes.set(signature, shape);
  }
  const pos = {};
  keys.forEach((key, i) => {
    pos[key] = shape.pos[i];
  });
  const edgePoints = edges.map(([a, b], i) => ({ src: a, dst: b, points: shape.points[i] }));
  return { pos, edgePoints, width: shape.width, height: shape.height };
}

/**
 * The relative layout of a container, from the cache when its expansion state was seen before.
 * @param {Graph} graph
 * @param {string} container
 * @param {Set<string>} expanded
 */
function containerLayout(graph, container, expanded) {
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
    if (expanded.has(key)) {
      const sub = containerLayout(graph, key, expanded);
      inner.set(key, sub);
      sizes.set(key, { width: Math.max(sub.width + 2 * GROUP_PAD, 120), height: sub.height + 2 * GROUP_PAD + GROUP_HEADER });
    } else {
      sizes.set(key, boxSize(h, key));
    }
  }
  const own = keys.length ? layoutContainer(graph, keys, sizes, graph.edges.get(container) || []) : { pos: {}, edgePoints: [], width: 0, height: 0 };
  const result = { ...own, inner };
  graph.cache.set(cacheKey, result);
  return result;
}

/** Absolute boxes and edge routes of the whole visible graph. */
function place(layoutTree, dx, dy, boxes, edges) {
  for (const [key, p] of Object.entries(layoutTree.pos)) {
    const box = { x: p.x + dx, y: p.y + dy, width: p.width, height: p.height, expanded: layoutTree.inner.has(key) };
    boxes[key] = box;
    const sub = layoutTree.inner.get(key);
    if (sub) {
      const ox = box.x + (box.width - sub.width) / 2;
      place(sub, ox, box.y + GROUP_PAD + GROUP_HEADER, boxes, edges);
    }
  }
  for (const e of layoutTree.edgePoints) {
    edges.push({ src: e.src, dst: e.dst, points: e.points.map((pt) => ({ x: pt.x + dx, y: pt.y + dy })) });
  }
}

self.onmessage = (event) => {
  const message = event.data || {};
  if (message.type === 'graph') {
    const arch = message.arch || {};
    const h = buildHierarchy(arch);
    graphs.set(message.graphId, { h, edges: edgesByContainer(h, arch.edges || []), cache: new Map(), shapes: new Map() });
    return;
  }
  if (message.type !== 'layout') return;
  const started = performance.now();
  try {
    const graph = graphs.get(message.graphId);
    if (!graph) throw new Error(`unknown graph ${message.graphId}`);
    const tree = containerLayout(graph, '', new Set(message.expanded || []));
    const boxes = {};
    const edges = [];
    place(tree, 0, 0, boxes, edges);
    const layout = { boxes, edges, width: tree.width, height: tree.height };
    self.postMessage({ id: message.id, layout, ms: performance.now() - started });
  } catch (error) {
    self.postMessage({ id: message.id, error: String((error && error.message) || error) });
  }
};
