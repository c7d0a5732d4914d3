"""Vertex kinds by codelet family; importing this package registers all of them."""

from gruc.ir.codelets import elementwise  # noqa: F401
