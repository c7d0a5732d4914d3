"""What the rewriting passes share: rebuilding program trees, step facts (dead writers, the
variables a subtree writes), and the graph policy below.  Substituting tensors for variables is
:mod:`gruc.passes.rebase`; the elementwise steps fusion rebuilds are
:mod:`gruc.passes.elementwise_steps`.

Graph policy (one for all passes).  A pass returns a *new* :class:`Module` whose programs are new
trees.  A module owns what it may change: the graph of a module a pass is given is shared with
whoever built it, so on that graph a pass only *adds* (variables, views, compute sets,
functions) and never edits or deletes what the caller built — the caller's tensors and programs
keep their meaning, and running the original programs on the same graph still gives the
original results.  A pass that deletes or moves things returns a module over a graph of its own
instead, copied with :func:`~gruc.ir.graph_copy.copy_module` (copy on write: the copy costs the
structure kept, no tiles):

* ``dce`` deletes: the module it returns holds only what its programs use, so a compute set or
  variable that a pass replaced or whose steps were removed is gone from the printed module too
  (before ``dce`` runs, such leftovers stay in the shared graph, unexecuted and unplanned: they
  cost no cycles and no memory);
* ``shard`` moves the tiles of existing variables (host streams included), so it copies the
  whole graph and changes its copy;
* frozen program nodes are replaced, never edited, and a ``Sequence`` (mutable, and possibly still
  held by the user) is copied rather than changed;
* a function body is graph state that every module over the graph may call, so a rewrite that
  depends on how *this* module uses a value never edits one: ``dce`` and ``copy-elim`` leave
  bodies alone, and ``inplace-fusion`` (both halves) gives the graph a new function that this
  module calls instead (:func:`rebuild_with_called_functions`); only a rewrite that is right
  for every caller (``exchange``) replaces a body;
* a pass verifies the module it is given unless another pass made it (valid in, valid out: a
  pass's result is sealed, :meth:`~gruc.ir.module.Module.sealed`), so a pipeline verifies its
  input once, and invalid input fails naming the first pass.  What a pass works out about a
  module (its liveness) is kept on the module (:meth:`~gruc.ir.module.Module.derived`), so it
  goes when the module goes and a new module starts with nothing stale.

Take the graph of a pass's result from the result (``module.graph``).

Why here and not in each pass: every pass must rebuild trees the same way (keeping the identity of
untouched subtrees, which analyses key on), and tensor substitution through views is subtle enough
to be written once.
"""

from __future__ import annotations

from typing import Callable, Iterable, Iterator

from gruc.analysis.liveness import Liveness, analyse_liveness
from gruc.analysis.steps import mask_of
from gruc.ir.effects import EffectTable
from gruc.ir.graph import Function, Graph
from gruc.ir.module import Module
from gruc.ir.program import Call, Program, Sequence
from gruc.ir.tensor import Tensor, Variable
from gruc.ir.verify import verify


def require_valid(module: Module) -> None:
    """Verify a module a pass is given, unless a pass made it (it is sealed).

    Valid in, valid out is every pass's contract (tests hold passes to it with verify-each), so
    within a pipeline only the first pass pays for verifying — a whole-module check that costs as
    much as a pass on a large graph."""
    if not module.is_sealed:
        verify(module)


def pass_output(module: Module) -> Module:
    """``module`` as a pass returns it: valid by contract, and sealed as such
    (:meth:`Module.sealed`: a module the pass was given, which its caller may still change,
    becomes a new module over the same programs)."""
    return module.sealed()


def verified(module: Module) -> Module:
    """``module`` verified (unless a pass made it) and sealed, as a pass's output is: a compiler
    checks its input once, before the pipeline, so a bad input is reported as itself rather than
    as the failure of whichever pass happens to run first."""
    require_valid(module)
    return module.sealed()


def liveness_of(module: Module) -> Liveness:
    """:func:`analyse_liveness` of ``module``, kept on a module a pass made (its programs never
    change), so the next pass in a pipeline does not analyse the same module again."""
    return module.derived(analyse_liveness)


Rewrite = Callable[[Program], Program | None]
"""Called on every node after its children were rebuilt: the node to put in its place, the node
itself to keep it, or None to remove it."""


def replacing(replacements: dict[int, Program | None]) -> Rewrite:
    """A rewrite putting ``replacements[id(node)]`` (None: nothing) in place of those nodes."""
    return lambda node: replacements[id(node)] if id(node) in replacements else node


def rebuild(node: Program, rewrite: Rewrite) -> Program | None:
    """``node`` with ``rewrite`` applied bottom-up.  A removed child of a Sequence disappears; a
    removed loop body or branch becomes an empty Sequence.  Untouched subtrees keep their identity."""
    children = node.children()
    if children:
        rebuilt = [rebuild(child, rewrite) for child in children]
        if isinstance(node, Sequence):
            kept = [child for child in rebuilt if child is not None]
            if len(kept) != len(children) or any(a is not b for a, b in zip(kept, children)):
                node = Sequence(*kept)
        else:
            filled = [Sequence() if child is None else child for child in rebuilt]
            if any(a is not b for a, b in zip(filled, children)):
                node = node.with_children(filled)
    return rewrite(node)


