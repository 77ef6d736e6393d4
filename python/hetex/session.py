"""Session: places a graph on the CPU and the accelerator and runs it.

    s = hetex.Session(g, accelerator="emu", offload_config={"offload_param": "cpu"},
                      seed=1, n_threads=2)
    loss = s.run({"x": xb, "y": yb}, loss_tensor, train=True)

Keywords besides accelerator and offload_config are the fields of
hx_session_config by name (n_threads, seed, max_device_memory, fallback,
loss_scale={...}, emu_cost={...}, trace_path, clip_grad_norm,
delayed_param_update, auto_placement, ...). offload_config takes
MindSpore's offload_config keys as a dict (offload_param, offload_path,
offload_cpu_size, offload_disk_size, host_mem_block_size, enable_aio,
enable_pinned_mem, auto_offload, chunk_size, prefetch_depth; and hetex's
offload_activations, recompute); the library's parser checks them.
Data parallel: comm=hetex.Comm() (under mpirun; every rank creates its
session alike and feeds its share of the batch) and zero_stage=0..2
(hetex.comm explains; the session holds its Comm).

Zero copy: a fed numpy array that is C-contiguous, of the input's dtype and
shape is passed to the library as it is (its own memory, read during the
call); other array-likes are converted first (a copy). Fetched values are
written by the library straight into the numpy array returned (or into the
caller's `out` arrays). Dtype and shape are checked against the graph:
a float64 array fed to an f32 input raises DtypeError rather than being
converted silently. bf16 tensors take and give ml_dtypes.bfloat16 arrays
when ml_dtypes is installed, else uint16 arrays of the bf16 bits (hetex.to_bf16).

The GIL is released while the library runs (every cffi call releases it),
so other Python threads go on during run(). A session is used by one thread
at a time: a second thread's call while one is in progress raises StateError.
"""
import os
import tempfile

import numpy as np

from . import dtypes
from ._enums import value as _enum_value
from ._lib import ffi, lib
from ._structs import set_fields, to_dict
from .comm import comm_handle
from .errors import DtypeError, InvalidArgumentError, ShapeError, StateError, check
from .graph import Tensor

ACCELERATORS = ("auto", "cuda", "emu", "none")

_from_buffer = ffi.from_buffer
_ndarray = np.ndarray
_empty = np.empty
_uint16 = np.dtype(np.uint16)
_UNSET = object()  # a Runner entry that points at no array of the caller's


def _offload_spec(offload):
    parts = []
    for k, v in offload.items():
        if isinstance(v, bool):
            v = "true" if v else "false"
        parts.append(f"{k}={v}")
    return ",".join(parts)


def _offload_struct(offload):
    """An hx_offload_config (a cffi pointer Session's offload_config also takes)
    from MindSpore-style keys (dict) or a "k=v,..." string, checked by the library."""
    cfg = ffi.new("hx_offload_config *", lib.hx_offload_config_default())
    spec = offload if isinstance(offload, str) else _offload_spec(offload)
    check(lib.hx_offload_config_parse(spec.encode(), cfg))
    return cfg


offload_config = _offload_struct


