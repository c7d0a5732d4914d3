"""Program nodes: the control flow of a Poplar program.

A program is a tree: ``Sequence`` of steps, ``Execute`` of a compute set, ``Copy`` between
tensors (an exchange when they are on different tiles), ``WriteUndef`` (declares a tensor's value
dead, which frees its bytes for others), loops (``Repeat``, ``RepeatWhileTrue``, and an RNN's
``TimeLoop``, which names its counter, direction, time steps and shard), ``If``,
``Call`` of a graph function (code reuse), ``PrintTensor`` and ``Sync``.

Loops stay loops: ``Repeat(10_000, body)`` is one node whatever the trip count, so the IR, the
passes and the compile time never grow with a sequence length.

Every node but ``Sequence`` is a frozen dataclass compared by identity of the tensors and compute
sets it names.  ``Sequence`` is the builder users append to (``prog.add(...)``), as in Poplar, so
it is mutable; passes replace whole sequences rather than editing one in place.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Iterator
from typing import Sequence as Sequence_

import numpy as np

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError

if TYPE_CHECKING:
    from gruc.ir.graph import ComputeSet, Function
    from gruc.ir.tensor import Tensor


class Program:
    """Base of all program nodes."""

    __slots__ = ()

    def children(self) -> tuple["Program", ...]:
        """Nested programs, in execution order of first appearance."""
        return ()

    def walk(self) -> Iterator["Program"]:
        """This node and every node below it, pre-order."""
        yield self
        for child in self.children():
            yield from child.walk()

    def with_children(self, children: Sequence_["Program"]) -> "Program":
        """The same kind of node, with the same non-program fields, over ``children`` (in
        :meth:`children` order): how a rewrite rebuilds a tree without knowing its node kinds."""
        return self


def _check_program(value: object, what: str) -> "Program":
    if not isinstance(value, Program):
        raise GrucTypeError(f"{what} must be a Program, got {type(value).__name__}")
    return value


def _check_tensor(value: object, what: str) -> "Tensor":
    """Program nodes are built by users as well as by ops: a non-tensor must fail here, naming
    the node's argument, not later in a pass with an AttributeError."""
    from gruc.ir.tensor import Tensor  # tensor.py's views do not need programs; avoid a cycle

    if not isinstance(value, Tensor):
        raise GrucTypeError(f"{what} must be a gruc Tensor, got {type(value).__name__}")
    return value


def _check_scalar(value: object, what: str) -> "Tensor":
    tensor = _check_tensor(value, what)
    if tensor.num_elements != 1:
        raise GrucShapeError(f"{what} must have one element, got shape {list(tensor.shape)}")
    return tensor


def check_sequence(prog: object, what: str) -> "Sequence":
    """The ``prog`` an op builder appends to must be a :class:`Sequence` (ops call this first,
    so a wrong argument is named before any variable or compute set is added)."""
    if not isinstance(prog, Sequence):
        raise GrucTypeError(f"{what} appends to a Sequence program, got {type(prog).__name__}")
    return prog


class Sequence(Program):
    """Programs run one after another; ``add`` appends (Poplar ``Sequence::add``)."""

    __slots__ = ("programs",)

    def __init__(self, *programs: Program) -> None:
        self.programs: list[Program] = []
        for p in programs:
            self.add(p)

    def add(self, program: Program) -> "Sequence":
        self.programs.append(_check_program(program, "Sequence.add argument"))
        return self

    def children(self) -> tuple[Program, ...]:
        return tuple(self.programs)

    def with_children(self, children: Sequence_[Program]) -> "Sequence":
        return Sequence(*children)

    def __len__(self) -> int:
        return len(self.programs)

    def __repr__(self) -> str:
        return f"Sequence({len(self.programs)} programs)"


@dataclass(frozen=True, eq=False)
class Execute(Program):
    """Run every vertex of a compute set: one BSP superstep (exchange, compute, sync)."""

    compute_set: "ComputeSet"

    def __post_init__(self) -> None:
        from gruc.ir.graph import ComputeSet  # graph.py imports this module

        if not isinstance(self.compute_set, ComputeSet):
            raise GrucTypeError(f"Execute needs a ComputeSet (graph.add_compute_set), got "
                                f"{type(self.compute_set).__name__}")


@dataclass(frozen=True, eq=False)
class Copy(Program):
    """Copy ``src`` into ``dst`` element by element (same shape and type)."""

    src: "Tensor"
    dst: "Tensor"

    def __post_init__(self) -> None:
        _check_tensor(self.src, "Copy source")
        _check_tensor(self.dst, "Copy destination")
        if self.src.shape != self.dst.shape:
            raise GrucShapeError(f"Copy shapes differ: src {list(self.src.shape)} vs dst "
                                 f"{list(self.dst.shape)}")
        if self.src.dtype != self.dst.dtype:
            raise GrucTypeError(f"Copy types differ: src {self.src.dtype.name} vs dst "
                                f"{self.dst.dtype.name}")


