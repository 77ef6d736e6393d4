"""The compiled cffi module (API mode over include/hetex.h): `ffi` and `lib`.

Every call into `lib` releases the GIL while the C function runs (cffi's
API mode does so for every call), so other Python threads go on during a
session run.
"""
from ._hetex_cffi import ffi, lib  # noqa: F401


def text(p):
    """A C string (const char *) as str; None for NULL."""
    return None if p == ffi.NULL else ffi.string(p).decode("utf-8", "replace")
