// Module Web Worker that lays out the architecture graph, Model Explorer style: dagre runs once per
// expanded container (root or group) on that container's children only, bottom-up, so that an
// expanded group's box is sized by its own layout (graph_place.js). Results are cached per container
// and the expansion state inside it, so expanding one group lays out that group and its ancestors
// only. Containers of the same shape (the same child sizes and edges, in order: the blocks of a
// transformer, their heads, the ranges of a long list) share one dagre run, so "expand all" costs
// one run per distinct shape. Where dagre fails on a container (it recurses, and a long chain can
// exhaust the stack), that container alone is laid out as a plain grid, and the reply names it.
//
// Messages in:  {type: 'graph', graphId, arch}            (once per architecture)
//               {type: 'layout', id, graphId, expanded}   (expanded: group keys)
// Messages out: {id, layout: {boxes, edges, width, height, fallbacks}, ms} or {id, error}

import { graphlib, layout as dagreLayout } from './vendor/dagre.esm.js';
import { buildHierarchy, edgesByContainer } from './graph_model.js';
import { layoutGraph, withGridFallback } from './graph_place.js';

/** @typedef {import('./graph_place.js').Graph} Graph */
/** @typedef {import('./graph_place.js').Shape} Shape */

/** @type {Map<string, Graph|{error: string}>} */
const graphs = new Map();

const GRAPH_OPTIONS = { rankdir: 'TB', nodesep: 18, ranksep: 26, edgesep: 8, marginx: 0, marginy: 0 };

/**
 * Lays out children of the given sizes, linked by edges between child indices, with dagre.
 * @param {{width: number, height: number}[]} sizes
 * @param {[number, number][]} edges
 * @returns {Shape}
 */
function dagreShape(sizes, edges) {
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

const shapeOrGrid = withGridFallback(dagreShape);

self.onmessage = (event) => {
  const message = event.data || {};
  if (message.type === 'graph') {
    const arch = message.arch || {};
    try {
      const h = buildHierarchy(arch);
      graphs.set(message.graphId, { h, edges: edgesByContainer(h, arch.edges || []), cache: new Map(), shapes: new Map() });
    } catch (error) {
      graphs.set(message.graphId, { error: String((error && error.message) || error) });
    }
    return;
  }
  if (message.type !== 'layout') return;
  const started = performance.now();
  try {
    const graph = graphs.get(message.graphId);
    if (!graph) throw new Error(`unknown graph ${message.graphId}`);
    if (graph.error) throw new Error(graph.error);
    const layout = layoutGraph(graph, new Set(message.expanded || []), shapeOrGrid);
    self.postMessage({ id: message.id, layout, ms: performance.now() - started });
  } catch (error) {
    self.postMessage({ id: message.id, error: String((error && error.message) || error) });
  }
};
