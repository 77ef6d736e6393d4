#!/bin/sh
# same_over_tcp.sh MPIRUN PROGRAM NP: PROGRAM's results (the "hx-digest"
# line each rank prints over all of them) are the same over shared memory
# (Open MPI's vader) and over TCP (--mca btl tcp,self), and both runs pass.
set -eu
mpirun=$1 prog=$2 np=$3
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
for btl in self,vader tcp,self; do
  if ! "$mpirun" --oversubscribe --mca btl "$btl" -np "$np" "$prog" >"$tmp/$btl.out" 2>&1; then
    cat "$tmp/$btl.out" >&2
    echo "same_over_tcp: $prog failed over btl $btl (its output is above)" >&2
    exit 1
  fi
  grep '^hx-digest' "$tmp/$btl.out" | sort >"$tmp/$btl.digest"
done
if [ "$(wc -l <"$tmp/tcp,self.digest")" -ne "$np" ]; then
  echo "same_over_tcp: expected $np digest lines, got:" >&2
  cat "$tmp/tcp,self.digest" >&2
  exit 1
fi
if ! cmp -s "$tmp/self,vader.digest" "$tmp/tcp,self.digest"; then
  echo "same_over_tcp: the results differ between shared memory and TCP:" >&2
  paste "$tmp/self,vader.digest" "$tmp/tcp,self.digest" >&2
  exit 1
fi
echo "same_over_tcp: $np ranks, shared memory and TCP agree:"
cat "$tmp/tcp,self.digest"
