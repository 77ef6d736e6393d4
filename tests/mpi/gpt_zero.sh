#!/bin/sh
# gpt_zero.sh MPIRUN HETEX: `hetex gpt --zero S` under mpirun -np 2 trains a
# small GPT data-parallel at ZeRO stages 0-3: rank 0 reports the run
# once, every rank its model-state memory (the device's and the host's
# persistent bytes each) against the stage's ZeRO formula
# and the bytes it sent per step against the minimum (stage 3: and its
# gathered parameters); stages 1-3 print stage 0's losses (they train
# bitwise alike). Stage 3 with the parameters on the device (--offload
# none) and a global batch the ranks do not divide are refused with a
# reason.
set -eu
mpirun=$1 hetex=$2
out=$(mktemp) ref=$(mktemp) ranks=$(mktemp -d)
trap 'rm -rf "$out" "$ref" "$ranks"' EXIT
fail() { cat "$out" "$ranks"/*/rank.*/std* >&2 2>/dev/null || :; echo "gpt_zero: $*" >&2; exit 1; }
small="--layers 1 --heads 2 --width 32 --context 16 --steps 3 --eval-every 3 --eval-iters 1 --accelerator emu --quiet"
for z in 0 1 2 3; do
  "$mpirun" --oversubscribe -np 2 "$hetex" gpt --zero $z --batch 4 $small >"$out" 2>&1 || fail "--zero $z: the run failed"
  [ "$(grep -c '^summary: 3 steps' "$out")" = 1 ] || fail "--zero $z: want one summary line (rank 0's)"
  grep -q "^zero: 2 ranks, stage $z, global batch 4 (2 per rank)$" "$out" || fail "--zero $z: no zero: line"
  for r in 0 1; do
    grep -q "^zero: rank $r of 2: model states .* bytes/param (persistent [0-9.]* MiB: [0-9.]* on the device, [0-9.]* on the host; .*ZeRO stage $z formula .*sharded optimizer state here" "$out" ||
      fail "--zero $z: rank $r: no memory line (device and host each)"
    grep -q "^zero: rank $r sent [0-9]* bytes per step .* ratio [0-9]" "$out" || fail "--zero $z: rank $r: no bytes line"
    [ $z != 0 ] || grep -q "^zero: rank $r sent .* ratio 1\.0" "$out" || fail "rank $r: stage 0 sends more than a ring"
  done
  [ $z != 3 ] || grep -Eq "^zero: rank 1: gathered parameters .* at most 0\.0*[1-9][0-9]* MiB at once" "$out" ||
    fail "--zero 3: no gathered parameters reported"
  [ $z = 0 ] || grep -Eq "^zero: rank 0 of 2: .*sharded optimizer state here [0-9.]+ of (0\.0*[1-9]|[1-9])" "$out" ||
    fail "--zero $z: nothing sharded"
  grep -E '^(step|summary)' "$out" | sed 's/ [0-9.]* steps\/s.*//; s/ in [0-9.]*s (.*)//' >"$out.loss"
  if [ $z = 0 ]; then mv "$out.loss" "$ref"
  else cmp -s "$out.loss" "$ref" || { rm -f "$out.loss"; fail "--zero $z: losses differ from stage 0's"; }; rm -f "$out.loss"; fi
done
# pinned host updates: each rank on its own core of the two (unbound by
# mpirun), said by HX_DEBUG=pin, the same losses; a value to the switch refused
HX_DEBUG=pin "$mpirun" --oversubscribe --bind-to none -np 2 "$hetex" gpt --zero 2 --pin-update-threads \
  --threads 1 --batch 4 $small >"$out" 2>&1 || fail "--pin-update-threads: the run failed"
for r in 0 1; do
  grep -q "^hetex pin: rank $r (local rank $r of 2, 2 cores allowed): update threads 0 -> core [0-9]*$" "$out" ||
    fail "--pin-update-threads: rank $r: no line naming its core"
done
[ "$(sed -n 's/^hetex pin: rank . .*-> core //p' "$out" | sort -u | wc -l)" = 2 ] ||
  fail "--pin-update-threads: the two ranks did not get a core each"
grep -E '^(step|summary)' "$out" | sed 's/ [0-9.]* steps\/s.*//; s/ in [0-9.]*s (.*)//' >"$out.loss"
cmp -s "$out.loss" "$ref" || { rm -f "$out.loss"; fail "--pin-update-threads: losses differ from stage 0's"; }
rm -f "$out.loss"
rc=0
"$hetex" gpt --pin-update-threads=1 >"$out" 2>&1 || rc=$?
[ "$rc" -eq 2 ] && grep -q "pin-update-threads takes no value" "$out" || fail "--pin-update-threads=1 not refused (rc $rc)"
rc=0
# each rank's output in a file of its own (--output-filename): both ranks print the refusal,
# in pieces, and merged on one stream the pieces once interleaved and the grep missed it
"$mpirun" --oversubscribe --output-filename "$ranks" -np 2 "$hetex" gpt --zero 3 --offload none --batch 4 $small >"$out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "ZeRO stage 3 gathers .* set offload_param=cpu" "$ranks"/*/rank.0/stderr ||
  fail "--zero 3 --offload none not refused (rc $rc)"
rc=0
rm -rf "$ranks"
"$mpirun" --oversubscribe --output-filename "$ranks" -np 2 "$hetex" gpt --zero 0 --batch 3 $small >"$out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "must be a multiple of the 2 ranks" "$ranks"/*/rank.0/stderr ||
  fail "--batch 3 on 2 ranks not refused (rc $rc)"
echo "gpt_zero: hetex gpt --zero 0, 1, 2 and 3 ran on 2 ranks with the same losses (2 also pinned); --zero 3 with the parameters on the device and an odd batch refused"
