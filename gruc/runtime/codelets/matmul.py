"""Matmul codelets (``MatMulPartials``, ``MatMulReduce``, ``MatMulReduceAcc``) on both engines, with
their cycle and exchange estimates.

Both engines run all the blocks of a vertex together — never a Python call per tile.

numpy (the definition): for each sub-grid of equally shaped blocks, gather every tile's ``a`` and
``b`` blocks through precomputed index arrays and multiply all blocks in one batched
``numpy.matmul``; scatter the partials to their tiles.  The reduction gathers the partials, sums over the k blocks and
writes the output.

numba (the fast path): the partials of k block ``ik`` on all tiles together form the product of
A's columns and B's rows of that k block, so the engine gathers A and B once from tile memory
(runs of consecutive addresses copied by compiled loops), computes every k block's partials with
one BLAS call per block (:mod:`gruc.runtime.blas`: MKL where installed, else ``numpy.matmul``
over ``[g, Pk]``), and scatters them to their tiles — the same sums as the definition, at BLAS
speed.  Half data is moved as raw 16-bit words
and converted by numpy, since numba cannot load float16.  When the executable shows that a step's
float partials are read only by the reduction in the very next step, the two are fused
(:mod:`gruc.runtime.codelets.matmul_fused`): one BLAS call over all of k, the output written
directly, the partials never scattered nor gathered.  An operand that provably did not change since the step
last gathered it (the weights, in an RNN loop) is not gathered again, nor, with MKL, packed again
for BLAS (:class:`~gruc.runtime.blas.WeightsProduct`); one that another product step gathered
since it last changed is copied from that step's host array
(:class:`~gruc.runtime.transfer.SharedRead`).
A weight-gradient accumulator (``MatMulReduceAcc`` in a loop) is kept on the host between steps
and takes its per-step products in stacks: one product over the k of many steps, at full BLAS
rate (:mod:`gruc.runtime.codelets.matmul_fused`).

Estimates: a tile's partial products cost what poplin's vertex for them costs (the AMP's
``ConvPartial1x1Out`` or horizontal MACs, :mod:`gruc.ir.codelets.conv_costs`); a reduction stage
what poplin's ``ReduceAdd`` costs for the tile's outputs and partials (a cast when there is one
partial of another type).  Exchange: every element of a tile's ``a`` and ``b``
blocks that lives on another tile is received by it (once per tile that uses it); every partial
that is not on its output element's tile is received there, and a ``scale`` tensor goes to every
output tile.
"""

from __future__ import annotations

import itertools

import numpy as np

from gruc.ir.codelets.conv_costs import (amp_partials_cycles, cast_cycles, mac_partials_cycles,
                                         reduce_add_cycles)
from gruc.ir.codelets.matmul import (FIELD_N, MATMUL_PARTIALS, MATMUL_REDUCE, MATMUL_REDUCE_ACC,
                                     Blocking, block_tiles, block_view, blocking_of, method_of)
from gruc.ir.graph import Graph, Vertex
from gruc.runtime.cost import Traffic, cycle_estimator, exchange_estimator
from gruc.runtime.blas import Product, library_name
from gruc.runtime.interp import Prepared, numpy_vertex
from gruc.runtime.kernels import HostCopies, Unchanged, numba_vertex
from gruc.runtime.lower import DeviceMemory, Executable, LoweredVertex, Operand, aligned_array
from gruc.runtime.transfer import SharedRead, Transfer
from gruc.target import Target
from gruc.types import FLOAT, HALF

F32 = np.float32


