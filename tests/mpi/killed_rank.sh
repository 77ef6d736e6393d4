#!/bin/sh
# killed_rank.sh MPIRUN PROGRAM NP [deferred]: tests/mpi/mpi_killed.c under
# mpirun with orte_enable_recovery (else mpirun itself kills the job when a
# rank dies): the last rank SIGKILLs itself mid-training; every other rank
# must end within its 2 s timeout with an error naming the dead rank, and
# the whole job within 60 s. With "deferred", the program's mode of that
# name (ZeRO stage 2: the last rank stops before its all-gathers, which the
# others find on their next call): every other rank must say "as expected".
set -eu
mpirun=$1 prog=$2 np=$3 mode=${4:-}
tag=hx-killed
[ "$mode" = deferred ] && tag=hx-deferred
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
    want="^hx-killed: rank $r: HX_ERR_COMM after 2 steps: .*timed out after 2 s waiting for rank(s) $((np - 1)) "
  fi
  if ! grep -q "$want" "$out"; then
    echo "killed_rank: rank $r did not end with an error naming rank $((np - 1))" >&2
    fail=1
  fi
  r=$((r + 1))
done
if [ $((t1 - t0)) -ge 60 ]; then
  echo "killed_rank: the job took $((t1 - t0)) s (hung?)" >&2
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  cat "$out" >&2
  exit 1
fi
grep "^$tag" "$out"
echo "killed_rank: $((np - 1)) survivors named rank $((np - 1)); the job ended in $((t1 - t0)) s"
