"""A GPT-2-style character model on tinyshakespeare through the Python
binding: the same graph, data draws, optimizer and schedule as `hetex gpt`
(examples/gpt/), so the same flags print the same numbers
(python/tests/test_examples.py compares them).

Token and position embeddings, pre-LayerNorm blocks of causal
self-attention and a GELU MLP (each block marked for recomputation), a
final LayerNorm and a head tied to the token embedding; bf16 copies of f32
masters by default, AdamW on the host (--offload optimizer), linear warmup
then cosine decay, gradient clipping.

    python python/examples/gpt.py --steps 20 --eval-every 10 --eval-iters 2 --accelerator emu
"""
import argparse
import math
import os
import time

import numpy as np

import hetex

HERE = os.path.dirname(os.path.abspath(__file__))
M64 = (1 << 64) - 1


def parse(argv):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--data", default=os.path.join(HERE, "..", "..", "data", "tinyshakespeare",
                                                   "input.txt"))
    for flag, v in (("--layers", 2), ("--heads", 4), ("--width", 128), ("--context", 64),
                    ("--batch", 32), ("--steps", 2000), ("--warmup", 100), ("--eval-every", 250),
                    ("--eval-iters", 20), ("--threads", 0), ("--seed", 1), ("--dpu", -1),
                    ("--max-device-memory", 0)):
        ap.add_argument(flag, type=int, default=v)
    for flag, v in (("--dropout", 0.0), ("--lr", 1e-3), ("--beta1", 0.9), ("--beta2", 0.99),
                    ("--weight-decay", 0.1), ("--min-lr-ratio", 0.1), ("--clip", 1.0)):
        ap.add_argument(flag, type=float, default=v)
    ap.add_argument("--dtype", default="bf16", choices=("f32", "bf16", "f16"))
    ap.add_argument("--accelerator", default="auto", choices=("auto", "cuda", "emu", "none"))
    ap.add_argument("--placement", default="device", choices=("device", "auto", "host"))
    ap.add_argument("--offload", default="optimizer", choices=("none", "optimizer"))
    ap.add_argument("--offload-config", default=None, help="key=value,... (MindSpore's keys)")
    ap.add_argument("--recompute", action="store_true")
    ap.add_argument("--save", help="folder whose 'session' checkpoint is written at every evaluation")
    a = ap.parse_args(argv)
    if a.width % a.heads:
        ap.error(f"--width {a.width} is not a multiple of --heads {a.heads}")
    return a


class Text:
    """The corpus as ids of its sorted distinct bytes; 90% trains."""

    def __init__(self, path):
        data = np.frombuffer(open(path, "rb").read(), np.uint8)
        chars = np.unique(data)
        lut = np.zeros(256, np.int32)
        lut[chars] = np.arange(chars.size, dtype=np.int32)
        self.ids = lut[data]
        self.vocab = int(chars.size)
        self.n = data.size
        self.n_train = self.n * 9 // 10

    def batch(self, val, batch, context, rng):
        """B windows of context + 1 ids drawn with splitmix64 state rng[0]."""
        lo, hi = (self.n_train, self.n) if val else (0, self.n_train)
        starts = hi - lo - context
        idx = np.empty(batch, np.int64)
        for b in range(batch):
            rng[0] = (rng[0] + 0x9E3779B97F4A7C15) & M64
            z = rng[0]
            z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
            z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
            idx[b] = lo + (z ^ (z >> 31)) % starts
        win = idx[:, None] + np.arange(context)
        return np.ascontiguousarray(self.ids[win]), np.ascontiguousarray(self.ids[win + 1]).reshape(-1)


