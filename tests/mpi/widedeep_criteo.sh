#!/bin/sh
# widedeep_criteo.sh MPIRUN HETEX: `hetex widedeep --criteo-generate` (the
# generator's Criteo schema: 13 integers, 26 Zipf(1.05) ids hashed into
# 1000 rows per column) with tables of 11,648,000 bytes together as
# allocated (deep 26000 x 32 with Adagrad state: 6,656,000; wide 26000 x 1
# with FTRL's, each row padded to 16 floats: 4,992,000) under a cap of
# 6,000,000 bytes a rank (--table-memory-per-rank): one rank is refused at
# creation, naming the deep table, its shard's bytes and the cap; 2 ranks
# (--shards 2) and 2 workers + 2 servers (--servers 2) train, every shard
# under the cap (rank 0's 5,824,000 bytes, each server's the same), their
# 32 step losses finite and bitwise equal (as --metrics writes them, 17
# digits: synchronous server mode sums every gradient in collective
# mode's order), their test AUC equal; 2 workers and one server over the
# cap end at the table's creation within 30 s (before the servers' verdict
# they waited out two 60 s timeouts; mpirun stops the others once one
# rank exits, so one rank's message is all it shows), naming the server; a cap
# on one process, --criteo with --criteo-generate, and a --criteo folder
# without its files are refused with a reason.
set -eu
mpirun=$1 hetex=$2
t=$(mktemp -d)
trap 'rm -rf "$t"' EXIT
fail() { for f in "$t"/*.out; do echo "== $f"; cat "$f"; done >&2; echo "widedeep_criteo: $*" >&2; exit 1; }
args="--criteo-generate 4096 --criteo-vocab 5000 --hash-buckets 1000 --batch 256 --epochs 2 --hidden 32,16
      --deep-dim 32 --accelerator emu --quiet --table-memory-per-rank 6000000"
rc=0
"$mpirun" --oversubscribe -np 1 "$hetex" widedeep --shards 1 $args >"$t/one.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] || fail "one rank over the cap was not refused"
grep -q "'deep'.*rank 0's shard allocates 6656000 bytes.*over the per-rank cap of 6000000 bytes" "$t/one.out" ||
  fail "the refusal does not name the deep table, its 6656000 bytes and the cap"
"$mpirun" --oversubscribe -np 2 "$hetex" widedeep --shards 2 $args --metrics "$t/coll.jsonl" >"$t/coll.out" 2>&1 ||
  fail "2 ranks (--shards 2) under the cap failed"
"$mpirun" --oversubscribe -np 4 "$hetex" widedeep --servers 2 $args --metrics "$t/serv.jsonl" >"$t/serv.out" 2>&1 ||
  fail "2 workers and 2 servers (--servers 2) under the cap failed"
rc=0 t0=$(date +%s)
"$mpirun" --oversubscribe -np 3 "$hetex" widedeep --servers 1 $args >"$t/serv1.out" 2>&1 || rc=$?
took=$(($(date +%s) - t0))
[ "$rc" -ne 0 ] || fail "one server over the cap was not refused"
[ "$took" -le 30 ] || fail "one server over the cap: the job took $took s to end (want <= 30)"
grep -q "hx_embedding_table_create 'deep'.*server rank 2 would hold 6656000 bytes.*over the per-rank cap of 6000000" \
  "$t/serv1.out" || fail "the refusal does not name server rank 2, its 6656000 bytes and the cap"
grep -q "^hetex widedeep: 13 numeric and 26 categorical columns, each hashed into 1000 rows: deep table 26000 x 32, wide table 26000 x 1" \
  "$t/coll.out" || fail "no line of the tables' shapes"
grep -q "^hetex widedeep: rank 0's shards: 5824000 bytes (deep 3328000, wide 2496000: rows and optimizer state), under the cap of 6000000" \
  "$t/coll.out" || fail "rank 0's shards are not 5824000 bytes under the cap"
[ "$(grep -c "it holds 26000 rows of the deep and wide tables (5.6 MiB with their optimizer state: 5824000 bytes, under the cap of 6000000 bytes a rank)" \
  "$t/serv.out")" = 2 ] || fail "the 2 servers do not each hold 5824000 bytes under the cap"
for f in coll serv; do
  [ "$(grep -c '^final:' "$t/$f.out")" = 1 ] || fail "$f: want one final line"
done
# every step's loss: 32 steps, finite, the modes bitwise alike
losses() { sed -n 's/.*"event":"step".*"loss":\([^,}]*\).*/\1/p' "$1"; }
losses "$t/coll.jsonl" >"$t/coll.loss"
losses "$t/serv.jsonl" >"$t/serv.loss"
[ "$(wc -l <"$t/coll.loss")" = 32 ] && [ "$(wc -l <"$t/serv.loss")" = 32 ] || fail "want 32 step losses in each mode"
grep -qv '^[0-9][0-9.eE+-]*$' "$t/coll.loss" && fail "a step loss that is not a finite number: $(tr '\n' ' ' <"$t/coll.loss")"
cmp -s "$t/coll.loss" "$t/serv.loss" || fail "step losses differ: $(paste "$t/coll.loss" "$t/serv.loss" | tr '\n' ' ')"
auc() { sed -n 's/^final: accuracy [0-9.]*  AUC \([0-9.]*\) .*/\1/p' "$1"; }
a=$(auc "$t/coll.out") b=$(auc "$t/serv.out")
[ -n "$a" ] && [ "$a" = "$b" ] || fail "test AUC: collective '$a', server mode '$b'"
rc=0
"$hetex" widedeep $args >"$t/bad.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "give --shards N or --servers S too" "$t/bad.out" || fail "a cap on one process not refused"
rc=0
"$hetex" widedeep --criteo "$t" --criteo-generate 10 >"$t/bad.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "give one" "$t/bad.out" || fail "--criteo with --criteo-generate not refused"
rc=0
"$hetex" widedeep --criteo "$t" --epochs 1 >"$t/bad.out" 2>&1 || rc=$?
[ "$rc" -ne 0 ] && grep -q "train.tsv and test.tsv in Criteo's TSV format" "$t/bad.out" ||
  fail "a --criteo folder without train.tsv not refused with a reason"
echo "widedeep_criteo: one rank over the cap refused; --shards 2 and --servers 2 under it, their step losses bitwise alike, AUC $a"
