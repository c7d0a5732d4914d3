"""Tests of the float64 GRU reference: finite differences, PyTorch, lengths, errors, comparisons."""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from gruc.errors import GrucError, GrucOptionError, GrucShapeError, GrucTypeError, GrucValueError
from gruc.popnn import gru_reference as ref
from gruc.tools.gru_layer import GruLayerConfig, run_layer

ORDERS = [("reset", "update", "candidate"), ("update", "candidate", "reset")]
GRAD_NAMES = ("x", "h0", "input_weights", "output_weights", "biases", "attention")
S, B, I, H = 3, 2, 3, 4


# ------------------------------------------------------------------------------------------------
# helpers
# ------------------------------------------------------------------------------------------------

def _settings(**kw):
    base = dict(cell_order=ref.DEFAULT_CELL_ORDER, reset_after=False, activation="tanh",
                recurrent_activation="sigmoid", lengths=None, output_full_sequence=True)
    base.update(kw)
    return base


def _data(reset_after, attention, seed, scale=1.0, ofs=True):
    d = ref.random_inputs(S, B, I, H, reset_after=reset_after, attention=attention,
                          output_full_sequence=ofs, seed=seed)
    arrays = dict(x=d.x * scale, h0=d.h0 * scale, input_weights=d.input_weights,
                  output_weights=d.output_weights, biases=d.biases)
    if attention:
        arrays["attention"] = d.attention
    return arrays, d.grad_output


def _analytic(arrays, settings, grad):
    res = ref.train_step(grad_output=grad, **arrays, **settings)
    bwd, wu = res.backward, res.weight_grads
    return res.forward, {"x": bwd.input_grad, "h0": bwd.init_state_grad,
                         "input_weights": wu.input_weights, "output_weights": wu.output_weights,
                         "biases": wu.biases, "attention": bwd.attention_grad}


def _numeric(arrays, settings, grad, name, eps=1e-6):
    def loss(arrs):
        return float(np.sum(ref.forward(**arrs, **settings).output * grad))

    base = arrays[name]
    out = np.zeros_like(base)
    for idx in np.ndindex(base.shape):
        plus, minus = base.copy(), base.copy()
        plus[idx] += eps
        minus[idx] -= eps
        out[idx] = (loss({**arrays, name: plus}) - loss({**arrays, name: minus})) / (2 * eps)
    return out


def _kink_distance(fwd):
    """Smallest distance of a valid-step pre-activation from a kink of its activation."""
    kinks = {"relu": [0.0], "hard_sigmoid": [-2.5, 2.5]}
    valid = (np.arange(fwd.seq_len)[:, None] < fwd.lengths[None, :])[:, :, None]   # [S, B, 1]
    dist = np.inf
    for gate, act in ((0, fwd.recurrent_activation), (1, fwd.recurrent_activation),
                      (2, fwd.activation)):
        for k in kinks.get(act, []):
            d = np.abs(fwd.preactivations[:, gate] - k)
            dist = min(dist, float(np.min(np.where(valid, d, np.inf))))
    return dist


def _check_fd(settings, attention, base_seed=7, scale=1.0):
    ofs = settings["output_full_sequence"]
    for seed in range(base_seed, base_seed + 50):
        arrays, grad = _data(settings["reset_after"], attention, seed, scale, ofs)
        fwd, analytic = _analytic(arrays, settings, grad)
        if _kink_distance(fwd) > 1e-3:
            break
    else:  # pragma: no cover
        pytest.fail("no seed keeps pre-activations away from the activation kinks")
    total = 0.0
    for name in arrays:
        numeric = _numeric(arrays, settings, grad, name)
        ana = analytic[name]
        assert ana is not None and ana.shape == numeric.shape, name
        err = np.max(np.abs(ana - numeric))
        scale_ = max(1.0, float(np.max(np.abs(ana))))
        assert err <= 1e-6 * scale_, f"{name}: max |analytic - numeric| = {err:.3g}"
        total += float(np.sum(np.abs(ana)))
    assert total > 0.0


