"""popnn-style layers built on gruc's IR, and their host-side float64 references.

Modules:

* ``gruc.popnn.gru_reference`` -- an independent float64 numpy model of the whole GRU layer
  (forward, backward, weight update), the oracle every device result is checked against.

This package initialiser deliberately imports nothing, so importing the reference never pulls in
the IR, the compiler or the runtime.
"""
