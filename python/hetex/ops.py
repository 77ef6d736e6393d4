"""The ops of the header as functions over Tensors (also Tensor methods).

Every function takes `target=` ("cpu", "device", "auto"; None: the graph's
scoped default, then the op's own) and `name=` (a name to fetch the result
by); shape and dtype errors raise ShapeError / DtypeError when the op is
added, naming it and its inputs. Float ops take f32, f16 or bf16 (16-bit
storage, f32 arithmetic, one rounding per result).
"""
import numbers

import numpy as np

from ._enums import value as _enum_value
from ._lib import ffi, lib
from . import dtypes
from .errors import InvalidArgumentError
from .graph import Tensor


def _graph(*xs):
    for x in xs:
        if isinstance(x, Tensor):
            return x.graph
        if isinstance(x, (list, tuple)):
            for y in x:
                if isinstance(y, Tensor):
                    return y.graph
    raise InvalidArgumentError("an op needs at least one hetex.Tensor input")


def _ptr(x):
    if x is None:
        return ffi.NULL
    if not isinstance(x, Tensor):
        raise InvalidArgumentError(f"expected a hetex.Tensor, got {type(x).__name__}")
    return x._ptr


def _done(g, ptr, target, name):
    t = g._wrap(ptr)
    if target is not None:
        t.target = target
    if name is not None:
        t.name = name
    return t


def _operand(x, like):
    """x as a Tensor: a number becomes a scalar constant of like's dtype."""
    if isinstance(x, Tensor):
        return x
    if isinstance(x, (numbers.Number, np.generic)) and not isinstance(x, bool):
        return like.graph._scalar(x, like.dtype)
    raise InvalidArgumentError(f"cannot combine a hetex.Tensor with {type(x).__name__}")


def _binary(fn):
    def op(a, b, *, target=None, name=None):
        like = a if isinstance(a, Tensor) else b
        if not isinstance(like, Tensor):
            raise InvalidArgumentError("an op needs at least one hetex.Tensor input")
        a, b = _operand(a, like), _operand(b, like)
        g = like.graph
        return _done(g, fn(g._ptr, a._ptr, b._ptr), target, name)
    return op


add = _binary(lib.hx_add)
sub = _binary(lib.hx_sub)
mul = _binary(lib.hx_mul)
div = _binary(lib.hx_div)
for _n, _f in (("add", add), ("sub", sub), ("mul", mul), ("div", div)):
    _f.__name__ = _f.__qualname__ = _n
add.__doc__ = "a + b with numpy broadcasting."
sub.__doc__ = "a - b with numpy broadcasting."
mul.__doc__ = "a * b with numpy broadcasting."
div.__doc__ = "a / b with numpy broadcasting."


def matmul(a, b, trans_a=False, trans_b=False, *, target=None, name=None):
    """(..., M, K) @ (..., K, N); b may be 2-D and shared by every batch."""
    g = _graph(a, b)
    return _done(g, lib.hx_matmul(g._ptr, _ptr(a), _ptr(b), bool(trans_a), bool(trans_b)),
                 target, name)


def scale(x, s, *, target=None, name=None):
    """x * s for a finite number s."""
    return _done(x.graph, lib.hx_scale(x.graph._ptr, _ptr(x), float(s)), target, name)


def bias_add(x, b, *, target=None, name=None):
    """x (..., N) + b (N)."""
    g = _graph(x, b)
    return _done(g, lib.hx_bias_add(g._ptr, _ptr(x), _ptr(b)), target, name)


def _unary(fn, doc):
    def op(x, *, target=None, name=None):
        g = _graph(x)
        return _done(g, fn(g._ptr, _ptr(x)), target, name)
    op.__doc__ = doc
    return op


relu = _unary(lib.hx_relu, "max(x, 0).")
gelu = _unary(lib.hx_gelu, "GELU, the tanh approximation.")
gelu_erf = _unary(lib.hx_gelu_erf, "GELU, the exact x Phi(x) = x (1 + erf(x / sqrt 2)) / 2.")
sigmoid = _unary(lib.hx_sigmoid, "1 / (1 + exp(-x)).")
tanh = _unary(lib.hx_tanh, "tanh(x).")
exp = _unary(lib.hx_exp, "exp(x).")
log = _unary(lib.hx_log, "log(x).")
sqrt = _unary(lib.hx_sqrt, "sqrt(x).")
softmax = _unary(lib.hx_softmax, "softmax over the last axis.")
log_softmax = _unary(lib.hx_log_softmax, "log-softmax over the last axis.")
causal_mask = _unary(lib.hx_causal_mask, "x (..., T, T) with -inf above the diagonal.")
global_avg_pool2d = _unary(lib.hx_global_avg_pool2d, "(N, C, H, W) -> (N, C): mean over H, W.")
for _n in ("relu", "gelu", "gelu_erf", "sigmoid", "tanh", "exp", "log", "sqrt", "softmax", "log_softmax",
           "causal_mask", "global_avg_pool2d"):
    globals()[_n].__name__ = globals()[_n].__qualname__ = _n