# ------------------------------------------------------------------------------------------------
# 1. finite differences
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("ofs", [True, False])
@pytest.mark.parametrize("lengths", [None, 2, np.array([3, 1]), np.array([1])])
def test_finite_differences_structure(reset_after, attention, order, ofs, lengths):
    _check_fd(_settings(reset_after=reset_after, cell_order=order, output_full_sequence=ofs,
                        lengths=lengths), attention)


@pytest.mark.parametrize("act,ract", list(itertools.product(ref.ACTIVATIONS, ref.ACTIVATIONS)))
@pytest.mark.parametrize("reset_after", [False, True])
def test_finite_differences_activations(act, ract, reset_after):
    # AUGRU, per-row lengths and last-state output make every gate derivative matter.
    settings = _settings(reset_after=reset_after, activation=act, recurrent_activation=ract,
                         lengths=np.array([3, 2]), output_full_sequence=not reset_after)
    _check_fd(settings, attention=True, scale=0.5)


# ------------------------------------------------------------------------------------------------
# 2. PyTorch nn.GRU (reset_after, gate order r, z, n)
# ------------------------------------------------------------------------------------------------

torch = pytest.importorskip("torch")
torch.set_num_threads(2)


def _torch_gru(d, order):
    """A float64 nn.GRU holding the weights of ``d`` (arrays in cell order ``order``)."""
    gru = torch.nn.GRU(d.x.shape[2], d.h0.shape[1], dtype=torch.float64)
    idx = [order.index(g) for g in ref.GATES]                  # internal gate -> cell position
    wi, wh, b = d.input_weights[idx], d.output_weights[idx], d.biases[idx]
    with torch.no_grad():
        gru.weight_ih_l0.copy_(torch.from_numpy(np.concatenate([w.T for w in wi])))
        gru.weight_hh_l0.copy_(torch.from_numpy(np.concatenate([w.T for w in wh])))
        gru.bias_ih_l0.copy_(torch.from_numpy(b[:, 0].reshape(-1)))
        gru.bias_hh_l0.copy_(torch.from_numpy(b[:, 1].reshape(-1)))
    return gru


def _torch_weight_grads(gru, order, hidden):
    """nn.GRU's parameter gradients mapped to gruc's [3,I,H], [3,H,H], [3,2,H] in cell order."""
    def split(m):
        return np.stack([m[g * hidden:(g + 1) * hidden].T for g in range(3)])

    wi = split(gru.weight_ih_l0.grad.numpy())
    wh = split(gru.weight_hh_l0.grad.numpy())
    bi = gru.bias_ih_l0.grad.numpy().reshape(3, hidden)
    bh = gru.bias_hh_l0.grad.numpy().reshape(3, hidden)
    b = np.stack([bi, bh], axis=1)
    pos = [ref.GATES.index(g) for g in order]                  # cell position -> internal gate
    return wi[pos], wh[pos], b[pos]


def _run_torch(d, order, ofs, lengths=None):
    gru = _torch_gru(d, order)
    x = torch.tensor(d.x, requires_grad=True)
    h0 = torch.tensor(d.h0, requires_grad=True)
    if lengths is None:
        out, hn = gru(x, h0[None])
    else:
        packed = torch.nn.utils.rnn.pack_padded_sequence(
            x, torch.as_tensor(lengths), enforce_sorted=False)
        out_p, hn = gru(packed, h0[None])
        out, _ = torch.nn.utils.rnn.pad_packed_sequence(out_p, total_length=d.x.shape[0])
    g = torch.from_numpy(d.grad_output)
    loss = (out * g).sum() if ofs else (hn[0] * g).sum()
    loss.backward()
    return (out.detach().numpy(), hn[0].detach().numpy(), x.grad.numpy(), h0.grad.numpy(),
            _torch_weight_grads(gru, order, d.h0.shape[1]))


