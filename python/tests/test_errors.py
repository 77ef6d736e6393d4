"""Every failure raises the hetex.Error subclass of its status with the C
library's message, and leaves the objects usable."""
import os

import numpy as np
import pytest

import hetex
from hetex.errors import last_error
from conftest import cpu_session


def _c_message(excinfo, cls, *words):
    e = excinfo.value
    assert type(e) is cls
    assert isinstance(e, hetex.Error)
    # the text is the library's own message of this thread's last failure
    assert str(e) == last_error() and str(e)
    for w in words:
        assert w in str(e), (w, str(e))
    return e


def _tiny_model(rows=5):
    g = hetex.Graph()
    x = g.input("x", (4, 3))
    ids = g.input("ids", (4,), "i64")
    w = g.param("w", (3, 2), init=hetex.init.uniform(-1, 1))
    emb = g.param("emb", (rows, 2), init=hetex.init.uniform(-1, 1))
    y = x @ w + hetex.gather(emb, ids)
    loss = y.sum().on("cpu")
    loss.name = "loss"
    g.backward(loss)
    g.apply_optimizer(hetex.optim.SGD(lr=0.1))
    return g, loss


def _feeds(ids=(0, 1, 2, 3)):
    return {"x": np.ones((4, 3), np.float32), "ids": np.array(ids, np.int64)}


def test_build_errors_carry_the_c_message():
    g = hetex.Graph()
    a = g.input("a", (2, 3))
    n = len(g)
    with pytest.raises(hetex.ShapeError) as ei:
        a @ a
    e = _c_message(ei, hetex.ShapeError, "matmul")
    assert e.status == hetex._lib.HX_ERR_SHAPE and e.status_name == "HX_ERR_SHAPE"
    assert isinstance(e, ValueError)
    b = g.input("b", (2, 3), "f16")
    with pytest.raises(hetex.DtypeError) as ei:
        a + b
    _c_message(ei, hetex.DtypeError, "'a'", "'b'")
    with pytest.raises(hetex.InvalidArgumentError) as ei:
        g.input("a", (1,))
    _c_message(ei, hetex.InvalidArgumentError, "'a'")
    with pytest.raises(hetex.NotFoundError) as ei:
        g.find("nothing")
    _c_message(ei, hetex.NotFoundError, "nothing")
    assert len(g) == n + 1  # only b was added: failures add nothing
    assert (a + a).shape == (2, 3)  # the graph still takes ops


def test_feed_shape_and_dtype_are_checked():
    g, loss = _tiny_model()
    s = cpu_session(g)
    with pytest.raises(hetex.ShapeError, match="'x'.*\\(4, 3\\)"):
        s.run({"x": np.ones((3, 4), np.float32), "ids": np.zeros(4, np.int64)}, loss)
    with pytest.raises(hetex.DtypeError, match="'x'.*float64"):
        s.run({"x": np.ones((4, 3)), "ids": np.zeros(4, np.int64)}, loss)
    with pytest.raises(hetex.DtypeError, match="'ids'"):
        s.run({"x": np.ones((4, 3), np.float32), "ids": np.zeros(4, np.int32)}, loss)
    # the C checks behind them: a fetch of an unknown name
    with pytest.raises(hetex.NotFoundError) as ei:
        s.run(_feeds(), "no_such_tensor")
    _c_message(ei, hetex.NotFoundError, "no_such_tensor")
    # and a needed input not fed
    with pytest.raises(hetex.InvalidArgumentError) as ei:
        s.run({"x": np.ones((4, 3), np.float32)}, loss)
    _c_message(ei, hetex.InvalidArgumentError, "ids")
    assert np.isfinite(s.run(_feeds(), loss))


def test_out_of_range_id_changes_nothing():
    g, loss = _tiny_model(rows=5)
    s = cpu_session(g)
    w0 = s.read("w")
    with pytest.raises(hetex.IndexError) as ei:
        s.run(_feeds((0, 1, 7, 2)), loss, train=True)
    _c_message(ei, hetex.IndexError, "7")
    assert isinstance(ei.value, IndexError)
    assert s.step == 0
    np.testing.assert_array_equal(s.read("w"), w0)
    s.run(_feeds(), loss, train=True)
    assert s.step == 1


def test_device_oom_under_an_emu_cap():
    g = hetex.Graph()
    x = g.input("x", (64, 256))
    w = g.param("w", (256, 256), target="device")
    loss = hetex.reduce_mean(x @ w)
    g.backward(loss)
    g.apply_optimizer(hetex.optim.Adam())
    with pytest.raises(hetex.DeviceOOMError) as ei:
        hetex.Session(g, accelerator="emu", max_device_memory=64 << 10, n_threads=1)
    _c_message(ei, hetex.DeviceOOMError, "out of memory")
    assert isinstance(ei.value, MemoryError)
    # the graph is not frozen by the failed session: a session that fits works
    s = hetex.Session(g, accelerator="emu", max_device_memory=64 << 20, n_threads=1)
    out = s.run({"x": np.ones((64, 256), np.float32)}, loss, train=True)
    assert np.isfinite(out)


def test_corrupt_checkpoint(tmp_path):
    g, loss = _tiny_model()
    s = cpu_session(g)
    s.run(_feeds(), loss, train=True)
    path = tmp_path / "ckpt"
    s.save(path)
    w_saved = s.read("w")
    s.run(_feeds(), loss, train=True)
    w_after = s.read("w")
    data = bytearray(path.read_bytes())
    data[len(data) // 2] ^= 0xFF
    bad = tmp_path / "bad"
    bad.write_bytes(bytes(data))
    with pytest.raises(hetex.CorruptError) as ei:
        s.load(bad)
    _c_message(ei, hetex.CorruptError)
    np.testing.assert_array_equal(s.read("w"), w_after)  # the session is as it was
    assert s.step == 2
    s.load(path)
    np.testing.assert_array_equal(s.read("w"), w_saved)
    assert s.step == 1
    with pytest.raises(hetex.IOError) as ei:
        s.load(tmp_path / "missing")
    _c_message(ei, hetex.IOError)


def test_frozen_graph_and_bad_config():
    g, loss = _tiny_model()
    s = cpu_session(g)
    with pytest.raises(hetex.StateError) as ei:
        g.input("late", (1,))
    _c_message(ei, hetex.StateError)
    with pytest.raises(hetex.InvalidArgumentError) as ei:
        hetex.Session(g, offload_config={"offload_param": "moon"})
    _c_message(ei, hetex.InvalidArgumentError, "offload_param")
    with pytest.raises(hetex.InvalidArgumentError, match="no_such_field"):
        hetex.Session(g, no_such_field=1)
    with pytest.raises(hetex.InvalidArgumentError, match="accelerator"):
        hetex.Session(g, accelerator="tpu")
    assert np.isfinite(s.run(_feeds(), loss))


def test_unknown_status_maps_to_error():
    e = hetex.errors.error_for(999, "x")
    assert type(e) is hetex.Error and e.status == 999
