// Groups the tracer does not record, so that a big model still opens readable (graph_model.js builds
// the hierarchy with them). Pure functions, no DOM: the layout worker imports this module too.
//
// 1. Name groups. The tracer's groups are the containers that were called; a container that is only
//    iterated (`for layer in self.layers`: an nn.ModuleList, an nn.ModuleDict, any module whose
//    children are called but not itself) is no group, and its children sit among its parent's. Here
//    every dotted prefix of a module name between a node and its traced parent becomes a group of
//    its own ("layers" holds "layers.0", "layers.1", …), as in TensorBoard's Graphs tab and Model
//    Explorer, which group by name scope. The functional ops of the loop's body (`relu(layer(x))`,
//    `x + layer(x)`) go in with them: an op of the same parent, run between the group's first and
//    last member, that reads a tensor of the group.
// 2. Ranges. A container with more than CHUNK_ABOVE children shows them in ranges of a round size
//    (100, 1,000, …; at most MAX_CHUNKS of them), named after their first and last child
//    ("layers.0–99"), nested when a range is itself too long, so that no expanded level lays out
//    more than about a hundred boxes.

/** A container with more children than this shows them in ranges. */
export const CHUNK_ABOVE = 100;
/** At most this many ranges in one container (ranges of CHUNK_ABOVE, tenfold until they fit). */
export const MAX_CHUNKS = 50;
/** Between the first and the last child of a range's name ("layers.0–99"). */
export const RANGE_DASH = '\u2013';

/**
 * The name groups of an architecture and the parents they give.
 * @param {{nodes?: any[], edges?: {src: string, dst: string}[], groups?: any[]}} arch
 * @returns {{groups: {module: string, type: null, parent: string, kind: 'name'}[],
 *   nodeParent: Map<string, string>, groupParent: Map<string, string>}}  Parents by node id and by
 *   group name, where they differ from the trace's.
 */
export function nameGroups(arch) {
  const traced = new Set((arch.groups || []).map((g) => g.module));
  // Called leaves too: an atomic module's child called on its own ("attn.out_proj") gets no "attn" group.
  for (const node of arch.nodes || []) if (node.kind === 'module') traced.add(node.module);
  /** @type {Map<string, string>} name group -> its parent */
  const added = new Map();
  const nodeParent = new Map();
  const groupParent = new Map();

  // The parent of `name` through name groups, where its traced parent is a name prefix of it.
  const parentThroughNames = (name, parent) => {
    if (!name || (parent && !name.startsWith(`${parent}.`))) return parent;
    const parts = name.split('.');
    const prefixes = [];
    for (let i = parent ? parent.split('.').length + 1 : 1; i < parts.length; i++) prefixes.push(parts.slice(0, i).join('.'));
    // A prefix that is a traced group (called elsewhere), or a name group under another parent: as traced.
    let above = parent;
    for (const prefix of prefixes) {
      if (traced.has(prefix) || (added.has(prefix) && added.get(prefix) !== above)) return parent;
      above = prefix;
    }
    above = parent;
    for (const prefix of prefixes) {
      if (!added.has(prefix)) added.set(prefix, above);
      above = prefix;
    }
    return above;
  };

  for (const g of arch.groups || []) {
    const parent = g.parent === g.module ? '' : g.parent || '';
    const through = parentThroughNames(g.module, parent);
    if (through !== parent) groupParent.set(g.module, through);
  }
  const nodes = arch.nodes || [];
  for (const node of nodes) {
    if (node.kind !== 'module') continue;
    const parent = node.parent || '';
    const through = parentThroughNames(node.module, parent);
    if (through !== parent) nodeParent.set(node.id, through);
  }
  if (added.size) absorbLoopOps(arch, added, traced, nodeParent, groupParent);
  const groups = [...added].map(([module, parent]) => ({ module, type: null, parent, kind: /** @type {'name'} */ ('name') }));
  return { groups, nodeParent, groupParent };
}

/**
 * Moves the functional ops of a loop's body into the name group the loop runs over (see above).
 * @param {any} arch
 * @param {Map<string, string>} added  Name group -> parent.
 * @param {Set<string>} traced
 * @param {Map<string, string>} nodeParent  Updated.
 * @param {Map<string, string>} groupParent
 */
