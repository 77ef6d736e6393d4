#!/usr/bin/env python3
"""The GPT of examples/gpt in PyTorch, as a peer to measure `hetex gpt` against
on the same GPU, or on the CPU (--device cpu, --threads N): the same model (pre-LayerNorm blocks, tanh GELU, tied head,
the same initialisation), the same corpus split and batches (the splitmix64
windows of gpt_data.c), AdamW with decay on matrices only, linear warmup then
cosine decay, global-norm clipping. Prints the lines `hetex gpt` prints, then
one JSON object: {"case": "gpt_torch", ...}.

    python3 bench/gpt_torch.py --steps 500 --dtype bf16 [--compile]
    python3 bench/gpt_torch.py --device cpu --threads 2 --dtype f32

On the CPU, bf16 is torch's CPU autocast (matmuls in bf16, f32 weights),
AdamW is torch's default (foreach) implementation, and f16 is refused.
"""
import argparse
import json
import math
import time

import numpy as np
import torch
import torch.nn.functional as F

MASK = (1 << 64) - 1


def attention(q, k, v):  # (B,H,T,D) each
    """Causal attention: torch's fused kernel where it has one (2.0 on),
    else softmax(q k^T / sqrt(D) + causal mask) v, as hetex computes it."""
    if hasattr(F, "scaled_dot_product_attention"):
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)
    T = q.shape[-2]
    att = (q @ k.transpose(-2, -1)) * (1.0 / math.sqrt(q.shape[-1]))
    mask = torch.ones(T, T, dtype=torch.bool, device=q.device).triu(1)
    return F.softmax(att.masked_fill(mask, float("-inf")), dim=-1) @ v


class Windows:
    """gpt_text_batch: B windows of T+1 ids at splitmix64-drawn starts."""

    def __init__(self, ids, n_train):
        self.ids, self.n_train = ids, n_train

    def batch(self, val, batch, context, state):
        lo, hi = (self.n_train, len(self.ids)) if val else (0, self.n_train)
        starts = hi - lo - context
        tok = np.empty((batch, context), np.int64)
        tgt = np.empty((batch, context), np.int64)
        for b in range(batch):
            state[0] = (state[0] + 0x9E3779B97F4A7C15) & MASK
            z = state[0]
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK
            s = lo + (z ^ (z >> 31)) % starts
            tok[b] = self.ids[s:s + context]
            tgt[b] = self.ids[s + 1:s + context + 1]
        return tok, tgt


