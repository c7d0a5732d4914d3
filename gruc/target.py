"""The machine a graph is built for: tiles, bytes per tile, clock, exchange and memory layout.

A :class:`Target` is a frozen pydantic model so it can be validated once at the boundary, hashed,
printed into the text IR header and sent to sweep workers.  Two IPU generations are known, by
poplibs' device names: ``ipu1`` (Colossus Mk1, GC2: poplibs' ``IpuModel1``) and ``ipu2`` (Mk2,
GC200: ``IpuModel2``).  :meth:`Target.of` builds either, whole or with fewer tiles per IPU (what
poplibs' tools do with ``--tiles-per-ipu``): a generation fixes everything a tile is (its memory and
the layout of that memory, its clock, its exchange), the tile count only how many there are.
Sources of each figure: ``docs/memory-model.md`` and ``docs/cycle-model.md``.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import Field

from gruc.errors import GrucValueError
from gruc.text import plural
from gruc.types import DType, dtype_of
from gruc.validated import GrucModel

MAX_IPUS = 64
"""The most IPUs a target may have (a Pod64)."""
MAX_TILES_PER_IPU = 8192
"""The most tiles an IPU may have here (an ipu2 has 1472)."""

TILES_PER_SHARED_EXCHANGE_BUS = 2
"""Tiles that share one exchange bus (a *supertile*: tiles ``2i`` and ``2i + 1``).  Both receive
an element sent to both in the same cycles, so what a supertile's two tiles both receive moves at
twice a tile's rate for each of them: poplin's planner charges such inputs half
(``ExchangeEstimator``, ``supportsExchangeBusSharing`` / ``getTilesPerSharedExchangeBus``, present
since the Mk1-only planner of 2017; popsparse's planners assert the count is 2).  Sources and how
gruc applies it: ``docs/cycle-model.md``."""

RPT_COUNT_MAX = 4095
"""``Target::getRptCountMax()`` of Mk1 and Mk2 (a 12-bit ``rpt`` count): bounds the iterations of
a hardware loop, and so the elements a popops vertex loops over in one region
(``maxVertexElementsPerRegion``) and what a fast transposition may repeat."""

STRIDE_LIMIT = 512
"""``1 << (getNumStrideBits() - 1)``: the largest stride a strided load may take (popops'
``canUseFastTranspose`` and the transposition estimators test it)."""

DeviceType = Literal["ipu1", "ipu2"]
DEVICE_TYPES: tuple[str, ...] = ("ipu1", "ipu2")

_GENERATIONS: dict[str, dict[str, Any]] = {
    # Mk1 (GC2): 1216 tiles of 256 KiB; memory from 0x40000, interleaved from 0x60000.
    "ipu1": dict(tiles_per_ipu=1216, bytes_per_tile=256 * 1024, clock_hz=1.6e9,
                 interleaved_memory_start=128 * 1024, conv_units_float=8,
                 conv_units_half_half_partials=8),
    # Mk2 (GC200): 1472 tiles of 624 KiB; memory from 0x4C000, interleaved from 0x80000.
    "ipu2": dict(tiles_per_ipu=1472, bytes_per_tile=624 * 1024, clock_hz=1.33e9,
                 interleaved_memory_start=208 * 1024),
}
"""What each generation's tiles are (sources: ``docs/memory-model.md``)."""


class Target(GrucModel):
    """A simulated IPU system: ``num_ipus`` IPUs of ``tiles_per_ipu`` tiles each."""

    name: str = Field("custom", description="Preset name, for reports.")
    device_type: DeviceType = Field(
        "ipu2", description="IPU generation: ipu1 (Mk1, poplibs' IpuModel1) or ipu2 (Mk2, "
                            "IpuModel2); sets the tile's figures below in the presets.")
    num_ipus: int = Field(1, ge=1, le=MAX_IPUS, description="Number of IPUs; tiles are numbered IPU-major.")
    tiles_per_ipu: int = Field(1472, ge=1, le=MAX_TILES_PER_IPU, description="Tiles on each IPU.")
    bytes_per_tile: int = Field(638976, ge=64, description="Tile memory, in bytes (ipu2: 624 KiB).")
    num_worker_contexts: int = Field(6, ge=1, description="Hardware worker threads per tile.")
    clock_hz: float = Field(1.33e9, gt=0, description="Tile clock, in Hz, to turn cycles into seconds.")
    exchange_bytes_per_cycle: int = Field(
        4, ge=1, description="Bytes a tile sends or receives per cycle in an internal exchange.")
    inter_ipu_exchange_bytes_per_cycle: float = Field(
        1.0, gt=0, description="Bytes per cycle per tile for an exchange that crosses IPUs.")
    sync_cycles: int = Field(150, ge=0, description="Cycles of one internal BSP sync.")
    inter_ipu_sync_cycles: int = Field(1000, ge=0, description="Cycles of a sync across IPUs.")
    data_path_width_bits: int = Field(
        64, ge=8, description="Vector data path, in bits; sets the vector width of each type.")
    min_bytes_per_tile: int = Field(
        128, ge=1, description="Least bytes map_tensor_linearly puts on a tile it uses.")
    memory_alignment: int = Field(
        8, ge=4, multiple_of=4, description="Byte alignment of every allocation: a multiple of "
        "4, the largest element, so every block starts on an element boundary.")
    interleaved_memory_start: int = Field(
        208 * 1024, ge=0, description="Byte offset in a tile where its interleaved memory begins "
        "(the upper part of the tile; ipu1: 128 KiB, ipu2: 208 KiB); what vector loads of 128 "
        "bits read, such as a matrix product's partial sums, must lie above it.")
    memory_element_bytes: int = Field(
        16 * 1024, ge=8, description="Bytes of one memory element (bank) of the non-interleaved "
        "region; an interleaved element is a pair of them.")
    compile_ipu_code: bool = Field(
        True, description="Whether the device's program is compiled to IPU code, and so whether "
        "its memory holds code (vertex, control and exchange code): true on hardware; poplibs' "
        "test IPUModel devices left it false (IPUModel::compileIPUCode), and their profiles "
        "then count no code.")
    conv_units_float: int = Field(
        16, ge=1, description="Accumulating matrix product (AMP) units a tile uses for float "
        "inputs and float partials (poplar's fp32InFp32OutConvUnitsPerTile).")
    conv_units_half_float_partials: int = Field(
        8, ge=1, description="AMP units for half inputs with float partials "
        "(fp16InFp32OutConvUnitsPerTile).")
    conv_units_half_half_partials: int = Field(
        16, ge=1, description="AMP units for half inputs with half partials "
        "(fp16InFp16OutConvUnitsPerTile).")
    conv_unit_pipeline_depth: int = Field(
        4, ge=1, description="Input vectors an AMP unit's weights pipeline holds: its weights "
        "are this times the elements of one 64-bit load (float 8, half 16).")
    conv_unit_coeff_load_bytes_per_cycle: int = Field(
        16, ge=1, description="Bytes of AMP weights loaded per cycle with 128-bit loads; half "
        "of it with poplibs' default 64-bit loads (use128BitConvUnitLoad false).")

    @property
    def num_tiles(self) -> int:
        """All tiles of all IPUs."""
        return self.num_ipus * self.tiles_per_ipu

    @property
    def total_memory(self) -> int:
        """Bytes of tile memory in the whole system."""
        return self.num_tiles * self.bytes_per_tile

    def vector_width(self, dtype: DType | str) -> int:
        """Elements of ``dtype`` per vector (poplar's ``getVectorWidth``): float 2, half 4."""
        return max(1, self.data_path_width_bits // (8 * dtype_of(dtype).size))

    def ipu_of_tile(self, tile: int) -> int:
        return tile // self.tiles_per_ipu

    @property
    def interleaved_memory_bytes(self) -> int:
        """Bytes of a tile's interleaved region."""
        return max(self.bytes_per_tile - self.interleaved_memory_start, 0)

    @classmethod
    def of(cls, device_type: str, num_ipus: int = 1, tiles_per_ipu: int | None = None,
           **overrides: Any) -> "Target":
        """An ``ipu1`` or ``ipu2`` system, whole or with ``tiles_per_ipu`` tiles per IPU (poplibs'
        ``--tiles-per-ipu``: the same tiles, fewer of them; named ``custom`` then)."""
        if device_type not in _GENERATIONS:
            raise GrucValueError(f"device type {device_type!r} is not one of: "
                                 + ", ".join(DEVICE_TYPES))
        figures = dict(_GENERATIONS[device_type])
        name = device_type
        if tiles_per_ipu is not None:
            figures["tiles_per_ipu"] = tiles_per_ipu
            name = "custom"
        figures.update(overrides)
        figures.setdefault("name", name)
        return cls(device_type=device_type, num_ipus=num_ipus, **figures)

    @classmethod
    def ipu1(cls, num_ipus: int = 1, **overrides: Any) -> "Target":
        """Colossus Mk1 (GC2): 1216 tiles of 256 KiB."""
        return cls.of("ipu1", num_ipus, **overrides)

    @classmethod
    def ipu2(cls, num_ipus: int = 1, **overrides: Any) -> "Target":
        """Colossus Mk2 (GC200): 1472 tiles of 624 KiB; the default target."""
        return cls.of("ipu2", num_ipus, **overrides)

    @classmethod
    def custom(cls, tiles_per_ipu: int = 16, device_type: str = "ipu2",
               **overrides: Any) -> "Target":
        """A small target of ipu2 (or ipu1) tiles, as poplibs' tests build with
        ``--tiles-per-ipu``."""
        return cls.of(device_type, tiles_per_ipu=tiles_per_ipu, **overrides)

    def describe(self) -> str:
        """One line for reports: ``ipu2: 1 x 1472 tiles x 638976 B`` (a custom target says
        whose tiles it has: ``custom ipu1: ...``)."""
        name = self.name if self.name == self.device_type else f"{self.name} {self.device_type}"
        return (f"{name}: {self.num_ipus} x {plural(self.tiles_per_ipu, 'tile')} x "
                f"{self.bytes_per_tile} B")
