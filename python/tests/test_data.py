"""Readers and feature columns: batches as numpy arrays, errors with the
library's message, stale batches refused."""
import numpy as np
import pytest

import hetex

COLUMNS = [{"name": "y", "kind": "label"}, {"name": "x", "kind": "numeric"},
           {"name": "c", "kind": "categorical"}]


def _file(tmp_path, text):
    p = tmp_path / "d.csv"
    p.write_text(text)
    return p


def test_reader_and_features(tmp_path):
    p = _file(tmp_path, "1,0.5,a\n0,2.0,b\n1,,a\n0,4.0,c\n")
    r = hetex.Reader(p, columns=COLUMNS, batch_size=3)
    assert r.find("x") == 0 and r.find("c") == 0 and r.find("nothing") == -1
    b1, b2 = list(r)
    assert b1.n == 3 and b2.n == 1
    np.testing.assert_array_equal(b1.labels, [1, 0, 1])
    np.testing.assert_array_equal(b1.numeric[:, 0], [0.5, 2.0, 0.0])
    np.testing.assert_array_equal(b1.numeric_missing[:, 0], [0, 0, 1])
    assert b1.categorical[0, 0] == b1.categorical[2, 0] != b1.categorical[1, 0]
    assert r.stats()["rows"] == 4
    r.rewind()
    cols = [hetex.feature_column("numeric", "x", 0, standardize=True),
            hetex.feature_column("vocabulary", "c", 0, wide=True),
            hetex.feature_column("bucketized", "xb", 0, boundaries=[1.0, 3.0])]
    f = hetex.Features(cols, n_numeric=1, n_categorical=1)
    f.fit(r)
    info = f.info(0)
    assert info["dense"] and abs(info["mean"] - 1.625) < 1e-12
    assert f.info(2)["boundaries"] == [1.0, 3.0]
    assert f.info(1)["vocab_size"] == 3
    sh = f.shape()
    assert sh["dense_dim"] == 1 and sh["n_id_columns"] == 2 and sh["n_wide"] == 1
    b = r.next()
    t = f.transform(b)
    assert t["dense"].shape == (3, 1) and t["ids"].shape == (2, 3)
    np.testing.assert_array_equal(t["ids"][1], [0, 1, 0])  # bucket of 0.5, 2.0, missing 0
    assert f.lookup(1, b.categorical[0, 0]) == t["ids"][0, 0]
    r.next()
    with pytest.raises(hetex.StateError, match="current"):
        f.transform(b)  # the reader has moved on: its C batch is gone


def test_reader_errors(tmp_path):
    with pytest.raises(hetex.IOError) as ei:
        hetex.Reader(tmp_path / "missing.csv", columns=COLUMNS)
    assert "missing.csv" in str(ei.value)
    p = _file(tmp_path, "1,0.5,a\n0,x,b\n")
    r = hetex.Reader(p, columns=COLUMNS, on_malformed="error")
    first = r.next()
    assert first.n == 1  # the rows before the malformed one
    with pytest.raises(hetex.CorruptError) as ei:
        r.next()
    assert "line 2" in str(ei.value) and str(ei.value) == hetex.errors.last_error()
    r.rewind()  # clears the failure
    assert r.next().n == 1
    # skipped rows are counted by reason, named as the library names them
    p = _file(tmp_path, "1,0.5,a\n0,x,b\n1,2\n0,1.0,c\n")
    st = hetex.Reader(p, columns=COLUMNS, batch_size=8)
    assert st.next().n == 2
    counts = st.stats()["malformed_by_reason"]
    assert counts["unparsable number"] == 1 and counts["wrong number of columns"] == 1
    assert sum(counts.values()) == st.stats()["malformed"] == 2
    with pytest.raises(hetex.InvalidArgumentError, match="kind"):
        hetex.Reader(p, columns=[{"name": "y", "kind": "sideways"}])
    with pytest.raises(hetex.InvalidArgumentError):
        hetex.Features([hetex.feature_column("numeric", "x", 5)], n_numeric=1)


def test_generator_and_its_tsv(tmp_path):
    gen = hetex.Generator(seed=3, n_rows=10, batch_size=4, vocab_size=50)
    batches = list(gen)
    assert [b.n for b in batches] == [4, 4, 2]
    assert batches[0].numeric.shape == (4, 13) and batches[0].categorical.shape == (4, 26)
    gen.rewind()
    b = gen.next()
    np.testing.assert_array_equal(b.categorical, batches[0].categorical)
    assert gen.logits().shape == (4,)
    path = tmp_path / "g.tsv"
    hetex.Generator.write_tsv(path, seed=3, n_rows=10, batch_size=4, vocab_size=50)
    r = hetex.Reader(path, "criteo", batch_size=4)
    np.testing.assert_array_equal(r.next().labels, batches[0].labels)
    with pytest.raises(hetex.InvalidArgumentError, match="n_rows|vocab"):
        hetex.Generator(vocab_size=0)


def test_memreplay(tmp_path):
    p = tmp_path / "t.trace"
    p.write_text("hxmemtrace 1\na 1 1000 p\na 2 4096 t\nf 2\na 3 4096 t\nf 3\nf 1\n")
    r = hetex.memreplay(p)
    assert r["events"] == 6 and r["allocs"] == 3 and r["peak_live"] == 5096
    p.write_text("hxmemtrace 1\nf 9\n")
    with pytest.raises(hetex.CorruptError, match="line 2"):
        hetex.memreplay(p)