class Runner:
    """A run of fixed feeds and fetches (Session.runner; Session.run keeps
    one per combination it is called with). Its hx_feed and hx_fetch arrays
    hold their tensors and sizes, and each entry remembers the numpy array
    whose memory it points at. A call given the same array objects as the
    last one (a loop that refills its buffers in place, fetching into the
    same out arrays) checks only that each is still of its tensor's dtype
    and C strides (which fix the shape, as an array's size cannot change in
    place), an out array still writable, and runs; another
    array is checked in full (dtype, shape, contiguity; converted where it
    may be, as Session.run describes) and its pointer taken. The runner
    holds the arrays it was last given (so numpy refuses to resize them:
    resize checks that nothing else refers to an array) until a call gives
    others or the runner goes; it does not hold the arrays it returned. DeviceBuffer feeds are checked at every call."""

    def __init__(self, session, feeds, fetches, train, hold=True):
        # Session.run's runners (hold=False) live in their session: they
        # read its pointer from its box and do not hold it (no cycle).
        self.session = session if hold else None
        self._box = session._box
        self._single = type(fetches) is not list and type(fetches) is not tuple
        self.feeds = [session._tensor(k) for k in feeds]
        self.fetches = [session._tensor(k) for k in ((fetches,) if self._single else fetches)]
        # per entry: (tensor pointer, shape, numpy dtype, bytes, C strides)
        self._specs = [self._spec(t) for t in self.feeds]
        self._fspecs = [self._spec(t) for t in self.fetches]
        self._flags = 1 if train else 0
        self._nf, self._nx = len(self.feeds), len(self.fetches)
        self._free = [self._slot()]  # taken while a call runs (list.pop is atomic)

    @staticmethod
    def _spec(t):
        sp = t._spec or t._make_spec()
        strides, step = [], sp[2].itemsize
        for n in reversed(sp[1]):
            strides.append(step)
            step *= n
        return sp[:4] + (tuple(reversed(strides)),)

    def _slot(self):
        """One set of the C arrays, with the caller's array each entry points at
        (and the feeds' converted copies, kept until the next call)."""
        nf, nx = len(self.feeds), len(self.fetches)
        cf = ffi.new("hx_feed[]", nf) if nf else ffi.NULL
        cx = ffi.new("hx_fetch[]", nx) if nx else ffi.NULL
        for i, sp in enumerate(self._specs):
            cf[i].tensor, cf[i].bytes = sp[0], sp[3]
        for i, sp in enumerate(self._fspecs):
            cx[i].tensor, cx[i].bytes = sp[0], sp[3]
        return cf, cx, [_UNSET] * nf, [None] * nf, [_UNSET] * nx

    def __call__(self, *arrays, out=None):
        specs = self._specs
        if len(arrays) != self._nf:
            raise InvalidArgumentError(f"run: {len(arrays)} arrays for {self._nf} feeds")
        # A failed call does not put its slot back: the next makes a fresh one.
        try:
            slot = self._free.pop()
        except IndexError:  # another thread's call is running: arrays of our own
            slot = self._slot()
        cf, cx, fobj, copies, xobj = slot
        i = 0
        for arr in arrays:
            sp = specs[i]
            # the same array as last time, still of the dtype and C strides (and
            # so the shape: its size cannot change) of the tensor
            if arr is not fobj[i] or arr.dtype is not sp[2] or arr.strides != sp[4]:
                fobj[i] = _UNSET
                if type(arr) is DeviceBuffer:  # a device feed: the library checks its use
                    if arr._ptr is None:
                        raise StateError(f"feed '{self.feeds[i].name}': the device buffer is freed")
                    cf[i].data = arr._ptr
                    i += 1
                    continue
                a = arr
                if not (type(a) is _ndarray and a.dtype is sp[2] and a.shape == sp[1]
                        and a.flags.c_contiguous):
                    a = Session._feed_array(self.feeds[i], a)
                # the pointer outlives cffi's view: fobj (the caller's array) or
                # copies (a converted one, made again next call) keep its memory
                cf[i].data = _from_buffer(a)
                if a is arr:
                    fobj[i], copies[i] = arr, None
                else:
                    copies[i] = a
            i += 1
        fspecs = self._fspecs
        if out is None:
            results = []
            i = 0
            for sp in fspecs:
                a = _empty(sp[1], sp[2])
                xobj[i] = _UNSET
                cx[i].data = _from_buffer(a)  # writable: just made (the keyword costs 0.2 us)
                results.append(a)
                i += 1
        else:
            results = (out,) if self._single else \
                out if type(out) is list or type(out) is tuple else tuple(out)
            if len(results) != self._nx:
                raise InvalidArgumentError(
                    f"run: {len(results)} out arrays for {self._nx} fetches")
            i = 0
            for a in results:
                sp = fspecs[i]
                if a is not xobj[i] or a.dtype is not sp[2] or a.strides != sp[4] \
                        or not a.flags.writeable:
                    Session._out_array(self.fetches[i], a)
                    xobj[i] = _UNSET
                    cx[i].data = _from_buffer(a, require_writable=True)
                    xobj[i] = a
                i += 1
        h = self._box[0]
        if h is None:
            raise StateError("the session is closed")
        st = lib.hx_session_run(h, cf, self._nf, cx, self._nx, self._flags)
        self._free.append(slot)
        if st:
            check(st)
        if self._single:
            return results[0]
        return results if out is None else list(results)


