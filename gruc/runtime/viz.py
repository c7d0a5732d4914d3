"""What people look at besides the report page: DOT dataflow graphs and the tile grid every tile
map shares (a long command's status line is :mod:`gruc.status`).

The HTML report itself is :mod:`gruc.runtime.page` (interactive, plotly); ``gruc plan --plots``
draws PNGs with matplotlib (:mod:`gruc.plan.plots`), whose tile heatmap lays tiles out on the same
grid as the page's tile map (:func:`tile_grid`), so a tile sits in the same row and column in both.
"""

from __future__ import annotations

import importlib
import math

from gruc.errors import GrucValueError
from gruc.analysis.dataflow import dataflow_graph
from gruc.ir.module import Module
from gruc.ir.printer import format_type


# ------------------------------------------------------------------------------------- DOT
def dot_string(text: str) -> str:
    """``text`` as a DOT quoted string: ``"`` and ``\\`` escaped, newlines as ``\\n`` (which
    Graphviz renders as a line break in labels)."""
    escaped = text.replace("\\", "\\\\").replace('"', '\\"')
    return '"' + escaped.replace("\r", "").replace("\n", "\\n") + '"'


def dataflow_dot(module: Module, name: str = "dataflow") -> str:
    """The dataflow graph of ``module`` (:func:`gruc.analysis.dataflow.dataflow_graph`) in DOT.

    Variables are boxes (the variable's name, type and bytes), steps are ellipses numbered
    in program order; an edge variable → step is a read, step → variable a write (dashed when the
    write covers only part of the variable).  Node ids are ``v<index>`` and ``s<index>``.
    """
    flow = dataflow_graph(module)
    variables = module.graph.variables
    ident = {node: f"{'v' if node[0] == 'var' else 's'}{node[1]}" for node in flow.nodes}
    lines = [f"digraph {dot_string(name)} {{",
             '  graph [rankdir=TB, fontname="Helvetica"];',
             '  node [fontname="Helvetica", fontsize=10];',
             '  edge [fontname="Helvetica", fontsize=8];']
    for node, data in flow.nodes(data=True):
        if node[0] == "var":
            variable = variables[node[1]]
            label = (f"{data['name']}\n{format_type(variable.dtype, variable.shape)}\n"
                     f"{data['nbytes']} B")
            lines.append(f"  {dot_string(ident[node])} [shape=box, style=filled, "
                         f'fillcolor="#dbe9f6", label={dot_string(label)}];')
        else:
            label = f"{node[1]}: {data['text']}"
            lines.append(f"  {dot_string(ident[node])} [shape=ellipse, style=filled, "
                         f'fillcolor="#fdebd0", label={dot_string(label)}];')
    for a, b, data in flow.edges(data=True):
        style = "solid" if data["kind"] == "read" or data.get("full") else "dashed"
        lines.append(f"  {dot_string(ident[a])} -> {dot_string(ident[b])} "
                     f"[label={dot_string(data['kind'])}, style={style}];")
    lines.append("}")
    return "\n".join(lines) + "\n"


# ----------------------------------------------------------------------------------- tiles
def tile_grid(tiles_per_ipu: int) -> tuple[int, int]:
    """``(rows, columns)`` of one IPU's tiles in the heatmap: about twice as wide as tall, and
    exact (no padding) when ``tiles_per_ipu`` has a divisor near there (1472 → 32 x 46)."""
    target = math.sqrt(2 * tiles_per_ipu)
    divisors = [d for d in range(1, tiles_per_ipu + 1) if tiles_per_ipu % d == 0
                and target / 2 <= d <= 2 * target]
    columns = min(divisors, key=lambda d: abs(d - target)) if divisors else math.ceil(target)
    return -(-tiles_per_ipu // columns), columns


def require_matplotlib(what: str) -> None:
    """A GrucValueError naming ``what`` unless matplotlib imports: a command that draws checks
    this before its work, not after running a layer.  (The plain install brings matplotlib; an
    install without dependencies may not have it.)"""
    try:
        importlib.import_module("matplotlib")
    except ImportError:
        raise GrucValueError(f"{what} needs matplotlib, which is not installed: pip install "
                             "matplotlib") from None