@dataclass(frozen=True, eq=False)
class WriteUndef(Program):
    """Declare ``tensor``'s current value dead: its bytes may be reused until it is next written."""

    tensor: "Tensor"

    def __post_init__(self) -> None:
        _check_tensor(self.tensor, "WriteUndef tensor")


MAX_REPEAT_COUNT = 2 ** 32 - 1
"""The largest ``Repeat`` count: Poplar's ``Repeat`` takes an unsigned 32-bit count."""


@dataclass(frozen=True, eq=False)
class Repeat(Program):
    """Run ``body`` ``count`` times."""

    count: int
    body: Program

    def __post_init__(self) -> None:
        count = self.count
        if isinstance(count, numbers.Integral) and not isinstance(count, (bool, np.bool_)):
            count = int(count)  # a numpy integer too: stored as a Python int
        if type(count) is not int or not 0 <= count <= MAX_REPEAT_COUNT:
            raise GrucValueError(f"Repeat count {self.count!r} must be an integer in "
                                 f"0..{MAX_REPEAT_COUNT} (Poplar's unsigned count)")
        object.__setattr__(self, "count", count)
        _check_program(self.body, "Repeat body")

    def children(self) -> tuple[Program, ...]:
        return (self.body,)

    def with_children(self, children: Sequence_[Program]) -> "Repeat":
        (body,) = children
        return Repeat(self.count, body)


@dataclass(frozen=True, eq=False)
class RepeatWhileTrue(Program):
    """Run ``condition``; while the scalar ``predicate`` is non-zero, run ``body`` and repeat."""

    condition: Program
    predicate: "Tensor"
    body: Program

    def __post_init__(self) -> None:
        _check_program(self.condition, "RepeatWhileTrue condition")
        _check_program(self.body, "RepeatWhileTrue body")
        _check_scalar(self.predicate, "RepeatWhileTrue predicate")

    def children(self) -> tuple[Program, ...]:
        return (self.condition, self.body)

    def with_children(self, children: Sequence_[Program]) -> "RepeatWhileTrue":
        condition, body = children
        return RepeatWhileTrue(condition, self.predicate, body)


@dataclass(frozen=True, eq=False)
class TimeLoop(Program):
    """An RNN's time loop: ``reset`` sets the step counter, then ``loop`` runs the steps.

    Why a node of its own: a time loop is what sharding cuts and what trip counting counts, and
    both need facts a bare ``Repeat`` cannot say — which tensor is the counter, which way it
    runs, which absolute time steps its rows are, and which shard of how many it is.  The node
    says them; it runs exactly as the Sequence ``[reset, loop]``, so everything that only runs
    or costs a program sees the same steps.

    * ``reset``: the ``Copy`` into the one-element counter (:attr:`counter`);
    * ``loop``: ``Repeat(steps, body)``, or ``RepeatWhileTrue`` when row lengths end it early;
      the body slices and updates rows of the sequences at the counter and moves the counter by
      one, up (``reverse`` False) or down;
    * ``first_step``: the absolute time step of the loop's row 0 (its shard's first step);
    * ``steps``: the rows the loop visits at most (its shard's steps);
    * ``shard`` of ``shards``: which part of the time axis this loop covers.
    """

    reset: Program
    loop: Program
    reverse: bool
    first_step: int
    steps: int
    shard: int = 0
    shards: int = 1

    def __post_init__(self) -> None:
        if not isinstance(self.reset, Copy) or self.reset.dst.num_elements != 1:
            raise GrucTypeError("TimeLoop reset must be a Copy into a one-element counter, got "
                                f"{type(self.reset).__name__}")
        if not isinstance(self.loop, (Repeat, RepeatWhileTrue)):
            raise GrucTypeError(f"TimeLoop loop must be a Repeat or RepeatWhileTrue, got "
                                f"{type(self.loop).__name__}")
        if not isinstance(self.reverse, (bool, np.bool_)):
            raise GrucTypeError(f"TimeLoop reverse must be a bool, got {self.reverse!r}")
        object.__setattr__(self, "reverse", bool(self.reverse))
        for name in ("first_step", "steps", "shard", "shards"):
            value = getattr(self, name)
            if not isinstance(value, numbers.Integral) or isinstance(value, (bool, np.bool_)):
                raise GrucTypeError(f"TimeLoop {name} must be an integer, got {value!r}")
            object.__setattr__(self, name, int(value))
        if self.first_step < 0 or self.steps < 1 or not 0 <= self.shard < self.shards:
            raise GrucValueError(
                f"TimeLoop needs first_step >= 0, steps >= 1 and 0 <= shard < shards, got "
                f"first_step={self.first_step}, steps={self.steps}, shard {self.shard} of "
                f"{self.shards}")
        if isinstance(self.loop, Repeat) and self.loop.count != self.steps:
            raise GrucValueError(f"TimeLoop of {self.steps} steps repeats {self.loop.count} "
                                 "times; a fixed-length time loop runs every step")

    @property
    def counter(self) -> "Tensor":
        """The one-element step counter the body slices at."""
        return self.reset.dst

    @property
    def direction(self) -> int:
        """+1 when the counter counts up, -1 when it counts down."""
        return -1 if self.reverse else 1

    def trips(self, longest: int) -> int:
        """How often the loop runs its body when the longest sequence has ``longest`` steps: the
        rows of its shard before that length."""
        return min(max(longest - self.first_step, 0), self.steps)

    def children(self) -> tuple[Program, ...]:
        return (self.reset, self.loop)

    def with_children(self, children: Sequence_[Program]) -> Program:
        """The same time loop over new children; a loop a rewrite turned into something else (a
        one-step ``Repeat`` is its body) is no time loop any more: the Sequence it runs as."""
        reset, loop = children
        if not isinstance(reset, Copy) or not isinstance(loop, (Repeat, RepeatWhileTrue)) \
                or isinstance(loop, Repeat) and loop.count != self.steps:
            return Sequence(reset, loop)
        return TimeLoop(reset, loop, self.reverse, self.first_step, self.steps, self.shard,
                        self.shards)


