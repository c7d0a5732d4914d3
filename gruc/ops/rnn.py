"""poplibs' generic RNN machinery (``popnn::rnn``): sharded sequence tensors and the time loop.

An RNN layer is a cell applied at every time step of a sequence.  poplibs does not unroll it: it
builds the cell *once* as a loop body and runs it in ``Repeat`` loops, one per **shard** of the
time axis (``docs/poplibs-notes.md`` §1.3–1.5).  Each shard's part of every sequence tensor lives
on its own set of tiles, time-major on each tile, so every step's dynamic slice and update is
tile-local; more shards spread a long sequence over more tiles, fewer bytes per tile.  The
geometry (grains, tile sets, shard bounds) is in :mod:`gruc.rnn_geometry`; this module builds
the graph.

* ``create_input_tensor`` / ``create_output_tensor`` / ``create_recurrent_tensor`` /
  ``create_initial_state``: variables mapped by :func:`~gruc.rnn_geometry.sequence_tile_layout`.
  One variable stands for poplibs' per-shard, per-tile variables: the memory planner lays a
  variable's elements on a tile in flat order, which for ``[S, B, F]`` is time-major, so each tile
  holds its elements of one step as one contiguous block, as in poplibs.
* ``shift_rnn_tensor``: the "previous step" sequence ``out[t] = base[t-1]``, ``out[0] = single``.
* ``rnn``: the loop builder.  Per shard, in order (reversed, with time reversed, for
  ``reverse=True``): hand the state over from the previous shard, then a ``TimeLoop`` (shard ``k``
  of ``N``, its first step and steps named): reset the step counter and run
  ``Repeat(steps, body)`` — or ``RepeatWhileTrue`` when a lengths tensor is given — where ``body``
  dynamically slices the inputs at the counter, calls ``loop_fn``, and dynamically updates the
  output sequences.  The counter, the shard's first step, the loop limits and the per-row masks
  are scalars on tile 0.  The program does not grow with the sequence length: one loop per shard,
  and with code reuse a single copy of the cell, run by ``Call`` from every shard.

The loop body contract (``loop_fn(graph, step, state, slices, created, body)``):

* ``step`` (:class:`TimeStep`): ``counter`` is the step within the shard, ``begin`` the shard's
  first step (``begin + counter`` is the absolute step); ``mask`` / ``inverse`` (shape ``[B]``,
  the layer's type) are 1 / 0 for rows still inside their length and 0 / 1 past it — given only
  when lengths differ per row (``params.batch_variable_time_steps``).
* ``state``: the shard's state tensors, shaped like ``init_state``.  The body reads the previous
  step's state there and must write the new state into the same tensors (never rebind them).
* ``slices`` (:class:`RnnSlice`): this step's row of each input sequence and of ``interim_in``
  (read only), and per-step buffers for ``interim_out`` and each of ``outputs`` that the body must
  write completely.  Rows have the sequence's shape without its time dimension.
* ``created``: a list with one ``None`` per ``created`` sequence; the body assigns each entry a
  tensor it computed this step (shaped like the sequence's row), which is stored at the step.
* ``body``: the ``Sequence`` to append the cell's programs to.

Deviations from poplibs, on purpose: ``shift_rnn_tensor`` is correct for any ``multiple`` (poplibs
ends the last shard at ``S`` instead of ``multiple * S``); lengths beyond ``S`` are clamped to
``S``; ``outputs`` are per-step buffers written back every step (poplibs slices a per-shard output
state first, an LSTM detail no caller here needs); with code reuse the counter, first step and
masks are shared tensors the function reads directly, so only per-shard tensors are copied in and
out around each ``Call``; the ``variableSeqFlag`` of poplibs' ``TimeStepState`` (unused by its GRU)
is not built.
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass
from typing import Callable, Sequence

from gruc.errors import GrucShapeError, GrucTypeError, GrucValueError, expect
from gruc.ir import expr as ex
from gruc.ir.codelets.elementwise import MAP
from gruc.ir.graph import Function, Graph
from gruc.ir.program import (Call, Copy, Execute, Repeat, RepeatWhileTrue, Sequence as Seq,
                             TimeLoop)
from gruc.ir.tensor import Tensor, Variable, concat
from gruc.ops.dynamic import dynamic_slice, dynamic_update
from gruc.ops.elementwise import map, map_in_place, map_with_output
from gruc.rnn_geometry import (RnnParams, SequenceTileLayout, code_reuse_default,
                                   get_input_bytes_per_tile, get_max_shards,
                                   get_output_bytes_per_tile, sequence_tile_layout,
                                   shard_time_bounds)
from gruc.types import BOOL, INT, UNSIGNED_INT, DType

__all__ = [
    "RnnParams", "TimeStep", "RnnSlice", "StateSequence", "LoopFn", "get_max_shards",
    "get_input_bytes_per_tile", "get_output_bytes_per_tile", "create_input_tensor",
    "create_output_tensor", "create_recurrent_tensor", "create_initial_state", "shift_rnn_tensor",
    "rnn",
]


@dataclass(frozen=True)
class TimeStep:
    """Where the loop is, for the body (poplibs ``TimeStepState`` + ``RnnBatchwiseFlags``)."""

    counter: Tensor
    """UNSIGNED_INT ``[1]`` on tile 0: the step within the current shard (0 .. steps - 1)."""
    begin: Tensor
    """UNSIGNED_INT ``[1]`` on tile 0: the current shard's first step."""
    mask: Tensor | None = None
    """``[B]`` of the layer's type: 1 where ``lengths[b] > begin + counter``, else 0; None unless
    lengths differ per row."""
    inverse: Tensor | None = None
    """``1 - mask``; None with ``mask``."""


