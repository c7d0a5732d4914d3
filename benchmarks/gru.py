"""The GRU layer on gruc's simulated IPU against PyTorch and numpy on this CPU, side by side.

For each shape ``(T, B, I, H)`` the same reset-after GRU (torch's formula, so every contender
computes the same numbers from the same weights) is timed, interleaved round by round so machine
noise hits all contenders alike, as the median of ``--repeats`` runs, each after the same
contender ran untimed for a moment (:data:`SWITCH_SECONDS`):

* ``gruc_fwd`` / ``gruc_train``: one ``Engine.run`` of the poplibs-style layer on ``Target.ipu2()``
  with the default pipeline — inference (``phase="fwd"``), and forward + backward with input
  gradients + weight gradients (``phase="all"``).  Every tile, address and exchange is simulated;
  data already on the device (written once), as a training loop would have it.
* ``torch_fwd`` / ``torch_train``: ``nn.GRU`` with 2 threads; forward under ``no_grad``, and
  forward + ``backward`` of ``sum(output * grad_output)`` with ``x``, ``h0`` and the weights
  requiring gradients.
* ``numpy_fwd`` / ``numpy_train``: a float32 numpy implementation (OpenBLAS, 2 threads).
* ``products_fwd`` / ``products_train``: only the float32 products gruc's layer takes, in its
  order and shapes, on host arrays by the same library (:class:`PoplibsProducts`): what gruc
  would take if simulating the tiles cost nothing.  poplibs' algorithm multiplies by the input
  weights on every step (and by their transpose on every backward step), where torch takes those
  as one product over the whole sequence: when this alone takes longer than torch's whole run, no
  simulator of that algorithm can beat torch on this machine.
* ``flop_bound_fwd`` / ``flop_bound_train``: poplibs' FLOP formulas for the layer divided by the
  peak sgemm rate measured here (a 2048^3 float32 product, the faster of numpy's and the library
  gruc's products use, MKL where installed: :mod:`gruc.runtime.blas`) — no implementation can
  beat it.

Ratios ``gruc / torch`` and ``gruc / flop bound`` are reported, of the medians, and ``gruc /
torch`` also as the median of each round's own ratio (``paired_ratios``: a round's two calls are
seconds apart, while this VM's speed drifts by tens of per cent over a run), with each contender's
fastest and slowest call; the gruc forward output is checked against torch's (max abs difference;
poplibs' test data with the weights scaled as torch initialises them, see :func:`torch_scaled`).
Build and compile seconds of the gruc layers are recorded too, and where a gruc run's time goes, by
kind of step (:func:`breakdown`, timed in extra runs after the interleaved ones).  Writes
``benchmarks/results/gru.json`` and prints a table.
``python benchmarks/gru.py [--repeats N] [--shapes 100x16x128x128,...]``
"""

from __future__ import annotations

import os

for _variable in ("OPENBLAS_NUM_THREADS", "OMP_NUM_THREADS"):  # before numpy loads its BLAS
    os.environ.setdefault(_variable, "2")

import argparse  # noqa: E402
import dataclasses  # noqa: E402
import math  # noqa: E402
import statistics  # noqa: E402
import time  # noqa: E402

import numpy as np  # noqa: E402
import torch  # noqa: E402

from _common import gruc_layer, write_result  # noqa: E402
from gruc.ir.codelets.dynamic import DYNAMIC_SLICE, DYNAMIC_UPDATE  # noqa: E402
from gruc.ir.codelets.elementwise import MAP, MAP_IN_PLACE  # noqa: E402
from gruc.ir.codelets.matmul import (MATMUL_PARTIALS, MATMUL_REDUCE,  # noqa: E402
                                     MATMUL_REDUCE_ACC)
from gruc.ir.codelets.reduce import REDUCE, REDUCE_UPDATE  # noqa: E402
from gruc.popnn.gru_io import GruHostWeights, to_torch  # noqa: E402
from gruc.runtime.blas import Product, library_name  # noqa: E402
from gruc.runtime.codelets.matmul_fused import DEFERRED_DEPTH  # noqa: E402
from gruc.runtime.lower import ExecuteStep  # noqa: E402

