"""Replays a device allocation trace through hetex's pools and a PyTorch-style
baseline allocator (hx_memreplay); see the header's "device memory pools"."""
import os

from ._lib import ffi, lib
from ._structs import to_dict
from .errors import check


def memreplay(path, capacity=0):
    """The replay report of the trace at path as a dict (capacity 0: no cap)."""
    out = ffi.new("hx_memreplay_report *")
    check(lib.hx_memreplay(os.fspath(path).encode(), int(capacity), out))
    return to_dict(out)


def _attach_contracts():
    from ._doc import attach
    attach(memreplay, "hx_memreplay")


_attach_contracts()
