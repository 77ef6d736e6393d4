#!/usr/bin/env bash
# The GPT example against the same model in PyTorch on this machine's CPU,
# interleaved: `hetex gpt --accelerator none` and bench/gpt_torch.py
# --device cpu, in f32 and in each one's bf16 mode (hetex: bf16 params and
# activations with f32 masters; torch: CPU autocast), for the default model
# and for 4 layers x 256 wide, context 128, batch 16. One JSON object per
# run, then one per (config, dtype) with the best tokens/s of each side,
# the ratio hetex / torch, the model's FLOPs per token (6 per parameter plus
# attention's 12 L T C, as nanoGPT counts them) and those FLOP/s over the
# sgemm rate measured in the same run on the model's largest shape
# (B*T x C times C x 4C, torch.mm on the same OpenBLAS, same threads, best of
# 60). Each bf16 line also has torch's f32 figure: where the CPU has no bf16
# instructions (no AVX512-BF16 / AMX), torch's CPU autocast crawls, and
# f32 is the peer that matters.
#
#   ./build.sh bench gpt-peer      (HETEX=path, STEPS=60, REPS=2, THREADS=2,
#                                   TORCH_BF16_STEPS=6, DTYPES="f32 bf16",
#                                   CONFIGS="default 4x256")
# Skipped, with a message, where python3 has no torch.
set -uo pipefail
cd "$(dirname "$0")/.."
hetex=${HETEX:-build/hetex}
py=${PYTHON:-/usr/bin/python3}
steps=${STEPS:-60} reps=${REPS:-2} threads=${THREADS:-2} dtypes=${DTYPES:-f32 bf16}
only=${CONFIGS:-default 4x256}
if ! "$py" -c 'import torch' 2>/dev/null; then
  echo "bench gpt-peer: skipped: $py has no torch (Debian: apt-get install python3-torch)" >&2
  exit 0
fi
[ -x "$hetex" ] || { echo "bench gpt-peer: no $hetex (build first)" >&2; exit 2; }
load() { cut -d' ' -f1 /proc/loadavg; }
cpu=$(sed -n 's/^model name[^:]*: //p' /proc/cpuinfo | head -1)
configs=("default|--layers 2 --heads 4 --width 128 --context 64 --batch 32"
         "4x256|--layers 4 --heads 4 --width 256 --context 128 --batch 16")
export OMP_NUM_THREADS=$threads
for cfg in "${configs[@]}"; do
  name=${cfg%%|*} flags=${cfg#*|}
  [[ " $only " == *" $name "* ]] || continue
  read -r L C T B < <(echo "$flags" | awk '{print $2, $6, $8, $10}')
  torch_f32=0 # bf16 lines compare with it where DTYPES ran f32 first
  for dt in $dtypes; do
    case $dt in f32 | bf16) ;; *) echo "bench gpt-peer: DTYPES: '$dt' is not f32 or bf16" >&2; exit 2 ;; esac
    best_h=0 best_t=0 params=0
    common="--steps $steps --eval-every $steps --eval-iters 2 --dtype $dt"
    for ((r = 1; r <= reps; r++)); do
      l0=$(load)
      # --sample 0: hetex's summary time includes the evaluation's generated text
      # (100 characters: a third of a 4x256 run), which gpt_torch.py does not make
      out=$("$hetex" gpt $flags $common --sample 0 --accelerator none --threads "$threads" --quiet 2>&1)
      tok_h=$(echo "$out" | sed -n 's/.*(\([0-9]*\) tokens\/s).*/\1/p' | tail -1)
      l1=$(load)
      tsteps=$steps # torch's CPU bf16 can be ~60x slower than its f32: fewer steps (a rate)
      [ "$dt" = bf16 ] && tsteps=${TORCH_BF16_STEPS:-6}
      js=$("$py" bench/gpt_torch.py $flags ${common/--steps $steps --eval-every $steps/--steps $tsteps --eval-every $tsteps} \
           --device cpu --threads "$threads" 2>&1 | tail -1)
      tok_t=$(echo "$js" | sed -n 's/.*"tokens_per_s": \([0-9]*\).*/\1/p')
      params=$(echo "$js" | sed -n 's/.*"params": \([0-9]*\).*/\1/p')
      if [ -z "$tok_h" ] || [ -z "$tok_t" ]; then
        echo "bench gpt-peer: a run failed ($name $dt): hetex: ${out: -300} torch: ${js: -300}" >&2
        exit 1
      fi
      printf '{"bench":"gpt-peer","case":"run","config":"%s","dtype":"%s","rep":%d,"hetex_tokens_per_s":%s,"torch_tokens_per_s":%s,"torch_steps":%d,"load_before_hetex":%s,"load_before_torch":%s}\n' \
        "$name" "$dt" "$r" "$tok_h" "$tok_t" "$tsteps" "$l0" "$l1"
      ((tok_h > best_h)) && best_h=$tok_h
      ((tok_t > best_t)) && best_t=$tok_t
    done
    [ "$dt" = f32 ] && torch_f32=$best_t
    gemm=$("$py" - "$B" "$T" "$C" "$threads" <<'EOF'
import sys, time, torch
B, T, C, nt = map(int, sys.argv[1:])
torch.set_num_threads(nt)
a, b = torch.randn(B * T, C), torch.randn(C, 4 * C)
best = 1e30
for _ in range(60):
    t0 = time.perf_counter(); torch.mm(a, b); best = min(best, time.perf_counter() - t0)
print(f"{2 * B * T * C * 4 * C / best / 1e9:.2f}")
EOF
)
    awk -v n="$name" -v dt="$dt" -v h="$best_h" -v t="$best_t" -v p="$params" -v L="$L" \
        -v C="$C" -v T="$T" -v g="$gemm" -v cpu="$cpu" -v th="$threads" -v ld="$(load)" -v tf="$torch_f32" 'BEGIN {
      fpt = 6 * p + 12 * L * T * C
      printf "{\"bench\":\"gpt-peer\",\"case\":\"best\",\"config\":\"%s\",\"dtype\":\"%s\",\"cpu\":\"%s\",\"threads\":%d,", n, dt, cpu, th
      printf "\"hetex_tokens_per_s\":%d,\"torch_tokens_per_s\":%d,\"ratio\":%.3f,\"params\":%d,\"flops_per_token\":%.4g,", h, t, h / t, p, fpt
      printf "\"sgemm_gflops\":%s,\"hetex_flops_over_sgemm\":%.3f,\"torch_flops_over_sgemm\":%.3f,\"load\":%s", g, h * fpt / 1e9 / g, t * fpt / 1e9 / g, ld
      if (tf > 0) printf ",\"torch_f32_tokens_per_s\":%d,\"ratio_vs_torch_f32\":%.3f", tf, h / tf
      printf "}\n"
    }'
  done
done
