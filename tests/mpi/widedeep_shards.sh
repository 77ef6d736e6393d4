#!/bin/sh
# widedeep_shards.sh MPIRUN HETEX DATA: `hetex widedeep --shards 2` under
# mpirun -np 2 (both tables sharded row-wise, the MLP data parallel) scores
# Adult's test file with the accuracy and AUC of one process alone, to 3
# decimals; only rank 0 prints; --shards that is not the number of ranks,
# and a global batch the ranks do not divide, are refused with a reason.
set -eu
mpirun=$1 hetex=$2 data=$3
one=$(mktemp) two=$(mktemp)
trap 'rm -f "$one" "$two"' EXIT
fail() { cat "$one" "$two" >&2; echo "widedeep_shards: $*" >&2; exit 1; }
args="--data $data --epochs 2 --accelerator emu --quiet"
"$hetex" widedeep $args >"$one" 2>&1 || fail "the run of one process failed"
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --shards 2 $args >"$two" 2>&1 || fail "the run on 2 ranks failed"
[ "$(grep -c '^final:' "$two")" = 1 ] || fail "want one final line (rank 0's)"
grep -q '^hetex widedeep: 2 ranks, 128 rows of each batch per rank' "$two" || fail "no line naming the ranks"
# accuracy and AUC, rounded to 3 decimals
metrics() { sed -n 's/^final: accuracy \([0-9.]*\)  AUC \([0-9.]*\) .*/\1 \2/p' "$1" | awk '{ printf "%.3f %.3f\n", $1, $2 }'; }
a=$(metrics "$one") b=$(metrics "$two")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "accuracy and AUC: one process '$a', 2 ranks '$b'"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --shards 4 $args >"$two" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "but 2 ranks run: start it as mpirun -np 4" "$two" || fail "--shards 4 on 2 ranks not refused (rc $rc)"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --shards 2 --batch 255 $args >"$two" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "must be a multiple of it" "$two" || fail "--batch 255 on 2 ranks not refused (rc $rc)"
echo "widedeep_shards: accuracy and AUC $b on 2 ranks, as one process alone; bad --shards and --batch refused"
