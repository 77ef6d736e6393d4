#!/bin/sh
# gpt_zero.sh MPIRUN HETEX: `hetex gpt --zero 0` under mpirun -np 2 trains a
# small GPT data-parallel: rank 0 reports the run once, every rank its
# model-state memory against the ZeRO formula and the bytes it sent per
# step against a ring all-reduce's; --zero 1 (not built) and a global batch
# the ranks do not divide are refused with a reason.
set -eu
mpirun=$1 hetex=$2
out=$(mktemp)
trap 'rm -f "$out"' EXIT
fail() { cat "$out" >&2; echo "gpt_zero: $*" >&2; exit 1; }
small="--layers 1 --heads 2 --width 32 --context 16 --steps 3 --eval-every 3 --eval-iters 1 --accelerator emu --quiet"
"$mpirun" --oversubscribe -np 2 "$hetex" gpt --zero 0 --batch 4 $small >"$out" 2>&1 || fail "the run failed"
[ "$(grep -c '^summary: 3 steps' "$out")" = 1 ] || fail "want one summary line (rank 0's)"
grep -q '^zero: 2 ranks, stage 0, global batch 4 (2 per rank)$' "$out" || fail "no zero: line"
for r in 0 1; do
  grep -q "^zero: rank $r of 2: model states .* bytes/param .*ZeRO stage 0 formula" "$out" ||
    fail "rank $r: no memory line"
  grep -q "^zero: rank $r sent [0-9]* bytes per step .* ratio 1\.0" "$out" || fail "rank $r: no bytes line"
done
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" gpt --zero 1 --batch 4 $small >"$out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "has ZeRO stage 0 only" "$out" || fail "--zero 1 not refused (rc $rc)"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" gpt --zero 0 --batch 3 $small >"$out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "must be a multiple of the 2 ranks" "$out" || fail "--batch 3 on 2 ranks not refused (rc $rc)"
echo "gpt_zero: hetex gpt --zero 0 ran on 2 ranks; --zero 1 and an odd batch refused"