def _assert_matches_torch(d, order, ofs, lengths=None):
    out, hn, dx, dh0, (dwi, dwh, db) = _run_torch(d, order, ofs, lengths)
    res = ref.train_step(d.x, d.h0, d.input_weights, d.output_weights, d.biases, d.grad_output,
                         cell_order=order, reset_after=True, lengths=lengths,
                         output_full_sequence=ofs)
    fwd, bwd, wu = res.forward, res.backward, res.weight_grads
    tol = dict(rtol=0, atol=1e-9)
    if ofs:
        np.testing.assert_allclose(fwd.output, out, **tol)
    else:
        np.testing.assert_allclose(fwd.output, hn, **tol)
    np.testing.assert_allclose(fwd.last_state, hn, **tol)
    np.testing.assert_allclose(bwd.input_grad, dx, **tol)
    np.testing.assert_allclose(bwd.init_state_grad, dh0, **tol)
    np.testing.assert_allclose(wu.input_weights, dwi, **tol)
    np.testing.assert_allclose(wu.output_weights, dwh, **tol)
    np.testing.assert_allclose(wu.biases, db, **tol)


@pytest.mark.parametrize("shape", [(2, 4, 40, 38), (5, 3, 7, 6), (1, 1, 2, 3), (12, 2, 16, 8)])
@pytest.mark.parametrize("order", ORDERS)
@pytest.mark.parametrize("ofs", [True, False])
def test_matches_torch_gru(shape, order, ofs):
    d = ref.random_inputs(*shape, reset_after=True, output_full_sequence=ofs, seed=11)
    _assert_matches_torch(d, order, ofs)


@pytest.mark.parametrize("ofs", [True, False])
def test_matches_torch_packed_sequence(ofs):
    # Packed sequences give exactly gruc's per-row length semantics: zero padded outputs and a
    # final state taken at step length - 1.
    d = ref.random_inputs(6, 4, 5, 7, reset_after=True, output_full_sequence=ofs, seed=3)
    _assert_matches_torch(d, ORDERS[1], ofs, lengths=np.array([6, 1, 4, 2]))


# ------------------------------------------------------------------------------------------------
# 3. sequence lengths, masks, intermediates, attention
# ------------------------------------------------------------------------------------------------

def _run(d, **kw):
    return ref.forward(d.x, d.h0, d.input_weights, d.output_weights, d.biases,
                       attention=d.attention, **kw)


@pytest.mark.parametrize("reset_after", [False, True])
@pytest.mark.parametrize("attention", [False, True])
def test_per_row_lengths_forward(reset_after, attention):
    d = ref.random_inputs(5, 3, 4, 6, reset_after=reset_after, attention=attention, seed=5)
    lengths = np.array([2, 5, 1])
    full = _run(d, reset_after=reset_after)
    masked = _run(d, reset_after=reset_after, lengths=lengths)
    last = _run(d, reset_after=reset_after, lengths=lengths, output_full_sequence=False)
    for b, n in enumerate(lengths):
        np.testing.assert_array_equal(masked.output[n:, b], 0.0)
        np.testing.assert_array_equal(masked.intermediates[n:, :, b], 0.0)
        np.testing.assert_allclose(masked.output[:n, b], full.output[:n, b], rtol=0, atol=1e-14)
        np.testing.assert_allclose(last.output[b], full.output[n - 1, b], rtol=0, atol=1e-14)
        np.testing.assert_array_equal(last.intermediates[n:, :, b], 0.0)
    # the row of full length is the unmasked run
    np.testing.assert_array_equal(masked.output[:, 1], full.output[:, 1])
    np.testing.assert_array_equal(last.output[1], full.output[-1, 1])


def test_scalar_length_equals_truncated_run():
    d = ref.random_inputs(6, 2, 3, 4, attention=True, seed=9)
    short = ref.forward(d.x[:4], d.h0, d.input_weights, d.output_weights, d.biases,
                        attention=d.attention[:, :4])
    for lengths in (4, np.array([4]), np.int32(4)):
        masked = _run(d, lengths=lengths)
        np.testing.assert_allclose(masked.output[:4], short.output, rtol=0, atol=1e-14)
        np.testing.assert_array_equal(masked.output[4:], 0.0)
        np.testing.assert_allclose(masked.last_state, short.last_state, rtol=0, atol=1e-14)


