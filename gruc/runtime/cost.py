"""The cycle model: what each step costs on each tile, as BSP supersteps.

Every step that moves data is one bulk-synchronous superstep: an **exchange** phase (remote
operands and inter-tile copies move at ``target.exchange_bytes_per_cycle`` per tile, slower across
IPUs), a **compute** phase (each tile runs its vertices; the superstep waits for the busiest tile),
and a **sync**.  The estimates are per step and per tile, computed once at compile time from the
IR and the target; the engine multiplies them by how often each step ran.

Vertex compute estimates live in :data:`CYCLE_ESTIMATORS`, one function per vertex kind (beside
the kinds, like poplibs' ``*CycleEstimators.cpp``): given the vertex and the elements each tile
computes, the cycles each tile spends.  An elementwise vertex costs a fixed overhead plus, per
vector of elements, the summed cost of its operations; the six worker contexts of a tile share
the work in a barrel, so a tile issues about one vector operation per cycle overall.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Callable, Iterator

import numpy as np
from numba import njit

from gruc.analysis.steps import Step
from gruc.ir.graph import Graph, Vertex
from gruc.ir.layout import SliceOp
from gruc.ir.mapping import distinct
from gruc.ir.program import Copy, Execute, PrintTensor, WriteUndef
from gruc.ir.tensor import Tensor, joined_parts
from gruc.ir.tile_table import repeats_its_rows
from gruc.ir.vertices import VertexKind
from gruc.target import TILES_PER_SHARED_EXCHANGE_BUS, Target

VERTEX_OVERHEAD_CYCLES = 50
"""Fixed cost of starting a vertex on a tile (supervisor dispatch of the workers)."""

COPY_BYTES_PER_CYCLE = 8
"""On-tile memory copies move one 64-bit word per cycle."""

Estimator = Callable[[Vertex, np.ndarray, Target], np.ndarray]
CYCLE_ESTIMATORS: dict[VertexKind, Estimator] = {}

ExchangeEstimator = Callable[[Vertex, Graph, "Traffic"], None]
"""Adds to a step's traffic what a vertex's operands move: the elements each tile receives."""
EXCHANGE_ESTIMATORS: dict[VertexKind, ExchangeEstimator] = {}
"""Exchange of kinds whose fields do not pair element by element with the split field (a matmul's
operand blocks go to every tile that uses them); other kinds get the elementwise rule."""


def cycle_estimator(kind: VertexKind) -> Callable[[Estimator], Estimator]:
    """Register the compute-cycle estimator of vertex kind ``kind``."""

    def register(fn: Estimator) -> Estimator:
        CYCLE_ESTIMATORS[kind] = fn
        return fn

    return register


def exchange_estimator(kind: VertexKind) -> Callable[[ExchangeEstimator], ExchangeEstimator]:
    """Register the exchange estimator of vertex kind ``kind``."""

    def register(fn: ExchangeEstimator) -> ExchangeEstimator:
        EXCHANGE_ESTIMATORS[kind] = fn
        return fn

    return register


DENSE_PAIR_TILES = 2048
"""Up to this many tiles a step's messages are tallied in a dense ``[receiver, sender]`` table
(33 MB at 2,048 tiles): counting pairs by sorting or hashing them would cost far more than the
rest of a product's exchange estimate."""


DENSE_PAIR_BATCH = 4096
"""Fewer messages than this at once are listed, and summed when the step's are all known: a
step of thousands of small reads would otherwise touch the dense table thousands of times."""


