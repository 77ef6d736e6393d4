"""Object lifetimes: a session keeps its graph, a graph its tables, so
dropping them in any order neither crashes nor frees early."""
import gc
import weakref

import numpy as np
import pytest

import hetex
from conftest import cpu_session


def _model(table):
    g = hetex.Graph()
    ids = g.input("ids", (3,), "i64")
    e = hetex.embedding_lookup(table, ids)
    w = g.param("w", (4, 1), init=hetex.init.constant(0.5))
    loss = (e @ w).mean()
    g.backward(loss)
    g.apply_optimizer(hetex.optim.SGD(lr=0.1))
    return g, ids, loss


def _table():
    return hetex.EmbeddingTable(10, 4, name="t", init=hetex.init.uniform(-1, 1), seed=3,
                                optimizer=hetex.optim.SparseAdagrad(lr=0.1))


def test_graph_dropped_before_session():
    g, ids, loss = _model(_table())
    s = cpu_session(g)
    gref = weakref.ref(g)
    del g
    gc.collect()
    assert gref() is not None  # the session holds it
    v = s.run({ids: np.array([1, 2, 3])}, loss, train=True)
    assert np.isfinite(v)
    s.close()
    del s, ids, loss
    gc.collect()
    assert gref() is None


def test_table_dropped_before_graph():
    t = _table()
    tref = weakref.ref(t)
    g, ids, loss = _model(t)
    rows0 = t.read_rows([1, 2, 3])
    del t
    gc.collect()
    assert tref() is not None  # the graph holds it
    s = cpu_session(g)
    s.run({ids: np.array([1, 2, 3])}, loss, train=True)
    assert not np.array_equal(tref().read_rows([1, 2, 3]), rows0)  # trained in place
    del s, g, ids, loss
    gc.collect()
    assert tref() is None  # freed with the last graph


def test_close_a_table_in_use():
    t = _table()
    g, ids, loss = _model(t)
    with pytest.raises(hetex.StateError):
        t.close()
    assert t.read_rows([0]).shape == (1, 4)  # still usable
    s = cpu_session(g)
    s.run({ids: np.array([0, 1, 2])}, loss, train=True)
    del s, g, ids, loss
    gc.collect()
    t.close()  # no graph uses it now
    with pytest.raises(hetex.StateError, match="closed"):
        t.read_rows([0])


def test_closed_session_says_so():
    g, ids, loss = _model(_table())
    s = cpu_session(g)
    s.close()
    s.close()  # twice is fine
    with pytest.raises(hetex.StateError, match="closed"):
        s.run({ids: np.array([1, 2, 3])}, loss)


def test_tensors_outlive_their_graph_variable():
    def build():
        g = hetex.Graph()
        x = g.input("x", (2,))
        return x * 2.0
    y = build()
    gc.collect()
    assert y.shape == (2,) and y.graph is not None
    s = cpu_session(y.graph)
    np.testing.assert_array_equal(s.run({"x": np.array([1, 2], np.float32)}, y), [2, 4])


def test_session_freed_when_dropped_after_runs():
    """run() keeps a runner per combination inside the session, which must
    not hold the session back: dropping the last reference frees it at once
    (no garbage collection needed), while a runner of the caller's keeps its
    session working."""
    g, ids, loss = _model(_table())
    s = cpu_session(g)
    feed = {ids: np.array([1, 2, 3])}
    s.run(feed, loss, train=True)
    s.run(feed, [loss])
    sref = weakref.ref(s)
    gc.disable()
    try:
        del s
        assert sref() is None
    finally:
        gc.enable()
    s = cpu_session(g)
    r = s.runner([ids], loss)
    sref = weakref.ref(s)
    del s
    gc.collect()
    assert sref() is not None  # the runner holds it
    assert np.isfinite(r(np.array([1, 2, 3])))
    r.session.close()
    with pytest.raises(hetex.StateError, match="closed"):
        r(np.array([1, 2, 3]))