SHAPES = ((100, 16, 128, 128), (100, 64, 256, 256), (200, 32, 512, 512))
THREADS = 2
SWITCH_SECONDS = 0.15
"""How long each contender runs untimed before its timed call in a round.  A BLAS thread pool
spins on the cores for up to ~0.1 s after its caller returns (OpenBLAS's, here): a contender timed
right after the numpy peer ran against those threads (gruc's MKL products, 2x slower).  Pausing
instead does not do: after an idle pause this VM's memory is slow to touch again (a 17 ms run took
25 ms after 0.1 s idle, 50 ms after 1 s).  So every contender is timed warm and alone."""


# ---- the float32 numpy peer (torch's gate order r, z, n; reset-after) -------------------------
def _sigmoid(x: np.ndarray) -> np.ndarray:
    return np.float32(0.5) * np.tanh(np.float32(0.5) * x) + np.float32(0.5)


def numpy_forward(x, h0, w_ih, w_hh, b_ih, b_hh):
    """Output ``[T, B, H]`` and what the backward pass needs."""
    hidden = h0.shape[1]
    inputs = (x.reshape(-1, x.shape[2]) @ w_ih.T + b_ih).reshape(x.shape[0], x.shape[1], -1)
    h, saved, outputs = h0, [], np.empty((x.shape[0],) + h0.shape, np.float32)
    for t in range(x.shape[0]):
        rec = h @ w_hh.T + b_hh
        r = _sigmoid(inputs[t, :, :hidden] + rec[:, :hidden])
        z = _sigmoid(inputs[t, :, hidden:2 * hidden] + rec[:, hidden:2 * hidden])
        n = np.tanh(inputs[t, :, 2 * hidden:] + r * rec[:, 2 * hidden:])
        saved.append((h, r, z, n, rec[:, 2 * hidden:]))
        h = n + z * (h - n)
        outputs[t] = h
    return outputs, saved


def numpy_train(x, h0, w_ih, w_hh, b_ih, b_hh, grad_output):
    """Forward, then the gradients of ``sum(output * grad_output)`` for x, h0 and the weights."""
    outputs, saved = numpy_forward(x, h0, w_ih, w_hh, b_ih, b_hh)
    hidden = h0.shape[1]
    d_pre = np.empty((x.shape[0], x.shape[1], 3 * hidden), np.float32)
    d_rec = np.empty_like(d_pre)
    dh = np.zeros_like(h0)
    for t in range(x.shape[0] - 1, -1, -1):
        h_prev, r, z, n, rec_n = saved[t]
        dh = dh + grad_output[t]
        dn = dh * (1 - z) * (1 - n * n)
        dz = dh * (h_prev - n) * z * (1 - z)
        dr = dn * rec_n * r * (1 - r)
        d_pre[t] = np.concatenate([dr, dz, dn], axis=1)
        d_rec[t] = np.concatenate([dr, dz, dn * r], axis=1)
        dh = dh * z + d_rec[t] @ w_hh
    flat_pre, flat_rec = d_pre.reshape(-1, 3 * hidden), d_rec.reshape(-1, 3 * hidden)
    h_prevs = np.concatenate([h0[None], outputs[:-1]]).reshape(-1, hidden)
    return dict(x=(flat_pre @ w_ih).reshape(x.shape), h0=dh, w_ih=flat_pre.T @ x.reshape(-1, x.shape[2]),
                w_hh=flat_rec.T @ h_prevs, b_ih=flat_pre.sum(0), b_hh=flat_rec.sum(0))