def rebuild_programs(module: Module, rewrite: Rewrite) -> Module:
    """A module over the same graph whose entry programs are rebuilt with ``rewrite``."""
    programs = [rebuild(program, rewrite) for program in module.programs]
    return Module(module.graph, [Sequence() if p is None else p for p in programs])


def rebuild_with_called_functions(module: Module, rewrite: Rewrite) -> Module:
    """:func:`rebuild_programs`, the bodies of the functions the module calls rebuilt too.  A body
    that changes is not edited (other modules over the graph may call it): the graph gets a new
    function with the new body, and this module's calls — in its programs and in the bodies of
    the functions it calls — call that one instead."""
    replaced: dict[int, Function] = {}
    visited: set[int] = set()

    def retarget(node: Program) -> Program | None:
        node = rewrite(node)
        if isinstance(node, Call) and id(node.function) in replaced:
            return Call(replaced[id(node.function)])
        return node

    def rebuild_function(function: Function) -> None:  # callees first: their new functions known
        if id(function) in visited:
            return
        visited.add(id(function))  # before its body: a recursive call ends here
        for node in function.program.walk():
            if isinstance(node, Call):
                rebuild_function(node.function)
        body = rebuild(function.program, retarget)
        if body is not function.program:
            replaced[id(function)] = module.graph.add_function(
                Sequence() if body is None else body, function.name)

    for function in module.functions:
        rebuild_function(function)
    return rebuild_programs(module, retarget)


def walk_programs(module: Module) -> Iterator[Program]:
    """Every node of the entry programs (not the function bodies), pre-order, with repeats."""
    for program in module.programs:
        yield from program.walk()


def walk_functions(module: Module) -> Iterator[Program]:
    """Every node of the bodies of the functions the module calls, pre-order."""
    for function in module.functions:
        yield from function.program.walk()


def whole_variable(tensor: Tensor) -> Variable | None:
    """The variable ``tensor`` is, element for element in row-major order (else None)."""
    variables = tensor.variables()
    if len(variables) != 1:
        return None
    variable = variables[0]
    covers = (tensor.contiguous_start() == variable.first_id
              and tensor.num_elements == variable.num_elements)
    return variable if covers else None


def shaped(tensor: Tensor, shape: tuple[int, ...]) -> Tensor:
    """``tensor`` in ``shape`` (row-major), without a reshape view when it already has it."""
    return tensor if tensor.shape == shape else tensor.reshape(shape)


def host_variables(graph: Graph) -> frozenset[int]:
    """Indices of the variables a host stream names (their values are seen from outside)."""
    return frozenset(v.index for table in (graph.host_writes, graph.host_reads)
                     for tensor in table.values() for v in tensor.variables())


def variables_touched(effects: EffectTable, nodes: Iterable[Program]) -> frozenset[int]:
    """Variables some leaf among ``nodes`` reads, writes or declares dead."""
    touched: set[int] = set()
    for node in nodes:
        touched |= effects.of(node).touched
    return frozenset(touched)


class SubtreeWrites:
    """Variables a whole subtree may write or declare dead (``WriteUndef``), functions included."""

    def __init__(self, effects: EffectTable) -> None:
        self.effects = effects
        self._cache: dict[int, frozenset[int]] = {}

    def of(self, node: Program) -> frozenset[int]:
        """What ``node``'s subtree may write or kill, memoised per node.  A node is entered as empty
        before its children are asked, so a function reached again through its own calls adds
        nothing and the walk ends."""
        key = id(node)
        if key not in self._cache:
            self._cache[key] = frozenset()  # a function calling itself adds nothing new
            effect = self.effects.of(node)
            found = set(effect.writes | effect.kills)
            if isinstance(node, Call):
                found |= self.of(node.function.program)
            for child in node.children():
                found |= self.of(child)
            self._cache[key] = frozenset(found)
        return self._cache[key]


def dead_writers(module: Module, liveness: Liveness, kinds: tuple[type, ...]) -> set[int]:
    """``id`` of each entry-program step of ``kinds`` whose results nothing reads.

    A step is dead when every variable it writes is neither live after it (at every place it
    occurs) nor always-live (host streams, constants, values carried between runs).  Steps inside
    function bodies are not considered (see the module docstring)."""
    always = mask_of(liveness.always_live)
    in_functions = {id(node) for node in walk_functions(module)}
    alive: set[int] = set()
    candidates: set[int] = set()
    for step in liveness.steps:
        node = step.node
        if not isinstance(node, kinds) or id(node) in in_functions:
            continue
        if mask_of(step.effect.writes) & (liveness.live_out[step.index] | always):
            alive.add(id(node))
        else:
            candidates.add(id(node))
    return candidates - alive


def remove_dead_steps(module: Module, kinds: tuple[type, ...]) -> Module:
    """The module without its dead steps of ``kinds`` (:func:`dead_writers`), repeated until none
    is left: removing a step can leave the steps that fed it unread."""
    while True:
        dead = dead_writers(module, liveness_of(module), kinds)
        if not dead:
            return module
        module = pass_output(rebuild_programs(module, replacing(dict.fromkeys(dead))))