@pytest.mark.parametrize("ofs", [True, False])
@pytest.mark.parametrize("ract", ["sigmoid", "tanh", "hard_sigmoid"])
def test_per_row_gradients_equal_single_row_runs(ofs, ract):
    # Each batch row is independent, so its gradients must equal those of a run on that row alone,
    # truncated to its length.  tanh / hard_sigmoid recurrent activations check that padded steps
    # contribute nothing (poplibs would leak a du there).
    d = ref.random_inputs(5, 3, 4, 3, attention=True, output_full_sequence=ofs, seed=21)
    lengths = np.array([3, 5, 1])
    kw = dict(recurrent_activation=ract, output_full_sequence=ofs)
    res = ref.train_step(d.x, d.h0, d.input_weights, d.output_weights, d.biases, d.grad_output,
                         attention=d.attention, lengths=lengths, **kw)
    sum_wi = np.zeros_like(d.input_weights)
    for b, n in enumerate(lengths):
        g = d.grad_output[:n, b:b + 1] if ofs else d.grad_output[b:b + 1]
        one = ref.train_step(d.x[:n, b:b + 1], d.h0[b:b + 1], d.input_weights, d.output_weights,
                             d.biases, g, attention=d.attention[b:b + 1, :n], **kw)
        np.testing.assert_allclose(res.backward.input_grad[:n, b], one.backward.input_grad[:, 0],
                                   rtol=0, atol=1e-12)
        np.testing.assert_array_equal(res.backward.input_grad[n:, b], 0.0)
        np.testing.assert_array_equal(res.backward.bwd_intermediates[n:, :, b], 0.0)
        np.testing.assert_allclose(res.backward.init_state_grad[b], one.backward.init_state_grad[0],
                                   rtol=0, atol=1e-12)
        np.testing.assert_allclose(res.backward.attention_grad[b, :n],
                                   one.backward.attention_grad[0], rtol=0, atol=1e-12)
        np.testing.assert_array_equal(res.backward.attention_grad[b, n:], 0.0)
        sum_wi += one.weight_grads.input_weights
    np.testing.assert_allclose(res.weight_grads.input_weights, sum_wi, rtol=0, atol=1e-11)


@pytest.mark.parametrize("reset_after", [False, True])
def test_intermediates_layout(reset_after):
    d = ref.random_inputs(4, 2, 3, 5, reset_after=reset_after, seed=2)
    for ofs in (True, False):
        f = _run(d, reset_after=reset_after, output_full_sequence=ofs)
        names = ref.intermediate_names(output_full_sequence=ofs, reset_after=reset_after)
        assert f.intermediates.shape == (4, len(names), 2, 5)
        assert names[:3] == ("reset", "update", "candidate")
        assert len(names) == 3 + (not ofs) + reset_after
        r, u, c = (f.intermediate(n) for n in ("reset", "update", "candidate"))
        h_prev, h_new = f.states[:-1], f.states[1:]
        np.testing.assert_allclose(h_new, u * h_prev + (1 - u) * c, rtol=0, atol=1e-14)
        if not ofs:
            np.testing.assert_array_equal(f.intermediate("output"), h_new)
        if reset_after:
            k = ref.GATES.index("candidate")
            expected = h_prev @ d.output_weights[k] + d.biases[k, 1]
            np.testing.assert_allclose(f.intermediate("candidate_recurrent"), expected,
                                       rtol=0, atol=1e-13)
        with pytest.raises(GrucValueError, match="no intermediate 'bogus'"):
            f.intermediate("bogus")