@dataclass(frozen=True, eq=False)
class If(Program):
    """Run ``then`` if the scalar ``predicate`` is non-zero, else ``otherwise``."""

    predicate: "Tensor"
    then: Program
    otherwise: Program = field(default_factory=Sequence)

    def __post_init__(self) -> None:
        _check_program(self.then, "If then-branch")
        _check_program(self.otherwise, "If else-branch")
        _check_scalar(self.predicate, "If predicate")

    def children(self) -> tuple[Program, ...]:
        return (self.then, self.otherwise)

    def with_children(self, children: Sequence_[Program]) -> "If":
        then, otherwise = children
        return If(self.predicate, then, otherwise)


@dataclass(frozen=True, eq=False)
class Call(Program):
    """Run a graph function (``graph.add_function``): one copy of the code, many call sites."""

    function: "Function"

    def __post_init__(self) -> None:
        from gruc.ir.graph import Function  # graph.py imports this module

        if not isinstance(self.function, Function):
            raise GrucTypeError(f"Call needs a Function (graph.add_function), got "
                                f"{type(self.function).__name__}")


@dataclass(frozen=True, eq=False)
class PrintTensor(Program):
    """Record ``tensor``'s value under ``label``; the engine captures it (``engine.printed``)."""

    label: str
    tensor: "Tensor"

    def __post_init__(self) -> None:
        if not isinstance(self.label, str):
            raise GrucTypeError(f"PrintTensor label must be a string, got {self.label!r}")
        _check_tensor(self.tensor, "PrintTensor tensor")


@dataclass(frozen=True, eq=False)
class Sync(Program):
    """An explicit BSP synchronisation (costs sync cycles, changes no data)."""


def fewest_executions(program: Program) -> int:
    """The fewest steps (``Execute``, ``Copy``, ``WriteUndef``, ``PrintTensor``, ``Sync``) any run
    of ``program`` executes, whatever its data: ``Repeat`` counts multiply, an ``If`` takes its
    cheaper branch, a ``RepeatWhileTrue`` checks its condition once and may never run its body,
    a ``Call`` runs its function's program.

    Why: a loop stays one node whatever its count, so a small module can ask for a run no
    simulation finishes (``repeat 4294967295``: months); this says so before running, in
    Python integers, exact however large the counts."""
    functions: dict[int, int] = {}

    def fewest(node: Program) -> int:
        if isinstance(node, (Sequence, TimeLoop)):
            return sum(fewest(child) for child in node.children())
        if isinstance(node, Repeat):
            return node.count * fewest(node.body)
        if isinstance(node, RepeatWhileTrue):
            return fewest(node.condition)
        if isinstance(node, If):
            return min(fewest(node.then), fewest(node.otherwise))
        if isinstance(node, Call):
            key = id(node.function)
            if key not in functions:
                functions[key] = fewest(node.function.program)
            return functions[key]
        return 1

    return fewest(program)