@dataclass(frozen=True)
class RnnSlice:
    """One step's rows of the sequences, as the body sees them (poplibs ``RnnSlice``)."""

    inputs: tuple[Tensor, ...] = ()
    interim_in: Tensor | None = None
    interim_out: Tensor | None = None
    """Buffer the body fills; stored into the ``interim_out`` sequence after the body."""
    outputs: tuple[Tensor, ...] = ()
    """Buffers the body fills; stored into the ``outputs`` sequences after the body."""


@dataclass(frozen=True)
class StateSequence:
    """Record state ``state_index`` into ``output`` (``[S, ...]``) after every step."""

    output: Tensor
    state_index: int = 0


LoopFn = Callable[[Graph, TimeStep, list[Tensor], RnnSlice, list, Seq], None]
"""``loop_fn(graph, step, state, slices, created, body)``; see the module doc."""


# ------------------------------------------------------------------------------------------------
# Sequence tensors
# ------------------------------------------------------------------------------------------------

def _laid_out(graph: Graph, dtype: DType, layout: SequenceTileLayout, name: str) -> Variable:
    variable = graph.add_variable(dtype, layout.shape, name)
    for first, last, tiles in layout.shard_row_tiles():
        graph.set_tile_mapping(variable[first:last], tiles)
    return variable


def _check_params(params: RnnParams) -> None:
    expect(isinstance(params, RnnParams), GrucTypeError,
           f"params must be gruc.ops.rnn.RnnParams, got {type(params).__name__}")


def create_input_tensor(graph: Graph, params: RnnParams, num_shards: int,
                        name: str = "input") -> Variable:
    """``[S, B, I]``, sharded over time (poplibs ``createInputTensor``)."""
    _check_params(params)
    return _laid_out(graph, params.dtype, sequence_tile_layout(
        graph.target, params, params.input_size, num_shards), name)


def create_output_tensor(graph: Graph, params: RnnParams, num_shards: int, name: str = "output",
                         multiple: int = 1) -> Variable:
    """``[multiple * S, B, H]``; each shard holds ``multiple`` rows per step
    (poplibs ``createOutputTensor``).  View it as ``[S, multiple, B, H]`` with ``reshape``."""
    _check_params(params)
    return _laid_out(graph, params.dtype, sequence_tile_layout(
        graph.target, params, params.output_size, num_shards, multiple=multiple), name)


def create_recurrent_tensor(graph: Graph, params: RnnParams, size: int, num_shards: int,
                            name: str = "recurrent") -> Variable:
    """``[S, B, size]``, sharded like the layer's sequences (poplibs ``createRecurrentTensor``)."""
    _check_params(params)
    return _laid_out(graph, params.dtype, sequence_tile_layout(
        graph.target, params, size, num_shards), name)


def create_initial_state(graph: Graph, params: RnnParams, is_output: bool, multiple: int,
                         num_shards: int, name: str = "initState") -> Variable:
    """``[multiple, B, layer_sizes[is_output]]`` on the first shard's tiles
    (poplibs ``createInitialState``)."""
    _check_params(params)
    size = params.layer_sizes[1 if is_output else 0]
    return _laid_out(graph, params.dtype, sequence_tile_layout(
        graph.target, params, size, num_shards, multiple=multiple, sequences_per_shard=1,
        shard_index=0), name)