def test_cell_order_permutes_weights_only():
    d = ref.random_inputs(3, 2, 3, 4, reset_after=True, seed=4)
    order = ("candidate", "reset", "update")
    idx = [ref.GATES.index(g) for g in order]
    a = ref.train_step(d.x, d.h0, d.input_weights, d.output_weights, d.biases, d.grad_output,
                       reset_after=True)
    b = ref.train_step(d.x, d.h0, d.input_weights[idx], d.output_weights[idx], d.biases[idx],
                       d.grad_output, reset_after=True, cell_order=order)
    np.testing.assert_array_equal(a.forward.output, b.forward.output)
    np.testing.assert_array_equal(a.forward.intermediates, b.forward.intermediates)
    np.testing.assert_array_equal(a.backward.bwd_intermediates, b.backward.bwd_intermediates)
    np.testing.assert_allclose(a.weight_grads.input_weights[idx], b.weight_grads.input_weights)
    np.testing.assert_allclose(a.weight_grads.biases[idx], b.weight_grads.biases)


def test_attention_extremes():
    d = ref.random_inputs(3, 2, 3, 4, attention=True, seed=8)
    plain = _run(dataclass_replace(d, attention=None))
    zero = _run(dataclass_replace(d, attention=np.zeros((2, 3))))
    np.testing.assert_array_equal(zero.output, plain.output)
    one = ref.train_step(d.x, d.h0, d.input_weights, d.output_weights, d.biases, d.grad_output,
                         attention=np.ones((2, 3)))
    np.testing.assert_allclose(one.forward.output, one.forward.intermediate("candidate"))
    assert all(np.all(np.isfinite(a)) for a in (one.backward.input_grad,
                                                 one.backward.attention_grad,
                                                 one.weight_grads.input_weights))
    np.testing.assert_array_equal(one.backward.bwd_intermediates[:, 1], 0.0)   # du = 0


def dataclass_replace(d, **kw):
    import dataclasses
    return dataclasses.replace(d, **kw)


def test_hard_sigmoid_derivative_is_mathematical():
    y = np.array([0.0, 0.3, 1.0, 0.999])
    g = np.ones(4)
    np.testing.assert_array_equal(ref.activation_backward("hard_sigmoid", y, g), [0, 0.2, 0, 0.2])
    with pytest.raises(GrucValueError, match="pre-activation"):
        ref.activation_backward("gelu", y, g)


def test_softmax_gate_sums_to_one():
    d = ref.random_inputs(2, 2, 3, 4, seed=1)
    f = _run(d, recurrent_activation="softmax")
    np.testing.assert_allclose(f.intermediate("reset").sum(-1), 1.0)


def test_results_are_float64_copies():
    d = ref.random_inputs(2, 1, 2, 2, seed=1)
    x = d.x.astype(np.float32)
    f = ref.forward(x, d.h0, d.input_weights, d.output_weights, d.biases)
    assert f.x.dtype == np.float64 and f.output.dtype == np.float64
    x[:] = 0
    assert np.any(f.x != 0)


# ------------------------------------------------------------------------------------------------
# 4. errors
# ------------------------------------------------------------------------------------------------

def _args(reset_after=False):
    d = ref.random_inputs(3, 2, 3, 4, reset_after=reset_after, seed=1)
    return dict(x=d.x, h0=d.h0, input_weights=d.input_weights, output_weights=d.output_weights,
                biases=d.biases), d


