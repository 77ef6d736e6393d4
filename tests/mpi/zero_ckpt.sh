#!/bin/sh
# zero_ckpt.sh MPIRUN PROGRAM: sharded ZeRO checkpoints (tests/mpi/mpi_zero_ckpt.c)
# in one folder: saved at 4 ranks (and reloaded there bitwise, damaged
# shards refused; also at stage 3), loaded at 2 ranks at stages 1 and 3
# and by one process without MPI, each continued within 1e-6 of the
# uninterrupted run; then a job of 2 ranks that saves after every step is
# killed (SIGKILL: mpirun and the ranks, one right after the other) at 3
# random instants after its first save: each time the checkpoint it leaves loads in a plain process, is at
# least as new as the last save the job reported, and matches a lone run.
set -eu
mpirun=$1 prog=$2
dir=$(mktemp -d)
job=
# the job's processes: mpirun and its children (the ranks), from /proc (a
# process gone between the glob and its read fails awk, and under set -e the
# list came back empty: nothing was killed and the wait below never ended)
procs() { awk -v p="$1" '$4 == p { print $1 }' /proc/[0-9]*/stat 2>/dev/null || true; echo "$1"; }
trap 'if [ -n "$job" ]; then kill -9 $(procs "$job") 2>/dev/null || true; fi; rm -rf "$dir"' EXIT
trap 'exit 1' HUP INT TERM # (a timeout's signal: the job goes too)
"$mpirun" --oversubscribe -np 4 "$prog" --mode save --dir "$dir"
"$mpirun" --oversubscribe -np 2 "$prog" --mode resume --stage 1 --dir "$dir"
"$mpirun" --oversubscribe -np 2 "$prog" --mode resume --stage 3 --dir "$dir"
"$prog" --mode alone --dir "$dir"
out=$dir/saver.out
for k in 1 2 3; do
  "$mpirun" --oversubscribe -np 2 "$prog" --mode saver --dir "$dir" >"$out" 2>&1 &
  job=$!
  i=0
  until grep -q '^saved step' "$out" 2>/dev/null; do
    i=$((i + 1))
    if [ $i -gt 600 ] || ! kill -0 "$job" 2>/dev/null; then cat "$out" >&2; echo "zero_ckpt: the saver never saved" >&2; exit 1; fi
    sleep 0.1
  done
  sleep "$(awk -v k=$k 'BEGIN { srand(); printf "%.2f", rand() * 0.4 + 0.01 * k }')"
  kill -9 $(procs "$job") 2>/dev/null || true
  wait "$job" 2>/dev/null || true
  job=
  saved=$(grep -c '^saved step' "$out" || true)
  "$prog" --mode check --min-step "$saved" --dir "$dir" || { cat "$out" >&2; exit 1; }
  echo "zero_ckpt: kill $k after $saved saves reported: the checkpoint left loads"
done
echo "zero_ckpt: saved at 4 ranks, loaded at 4, 2 and 1 (no MPI); 3 jobs killed mid-save left loadable checkpoints"