def shift_rnn_tensor(graph: Graph, params: RnnParams, t_base: Tensor, t_single: Tensor,
                     prog: Seq, num_shards: int, name: str = "shift") -> Tensor:
    """The sequence one step later: ``out[t] = t_base[t - 1]``, ``out[0] = t_single``
    (poplibs ``shiftRnnTensor``).

    ``t_base`` is ``[multiple * S, ...]``; ``t_single`` is ``[multiple, ...]`` (or ``[...]`` when
    ``multiple`` is 1).  The result is one clone of ``t_base`` per shard, so each shard's rows stay
    on that shard's tiles; only the row crossing a shard boundary is exchanged.
    """
    _check_params(params)
    steps = params.max_time_steps
    expect(t_base.rank >= 1 and t_base.dim(0) % steps == 0, GrucShapeError,
           f"shift_rnn_tensor base must have a multiple of {steps} rows, got {list(t_base.shape)}")
    multiple = t_base.dim(0) // steps
    if multiple == 1 and t_single.shape == t_base.shape[1:]:
        t_single = t_single.expand([0])
    expect(t_single.shape == (multiple,) + t_base.shape[1:], GrucShapeError,
           f"shift_rnn_tensor single must have shape {[multiple, *t_base.shape[1:]]}, "
           f"got {list(t_single.shape)}")
    expect(t_single.dtype == t_base.dtype, GrucTypeError,
           f"shift_rnn_tensor single is {t_single.dtype.name}, base is {t_base.dtype.name}")
    pieces = []
    previous_last = t_single
    for shard, (begin, end) in enumerate(shard_time_bounds(steps, num_shards, multiple)):
        if end == begin:
            continue  # more shards than the steps need: the trailing ones hold no rows
        piece = graph.clone(t_base.slice(begin, end), f"{name}/{shard}")
        prog.add(Copy(previous_last, piece.slice(0, multiple)))
        if end - begin > multiple:
            prog.add(Copy(t_base.slice(begin, end - multiple), piece.slice(multiple, end - begin)))
        pieces.append(piece)
        previous_last = t_base.slice(end - multiple, end)
    return concat(pieces, 0)


# ------------------------------------------------------------------------------------------------
# The loop builder
# ------------------------------------------------------------------------------------------------

@dataclass(frozen=True)
class _Sequences:
    """The caller's sequence tensors (each with ``S`` rows in dim 0) and what the loop does with
    them: slice (``inputs``, ``interim_in``) or store into (the rest)."""

    inputs: list[Tensor]
    interim_in: Tensor | None
    interim_out: Tensor | None
    outputs: list[Tensor]
    created: list[Tensor]
    state_sequence: StateSequence | None


@dataclass(frozen=True)
class _Shard:
    """One shard: its number, its time steps ``[begin, end)`` and its copy of the state."""

    index: int
    begin: int
    end: int
    state: list[Tensor]

    def rows(self, sequence: Tensor) -> Tensor:
        return sequence.slice(self.begin, self.end)


@dataclass(frozen=True)
class _Cell:
    """The loop body built once as a graph function (code reuse)."""

    function: Function
    parameters: list[Tensor]
    """What each call copies in, in order: the states, the input rows, the interim-in row; the
    states are copied back out after the call."""
    slices: RnnSlice
    """The rows the function reads and the buffers it fills, which every shard stores from."""
    created: list[Tensor]