class Model:
    def __init__(self, g, a, vocab):
        self.g, self.a, self.params = g, a, []
        B, T, C, V = a.batch, a.context, a.width, vocab
        self.tokens = g.input("tokens", (B, T), "i32")
        self.targets = g.input("targets", (B * T,), "i32")
        wte = self.param("wte", (V, C), hetex.init.normal(0, 0.02))
        wpe = self.param("wpe", (T, C), hetex.init.normal(0, 0.02))
        x = self.dropout(hetex.gather(wte, self.tokens) + wpe, 1 << 20)
        for l in range(a.layers):
            p = f"h{l}"
            with g.recompute():
                x = x + self.dropout(self.attention(self.layernorm(x, p, "ln1"), p, l), 2 * l + 1)
                x = x + self.dropout(self.mlp(self.layernorm(x, p, "ln2"), p), (1 << 16) + l)
        x = self.layernorm(x, "final", "ln")
        logits = hetex.matmul(x, wte, False, True).reshape((B * T, V))
        if a.dtype != "f32":
            logits = logits.cast("f32")
        self.loss = hetex.cross_entropy(logits, self.targets, name="loss")

    def param(self, name, shape, init):
        p = self.g.param(name, shape, "f32", init)
        self.params.append(p)
        return p if self.a.dtype == "f32" else p.cast(self.a.dtype)

    # The C example makes some parameters inside a call's arguments, whose
    # order of evaluation C leaves to the compiler; GCC goes right to left
    # (a linear's bias before its matmul, a layernorm's bias before its
    # gain). Building in that order gives the same parameter order and op
    # names as a GCC build of `hetex gpt`, so the checkpoints are the same
    # files (values are the same either way).
    def linear(self, x, prefix, what, n_in, n_out, std):
        w = self.param(f"{prefix}.{what}", (n_in, n_out), hetex.init.normal(0, std))
        bias = self.param(f"{prefix}.{what}_bias", (n_out,), hetex.init.zeros())
        return hetex.bias_add(x @ w, bias)

    def layernorm(self, x, prefix, what):
        c = self.a.width
        beta = self.param(f"{prefix}.{what}_bias", (c,), hetex.init.zeros())
        gamma = self.param(f"{prefix}.{what}_gain", (c,), hetex.init.constant(1))
        return hetex.layernorm(x, gamma, beta, 1e-5)

    def dropout(self, x, salt):
        a = self.a
        return x.dropout(a.dropout, (a.seed * 1000003 + salt) & M64) if a.dropout > 0 else x

    def split_heads(self, x):
        a = self.a
        return x.reshape((a.batch, a.context, a.heads, a.width // a.heads)).permute((0, 2, 1, 3))

    def attention(self, h, prefix, layer):
        a, C = self.a, self.a.width
        qkv = self.linear(h, prefix, "qkv", C, 3 * C, 0.02)
        q = self.split_heads(qkv.slice(-1, 0, C))
        k = self.split_heads(qkv.slice(-1, C, 2 * C))
        v = self.split_heads(qkv.slice(-1, 2 * C, 3 * C))
        scale = float(np.float32(1.0 / math.sqrt(C // a.heads)))
        att = hetex.matmul(q, k, False, True).scale(scale)
        att = self.dropout(att.causal_mask().softmax(), 2 * layer)
        y = (att @ v).permute((0, 2, 1, 3)).reshape((a.batch, a.context, C))
        return self.linear(y, prefix, "proj", C, C, 0.02 / math.sqrt(2.0 * a.layers))

    def mlp(self, h, prefix):
        C = self.a.width
        u = self.linear(h, prefix, "fc", C, 4 * C, 0.02).gelu()
        return self.linear(u, prefix, "fc_proj", 4 * C, C, 0.02 / math.sqrt(2.0 * self.a.layers))


def lr_scale(a, step, steps):
    if step < a.warmup:
        return (step + 1.0) / a.warmup
    if steps <= a.warmup + 1:
        return 1.0
    progress = (step - a.warmup) / (steps - 1 - a.warmup)
    return a.min_lr_ratio + (1 - a.min_lr_ratio) * 0.5 * (1 + math.cos(math.pi * progress))


def build(a, vocab):
    """The graph with its AdamW updates and a session over it, as `hetex gpt`
    makes them: (graph, model, session)."""
    where = {"device": "device", "auto": "auto", "host": "cpu"}[a.placement]
    g = hetex.Graph()
    with g.target(where):
        m = Model(g, a, vocab)
    g.backward(m.loss)
    scope = g.target(where) if a.offload == "none" else _nothing()
    with scope:  # updates on the device with offload none, else on the host
        for p in m.params:
            opt = hetex.optim.AdamW(lr=a.lr, beta1=a.beta1, beta2=a.beta2,
                                    weight_decay=a.weight_decay if p.ndim >= 2 else 0.0)
            g.apply_optimizer(opt, p)
    offload = hetex.offload_config(a.offload_config or "")
    offload.recompute |= a.recompute
    config = dict(n_threads=a.threads, seed=a.seed, accelerator=a.accelerator,
                  max_device_memory=a.max_device_memory, clip_grad_norm=a.clip,
                  loss_scale={"enabled": a.dtype == "f16"}, delayed_param_update=a.dpu >= 0,
                  dpu_warmup_steps=max(a.dpu, 0), auto_placement=a.placement == "auto")
    s = hetex.Session(g, **config, offload_config=offload)
    s.memory_stats()  # plans the training step before any training, as the CLI does
    return g, m, s


def main(argv=None):
    a = parse(argv)
    text = Text(a.data)
    g, m, s = build(a, text.vocab)
    print(f"gpt.py: {a.layers} layers, {a.heads} heads, width {a.width}, context {a.context}, "
          f"batch {a.batch}, vocab {text.vocab}, {a.dtype}; offload {a.offload}; "
          f"accelerator {s.accelerator_info()['in_use']}")
    rng = [a.seed]
    window, in_window, last_val = 0.0, 0, float("nan")
    t0 = time.perf_counter()
    for step in range(1, a.steps + 1):
        tok, tgt = text.batch(False, a.batch, a.context, rng)
        scale = lr_scale(a, step - 1, a.steps)
        s.set_lr_scale(scale)
        window += float(s.run({m.tokens: tok, m.targets: tgt}, m.loss, train=True))
        in_window += 1
        if step % a.eval_every == 0 or step == a.steps:
            vrng = [0x5EED]  # the same batches at every evaluation
            total = 0.0
            for _ in range(a.eval_iters):
                vt, vg = text.batch(True, a.batch, a.context, vrng)
                total += float(s.run({m.tokens: vt, m.targets: vg}, m.loss))
            last_val = total / a.eval_iters
            el = time.perf_counter() - t0
            print(f"step {step:5d}  train loss {window / in_window:.4f}  val loss {last_val:.4f}  "
                  f"lr {a.lr * scale:.3g}  {step / el:.2f} steps/s  "
                  f"{step * a.batch * a.context / el:.0f} tokens/s", flush=True)
            window, in_window = 0.0, 0
            if a.save:
                os.makedirs(a.save, exist_ok=True)
                s.save(os.path.join(a.save, "session"))
    print(f"summary: {a.steps} steps; final val loss {last_val:.4f}")


class _nothing:
    def __enter__(self):
        return None

    def __exit__(self, *exc):
        return False


if __name__ == "__main__":
    main()
