#!/bin/sh
# hetex plot --bench (what ./build.sh plot runs): every benchmark result in
# bench/results/ (*.json, *.jsonl) draws its pictures (gnuplot exits 0, each
# file a PNG by its signature and not empty), each is linked from a .md
# there and committed in bench/results/plots/; a line that is not JSON (inf)
# is refused naming the file and the line; a result file of an unknown
# benchmark, one without the numbers its row draws, and gnuplot failing are
# each an error.
# Usage: test_plot_bench.sh HETEX SOURCE_DIR
set -u
hetex=$1
src=$2
tmp=$(mktemp -d "${TMPDIR:-/tmp}/hx_test_plot_bench-XXXXXX")
trap 'rm -rf "$tmp"' EXIT
fails=0 checks=0
check() { # condition-status message
  checks=$((checks + 1))
  if [ "$1" -ne 0 ]; then
    fails=$((fails + 1))
    echo "FAIL: $2"
  fi
}
is_png() { [ -s "$1" ] && [ "$(head -c 8 "$1" | od -An -tx1 | tr -d ' \n')" = 89504e470d0a1a0a ]; }

files=0
for f in "$src"/bench/results/*.json "$src"/bench/results/*.jsonl; do
  [ -e "$f" ] || continue
  files=$((files + 1))
  "$hetex" plot --bench "$f" --output-dir "$tmp" >"$tmp/out" 2>&1
  rc=$?
  check $rc "hetex plot --bench $f exits $rc: $(cat "$tmp/out")"
  pngs=$(sed -n "s|^hetex plot: '$tmp/\\(.*\\.png\\)': [1-9][0-9]* series, [1-9][0-9]* points from .*|\\1|p" "$tmp/out")
  [ -n "$pngs" ]
  check $? "$f: no picture reported: $(cat "$tmp/out")"
  for png in $pngs; do
    is_png "$tmp/$png"
    check $? "$f: $png is not a PNG (or is empty)"
    grep -qF "(plots/$png)" "$src"/bench/results/*.md
    check $? "$f: no .md in bench/results links plots/$png (./build.sh plot links them)"
    [ -s "$src/bench/results/plots/$png" ]
    check $? "$f: bench/results/plots/$png is not committed (./build.sh plot draws it)"
  done
done
[ "$files" -ge 20 ]
check $? "only $files results files found under $src/bench/results"

# Refusals: exit 1 and a message naming the file (and the line).
printf '{"bench":"gpt","case":"a","ratio":0.5}\n{"bench":"gpt","case":"b","ratio":inf}\n' >"$tmp/gpt-x.json"
"$hetex" plot --bench "$tmp/gpt-x.json" --output-dir "$tmp" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "'$tmp/gpt-x.json' line 2 is not a JSON object" "$tmp/out"
check $? "a line with inf is refused naming the file and line 2 (exit $rc): $(cat "$tmp/out")"
printf '{"bench":"gpt","case":"a"}\n' >"$tmp/gpt-y.json"
"$hetex" plot --bench "$tmp/gpt-y.json" --output-dir "$tmp" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "no line has a number for ratio" "$tmp/out"
check $? "results without the row's field are refused naming it (exit $rc): $(cat "$tmp/out")"
printf '{"bench":"nosuch","x":1}\n' >"$tmp/nosuch-cpu.json"
"$hetex" plot --bench "$tmp/nosuch-cpu.json" --output-dir "$tmp" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "no picture is defined for its benchmark" "$tmp/out" &&
  grep -qF "tools/plot_bench.c" "$tmp/out"
check $? "an unknown benchmark is refused saying where pictures are defined (exit $rc): $(cat "$tmp/out")"

# gnuplot's exit status is hetex's: a gnuplot that fails fails the plot.
mkdir "$tmp/bin" "$tmp/failed"
printf '#!/bin/sh\ncat >/dev/null\necho "gnuplot: planted failure"\nexit 3\n' >"$tmp/bin/gnuplot"
chmod +x "$tmp/bin/gnuplot"
PATH="$tmp/bin:$PATH" "$hetex" plot --bench "$src/bench/results/gpt-cpu-2026-11-21.json" \
  --output-dir "$tmp/failed" >"$tmp/out" 2>&1
rc=$?
[ $rc -eq 1 ] && grep -qF "gnuplot failed" "$tmp/out" && [ ! -e "$tmp/failed/gpt-cpu-2026-11-21.png" ]
check $? "a failing gnuplot fails the plot and leaves no PNG (exit $rc): $(cat "$tmp/out")"

echo "test_plot_bench: $files results files, $checks checks, $fails failed"
[ "$fails" -eq 0 ]