function absorbLoopOps(arch, added, traced, nodeParent, groupParent) {
  const nodes = arch.nodes || [];
  const tracedParent = new Map((arch.groups || []).map((g) => [g.module, g.parent === g.module ? '' : g.parent || '']));
  const parentOfGroup = (name) => (added.has(name) ? added.get(name) : groupParent.get(name) ?? tracedParent.get(name) ?? '');
  const parentOfNode = (node) => nodeParent.get(node.id) ?? node.parent ?? '';
  // The child of `container` on the way up from a node (null when the node is not inside it).
  const childOf = (node, container) => {
    let name = parentOfNode(node);
    if (name === container) return null;
    for (let guard = 0; name && guard < 1000; guard++) {
      const up = parentOfGroup(name);
      if (up === container) return name;
      name = up;
    }
    return null;
  };
  // Span of each name group: first and last index of the nodes inside it.
  const span = new Map();
  nodes.forEach((node, index) => {
    for (let name = parentOfNode(node), guard = 0; name && guard < 1000; name = parentOfGroup(name), guard++) {
      if (!added.has(name)) continue;
      const s = span.get(name);
      if (s) s[1] = index;
      else span.set(name, [index, index]);
    }
  });
  const byId = new Map(nodes.map((n) => [n.id, n]));
  const index = new Map(nodes.map((n, i) => [n.id, i]));
  const inputs = new Map();
  for (const { src, dst } of arch.edges || []) {
    if (!inputs.has(dst)) inputs.set(dst, []);
    inputs.get(dst).push(src);
  }
  nodes.forEach((node, i) => {
    if (node.kind !== 'function') return;
    const container = node.parent || '';
    let best = null;
    let bestIndex = -1;
    for (const src of inputs.get(node.id) || []) {
      const producer = byId.get(src);
      if (!producer || index.get(src) <= bestIndex) continue;
      const child = childOf(producer, container);
      const s = child && added.has(child) && !traced.has(child) ? span.get(child) : null;
      if (s && s[0] < i && i < s[1]) {
        best = child;
        bestIndex = index.get(src);
      }
    }
    if (best) nodeParent.set(node.id, best);
  });
}

/**
 * A child's name in a range's name: a group's name, a module call's module (·2 for its second
 * call), an op's name, "input 0".
 * @param {any} h  The hierarchy (graph_model.js).
 * @param {string} key
 */
function childName(h, key) {
  if (key.startsWith('group:')) return key.slice('group:'.length);
  const node = h.nodes.get(key);
  if (!node) return key;
  if (node.kind === 'module') return node.call ? `${node.module}·${node.call + 1}` : node.module || '(model)';
  if (node.kind === 'function') return node.op || 'op';
  return key.replace(':', ' ');
}

/** "layers.0" and "layers.99" -> "layers.0–99"; "relu" and "add" -> "relu–add". */
export function rangeName(first, last) {
  const a = first.split('.');
  const b = last.split('.');
  let common = 0;
  while (common < a.length - 1 && common < b.length - 1 && a[common] === b[common]) common++;
  const prefix = a.slice(0, common).join('.');
  const tail = `${a.slice(common).join('.')}${RANGE_DASH}${b.slice(common).join('.')}`;
  return prefix ? `${prefix}.${tail}` : tail;
}

/**
 * Splits every container with more than CHUNK_ABOVE children into ranges (groups of kind 'range'),
 * in place: h.groups, h.children and h.parentOf gain them. Depths are left to the caller.
 * @param {any} h  The hierarchy (graph_model.js).
 */
export function chunkContainers(h) {
  const todo = [...h.children.keys()];
  while (todo.length) {
    const container = todo.pop();
    const list = h.children.get(container) || [];
    if (list.length <= CHUNK_ABOVE) continue;
    let size = CHUNK_ABOVE;
    while (Math.ceil(list.length / size) > MAX_CHUNKS) size *= 10;
    const parts = [];
    for (let i = 0; i < list.length; i += size) parts.push(list.slice(i, i + size));
    const keys = parts.map((members) => {
      if (members.length === 1) return members[0]; // a last child alone stays as it is
      // Named after its first and last module (or group); the ops between them do not name it.
      const named = members.filter((key) => key.startsWith('group:') || (h.nodes.get(key) || {}).kind === 'module');
      const ends = named.length ? [named[0], named[named.length - 1]] : [members[0], members[members.length - 1]];
      const base = ends[0] === ends[1] ? childName(h, ends[0]) : rangeName(childName(h, ends[0]), childName(h, ends[1]));
      let name = base === childName(h, ends[0]) ? `${base} …` : base;
      for (let n = 2; h.groups.has(name); n++) name = `${base} (${n})`;
      const key = `group:${name}`;
      h.groups.set(name, { name, type: null, parent: container.slice('group:'.length), children: members, depth: 0, kind: 'range' });
      h.children.set(key, members);
      h.parentOf.set(key, container);
      for (const member of members) h.parentOf.set(member, key);
      todo.push(key);
      return key;
    });
    h.children.set(container, keys);
    const owner = h.groups.get(container.slice('group:'.length));
    if (container && owner) owner.children = keys;
  }
}
