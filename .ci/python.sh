#!/usr/bin/env bash
# CI: the Python package (python/). A fresh virtual environment, then the
# package (scikit-build-core and cffi from PyPI) linking the library that
# ./build.sh built (installed to a temporary prefix, so the package does not
# compile the library a second time): `pip wheel ./python` and the wheel
# installed (asan: `pip install ./python`), then pytest.
# Needs PyPI: when pip cannot install, this fails (it never skips).
#   .ci/python.sh        after ./build.sh: every test of python/tests, then
#                        python/tests_mpi under mpirun -np 2 (data parallel)
#   .ci/python.sh asan   after ./build.sh sanitize address,undefined: the
#                        package over that build, its lifetime, error and
#                        table tests under ASan+UBSan (leak checks off:
#                        the interpreter keeps memory until exit by design)
#   PYTHON   the interpreter to make the environment with (/usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-/usr/bin/python3}
mode=${1:-all}
case "$mode" in
  all) build=build ;;
  asan) build=build-address-undefined ;;
  *) echo "usage: .ci/python.sh [asan]" >&2; exit 2 ;;
esac
[ -e "$build/CMakeCache.txt" ] || { echo "python.sh: $build/ is missing: build it first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m venv "$work/venv" ||
  { echo "python.sh: '$py -m venv' failed: apt-get install python3-venv" >&2; exit 1; }
cmake --install "$build" --prefix "$work/prefix" >/dev/null
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q pytest ||
  { echo "python.sh: pip could not install pytest: is PyPI reachable?" >&2; exit 1; }
extra=()
if [ "$mode" = asan ]; then
  # its own build folder; the module linked with the sanitizers' runtimes
  extra=(--config-settings=build-dir=.build/asan
         --config-settings=cmake.define.CMAKE_MODULE_LINKER_FLAGS=-fsanitize=address,undefined)
fi
if [ "$mode" = asan ]; then
  HETEX_PREFIX="$work/prefix" "${pip[@]}" install -q "${extra[@]}" ./python ||
    { echo "python.sh: pip install ./python failed (its output is above)" >&2; exit 1; }
else
  # the wheel `pip wheel` makes, installed into the fresh environment
  HETEX_PREFIX="$work/prefix" "${pip[@]}" wheel -q --no-deps -w "$work/wheel" ./python ||
    { echo "python.sh: pip wheel ./python failed (its output is above)" >&2; exit 1; }
  "${pip[@]}" install -q "$work"/wheel/hetex-*.whl ||
    { echo "python.sh: the wheel did not install (its output is above)" >&2; exit 1; }
fi
# From the work folder, so that `import hetex` is the installed package and
# not python/hetex of the source tree.
cd "$work"
if [ "$mode" = asan ]; then
  cc=${CC:-cc}
  export LD_PRELOAD="$($cc -print-file-name=libasan.so) $($cc -print-file-name=libubsan.so)"
  export ASAN_OPTIONS=detect_leaks=0:abort_on_error=1 UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1
  "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/python/tests/test_lifetimes.py" "$root/python/tests/test_errors.py" \
    "$root/python/tests/test_embedding.py" "$root/python/tests/test_zero_copy.py"
  # The sanitizer must be live in the module: a read of 256 bytes into 8
  # (through the raw binding, past the wrapper's checks) has to be caught.
  if out=$("$work/venv/bin/python" -c 'import hetex
from hetex._lib import ffi, lib
g = hetex.Graph(); w = g.param("w", (64,)); s = hetex.Session(g, accelerator="none")
lib.hx_session_read(s._ptr, w._ptr, ffi.new("char[]", 8), 256)' 2>&1) ||
     ! grep -q "AddressSanitizer: heap-buffer-overflow" <<<"$out"; then
    echo "python.sh: ASan did not catch a deliberate overflow in the module: not instrumented" >&2
    exit 1
  fi
  echo "python.sh: ASan is live in the module (a deliberate overflow was caught)"
else
  HX_HETEX="$root/build/hetex" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
  # Data parallel (hetex.Comm): python/tests_mpi on two ranks, each rank
  # running the same tests (their collectives match); --oversubscribe for
  # CI's two cores, root allowed where CI is root.
  command -v mpirun >/dev/null ||
    { echo "python.sh: mpirun is missing: apt-get install openmpi-bin libopenmpi-dev" >&2; exit 1; }
  OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 timeout 600 \
    mpirun -np 2 --oversubscribe "$work/venv/bin/python" -m pytest -q -p no:cacheprovider \
    "$root/python/tests_mpi"
fi
