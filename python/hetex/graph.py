"""Graph and Tensor: the computation graph a session runs.

A Graph owns its tensors (C: hx_graph). A Tensor is a handle to one value of
a graph and keeps that graph alive; a Graph keeps alive the embedding tables
its ops use; a Session keeps its graph alive. So the order in which Python
drops them never frees anything early (the C library's own rule: a graph
outlives its sessions' use of it, a table the graphs that use it).

Threads: one thread per graph (the header's rule); a graph is frozen while a
session over it exists (adding ops raises StateError).
"""
import contextlib
import numbers

import numpy as np

from . import dtypes
from ._enums import name as _enum_name
from ._enums import value as _enum_value
from ._lib import ffi, lib, text
from .errors import InvalidArgumentError, check, check_ptr

TARGETS = ("default", "cpu", "device", "auto")


def target_value(t):
    """hx_target for "default", "cpu", "device", "auto" (or the enum value)."""
    return _enum_value("HX_TARGET_", "target", t, TARGETS)


def shape_array(shape):
    """(ndim, int64_t[] or NULL) for a shape given as an int or a sequence."""
    if isinstance(shape, numbers.Integral):
        shape = (int(shape),)
    shape = tuple(int(d) for d in shape)
    return len(shape), (ffi.new("int64_t[]", shape) if shape else ffi.NULL)


class Tensor:
    """A value of a graph: an input, parameter, constant or an op's output.

    Operators build ops: `a + b`, `a - b`, `a * b`, `a / b` (numpy
    broadcasting; a Python number becomes a scalar constant of a's dtype),
    `a @ b` (matmul), `-a`. The op methods (`relu()`, `reshape(...)`, ...) are
    those of hetex.ops with this tensor first."""

    __slots__ = ("_ptr", "graph", "_shape", "_dtype", "_spec", "__weakref__")

    def __init__(self, graph, ptr):
        self._ptr = ptr
        self.graph = graph
        self._shape = None
        self._dtype = None
        self._spec = None

    def _make_spec(self):
        """(pointer, shape, numpy dtype, bytes): what Session.run checks and passes."""
        self._spec = (self._ptr, self.shape, self.numpy_dtype, self.nbytes)
        return self._spec

    # ---- what it is
    @property
    def name(self):
        return text(lib.hx_tensor_name(self._ptr))

    @name.setter
    def name(self, value):
        check(lib.hx_tensor_set_name(self._ptr, str(value).encode()))

    @property
    def shape(self):
        if self._shape is None:
            p = self._ptr
            self._shape = tuple(lib.hx_tensor_dim(p, i) for i in range(lib.hx_tensor_ndim(p)))
        return self._shape

    @property
    def ndim(self):
        return len(self.shape)

    @property
    def dtype(self):
        """"f32", "f16", "bf16", "i32" or "i64"."""
        if self._dtype is None:
            self._dtype = dtypes.from_enum(lib.hx_tensor_dtype(self._ptr))
        return self._dtype

    @property
    def numpy_dtype(self):
        return dtypes.numpy_of(self.dtype)

    @property
    def numel(self):
        return lib.hx_tensor_numel(self._ptr)

    @property
    def nbytes(self):
        return lib.hx_tensor_nbytes(self._ptr)

    @property
    def kind(self):
        """"input", "parameter", "constant", "intermediate", "update" or "state"."""
        return _enum_name("HX_TENSOR_", lib.hx_tensor_kind_of(self._ptr))

    @property
    def op(self):
        """The op that makes it ("matmul", ...; "input", "param", "constant" for leaves)."""
        return text(lib.hx_tensor_op_name(self._ptr))

    @property
    def target(self):
        """The target attribute: "default", "cpu", "device" or "auto" (where the
        session placed it: Session.placement_summary())."""
        return _enum_name("HX_TARGET_", lib.hx_tensor_target(self._ptr))

    @target.setter
    def target(self, t):
        check(lib.hx_tensor_set_target(self._ptr, target_value(t)))

    def on(self, t):
        """Sets the target attribute and returns self: `(x @ w).on("cpu")`."""
        self.target = t
        return self

    @property
    def grad(self):
        """d loss / d self (after Graph.backward); NotFoundError without one."""
        return Tensor(self.graph, check_ptr(lib.hx_tensor_grad(self._ptr)))

    def __repr__(self):
        return f"<hetex.Tensor '{self.name}' {self.dtype}{list(self.shape)} {self.op}>"

    # ---- operators
    def __add__(self, o):
        return _ops().add(self, o)

    def __radd__(self, o):
        return _ops().add(o, self)

    def __sub__(self, o):
        return _ops().sub(self, o)

    def __rsub__(self, o):
        return _ops().sub(o, self)

    def __mul__(self, o):
        return _ops().mul(self, o)

    def __rmul__(self, o):
        return _ops().mul(o, self)

    def __truediv__(self, o):
        return _ops().div(self, o)

    def __rtruediv__(self, o):
        return _ops().div(o, self)

    def __matmul__(self, o):
        return _ops().matmul(self, o)

    def __rmatmul__(self, o):
        return _ops().matmul(o, self)

    def __neg__(self):
        return _ops().scale(self, -1.0)

    def __getattr__(self, attr):
        # op methods: x.relu(), x.reshape((2, 3)), x.sum(axes=1) ...
        fn = _ops().METHODS.get(attr)
        if fn is None:
            raise AttributeError(f"hetex.Tensor has no attribute '{attr}'")
        return lambda *a, **k: fn(self, *a, **k)

    def __dir__(self):
        return sorted(set(object.__dir__(self)) | set(_ops().METHODS))


