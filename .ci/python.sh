#!/usr/bin/env bash
# CI: the Python package (python/). A fresh virtual environment, then
# `pip install ./python` (scikit-build-core and cffi from PyPI) linking the
# library that ./build.sh built (installed to a temporary prefix, so the
# package does not compile the library a second time), then pytest.
# Needs PyPI: when pip cannot install, this fails (it never skips).
#   PYTHON   the interpreter to make the environment with (/usr/bin/python3)
set -euo pipefail
cd "$(dirname "$0")/.."
root=$PWD
py=${PYTHON:-/usr/bin/python3}
[ -e build/CMakeCache.txt ] || { echo "python.sh: build/ is missing: run ./build.sh first" >&2; exit 1; }
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
"$py" -m venv "$work/venv" ||
  { echo "python.sh: '$py -m venv' failed: apt-get install python3-venv" >&2; exit 1; }
cmake --install build --prefix "$work/prefix" >/dev/null
pip=("$work/venv/bin/python" -m pip --disable-pip-version-check)
"${pip[@]}" install -q pytest ||
  { echo "python.sh: pip could not install pytest: is PyPI reachable?" >&2; exit 1; }
HETEX_PREFIX="$work/prefix" "${pip[@]}" install -q ./python ||
  { echo "python.sh: pip install ./python failed (its output is above)" >&2; exit 1; }
# From the work folder, so that `import hetex` is the installed package and
# not python/hetex of the source tree.
cd "$work"
HX_HETEX="$root/build/hetex" "$work/venv/bin/python" -m pytest -q -p no:cacheprovider "$root/python/tests"
