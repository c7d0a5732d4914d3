"""Every op's scalar code, as the numba engine generates and compiles it, against the op's numpy
definition (:data:`gruc.ir.expr.OPS`).

``tests/ir/test_expr.py`` runs the templates in CPython; this compiles them with numba, which
takes another library's ``math`` and ``np``: ``math.fmod`` does not exist there (every ``rem``
failed to compile) and its integer ``np.fmod`` gave fmod(-7, 2) = 1.  One kernel per operand type
holds every op, so the test costs three compiles.
"""

from __future__ import annotations

import numpy as np
import pytest

from gruc.ir import expr as ex
from gruc.runtime.codelets.elementwise import ScalarCode
from gruc.runtime.kernels import KERNEL_HEADER, load_kernel
from gruc.types import FLOAT, INT, UNSIGNED_INT

OPERANDS = {  # rows of (_1, _2, _3): signs both ways, divisors never 0
    FLOAT: [(0.75, 2.0, 1.5), (2.5, 1.25, 0.5), (-1.5, 2.0, 3.0), (3.25, -2.5, 1.0),
            (-7.0, 2.0, -0.5)],
    INT: [(-7, 2, 3), (7, -2, 1), (5, 3, -4), (-6, -4, 9), (2 ** 31 - 1, 7, -1)],
    UNSIGNED_INT: [(7, 2, 3), (4_000_000_000, 7, 1), (5, 3, 9), (0, 4, 2), (9, 9, 2 ** 32 - 1)],
}


def _node(op) -> tuple[ex.Expr, int]:
    """``op`` over the first placeholders, and its arity."""
    arity = {ex.Unary: 1, ex.Binary: 2, ex.Ternary: 3}[type(op)]
    node_class = {ex.Unary: ex.UnaryOp, ex.Binary: ex.BinaryOp, ex.Ternary: ex.TernaryOp}
    return node_class[type(op)](op, *(ex._1, ex._2, ex._3)[:arity]), arity


def _kernel_source(ops: list, dtype) -> str:
    code = ScalarCode([dtype] * 3, " " * 8)
    results = [code.emit(_node(op)[0]) for op in ops]
    stores = [f"        out[{row}, k] = {name}" for row, name in enumerate(results)]
    return "\n".join([KERNEL_HEADER + "def kernel(m1, m2, m3, out):",
                      "    for k in range(m1.shape[0]):",
                      "        a1, a2, a3 = m1[k], m2[k], m3[k]", *code.lines, *stores, ""])


@pytest.mark.parametrize("dtype", [FLOAT, INT, UNSIGNED_INT], ids=lambda t: t.name)
def test_every_op_compiles_with_numba_and_keeps_its_definition(dtype):
    ops = [op for op, definition in ex.OPS.items()
           if dtype in definition.types and op is not ex.Ternary.SELECT]  # select: a bool third
    columns = [np.array(column, dtype=dtype.storage) for column in zip(*OPERANDS[dtype])]
    out = np.empty((len(ops), len(columns[0])))
    with np.errstate(all="ignore"):
        load_kernel(_kernel_source(ops, dtype))(*columns, out)
        for row, op in enumerate(ops):
            node, arity = _node(op)
            want = ex.evaluate(node, columns[:arity], [dtype] * arity).astype(np.float64)
            np.testing.assert_allclose(out[row], want, rtol=2e-6, atol=1e-6, equal_nan=True,
                                       err_msg=f"{op.value} on {dtype.name}")
