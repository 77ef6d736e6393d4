#!/bin/sh
# gpt_zero_ckpt.sh MPIRUN HETEX: `hetex gpt --zero 2 --save DIR` under mpirun
# -np 4 checkpoints sharded at every evaluation; a copy of the run whose
# ranks kill themselves (SIGKILL, $HX_CLI_CRASH_AT=1) right after the
# commit of its step-3 checkpoint leaves that checkpoint, resumed at 4
# ranks (the step 6 line bitwise the run's that never stopped), at 2 ranks
# --zero 1 and by one process without mpirun (same global batch: they run
# to the end); a --batch that differs is refused naming the flag.
set -eu
mpirun=$1 hetex=$2
d=$(mktemp -d)
trap 'rm -rf "$d"' EXIT
fail() { cat "$d/out" >&2; echo "gpt_zero_ckpt: $*" >&2; exit 1; }
run="gpt --layers 1 --heads 2 --width 32 --context 16 --batch 8 --steps 6 --eval-every 3 --eval-iters 2 --dtype f32 --accelerator emu --quiet --sample 0"
lines() { grep -E '^(step|summary)' "$1" | sed 's/ [0-9.]* steps\/s.*//; s/ in [0-9.]*s (.*)//'; }
"$mpirun" --oversubscribe -np 4 "$hetex" $run --zero 2 --save "$d/full" >"$d/out" 2>&1 || fail "the uninterrupted run failed"
lines "$d/out" >"$d/want"
ls "$d/full" | grep -q '^zsession\.g2\.3-of-4$' || fail "no shard of rank 3 in $(ls "$d/full")"
rc=0
HX_CLI_CRASH_AT=1 "$mpirun" --oversubscribe -np 4 "$hetex" $run --zero 2 --save "$d/ck" >"$d/out" 2>&1 || rc=$?
[ $rc -ne 0 ] && [ -e "$d/ck/state-3" ] && [ -e "$d/ck/zsession" ] && [ ! -e "$d/ck/state-6" ] ||
  fail "the run killed right after its step-3 checkpoint's commit (rc $rc) left: $(ls "$d/ck" | tr '\n' ' ')"
cp -r "$d/ck" "$d/ck2"
cp -r "$d/ck" "$d/ck1"
"$mpirun" --oversubscribe -np 4 "$hetex" $run --zero 2 --resume "$d/ck" >"$d/out" 2>&1 || fail "resume at 4 ranks failed"
grep -q "resumed from '$d/ck' at step 3 of 6" "$d/out" || fail "not resumed at step 3"
lines "$d/out" >"$d/got"
tail -2 "$d/want" | head -1 >"$d/want6"
grep '^step     6' "$d/got" | cmp -s - "$d/want6" || fail "resumed at 4 ranks: step 6 differs: $(cat "$d/got") / $(cat "$d/want6")"
"$mpirun" --oversubscribe -np 2 "$hetex" $run --zero 1 --resume "$d/ck2" >"$d/out" 2>&1 || fail "resume at 2 ranks failed"
grep -q "at step 3 of 6" "$d/out" && grep -q '^summary: 3 steps' "$d/out" || fail "resume at 2 ranks did not train steps 4-6"
"$hetex" $run --resume "$d/ck1" --save "$d/ck1" >"$d/out" 2>&1 || fail "resume by one process failed"
grep -q "at step 3 of 6" "$d/out" && grep -q '^summary: 3 steps' "$d/out" || fail "resume by one process did not train steps 4-6"
[ -e "$d/ck1/state" ] && [ ! -e "$d/ck1/zsession" ] || fail "one process's save did not replace the sharded checkpoint"
rc=0
"$mpirun" --oversubscribe -np 2 "$hetex" $(echo "$run" | sed 's/--batch 8/--batch 4/') --zero 1 --resume "$d/full" >"$d/out" 2>&1 || rc=$?
[ $rc -ne 0 ] && grep -q "was made with --batch 8; this run has --batch 4" "$d/out" || fail "another global batch was not refused (rc $rc)"
echo "gpt_zero_ckpt: saved at 4 ranks (--zero 2), killed after step 3's checkpoint, resumed bitwise at 4 ranks, at 2 (--zero 1) and by one process; --batch 4 refused"
