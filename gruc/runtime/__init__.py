"""How a program runs: lowering to tile memory, the engines, the cycle model and the report.

Importing the package first tells numba to keep the compiled code of gruc's jitted functions in
the gruc cache (:mod:`gruc.runtime.caches`): numba decides where when each is defined, as its
module is imported, and they are all in this package."""

from gruc.runtime.caches import use_gruc_cache_for_gruc_modules

use_gruc_cache_for_gruc_modules()
