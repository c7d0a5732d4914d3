"""Determinism (issue #12, item 3): the same program gives byte-identical text IR, JSON IR, JSON
report and results in every run — twice in one process and in fresh processes with different
``PYTHONHASHSEED`` values (so nothing may depend on set iteration order, ``id()`` or string hashes).

Two programs: a GRU layer training program (AUGRU, reset-after, per-row lengths, phase ``all``, on
4 tiles, numba engine) and a small hand-built program (a loop of an in-place update, a reduction,
a dynamic slice and an If, numpy engine).  For each the artifacts are: the text IR as built
(``gruc dump``), the text IR and JSON IR after the default pipeline (what the engine runs), the
JSON report after a run, and the bytes of every tensor read back.

Excluded, on purpose: the report's ``compile_seconds`` (wall-clock time of the compile, the one
field that measures the machine rather than the program) is removed before comparing; every other
report field — memory per tile, steps, exchange, cycles and simulated seconds — is compared.
"""

from __future__ import annotations

import hashlib
import json
import os
import subprocess
import sys
from pathlib import Path

import numpy as np

from gruc import FLOAT, INT, Copy, Engine, Graph, If, Module, Repeat, Sequence, Target
from gruc.ir import expr as ex
from gruc.ir.printer import print_module
from gruc.ir.serialize import module_to_json
from gruc.ops import map_in_place
from gruc.ops.dynamic import dynamic_slice
from gruc.ops.reduce import reduce
from gruc.tools.gru_layer import GruLayerConfig, build_layer, host_data

HERE = Path(__file__).resolve().parent
WALL_CLOCK_FIELDS = ("compile_seconds",)


def _small_program() -> tuple[Graph, list[Sequence], dict[str, np.ndarray]]:
    graph = Graph(Target.custom(tiles_per_ipu=4))
    x = graph.add_variable(FLOAT, (3, 8), "x")
    graph.map_tensor_linearly(x, min_elements_per_tile=1, grain_size=2)
    y = graph.add_variable(FLOAT, (3, 8), "y")
    graph.set_tile_mapping(y, 2)
    offset = graph.add_variable(INT, (1,), "offset")
    flag = graph.add_variable("bool", (), "flag")
    for t in (offset, flag):
        graph.set_tile_mapping(t, 0)
    prog = Sequence(Copy(x.reverse(1), y))
    body = Sequence()
    map_in_place(graph, ex.add(ex.mul(ex._1, ex.Const(0.5)), ex.tanh(ex._2)), [y, x], body)
    prog.add(Repeat(3, body))
    total = reduce(graph, y, [0], "add", prog)
    window = dynamic_slice(graph, y, offset, [0], [1], prog)
    prog.add(If(flag, Copy(window.reshape((8,)), total), Sequence()))
    for name, t in {"x": x, "offset": offset, "flag": flag}.items():
        graph.create_host_write(name, t)
    graph.create_host_read("total", total)
    graph.create_host_read("y", y)
    writes = {"x": np.linspace(-1, 1, 24).reshape(3, 8), "offset": np.array([2]),
              "flag": np.array(True)}
    return graph, [prog], writes


def _gru_program() -> tuple[Graph, list[Sequence], dict[str, np.ndarray]]:
    config = GruLayerConfig(sequence_size=3, input_size=5, output_size=4, batch_size=3,
                            tiles_per_ipu=4, phase="all", reset_after=True, with_attention=True,
                            variable_time_steps=(3, 1, 2))
    layer = build_layer(config)
    data, lengths = host_data(config)
    values = {"input": data.x, "init_state": data.h0, "input_weights": data.input_weights,
              "output_weights": data.output_weights, "biases": data.biases,
              "attention": data.attention, "lengths": lengths, "grad_output": data.grad_output}
    return layer.graph, layer.programs, {name: values[name] for name in layer.writes}


def _digest(text: str | bytes) -> str:
    return hashlib.sha256(text.encode() if isinstance(text, str) else text).hexdigest()


def artifacts() -> dict[str, str]:
    """SHA-256 of every artifact of both programs, by name (the texts themselves are long)."""
    result = {}
    for label, build, backend in (("gru", _gru_program, "numba"),
                                  ("small", _small_program, "numpy")):
        graph, programs, writes = build()
        result[f"{label}/ir"] = _digest(print_module(Module(graph, programs)))
        engine = Engine(graph, programs, backend=backend)
        result[f"{label}/ir-compiled"] = _digest(print_module(engine.module))
        result[f"{label}/json-ir"] = _digest(json.dumps(module_to_json(engine.module),
                                                        sort_keys=True))
        for name, value in writes.items():
            engine.write_tensor(name, value)
        engine.run(0)
        report = engine.report.to_dict()
        for key in WALL_CLOCK_FIELDS:
            del report[key]
        result[f"{label}/report"] = _digest(json.dumps(report, indent=1, sort_keys=True))
        for name in sorted(graph.host_reads):
            result[f"{label}/read {name}"] = _digest(engine.read_tensor(name).tobytes())
    return result


def _in_fresh_process(seed: str) -> dict[str, str]:
    code = (f"import sys, json; sys.path.insert(0, {str(HERE)!r}); "
            "import test_determinism as t; print(json.dumps(t.artifacts()))")
    env = dict(os.environ, PYTHONHASHSEED=seed)
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env,
                          check=True, timeout=600)
    return json.loads(done.stdout.strip().splitlines()[-1])


def _differences(a: dict[str, str], b: dict[str, str]) -> list[str]:
    return sorted(k for k in a.keys() | b.keys() if a.get(k) != b.get(k))


def test_artifacts_are_identical_in_process_and_across_hash_seeds():
    first = artifacts()
    assert len(first) >= 12 and any(k.startswith("gru/read input_weights_grad") for k in first)
    assert _differences(first, artifacts()) == [], "differs between two runs in one process"
    for seed in ("0", "4242"):
        other = _in_fresh_process(seed)
        assert _differences(first, other) == [], f"differs with PYTHONHASHSEED={seed}"


def test_the_comparison_sees_a_changed_artifact():
    """Not vacuous: a different program (one more loop trip) changes the digests it should."""
    graph, programs, writes = _small_program()
    before = _digest(print_module(Module(graph, programs)))
    programs[0].add(Repeat(1, Sequence()))
    assert _digest(print_module(Module(graph, programs))) != before
    assert _differences({"a": "1", "b": "2"}, {"a": "1", "b": "3"}) == ["b"]