# ---- numpy: the definition --------------------------------------------------------------------
@numpy_vertex(MATMUL_PARTIALS)
def _numpy_partials(vertex: LoweredVertex) -> Prepared:
    """The definition of ``MatMulPartials``: each tile's ``a`` and ``b`` blocks gathered from tile
    memory, multiplied in float32 and rounded once into its ``partials`` block."""
    a, b, p = (vertex.fields[name] for name in ("a", "b", "partials"))
    geometry = blocking_of(vertex.vertex)
    G, M, K, N = geometry.shape
    a3, b3 = a.index.reshape(G, M, K), b.index.reshape(G, K, N)
    p4 = p.index.reshape(geometry.partials_shape)
    work = []
    for pg, pk, pm, pn in geometry.parts():
        # operand blocks [cg, c., c., gb, rows, cols] as seen by every tile [cg, ck, cm, cn, ...]
        a_blocks = block_view(a3, (pg, pm, pk)).transpose(0, 2, 1, 3, 4, 5)[:, :, :, None]
        b_blocks = block_view(b3, (pg, pk, pn))[:, :, None]
        p_blocks = block_view(p4, (pg, pk.in_blocks(), pm, pn))[..., 0, :, :]
        work.append((a_blocks, b_blocks, p_blocks))
    p_type = p.dtype.storage

    def run(memory: DeviceMemory) -> None:
        va, vb, vp = (memory.view(op.dtype) for op in (a, b, p))
        for a_blocks, b_blocks, p_blocks in work:
            product = np.matmul(va[a_blocks].astype(F32), vb[b_blocks].astype(F32))
            vp[p_blocks] = product.astype(p_type)

    return run


def _reduce_parts(vertex: LoweredVertex) -> tuple[Operand, Operand, Operand | None, float]:
    scale = vertex.fields.get("scale")
    return vertex.fields["out"], vertex.fields["partials"], scale, float(vertex.params.get("k", 1))


def _factor(memory: DeviceMemory, scale: Operand | None, k: float) -> np.float32:
    """``k * scale[0]`` in float32 (the scale tensor read at run time)."""
    if scale is None:
        return F32(k)
    return F32(k) * F32(memory.view(scale.dtype)[scale.index.reshape(-1)[0]])


@numpy_vertex(MATMUL_REDUCE)
@numpy_vertex(MATMUL_REDUCE_ACC)
def _numpy_reduce(vertex: LoweredVertex) -> Prepared:
    """The definition of ``MatMulReduce`` and ``MatMulReduceAcc``: the ``Pk`` partials of each
    output summed in float32; the Acc kind adds ``k * scale[0]`` times the sum to the output, also
    in float32, and either rounds once into the output's type."""
    out, p, scale, k = _reduce_parts(vertex)
    accumulate = vertex.kind is MATMUL_REDUCE_ACC
    shape = p.shape

    def run(memory: DeviceMemory) -> None:
        partials = memory.view(p.dtype)[p.index].reshape(shape).astype(F32)
        total = partials.sum(axis=1, dtype=F32).reshape(-1)
        view = memory.view(out.dtype)
        if accumulate:
            total = view[out.index].astype(F32) + _factor(memory, scale, k) * total
        view[out.index] = total.astype(out.dtype.storage)

    return run


# ---- numba: grouped BLAS over tile memory ----------------------------------------------------
class _Operands:
    """A partials vertex's ``a`` and ``b`` read into host arrays (``SharedRead``), each read
    again only if it may have changed since the last step read it
    (:class:`~gruc.runtime.kernels.Unchanged`)."""

    def __init__(self, vertex: LoweredVertex, step: int, executable: Executable,
                 step_counts: np.ndarray, copies: HostCopies) -> None:
        G, M, K, N = blocking_of(vertex.vertex).shape
        self.a, self.b = aligned_array((G, M, K), F32), aligned_array((G, K, N), F32)
        self.moves = [(SharedRead(vertex.fields[name], copies, offer=True),
                       Unchanged(vertex.fields[name], executable, step_counts, step), host)
                      for name, host in (("a", self.a), ("b", self.b))]

    def gather(self, memory: DeviceMemory) -> bool:
        """Both operands as they are now; True if ``b`` was read again (it may have changed)."""
        a_move, b_move = self.moves
        self._move(memory, *a_move)
        return self._move(memory, *b_move)

    @staticmethod
    def _move(memory: DeviceMemory, read: SharedRead, unchanged: Unchanged,
              host: np.ndarray) -> bool:
        """Reads one operand into ``host`` unless it is unchanged; True if it was read."""
        if unchanged(memory):
            return False
        read(memory, host)
        return True


