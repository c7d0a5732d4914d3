"""poplibs' benchmark tools as gruc layers: what each builds, runs and checks.

A *tool* turns a validated configuration (its command-line flags) into a graph and programs,
runs them on host data and checks every result against a float64 reference, or plans them
without running.  ``gruc fc`` and ``gruc gemm`` (:mod:`gruc.tools.products`) rebuild poplibs'
``fully_connected_layer`` and ``general_matrix_multiply``; the GRU's is
:mod:`gruc.tools.gru_layer`.
"""