class Traffic:
    """What one step's exchange moves: bytes each tile receives and sends, the (receiver, sender)
    pairs that exchange (each a message: its code is instructions on both tiles), and whether any
    transfer crosses an IPU.

    A tile sends an element once however many tiles receive it: the exchange fabric broadcasts
    (a tile's outgoing data is a stream any number of tiles may listen to, as poplibs' planners
    assume: a broadcast operand costs its receivers, not its sender, per receiver).  So what a
    tile sends is counted per distinct element where the elements are known."""

    def __init__(self, target: Target) -> None:
        self.num_tiles = target.num_tiles
        self.tiles_per_ipu = target.tiles_per_ipu
        self.bytes_in = np.zeros(self.num_tiles, dtype=np.int64)
        self.bytes_in_shared = np.zeros(self.num_tiles, dtype=np.int64)
        """Of ``bytes_in``, those the other tile of the receiver's supertile receives too, from
        the same sender: they arrive at twice a tile's rate (``TILES_PER_SHARED_EXCHANGE_BUS``)."""
        self.bytes_out = np.zeros(self.num_tiles, dtype=np.int64)
        """Bytes each tile sends, of transfers whose elements are not known (each sent once)."""
        self.crossing = False
        self._dense = self.num_tiles <= DENSE_PAIR_TILES
        self._pair_table: np.ndarray | None = None
        """Dense tiles: bytes per ``receiver * num_tiles + sender``, made at the first message."""
        self._pairs: list[np.ndarray] = []
        self._pair_bytes: list[np.ndarray] = []
        self._sent: list[tuple[np.ndarray, int]] = []
        self._sent_once: dict[int, np.ndarray] = {}

    def transfers(self, receivers: np.ndarray, senders: np.ndarray, size: int,
                  elements: np.ndarray | None = None) -> None:
        """One transfer of ``size`` bytes per (receiver, sender) entry; with ``elements`` (the
        global id of each entry's element), a sender sends each element once."""
        self.receives(receivers, senders, size)
        self.sends(senders, size, elements)

    def receives(self, receivers: np.ndarray, senders: np.ndarray, size: int,
                 shared: np.ndarray | None = None) -> None:
        """The receiving side of :meth:`transfers`: bytes in and the messages; ``shared`` marks
        the entries the receiver's supertile neighbour receives too."""
        if not len(receivers):
            return
        receivers, senders = receivers.astype(np.int64), senders.astype(np.int64)
        self.bytes_in += np.bincount(receivers, minlength=self.num_tiles) * size
        if shared is not None and shared.any():
            self.bytes_in_shared += np.bincount(receivers[shared],
                                                minlength=self.num_tiles) * size
        self._note_pairs(receivers * self.num_tiles + senders, size)

    def sends(self, senders: np.ndarray, size: int, elements: np.ndarray | None = None) -> None:
        """The sending side of :meth:`transfers`: ``size`` bytes per entry, or with
        ``elements``, per distinct (element, sender)."""
        if not len(senders):
            return
        senders = senders.astype(np.int64)
        if elements is None:
            self.bytes_out += np.bincount(senders, minlength=self.num_tiles) * size
        else:
            self._sent.append((elements.astype(np.int64) * self.num_tiles + senders, size))

    def send_once(self, data: int, per_tile: np.ndarray) -> None:
        """Bytes each tile sends of the data named ``data`` (a tensor read by several vertices
        of a step): sent once, however many read it."""
        self._sent_once[data] = np.maximum(self._sent_once.get(data, 0), per_tile)

    def sent(self) -> np.ndarray:
        """Bytes each tile sends in the step (int64)."""
        total = self.bytes_out.copy()
        for per_tile in self._sent_once.values():
            total += per_tile
        for size in {size for _, size in self._sent}:
            keys = distinct(np.concatenate([k for k, s in self._sent if s == size]))
            total += np.bincount(keys % self.num_tiles, minlength=self.num_tiles) * size
        return total

    def pairs(self, keys: np.ndarray, nbytes: np.ndarray | None = None) -> None:
        """Note the messages ``receiver * num_tiles + sender`` and the bytes of each (unknown:
        one message each however large)."""
        self._note_pairs(np.asarray(keys, dtype=np.int64),
                         1 if nbytes is None else np.asarray(nbytes, dtype=np.int64))

    def _note_pairs(self, keys: np.ndarray, nbytes: int | np.ndarray) -> None:
        """Add ``nbytes`` (one figure or one per key) to each message ``keys`` names: listed,
        or, for many at once on a target small enough, added to the dense table."""
        per_ipu, tiles = self.tiles_per_ipu, self.num_tiles
        if per_ipu < tiles and not self.crossing:
            self.crossing = bool(np.any(keys // tiles // per_ipu != keys % tiles // per_ipu))
        if not self._dense or len(keys) < DENSE_PAIR_BATCH:
            self._pairs.append(keys)
            self._pair_bytes.append(np.broadcast_to(nbytes, keys.shape))
            return
        if self._pair_table is None:
            self._pair_table = np.zeros(tiles * tiles, dtype=np.int64)
        if isinstance(nbytes, int) and 16 * len(keys) > len(self._pair_table):
            self._pair_table += np.bincount(keys, minlength=tiles * tiles) * nbytes
        else:
            np.add.at(self._pair_table, keys, nbytes)

    def _messages(self) -> tuple[np.ndarray, np.ndarray]:
        """Every distinct message (``receiver * num_tiles + sender``) and its bytes."""
        if self._dense and self._pair_table is not None:
            if self._pairs:
                np.add.at(self._pair_table, np.concatenate(self._pairs),
                          np.concatenate(self._pair_bytes))
                self._pairs, self._pair_bytes = [], []
            keys = np.flatnonzero(self._pair_table)
            return keys, self._pair_table[keys]
        if not self._pairs:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.int64)
        keys = np.concatenate(self._pairs)
        order = np.argsort(keys, kind="stable")
        keys, nbytes = keys[order], np.concatenate(self._pair_bytes)[order]
        starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1])))
        return keys[starts], np.add.reduceat(nbytes, starts)

    def peers(self) -> tuple[np.ndarray, np.ndarray]:
        """Per tile: the messages it receives (one per tile it receives from) and sends.  A tile
        sending the same data to many tiles sends it once (the exchange fabric broadcasts), so
        its messages are its bytes sent over the most any one tile receives from it."""
        zeros = np.zeros(self.num_tiles, dtype=np.int64)
        keys, nbytes = self._messages()
        if not len(keys):
            return zeros, zeros.copy()
        receivers, senders = keys // self.num_tiles, keys % self.num_tiles
        largest = zeros.copy()
        np.maximum.at(largest, senders, nbytes)
        sent = np.bincount(senders, weights=nbytes, minlength=self.num_tiles).astype(np.int64)
        messages_out = np.where(largest > 0, -(-sent // np.maximum(largest, 1)), 0)
        return (np.bincount(receivers, minlength=self.num_tiles).astype(np.int64),
                np.minimum(messages_out, np.bincount(senders, minlength=self.num_tiles)))


def elementwise_cycles(elements: np.ndarray, vector_width: int, per_vector: int) -> np.ndarray:
    """Per-tile cycles of elementwise work: overhead plus vectors times cost (0 where idle)."""
    vectors = -(-elements // vector_width)
    return np.where(elements > 0, VERTEX_OVERHEAD_CYCLES + vectors * per_vector, 0)


@dataclass(frozen=True, eq=False)
class StepCost:
    """The static cost of one execution of a step.

    Per tile, the superstep's cycles split three ways, as a profile's tile view shows them: the
    tile's own compute, its own exchange (its larger direction at the step's rate), and the rest
    as sync — the sync itself plus waiting for the busiest tile's compute and exchange, since
    every tile leaves a superstep together.  So each tile's three add up to ``total_cycles``, and
    a tile with nothing to do spends the whole step in sync: the per-tile sync is the load
    imbalance."""

    compute_by_tile: np.ndarray
    """Cycles each tile computes (int64, one per tile)."""
    bytes_in_by_tile: np.ndarray
    """Exchange bytes each tile receives."""
    bytes_out_by_tile: np.ndarray
    """Exchange bytes each tile sends."""
    exchange_by_tile: np.ndarray
    """Cycles each tile exchanges (int64): its larger direction, in or out, at the step's rate."""
    peers_in_by_tile: np.ndarray
    """Tiles each tile receives from in this step (its incoming messages)."""
    peers_out_by_tile: np.ndarray
    """Tiles each tile sends to in this step (its outgoing messages)."""
    compute_cycles: int
    exchange_cycles: int
    sync_cycles: int

    @property
    def total_cycles(self) -> int:
        return self.compute_cycles + self.exchange_cycles + self.sync_cycles

    @property
    def sync_by_tile(self) -> np.ndarray:
        """Cycles each tile spends in the sync or waiting for the busiest tile (int64)."""
        return self.total_cycles - self.compute_by_tile - self.exchange_by_tile

    @property
    def exchange_bytes(self) -> int:
        return int(self.bytes_in_by_tile.sum())


READ_BATCH_ELEMENTS = 1 << 20
"""Elements of the reads compared with their homes in one numpy operation (bounds the temporary
arrays a long sequence's reads would otherwise make)."""

DIRECT_READ_ELEMENTS = 2048
"""Parts of a read by one tile of at least this many elements are compared with its tile on their
own, not joined with the others (see ``held_elsewhere``)."""

Read = tuple[Tensor, "np.ndarray | int"]
"""A tensor a step reads and its home: the tile of each element's reader, or one tile for all."""


Piece = tuple[Tensor, np.ndarray]
"""A read whose elements have readers of their own, and the tile of each one's reader."""


def _batches(pieces: list[Piece], graph: Graph) -> Iterator[tuple[list[Piece], list[np.ndarray]]]:
    """The pieces with their element tiles, in batches of about ``READ_BATCH_ELEMENTS`` elements."""
    batch: list[Piece] = []
    tiles: list[np.ndarray] = []
    size = 0
    for piece in pieces:
        batch.append(piece)
        tiles.append(graph.element_tiles(piece[0]))
        size += len(tiles[-1])
        if size >= READ_BATCH_ELEMENTS:
            yield batch, tiles
            batch, tiles, size = [], [], 0
    if batch:
        yield batch, tiles


class _StepCoster:
    """The static cost of each step of one graph: compute cycles per tile from the vertex cycle
    estimators, and the bytes each tile receives and sends, from the exchange estimators and from
    the elements vertices read on tiles other than their own."""
    def __init__(self, graph: Graph) -> None:
        self.graph = graph
        self.target = graph.target
        self.num_tiles = graph.target.num_tiles
        self.senders: dict[int, tuple[Tensor, np.ndarray, set[int]]] = {}
        """Per tensor read from one tile by some vertex: how many of its distinct elements each
        tile holds, and the IPUs of those tiles (a compute set's vertices on many tiles read one
        offset or scale tensor)."""

    def zeros(self) -> np.ndarray:
        return np.zeros(self.num_tiles, dtype=np.int64)

    def remote(self, reads: list[Read], traffic: Traffic) -> None:
        """Account the elements of each read whose tile differs from its home: one transfer per
        (element, receiver) of each read.  A step's reads are compared with their homes a batch
        at a time (a GRU step reads thousands of small tensors, nearly all wholly local); only
        the reads with remote elements are then accounted one by one.  A read by one tile is
        compared part by part of a concatenation (:meth:`held_elsewhere`), so its ids are not
        listed unless it has remote elements."""
        pieces: list[Piece] = []
        by_tile: set[int] = set()  # reads by one tile with remote elements
        sources: dict[int, np.ndarray | None] = {}
        for k, (tensor, home) in enumerate(reads):
            if not isinstance(home, int):
                pieces.append((tensor, home))
            elif self.held_elsewhere(tensor, home, sources):
                by_tile.add(k)
        for batch, tiles in _batches(pieces, self.graph):
            lengths = np.array([len(t) for t in tiles], dtype=np.int64)
            ends = np.cumsum(lengths)
            away = np.concatenate(tiles) != np.concatenate([home for _, home in batch])
            nonempty = np.flatnonzero(lengths)
            some_away = np.logical_or.reduceat(away, ends[nonempty] - lengths[nonempty]) \
                if len(nonempty) else nonempty
            for j in nonempty[some_away].tolist():
                tensor, home = batch[j]
                self.remote_by_element(tensor, home, tiles[j], away[ends[j] - lengths[j]:ends[j]],
                                       traffic)
        for k in sorted(by_tile):
            tensor, home = reads[k]
            self.remote_to_tile(tensor, home, traffic)

    def held_elsewhere(self, tensor: Tensor, home: int,
                       sources: dict[int, np.ndarray | None]) -> bool:
        """Whether a tile other than ``home`` holds an element of ``tensor``, compared part by
        part of a concatenation.  A part that slices a view whose tiles are a view of the tile
        table takes them from there (``sources``, kept for the step): a step's column picks are
        thousands of slices of a few sequences, and slicing an array costs far less than a
        view's tiles.  A view whose tiles would have to be gathered (a sequence the table keeps
        as one step, viewed across steps) is not gathered whole: its parts are read one by one."""
        small = []
        for part in joined_parts(tensor):
            source = part.sources[0] if isinstance(part.op, SliceOp) else None
            if source is not None and id(source) not in sources:
                sources[id(source)] = self.graph.element_tile_view(source, gather=False)
            if source is not None and sources[id(source)] is not None:
                tiles = sources[id(source)][tuple(
                    slice(begin, end) for begin, end in zip(part.op.begin, part.op.end))]
            else:
                tiles = self.graph.element_tile_view(part)
            if repeats_its_rows(tiles):
                tiles = tiles[0]
            if tiles.size >= DIRECT_READ_ELEMENTS:
                if np.any(tiles != home):
                    return True
            else:
                small.append(tiles.reshape(-1))
        return bool(small) and bool(np.any(np.concatenate(small) != home))

    def remote_by_element(self, tensor: Tensor, home: np.ndarray, tiles: np.ndarray,
                          away: np.ndarray, traffic: Traffic) -> None:
        """Account the ``away`` elements of a read whose elements have their own readers
        (``home``; ``tiles`` hold them).  An element named twice, by a broadcast, moves once to
        each tile that reads it; a view that names each element once needs no such search."""
        ids = tensor.flat_ids()[away]
        if not tensor.has_repeats():
            receivers, senders = home[away], tiles[away]
        else:
            pairs = distinct(ids * self.num_tiles + home[away])  # one per (element, receiver)
            receivers, ids = pairs % self.num_tiles, pairs // self.num_tiles
            senders = self.graph.element_tiles_of_ids(ids).astype(np.int64)
        traffic.transfers(receivers, senders, tensor.dtype.size, ids)

    def remote_to_tile(self, tensor: Tensor, home: int, traffic: Traffic) -> None:
        """Account a read by one tile: each distinct element held elsewhere is one transfer."""
        if id(tensor) not in self.senders:
            held = self.graph.element_tiles_of_ids(distinct(tensor.flat_ids())).astype(np.int64)
            per_tile = np.bincount(held, minlength=self.num_tiles)
            ipus = set((held // self.target.tiles_per_ipu).tolist())
            self.senders[id(tensor)] = (tensor, per_tile, ipus)
        _, per_tile, ipus = self.senders[id(tensor)]
        size = tensor.dtype.size
        local = int(per_tile[home])
        traffic.bytes_in[home] += (int(per_tile.sum()) - local) * size
        sent = per_tile * size
        sent[home] = 0
        traffic.send_once(id(tensor), sent)
        holders = np.flatnonzero(per_tile)
        holders = holders[holders != home]
        traffic.pairs(home * self.num_tiles + holders, per_tile[holders] * size)

    def vertex(self, vertex: Vertex, compute: np.ndarray, traffic: Traffic,
               reads: list[Read]) -> None:
        """Add the vertex's compute and exchange; the reads its exchange is found from are left
        in ``reads`` for :meth:`remote`."""
        tensors = [tensor for _, tensor in vertex.tensors()]
        if vertex.tile is None:
            home = self.graph.element_tiles(vertex.fields[vertex.kind.split]).astype(np.int64)
            elements = np.bincount(home, minlength=self.num_tiles)
        else:
            elements = self.zeros()
            elements[vertex.tile] = max(t.num_elements for t in tensors)
        estimator = CYCLE_ESTIMATORS.get(vertex.kind)
        if estimator is None:
            compute += elementwise_cycles(elements, 1, 1)
        else:
            compute += estimator(vertex, elements, self.target)
        exchange = EXCHANGE_ESTIMATORS.get(vertex.kind)
        if exchange is not None:
            exchange(vertex, self.graph, traffic)
            return
        reads.extend((tensor, home if vertex.tile is None else vertex.tile) for tensor in tensors)

    def copy(self, node: Copy, compute: np.ndarray, traffic: Traffic) -> None:
        """Local bytes are copied on their tile; each source element held elsewhere is sent to its
        destination's tile (once per receiver if the source names it more than once).  A copy
        between two sequences the graph stores as one step each is counted on their first rows,
        times the rows; one into or out of a sharded sequence, shard by shard (the other side's
        rows against the shard's row: neither expanded)."""
        broadcast = node.src.has_repeats()
        local, received, sent = self.zeros(), self.zeros(), self.zeros()
        dense = self.num_tiles <= DENSE_PAIR_TILES  # the messages tallied as they are counted
        table = np.zeros(self.num_tiles ** 2 if dense else 0, dtype=np.int64)
        crosses, listed = False, []
        for dst_tiles, src_tiles in self._copy_sides(node, broadcast):
            rows = 1
            if src_tiles.shape == dst_tiles.shape and repeats_its_rows(src_tiles) \
                    and repeats_its_rows(dst_tiles) and not broadcast:
                rows, src_tiles, dst_tiles = len(src_tiles), src_tiles[0], dst_tiles[0]
            counted = [self.zeros() for _ in range(3)] if rows > 1 else [local, received, sent]
            pair_counts = np.zeros_like(table) if rows > 1 else table
            (dst_row, dst_alike), (src_row, src_alike) = _by_rows(dst_tiles), _by_rows(src_tiles)
            crosses |= _copy_counts(dst_row, dst_alike, src_row, src_alike,
                                    dst_tiles.size, self.target.tiles_per_ipu, *counted,
                                    pair_counts)
            if rows > 1:
                for total, part in zip((local, received, sent), counted):
                    total += part * rows
                table += pair_counts * rows
            if counted[1].any() and not dense and not broadcast:
                keys, counts = _copy_pairs(dst_row, src_row, self.num_tiles)
                listed.append((keys, counts * rows))
        size = node.dst.dtype.size
        local *= size
        compute += np.where(local > 0, -(-local // COPY_BYTES_PER_CYCLE), 0)
        if not received.any():
            return
        if broadcast:  # a broadcast source: one transfer per (element, receiver)
            dst_tiles, src_tiles = (self.graph.element_tile_view(t).astype(np.int64).reshape(-1)
                                    for t in (node.dst, node.src))
            self.remote_by_element(node.src, dst_tiles, src_tiles, dst_tiles != src_tiles,
                                   traffic)
            return
        # (one pass, no per-element temporaries: a long sequence's copy has 10^8 elements)
        traffic.bytes_in += received * size
        traffic.bytes_out += sent * size
        if dense:
            keys = np.flatnonzero(table)
            traffic.pairs(keys, table[keys] * size)
        else:
            for keys, counts in listed:
                traffic.pairs(keys, counts * size)
        traffic.crossing = traffic.crossing or crosses

    def _copy_sides(self, node: Copy, broadcast: bool) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """The element tiles of a copy's two sides, whole, or a stretch of rows at a time where
        one side is a sharded sequence and the other is not (a linearly mapped gradient copied
        into one: the sharded side's stretches stay one row each)."""
        dst, src = node.dst, node.src
        pieces = None if broadcast else self.graph.pieces_of_one(dst, src)
        if pieces is None:
            yield self.graph.element_tile_view(dst), self.graph.element_tile_view(src)
            return
        for start, count, _ in pieces:
            yield (self.graph.element_tile_view(dst[start:start + count]),
                   self.graph.element_tile_view(src[start:start + count]))

    def step(self, step: Step) -> StepCost:
        """One step's cost.  Exchange takes the busiest tile's larger direction (in or out) at the
        on-IPU rate, or at the inter-IPU rate with the inter-IPU sync when any transfer crosses an
        IPU; ``WriteUndef`` and ``PrintTensor`` cost nothing, not even a sync."""
        node = step.node
        compute = self.zeros()
        traffic = Traffic(self.target)
        sync = self.target.sync_cycles
        if isinstance(node, Execute):
            reads: list[Read] = []
            for vertex in node.compute_set.vertices:
                self.vertex(vertex, compute, traffic, reads)
            self.remote(reads, traffic)
        elif isinstance(node, Copy):
            self.copy(node, compute, traffic)
        elif isinstance(node, (WriteUndef, PrintTensor)):
            sync = 0
        # Sync, and the predicate read of If / RepeatWhileTrue: a sync, nothing computed or moved
        rate = (self.target.inter_ipu_exchange_bytes_per_cycle if traffic.crossing
                else self.target.exchange_bytes_per_cycle)
        sent = traffic.sent()
        receiving = traffic.bytes_in - traffic.bytes_in_shared \
            + traffic.bytes_in_shared // TILES_PER_SHARED_EXCHANGE_BUS
        exchange = np.ceil(np.maximum(receiving, sent) / rate).astype(np.int64)
        if traffic.crossing:
            sync = max(sync, self.target.inter_ipu_sync_cycles)
        peers_in, peers_out = traffic.peers()
        return StepCost(compute, traffic.bytes_in, sent, exchange, peers_in,
                        peers_out, int(compute.max(initial=0)), int(exchange.max(initial=0)),
                        sync)


def _by_rows(tiles: np.ndarray) -> tuple[np.ndarray, bool]:
    """A copy side's element tiles as :func:`_copy_counts` takes them: its first row alone, and
    True, when its rows repeat (a sequence the table stores as one row: never expanded, though
    the other side is a sequence mapped element by element), else all of them, and False."""
    alike = tiles.ndim > 1 and len(tiles) > 1 and repeats_its_rows(tiles)
    flat = np.ascontiguousarray((tiles[0] if alike else tiles).reshape(-1)).view()
    flat.flags.writeable = False  # always read-only: one compiled _copy_counts, not four
    return flat, alike


def _copy_pairs(dst_tiles: np.ndarray, src_tiles: np.ndarray, num_tiles: int
                ) -> tuple[np.ndarray, np.ndarray]:
    """The (receiver, sender) pairs of a copy whose sides' element tiles are ``dst_tiles`` and
    ``src_tiles`` (one row of each when their rows repeat: the same pairs every row), and the
    elements each pair moves (in one row)."""
    if len(dst_tiles) != len(src_tiles):  # one side repeats its rows, the other does not
        rows = max(len(dst_tiles), len(src_tiles)) // max(min(len(dst_tiles), len(src_tiles)), 1)
        dst_tiles = np.tile(dst_tiles, rows) if len(dst_tiles) < len(src_tiles) else dst_tiles
        src_tiles = np.tile(src_tiles, rows) if len(src_tiles) < len(dst_tiles) else src_tiles
    dst, src = dst_tiles.astype(np.int64), src_tiles.astype(np.int64)
    away = dst != src
    keys = np.sort(dst[away] * num_tiles + src[away])  # not numpy's hashing unique: see distinct
    starts = np.flatnonzero(np.concatenate(([True], keys[1:] != keys[:-1]))) if len(keys) \
        else np.zeros(0, dtype=np.int64)
    return keys[starts], np.diff(np.append(starts, len(keys)))


@njit(cache=True, nogil=True)
def _copy_counts(dst_tiles, dst_alike, src_tiles, src_alike, count, tiles_per_ipu, local,
                 received, sent, pairs):  # pragma: no cover (compiled)
    """Per tile, the ``count`` elements of a copy that stay on it (``local``), arrive at it from
    another tile (``received``) and leave it (``sent``); returns whether any crosses between
    IPUs; with a ``pairs`` table (``receiver * tiles + sender``, else empty), the elements each
    message moves.  A side that is ``alike`` gives one row's tiles, the same for every row.  Counted a
    stretch at a time where both sides stay on one tile each: a compare per element, not three
    increments (a linearly mapped sequence of 33 million elements copied to one laid out alike
    at every step: 161 -> 51 ms)."""
    crosses = False
    row = dst_tiles.shape[0] if dst_alike else (src_tiles.shape[0] if src_alike else count)
    for first in range(0, count, max(row, 1)):
        dst_first = 0 if dst_alike else first
        src_first = 0 if src_alike else first
        end = min(row, count - first)
        k = 0
        while k < end:
            to, held = dst_tiles[dst_first + k], src_tiles[src_first + k]
            stretch = k + 1
            while stretch < end and dst_tiles[dst_first + stretch] == to \
                    and src_tiles[src_first + stretch] == held:
                stretch += 1
            if to == held:
                local[to] += stretch - k
            else:
                received[to] += stretch - k
                sent[held] += stretch - k
                crosses |= to // tiles_per_ipu != held // tiles_per_ipu
                if pairs.shape[0]:
                    pairs[to * local.shape[0] + held] += stretch - k
            k = stretch
    return crosses


def step_costs(graph: Graph, steps: tuple[Step, ...]) -> tuple[StepCost, ...]:
    """The static cost of one execution of every numbered step."""
    coster = _StepCoster(graph)
    return tuple(coster.step(step) for step in steps)