def layernorm(x, gamma, beta, eps=1e-5, *, target=None, name=None):
    """Layer normalisation over the last axis with gamma, beta (N)."""
    g = _graph(x)
    return _done(g, lib.hx_layernorm(g._ptr, _ptr(x), _ptr(gamma), _ptr(beta), float(eps)),
                 target, name)


def reshape(x, shape, *, target=None, name=None):
    """The same elements in `shape` (one dim may be -1)."""
    from .graph import shape_array
    n, s = shape_array(shape)
    return _done(x.graph, lib.hx_reshape(x.graph._ptr, _ptr(x), n, s), target, name)


def permute(x, perm, *, target=None, name=None):
    """Output dim i is input dim perm[i]."""
    p = ffi.new("int[]", [int(i) for i in perm]) if len(perm) else ffi.NULL
    return _done(x.graph, lib.hx_permute(x.graph._ptr, _ptr(x), p), target, name)


def transpose(x, *, target=None, name=None):
    """The last two dims swapped (a permute)."""
    n = x.ndim
    if n < 2:
        raise InvalidArgumentError(f"transpose of '{x.name}' needs 2 dims or more, it has {n}")
    perm = list(range(n - 2)) + [n - 1, n - 2]
    return permute(x, perm, target=target, name=name)


def concat(xs, axis=0, *, target=None, name=None):
    """xs joined along axis."""
    g = _graph(xs)
    arr = ffi.new("hx_tensor *[]", [_ptr(x) for x in xs])
    return _done(g, lib.hx_concat(g._ptr, len(xs), arr, int(axis)), target, name)


def slice(x, axis, start, end, *, target=None, name=None):  # noqa: A001
    """Elements [start, end) of one axis."""
    return _done(x.graph, lib.hx_slice(x.graph._ptr, _ptr(x), int(axis), int(start), int(end)),
                 target, name)


def _reduce(fn):
    def op(x, axes=None, keepdims=False, *, target=None, name=None):
        if axes is None:
            n, a = 0, ffi.NULL
        else:
            axes = [int(axes)] if isinstance(axes, numbers.Integral) else [int(i) for i in axes]
            n, a = len(axes), ffi.new("int[]", axes)
        return _done(x.graph, fn(x.graph._ptr, _ptr(x), n, a, bool(keepdims)), target, name)
    return op


reduce_sum = _reduce(lib.hx_reduce_sum)
reduce_mean = _reduce(lib.hx_reduce_mean)
reduce_sum.__name__ = reduce_sum.__qualname__ = "reduce_sum"
reduce_mean.__name__ = reduce_mean.__qualname__ = "reduce_mean"
reduce_sum.__doc__ = "Sum over axes (None: all)."
reduce_mean.__doc__ = "Mean over axes (None: all)."


def cast(x, dtype, *, target=None, name=None):
    """Between f32, f16 and bf16 (round to nearest even)."""
    return _done(x.graph, lib.hx_cast(x.graph._ptr, _ptr(x), dtypes.enum_of(dtype)), target, name)


def gather(table, ids, *, target=None, name=None):
    """Rows of table (V, D) named by ids (i32/i64) -> (..., D)."""
    g = _graph(table, ids)
    return _done(g, lib.hx_gather(g._ptr, _ptr(table), _ptr(ids)), target, name)


def cross_entropy(logits, labels, *, target=None, name=None):
    """Mean cross-entropy of logits (N, C) and labels (N) in [0, C)."""
    g = _graph(logits)
    return _done(g, lib.hx_cross_entropy(g._ptr, _ptr(logits), _ptr(labels)), target, name)


def bce_with_logits(logits, targets, *, target=None, name=None):
    """Mean sigmoid cross-entropy of two tensors of one shape."""
    g = _graph(logits)
    return _done(g, lib.hx_bce_with_logits(g._ptr, _ptr(logits), _ptr(targets)), target, name)


def mse(pred, tgt, *, target=None, name=None):
    """Mean squared error of two tensors of one shape."""
    g = _graph(pred)
    return _done(g, lib.hx_mse(g._ptr, _ptr(pred), _ptr(tgt)), target, name)


def dropout(x, p, seed=0, *, target=None, name=None):
    """Active in training runs only; the mask is a pure function of (seed, op, step)."""
    return _done(x.graph, lib.hx_dropout(x.graph._ptr, _ptr(x), float(p), int(seed)), target, name)


