"""The machine a graph is built for: tiles, bytes per tile, clock and exchange figures.

A :class:`Target` is a frozen pydantic model so it can be validated once at the boundary, hashed,
printed into the text IR header and sent to sweep workers.  The presets carry the published
Colossus figures (see ``docs/poplibs-notes.md`` §3); ``Target.custom`` builds the small virtual
targets poplibs' own tests use (16 or 20 tiles) without having to restate every figure.
"""

from __future__ import annotations

from typing import Any

from pydantic import Field

from gruc.text import plural
from gruc.types import DType, dtype_of
from gruc.validated import GrucModel

MAX_IPUS = 64
"""The most IPUs a target may have (a Pod64)."""
MAX_TILES_PER_IPU = 8192
"""The most tiles an IPU may have here (an ipu2 has 1472)."""


class Target(GrucModel):
    """A simulated IPU system: ``num_ipus`` IPUs of ``tiles_per_ipu`` tiles each."""

    name: str = Field("custom", description="Preset name, for reports.")
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

    @classmethod
    def ipu1(cls, num_ipus: int = 1, **overrides: Any) -> "Target":
        """Colossus Mk1 (GC2): 1216 tiles of 256 KiB."""
        return cls(name="ipu1", num_ipus=num_ipus, tiles_per_ipu=1216, bytes_per_tile=256 * 1024,
                   clock_hz=1.6e9, **overrides)

    @classmethod
    def ipu2(cls, num_ipus: int = 1, **overrides: Any) -> "Target":
        """Colossus Mk2 (GC200): 1472 tiles of 624 KiB; the default target."""
        return cls(name="ipu2", num_ipus=num_ipus, tiles_per_ipu=1472, bytes_per_tile=624 * 1024,
                   clock_hz=1.33e9, **overrides)

    @classmethod
    def custom(cls, tiles_per_ipu: int = 16, **overrides: Any) -> "Target":
        """A small ipu2-like target, as poplibs' tests build with ``--tiles-per-ipu``."""
        return cls(name="custom", tiles_per_ipu=tiles_per_ipu, **overrides)

    def describe(self) -> str:
        """One line for reports: ``ipu2: 1 x 1472 tiles x 638976 B``."""
        return (f"{self.name}: {self.num_ipus} x {plural(self.tiles_per_ipu, 'tile')} x "
                f"{self.bytes_per_tile} B")
