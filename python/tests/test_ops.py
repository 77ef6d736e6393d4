"""Every op against a numpy reference: forward, and the gradient that
hetex's backward gives against central differences of the same reference
(float64), for f32, f16 and bf16 storage.

Each case makes its float inputs parameters (so backward reaches them),
writes their values, and fetches the op's output and each input's gradient
of loss = sum(op(...) * R) for a fixed random R."""
import math

import numpy as np
import pytest

import hetex
from conftest import as_f64, cpu_session, value_of

FLOATS = ("f32", "f16", "bf16")
# tolerances relative to the largest reference magnitude: f32 keeps ~7
# digits, f16 ~3, bf16 ~2 (storage rounding of inputs, output and gradients)
TOL = {"f32": 2e-5, "f16": 2e-3, "bf16": 1.6e-2}
GRAD_TOL = {"f32": 2e-4, "f16": 6e-3, "bf16": 4e-2}


def _gelu(x):
    return 0.5 * x * (1 + np.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3)))


def _gelu_erf(x):
    return 0.5 * x * (1 + np.vectorize(math.erf)(x / math.sqrt(2)))


def _softmax(x):
    e = np.exp(x - x.max(-1, keepdims=True))
    return e / e.sum(-1, keepdims=True)


def _layernorm(x, g, b, eps=1e-5):
    m = x.mean(-1, keepdims=True)
    v = ((x - m) ** 2).mean(-1, keepdims=True)
    return (x - m) / np.sqrt(v + eps) * g + b


def _conv2d(x, w, stride=1, pad=0):
    n, c, h, wd = x.shape
    co, _, kh, kw = w.shape
    xp = np.pad(x, ((0, 0), (0, 0), (pad, pad), (pad, pad)))
    oh, ow = (h + 2 * pad - kh) // stride + 1, (wd + 2 * pad - kw) // stride + 1
    out = np.zeros((n, co, oh, ow))
    for i in range(oh):
        for j in range(ow):
            patch = xp[:, :, i * stride:i * stride + kh, j * stride:j * stride + kw]
            out[:, :, i, j] = np.einsum("nckl,ockl->no", patch, w)
    return out


