#!/usr/bin/env bash
# test_arrows: .ci/check_arrows.sh fails, naming each file and line and the rule
# broken, on includes planted into a copy of the sources (the real tree need
# not be clean for this), a private header's among them; passes a small tree
# that keeps docs/arrows.txt; refuses a rules file whose arrow points up or
# whose private header is not there; and draws the arrows as DOT.
#   tests/test_arrows.sh SOURCE_ROOT
set -euo pipefail
src=$(cd "${1:?usage: tests/test_arrows.sh SOURCE_ROOT}" && pwd)
check=$src/.ci/check_arrows.sh
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
failures=0
checks=0

expect() { # description, command...: counts a check, reports a failure
  local what=$1
  shift
  checks=$((checks + 1))
  "$@" || { echo "FAIL: $what" >&2; failures=$((failures + 1)); }
}
has() { grep -qF -- "$2" "$1"; }
lacks() { ! grep -qF -- "$2" "$1"; }

# ---- planted includes in a copy of the sources ------------------------------
copy=$tmp/copy
mkdir -p "$copy/docs"
cp "$src/docs/arrows.txt" "$copy/docs/"
(cd "$src" && for d in */; do
   [ -e "$d/CMakeCache.txt" ] || find "${d%/}" -type f \( -name '*.[ch]' -o -name '*.cu' -o -name '*.cuh' \)
 done | tar -cf - -T -) | tar -C "$copy" -xf -

# file, include, the rule the checker must name. Each goes in as line 2: the
# tree's own breaches (there may be some today) never match one of these.
plants=(
  'kernels/cpu/gemm.c|#include "graph/graph.h"|kernels/cpu may not include graph'
  'graph/graph.c|#include <backend/backend.h>|graph may not include backend'
  'tools/hetex.c|#include "scheduler/scheduler.h"|tools may not include scheduler'
  'examples/gpt/gpt_run.c|#include "../../graph/graph.h"|examples may not include graph'
  'scheduler/plan.c|#include "memory/pool.h"|memory offers only memory/memory.h'
  'session/init.c|#include "ps/server.h"|folder ps is not in docs/arrows.txt'
  'offload/dpu.c|#include "scheduler/plan.h"|scheduler/plan.h is private to scheduler'
  'scheduler/trace.h|#include "scheduler/plan.h"|scheduler/plan.h is private to scheduler, and scheduler/scheduler.h, the header scheduler offers, includes it through scheduler/trace.h'
)
mkdir -p "$copy/ps"
echo '/* a folder docs/arrows.txt does not list */' >"$copy/ps/server.h"
for p in "${plants[@]}"; do
  IFS='|' read -r file inc rule <<<"$p"
  sed -i "2i $inc" "$copy/$file"
done

rc=0
"$check" "$copy" >"$tmp/after.txt" 2>"$tmp/after.err" || rc=$?
expect "the checker exits 1 on planted includes (got $rc)" test "$rc" = 1
for p in "${plants[@]}"; do
  IFS='|' read -r file inc rule <<<"$p"
  expect "$file:2: $inc: the checker names the file, line, include and rule '$rule'" \
    has "$tmp/after.txt" "$file:2: $inc: $rule"
done
expect "the checker names the unlisted folder's own file" \
  has "$tmp/after.txt" "ps/server.h: its folder ps is not in docs/arrows.txt"

"$check" --dot "$copy" >"$tmp/copy.dot"
expect "the picture draws a planted arrow red" \
  has "$tmp/copy.dot" '"kernels/cpu" -> "graph" [label="1", color=red, fontcolor=red];'

# ---- a small tree that keeps the rules ----------------------------------------
mini=$tmp/mini
mkdir -p "$mini/docs" "$mini/include" "$mini/core" "$mini/graph" "$mini/kernels/cpu" \
  "$mini/memory" "$mini/scheduler" "$mini/examples/ex" "$mini/tools" "$mini/tests" "$mini/build" \
  "$mini/dist"
cp "$src/docs/arrows.txt" "$mini/docs/"
touch "$mini/include/hetex.h" "$mini/kernels/cpu/optim.h" "$mini/memory/pool.h" \
  "$mini/scheduler/scheduler.h" "$mini/dist/dist.h" "$mini/dist/comm_state.h"
printf '#include "scheduler/scheduler.h"\n' >"$mini/scheduler/plan.h"
printf '#include "plan.h"\n' >"$mini/scheduler/plan.c"
printf '#include "hetex.h"\n' >"$mini/core/core.h"
printf '#include "core/core.h"\n' >"$mini/graph/graph.h"
printf '#include "graph/graph.h"\n#include <stdio.h>\n#include "cblas.h"\n' >"$mini/graph/graph.c"
printf '#include "optim.h"\n' >"$mini/kernels/cpu/hx_kernels.h"
printf '#include "hetex.h"\n' >"$mini/examples/ex/ex.h"
printf '#include "ex.h"\n' >"$mini/examples/ex/main.c"
printf '#include <hetex.h>\n' >"$mini/tools/cli.c"
printf '#include "graph/graph.h"\n#include "memory/pool.h"\n#include "scheduler/plan.h"\n' \
  >"$mini/tests/test_x.c"
touch "$mini/build/CMakeCache.txt" # a build tree: not sources
printf '#include "graph/graph.h"\n' >"$mini/build/gen.c"
rc=0
"$check" "$mini" >"$tmp/mini.txt" 2>&1 || rc=$?
expect "a tree that keeps the rules passes (rc $rc: $(cat "$tmp/mini.txt"))" test "$rc" = 0 -a ! -s "$tmp/mini.txt"
"$check" --dot "$mini" >"$tmp/mini.dot"
expect "the picture has the arrow graph -> core" has "$tmp/mini.dot" '"graph" -> "core" [label="1"];'
expect "the picture leaves out tests/" lacks "$tmp/mini.dot" '"tests"'

# ---- a rules file with an arrow that points up --------------------------------
sed -i 's|^core \(.*\) include$|core \1 include graph|' "$mini/docs/arrows.txt"
line=$(grep -n '^core ' "$mini/docs/arrows.txt" | cut -d: -f1)
rc=0
"$check" "$mini" >/dev/null 2>"$tmp/up.err" || rc=$?
expect "an arrow up in docs/arrows.txt fails (rc $rc)" test "$rc" = 1
expect "the checker names the rules file's line" \
  has "$tmp/up.err" "docs/arrows.txt:$line: core may include graph, which is not listed above it"

# ---- a rules file with a private header that is not there -------------------
cp "$src/docs/arrows.txt" "$mini/docs/"
echo 'private scheduler/gone.h' >>"$mini/docs/arrows.txt"
line=$(wc -l <"$mini/docs/arrows.txt")
rc=0
"$check" "$mini" >/dev/null 2>"$tmp/gone.err" || rc=$?
expect "a private header that is not there fails (rc $rc)" test "$rc" = 1
expect "the checker names the rules file's line" \
  has "$tmp/gone.err" "docs/arrows.txt:$line: private header scheduler/gone.h must be"

echo "test_arrows: $((checks - failures)) passed, $failures failed"
[ "$failures" = 0 ]
