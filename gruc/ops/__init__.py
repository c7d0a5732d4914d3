"""Op builders in the style of popops / poplin / popnn: they only call the IR API.

Each builder takes the graph, its tensors and the ``Sequence`` to append to, adds the variables,
compute sets and vertices it needs, and returns its result tensor (as poplibs functions do).
"""

from gruc.ops.elementwise import (add, add_in_place, cast, div, div_in_place, fill, map,
                                  map_in_place, map_with_output, mul, mul_in_place, scaled_add_to,
                                  sub, sub_in_place, zero)

__all__ = ["map", "map_in_place", "map_with_output", "add", "sub", "mul", "div", "add_in_place",
           "sub_in_place", "mul_in_place", "div_in_place", "scaled_add_to", "fill", "zero", "cast"]