class _LoopBuilder:
    """Builds :func:`rnn`: the scalars on tile 0 once, then one loop per shard."""

    def __init__(self, graph: Graph, params: RnnParams, prog: Seq, name: str, reverse: bool,
                 num_shards: int, lengths: Tensor | None, sequences: _Sequences,
                 loop_fn: LoopFn, code_reuse: bool) -> None:
        self.graph, self.params, self.prog, self.name = graph, params, prog, name
        self.reverse, self.lengths, self.sequences = reverse, lengths, sequences
        self.loop_fn, self.code_reuse = loop_fn, code_reuse
        self.bounds = shard_time_bounds(params.max_time_steps, num_shards)
        begins = [b for b, _ in self.bounds]
        steps = [e - b for b, e in self.bounds]
        self.counter = self._scalar_variable(UNSIGNED_INT, "counter")
        self.begin = self._scalar_variable(UNSIGNED_INT, "begin")
        self.shard_begins = self._constant(UNSIGNED_INT, begins, "shard_begins")
        self.start = self._constant(UNSIGNED_INT, [0], "zero")
        self.limits = (self._loop_limits(begins, steps) if lengths is not None
                       else self._constant(UNSIGNED_INT, steps, "shard_steps"))
        """Per shard, how many steps its loop runs (at run time, with a lengths tensor)."""
        self.advance = Seq()
        """Moves the counter one step: first thing in a reverse body, last in a forward one."""
        one = ex.PlaceHolder(1) - ex.Const(1) if reverse else ex.PlaceHolder(1) + ex.Const(1)
        map_in_place(graph, one, [self.counter], self.advance, f"{name}/advance")
        self.flags = Seq()
        """Computes this step's ``mask`` and ``inverse``; empty without per-row lengths."""
        self.step = TimeStep(self.counter, self.begin, *self._batch_flags(self.flags))
        self.cell: _Cell | None = None

    # ---- scalars on tile 0 ----------------------------------------------------------------------
    def _scalar_variable(self, dtype: DType, what: str) -> Variable:
        variable = self.graph.add_variable(dtype, (1,), f"{self.name}/{what}")
        self.graph.set_tile_mapping(variable, 0)
        return variable

    def _constant(self, dtype: DType, values: list[int], what: str) -> Variable:
        constant = self.graph.add_constant(dtype, (len(values),), values, f"{self.name}/{what}")
        self.graph.set_tile_mapping(constant, 0)
        return constant

    def _longest(self) -> Tensor:
        """The largest length, by a tree of pairwise maxima (one compute set per level)."""
        level = self.lengths.reshape([self.lengths.num_elements])
        while level.num_elements > 1:
            half = level.num_elements // 2
            larger = map(self.graph, ex.maximum(ex.PlaceHolder(1), ex.PlaceHolder(2)),
                         [level.slice(0, half), level.slice(half, 2 * half)], self.prog,
                         f"{self.name}/longest")
            odd = level.num_elements % 2
            level = concat([larger, level.slice(2 * half, 2 * half + 1)]) if odd else larger
        return level

    def _loop_limits(self, begins: list[int], steps: list[int]) -> Tensor:
        """Per shard, the steps any row still needs: ``clamp(longest - begin, 0, steps)``."""
        first = self._constant(INT, begins, "shard_begins_int")
        count = self._constant(INT, steps, "shard_steps_int")
        _1, _2, _3 = ex.PlaceHolder(1), ex.PlaceHolder(2), ex.PlaceHolder(3)
        return map(self.graph, ex.cast(ex.clamp(ex.cast(_1, INT) - _2, ex.Const(0), _3),
                                       UNSIGNED_INT),
                   [self._longest(), first, count], self.prog, f"{self.name}/limits")

    def _batch_flags(self, flags: Seq) -> tuple[Tensor | None, Tensor | None]:
        """``mask`` / ``inverse`` of the current step, computed in one compute set added to
        ``flags`` (poplibs' dual-output ``BroadcastScalar1DRelationalOp`` vertex on tile 0)."""
        if not self.params.batch_variable_time_steps:
            return None, None
        graph, lengths = self.graph, self.lengths
        rows = (lengths.num_elements,)
        operands = [lengths, self.begin.broadcast_to(rows), self.counter.broadcast_to(rows)]
        running = ex.gt(ex.cast(ex.PlaceHolder(1), INT),
                        ex.cast(ex.PlaceHolder(2) + ex.PlaceHolder(3), INT))
        cs = graph.add_compute_set(f"{self.name}/batch_flags")
        results = []
        for what, flag in (("mask", running), ("inverse", ex.logical_not(running))):
            out = graph.add_variable(self.params.dtype, rows, f"{self.name}/{what}")
            graph.set_tile_mapping(out, graph.get_tile_mapping(lengths))
            expression = ex.bind_const_types(ex.cast(flag, self.params.dtype),
                                             [t.dtype for t in operands])
            graph.add_vertex(cs, MAP, {"out": out, "ins": operands}, expr=expression)
            results.append(out)
        flags.add(Execute(cs))
        return results[0], results[1]

    # ---- one shard ------------------------------------------------------------------------------
    def shard(self, shard: _Shard, previous_state: list[Tensor]) -> None:
        """Hand the state over, start the counter, and loop over the shard's steps."""
        for source, state in zip(previous_state, shard.state):
            self.prog.add(Copy(source, state))
        body = self._body(shard)
        limit = self.limits.slice(shard.index, shard.index + 1)
        self.prog.add(Copy(self.shard_begins.slice(shard.index, shard.index + 1), self.begin))
        reset = Copy(limit if self.reverse else self.start, self.counter)
        steps = shard.end - shard.begin
        if self.lengths is None:
            loop = Repeat(steps, body)
        else:
            proceed = self._scalar_variable(BOOL, f"{shard.index}/proceed")
            condition = Seq()
            if self.reverse:  # the counter starts at the limit and counts down to 0
                test, operands = ex.gt(ex.PlaceHolder(1), ex.Const(0)), [self.counter]
            else:
                test, operands = ex.lt(ex.PlaceHolder(1), ex.PlaceHolder(2)), [self.counter,
                                                                                limit]
            map_with_output(self.graph, test, operands, proceed, condition,
                            f"{self.name}/{shard.index}/continue")
            loop = RepeatWhileTrue(condition, proceed, body)
        self.prog.add(TimeLoop(reset, loop, self.reverse, shard.begin, steps, shard.index,
                               len(self.bounds)))

    def _body(self, shard: _Shard) -> Seq:
        """One step: slice the rows at the counter, run the cell, store the results."""
        body = Seq()
        if self.reverse:
            body.add(self.advance)
        tag = f"{self.name}/{shard.index}"

        def row(sequence: Tensor, what: str) -> Tensor:
            return dynamic_slice(self.graph, shard.rows(sequence), self.counter, [0], [1], body,
                                 f"{tag}/{what}")[0]

        inputs = tuple(row(t, f"input{k}") for k, t in enumerate(self.sequences.inputs))
        interim_in = self.sequences.interim_in
        interim_in_row = row(interim_in, "interim_in") if interim_in is not None else None
        if self.step.mask is not None:
            body.add(self.flags)
        if self.code_reuse:
            slices, created = self._call_cell(shard, inputs, interim_in_row, body)
        else:
            slices = self._slices(shard, inputs, interim_in_row, tag)
            created = self._run_loop_fn(shard.state, slices, body)
        self._store(shard, slices, created, body, tag)
        if not self.reverse:
            body.add(self.advance)
        return body

    def _slices(self, shard: _Shard, inputs: tuple[Tensor, ...], interim_in: Tensor | None,
                prefix: str) -> RnnSlice:
        """The body's view of a step, with fresh buffers on the shard's tiles for its outputs."""
        def buffer(sequence: Tensor, what: str) -> Tensor:
            return self.graph.clone(sequence[shard.begin], f"{prefix}/{what}")

        interim_out = self.sequences.interim_out
        return RnnSlice(inputs, interim_in,
                        buffer(interim_out, "interim_out") if interim_out is not None else None,
                        tuple(buffer(t, f"output{k}")
                              for k, t in enumerate(self.sequences.outputs)))

    def _run_loop_fn(self, state: list[Tensor], slices: RnnSlice, body: Seq) -> list[Tensor]:
        """Build one step with the user's ``loop_fn``; return the tensors it made for the created
        sequences.  Each must be set and shaped like a row of its sequence, checked as soon as
        ``loop_fn`` returns so the message names the slot."""
        created: list = [None] * len(self.sequences.created)
        self.loop_fn(self.graph, self.step, state, slices, created, body)
        for k, (made, sequence) in enumerate(zip(created, self.sequences.created)):
            expect(isinstance(made, Tensor), GrucValueError,
                   f"loop_fn left created[{k}] unset: it must assign this step's tensor for "
                   f"created sequence {k}")
            expect(made.shape == sequence.shape[1:] and made.dtype == sequence.dtype,
                   GrucShapeError, f"loop_fn created[{k}] is {made.dtype}{list(made.shape)}, the "
                                   f"sequence row is {sequence.dtype}{list(sequence.shape[1:])}")
        return created

    def _call_cell(self, shard: _Shard, inputs: tuple[Tensor, ...], interim_in: Tensor | None,
                   body: Seq) -> tuple[RnnSlice, list[Tensor]]:
        """Copy the shard's tensors into the shared cell's parameters, call it, copy the state
        back (the cell is built on the first shard's tiles the first time)."""
        arguments = [*shard.state, *inputs, *([interim_in] if interim_in is not None else [])]
        if self.cell is None:
            prefix = f"{self.name}/param"
            parameters = [self.graph.clone(t, f"{prefix}/{k}") for k, t in enumerate(arguments)]
            states = len(shard.state)
            state, rest = parameters[:states], parameters[states:]
            slices = self._slices(shard, tuple(rest[:len(inputs)]),
                                  rest[len(inputs)] if interim_in is not None else None, prefix)
            cell_body = Seq()
            created = self._run_loop_fn(state, slices, cell_body)
            function = self.graph.add_function(cell_body, f"{self.name}/cell")
            self.cell = _Cell(function, parameters, slices, created)
        for argument, parameter in zip(arguments, self.cell.parameters):
            body.add(Copy(argument, parameter))
        body.add(Call(self.cell.function))
        for state, parameter in zip(shard.state, self.cell.parameters):
            body.add(Copy(parameter, state))
        return self.cell.slices, self.cell.created

    def _store(self, shard: _Shard, slices: RnnSlice, created: list[Tensor], body: Seq,
               tag: str) -> None:
        """Write this step's rows into the sequences at the counter."""
        sequences = self.sequences
        stores = list(zip(sequences.outputs, slices.outputs)) + list(zip(sequences.created,
                                                                         created))
        if sequences.interim_out is not None:
            stores.append((sequences.interim_out, slices.interim_out))
        if sequences.state_sequence is not None:
            stores.append((sequences.state_sequence.output,
                           shard.state[sequences.state_sequence.state_index]))
        for k, (sequence, row) in enumerate(stores):
            dynamic_update(self.graph, shard.rows(sequence), row.expand([0]), self.counter, [0],
                           [1], body, f"{tag}/store{k}")


