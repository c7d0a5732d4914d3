"""A networkx view of a module's dataflow, for analyses that want graph algorithms.

Two views, both built from :mod:`gruc.ir.effects` (which variables each step reads and writes):

* :func:`dataflow_graph` — a bipartite ``DiGraph`` of *steps* and *variables*: an edge variable →
  step for every read and step → variable for every write (``full`` says whether the write
  overwrites the whole variable).  In-place updates and loop-carried state show up as cycles,
  which is what they are.
* :func:`step_dependencies` — a DAG over the steps in program order: an edge ``a → b`` when ``b``
  reads what ``a`` wrote (``raw``), overwrites what ``a`` read (``war``) or overwrites what ``a``
  wrote (``waw``).  Scheduling, BSP levels (``networkx.topological_generations``) and the critical
  path (:func:`critical_path`) come straight from networkx.

Steps are the leaf program nodes as :class:`~gruc.analysis.steps.StepTree` numbers them for
every analysis, each with its index, node and a short description.  Loop bodies appear once: this
is the static program, not an unrolled trace.
"""

from __future__ import annotations

from typing import Callable

import networkx as nx

from gruc.analysis.steps import StepTree
from gruc.ir.module import Module
from gruc.ir.program import Execute, Program

def describe(node: Program) -> str:
    if isinstance(node, Execute):
        return f"execute {node.compute_set.name}"
    return type(node).__name__.lower()


def dataflow_graph(module: Module) -> nx.DiGraph:
    """Steps ``("step", k)`` and variables ``("var", v)`` joined by read and write edges."""
    graph = module.graph
    flow = nx.DiGraph()
    for index, variable in enumerate(graph.variables):
        flow.add_node(("var", index), name=variable.name, dtype=variable.dtype.name,
                      shape=variable.shape, nbytes=variable.nbytes)
    for step in StepTree(module).steps:
        k, node, effect = step.index, step.node, step.effect
        flow.add_node(("step", k), node=node, text=describe(node))
        for v in effect.reads:
            flow.add_edge(("var", v), ("step", k), kind="read")
        for v in effect.writes:
            flow.add_edge(("step", k), ("var", v), kind="write", full=v in effect.full_writes)
    return flow


def step_dependencies(module: Module) -> nx.DiGraph:
    """The DAG of ordering constraints between steps (edges carry ``kinds``: raw, war, waw)."""
    dag = nx.DiGraph()
    last_writer: dict[int, int] = {}
    readers_since_write: dict[int, list[int]] = {}

    def depend(a: int, b: int, kind: str) -> None:
        if a == b:
            return
        if dag.has_edge(a, b):
            dag.edges[a, b]["kinds"].add(kind)
        else:
            dag.add_edge(a, b, kinds={kind})

    for step in StepTree(module).steps:
        k, node, effect = step.index, step.node, step.effect
        dag.add_node(k, node=node, text=describe(node))
        for v in effect.reads:
            if v in last_writer:
                depend(last_writer[v], k, "raw")
        for v in effect.writes | effect.kills:
            for reader in readers_since_write.get(v, []):
                depend(reader, k, "war")
            if v in last_writer:
                depend(last_writer[v], k, "waw")
        for v in effect.reads:
            readers_since_write.setdefault(v, []).append(k)
        for v in effect.writes | effect.kills:
            last_writer[v] = k
            readers_since_write[v] = []
    return dag


def critical_path(dag: nx.DiGraph, cost: Callable[[int], float]) -> tuple[list[int], float]:
    """The longest chain of dependent steps when step ``k`` costs ``cost(k)``, and its length."""
    best: dict[int, float] = {}
    previous: dict[int, int | None] = {}
    for k in nx.lexicographical_topological_sort(dag):
        length, before = max(((best[q], q) for q in dag.predecessors(k)), default=(0.0, None))
        best[k] = length + cost(k)
        previous[k] = before
    if not best:
        return [], 0.0
    end = max(best, key=lambda k: (best[k], -k))
    path = [end]
    while previous[path[-1]] is not None:
        path.append(previous[path[-1]])
    return path[::-1], best[end]
