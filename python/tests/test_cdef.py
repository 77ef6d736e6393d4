"""The binding's declarations come from include/hetex.h mechanically."""
import os
import re
import sys

import pytest

ROOT = os.path.join(os.path.dirname(__file__), "..", "..")
sys.path.insert(0, os.path.join(ROOT, "python", "ffi"))
from gen_cdef import HeaderError, cdef_from_header  # noqa: E402

import hetex  # noqa: E402


def _header():
    with open(os.path.join(ROOT, "include", "hetex.h"), encoding="utf-8") as f:
        return f.read()


def test_every_header_function_is_bound():
    text = re.sub(r"/\*.*?\*/", "", _header(), flags=re.S)
    names = re.findall(r"HX_API[^;(]*?\b(hx_\w+)\s*\(", text)
    assert len(names) > 150
    missing = [n for n in names if not hasattr(hetex._lib, n)]
    assert not missing, missing
    assert hetex._lib.HX_MAX_DIMS == 8 and hetex._lib.HX_ID_MISSING == -1
    assert hetex._lib.HX_MAX_ELEMENTS == 1 << 56


def test_generator_refuses_what_it_cannot_read():
    with pytest.raises(HeaderError, match="line 2"):
        cdef_from_header("int a;\n#if X > 1\n#endif\n")
    with pytest.raises(HeaderError, match="function-like"):
        cdef_from_header("#define F(x) x\n")
    with pytest.raises(HeaderError, match="unterminated"):
        cdef_from_header("#ifdef A\n")
    out = cdef_from_header("#define E\n#define V (1 << 2)\n#ifdef __cplusplus\nno;\n#endif\n"
                           "E int f(void); /* c */\n")
    assert out.split() == ["#define", "V", "...", "int", "f(void);"]


def test_docstrings_carry_the_contracts():
    assert "Fails:" in hetex.contract("hx_session_run")
    assert "HX_ERR_INDEX" in hetex.Session.run.__doc__
    assert "C contract (hx_matmul" in hetex.matmul.__doc__
    assert "C contract (hx_tensor_grad" in hetex.Tensor.grad.__doc__
    assert "hx_embedding_table_free" in hetex.EmbeddingTable.close.__doc__
    with pytest.raises(KeyError):
        hetex.contract("hx_nothing")
    # every wrapper of an op names its C function
    for name in ("add", "relu", "reduce_sum", "conv2d", "embedding_bag", "slice"):
        assert "C contract (hx_" in getattr(hetex, name).__doc__, name
