// SVG helpers for the architecture view: node labels, edge paths, node and group boxes. No state.

import { svg } from './dom.js';

/** Short badges of the recorded kinds. */
export const KIND_BADGES = {
  weight: 'W',
  weight_grad: '∇W',
  bias: 'b',
  bias_grad: '∇b',
  output: 'out',
  activation: 'act',
  grad: '∇out',
};

/**
 * Title and subtitle of a node's box.
 * @param {any} node  An architecture node.
 * @returns {[string, string]}
 */
export function nodeLabel(node) {
  if (node.kind === 'module') {
    const name = node.module === '' ? '(model)' : node.module.split('.').slice(-2).join('.');
    return [node.call ? `${name} ·${node.call + 1}` : name, node.type || ''];
  }
  if (node.kind === 'function') return [node.op || 'op', ''];
  const shape = node.kind === 'input' ? node.out_shapes && node.out_shapes[0] : node.in_shapes && node.in_shapes[0];
  const index = node.id.split(':')[1];
  return [`${node.kind} ${index}${shape ? ` ${shape.join('×')}` : ''}`, ''];
}

/**
 * The path of an edge from box `a` to box `b`: dagre's route when the two are siblings, else a
 * curve from the bottom of `a` to the top of `b`.
 * @param {{x: number, y: number, width: number, height: number}} a
 * @param {{x: number, y: number, width: number, height: number}} b
 * @param {{x: number, y: number}[]|undefined} points
 * @returns {string}
 */
export function edgePath(a, b, points) {
  if (points && points.length >= 2) {
    let d = `M${points[0].x},${points[0].y}`;
    for (let i = 1; i < points.length - 1; i++) {
      const p = points[i];
      const q = points[i + 1];
      const mx = (p.x + q.x) / 2;
      const my = (p.y + q.y) / 2;
      d += ` Q${p.x},${p.y} ${i === points.length - 2 ? `${q.x},${q.y}` : `${mx},${my}`}`;
    }
    if (points.length === 2) d += ` L${points[1].x},${points[1].y}`;
    return d;
  }
  const x1 = a.x + a.width / 2;
  const y1 = a.y + a.height;
  const x2 = b.x + b.width / 2;
  const y2 = b.y;
  const dy = Math.max(30, Math.abs(y2 - y1) / 2);
  return `M${x1},${y1} C${x1},${y1 + dy} ${x2},${y2 - dy} ${x2},${y2}`;
}

/** Fonts of the box texts (style.css: .xray-node text, .xray-node-title, .xray-group [data-action=toggle]). */
const FONTS = {
  title: '11px "Roboto Mono", Menlo, Consolas, monospace',
  text: '11px Roboto, "Helvetica Neue", Arial, sans-serif',
  sub: '10px Roboto, "Helvetica Neue", Arial, sans-serif',
  group: '500 11px Roboto, "Helvetica Neue", Arial, sans-serif',
};
/** Room kept right of a box's text (a finding badge sits on the corner). */
const TEXT_RIGHT_PAD = 10;
let measureContext = null;

/** Width of `text` in CSS pixels in `font` (a canvas measures; about 6.2 px a character without one). */
export function textWidth(text, font) {
  if (measureContext === null) {
    try {
      measureContext = document.createElement('canvas').getContext('2d') || false;
    } catch (_) {
      measureContext = false;
    }
  }
  if (!measureContext) return text.length * 6.2;
  measureContext.font = font;
  return measureContext.measureText(text).width;
}

/**
 * `text` cut to fit `width` CSS pixels in `font`, ending in "…" when cut (the full text is in the
 * box's tooltip).
 * @param {string} text
 * @param {number} width
 * @param {string} font
 */
export function fitText(text, width, font) {
  if (textWidth(text, font) <= width) return text;
  let lo = 0;
  let hi = text.length;
  while (lo < hi) { // the longest prefix that fits with the ellipsis
    const mid = Math.ceil((lo + hi) / 2);
    if (textWidth(`${text.slice(0, mid).trimEnd()}…`, font) <= width) lo = mid;
    else hi = mid - 1;
  }
  return `${text.slice(0, lo).trimEnd()}…`;
}

/** Sets an SVG text element's text, cut to the box; a cut text keeps the whole in data-full-text. */
function setFitted(t, text, width, font) {
  const fitted = fitText(text, width, font);
  t.textContent = fitted;
  if (fitted !== text) t.dataset.fullText = text;
}

