"""What every tool's run has: the layer it built and the engine it ran on."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from gruc.runtime.engine import Engine


@dataclass
class ToolRun:
    """A tool's run: its layer (whose ``config`` holds the tool's flags) and the engine it ran
    on, whose report holds the run's memory and cycles."""

    layer: Any
    engine: Engine

    @property
    def checked(self) -> bool:
        """Whether the results were compared with the reference (not with ``ignore_data``:
        there was no host data to compare)."""
        return not self.layer.config.ignore_data
