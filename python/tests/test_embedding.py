"""Embedding tables: lookups and bags against numpy, sparse training of the
touched rows only, state, checkpoints, stats."""
import numpy as np
import pytest

import hetex
from conftest import cpu_session


def test_lookup_bag_and_sparse_update(tmp_path):
    t = hetex.EmbeddingTable(20, 3, name="emb", init=hetex.init.uniform(-1, 1), seed=5,
                             optimizer=hetex.optim.LazyAdam(lr=0.1))
    rows = t.read_rows(np.arange(20))
    g = hetex.Graph()
    ids = g.input("ids", (2, 2), "i64")
    bag_ids = g.input("bag_ids", (5,), "i64")
    offsets = g.input("offsets", (2,), "i64")
    e = hetex.embedding_lookup(t, ids)
    b = hetex.embedding_bag(t, bag_ids, offsets, mode="mean")
    loss = e.sum() + b.sum()
    g.backward(loss)
    g.apply_optimizer(hetex.optim.SGD(lr=0.1))
    s = cpu_session(g)
    feeds = {ids: np.array([[1, 2], [3, 1]]), bag_ids: np.array([4, 5, 6, 7, 8]),
             offsets: np.array([0, 2])}
    ge, gb = s.run(feeds, [e, b])
    np.testing.assert_array_equal(ge, rows[[[1, 2], [3, 1]]])
    np.testing.assert_allclose(gb, [rows[4:6].mean(0), rows[6:9].mean(0)], rtol=1e-6)
    s.run(feeds, loss, train=True)
    after = t.read_rows(np.arange(20))
    touched = sorted({1, 2, 3, 4, 5, 6, 7, 8})
    untouched = [i for i in range(20) if i not in touched]
    np.testing.assert_array_equal(after[untouched], rows[untouched])
    assert (after[touched] != rows[touched]).all()
    st = t.stats()
    assert st["updates"] == 1 and st["graphs"] == 1 and st["rows"] == 20
    m = t.read_state(0, [1, 0])
    assert m.shape == (2, 3) and m[0].any() and not m[1].any()
    t.save(tmp_path / "emb")
    t.write_rows([1], np.zeros((1, 3), np.float32))
    assert not t.read_rows([1]).any()
    t.load(tmp_path / "emb")
    np.testing.assert_array_equal(t.read_rows([1]), after[[1]])
    with pytest.raises(hetex.IndexError):
        t.read_rows([20])
    with pytest.raises(hetex.ShapeError):
        t.write_rows([1, 2], np.zeros((1, 3), np.float32))


def test_bad_table_config():
    with pytest.raises(hetex.ShapeError):
        hetex.EmbeddingTable(0, 4)
    with pytest.raises(hetex.InvalidArgumentError, match="ids"):
        hetex.EmbeddingTable(4, 4, ids="sideways")
    with pytest.raises(hetex.InvalidArgumentError, match="no_such"):
        hetex.EmbeddingTable(4, 4, no_such=1)


def test_hash_strings():
    a = hetex.hash_strings(["a", "b", "a"], seed=1)
    assert a.dtype == np.int64 and a[0] == a[2] and a[0] != a[1]
    assert not np.array_equal(a, hetex.hash_strings(["a", "b", "a"], seed=2))
