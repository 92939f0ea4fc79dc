// Module Web Worker that lays out the architecture graph, Model Explorer style: dagre runs once per
// expanded container (root or group) on that container's children only, bottom-up, so that an
// expanded group's box is sized by its own layout. Results are cached per container and the
// expansion state inside it, so expanding one group lays out that group and its ancestors only.
//
// Messages in:  {type: 'graph', graphId, arch}            (once per architecture)
//               {type: 'layout', id, graphId, expanded}   (expanded: group keys)
// Messages out: {id, layout: {boxes, edges, width, height}, ms} or {id, error}

import { graphlib, layout as dagreLayout } from './vendor/dagre.esm.js';
import { buildHierarchy, boxSize, containerEdges, GROUP_HEADER, GROUP_PAD } from './graph_model.js';

/** @type {Map<string, {h: any, edges: any[], cache: Map<string, any>}>} */
const graphs = new Map();

const GRAPH_OPTIONS = { rankdir: 'TB', nodesep: 18, ranksep: 26, edgesep: 8, marginx: 0, marginy: 0 };

/**
 * Lays out one container whose children's sizes are known; returns relative positions.
 * @param {string[]} keys
 * @param {Map<string, {width: number, height: number}>} sizes
 * @param {[string, string][]} edges
 */
function layoutContainer(keys, sizes, edges) {
  const g = new graphlib.Graph({ multigraph: false });
  g.setGraph({ ...GRAPH_OPTIONS });
  g.setDefaultEdgeLabel(() => ({}));
  for (const key of keys) g.setNode(key, { ...sizes.get(key) });
  for (const [a, b] of edges) g.setEdge(a, b);
  dagreLayout(g);
  const pos = {};
  for (const key of keys) {
    const n = g.node(key);
    pos[key] = { x: n.x - n.width / 2, y: n.y - n.height / 2, width: n.width, height: n.height };
  }
  const edgePoints = edges.map(([a, b]) => ({ src: a, dst: b, points: (g.edge(a, b) || {}).points || [] }));
  const info = g.graph();
  return { pos, edgePoints, width: info.width || 0, height: info.height || 0 };
}

/**
 * The relative layout of a container, from the cache when its expansion state was seen before.
 * @param {{h: any, edges: any[], cache: Map<string, any>}} graph
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
  const own = keys.length ? layoutContainer(keys, sizes, containerEdges(h, graph.edges, container)) : { pos: {}, edgePoints: [], width: 0, height: 0 };
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
    graphs.set(message.graphId, { h: buildHierarchy(arch), edges: arch.edges || [], cache: new Map() });
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