/** @param {string} name */
export function shortName(name) {
  const parts = name.split('.');
  return parts.length > 2 ? `…${parts.slice(-2).join('.')}` : name;
}

export function tooltip(node, mark) {
  const lines = [node.module !== undefined ? `${node.module} (${node.type})${node.call ? `, call ${node.call}` : ''}` : node.op || node.id];
  if (node.in_shapes && node.in_shapes.length) lines.push(`in: ${node.in_shapes.map((s) => s.join('×')).join(', ')}`);
  if (node.out_shapes && node.out_shapes.length) lines.push(`out: ${node.out_shapes.map((s) => s.join('×')).join(', ')}`);
  if (node.params) lines.push(`${node.params.toLocaleString()} parameters`);
  const recordedText = mark && node.call ? `recorded at its first call: ${mark.kinds.join(', ')} — click to open` : mark ? `recorded: ${mark.kinds.join(', ')} — click to open` : '';
  lines.push(recordedText || (node.kind === 'module' ? 'not recorded' : ''));
  return lines.filter(Boolean).join('\n');
}

/**
 * One node's box: rect, title, subtitle and tooltip, with its hooks.
 * @param {any} h  The hierarchy (graph_model.js).
 */
export function drawNode(h, key, box, recorded, diff) {
  const node = h.nodes.get(key);
  const g = svg('g', { class: `xray-node xray-node-${node.kind}`, transform: `translate(${box.x},${box.y})` });
  g.dataset.nodeId = key;
  const mark = node.kind === 'module' ? recorded.get(node.module) : undefined;
  const own = mark && !node.call ? mark : undefined; // a reused module's values are its first call's
  if (node.kind === 'module') {
    g.dataset.layer = node.module;
    if (own) {
      g.classList.add('xray-recorded');
      g.dataset.kinds = mark.kinds.join(',');
    }
  }
  if (diff && diff.only.has(key)) g.dataset.diff = 'only-here';
  else if (diff && diff.changed.has(key)) g.dataset.diff = 'changed';
  const rx = node.kind === 'function' ? 11 : 5;
  g.append(svg('rect', { width: box.width, height: box.height, rx, ry: rx }));
  const [title, subtitle] = nodeLabel(node);
  const room = box.width - 8 - TEXT_RIGHT_PAD;
  const t = svg('text', { x: 8, y: subtitle ? 15 : box.height / 2 + 4, class: 'xray-node-title' });
  setFitted(t, title, room, node.kind === 'function' ? FONTS.text : FONTS.title);
  g.append(t);
  if (subtitle) {
    const s = svg('text', { x: 8, y: 29, class: 'xray-node-sub' });
    setFitted(s, subtitle + (own ? `  ${own.kinds.map((k) => KIND_BADGES[k] || k).join(' ')}` : ''), room, FONTS.sub);
    g.append(s);
  }
  const tip = svg('title', {});
  tip.textContent = tooltip(node, mark);
  g.append(tip);
  return g;
}

/** One group's box (a container, collapsed or open) with its header. */
export function drawGroup(h, key, box, recordedCount) {
  const group = h.groups.get(key.slice('group:'.length));
  const g = svg('g', { class: `xray-group${box.expanded ? ' xray-group-open' : ''}`, transform: `translate(${box.x},${box.y})` });
  g.dataset.group = group.name;
  g.dataset.expanded = String(box.expanded);
  if (recordedCount) g.classList.add('xray-has-recorded');
  g.append(svg('rect', { width: box.width, height: box.height, rx: 7, ry: 7 }));
  const header = svg('text', { x: 8, y: 16, class: 'xray-group-title' });
  header.dataset.action = 'toggle';
  const members = group.children.length;
  const room = box.width - 8 - TEXT_RIGHT_PAD;
  setFitted(header, `${box.expanded ? '▾' : '▸'} ${shortName(group.name)}${group.type ? ` (${group.type})` : ''}`, room, FONTS.group);
  g.append(header);
  if (!box.expanded) {
    const s = svg('text', { x: 8, y: 31, class: 'xray-node-sub' });
    setFitted(s, `${members} item${members === 1 ? '' : 's'}${recordedCount ? ` · ${recordedCount} recorded` : ''}`, room, FONTS.sub);
    g.append(s);
  }
  const tip = svg('title', {});
  tip.textContent = `${group.name} (${group.type || 'group'}): click to ${box.expanded ? 'collapse' : 'expand'}`;
  g.append(tip);
  return g;
}