# ------------------------------------------------------------------------------------------------
# Argument checks and the entry point
# ------------------------------------------------------------------------------------------------

def _tensor_list(value: Sequence[Tensor] | Tensor | None, what: str) -> list[Tensor]:
    """``value`` as a list (None empty, one tensor a list of one), every item checked to be a
    Tensor."""
    if value is None:
        return []
    items = [value] if isinstance(value, Tensor) else list(value)
    for k, t in enumerate(items):
        expect(isinstance(t, Tensor), GrucTypeError,
               f"rnn {what}[{k}] must be a gruc Tensor, got {type(t).__name__}")
    return items


def _check_sequences(params: RnnParams, init: list[Tensor], sequences: _Sequences) -> None:
    """Every sequence tensor has ``max_time_steps`` rows in dim 0, and a recorded state sequence
    names a state whose shape and type its rows have."""
    named = {"inputs": sequences.inputs, "outputs": sequences.outputs,
             "created": sequences.created,
             "interim_in": _tensor_list(sequences.interim_in, "interim_in"),
             "interim_out": _tensor_list(sequences.interim_out, "interim_out")}
    record = sequences.state_sequence
    if record is not None:
        named["state_sequence"] = _tensor_list(record.output, "state_sequence")
    for what, items in named.items():
        for k, t in enumerate(items):
            expect(t.rank >= 1 and t.dim(0) == params.max_time_steps, GrucShapeError,
                   f"rnn {what}[{k}] must have {params.max_time_steps} time steps in dim 0, got "
                   f"shape {list(t.shape)}")
    if record is not None:
        index = record.state_index
        expect(isinstance(index, int) and 0 <= index < len(init), GrucValueError,
               f"state_sequence.state_index {index!r} is not a state (0..{len(init) - 1})")
        expect(record.output.shape[1:] == init[index].shape
               and record.output.dtype == init[index].dtype, GrucShapeError,
               f"state_sequence.output rows are {record.output.dtype}"
               f"{list(record.output.shape[1:])}, state {index} is "
               f"{init[index].dtype}{list(init[index].shape)}")


