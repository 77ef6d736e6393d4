#!/bin/sh
# widedeep_resume.sh MPIRUN HETEX ADULT_DIR: `hetex widedeep --save/--resume` with
# sharded tables. One epoch is saved by 2 ranks (--shards 2) and by 1 server
# and 2 workers (--servers 1); each checkpoint is resumed for epoch 2 in
# another layout, and epoch 2 is compared with the uninterrupted 2-epoch run
# of 2 ranks (--metrics: every step's loss, the epoch's train and test loss,
# AUC and accuracy, printed exactly):
#   - where 2 ranks sum the gradients (--shards 2; --servers 1 or 2 with 2
#     workers): bitwise equal, since the same sums run in the same order
#     whichever ranks hold the rows (a server sums each id's rows in worker
#     order, as collective mode's owner does);
#   - at 4 ranks (--shards 4) and in one process without MPI: test loss and
#     AUC within 1e-6 relative, not bitwise: the MLP's gradient all-reduce
#     and each row's gradient sum add 4 (or 1) partial sums where the run
#     saved added 2, so the last bits of epoch 2 differ.
# A checkpoint of one process is refused by a sharded resume, naming why;
# --save into a folder of other files is refused before anything runs.
# Adult's first 8192 training rows and 4096 test rows (8 steps an epoch):
# what a resume must reproduce does not depend on the size, and the whole
# file made this the slowest test under ASan (50 s).
set -eu
mpirun=$1 hetex=$2 adult=$3
dir=$(mktemp -d)
trap 'rm -rf "$dir"' EXIT
data=$dir/adult
mkdir "$data"
head -n 8192 "$adult/adult.data" >"$data/adult.data"
head -n 4097 "$adult/adult.test" >"$data/adult.test" # its first line is a comment
fail() { cat "$dir"/*.out >&2 2>/dev/null || true; echo "widedeep_resume: $*" >&2; exit 1; }
args="--data $data --batch 1024 --accelerator emu --quiet --threads 1"
run() { # name, ranks (0: no mpirun), flags...
  name=$1 np=$2
  shift 2
  if [ "$np" = 0 ]; then
    "$hetex" widedeep $args --metrics "$dir/$name.jsonl" "$@" >"$dir/$name.out" 2>&1 || fail "run $name failed"
  else
    "$mpirun" --oversubscribe -np "$np" "$hetex" widedeep $args --metrics "$dir/$name.jsonl" "$@" \
      >"$dir/$name.out" 2>&1 || fail "run $name failed"
  fi
}
# epoch 2's records, without the clock (time_s, examples_per_s)
epoch2() {
  grep '"epoch":2' "$dir/$1.jsonl" | sed 's/"time_s":[0-9.e+-]*,//; s/,"examples_per_s":[0-9.e+-]*//'
}
same() { # run: epoch 2 bitwise the uninterrupted run's
  [ "$(epoch2 "$1" | wc -l)" -gt 2 ] || fail "$1: no epoch 2 in its metrics"
  epoch2 "$1" | cmp -s - "$dir/whole.e2" || { epoch2 "$1" | diff - "$dir/whole.e2" | head -5 >&2; fail "$1: epoch 2 differs from the uninterrupted run"; }
}
field() { sed -n "s/.*\"event\":\"epoch\".*\"$2\":\([0-9.e+-]*\).*/\1/p" "$dir/$1.jsonl" | tail -1; }
close() { # run: epoch 2's test loss and AUC within 1e-6 relative of the uninterrupted run's
  for k in test_loss test_auc; do
    a=$(field whole "$k") b=$(field "$1" "$k")
    awk -v a="$a" -v b="$b" 'BEGIN { d = a - b; if (d < 0) d = -d; exit !(a != "" && b != "" && d <= 1e-6 * a) }' ||
      fail "$1: $k $b, the uninterrupted run's $a: more than 1e-6 relative apart"
    echo "widedeep_resume: $1: $k $b against $a"
  done
}

run whole 2 --shards 2 --epochs 2
epoch2 whole >"$dir/whole.e2"
# collective mode saves at 2 ranks
run c2 2 --shards 2 --epochs 1 --save "$dir/ck-shards"
grep -q '"epoch":2' "$dir/c2.jsonl" && fail "c2 ran a second epoch"
ls "$dir/ck-shards" | grep -q '^deep-1\.g1\.1-of-2$' || fail "no shard file of rank 1 in the collective save"
run c2r 2 --shards 2 --epochs 2 --resume "$dir/ck-shards"
grep -q '^hetex widedeep: .* 2 epochs (resumed)' "$dir/c2r.out" || fail "c2r does not say it resumed"
same c2r
run c2s 4 --servers 2 --epochs 2 --resume "$dir/ck-shards"
same c2s
run c4 4 --shards 4 --epochs 2 --resume "$dir/ck-shards"
close c4
run c1 0 --epochs 2 --resume "$dir/ck-shards"
close c1
# server mode saves with 1 server and 2 workers (and once more at epoch 2: the old epoch's files go)
run s1 3 --servers 1 --epochs 1 --save "$dir/ck-servers"
ls "$dir/ck-servers" | grep -q '^wide-1\.g1\.0-of-1$' || fail "no shard file of the server in the server-mode save"
run s1c 2 --shards 2 --epochs 2 --resume "$dir/ck-servers"
same s1c
run s1r 3 --servers 1 --epochs 2 --resume "$dir/ck-servers" --save "$dir/ck-servers"
same s1r
ls "$dir/ck-servers" | grep -Eq '^(deep|wide|session)-1(\.|$)' && fail "epoch 1's files left beside epoch 2's: $(ls "$dir/ck-servers")"
grep -q '^epochs 2$' "$dir/ck-servers/meta" || fail "the server-mode save of epoch 2 did not commit"
# refusals: a checkpoint of one process resumed sharded; --save into a folder of other files
run alone 0 --epochs 1 --save "$dir/ck-alone"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep $args --shards 2 --epochs 2 --resume "$dir/ck-alone" \
  >"$dir/refused.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "checkpoint of one process" "$dir/refused.out" || fail "a one-process checkpoint resumed sharded (rc $rc)"
mkdir "$dir/other" && touch "$dir/other/notes"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep $args --shards 2 --epochs 1 --save "$dir/other" \
  >"$dir/refused.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "not a checkpoint" "$dir/refused.out" || fail "--save into a folder of other files (rc $rc)"
echo "widedeep_resume: saved at 2 ranks and at 1 server + 2 workers; resumed at 2 ranks (from both), 2 servers + 2 workers, 1 server + 2 workers: epoch 2 bitwise the uninterrupted run's; at 4 ranks and in one process within 1e-6"
