#!/bin/sh
# test_install.sh SRC BUILD: the install is usable where it is put.
# Installs the built tree into a temporary prefix, moves it elsewhere, checks
# that no installed file names a path of the build machine, then builds and
# runs a program outside the tree against the moved copy: with pkg-config
# (shared, static) and with find_package(hetex) (shared, static). Last, a
# project that takes hetex from the source tree with add_subdirectory
# builds (the library only: its CUDA backend off, no tests) and runs.
# CC names the compiler; HX_CUDA_LIBDIR is CUDA's library directory when
# the build has the CUDA backend (for the static link).
set -eu
src=$1 build=$2
cc=${CC:-cc}
jobs=$(nproc 2>/dev/null || echo 2)
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
passed=0
ok() { passed=$((passed + 1)); }

cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
mv "$tmp/prefix" "$tmp/moved"
prefix=$tmp/moved
# (share/hetex/data: the bundled datasets, copied as they are; their READMEs
# may name where a system keeps a dataset.)
if grep -rao --exclude-dir=data -e "$src[^\"; ]*" -e "$build[^\"; ]*" -e "$tmp/prefix[^\"; ]*" \
        -e "/usr/[^\"; ]*" -e "/opt/[^\"; ]*" "$prefix" >&2; then
  echo "install: installed files name the build machine's paths (above)" >&2
  exit 1
fi
ok

export PKG_CONFIG_PATH="$(dirname "$(find "$prefix" -name hetex.pc)")"
libdir=$(pkg-config --variable=libdir hetex)
"$cc" "$src/tests/install/consumer.c" -o "$tmp/consumer_pc" $(pkg-config --cflags --libs hetex)
"$tmp/consumer_pc" # found through the rpath pkg-config gives, no LD_LIBRARY_PATH
ok
if [ -n "${HX_CUDA_LIBDIR:-}" ]; then export LIBRARY_PATH="$HX_CUDA_LIBDIR${LIBRARY_PATH:+:$LIBRARY_PATH}"; fi
"$cc" "$src/tests/install/consumer.c" -o "$tmp/consumer_pc_static" $(pkg-config --cflags hetex) \
   "$libdir/libhetex.a" $(pkg-config --static --libs hetex | sed 's/-lhetex//')
"$tmp/consumer_pc_static"
ok

cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$prefix" >/dev/null
cmake --build "$tmp/cm" -j "$jobs" >/dev/null
"$tmp/cm/consumer"
ok
"$tmp/cm/consumer_static"
ok

cmake -S "$src/tests/install" -B "$tmp/sub" -DHETEX_SOURCE_DIR="$src" -DHX_CUDA=OFF >/dev/null
cmake --build "$tmp/sub" -j "$jobs" --target consumer consumer_static >/dev/null
"$tmp/sub/consumer"
ok
"$tmp/sub/consumer_static"
ok
# The installed hetex finds its bundled data from anywhere.
(cd "$tmp" && "$prefix/bin/hetex" widedeep --epochs 1 --quiet --threads 1 >"$tmp/wd.txt") ||
  { cat "$tmp/wd.txt" >&2; echo "install: the installed hetex widedeep failed" >&2; exit 1; }
grep -q "share/hetex/data/adult" "$tmp/wd.txt" ||
  { cat "$tmp/wd.txt" >&2; echo "install: hetex widedeep did not read the installed data" >&2; exit 1; }
ok
echo "install: $passed passed, 0 failed"
