#!/bin/sh
# test_readme.sh SRC LIBDIR: the README's minimal program (the first ```c
# block after "## A minimal program") compiles against the built library
# with warnings as errors, runs, and prints its falling loss.
set -eu
src=$1 libdir=$2
cc=${CC:-cc}
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
awk '/^## A minimal program/ { section = 1; next }
     section && /^```c$/ { inside = 1; next }
     inside && /^```$/ { exit }
     inside { print }' "$src/README.md" >"$tmp/prog.c"
[ -s "$tmp/prog.c" ] || { echo "readme: no \`\`\`c block under '## A minimal program'" >&2; exit 1; }
"$cc" -std=c11 -Wall -Wextra -Werror "$tmp/prog.c" -I"$src/include" -L"$libdir" -lhetex \
  -Wl,-rpath,"$libdir" -o "$tmp/prog"
"$tmp/prog" >"$tmp/out"
cat "$tmp/out"
first=$(sed -n 's/^step  *50  loss //p' "$tmp/out")
last=$(sed -n 's/^step  *200  loss //p' "$tmp/out")
[ -n "$first" ] && [ -n "$last" ] && awk -v a="$first" -v b="$last" 'BEGIN { exit !(b < a) }' ||
  { echo "readme: the loss did not fall (step 50: '$first', step 200: '$last')" >&2; exit 1; }
echo "readme: the minimal program compiles, runs and learns"
