"""Engine implementations and cycle estimates by codelet family; importing this package fills the
numpy, numba and cycle-estimator tables for every vertex kind."""

from gruc.runtime.codelets import elementwise  # noqa: F401
from gruc.runtime.codelets import reduce  # noqa: F401
from gruc.runtime.codelets import dynamic  # noqa: F401
from gruc.runtime.codelets import matmul  # noqa: F401
from gruc.runtime.codelets import matmul_fused  # noqa: F401
from gruc.runtime.codelets import transpose  # noqa: F401