class PoplibsProducts:
    """The float32 products of gruc's layer and nothing else, on contiguous host arrays, by the
    library gruc's products use (:func:`~gruc.runtime.blas.library_name`).

    Forward, on every step: the step's input ``[B, I]`` by the input weights ``[I, 3H]``, and
    the state ``[B, H]`` by the recurrent weights ``[H, 3H]``.  Backward, on every step from the
    last: the gate gradients ``[B, 3H]`` by both weights transposed (copies made once, as gruc's
    pre-arranged weights are), the gradients of the state and of the step's input; the weight
    gradients' products are stacked over steps and taken :data:`DEFERRED_DEPTH` rows of k at a
    time, as gruc's engine takes them.  The operands hold fixed values: the products' time does
    not depend on them."""

    def __init__(self, shape, library: str) -> None:
        steps, batch, inputs, hidden = self.shape = shape
        rng = np.random.default_rng(0)

        def array(*dims):
            return rng.standard_normal((1,) + dims, dtype=np.float32)

        x, h, gates = array(steps, batch, inputs), array(batch, hidden), array(batch, 3 * hidden)
        w_in, w_rec = array(inputs, 3 * hidden), array(hidden, 3 * hidden)
        projected, recurrent = array(batch, 3 * hidden), array(batch, 3 * hidden)
        self.forward_products = [(Product(x[:, t], w_in, projected, library),
                                  Product(h, w_rec, recurrent, library)) for t in range(steps)]
        self.backward_products = (Product(gates, array(3 * hidden, hidden), array(batch, hidden),
                                          library),
                                  Product(gates, array(3 * hidden, inputs), array(batch, inputs),
                                          library))
        depth = -(-DEFERRED_DEPTH // batch)
        self.stacks = [(np.empty((1, depth * batch, rows), np.float32),
                        np.empty((1, depth * batch, 3 * hidden), np.float32)) for rows in
                       (inputs, hidden)]
        self.weight_gradients = [Product(a.transpose(0, 2, 1), b, array(a.shape[2], 3 * hidden),
                                         library) for a, b in self.stacks]
        self.depth, self.x, self.h, self.gates, self.library = depth, x, h, gates, library

    def forward(self) -> None:
        for step in self.forward_products:
            for product in step:
                product()

    def train(self) -> None:
        self.forward()
        steps, batch = self.shape[:2]
        stacked = 0
        for t in reversed(range(steps)):
            for product in self.backward_products:
                product()
            rows = slice(stacked * batch, (stacked + 1) * batch)
            for (a, b), source in zip(self.stacks, (self.x[:, t], self.h)):
                a[:, rows], b[:, rows] = source, self.gates
            stacked += 1
            if stacked == self.depth:
                for product in self.weight_gradients:
                    product()
                stacked = 0
        for (a, b), full in zip(self.stacks, self.weight_gradients):  # the last, partial stack
            if stacked:
                rows = stacked * batch
                Product(a[:, :rows].transpose(0, 2, 1), b[:, :rows], full.out, self.library)()


# ---- contenders ------------------------------------------------------------------------------
def gruc_engine(shape, phase: str):
    """A compiled layer with its data written (weights scaled as torch's), what its runs compute
    in FLOPs, and what building it cost."""
    engine, data, layer, cost = gruc_layer(shape, phase, torch_scaled)
    return engine, data, layer.flops(), cost


def torch_scaled(data):
    """poplibs' test data with the weights and biases in torch's ``±1/sqrt(H)`` instead of ``±1``.

    With ``±1`` weights a recurrence 256 wide is chaotic: every float32 implementation — torch,
    the numpy peer, gruc — drifts from the float64 answer by the whole output range within 100
    steps, so their outputs cannot be compared.  Scaled as torch initialises them, they agree to
    float32 rounding, and the timings are the same (no data-dependent work)."""
    scale = 1 / math.sqrt(data.h0.shape[1])
    return dataclasses.replace(data, input_weights=data.input_weights * scale,
                               output_weights=data.output_weights * scale,
                               biases=data.biases * scale)


def torch_peer(data):
    weights = GruHostWeights(data.input_weights, data.output_weights, data.biases)
    state = {k: torch.from_numpy(np.ascontiguousarray(v, np.float32))
             for k, v in to_torch(weights).items()}
    hidden = data.h0.shape[1]
    module = torch.nn.GRU(data.x.shape[2], hidden)
    module.load_state_dict(state)
    x = torch.from_numpy(data.x.astype(np.float32))
    h0 = torch.from_numpy(data.h0.astype(np.float32))[None]
    grad = torch.from_numpy(data.grad_output.astype(np.float32))

    def forward():
        with torch.no_grad():
            return module(x, h0)[0]

    def train():
        xs, hs = x.clone().requires_grad_(), h0.clone().requires_grad_()
        module.zero_grad()
        out, _ = module(xs, hs)
        (out * grad).sum().backward()

    return forward, train, state


def peak_sgemm_flops(library: str, size: int = 2048, repeats: int = 9) -> float:
    """The best rate of a ``size``-cubed float32 product by ``library`` (see
    :mod:`gruc.runtime.blas`): a peak, so the fastest run counts (a median drifts down with
    whatever else the machine is doing, and the bound with it)."""
    a = np.random.default_rng(0).standard_normal((1, size, size), dtype=np.float32)
    b = np.random.default_rng(1).standard_normal((1, size, size), dtype=np.float32)
    product = Product(a, b, np.empty((1, size, size), np.float32), library)
    for _ in range(2):
        product()
    best = math.inf
    for _ in range(repeats):
        start = time.perf_counter()
        product()
        best = min(best, time.perf_counter() - start)
    return 2 * size ** 3 / best


def interleaved(contenders: dict, repeats: int) -> dict[str, list[float]]:
    """Seconds of each contender's timed call in every round, timed round-robin, each call
    after :data:`SWITCH_SECONDS` of the same contender untimed."""
    times = {name: [] for name in contenders}
    for _ in range(repeats):
        for name, fn in contenders.items():
            warm = time.perf_counter() + SWITCH_SECONDS
            fn()
            while time.perf_counter() < warm:
                fn()
            start = time.perf_counter()
            fn()
            times[name].append(time.perf_counter() - start)
    return times


STEP_KINDS = (("products", {MATMUL_PARTIALS}),
              ("product_outputs", {MATMUL_REDUCE, MATMUL_REDUCE_ACC}),
              ("elementwise", {MAP, MAP_IN_PLACE}),
              ("reductions", {REDUCE, REDUCE_UPDATE}),
              ("sequence_slices", {DYNAMIC_SLICE, DYNAMIC_UPDATE}))
"""How :func:`breakdown` names the steps of a run, by the kinds of vertices they execute:
products (a BLAS call with the operands it gathers from tile memory), writing or accumulating
their outputs into tile memory, elementwise maps, reductions, and slices of the sequences; the
rest of the Execute steps are ``other_steps``; Copy steps are ``copies``."""


def breakdown(engine, repeats: int) -> dict[str, float]:
    """Mean ms per run of ``engine`` spent in each kind of step (:data:`STEP_KINDS`), outside
    them (``outside_steps``: walking the program, and a kept weight-gradient accumulator's last
    products and write-back when a run ends) and in all (``run``): where the simulator's time
    goes.  Each step's prepared callables and copies are wrapped in a timer for these runs only,
    which start after :data:`SWITCH_SECONDS` of untimed runs, as the interleaved timings do."""
    interpreter = engine.interpreter
    spent: dict[str, float] = {}
    step_kind = {}
    for leaf in engine.executable.leaves:
        if isinstance(leaf, ExecuteStep):
            kinds = {vertex.kind for vertex in leaf.vertices}
            step_kind[leaf.step] = next((name for name, members in STEP_KINDS if kinds & members),
                                        "other_steps")

    def timed(kind: str, run):
        def run_timed(*args):
            start = time.perf_counter()
            run(*args)
            spent[kind] = spent.get(kind, 0.0) + time.perf_counter() - start
        return run_timed

    prepared, copy = dict(interpreter.prepared), interpreter.copy
    for step, runs in prepared.items():
        interpreter.prepared[step] = tuple(timed(step_kind[step], run) for run in runs)
    interpreter.copy = timed("copies", copy)
    try:
        warm = time.perf_counter() + SWITCH_SECONDS
        while time.perf_counter() < warm:
            engine.run(0)
        spent.clear()
        start = time.perf_counter()
        for _ in range(repeats):
            engine.run(0)
        total = time.perf_counter() - start
    finally:
        interpreter.prepared, interpreter.copy = prepared, copy
    spent["outside_steps"] = total - sum(spent.values())
    spent["run"] = total
    return {kind: round(value / repeats * 1e3, 2) for kind, value in sorted(spent.items())}


def measure(shape, repeats: int, peak: float) -> dict:
    fwd_engine, data, fwd_flops, fwd_cost = gruc_engine(shape, "fwd")
    train_engine, _, train_flops, train_cost = gruc_engine(shape, "all")
    torch_fwd, torch_train, state = torch_peer(data)
    arrays = [np.ascontiguousarray(state[k].numpy()) for k in
              ("weight_ih_l0", "weight_hh_l0", "bias_ih_l0", "bias_hh_l0")]
    x, h0 = data.x.astype(np.float32), data.h0.astype(np.float32)
    grad = data.grad_output.astype(np.float32)
    products = PoplibsProducts(shape, library_name())
    times = interleaved({
        "gruc_fwd": lambda: fwd_engine.run(0), "torch_fwd": torch_fwd,
        "numpy_fwd": lambda: numpy_forward(x, h0, *arrays),
        "gruc_train": lambda: train_engine.run(0), "torch_train": torch_train,
        "numpy_train": lambda: numpy_train(x, h0, *arrays, grad),
        "products_fwd": products.forward, "products_train": products.train,
    }, repeats)
    seconds = {name: statistics.median(values) for name, values in times.items()}
    seconds["flop_bound_fwd"] = fwd_flops / peak
    seconds["flop_bound_train"] = train_flops / peak
    difference = float(np.max(np.abs(fwd_engine.read_tensor("output") - torch_fwd().numpy())))
    ms = {name: round(value * 1e3, 2) for name, value in seconds.items()}
    steps = {"fwd": breakdown(fwd_engine, repeats), "train": breakdown(train_engine, repeats)}
    ratios = {f"gruc_{kind}_over_{peer}": round(seconds[f"gruc_{kind}"]
                                                / seconds[f"{peer}_{kind}"], 3)
              for kind in ("fwd", "train") for peer in ("torch", "numpy", "products", "flop_bound")}
    ratios.update({f"products_{kind}_over_torch": round(seconds[f"products_{kind}"]
                                                        / seconds[f"torch_{kind}"], 3)
                   for kind in ("fwd", "train")})
    # the same round's gruc and torch calls are seconds apart: their ratio drifts less than the
    # machine does over the whole run
    paired = {f"gruc_{kind}_over_torch": round(statistics.median(
        gruc / peer for gruc, peer in zip(times[f"gruc_{kind}"], times[f"torch_{kind}"])), 3)
        for kind in ("fwd", "train")}
    spread = {name: [round(min(values) * 1e3, 2), round(max(values) * 1e3, 2)]
              for name, values in times.items()}
    return {"shape": "x".join(map(str, shape)), "T_B_I_H": list(shape), "median_ms": ms,
            "fastest_and_slowest_ms": spread, "ratios": ratios, "paired_ratios": paired,
            "gruc_fwd_vs_torch_max_abs_difference": difference,
            "gruc_ms_by_step_kind": steps, "gruc_fwd_layer": fwd_cost, "gruc_train_layer": train_cost,
            "flops": {"fwd": fwd_flops, "train": train_flops}}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--shapes", default=",".join("x".join(map(str, s)) for s in SHAPES))
    args = parser.parse_args()
    torch.set_num_threads(THREADS)
    shapes = [tuple(int(v) for v in text.split("x")) for text in args.shapes.split(",")]
    library = library_name()
    peaks = {name: peak_sgemm_flops(name) for name in {"numpy", library}}
    peak = max(peaks.values())  # the bound is the fastest sgemm this machine has
    results = [measure(shape, args.repeats, peak) for shape in shapes]
    print(f"gruc's products: {library}; peak sgemm {peak / 1e9:.1f} GFLOP/s; median ms "
          f"(ratio gruc/torch, median of the rounds' gruc/torch, gruc/bound); products: gruc's "
          f"products alone")
    for row in results:
        ms, ratios = row["median_ms"], row["ratios"]
        name = row["shape"]
        for kind in ("fwd", "train"):
            print(f"{name:>16} {kind:>5}: gruc {ms[f'gruc_{kind}']:9.1f}  torch "
                  f"{ms[f'torch_{kind}']:8.1f}  numpy {ms[f'numpy_{kind}']:8.1f}  products "
                  f"{ms[f'products_{kind}']:7.1f}  bound "
                  f"{ms[f'flop_bound_{kind}']:7.1f}  ({ratios[f'gruc_{kind}_over_torch']:.2f}x, "
                  f"{row['paired_ratios'][f'gruc_{kind}_over_torch']:.2f}x, "
                  f"{ratios[f'gruc_{kind}_over_flop_bound']:.2f}x)")
        for kind, spent in row["gruc_ms_by_step_kind"].items():
            print(f"{'':>16} gruc {kind} by step kind (ms): "
                  + ", ".join(f"{name} {value:.1f}" for name, value in spent.items()))
        print(f"{'':>16} gruc forward output vs torch: max abs difference "
              f"{row['gruc_fwd_vs_torch_max_abs_difference']:.1e}")
    write_result("gru", {"threads": THREADS, "gruc_products": library,
                         "peak_sgemm_gflops": round(peak / 1e9, 1),
                         "peak_sgemm_gflops_by_library": {name: round(value / 1e9, 1)
                                                          for name, value in peaks.items()},
                         "repeats": args.repeats, "results": results})


if __name__ == "__main__":
    main()