class Block(torch.nn.Module):
    def __init__(self, C, H, layers):
        super().__init__()
        self.H = H
        self.ln1 = torch.nn.LayerNorm(C, eps=1e-5)
        self.qkv = torch.nn.Linear(C, 3 * C)
        self.proj = torch.nn.Linear(C, C)
        self.ln2 = torch.nn.LayerNorm(C, eps=1e-5)
        self.fc = torch.nn.Linear(C, 4 * C)
        self.fc_proj = torch.nn.Linear(4 * C, C)
        for lin, std in ((self.qkv, 0.02), (self.proj, 0.02 / math.sqrt(2 * layers)),
                         (self.fc, 0.02), (self.fc_proj, 0.02 / math.sqrt(2 * layers))):
            torch.nn.init.normal_(lin.weight, 0, std)
            torch.nn.init.zeros_(lin.bias)

    def forward(self, x):  # (B,T,C)
        B, T, C = x.shape
        q, k, v = self.qkv(self.ln1(x)).split(C, dim=-1)
        q, k, v = (t.view(B, T, self.H, C // self.H).transpose(1, 2) for t in (q, k, v))
        y = attention(q, k, v)  # (B,H,T,D)
        x = x + self.proj(y.transpose(1, 2).reshape(B, T, C))
        return x + self.fc_proj(F.gelu(self.fc(self.ln2(x)), approximate="tanh"))


class GPT(torch.nn.Module):
    def __init__(self, V, T, C, H, layers):
        super().__init__()
        self.wte = torch.nn.Parameter(torch.randn(V, C) * 0.02)
        self.wpe = torch.nn.Parameter(torch.randn(T, C) * 0.02)
        self.blocks = torch.nn.ModuleList(Block(C, H, layers) for _ in range(layers))
        self.ln = torch.nn.LayerNorm(C, eps=1e-5)

    def forward(self, tok, tgt):
        x = self.wte[tok] + self.wpe
        for b in self.blocks:
            x = b(x)
        logits = self.ln(x) @ self.wte.t()  # (B,T,V), tied head
        return F.cross_entropy(logits.float().flatten(0, 1), tgt.flatten())


def lr_scale(step, steps, warmup, min_ratio):  # gpt_lr_scale
    if step < warmup:
        return (step + 1.0) / warmup
    if steps <= warmup + 1:
        return 1.0
    p = (step - warmup) / (steps - 1 - warmup)
    return min_ratio + (1 - min_ratio) * 0.5 * (1 + math.cos(math.pi * p))


def cpu_name():
    for line in open("/proc/cpuinfo"):
        if line.startswith("model name"):
            return line.split(":", 1)[1].strip()
    return "cpu"


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("--data", default="data/tinyshakespeare/input.txt")
    for k, v in (("layers", 2), ("heads", 4), ("width", 128), ("context", 64), ("batch", 32),
                 ("steps", 2000), ("eval-every", 250), ("eval-iters", 20), ("warmup", 100),
                 ("seed", 1)):
        a.add_argument("--" + k, type=int, default=v)
    for k, v in (("lr", 1e-3), ("beta1", 0.9), ("beta2", 0.99), ("weight-decay", 0.1),
                 ("min-lr-ratio", 0.1), ("clip", 1.0)):
        a.add_argument("--" + k, type=float, default=v)
    a.add_argument("--dtype", choices=("f32", "bf16", "f16"), default="bf16")
    a.add_argument("--compile", action="store_true", help="torch.compile the model")
    a.add_argument("--device", choices=("cuda", "cpu"), default="cuda")
    a.add_argument("--threads", type=int, default=0, help="CPU threads (0: torch's default)")
    o = a.parse_args()
    if o.device == "cpu" and o.dtype == "f16":
        a.error("--dtype f16 needs --device cuda (no f16 autocast on the CPU)")
    if o.threads > 0:
        torch.set_num_threads(o.threads)

    raw = open(o.data, "rb").read()
    chars = sorted(set(raw))
    lut = np.zeros(256, np.int64)
    lut[chars] = np.arange(len(chars))
    ids = lut[np.frombuffer(raw, np.uint8)]
    text = Windows(ids, len(ids) * 9 // 10)

    dev = torch.device(o.device)
    on_gpu = o.device == "cuda"
    sync = torch.cuda.synchronize if on_gpu else (lambda: None)
    dev_name = torch.cuda.get_device_name() if on_gpu else cpu_name()
    torch.manual_seed(o.seed)
    model = GPT(len(chars), o.context, o.width, o.heads, o.layers).to(dev)
    n_params = sum(p.numel() for p in model.parameters())
    decay = [p for p in model.parameters() if p.dim() >= 2]
    rest = [p for p in model.parameters() if p.dim() < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": o.weight_decay},
                             {"params": rest, "weight_decay": 0.0}], lr=o.lr,
                            betas=(o.beta1, o.beta2), **({"fused": True} if on_gpu else {}))
    amp = {"f32": None, "bf16": torch.bfloat16, "f16": torch.float16}[o.dtype]
    scaler = torch.cuda.amp.GradScaler(enabled=o.dtype == "f16")
    fwd = torch.compile(model) if o.compile else model

    def loss_of(tok, tgt):
        t = torch.from_numpy(tok).to(dev, non_blocking=True)
        g = torch.from_numpy(tgt).to(dev, non_blocking=True)
        with torch.autocast(o.device, dtype=amp, enabled=amp is not None):
            return fwd(t, g)

    def val_loss():
        state, s = [0x5EED], 0.0
        with torch.no_grad():
            for _ in range(o.eval_iters):
                s += loss_of(*text.batch(True, o.batch, o.context, state)).item()
        return s / o.eval_iters

    print(f"torch gpt: {o.layers} layers, {o.heads} heads, width {o.width}, context {o.context}, "
          f"batch {o.batch}, vocab {len(chars)}, {o.dtype}; {n_params} params; "
          f"{dev_name}, torch {torch.__version__}, {torch.get_num_threads()} threads"
          f"{', compiled' if o.compile else ''}", flush=True)
    state, window, n_window, last_val = [o.seed], 0.0, 0, None
    sync()
    t0 = time.perf_counter()
    for step in range(1, o.steps + 1):
        for gr in opt.param_groups:
            gr["lr"] = o.lr * lr_scale(step - 1, o.steps, o.warmup, o.min_lr_ratio)
        loss = loss_of(*text.batch(False, o.batch, o.context, state))
        opt.zero_grad(set_to_none=True)
        scaler.scale(loss).backward()
        scaler.unscale_(opt)
        if o.clip > 0:
            torch.nn.utils.clip_grad_norm_(model.parameters(), o.clip)
        scaler.step(opt)
        scaler.update()
        window += loss.item()  # one sync per step, as hetex's fetch of the loss
        n_window += 1
        if step % o.eval_every == 0 or step == o.steps:
            last_val = val_loss()
            print(f"step {step:5d}  train loss {window / n_window:.4f}  val loss {last_val:.4f}  "
                  f"{step / (time.perf_counter() - t0):.2f} steps/s", flush=True)
            window, n_window = 0.0, 0
    elapsed = time.perf_counter() - t0
    print(json.dumps({"case": "gpt_torch", "device": dev_name, "threads": torch.get_num_threads(),
                      "torch": torch.__version__, "compiled": o.compile, "dtype": o.dtype,
                      "layers": o.layers, "heads": o.heads, "width": o.width,
                      "context": o.context, "batch": o.batch, "params": n_params,
                      "steps": o.steps, "seconds": round(elapsed, 3),
                      "steps_per_s": round(o.steps / elapsed, 2),
                      "tokens_per_s": round(o.steps * o.batch * o.context / elapsed),
                      "final_val_loss": last_val}))


if __name__ == "__main__":
    main()