def _pool(x, k, fn):
    n, c, h, w = x.shape
    return fn(x.reshape(n, c, h // k, k, w // k, k), axis=(3, 5))


def _batchnorm_train(x, g, b, eps=1e-5):
    m = x.mean(0)
    v = x.var(0)
    return (x - m) / np.sqrt(v + eps) * g + b


# name: (float input shapes, builder(graph tensors) -> tensor, numpy reference,
#        input generator override or None, integer inputs)
def _pos(rng, shape):
    return rng.uniform(0.5, 2.0, shape)


CASES = {
    "add": ([(3, 4), (4,)], lambda a, b: a + b, lambda a, b: a + b, None),
    "sub": ([(3, 4), (3, 1)], lambda a, b: a - b, lambda a, b: a - b, None),
    "mul": ([(2, 3, 4), (3, 4)], lambda a, b: a * b, lambda a, b: a * b, None),
    "div": ([(3, 4), (3, 4)], lambda a, b: a / b, lambda a, b: a / b, _pos),
    "matmul": ([(3, 4), (4, 5)], lambda a, b: a @ b, lambda a, b: a @ b, None),
    "matmul_tt": ([(4, 3), (5, 4)], lambda a, b: hetex.matmul(a, b, True, True),
                  lambda a, b: a.T @ b.T, None),
    "matmul_batched": ([(2, 3, 4), (2, 4, 2)], lambda a, b: a @ b, lambda a, b: a @ b, None),
    "scale": ([(3, 4)], lambda a: a.scale(-2.5), lambda a: a * -2.5, None),
    "bias_add": ([(3, 4), (4,)], hetex.bias_add, lambda a, b: a + b, None),
    "relu": ([(3, 4)], hetex.relu, lambda a: np.maximum(a, 0), None),
    "gelu": ([(3, 4)], hetex.gelu, _gelu, None),
    "gelu_erf": ([(3, 4)], hetex.gelu_erf, _gelu_erf, None),
    "sigmoid": ([(3, 4)], hetex.sigmoid, lambda a: 1 / (1 + np.exp(-a)), None),
    "tanh": ([(3, 4)], hetex.tanh, np.tanh, None),
    "exp": ([(3, 4)], hetex.exp, np.exp, None),
    "log": ([(3, 4)], hetex.log, np.log, _pos),
    "sqrt": ([(3, 4)], hetex.sqrt, np.sqrt, _pos),
    "softmax": ([(3, 5)], hetex.softmax, _softmax, None),
    "log_softmax": ([(3, 5)], hetex.log_softmax, lambda a: np.log(_softmax(a)), None),
    "layernorm": ([(3, 6), (6,), (6,)], hetex.layernorm, _layernorm, None),
    "reshape": ([(3, 4)], lambda a: a.reshape((2, -1)), lambda a: a.reshape(2, -1), None),
    "permute": ([(2, 3, 4)], lambda a: a.permute((2, 0, 1)), lambda a: a.transpose(2, 0, 1), None),
    "transpose": ([(3, 4)], lambda a: a.transpose(), lambda a: a.T, None),
    "concat": ([(2, 3), (2, 2)], lambda a, b: hetex.concat([a, b], axis=1),
               lambda a, b: np.concatenate([a, b], 1), None),
    "slice": ([(3, 5)], lambda a: a.slice(1, 1, 4), lambda a: a[:, 1:4], None),
    "reduce_sum": ([(2, 3, 4)], lambda a: a.sum(axes=(0, 2), keepdims=True),
                   lambda a: a.sum((0, 2), keepdims=True), None),
    "reduce_mean": ([(2, 3, 4)], lambda a: a.mean(axes=-1), lambda a: a.mean(-1), None),
    "masked_softmax": ([(2, 4, 4)], lambda a: a.causal_mask().softmax(),
                       lambda a: _softmax(np.where(np.triu(np.ones((4, 4)), 1) > 0, -np.inf, a)),
                       None),
    "mse": ([(3, 4), (3, 4)], hetex.mse, lambda a, b: ((a - b) ** 2).mean(), None),
    "bce_with_logits": ([(3, 4)], lambda a: hetex.bce_with_logits(a, a.graph.find("t")),
                        None, None),
    "conv2d": ([(2, 3, 5, 5), (4, 3, 3, 3)], lambda x, w: hetex.conv2d(x, w, stride=2, padding=1),
               lambda x, w: _conv2d(x, w, 2, 1), None),
    "max_pool2d": ([(2, 2, 4, 4)], lambda x: x.max_pool2d(2), lambda x: _pool(x, 2, np.max), None),
    "avg_pool2d": ([(2, 2, 4, 4)], lambda x: x.avg_pool2d(2), lambda x: _pool(x, 2, np.mean), None),
    "global_avg_pool2d": ([(2, 3, 2, 2)], hetex.global_avg_pool2d, lambda x: x.mean((2, 3)), None),
    "batchnorm": ([(6, 3), (3,), (3,)], lambda x, g, b: hetex.batchnorm(x, g, b),
                  _batchnorm_train, None),
}
BCE_T = np.array([[0, 1, 1, 0], [1, 0, 0, 1], [1, 1, 0, 0]], np.float64)


def _bce(a):
    return (np.maximum(a, 0) - a * BCE_T + np.log1p(np.exp(-np.abs(a)))).mean()


CASES["bce_with_logits"] = (CASES["bce_with_logits"][0], CASES["bce_with_logits"][1], _bce, None)


def _build(name, dtype, rng):
    shapes, build, ref, gen = CASES[name]
    g = hetex.Graph()
    if name == "bce_with_logits":
        g.constant("t", BCE_T, dtype=dtype)
    params = [g.param(f"p{i}", s, dtype) for i, s in enumerate(shapes)]
    out = build(*params)
    r = rng.uniform(-1, 1, out.shape)
    rt = g.constant("R", r, dtype=dtype)
    loss = (out * rt).sum().cast("f32") if out.dtype != "f32" else (out * rt).sum()
    g.backward(loss)
    grads = [p.grad for p in params]
    values = []
    for s in shapes:
        v = gen(rng, s) if gen else rng.uniform(-1.5, 1.5, s)
        values.append(v)
    return g, params, out, grads, r, values, ref


def _numeric_grad(ref, xs, r, i):
    h = 1e-6
    x = xs[i]
    gr = np.zeros_like(x)
    it = np.nditer(x, flags=["multi_index"])
    for _ in it:
        idx = it.multi_index
        old = x[idx]
        x[idx] = old + h
        up = np.sum(ref(*xs) * r)
        x[idx] = old - h
        down = np.sum(ref(*xs) * r)
        x[idx] = old
        gr[idx] = (up - down) / (2 * h)
    return gr


@pytest.mark.parametrize("dtype", FLOATS)
@pytest.mark.parametrize("name", sorted(CASES))
def test_op(name, dtype, rng):
    g, params, out, grads, r, values, ref = _build(name, dtype, rng)
    s = cpu_session(g)
    for p, v in zip(params, values):
        s.write(p, value_of(dtype, v))
    # the values as stored (rounded to dtype) are the reference's inputs
    xs = [as_f64(s.read(p)) for p in params]
    got = s.run(None, [out] + grads, train=name == "batchnorm")
    want = np.asarray(ref(*xs), np.float64)
    r = as_f64(value_of(dtype, r))  # R as stored
    fwd = as_f64(got[0])
    assert fwd.shape == want.shape
    scale = max(1.0, np.abs(want[np.isfinite(want)]).max())
    np.testing.assert_allclose(fwd, want, rtol=0, atol=TOL[dtype] * scale * 4, err_msg="forward")
    for i, gr in enumerate(got[1:]):
        num = _numeric_grad(ref, [x.copy() for x in xs], r, i)
        gs = max(1.0, np.abs(num).max())
        np.testing.assert_allclose(as_f64(gr), num, rtol=0, atol=GRAD_TOL[dtype] * gs * 4,
                                   err_msg=f"gradient of input {i}")


def test_gather_and_cross_entropy(rng):
    g = hetex.Graph()
    table = g.param("table", (6, 4))
    ids = g.input("ids", (5,), "i32")
    labels = g.input("labels", (5,), "i64")
    logits = hetex.gather(table, ids)
    loss = hetex.cross_entropy(logits, labels)
    g.backward(loss)
    s = cpu_session(g)
    tv = rng.uniform(-1, 1, (6, 4)).astype(np.float32)
    s.write(table, tv)
    idv = np.array([0, 5, 2, 2, 3], np.int32)
    lv = np.array([1, 0, 3, 3, 2], np.int64)
    got_logits, got_loss, got_grad = s.run({ids: idv, labels: lv}, [logits, loss, table.grad])
    np.testing.assert_array_equal(got_logits, tv[idv])
    x = tv[idv].astype(np.float64)
    lse = np.log(np.exp(x - x.max(1, keepdims=True)).sum(1)) + x.max(1)
    np.testing.assert_allclose(got_loss, (lse - x[np.arange(5), lv]).mean(), rtol=1e-6)
    p = np.exp(x - lse[:, None])
    p[np.arange(5), lv] -= 1
    want = np.zeros((6, 4))
    np.add.at(want, idv, p / 5)
    np.testing.assert_allclose(got_grad, want, atol=1e-6)


def test_dropout_is_identity_outside_training(rng):
    g = hetex.Graph()
    x = g.param("x", (4, 8))
    y = x.dropout(0.5, seed=3)
    loss = y.sum()
    g.backward(loss)
    s = cpu_session(g)
    v = rng.uniform(-1, 1, (4, 8)).astype(np.float32)
    s.write(x, v)
    np.testing.assert_array_equal(s.run(None, y), v)
    yt = s.run(None, y, train=True)
    kept = yt != 0
    np.testing.assert_allclose(yt[kept], v[kept] * 2, rtol=1e-6)
    assert 0 < kept.sum() < v.size


def test_operators_with_numbers(rng):
    g = hetex.Graph()
    x = g.input("x", (2, 3))
    ys = [x + 1.5, 2.0 - x, x * 3, 1.0 / x, -x, x / 4]
    s = cpu_session(g)
    v = rng.uniform(0.5, 2, (2, 3)).astype(np.float32)
    got = s.run({x: v}, ys)
    wants = [v + np.float32(1.5), np.float32(2) - v, v * np.float32(3), np.float32(1) / v, -v,
             v / np.float32(4)]
    for a, b in zip(got, wants):
        np.testing.assert_array_equal(a, b)