class DeviceBuffer:
    """Accelerator memory of a session (Session.device_alloc): filled with
    upload(array), then given as a feed's value, which an input that only
    device ops read takes in place, with no copy (the header's device feeds).
    Freed with free() or with its session."""

    def __init__(self, session, nbytes):
        self.session = session  # keeps the session (and its memory) alive
        out = ffi.new("void **")
        check(lib.hx_session_device_alloc(session._h(), int(nbytes), out))
        self._ptr = out[0]
        self.nbytes = int(nbytes)

    def upload(self, array, offset=0):
        """Copies a C-contiguous array's bytes to the buffer at offset (synchronously)."""
        a = np.asarray(array, order="C")
        if self._ptr is None:
            raise StateError("the device buffer is freed")
        check(lib.hx_session_device_upload(self.session._h(),
                                           ffi.cast("char *", self._ptr) + int(offset),
                                           _from_buffer(a), a.nbytes))

    def free(self):
        if self._ptr is not None and self.session._ptr is not None:
            lib.hx_session_device_free(self.session._ptr, self._ptr)
        self._ptr = None


class Session:
    """Session(graph, accelerator="auto", offload_config=None, **config); see the module."""

    def __init__(self, graph, accelerator="auto", offload_config=None, **config):
        self._ptr = None
        self._box = [None]  # the pointer again, for runners that must not hold the session
        cfg = ffi.new("hx_session_config *", lib.hx_session_config_default())
        keep = []
        conv = {
            "accelerator": lambda v: _enum_value("HX_ACCELERATOR_", "accelerator", v, ACCELERATORS),
            "fallback": lambda v: _enum_value("HX_FALLBACK_", "fallback", v, ("error", "cpu")),
        }
        if "offload" in config:
            raise InvalidArgumentError("Session: give offload settings as offload_config={...}")
        # data parallel: the session holds its Comm (freed after the session)
        self.comm = config.get("comm")
        conv["comm"] = lambda v: comm_handle(v, self, "Session")
        set_fields(cfg, dict(accelerator=accelerator, **config), "Session", conv, keep)
        if isinstance(offload_config, ffi.CData):  # from hetex.offload_config()
            cfg.offload = offload_config[0]
        elif offload_config:
            cfg.offload = _offload_struct(offload_config)[0]
        out = ffi.new("hx_session **")
        check(lib.hx_session_create(graph._ptr, cfg, out))
        self._ptr = self._box[0] = out[0]
        self.graph = graph  # the session keeps its graph (and so its tables) alive
        self._names = {}    # name -> Tensor, for feeds and fetches by name
        self._runners = {}  # run()'s (feed keys, fetches, train) -> Runner

    # ---- lifetime
    def close(self):
        """Frees the session now (also done when it is collected)."""
        if self._ptr is not None:
            ptr, self._ptr = self._ptr, None
            self._box[0] = None
            lib.hx_session_free(ptr)

    def __del__(self):
        ptr = getattr(self, "_ptr", None)
        if ptr is not None:
            self._ptr = None
            self._box[0] = None
            lib.hx_session_free(ptr)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        self.close()

    def _h(self):
        p = self._ptr
        if p is None:
            raise StateError("the session is closed")
        return p

    def _tensor(self, key):
        if type(key) is Tensor:
            return key
        t = self._names.get(key)
        if t is None:
            if not isinstance(key, str):
                raise InvalidArgumentError(
                    f"feeds and fetches are named by hetex.Tensor or str, not {type(key).__name__}")
            t = self.graph.find(key)
            self._names[key] = t
        return t

    # ---- running
    def run(self, feeds=None, fetches=None, train=False, out=None):
        """Runs what `fetches` need (and, with train=True, every optimizer update).

        feeds: {Tensor or name: array}. fetches: a Tensor or name (returns one
        array), a list or tuple of them (returns a list), or None (returns
        None). out: arrays to fetch into instead of new ones (one per fetch, in
        the same form as fetches), written in place and returned.

        Each combination of feed keys (in the dict's order), fetches and
        train gets a Runner (see runner()), kept for the next run of the
        same combination (up to 64 of them), which holds the arrays of its
        last call."""
        fx = tuple(fetches) if type(fetches) is list else fetches
        key = (tuple(feeds) if feeds else (), fx, train)
        try:
            r = self._runners.get(key)
        except TypeError:  # an unhashable key: Runner names what is wrong with it
            r = None
        if r is None:
            r = Runner(self, key[0], () if fetches is None else fx, train, hold=False)
            if len(self._runners) >= 64:
                self._runners.clear()
            self._runners[key] = r
        res = r(*feeds.values(), out=out) if feeds else r(out=out)
        return None if fetches is None else res

    def runner(self, feeds, fetches, train=False):
        """A run of fixed feeds and fetches, prepared once for a loop:
        `r = s.runner([x, y], loss, train=True)`, then `r(xb, yb)` runs it
        (arrays in the order of feeds; `out=` as run's) with less Python work
        per call than run() (bench/results/python-cpu-2026-11-26.md)."""
        return Runner(self, feeds, fetches, train)

    @staticmethod
    def _feed_array(t, arr):
        """arr itself when it is a C-contiguous ndarray of t's dtype and shape;
        other array-likes converted (a copy); wrong ndarray dtype or shape raise."""
        want = t.numpy_dtype
        if type(arr) is _ndarray:
            dt = arr.dtype
            if dt != want and not (dt == _uint16 and t.dtype == "bf16"):
                raise DtypeError(
                    f"feed '{t.name}': array of dtype {dt}, the input is {t.dtype} "
                    f"(numpy {want}); convert it (arr.astype(...), hetex.to_bf16)")
            if arr.shape != t.shape:
                raise ShapeError(
                    f"feed '{t.name}': array of shape {arr.shape}, the input is {t.shape}")
            if not arr.flags.c_contiguous:
                arr = np.asarray(arr, order="C")
            return arr
        if isinstance(arr, _ndarray):  # a subclass: as an ndarray, same rules
            return Session._feed_array(t, arr.view(_ndarray))
        a = np.asarray(arr)
        if a.dtype.kind in "fiub" and t.dtype != "bf16":
            a = np.asarray(a, dtype=want, order="C")
        elif t.dtype == "bf16" and a.dtype.kind == "f":
            raise DtypeError(f"feed '{t.name}': the input is bf16: give hetex.to_bf16(values)")
        if a.shape != t.shape:
            raise ShapeError(f"feed '{t.name}': value of shape {a.shape}, the input is {t.shape}")
        return Session._feed_array(t, a)

    @staticmethod
    def _out_array(t, a):
        if not isinstance(a, _ndarray):
            raise InvalidArgumentError(f"out for '{t.name}' must be a numpy array")
        if a.dtype != t.numpy_dtype and not (a.dtype == _uint16 and t.dtype == "bf16"):
            raise DtypeError(f"out for '{t.name}': dtype {a.dtype}, the tensor is {t.dtype}")
        if a.shape != t.shape:
            raise ShapeError(f"out for '{t.name}': shape {a.shape}, the tensor is {t.shape}")
        if not a.flags.c_contiguous or not a.flags.writeable:
            raise InvalidArgumentError(f"out for '{t.name}' must be C-contiguous and writable")
        return a

    def device_alloc(self, nbytes):
        """A DeviceBuffer of nbytes on the session's accelerator (its memory cap applies)."""
        return DeviceBuffer(self, nbytes)

    # ---- persistent tensors
    def read(self, tensor):
        """A persistent tensor's value (parameter, constant, optimizer state)."""
        t = self._tensor(tensor)
        a = _empty(t.shape, t.numpy_dtype)
        check(lib.hx_session_read(self._h(), t._ptr, _from_buffer(a, require_writable=True), a.nbytes))
        return a

    def write(self, tensor, value):
        """Sets a persistent tensor's value (dtype and shape checked as feeds are)."""
        t = self._tensor(tensor)
        a = self._feed_array(t, value)
        check(lib.hx_session_write(self._h(), t._ptr, _from_buffer(a), a.nbytes))

    def save(self, path):
        """Checkpoint of parameters, optimizer state, step and loss scale (atomic)."""
        check(lib.hx_session_save(self._h(), os.fspath(path).encode()))

    def load(self, path):
        """Loads a checkpoint, checked whole against the graph first (CorruptError)."""
        check(lib.hx_session_load(self._h(), os.fspath(path).encode()))

    # ---- state and reports
    @property
    def step(self):
        return lib.hx_session_step(self._h())

    def set_lr_scale(self, scale):
        check(lib.hx_session_set_lr_scale(self._h(), float(scale)))

    def _report(self, ctype, fn):
        out = ffi.new(ctype)
        check(fn(self._h(), out))
        return to_dict(out)

    def train_stats(self):
        return self._report("hx_train_stats *", lib.hx_session_train_stats)

    def memory_stats(self):
        return self._report("hx_memory_stats *", lib.hx_session_memory_stats)

    def offload_report(self):
        return self._report("hx_offload_report *", lib.hx_session_offload_report)

    def placement_stats(self):
        return self._report("hx_placement_stats *", lib.hx_session_placement_stats)

    def placement_report(self):
        return self._report("hx_placement_report *", lib.hx_session_placement_report)

    def placement_units(self):
        """Per unit of the timed training plan, predicted against measured
        (hx_session_placement_units): a list of dicts, the lane by name
        ("host", "device", "h2d", "d2h"), first_op and last_op as str."""
        n = ffi.new("int *")
        check(lib.hx_session_placement_units(self._h(), ffi.NULL, 0, n))
        units = ffi.new("hx_placement_unit[]", max(n[0], 1))
        check(lib.hx_session_placement_units(self._h(), units, n[0], n))
        from ._enums import name
        out = []
        for i in range(n[0]):
            d = to_dict(units[i])
            d["lane"] = name("HX_UNIT_", d["lane"])
            d["first_op"] = ffi.string(units[i].first_op).decode()
            d["last_op"] = ffi.string(units[i].last_op).decode()
            out.append(d)
        return out

    def placement_text(self, worst=0):
        """The placement report as text (hx_session_placement_text): the
        `worst` units farthest from their prediction (0: all) and the step."""
        n = ffi.new("size_t *")
        check(lib.hx_session_placement_text(self._h(), worst, ffi.NULL, 0, n))
        buf = ffi.new("char[]", n[0] + 1)
        check(lib.hx_session_placement_text(self._h(), worst, buf, n[0] + 1, n))
        return ffi.string(buf).decode()

    def pool_stats(self):
        return self._report("hx_device_pools_stats *", lib.hx_session_pool_stats)

    def accelerator_info(self):
        d = self._report("hx_accelerator_info *", lib.hx_session_accelerator_info)
        from ._enums import name
        d["in_use"] = name("HX_ACCELERATOR_", d["in_use"])
        return d

    def _dump(self, fn):
        fd, path = tempfile.mkstemp(prefix="hetex-", suffix=".txt")
        os.close(fd)
        try:
            check(fn(self._h(), path.encode()))
            with open(path, encoding="utf-8") as f:
                return f.read()
        finally:
            os.unlink(path)

    def placement_summary(self):
        """Where each op runs: the plan's subgraphs (host or device), their ops
        and the copies between them, as text (hx_session_dump_summary)."""
        return self._dump(lib.hx_session_dump_summary)

    def placement(self):
        """Where each op of the plan runs: {tensor name: "cpu" or "device"},
        read from placement_summary()'s subgraph lists."""
        where = {}
        current = None
        for line in self.placement_summary().splitlines():
            if line.startswith("subgraph "):
                current = line.split(" on ", 1)[1].split(":", 1)[0]
            elif line.startswith("  ") and current is not None:
                where[line.strip().rsplit(" (", 1)[0]] = current
            else:
                current = None
        return where

    def placement_dot(self):
        """The plan as Graphviz DOT text (hx_session_dump_dot)."""
        return self._dump(lib.hx_session_dump_dot)

    def trace_flush(self):
        """Writes the Chrome trace recorded so far (trace_path or $HX_TRACE)."""
        check(lib.hx_session_trace_flush(self._h()))


