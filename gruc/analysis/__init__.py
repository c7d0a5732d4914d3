"""Analyses: facts about a module that passes, the memory planner and the runtime all read.

Step numbering (:mod:`~gruc.analysis.steps`), liveness over those steps
(:mod:`~gruc.analysis.liveness`), the rows an RNN's time loops slice
(:mod:`~gruc.analysis.time_loops`) and a networkx view of the dataflow between steps
(:mod:`~gruc.analysis.dataflow`).  An analysis computes from a module and never changes it;
it imports the IR only, so every stage above can share it.
"""