def _check_lengths(params: RnnParams, lengths: Tensor | None) -> None:
    """Per-row lengths are given exactly when ``params.var_time_steps_shape`` says so, with that
    shape and an integer type."""
    if params.var_time_steps_shape is None:
        expect(lengths is None, GrucValueError,
               "rnn got var_time_steps but params.var_time_steps_shape is None; set it to the "
               "lengths tensor's shape")
        return
    expect(isinstance(lengths, Tensor), GrucValueError,
           f"params.var_time_steps_shape is {list(params.var_time_steps_shape)}: pass the lengths "
           "tensor as var_time_steps")
    expect(lengths.shape == params.var_time_steps_shape, GrucShapeError,
           f"var_time_steps has shape {list(lengths.shape)}, params say "
           f"{list(params.var_time_steps_shape)}")
    expect(lengths.dtype in (INT, UNSIGNED_INT), GrucTypeError,
           f"var_time_steps must be int or unsigned_int, got {lengths.dtype.name}")


def _shard_states(graph: Graph, params: RnnParams, init_state: list[Tensor], num_shards: int,
                  name: str) -> list[list[Tensor]]:
    """Per shard, a copy of each state on that shard's tiles (poplibs ``createState``)."""
    per_state = []
    for k, init in enumerate(init_state):
        expect(init.rank in (2, 3) and init.shape[-2] == params.batch_size,
               GrucShapeError, f"rnn init_state[{k}] must be [B, F] or [multiple, B, F] with "
                               f"B = {params.batch_size}, got {list(init.shape)}")
        multiple = 1 if init.rank == 2 else init.dim(0)
        layout = sequence_tile_layout(graph.target, params, init.shape[-1], num_shards,
                                      multiple=multiple, sequences_per_shard=1)
        variable = _laid_out(graph, init.dtype, layout, f"{name}/state{k}")
        per_state.append([variable.slice(i * multiple, (i + 1) * multiple).reshape(init.shape)
                          for i in range(num_shards)])
    return [list(states) for states in zip(*per_state)]


