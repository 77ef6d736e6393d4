"""Writes the C source of hetex's cffi extension (API mode) for CMake.

    python build_ffi.py include/hetex.h OUT.c [CONTRACTS.py]

The declarations come from the header by gen_cdef.cdef_from_header; the
module, hetex._hetex_cffi, includes the same header, so the C compiler
checks each declaration (struct layouts, enum values, signatures) when it
builds the module. CMake (python/CMakeLists.txt) compiles OUT.c against
Python and links it with the hetex library. CONTRACTS.py (installed as
hetex/_contracts.py) holds each function's contract block from the header,
which the package appends to its wrappers' docstrings.
"""

import os
import sys

import cffi

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from gen_cdef import HeaderError, cdef_from_header, contracts_from_header  # noqa: E402


def make_ffi(header_path):
    with open(header_path, encoding="utf-8") as f:
        cdef = cdef_from_header(f.read())
    ffi = cffi.FFI()
    ffi.cdef(cdef)
    ffi.set_source("hetex._hetex_cffi", '#include "hetex.h"\n')
    return ffi


def main(argv):
    if len(argv) not in (3, 4):
        print("usage: build_ffi.py HEADER OUT.c [CONTRACTS.py]", file=sys.stderr)
        return 2
    try:
        ffi = make_ffi(argv[1])
    except HeaderError as e:
        print(f"build_ffi.py: {argv[1]}: {e}", file=sys.stderr)
        return 1
    ffi.emit_c_code(argv[2])
    if len(argv) == 4:
        with open(argv[1], encoding="utf-8") as f:
            contracts = contracts_from_header(f.read())
        with open(argv[3], "w", encoding="utf-8") as f:
            f.write('"""Generated from include/hetex.h by python/ffi/build_ffi.py."""\n')
            f.write(f"CONTRACTS = {contracts!r}\n")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv))
