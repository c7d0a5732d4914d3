"""Vertex kinds by codelet family; importing this package registers all of them."""

from gruc.ir.codelets import elementwise  # noqa: F401
from gruc.ir.codelets import reduce  # noqa: F401
from gruc.ir.codelets import dynamic  # noqa: F401
from gruc.ir.codelets import matmul  # noqa: F401
from gruc.ir.codelets import transpose  # noqa: F401
