#!/bin/sh
# widedeep_servers.sh MPIRUN HETEX ADULT_DIR: `hetex widedeep --servers 1` under
# mpirun -np 3 (server mode: rank 2 holds both tables, ranks 0 and 1 train,
# the MLP data parallel between them) scores Adult's test file with the
# accuracy and AUC of one process alone to 3 decimals when synchronous,
# and within 0.005 AUC with --staleness 4; the server says its role and
# rows, worker 0 what it pulled and pushed; --servers that leaves no
# worker, and --staleness without --servers, are refused with a reason.
# With one worker (-np 2) --device-cache 80 (a step touches up to 70 of
# the deep table's rows: it writes rows back every step) gives every
# epoch's losses and metrics of the run without it and prints its line;
# so does it with two workers (the same hot rows on both: embedding/ps_hot.c),
# against the synchronous run of two workers without it.
# Adult's first 8192 training rows and 4096 test rows (32 steps an epoch):
# what server mode must reproduce does not depend on the size, and the
# whole file made this the slowest test under ASan (23 s). (On these rows
# a cache of 96 wrote nothing back: hence 80.)
set -eu
mpirun=$1 hetex=$2 adult=$3
dir=$(mktemp -d)
one=$dir/one sync=$dir/sync stale=$dir/stale
trap 'rm -rf "$dir"' EXIT
data=$dir/adult
mkdir "$data"
head -n 8192 "$adult/adult.data" >"$data/adult.data"
head -n 4097 "$adult/adult.test" >"$data/adult.test" # its first line is a comment
fail() { cat "$one" "$sync" "$stale" >&2; echo "widedeep_servers: $*" >&2; exit 1; }
args="--data $data --epochs 2 --accelerator emu --quiet"
"$hetex" widedeep $args >"$one" 2>&1 || fail "the run of one process failed"
"$mpirun" --oversubscribe -np 3 "$hetex" widedeep --servers 1 $args >"$sync" 2>&1 || fail "the synchronous run failed"
"$mpirun" --oversubscribe -np 3 "$hetex" widedeep --servers 1 --staleness 4 $args >"$stale" 2>&1 ||
  fail "the run at staleness 4 failed"
cp "$sync" "$dir/sync2"
for f in "$sync" "$stale"; do
  [ "$(grep -c '^final:' "$f")" = 1 ] || fail "want one final line (worker 0's)"
  grep -q '^hetex widedeep: rank 2 is server 0 of 1: it holds [0-9]* rows' "$f" || fail "no line of the server's role"
  grep -q '^hetex widedeep: server mode: ranks 0-1 train (workers), ranks 2-2 hold the tables' "$f" ||
    fail "no line naming the roles"
  grep -q '^server mode: worker 0 pulled [0-9.]* KiB and pushed [0-9.]* KiB a step' "$f" || fail "no worker stats"
  grep -q '^hetex widedeep: server 0: 128 steps applied' "$f" || fail "the server did not apply 2 x 32 steps of 2 tables"
done
grep -q 'ran at most 0 steps ahead of the applied pushes (bound 0)' "$sync" || fail "synchronous pulls ran ahead"
grep -q 'the most steps a pull ran ahead of the applied pushes: [0-4]$' "$stale" || fail "a pull past the bound of 4"
# accuracy and AUC, rounded to 3 decimals
metrics() { sed -n 's/^final: accuracy \([0-9.]*\)  AUC \([0-9.]*\) .*/\1 \2/p' "$1" | awk '{ printf "%.3f %.3f\n", $1, $2 }'; }
a=$(metrics "$one") b=$(metrics "$sync") c=$(metrics "$stale")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "accuracy and AUC: one process '$a', server mode '$b'"
auc() { sed -n 's/^final: accuracy [0-9.]*  AUC \([0-9.]*\) .*/\1/p' "$1"; }
awk -v x="$(auc "$one")" -v y="$(auc "$stale")" 'BEGIN { d = x - y; if (d < 0) d = -d; exit !(d <= 0.005) }' ||
  fail "AUC at staleness 4 $(auc "$stale"), one process $(auc "$one"): more than 0.005 apart"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --servers 2 $args >"$sync" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "but 2 ranks run: start it as mpirun -np N hetex widedeep --servers 2 with N > 2" "$sync" ||
  fail "--servers 2 on 2 ranks not refused (rc $rc)"
rc=0
"$hetex" widedeep --staleness 2 $args >"$sync" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "give --servers too" "$sync" || fail "--staleness without --servers not refused (rc $rc)"
epochs() { sed -n 's/^\(epoch .*accuracy [0-9.]*\).*/\1/p' "$1"; }
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --servers 1 $args >"$sync" 2>&1 || fail "-np 2 --servers 1 failed"
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --servers 1 --device-cache 80 $args >"$stale" 2>&1 ||
  fail "-np 2 --servers 1 --device-cache 80 failed"
[ "$(epochs "$sync" | wc -l)" = 2 ] && [ "$(epochs "$sync")" = "$(epochs "$stale")" ] ||
  fail "one worker: the epochs with --device-cache 80 differ from those without"
[ "$(grep -c '^ *deep table device cache: 80 rows, hit rate [0-9.]*%; per step [0-9]* rows in ([0-9]* ahead), [1-9][0-9]* written back' "$stale")" = 2 ] ||
  fail "no device cache line per epoch, or one that wrote no rows back"
"$mpirun" --oversubscribe -np 3 "$hetex" widedeep --servers 1 --device-cache 80 $args >"$stale" 2>&1 ||
  fail "-np 3 --servers 1 --device-cache 80 failed"
[ "$(epochs "$dir/sync2" | wc -l)" = 2 ] && [ "$(epochs "$dir/sync2")" = "$(epochs "$stale")" ] ||
  fail "two workers: the epochs with --device-cache 80 differ from those without"
[ "$(grep -c '^ *deep table device cache: 80 rows, hit rate [0-9.]*%' "$stale")" = 2 ] ||
  fail "two workers: no device cache line per epoch"
echo "widedeep_servers: accuracy and AUC $b with 1 server and 2 workers, as one process alone; $c at staleness 4"
