"""plan-memory: a pipeline's check that every variable the module uses is mapped and, if strict,
that every tile's memory fits.

The planning itself (offsets, liveness-based sharing, the two regions of a tile) is
:mod:`gruc.memory.planner`; this pass runs it where a pipeline names it and hands the module back
unchanged, so a check can sit anywhere in a pipeline.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import ClassVar

from gruc.ir.module import Module
from gruc.memory.planner import plan_memory

__all__ = ["PlanMemory"]


@dataclass(frozen=True)
class PlanMemory:
    """Plan every variable's bytes on its tiles, checking mappings (and capacity, if strict).

    The module comes back unchanged.  Use :func:`gruc.memory.planner.plan_memory` to get the
    :class:`~gruc.memory.plan.MemoryPlan`."""

    name: ClassVar[str] = "plan-memory"
    strict: bool = False
    """Raise GrucOutOfMemory, naming the worst tile, when a tile's plan exceeds its capacity."""

    def apply(self, module: Module) -> Module:
        plan_memory(module, strict=self.strict)
        return module