def _attach_contracts():
    from ._doc import attach, attach_methods
    attach(_offload_struct, "hx_offload_config_parse")
    attach_methods(Session, {
        "__init__": ("hx_session_create", "hx_session_config_default"), "close": "hx_session_free",
        "run": "hx_session_run", "read": "hx_session_read", "write": "hx_session_write",
        "save": "hx_session_save", "load": "hx_session_load", "step": "hx_session_step",
        "set_lr_scale": "hx_session_set_lr_scale", "train_stats": "hx_session_train_stats",
        "memory_stats": "hx_session_memory_stats", "offload_report": "hx_session_offload_report",
        "placement_stats": "hx_session_placement_stats",
        "placement_report": "hx_session_placement_report", "pool_stats": "hx_session_pool_stats",
        "placement_units": "hx_session_placement_units",
        "placement_text": "hx_session_placement_text",
        "accelerator_info": "hx_session_accelerator_info",
        "placement_summary": "hx_session_dump_summary", "placement_dot": "hx_session_dump_dot",
        "trace_flush": "hx_session_trace_flush", "device_alloc": "hx_session_device_alloc",
        "runner": "hx_session_run"})
    attach_methods(DeviceBuffer, {"upload": "hx_session_device_upload",
                                  "free": "hx_session_device_free"})


_attach_contracts()
