"""Feeds and fetches without copies where the API promises it, checked by
address: a C-contiguous array of the input's dtype and shape goes to the
library as it is; a fetch is written by the library into the array returned
(or the caller's out array). Other arrays are copied (a non-contiguous view,
a list)."""
import numpy as np
import pytest

import hetex
from hetex._lib import ffi
from conftest import cpu_session


def _address(cdata):
    return int(ffi.cast("uintptr_t", cdata))


def _graph():
    g = hetex.Graph()
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 3), init=hetex.init.uniform(-1, 1))
    y = x @ w
    return g, x, w, y


def test_feed_passes_the_array_itself():
    g, x, w, y = _graph()
    a = np.arange(32, dtype=np.float32).reshape(4, 8)
    fed = hetex.Session._feed_array(x, a)
    assert fed is a
    assert _address(ffi.from_buffer(fed)) == a.ctypes.data
    # a read-only array is fed as it is too (the library only reads feeds)
    a.flags.writeable = False
    assert hetex.Session._feed_array(x, a) is a


def test_feeds_that_are_copied():
    g, x, w, y = _graph()
    big = np.arange(64, dtype=np.float32).reshape(4, 16)
    view = big[:, ::2]  # (4, 8), not contiguous
    fed = hetex.Session._feed_array(x, view)
    assert fed.ctypes.data != view.ctypes.data and fed.flags.c_contiguous
    np.testing.assert_array_equal(fed, view)
    fed = hetex.Session._feed_array(x, view.tolist())
    assert fed.dtype == np.float32
    np.testing.assert_array_equal(fed, view)


def test_fetch_into_out_and_new_arrays():
    g, x, w, y = _graph()
    s = cpu_session(g)
    a = np.ones((4, 8), np.float32)
    out = np.full((4, 3), np.nan, np.float32)
    addr = out.ctypes.data
    got = s.run({x: a}, y, out=out)
    assert got is out and got.ctypes.data == addr
    np.testing.assert_allclose(out, a @ s.read(w), rtol=1e-6)
    # lists of fetches and outs
    o2 = np.empty((4, 3), np.float32)
    got = s.run({x: a}, [y, w], out=[o2, np.empty((8, 3), np.float32)])
    assert got[0] is o2
    # a new array owns its memory, which the library wrote
    fresh = s.run({x: a}, y)
    assert fresh.flags.owndata and fresh.flags.c_contiguous
    np.testing.assert_array_equal(fresh, out)


def test_out_must_fit():
    g, x, w, y = _graph()
    s = cpu_session(g)
    a = np.ones((4, 8), np.float32)
    try:
        s.run({x: a}, y, out=np.empty((4, 3), np.float64))
        raise AssertionError("an f64 out was taken")
    except hetex.DtypeError:
        pass
    try:
        s.run({x: a}, y, out=np.empty((3, 4), np.float32))
        raise AssertionError("a wrongly shaped out was taken")
    except hetex.ShapeError:
        pass
    ro = np.empty((4, 3), np.float32)
    ro.flags.writeable = False
    try:
        s.run({x: a}, y, out=ro)
        raise AssertionError("a read-only out was taken")
    except hetex.InvalidArgumentError:
        pass


def test_bf16_as_bits_or_ml_dtypes():
    g = hetex.Graph()
    x = g.input("x", (3,), "bf16")
    y = x.cast("f32")
    s = cpu_session(g)
    v = np.array([1.0, -2.5, 3.140625], np.float32)
    bits = hetex.to_bf16(v)
    assert bits.dtype == hetex.BF16_NUMPY
    np.testing.assert_array_equal(s.run({x: bits}, y), v)
    np.testing.assert_array_equal(s.run({x: bits.view(np.uint16)}, y), v)
    fetched = s.run({x: bits}, x)
    assert fetched.dtype == hetex.BF16_NUMPY
    np.testing.assert_array_equal(hetex.from_bf16(fetched), v)
    # round to nearest even, as hetex's casts round
    assert hetex.to_bf16(np.float32(1 + 2 ** -8)).view(np.uint16) == 0x3F80
    assert hetex.to_bf16(np.float32(1 + 3 * 2 ** -8)).view(np.uint16) == 0x3F82


