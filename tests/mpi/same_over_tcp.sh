#!/bin/sh
# same_over_tcp.sh MPIRUN PROGRAM NP [ARGS...]: PROGRAM's results (the
# "hx-digest" line each rank prints over all of them) are the same run to
# run over shared memory (Open MPI's vader, twice) and over TCP (--mca btl
# tcp,self), and every run passes; ARGS go to PROGRAM (e.g. --case NAME).
set -eu
mpirun=$1 prog=$2 np=$3
shift 3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for run in self,vader:1 self,vader:2 tcp,self:1; do
  btl=${run%:*}
  if ! "$mpirun" --oversubscribe --mca btl "$btl" -np "$np" "$prog" "$@" >"$tmp/$run.out" 2>&1; then
    cat "$tmp/$run.out" >&2
    echo "same_over_tcp: $prog failed over btl $btl (its output is above)" >&2
    exit 1
  fi
  grep '^hx-digest' "$tmp/$run.out" | sort >"$tmp/$run.digest"
done
if [ "$(wc -l <"$tmp/tcp,self:1.digest")" -ne "$np" ]; then
  echo "same_over_tcp: expected $np digest lines, got:" >&2
  cat "$tmp/tcp,self:1.digest" >&2
  exit 1
fi
for run in self,vader:2 tcp,self:1; do
  if ! cmp -s "$tmp/self,vader:1.digest" "$tmp/$run.digest"; then
    echo "same_over_tcp: the results of the first shared-memory run and of $run differ:" >&2
    paste "$tmp/self,vader:1.digest" "$tmp/$run.digest" >&2
    exit 1
  fi
done
echo "same_over_tcp: $np ranks, two runs over shared memory and one over TCP agree:"
cat "$tmp/tcp,self:1.digest"
