#!/bin/sh
# killed_rank.sh MPIRUN PROGRAM NP [deferred|midstep]: tests/mpi/mpi_killed.c
# under mpirun with orte_enable_recovery (else mpirun itself kills the job
# when a rank dies): the last rank SIGKILLs itself mid-training; every other
# rank must end within its 2 s timeout with an error naming the dead rank,
# and the whole job within 60 s. With "deferred", the program's mode of that
# name (ZeRO stage 2, a 1 s timeout: the last rank stops before its
# all-gathers, which the others find on their next call): every other rank
# must say "as expected".
# With "midstep" (ZeRO stage 2, a 1 s timeout): the last rank must say it
# was killed in step 2's backward after posting a reduce-scatter, and every
# other rank must end as above, its error naming a reduce-scatter.
set -eu
mpirun=$1 prog=$2 np=$3 mode=${4:-}
tag=hx-killed timeout_s=2 what=".*"
[ "$mode" = deferred ] && tag=hx-deferred
[ "$mode" = midstep ] && timeout_s=1 what=".*reduce_scatter.*"
out=$(mktemp)
trap 'rm -f "$out"' EXIT
t0=$(date +%s)
timeout 60 "$mpirun" --oversubscribe --mca orte_enable_recovery 1 -np "$np" "$prog" $mode >"$out" 2>&1 || true
t1=$(date +%s)
fail=0
r=0
while [ "$r" -lt $((np - 1)) ]; do
  if [ "$mode" = deferred ]; then
    want="^hx-deferred: rank $r: as expected"
  else
    want="^hx-killed: rank $r: HX_ERR_COMM after 2 steps: ${what}timed out after $timeout_s s waiting for rank(s) $((np - 1)) "
  fi
  if ! grep -q "$want" "$out"; then
    echo "killed_rank: rank $r did not end with an error naming rank $((np - 1))" >&2
    fail=1
  fi
  r=$((r + 1))
done
if [ "$mode" = midstep ] && ! grep -q "^hx-midstep: rank $((np - 1)): SIGKILL in step 2 after posting" "$out"; then
  echo "killed_rank: rank $((np - 1)) did not die after posting step 2's reduce-scatter" >&2
  fail=1
fi
if [ $((t1 - t0)) -ge 60 ]; then
  echo "killed_rank: the job took $((t1 - t0)) s (hung?)" >&2
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  cat "$out" >&2
  exit 1
fi
grep "^$tag\|^hx-midstep" "$out"
echo "killed_rank: $((np - 1)) survivors named rank $((np - 1)); the job ended in $((t1 - t0)) s"
