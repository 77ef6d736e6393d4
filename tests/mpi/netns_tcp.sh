#!/bin/sh
# netns_tcp.sh MPIRUN HETEX: two hosts on one machine. Two network
# namespaces joined by a veth pair (10.77.0.1 and 10.77.0.2), mpirun in
# the first with one rank on each: a host file of the two addresses, and
# Open MPI's rsh launcher reaching the second through `ip netns exec`
# instead of ssh (an agent script written here); the BTL is tcp,self and
# both BTL and OOB use the veth addresses only; each rank is checked to
# see its own namespace's address. `hetex gpt --zero 2 --save`
# trains the small GPT there and again under a plain mpirun over shared
# memory (vader): the step lines and every file of the two sharded
# checkpoint folders must be bitwise the same. Where namespaces cannot be
# made (not root, no `ip`, no CAP_NET_ADMIN, no veth) it says why and exits
# 77, which ctest reports as skipped.
set -eu
mpirun=$1 hetex=$2
skip() { echo "netns_tcp: SKIPPED: $*" >&2; exit 77; }
[ "$(id -u)" = 0 ] || skip "not root: network namespaces need CAP_NET_ADMIN (run as root)"
command -v ip >/dev/null || skip "no 'ip' command (apt-get install iproute2)"
d=$(mktemp -d)
a=hxA$$ b=hxB$$
cleanup() { ip netns del "$a" 2>/dev/null || :; ip netns del "$b" 2>/dev/null || :; rm -rf "$d"; }
trap cleanup EXIT
ip netns add "$a" 2>"$d/err" || skip "cannot make a network namespace: $(cat "$d/err")"
ip netns add "$b" 2>"$d/err" || skip "cannot make a second network namespace: $(cat "$d/err")"
{ ip link add "va$$" type veth peer name "vb$$" && ip link set "va$$" netns "$a" && ip link set "vb$$" netns "$b" &&
  ip -n "$a" addr add 10.77.0.1/24 dev "va$$" && ip -n "$b" addr add 10.77.0.2/24 dev "vb$$" &&
  ip -n "$a" link set "va$$" up && ip -n "$b" link set "vb$$" up &&
  ip -n "$a" link set lo up && ip -n "$b" link set lo up; } 2>"$d/err" ||
  skip "cannot join the namespaces with a veth pair: $(cat "$d/err")"
fail() { cat "$d/out" >&2; echo "netns_tcp: $*" >&2; exit 1; }
# Open MPI's rsh launcher runs: AGENT [options] HOST COMMAND...
cat >"$d/agent" <<EOF
#!/bin/sh
while [ \$# -gt 0 ]; do case \$1 in -*) shift ;; *) break ;; esac; done
case \$1 in 10.77.0.1) ns=$a ;; 10.77.0.2) ns=$b ;; *) echo "netns_tcp agent: unknown host \$1" >&2; exit 1 ;; esac
shift
exec ip netns exec \$ns sh -c "\$*"
EOF
chmod +x "$d/agent"
printf '10.77.0.1 slots=1\n10.77.0.2 slots=1\n' >"$d/hosts"
launch() { ip netns exec "$a" "$mpirun" --hostfile "$d/hosts" -np 2 --map-by node --mca plm_rsh_agent "$d/agent" \
  --mca btl tcp,self --mca btl_tcp_if_include 10.77.0.0/24 --mca oob_tcp_if_include 10.77.0.0/24 "$@"; }
# rank r runs in namespace r: it sees 10.77.0.(r + 1) as its own address
launch sh -c 'ip -o -4 addr show | grep -q " 10\.77\.0\.$((OMPI_COMM_WORLD_RANK + 1))/" &&
  echo "rank $OMPI_COMM_WORLD_RANK in its namespace"' >"$d/out" 2>&1 || fail "a rank is not in its namespace"
[ "$(grep -c 'in its namespace$' "$d/out")" = 2 ] || fail "want both ranks each in its namespace"
run="gpt --layers 1 --heads 2 --width 32 --context 16 --batch 8 --steps 4 --eval-every 2 --eval-iters 1 --dtype f32 --accelerator emu --quiet --sample 0 --zero 2"
lines() { grep -E '^(step|summary)' "$1" | sed 's/ [0-9.]* steps\/s.*//; s/ in [0-9.]*s (.*)//'; }
"$mpirun" --oversubscribe --mca btl self,vader -np 2 "$hetex" $run --save "$d/shm" >"$d/out" 2>&1 ||
  fail "the run over shared memory failed"
lines "$d/out" >"$d/shm.lines"
launch "$hetex" $run --save "$d/tcp" >"$d/out" 2>&1 || fail "the run over TCP between the namespaces failed"
grep -q '^zero: 2 ranks, stage 2' "$d/out" || fail "no 'zero: 2 ranks, stage 2' line from the namespaces' run"
lines "$d/out" >"$d/tcp.lines"
[ -s "$d/shm.lines" ] || fail "no step lines"
cmp -s "$d/shm.lines" "$d/tcp.lines" || { paste "$d/shm.lines" "$d/tcp.lines" >&2; fail "the step lines differ"; }
ls "$d/tcp" | grep -q '\.1-of-2$' || fail "no shard of rank 1 in $(ls "$d/tcp" | tr '\n' ' ')"
diff -r "$d/shm" "$d/tcp" >&2 || fail "the checkpoints differ (above)"
echo "netns_tcp: hetex gpt --zero 2 on 2 ranks in two network namespaces (TCP over a veth pair) and over" \
  "shared memory: the same step lines and bitwise the same checkpoint files ($(ls "$d/tcp" | wc -l) of them)"
