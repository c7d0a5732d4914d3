"""Vectorisable float32 transcendentals for the numba kernels.

numba lowers ``math.exp`` and ``math.tanh`` to scalar libm calls, which LLVM cannot vectorise:
measured here, a [64, 256] float32 ``tanh`` took 130-480 us in a numba loop against 35-71 us in
numpy's SIMD loops.  Elementwise vertices spend most of their time in these functions, so the
kernels use the branch-free versions below instead: a Cody-Waite range reduction and a short
polynomial (the classic Cephes single-precision coefficients), with the power of two built by
writing the exponent bits directly.  They are accurate to about one float32 ulp, and with no calls
and no branches LLVM turns a loop of them into SIMD code (they are compiled on their own and inlined
by LLVM into each kernel, so the kernel's loop vectorises through them).

Only float32 arguments are intended; results are float32.

Beside them, the float-to-integer conversions with the results :mod:`gruc.ir.expr` defines for
NaN and out-of-range values (a bare ``np.int32(x)`` there is undefined in LLVM and differed from
the numpy engine).
"""

from __future__ import annotations

import numpy as np
from llvmlite import ir
from numba import njit, types
from numba.extending import intrinsic

_LOG2E = np.float32(1.44269504088896341)
_LN2_HI = np.float32(0.693359375)
_LN2_LO = np.float32(-2.12194440e-4)
_EXP_MAX = np.float32(88.72283905206835)
_EXP_MIN = np.float32(-87.3365447504)
_CONTRACT = {"contract"}
"""Fused multiply-adds for the polynomials (about 25 % faster, as accurate).  Only these
functions get the flag: they are compiled on their own and LLVM inlines them into each kernel
(flags stay with the instructions), so the kernels' own expressions keep numpy's roundings."""


@intrinsic
def _float32_from_bits(typingctx, bits):
    """Reinterpret the bits of an int32 as a float32 (no conversion)."""
    signature = types.float32(types.int32)

    def codegen(context, builder, sig, args):
        return builder.bitcast(args[0], ir.FloatType())

    return signature, codegen


@njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def exp32(x):
    """``exp(x)`` for float32 ``x``; 0 below -87.3, +inf above 88.72, NaN for NaN."""
    clamped = min(max(x, _EXP_MIN), _EXP_MAX)
    n = np.float32(np.floor(clamped * _LOG2E + np.float32(0.5)))
    r = clamped - n * _LN2_HI - n * _LN2_LO
    r2 = r * r
    p = ((((np.float32(1.9875691500e-4) * r + np.float32(1.3981999507e-3)) * r
           + np.float32(8.3334519073e-3)) * r + np.float32(4.1665795894e-2)) * r
         + np.float32(1.6666665459e-1)) * r + np.float32(5.0000001201e-1)
    p = p * r2 + r + np.float32(1.0)
    half = np.int32(n) >> np.int32(1)  # 2**n as two factors, so n = 128 does not overflow
    first = _float32_from_bits(np.int32((half + np.int32(127)) << np.int32(23)))
    second = _float32_from_bits(np.int32((np.int32(n) - half + np.int32(127)) << np.int32(23)))
    result = p * first * second
    if x > _EXP_MAX:
        result = np.float32(np.inf)
    if x < _EXP_MIN:
        result = np.float32(0.0)
    if x != x:
        result = x
    return result


@njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def tanh32(x):
    """``tanh(x)`` for float32 ``x``: an odd polynomial near 0, ``1 - 2/(e^2|x| + 1)`` beyond."""
    a = abs(x)
    z = x * x
    small = ((((np.float32(-5.70498872745e-3) * z + np.float32(2.06390887954e-2)) * z
               - np.float32(5.37397155531e-2)) * z + np.float32(1.33314422036e-1)) * z
             - np.float32(3.33332819422e-1)) * z * x + x
    e = exp32(np.float32(2.0) * min(a, np.float32(44.0)))
    large = np.float32(1.0) - np.float32(2.0) / (e + np.float32(1.0))
    if x < 0:
        large = -large
    result = small if a < np.float32(0.625) else large
    if x != x:
        result = x
    return result


@njit(cache=True, error_model="numpy", fastmath=_CONTRACT)
def sigmoid32(x):
    """``1 / (1 + exp(-x))`` for float32 ``x``, computed from ``exp(-|x|)`` so nothing overflows."""
    e = exp32(-abs(x))
    positive = np.float32(1.0) / (np.float32(1.0) + e)
    result = positive if x >= 0 else e / (np.float32(1.0) + e)
    if x != x:
        result = x
    return result


_INT32_MAX = 2147483647.0
_INT32_MIN = -2147483648.0
_UINT32_MAX = 4294967295.0


@njit(cache=True, error_model="numpy")
def int32_of_float(x):
    """``x`` truncated toward zero, saturated to int32's range; NaN gives 0."""
    wide = np.float64(x)
    if wide != wide:
        return np.int32(0)
    return np.int32(min(max(wide, _INT32_MIN), _INT32_MAX))


@njit(cache=True, error_model="numpy")
def uint32_of_float(x):
    """``x`` truncated toward zero, saturated to uint32's range; NaN gives 0."""
    wide = np.float64(x)
    if wide != wide:
        return np.uint32(0)
    return np.uint32(min(max(wide, 0.0), _UINT32_MAX))
