"""dtypes: hetex's names ("f32", "f16", "bf16", "i32", "i64") and numpy's.

numpy has no bfloat16: a bf16 tensor is fed and fetched as
`ml_dtypes.bfloat16` when the ml_dtypes package is installed, else as
uint16 holding the bf16 bits (the top 16 bits of the f32 value);
`to_bf16` / `from_bf16` convert f32 arrays to and from those bits (round to
nearest even, as hetex's casts round).
"""
import numpy as np

from ._lib import lib
from .errors import DtypeError

try:  # optional: a real bfloat16 dtype for numpy
    import ml_dtypes as _ml_dtypes
    BF16_NUMPY = np.dtype(_ml_dtypes.bfloat16)
except ImportError:  # pragma: no cover - depends on the environment
    _ml_dtypes = None
    BF16_NUMPY = np.dtype(np.uint16)

NAMES = ("f32", "f16", "bf16", "i32", "i64")
_ENUM = {"f32": lib.HX_DTYPE_F32, "f16": lib.HX_DTYPE_F16, "bf16": lib.HX_DTYPE_BF16,
         "i32": lib.HX_DTYPE_I32, "i64": lib.HX_DTYPE_I64}
_NAME = {v: k for k, v in _ENUM.items()}
_NUMPY = {"f32": np.dtype(np.float32), "f16": np.dtype(np.float16), "bf16": BF16_NUMPY,
          "i32": np.dtype(np.int32), "i64": np.dtype(np.int64)}
_ALIASES = {"float32": "f32", "float16": "f16", "half": "f16", "bfloat16": "bf16",
            "int32": "i32", "int64": "i64", "float": "f32"}


def name_of(dt):
    """hetex's name for dt: one of NAMES, a numpy dtype (or type) of f32, f16,
    i32 or i64, ml_dtypes.bfloat16, or an alias ("float32", "bfloat16", ...)."""
    if isinstance(dt, str):
        key = _ALIASES.get(dt, dt)
        if key in _ENUM:
            return key
        raise DtypeError(f"unknown dtype '{dt}': use one of {', '.join(NAMES)}")
    try:
        npdt = np.dtype(dt)
    except TypeError:
        raise DtypeError(f"unknown dtype {dt!r}: use one of {', '.join(NAMES)}") from None
    if _ml_dtypes is not None and npdt == BF16_NUMPY:
        return "bf16"
    for k, v in _NUMPY.items():
        if k != "bf16" and v == npdt:
            return k
    raise DtypeError(f"numpy dtype {npdt} has no hetex dtype: use one of {', '.join(NAMES)}")


def enum_of(dt):
    """The hx_dtype value of dt (see name_of)."""
    return _ENUM[name_of(dt)]


def from_enum(value):
    return _NAME[value]


def numpy_of(name):
    """The numpy dtype hetex feeds and fetches for its dtype `name`."""
    return _NUMPY[name]


def to_bf16(x):
    """f32 values (anything np.asarray takes) as bf16 in BF16_NUMPY, rounded to
    nearest even; NaN stays NaN."""
    f = np.asarray(x, dtype=np.float32, order="C")
    bits = f.view(np.uint32).astype(np.uint64)
    rounded = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype(np.uint16)
    nan = np.isnan(f)
    if nan.any():
        rounded = np.where(nan, ((bits >> 16) | 0x40).astype(np.uint16), rounded)
    return rounded.view(BF16_NUMPY) if BF16_NUMPY != np.uint16 else rounded


def from_bf16(x):
    """bf16 values (uint16 bits or ml_dtypes.bfloat16) as f32, exactly."""
    a = np.asarray(x, order="C")
    if a.dtype not in (np.dtype(np.uint16), BF16_NUMPY):
        raise DtypeError(f"from_bf16 takes uint16 bits or bfloat16, not {a.dtype}")
    return (a.view(np.uint16).astype(np.uint32) << 16).view(np.float32)