def _pair(v):
    if isinstance(v, numbers.Integral):
        return [int(v), int(v)]
    return [int(v[0]), int(v[1])]


def conv2d(x, w, stride=1, padding=0, dilation=1, groups=1, *, target=None, name=None):
    """NCHW cross-correlation of x (N, C, H, W) with w (C_out, C / groups, KH, KW)."""
    p = ffi.new("hx_conv2d_params *")
    p.stride, p.padding, p.dilation = _pair(stride), _pair(padding), _pair(dilation)
    p.groups = int(groups)
    g = _graph(x, w)
    return _done(g, lib.hx_conv2d(g._ptr, _ptr(x), _ptr(w), p), target, name)


def _pool(fn):
    def op(x, kernel, stride=None, padding=0, *, target=None, name=None):
        k = _pair(kernel)
        s = _pair(stride) if stride is not None else [0, 0]
        pd = _pair(padding)
        return _done(x.graph, fn(x.graph._ptr, _ptr(x), k[0], k[1], s[0], s[1], pd[0], pd[1]),
                     target, name)
    return op


max_pool2d = _pool(lib.hx_max_pool2d)
avg_pool2d = _pool(lib.hx_avg_pool2d)
max_pool2d.__name__ = max_pool2d.__qualname__ = "max_pool2d"
avg_pool2d.__name__ = avg_pool2d.__qualname__ = "avg_pool2d"
max_pool2d.__doc__ = "Max pooling over (kh, kw) windows (stride None: the kernel)."
avg_pool2d.__doc__ = "Average pooling over (kh, kw) windows, padding counted."


def batchnorm(x, gamma, beta, momentum=0.1, eps=1e-5, *, target=None, name=None):
    """Batch normalisation per channel of x (N, C, H, W) or (N, C)."""
    g = _graph(x)
    return _done(g, lib.hx_batchnorm(g._ptr, _ptr(x), _ptr(gamma), _ptr(beta), float(momentum),
                                     float(eps)), target, name)


def _use_table(g, table, ptr):
    t = g._wrap(ptr)
    if not any(u is table for u in g._tables):
        g._tables.append(table)  # the graph keeps the table alive
    return t


def embedding_lookup(table, ids, *, name=None):
    """ids (...) i32/i64 -> (..., dim) f32 rows of a host EmbeddingTable (on the CPU)."""
    g = _graph(ids)
    t = _use_table(g, table, lib.hx_embedding_lookup(g._ptr, table._handle(), _ptr(ids)))
    if name is not None:
        t.name = name
    return t


def embedding_bag(table, ids, offsets, per_sample_weights=None, mode="sum",
                  include_last_offset=False, padding_id=None, *, name=None):
    """torch.nn.EmbeddingBag over a host table: ids (n), offsets (bags) ->
    (bags, dim) f32; mode "sum", "mean" or "max"; padding_id skipped."""
    g = _graph(ids)
    m = _enum_value("HX_EMBEDDING_BAG_", "embedding_bag mode", mode, ("sum", "mean", "max"))
    flags = (lib.HX_EMBEDDING_BAG_INCLUDE_LAST_OFFSET if include_last_offset else 0) | \
            (lib.HX_EMBEDDING_BAG_PADDING if padding_id is not None else 0)
    t = _use_table(g, table, lib.hx_embedding_bag(
        g._ptr, table._handle(), _ptr(ids), _ptr(offsets), _ptr(per_sample_weights), m, flags,
        int(padding_id) if padding_id is not None else 0))
    if name is not None:
        t.name = name
    return t


# Tensor methods: x.relu(), x.sum(...), x.T() ...
METHODS = {
    "matmul": matmul, "scale": scale, "bias_add": bias_add, "relu": relu, "gelu": gelu,
    "gelu_erf": gelu_erf, "sigmoid": sigmoid, "tanh": tanh, "exp": exp, "log": log, "sqrt": sqrt, "softmax": softmax,
    "log_softmax": log_softmax, "layernorm": layernorm, "reshape": reshape, "permute": permute,
    "transpose": transpose, "slice": slice, "sum": reduce_sum, "mean": reduce_mean,
    "cast": cast, "causal_mask": causal_mask, "dropout": dropout, "max_pool2d": max_pool2d,
    "avg_pool2d": avg_pool2d, "global_avg_pool2d": global_avg_pool2d,
}


def _attach_contracts():
    from ._doc import attach
    names = {"reduce_sum": "hx_reduce_sum", "reduce_mean": "hx_reduce_mean"}
    for name, fn in list(globals().items()):
        if callable(fn) and not name.startswith("_") and getattr(fn, "__module__", "") == __name__:
            if name in ("transpose",):
                attach(fn, "hx_permute")
            else:
                attach(fn, names.get(name, "hx_" + name))


_attach_contracts()
