// The architecture as a hierarchy of groups (containers) and nodes, and what of it is visible for a
// set of expanded groups. Pure functions, no DOM: the layout worker imports this module too.
//
// Groups are the traced containers, name groups of containers never called and ranges of long lists
// (graph_groups.js). Keys: a node's key is its architecture id ("module:conv1:0"); a group's key is
// "group:" + its name ("group:layer1.0", "group:layers", "group:layers.0–99"). The root is "".

import { chunkContainers, nameGroups } from './graph_groups.js';

/** Sizes of the boxes drawn, in CSS pixels (fixed, so that scrubbing never lays out again). */
export const SIZES = {
  module: { width: 168, height: 36 },
  function: { width: 72, height: 22 },
  input: { width: 124, height: 26 },
  output: { width: 124, height: 26 },
  group: { width: 190, height: 40 },
};
/** Room around and above (header) the children of an expanded group. */
export const GROUP_PAD = 14;
export const GROUP_HEADER = 24;
/** Groups are opened, depth by depth, while the graph shows no more boxes than this. */
export const DEFAULT_BUDGET = 60;

/**
 * @typedef {Object} Hierarchy
 * @property {Map<string, any>} nodes    Architecture nodes by id.
 * @property {Map<string, {name: string, type: string|null, parent: string, children: string[], depth: number, kind: 'module'|'name'|'range'}>} groups
 *   By name. kind: a traced container, a container never called (grouped by name), a range of a long list.
 * @property {Map<string, string>} parentOf  Key -> key of its container ("" at the top).
 * @property {Map<string, string[]>} children  Container key -> keys of its children, in execution order.
 */

/** @param {string} name */
export const groupKey = (name) => `group:${name}`;

/**
 * Builds the hierarchy of an architecture record (see xray_tb/trace/tracer.py).
 * @param {{nodes?: any[], groups?: any[]}} arch
 * @returns {Hierarchy}
 */
export function buildHierarchy(arch) {
  const nodes = new Map();
  const groups = new Map();
  const parentOf = new Map();
  const children = new Map([['', []]]);
  // The traced groups, then the name groups of containers that were never called (graph_groups.js).
  const named = nameGroups(arch);
  const records = [
    ...(arch.groups || []).map((g) => ({ ...g, parent: named.groupParent.get(g.module) ?? g.parent, kind: 'module' })),
    ...named.groups,
  ];
  for (const g of records) {
    groups.set(g.module, { name: g.module, type: g.type || null, parent: g.parent || '', children: [], depth: 0, kind: g.kind });
    children.set(groupKey(g.module), []);
  }
  const containerOf = (parentName) => (parentName && groups.has(parentName) ? groupKey(parentName) : '');
  for (const g of groups.values()) {
    const key = groupKey(g.name);
    const parent = g.parent === g.name ? '' : containerOf(g.parent);
    parentOf.set(key, parent);
  }
  for (const node of arch.nodes || []) {
    nodes.set(node.id, node);
    const parent = containerOf(named.nodeParent.get(node.id) ?? node.parent);
    parentOf.set(node.id, parent);
    children.get(parent).push(node.id);
  }
  // Groups take their place among their siblings at their first member's position.
  const firstSeen = new Map();
  (arch.nodes || []).forEach((node, index) => {
    for (let key = parentOf.get(node.id); key; key = parentOf.get(key)) {
      if (firstSeen.has(key)) break;
      firstSeen.set(key, index);
    }
  });
  const order = (key) => (key.startsWith('group:') ? firstSeen.get(key) ?? Infinity : -1);
  for (const g of groups.values()) {
    const key = groupKey(g.name);
    if (firstSeen.has(key)) children.get(parentOf.get(key)).push(key);
  }
  const indexOf = new Map((arch.nodes || []).map((n, i) => [n.id, i]));
  for (const list of children.values()) {
    list.sort((a, b) => (indexOf.has(a) ? indexOf.get(a) : order(a)) - (indexOf.has(b) ? indexOf.get(b) : order(b)));
  }
  const h = { nodes, groups, parentOf, children };
  chunkContainers(h); // long lists in ranges ("layers.0–99")
  for (const g of groups.values()) {
    g.children = children.get(groupKey(g.name));
    g.depth = ancestors(h, groupKey(g.name)).length;
  }
  return h;
}

/**
 * Keys of the containers around `key`, outermost first (the root "" excluded).
 * @param {{parentOf: Map<string, string>}} h
 * @param {string} key
 * @returns {string[]}
 */
export function ancestors(h, key) {
  const out = [];
  for (let p = h.parentOf.get(key); p; p = h.parentOf.get(p)) out.unshift(p);
  return out;
}

/**
 * The visible box that stands for `key`: itself, or its outermost collapsed group.
 * @param {Hierarchy} h
 * @param {string} key
 * @param {Set<string>} expanded  Group keys.
 * @returns {string}
 */
export function visibleKey(h, key, expanded) {
  for (const group of ancestors(h, key)) if (!expanded.has(group)) return group;
  return key;
}

/**
 * Group keys to open at first: depth by depth, while at most `budget` boxes show.
 * @param {Hierarchy} h
 * @param {number} [budget]
 * @returns {Set<string>}
 */