@pytest.mark.parametrize("change,error,pattern", [
    (dict(x=np.zeros((3, 2))), GrucShapeError, r"x has shape \[3, 2\]"),
    (dict(h0=np.zeros((3, 4))), GrucShapeError, r"h0 has shape \[3, 4\]"),
    (dict(input_weights=np.zeros((3, 4, 4))), GrucShapeError,
     r"input_weights has shape \[3, 4, 4\]; expected \[3, 3, 4\]"),
    (dict(output_weights=np.zeros((4, 4, 4))), GrucShapeError, r"output_weights .*\[3, 4, 4\]"),
    (dict(biases=np.zeros((3, 2, 4))), GrucShapeError,
     r"biases has shape \[3, 2, 4\]; expected \[3, 4\]"),
    (dict(attention=np.zeros((3, 2))), GrucShapeError,
     r"attention has shape \[3, 2\]; expected \[2, 3\]"),
    (dict(lengths=0), GrucValueError, r"sequence length 0 .*1\.\.3"),
    (dict(lengths=np.array([1, 4])), GrucValueError, r"sequence length 4 .*1\.\.3"),
    (dict(lengths=np.array([1, 2, 3])), GrucShapeError, r"lengths has shape \[3\].*\[2\]"),
    (dict(lengths=1.5), GrucValueError, r"whole numbers"),
    (dict(lengths=True), GrucTypeError, r"lengths True"),
    (dict(activation="swish"), GrucOptionError, r"unknown activation 'swish'.*tanh, sigmoid"),
    (dict(recurrent_activation="elu"), GrucOptionError, r"recurrent_activation 'elu'.*gelu"),
    (dict(cell_order=("reset", "update", "forget")), GrucValueError,
     r"'forget'.*reset, update, candidate"),
    (dict(cell_order=("reset", "reset", "candidate")), GrucValueError, r"not a permutation"),
    (dict(cell_order=("reset", "update")), GrucValueError, r"not a permutation"),
    (dict(cell_order="reset"), GrucValueError, r"cell_order 'reset' must be a sequence"),
    (dict(x=[["a"]]), GrucTypeError, r"x must be a real numeric array"),
])
def test_forward_errors(change, error, pattern):
    args, _ = _args()
    with pytest.raises(error, match=pattern):
        ref.forward(**{**args, **change})


def test_reset_after_bias_shape_error():
    args, _ = _args(reset_after=False)
    with pytest.raises(GrucShapeError, match=r"biases has shape \[3, 4\]; expected \[3, 2, 4\]"):
        ref.forward(**args, reset_after=True)


def test_backward_errors():
    args, d = _args()
    f = ref.forward(**args)
    with pytest.raises(GrucShapeError, match=r"grad_output has shape \[2, 4\]; expected \[3, 2, 4\]"):
        ref.backward(f, d.grad_output[0])
    g = ref.forward(**args, output_full_sequence=False)
    with pytest.raises(GrucShapeError, match=r"expected \[2, 4\]"):
        ref.backward(g, d.grad_output)
    with pytest.raises(GrucTypeError, match="ForwardResult"):
        ref.backward("nope", d.grad_output)
    assert ref.backward(f, d.grad_output, calc_input_gradients=False).input_grad is None
    assert issubclass(GrucShapeError, GrucError)


def test_aliases_accepted():
    args, _ = _args()
    a = ref.forward(**args, cell_order=("RESET_GATE", "update_gate", "cell"), activation="TANH")
    b = ref.forward(**args)
    np.testing.assert_array_equal(a.output, b.output)
    assert a.cell_order == ref.GATES


# ------------------------------------------------------------------------------------------------
# 5. check_is_close, tolerances, random data
# ------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("actual,expected,rel,abs_,ok", [
    (1.0, 1.0, 0.1, 0.0, True),               # equal
    (0.05, -0.09, 0.1, 1e-5, True),           # both below rel_tol: passes however far apart
    (0.05, 0.11, 0.1, 1e-5, False),           # one not small, not close
    (1.0, 1.05, 0.1, 1e-5, True),             # relative
    (1.0, 1.2, 0.1, 1e-5, False),
    (10.0, 11.05, 0.1, 1e-5, False),          # strong rule: must hold relative to both values
    (10.0, 10.99, 0.1, 1e-5, True),
    (1.0, 1.000005, 0.0, 1e-5, True),         # absolute
    (np.nan, np.nan, 0.1, 1e-5, True),
    (np.nan, 1.0, 0.1, 1e-5, False),
    (0.0, np.nan, 0.1, 1e-5, False),
    (np.inf, np.inf, 0.1, 1e-5, True),
    (np.inf, -np.inf, 0.1, 1e-5, False),
    (np.inf, 1.0, 0.1, 1e-5, False),
])
def test_check_is_close_examples(actual, expected, rel, abs_, ok):
    got, lines = ref.check_is_close(np.array([actual]), np.array([expected]), rel, abs_)
    assert got is ok
    assert len(lines) == (0 if ok else 1)


