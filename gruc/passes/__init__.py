"""Passes: how a module is analysed and transformed (one pass per file; the registry lives here).

``PASSES`` maps each pass's pipeline name to its class; pipelines are strings parsed by
:mod:`gruc.passes.pipeline` (``"a,b{option=value}"``).
"""

from gruc.passes.plan_memory import PlanMemory

PASSES: dict[str, type] = {cls.name: cls for cls in (PlanMemory,)}