export function defaultExpanded(h, budget = DEFAULT_BUDGET) {
  const expanded = new Set();
  const maxDepth = Math.max(0, ...[...h.groups.values()].map((g) => g.depth));
  for (let depth = 0; depth <= maxDepth; depth++) {
    const level = [...h.groups.values()].filter((g) => g.depth === depth).map((g) => groupKey(g.name));
    const trial = new Set([...expanded, ...level]);
    if (countVisible(h, trial) > budget) break;
    for (const key of level) expanded.add(key);
  }
  return expanded;
}

/** @param {Hierarchy} h @returns {Set<string>} */
export function allGroups(h) {
  return new Set([...h.groups.keys()].map(groupKey));
}

/**
 * Boxes shown for an expanded set (nodes and collapsed groups).
 * @param {Hierarchy} h
 * @param {Set<string>} expanded
 * @returns {number}
 */
export function countVisible(h, expanded) {
  let count = 0;
  const walk = (container) => {
    for (const key of h.children.get(container) || []) {
      if (key.startsWith('group:') && expanded.has(key)) walk(key);
      else count++;
    }
  };
  walk('');
  return count;
}

/**
 * The edges drawn between visible boxes, one per distinct pair.
 * @param {Hierarchy} h
 * @param {{src: string, dst: string}[]} edges
 * @param {Set<string>} expanded
 * @returns {{src: string, dst: string}[]}  Visible keys.
 */
export function visibleEdges(h, edges, expanded) {
  const seen = new Set();
  const out = [];
  for (const { src, dst } of edges) {
    if (!h.nodes.has(src) || !h.nodes.has(dst)) continue;
    const a = visibleKey(h, src, expanded);
    const b = visibleKey(h, dst, expanded);
    const id = `${a}\u0000${b}`;
    if (a === b || seen.has(id)) continue;
    seen.add(id);
    out.push({ src: a, dst: b });
  }
  return out;
}

/**
 * The edges among the children of every container, in one pass over the architecture's edges: an
 * edge belongs to the innermost container holding both its ends, lifted to that container's two
 * children on their paths (one edge per distinct pair).
 * @param {Hierarchy} h
 * @param {{src: string, dst: string}[]} edges
 * @returns {Map<string, [string, string][]>}  Container key -> its edges, in architecture order.
 */
export function edgesByContainer(h, edges) {
  const out = new Map();
  const seen = new Set();
  for (const { src, dst } of edges) {
    if (!h.parentOf.has(src) || !h.parentOf.has(dst)) continue;
    const childOfA = new Map(); // container -> child on src's path
    for (let child = src; child; child = h.parentOf.get(child)) childOfA.set(h.parentOf.get(child), child);
    for (let child = dst; child; child = h.parentOf.get(child)) {
      const container = h.parentOf.get(child);
      if (!childOfA.has(container)) continue;
      const a = childOfA.get(container);
      const id = `${a}\u0000${child}`;
      if (a !== child && !seen.has(id)) {
        seen.add(id);
        if (!out.has(container)) out.set(container, []);
        out.get(container).push([a, child]);
      }
      break;
    }
  }
  return out;
}

/**
 * The size of a collapsed box.
 * @param {Hierarchy} h
 * @param {string} key
 * @returns {{width: number, height: number}}
 */
export function boxSize(h, key) {
  if (key.startsWith('group:')) return SIZES.group;
  const node = h.nodes.get(key);
  return SIZES[node && node.kind] || SIZES.module;
}

/**
 * The module name of a recorded layer name ("lstm[0]" -> "lstm").
 * @param {string} name
 * @returns {string}
 */
export function baseLayer(name) {
  const i = name.indexOf('[');
  return i < 0 ? name : name.slice(0, i);
}

/**
 * How two architectures differ, by node id: ids only in `a`, only in `b`, and in both with another
 * type, op or output shape.
 * @param {{nodes?: any[]}} a
 * @param {{nodes?: any[]}} b
 * @returns {{onlyA: string[], onlyB: string[], changed: string[]}}
 */
export function diffArchitectures(a, b) {
  const mapA = new Map((a.nodes || []).map((n) => [n.id, n]));
  const mapB = new Map((b.nodes || []).map((n) => [n.id, n]));
  const sig = (n) => JSON.stringify([n.kind, n.type || null, n.op || null, n.out_shapes || []]);
  const onlyA = [...mapA.keys()].filter((id) => !mapB.has(id));
  const onlyB = [...mapB.keys()].filter((id) => !mapA.has(id));
  const changed = [...mapA.keys()].filter((id) => mapB.has(id) && sig(mapA.get(id)) !== sig(mapB.get(id)));
  return { onlyA, onlyB, changed };
}

/**
 * The node a search names: a module name, op or id equal to `text`, else one containing it (case-insensitive).
 * @param {ReturnType<typeof buildHierarchy>} h
 * @param {string} text
 */
export function findNode(h, text) {
  const needle = text.trim().toLowerCase();
  const nodes = [...h.nodes.values()];
  const label = (n) => (n.module ?? n.op ?? n.id).toLowerCase();
  return (
    nodes.find((n) => label(n) === needle) ||
    nodes.find((n) => label(n).includes(needle)) ||
    nodes.find((n) => n.id.toLowerCase().includes(needle))
  );
}

/**
 * The first call of a module (its first node), or undefined.
 * @param {ReturnType<typeof buildHierarchy>} h
 * @param {string} moduleName
 */
export function moduleNode(h, moduleName) {
  return [...h.nodes.values()].find((n) => n.kind === 'module' && n.module === moduleName);
}
