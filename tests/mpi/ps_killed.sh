#!/bin/sh
# ps_killed.sh MPIRUN PROGRAM MODE: tests/mpi/mpi_ps_killed.c under mpirun
# -np 3 with orte_enable_recovery (else mpirun itself ends the job when a
# rank dies). MODE server: the server dies; both workers must end with
# HX_ERR_COMM naming it. MODE worker: worker 1 dies; the server must end
# serving with HX_ERR_COMM naming it, 3 whole steps applied, and save a
# checkpoint that loads; worker 0 must fail with the server's error. MODE
# devcache (-np 2): the one worker, with a device cache, dies with dirty
# rows cached; the server must end serving with HX_ERR_COMM naming it and
# its device cache, and save a checkpoint that loads (and holds the
# write-backs that came after the worker's own save). Each survivor exits
# 0 only when it saw that; the job must end within 60 s.
set -eu
mpirun=$1 prog=$2 mode=$3
out=$(mktemp)
trap 'rm -f "$out"' EXIT
t0=$(date +%s)
np=3
[ "$mode" = devcache ] && np=2
timeout 60 "$mpirun" --oversubscribe --mca orte_enable_recovery 1 -np $np "$prog" "$mode" >"$out" 2>&1 || true
t1=$(date +%s)
fail=0
want() { grep -q "$1" "$out" || { echo "ps_killed ($mode): no line '$1'" >&2; fail=1; }; }
if [ "$mode" = devcache ]; then
  want "^hx-ps-killed: server: HX_ERR_COMM, 0 steps applied, saved and loaded: yes: .*worker rank 0 sent nothing for 2 s while its device cache held rows"
elif [ "$mode" = server ]; then
  want "^hx-ps-killed: worker 0: HX_ERR_COMM after [0-9]* steps: .*parameter server rank 2 (server 0 of 1) did not answer within 2 s"
  want "^hx-ps-killed: worker 1: HX_ERR_COMM after [0-9]* steps: .*parameter server rank 2 (server 0 of 1) did not answer within 2 s"
else
  want "^hx-ps-killed: server: HX_ERR_COMM, 3 steps applied, saved and loaded: yes: .*worker rank 1 sent nothing for 2 s"
  want "^hx-ps-killed: worker 0: HX_ERR_COMM after 4 steps: .*worker rank 1"
fi
if [ $((t1 - t0)) -ge 60 ]; then
  echo "ps_killed ($mode): the job took $((t1 - t0)) s (hung?)" >&2
  fail=1
fi
if [ "$fail" -ne 0 ]; then
  cat "$out" >&2
  exit 1
fi
grep '^hx-ps-killed' "$out"
echo "ps_killed ($mode): the survivors named the dead rank; the job ended in $((t1 - t0)) s"
