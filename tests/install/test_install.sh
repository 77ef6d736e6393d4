#!/bin/sh
# Installs the built tree into a temporary prefix, then builds a program
# outside the tree twice: with pkg-config and with find_package(hetex).
set -eu
src=$1 build=$2
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
cmake --install "$build" --prefix "$tmp/prefix" >/dev/null
export PKG_CONFIG_PATH="$tmp/prefix/lib/pkgconfig"
cc "$src/tests/install/consumer.c" -o "$tmp/consumer_pc" $(pkg-config --cflags --libs hetex)
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/consumer_pc"
cc -static-libgcc "$src/tests/install/consumer.c" -o "$tmp/consumer_static" \
   $(pkg-config --cflags hetex) "$tmp/prefix/lib/libhetex.a" $(pkg-config --libs-only-l --static hetex | sed 's/-lhetex//')
"$tmp/consumer_static"
cmake -S "$src/tests/install" -B "$tmp/cm" -DCMAKE_PREFIX_PATH="$tmp/prefix" >/dev/null
cmake --build "$tmp/cm" >/dev/null
LD_LIBRARY_PATH="$tmp/prefix/lib" "$tmp/cm/consumer"
echo "install: 3 passed, 0 failed"
