"""Passes: how a module is analysed and transformed (one pass per file; the registry lives here).

``PASSES`` maps each pass's pipeline name to its class; pipelines are strings parsed by
:mod:`gruc.passes.pipeline` (``"a,b{option=value}"``).  ``DEFAULT_PIPELINE`` is what
``Engine(graph, programs)`` runs when no pipeline is given (``pipeline=""`` runs none).
"""

from gruc.passes.canonicalize import Canonicalize
from gruc.passes.copy_elim import CopyElimination
from gruc.passes.dce import DeadCodeElimination
from gruc.passes.exchange import Exchange
from gruc.passes.inplace_fusion import InplaceFusion
from gruc.passes.plan_memory import PlanMemory
from gruc.passes.shard import Shard

PASSES: dict[str, type] = {cls.name: cls for cls in (
    Canonicalize, InplaceFusion, CopyElimination, DeadCodeElimination, Exchange, PlanMemory, Shard)}

DEFAULT_PIPELINE = "canonicalize,inplace-fusion,copy-elim,dce"
"""Straight lines first (fusion works within one Sequence), then fusion and in-place updates, then
the copies and compute sets nothing reads.  ``exchange`` is not in it: the engine prices remote
reads as exchange either way, and explicit receive copies cost a superstep each."""
