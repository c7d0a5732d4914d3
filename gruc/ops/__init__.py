"""Op builders in the style of popops / poplin / popnn: they only call the IR API.

Each builder takes the graph, its tensors and the ``Sequence`` to append to, adds the variables,
compute sets and vertices it needs, and returns its result tensor (as poplibs functions do).
"""

from gruc.ops.elementwise import (add, add_in_place, cast, div, div_in_place, fill, map,
                                  map_in_place, map_with_output, mul, mul_in_place, scaled_add_to,
                                  sub, sub_in_place, zero)

__all__ = ["map", "map_in_place", "map_with_output", "add", "sub", "mul", "div", "add_in_place",
           "sub_in_place", "mul_in_place", "div_in_place", "scaled_add_to", "fill", "zero", "cast"]

from gruc.ops.dynamic import dynamic_slice, dynamic_update  # noqa: E402

__all__ += ["dynamic_slice", "dynamic_update"]

from gruc.ops.rnn import (RnnParams, RnnSlice, StateSequence, TimeStep,  # noqa: E402
                          create_initial_state, create_input_tensor, create_output_tensor,
                          create_recurrent_tensor, get_input_bytes_per_tile, get_max_shards,
                          get_output_bytes_per_tile, rnn, shift_rnn_tensor)

__all__ += ["RnnParams", "RnnSlice", "StateSequence", "TimeStep", "create_initial_state",
            "create_input_tensor", "create_output_tensor", "create_recurrent_tensor",
            "get_input_bytes_per_tile", "get_max_shards", "get_output_bytes_per_tile", "rnn",
            "shift_rnn_tensor"]

from gruc.ops.reduce import Operation, reduce, reduce_with_output  # noqa: E402

__all__ += ["Operation", "reduce", "reduce_with_output"]

from gruc.ops.nonlinearity import (SOFTMAX_SCALING, NonLinearity, non_linearity,  # noqa: E402
                                   non_linearity_in_place, non_linearity_input_gradient,
                                   non_linearity_scaling)

__all__ += ["NonLinearity", "SOFTMAX_SCALING", "non_linearity", "non_linearity_in_place",
            "non_linearity_input_gradient", "non_linearity_scaling"]

from gruc.ops.matmul import (MatMulOptions, MatMulPlan, create_mat_mul_input_lhs,  # noqa: E402
                             create_mat_mul_input_rhs, mat_mul, mat_mul_acc, plan_mat_mul,
                             pre_arrange_mat_mul_input_rhs)

__all__ += ["MatMulOptions", "MatMulPlan", "create_mat_mul_input_lhs", "create_mat_mul_input_rhs",
            "mat_mul", "mat_mul_acc", "plan_mat_mul", "pre_arrange_mat_mul_input_rhs"]