def test_check_is_close_reports_first_20():
    a = np.arange(60.0).reshape(6, 10)
    e = a.copy()
    e[1:4] += 100.0
    ok, lines = ref.check_is_close(a, e, 0.1, 1e-5, name="out")
    assert not ok and len(lines) == 20
    assert lines[0].startswith("mismatch on out[1, 0]: actual 10.0, expected 110.0")
    assert ref.check_is_close(a, a, 0.1, 1e-5) == (True, [])
    with pytest.raises(GrucShapeError):
        ref.check_is_close(a, a.T, 0.1, 1e-5)


def test_default_tolerances():
    assert ref.default_tolerances("float") == (0.10, 1e-5)
    assert ref.default_tolerances("half") == (0.3, 7e-2)
    with pytest.raises(GrucValueError, match="'int'.*float, half"):
        ref.default_tolerances("int")


def test_random_inputs():
    d = ref.random_inputs(4, 3, 5, 6, reset_after=True, attention=True, random_lengths=True)
    assert d.x.shape == (4, 3, 5) and np.all(np.abs(d.x) <= 4)
    assert d.h0.shape == (3, 6) and np.all(np.abs(d.h0) <= 3)
    assert d.biases.shape == (3, 2, 6) and np.all(np.abs(d.biases) <= 1)
    assert d.attention.shape == (3, 4) and np.all((d.attention >= 0) & (d.attention <= 1))
    assert d.grad_output.shape == (4, 3, 6) and np.all(np.abs(d.grad_output) <= 2)
    assert np.all((d.lengths >= 1) & (d.lengths <= 4))
    again = ref.random_inputs(4, 3, 5, 6, reset_after=True, attention=True, random_lengths=True)
    np.testing.assert_array_equal(d.x, again.x)
    half = ref.random_inputs(2, 2, 2, 2, round_to="half", output_full_sequence=False)
    assert half.grad_output.shape == (2, 2)
    np.testing.assert_array_equal(half.x, half.x.astype(np.float16))
    assert half.x.dtype == np.float64
    f = ref.forward(**d.forward_kwargs(), reset_after=True)
    assert f.output.shape == (4, 3, 6)


def test_random_attention_stays_where_the_device_backward_is_accurate():
    """Half data: scores at most 1 - 2^-7 (the device divides by 1 - a); float: below 1."""
    half = [ref.random_inputs(20, 8, 4, 4, attention=True, round_to="half", seed=seed).attention
            for seed in range(20)]
    assert max(a.max() for a in half) == ref.HALF_ATTENTION_CEILING
    assert min(a.min() for a in half) >= 0
    floats = max(ref.random_inputs(20, 8, 4, 4, attention=True, round_to="float",
                                   seed=seed).attention.max() for seed in range(20))
    assert ref.HALF_ATTENTION_CEILING < floats < 1


def test_half_augru_layer_of_a_seed_that_drew_an_attention_of_one_passes():
    config = GruLayerConfig(sequence_size=8, batch_size=5, input_size=7, output_size=2,
                            data_type="half", cell_order=("candidate", "update", "reset"),
                            with_attention=True, phase="bwd", tiles_per_ipu=16, seed=432,
                            backend="numpy")
    run = run_layer(config)
    assert run.passed, run.mismatches


def test_activation_forward_is_each_activations_float64_definition():
    x = np.linspace(-4.0, 4.0, 17)
    assert np.allclose(ref.activation_forward("tanh", x), np.tanh(x), rtol=0, atol=1e-15)
    assert np.allclose(ref.activation_forward("sigmoid", x), 1 / (1 + np.exp(-x)), atol=1e-15)
    assert np.allclose(ref.activation_forward("relu", x), np.maximum(x, 0))
    assert np.allclose(ref.activation_forward("hard_sigmoid", x), np.clip(0.2 * x + 0.5, 0, 1))