def test_device_feed_is_taken_in_place():
    g = hetex.Graph()
    x = g.input("x", (4, 8))
    w = g.param("w", (8, 3), init=hetex.init.uniform(-1, 1), target="device")
    y = hetex.matmul(x, w, target="device")
    s = hetex.Session(g, accelerator="emu", n_threads=1)
    a = np.arange(32, dtype=np.float32).reshape(4, 8) / 32
    buf = s.device_alloc(a.nbytes)
    buf.upload(a)
    np.testing.assert_array_equal(s.run({x: buf}, y), s.run({x: a}, y))
    # an input the run needs on the host cannot take a device feed
    with pytest.raises(hetex.InvalidArgumentError):
        s.run({x: buf}, x)
    buf.free()
    with pytest.raises(hetex.StateError, match="freed"):
        s.run({x: buf}, y)
    with pytest.raises(hetex.DeviceOOMError):
        s.device_alloc(1 << 40)


def test_runner_rechecks_arrays_it_was_given():
    """A runner (and run(), which keeps one per combination) points at the
    arrays of its last call; given the same ones again it runs on their
    current contents, and an array changed in place since (dtype, shape,
    strides, an out array made read-only) is checked again and refused,
    not read or written as it was."""
    g, x, w, y = _graph()
    s = cpu_session(g)
    a = np.ones((4, 8), np.float32)
    out = np.empty((4, 3), np.float32)
    for call in (lambda: s.runner([x], y)(a, out=out), lambda: s.run({x: a}, y, out=out)):
        a[:] = 1
        first = call().copy()
        a[:] = 2  # refilled in place: the same array object, new values
        np.testing.assert_array_equal(call(), 2 * first)
        np.testing.assert_allclose(out, a @ s.read(w), rtol=1e-6)
    r = s.runner([x], y)
    r(a, out=out)
    with pytest.raises(ValueError):  # the runner holds a view of its buffer
        a.resize((64,))
    b = np.full((4, 8), 3, np.float32)  # another array: its own address is taken
    np.testing.assert_allclose(r(b), b @ s.read(w), rtol=1e-6)
    r(a, out=out)
    a.shape = (8, 4)
    with pytest.raises(hetex.ShapeError):
        r(a, out=out)
    a.shape = (4, 8)
    r(a, out=out)  # bound again: each change below meets the runner's quick check
    a.dtype = np.int32
    with pytest.raises(hetex.DtypeError):
        r(a, out=out)
    a.dtype = np.float32
    r(a, out=out)
    out.flags.writeable = False
    with pytest.raises(hetex.InvalidArgumentError, match="writable"):
        r(a, out=out)
    out.flags.writeable = True
    r(a, out=out)
    out.shape = (3, 4)
    with pytest.raises(hetex.ShapeError):
        r(a, out=out)
    out.shape = (4, 3)
    r(a, out=out)
    out.dtype = np.int32
    with pytest.raises(hetex.DtypeError):
        r(a, out=out)
    out.dtype = np.float32
    # a list is converted at every call (a copy of its current values)
    vals = a.tolist()
    np.testing.assert_array_equal(r(vals), r(a))
    vals[0][0] = 100.0
    assert r(vals)[0, 0] != r(a)[0, 0]


def test_runner_strides_changed_in_place():
    g, x, w, y = _graph()
    s = cpu_session(g)
    r = s.runner([x], y)
    base = np.arange(64, dtype=np.float32)
    a = base[:32].reshape(4, 8)
    want = r(a).copy()
    import warnings
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)  # numpy 2.4 deprecates it
        try:
            a.strides = (8, 4)  # rows overlap: not C-contiguous any more
        except AttributeError:  # a numpy that refuses it: nothing to check
            return
    got = r(a)  # copied as a non-contiguous view is, not read as it was
    np.testing.assert_allclose(got, np.ascontiguousarray(a) @ s.read(w), rtol=1e-6)
    assert not np.array_equal(got, want)


def test_converted_feeds_live_through_the_run():
    """Feeds converted to copies (lists, other dtypes' lists, views) stay
    alive until the library has read them, whatever follows them."""
    g = hetex.Graph()
    p, q = g.input("p", (64,)), g.input("q", (64,))
    y = p * 2.0 + q
    s = cpu_session(g)
    r = s.runner([p, q], y)
    pv = np.arange(64, dtype=np.float32)
    qv = np.ones(64, np.float32)
    for _ in range(3):
        np.testing.assert_array_equal(r(pv.tolist(), qv), pv * 2 + qv)
        np.testing.assert_array_equal(r(pv.tolist(), qv.tolist()), pv * 2 + qv)
        np.testing.assert_array_equal(s.run({p: pv.tolist(), q: qv}, y), pv * 2 + qv)