def rnn(graph: Graph, params: RnnParams, *, reverse: bool = False, init_state: Sequence[Tensor],
        state_sequence: StateSequence | None = None, inputs: Sequence[Tensor] = (),
        interim_in: Tensor | None = None, interim_out: Tensor | None = None,
        outputs: Sequence[Tensor] = (), created: Sequence[Tensor] = (), prog: Seq,
        loop_fn: LoopFn, num_shards: int, var_time_steps: Tensor | None = None,
        code_reuse: bool | None = None, name: str = "rnn") -> list[Tensor]:
    """Build the time loop of an RNN layer (poplibs ``rnn::Rnn``); return the final state.

    Every sequence argument has ``params.max_time_steps`` rows in dim 0.  ``var_time_steps`` is
    the lengths tensor (INT or UNSIGNED_INT, shape ``params.var_time_steps_shape``): the loops then
    stop after the longest sequence, and per-row lengths also give the body masks.  Steps past a
    sequence's end are not run (scalar length) or run with ``mask`` 0 (per-row lengths), so rows of
    the output sequences past the length keep what they held unless the body writes them.
    ``code_reuse`` (default: poplibs' rule, more than 15 shards) builds the cell once as a graph
    function called by every shard: its tensors live on the first shard's tiles, so every other
    shard exchanges its state and rows in and out around each call — poplibs' price for a
    program that holds one cell instead of one per shard.  See the module doc for ``loop_fn``.
    """
    _check_params(params)
    expect(isinstance(num_shards, numbers.Integral) and not isinstance(num_shards, bool)
           and num_shards >= 1, GrucValueError,
           f"num_shards must be an integer >= 1, got {num_shards!r}")
    expect(callable(loop_fn), GrucTypeError, "rnn loop_fn must be callable")
    init = _tensor_list(init_state, "init_state")
    expect(bool(init), GrucValueError, "rnn needs at least one init_state tensor")
    _tensor_list(interim_in, "interim_in")
    _tensor_list(interim_out, "interim_out")
    sequences = _Sequences(_tensor_list(inputs, "inputs"), interim_in, interim_out,
                           _tensor_list(outputs, "outputs"), _tensor_list(created, "created"),
                           state_sequence)
    _check_sequences(params, init, sequences)
    _check_lengths(params, var_time_steps)
    builder = _LoopBuilder(graph, params, prog, name, reverse, num_shards, var_time_steps,
                           sequences, loop_fn,
                           code_reuse_default(num_shards) if code_reuse is None else code_reuse)
    states = _shard_states(graph, params, init, num_shards, name)
    previous = init
    for index in (range(num_shards - 1, -1, -1) if reverse else range(num_shards)):
        shard = _Shard(index, *builder.bounds[index], states[index])
        if shard.begin == shard.end:
            continue  # more shards than the steps need: the trailing ones have nothing to run
        builder.shard(shard, previous)
        previous = shard.state
    return list(previous)
