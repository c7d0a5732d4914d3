"""The SPEC's "API at a glance" runs as written, and its numbers match the float64 reference."""

import numpy as np

from gruc import (FLOAT, HALF, Copy, Engine, Execute, Graph, Repeat, Sequence, Target,  # noqa: F401
                  WriteUndef)
from gruc.ir.expr import _1, _2, _3, Const  # noqa: F401
from gruc.ops import add, map, map_in_place, mat_mul, non_linearity  # noqa: F401
from gruc.popnn import gru, gru_reference


def test_api_at_a_glance():
    graph = Graph(Target.custom(tiles_per_ipu=16))
    params = gru.GruParams(dtype=FLOAT, batch_size=4, max_time_steps=2, layer_sizes=(40, 38),
                           reset_after=False, cell_order=("reset", "update", "candidate"))
    options = {"inferenceOnly": False}
    x = gru.create_input(graph, params, name="x", options=options)
    h0 = gru.create_initial_state(graph, params, name="h0", options=options)
    w = gru.create_weights(graph, params, name="w", options=options)
    prog = Sequence()
    out, inter = gru.gru_fwd(graph, params, h0, x, w, prog, save_intermediates=True,
                             options=options)
    grad_out = graph.add_variable(FLOAT, out.shape, name="grad_out")
    graph.map_tensor_linearly(grad_out)
    g = gru.gru_bwd_with_wu(graph, params, prog, h0, inter, w, x, out, grad_out, options=options)
    for name, t in {"x": x, "h0": h0, "wi": w.input_weights, "wo": w.output_weights,
                    "b": w.biases, "grad_out": grad_out}.items():
        graph.create_host_write(name, t)
    graph.create_host_read("out", out)
    graph.create_host_read("dwi", g.weights_grad.input_weights)
    c = map(graph, _1 + _2 * Const(2.0), [x, x], prog)
    graph.create_host_read("c", c)
    engine = Engine(graph, [prog])
    data = gru_reference.random_inputs(2, 4, 40, 38, round_to="float")
    for name, value in {"x": data.x, "h0": data.h0, "wi": data.input_weights,
                        "wo": data.output_weights, "b": data.biases,
                        "grad_out": data.grad_output}.items():
        engine.write_tensor(name, value)
    engine.run(0)
    y = engine.read_tensor("out")
    ref = gru_reference.forward(data.x, data.h0, data.input_weights, data.output_weights,
                                data.biases)
    grads = gru_reference.weight_update(ref, gru_reference.backward(ref, data.grad_output))
    assert y.shape == (2, 4, 38)
    np.testing.assert_allclose(y, ref.output, atol=1e-4)
    np.testing.assert_allclose(engine.read_tensor("dwi"), grads.input_weights,
                               atol=1e-4 * np.abs(grads.input_weights).max())
    np.testing.assert_allclose(engine.read_tensor("c"), 3 * data.x, rtol=1e-6)
    r = engine.report
    assert r.fits and not r.tiles_over_capacity and r.max_tile_bytes > 0
    assert len(r.always_live_bytes) == 16 and len(r.not_always_live_max_bytes) == 16
    assert r.exchange_bytes > 0
    assert r.cycles.total == r.cycles.compute + r.cycles.exchange + r.cycles.sync > 0
