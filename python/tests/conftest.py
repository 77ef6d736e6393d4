"""Shared helpers of the binding's tests."""
import numpy as np
import pytest

import hetex


def bf16_round(x):
    """f32 values rounded to bf16 and back, as hetex stores them."""
    return hetex.from_bf16(hetex.to_bf16(x))


def as_f64(a):
    """An array fetched from hetex (f32, f16 or bf16 bits) as float64."""
    a = np.asarray(a)
    if a.dtype == hetex.BF16_NUMPY or a.dtype == np.uint16:
        return hetex.from_bf16(a).astype(np.float64)
    return a.astype(np.float64)


def value_of(dtype, x):
    """f32 values x in the numpy form hetex takes for `dtype`."""
    x = np.asarray(x, dtype=np.float32)
    if dtype == "bf16":
        return hetex.to_bf16(x)
    return x.astype({"f32": np.float32, "f16": np.float16}[dtype])


@pytest.fixture
def rng():
    return np.random.default_rng(1234)


def cpu_session(g, **kw):
    kw.setdefault("accelerator", "none")
    kw.setdefault("n_threads", 1)
    return hetex.Session(g, **kw)