def _partials(vertex: LoweredVertex, operands: _Operands) -> Prepared:
    """The partials of every k block, one batched BLAS call per block size, scattered to tiles."""
    geometry = blocking_of(vertex.vertex)
    G, M, K, N = geometry.shape
    p_out = Transfer(vertex.fields["partials"])
    a, b = operands.a, operands.b
    partials = np.empty(geometry.partials_shape, F32)
    library = library_name()
    products = []
    for part in geometry.k.parts():  # one batched product per k block size
        end = part.start + part.count * part.size
        products.append(Product(a[:, :, part.start:end].reshape(G, M, part.count, part.size)
                                .transpose(0, 2, 1, 3),
                                b[:, part.start:end].reshape(G, part.count, part.size, N),
                                partials[:, part.first:part.first + part.count], library))

    def run(memory: DeviceMemory) -> None:
        operands.gather(memory)
        for product in products:
            product()
        p_out.write(memory, partials)

    return run


@numba_vertex(MATMUL_REDUCE)
@numba_vertex(MATMUL_REDUCE_ACC)
def _numba_reduce(vertex: LoweredVertex) -> Prepared:
    """Float partials are added straight from tile memory into the output's host copy (no
    ``[G, Pk, M, N]`` buffer); half partials are read as words, converted, then summed."""
    out, p, scale, k = _reduce_parts(vertex)
    accumulate = vertex.kind is MATMUL_REDUCE_ACC
    G, Pk, M, N = p.shape
    o_io = Transfer(out)
    total = aligned_array((G, M, N), F32)
    current = aligned_array(total.shape, F32) if accumulate else None
    if p.dtype is HALF:
        p_in, partials = Transfer(p), aligned_array(p.shape, F32)
    else:
        flat = np.arange(G * Pk * M * N, dtype=np.int64)
        p_in = Transfer(p, positions=flat // (Pk * M * N) * (M * N) + flat % (M * N))

    def run(memory: DeviceMemory) -> None:
        if p.dtype is HALF:
            p_in.read(memory, partials)
            np.sum(partials, axis=1, out=total)
        else:
            total.fill(0)
            p_in.add(memory, total)
        if accumulate:
            o_io.read(memory, current)
            np.multiply(total, _factor(memory, scale, k), out=total)
            np.add(current, total, out=current)
            o_io.write(memory, current)
        else:
            o_io.write(memory, total)

    return run


# ---- cycles and exchange ----------------------------------------------------------------------
@cycle_estimator(MATMUL_PARTIALS)
def _partials_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Per tile: poplin's estimate of its vertex for its block (field, channel groups)."""
    geometry = blocking_of(vertex)
    method = method_of(vertex)
    gb, kb, mb, nb = geometry.block_dims()
    field, out_chans = (nb, mb) if vertex.params["orientation"] == FIELD_N else (mb, nb)
    in_groups = -(-kb // method.in_chans_per_group)
    out_groups = -(-out_chans // method.partial_chans_per_group)
    float_acts = vertex.fields["a"].dtype is FLOAT
    float_partials = vertex.fields["partials"].dtype is FLOAT
    if method.kind == "AMP":
        cycles = amp_partials_cycles(field, in_groups, out_groups, gb, method, float_acts,
                                     float_partials,
                                     target.conv_unit_coeff_load_bytes_per_cycle // 2)
    else:
        cycles = mac_partials_cycles(field, in_groups, out_groups, gb, method, float_acts,
                                     float_partials)
    return np.bincount(block_tiles(vertex).reshape(-1), weights=cycles.reshape(-1),
                       minlength=target.num_tiles).astype(np.int64)


@cycle_estimator(MATMUL_REDUCE)
@cycle_estimator(MATMUL_REDUCE_ACC)
def _reduce_cycles(vertex: Vertex, elements: np.ndarray, target: Target) -> np.ndarray:
    """Per tile: poplin's ``ReduceAdd`` of the tile's outputs over the partial rows (the Acc kind
    adds its output as one more row); one row of another type is a cast."""
    out, partials = vertex.fields["out"], vertex.fields["partials"]
    depth = partials.shape[1] + (vertex.kind is MATMUL_REDUCE_ACC)
    if depth == 1:
        return cast_cycles(elements, target.vector_width(partials.dtype),
                           target.vector_width(out.dtype))
    return reduce_add_cycles(elements, np.full_like(elements, depth), out.dtype is FLOAT,
                             partials.dtype is FLOAT)


def supertile_neighbour(tiles: np.ndarray, tiles_per_ipu: int) -> np.ndarray:
    """The other tile of each tile's supertile: local tiles ``2i`` and ``2i + 1`` of one IPU
    (-1 for the last tile of an IPU with an odd tile count, which has none)."""
    local = tiles % tiles_per_ipu
    other = local ^ 1
    return np.where(other < tiles_per_ipu, tiles - local + other, -1)


def _operand_exchange(graph: Graph, tensor, tiles: np.ndarray, geometry: Blocking, letters: str,
                      traffic: Traffic) -> None:
    """Account an operand's blocks going to every tile that uses them.

    ``letters`` names the operand's axes (``"gmk"`` or ``"gkn"``); ``tiles`` is the block grid
    ``[Pg, Pk, Pm, Pn]``, whose axis missing from ``letters`` lists the users of a block.  Blocks
    lie on distinct tiles, so a tile receives each element of its blocks at most once.
    """
    axes = {"g": geometry.g, "k": geometry.k, "m": geometry.m, "n": geometry.n}
    (over,) = set(axes) - set(letters)
    order = ["gkmn".index(x) for x in letters] + ["gkmn".index(over)]
    shape = [axes[x].size for x in letters]
    element_tiles = graph.element_tiles(tensor).astype(np.int64).reshape(shape)
    element_ids = tensor.passing_ids().reshape(shape)
    size = tensor.dtype.size
    for parts in itertools.product(*(axes[x].parts() for x in letters)):
        blocks = block_view(element_tiles, parts)
        blocks = blocks.reshape(blocks.shape[:3] + (-1,))  # [c, c, c, elements of a block]
        ids = block_view(element_ids, parts).reshape(blocks.shape)
        select = [slice(None)] * 4
        for x, part in zip(letters, parts):
            select["gkmn".index(x)] = slice(part.first, part.first + part.count)
        users = tiles[tuple(select)].transpose(order)  # [c, c, c, users]
        wanted = np.zeros(blocks.shape, dtype=bool)  # needed by some tile but its own
        neighbours = supertile_neighbour(users, graph.target.tiles_per_ipu)
        paired = (neighbours[..., None, :] == users[..., :, None]).any(axis=3)  # [c, c, c, users]
        for u in range(users.shape[3]):
            receiver = np.broadcast_to(users[..., u:u + 1], blocks.shape)
            away = blocks != receiver
            both = away & paired[..., u:u + 1] & (blocks != neighbours[..., u:u + 1])
            traffic.receives(receiver[away], blocks[away], size, both[away])
            wanted |= away
        traffic.sends(blocks[wanted], size, ids[wanted])  # each element sent once


@exchange_estimator(MATMUL_PARTIALS)
def _partials_exchange(vertex: Vertex, graph: Graph, traffic: Traffic) -> None:
    """What a ``MatMulPartials`` vertex moves: the ``a`` and ``b`` block elements a tile lacks."""
    geometry = blocking_of(vertex)
    tiles = block_tiles(vertex)
    _operand_exchange(graph, vertex.fields["a"], tiles, geometry, "gmk", traffic)
    _operand_exchange(graph, vertex.fields["b"], tiles, geometry, "gkn", traffic)


@exchange_estimator(MATMUL_REDUCE)
@exchange_estimator(MATMUL_REDUCE_ACC)
def _reduce_exchange(vertex: Vertex, graph: Graph, traffic: Traffic) -> None:
    """What a matmul reduction moves: every partial not on its output element's tile, and the
    ``scale`` element to every other tile holding outputs."""
    out, partials = vertex.fields["out"], vertex.fields["partials"]
    home = graph.element_tiles(out).astype(np.int64).reshape(out.shape)
    where = graph.element_tiles(partials).astype(np.int64).reshape(partials.shape)
    home = np.broadcast_to(home[:, None], where.shape)
    away = where != home
    traffic.transfers(home[away], where[away], partials.dtype.size,
                      partials.flat_ids().reshape(where.shape)[away])
    scale = vertex.fields.get("scale")
    if scale is not None:
        source = int(graph.element_tiles(scale)[0])
        readers = np.unique(home)
        readers = readers[readers != source]
        traffic.transfers(readers, np.full_like(readers, source), scale.dtype.size,
                          np.full_like(readers, int(scale.flat_ids()[0])))
