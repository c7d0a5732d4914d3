"""The memory plan: where every variable's bytes lie on every tile, as Poplar allocates them.

:mod:`~gruc.memory.planner` makes a :class:`~gruc.memory.plan.MemoryPlan` from a module and its
liveness (numpy only: it sits below the runtime, which answers address queries from the plan's
runs with compiled walks, :mod:`gruc.runtime.addresses`).  The ``plan-memory`` pass, the engine,
the memory model and the report read it.
"""