def _ops():
    from . import ops
    return ops


class Graph:
    """A computation graph (hx_graph). Build it with inputs, parameters,
    constants and ops, then `backward(loss)` and `apply_optimizer(...)`;
    a Session runs it."""

    def __init__(self):
        self._ptr = check_ptr(lib.hx_graph_create())
        self._tables = []  # embedding tables the graph's ops use: kept alive
        self._n_consts = 0

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            lib.hx_graph_free(ptr)

    def _wrap(self, ptr):
        return Tensor(self, check_ptr(ptr))

    # ---- leaves
    def input(self, name, shape, dtype="f32"):
        """An input fed at each run."""
        n, s = shape_array(shape)
        return self._wrap(lib.hx_graph_input(self._ptr, name.encode(), dtypes.enum_of(dtype), n, s))

    def param(self, name, shape, dtype="f32", init=None, target=None):
        """A trained parameter, initialised by the session from its seed and the
        name with `init` (hetex.init.*; None: zeros)."""
        from . import init as _init
        n, s = shape_array(shape)
        t = self._wrap(lib.hx_graph_param(self._ptr, name.encode(), dtypes.enum_of(dtype), n, s,
                                          init if init is not None else _init.zeros()))
        if target is not None:
            t.target = target
        return t

    def constant(self, name, value, dtype=None):
        """A constant holding a copy of `value` (an array; dtype: its own, or the
        one given, converted with numpy; bf16 from f32 values rounds to nearest
        even)."""
        if dtype is None:
            a = np.asarray(value)
            if a.dtype == np.float64:
                a = a.astype(np.float32)
            elif a.dtype == np.int64 or a.dtype.kind in "iu":
                a = a.astype(np.int64) if a.dtype != np.int32 else a
            name_dt = dtypes.name_of(a.dtype)
        else:
            name_dt = dtypes.name_of(dtype)
            a = np.asarray(value)
            if name_dt == "bf16" and a.dtype not in (np.dtype(np.uint16), dtypes.BF16_NUMPY):
                a = dtypes.to_bf16(a)
            else:
                a = a.astype(dtypes.numpy_of(name_dt), copy=False)
        a = np.asarray(a, order="C")
        n, s = shape_array(a.shape)
        return self._wrap(lib.hx_graph_constant(self._ptr, name.encode(), dtypes.enum_of(name_dt),
                                                n, s, ffi.from_buffer(a)))

    def _scalar(self, value, dtype):
        """A scalar constant of `dtype` for an operator's number."""
        while True:
            self._n_consts += 1
            name = f"py.scalar.{self._n_consts}"
            if lib.hx_graph_find(self._ptr, name.encode()) == ffi.NULL:
                return self.constant(name, np.array(value, dtype=np.float64), dtype)

    # ---- lookup
    def find(self, name):
        """The tensor named `name`; NotFoundError if none."""
        return self._wrap(lib.hx_graph_find(self._ptr, name.encode()))

    __getitem__ = find

    def __contains__(self, name):
        return lib.hx_graph_find(self._ptr, name.encode()) != ffi.NULL

    def __len__(self):
        return lib.hx_graph_tensor_count(self._ptr)

    # ---- scopes
    @contextlib.contextmanager
    def target(self, t):
        """Ops added inside run on `t` unless they say otherwise:
        `with g.target("cpu"): ...` (a stack, 16 deep)."""
        check(lib.hx_graph_push_target(self._ptr, target_value(t)))
        try:
            yield self
        finally:
            check(lib.hx_graph_pop_target(self._ptr))

    @contextlib.contextmanager
    def recompute(self):
        """Ops added inside form one block recomputed in backward by sessions
        with offload_config={"recompute": True}."""
        check(lib.hx_graph_push_recompute(self._ptr))
        try:
            yield self
        finally:
            check(lib.hx_graph_pop_recompute(self._ptr))

    # ---- training
    def backward(self, loss):
        """Gradient nodes of the f32 scalar `loss` for every parameter and
        embedding lookup it depends on (once per graph)."""
        check(lib.hx_graph_backward(self._ptr, loss._ptr))

    def apply_optimizer(self, optimizer, param=None):
        """Update nodes with `optimizer` (hetex.optim.*) for `param`, or for every
        parameter with a gradient (and every table with an optimizer) when None."""
        cfg = ffi.new("hx_optimizer_config *", optimizer.config())
        check(lib.hx_graph_apply_optimizer(self._ptr, param._ptr if param is not None else ffi.NULL,
                                           cfg))


def _attach_contracts():
    from ._doc import attach_methods
    attach_methods(Tensor, {
        "name": ("hx_tensor_name", "hx_tensor_set_name"), "shape": ("hx_tensor_ndim", "hx_tensor_dim"),
        "dtype": "hx_tensor_dtype", "numel": "hx_tensor_numel", "nbytes": "hx_tensor_nbytes",
        "kind": "hx_tensor_kind_of", "op": "hx_tensor_op_name",
        "target": ("hx_tensor_target", "hx_tensor_set_target"), "grad": "hx_tensor_grad"})
    attach_methods(Graph, {
        "__init__": "hx_graph_create", "input": "hx_graph_input", "param": "hx_graph_param",
        "constant": "hx_graph_constant", "find": "hx_graph_find", "__len__": "hx_graph_tensor_count",
        "target": ("hx_graph_push_target", "hx_graph_pop_target"),
        "recompute": ("hx_graph_push_recompute", "hx_graph_pop_recompute"),
        "backward": "hx_graph_backward", "apply_optimizer": "hx_graph_apply_optimizer"})


_attach_contracts()
