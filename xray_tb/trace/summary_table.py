"""A torchinfo-like text table of a traced architecture (the dict from ``xray_tb.trace.tracer.trace``).

One row per node in execution order (inputs, module calls, function ops, outputs; an output
row shows the shape it receives), with a header row each time a group (container) is
entered; rows are indented two spaces per nesting level. Modules and groups show their
``named_modules()`` name, function nodes their id without the ``function:`` prefix
(``relu:0``) and their op with its kwargs, inputs and outputs their id. Totals come last: the
parameter count of the called modules (each counted once, however many calls; parameters
held directly by containers are in no module node, so not counted) and the node and edge
counts.
"""

from __future__ import annotations

_HEADERS = ("Layer", "Type / op", "Output shape", "Params")
_MAX_OP_WIDTH = 48
_NONE = "--"


def summary_table(architecture: dict) -> str:
    """Render ``architecture`` as a fixed-width text table with totals at the bottom."""
    rows = _rows(architecture)
    widths = [max(len(row[i]) for row in (_HEADERS, *rows)) for i in range(len(_HEADERS))]
    rule_width = sum(widths) + 2 * (len(widths) - 1)
    lines = [_format(_HEADERS, widths), "=" * rule_width]
    lines += [_format(row, widths) for row in rows]
    lines += ["=" * rule_width, *_totals(architecture)]
    return "\n".join(lines)


def _format(row: tuple[str, ...], widths: list[int]) -> str:
    """One table line: text columns left-aligned, the params column right-aligned."""
    cells = [cell.ljust(width) for cell, width in zip(row[:-1], widths[:-1], strict=True)]
    return "  ".join([*cells, row[-1].rjust(widths[-1])]).rstrip()


def _rows(architecture: dict) -> list[tuple[str, str, str, str]]:
    """Table rows for groups and nodes, in execution order."""
    groups = {group["module"]: group for group in architecture["groups"]}
    rows = []
    open_chain: list[str] = []
    for node in architecture["nodes"]:
        chain = _group_chain(node["parent"], groups)
        common = 0
        while common < min(len(chain), len(open_chain)) and chain[common] == open_chain[common]:
            common += 1
        for depth in range(common, len(chain)):
            group = groups[chain[depth]]
            rows.append((_indent(depth) + group["module"], group["type"], _NONE, _NONE))
        open_chain = chain
        rows.append(_node_row(node, len(chain)))
    return rows


def _group_chain(parent: str, groups: dict[str, dict]) -> list[str]:
    """Group names from the outermost down to ``parent`` ([] at top level)."""
    chain: list[str] = []
    while parent and parent in groups and parent not in chain:
        chain.append(parent)
        parent = groups[parent]["parent"]
    return chain[::-1]


def _node_row(node: dict, depth: int) -> tuple[str, str, str, str]:
    """The row of one node at nesting ``depth``."""
    kind = node["kind"]
    shown = node["in_shapes"] if kind == "output" else node["out_shapes"]
    shapes = ", ".join(str(shape) for shape in shown) or _NONE
    if kind == "module":
        name = node["module"] or "(root)"
        if node["call"]:
            name += f" (call {node['call']})"
        params = "(reused)" if node["call"] else (f"{node['params']:,}" if node["params"] else _NONE)
        if node.get("params_shared"):
            params += f" ({node['params_shared']:,} tied)"
        return _indent(depth) + name, node["type"], shapes, params
    if kind == "function":
        name = node["id"].split(":", 1)[1]
        return _indent(depth) + name, _op_text(node["op"], node["kwargs"]), shapes, _NONE
    return _indent(depth) + node["id"], kind, shapes, _NONE


def _op_text(op: str, kwargs: dict) -> str:
    """``op(key=value, ...)``, cut to ``_MAX_OP_WIDTH`` characters."""
    text = f"{op}({', '.join(f'{key}={value}' for key, value in kwargs.items())})" if kwargs else op
    return text if len(text) <= _MAX_OP_WIDTH else text[: _MAX_OP_WIDTH - 4] + "...)"


def _indent(depth: int) -> str:
    """Two spaces per nesting level."""
    return "  " * depth


def _totals(architecture: dict) -> list[str]:
    """Footer lines: parameters of the called modules, node counts by kind, edge count."""
    nodes = architecture["nodes"]
    params = sum(node["params"] - node.get("params_shared", 0) for node in nodes if node["kind"] == "module" and node["call"] == 0)
    counts = {kind: sum(node["kind"] == kind for node in nodes) for kind in ("input", "module", "function", "output")}
    return [
        f"Total params (called modules): {params:,}",
        "Nodes: {total} ({input} input, {module} module calls, {function} functions, {output} output)".format(
            total=len(nodes), **counts
        ),
        f"Edges: {len(architecture['edges'])}, groups: {len(architecture['groups'])}",
    ]
