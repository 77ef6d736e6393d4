#!/usr/bin/env python3
"""PyTorch's CPU convolution on bench_conv's cases (`bench_conv --list`):
forward (conv2d) and backward (input and weight gradients) in f32, best of
--reps after a warm-up, at --threads threads. One JSON object per case and
direction, as bench_conv prints (bench "conv_torch").

    python3 bench/conv_torch.py --bench build/bench_conv [--case NAME] [--threads 2] [--reps 3]
"""
import argparse
import json
import os
import subprocess
import time

import torch
import torch.nn.functional as F


def best(fn, reps):
    fn()
    t = float("inf")
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        t = min(t, time.perf_counter() - t0)
    return t


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--bench", default="build/bench_conv")
    ap.add_argument("--case")
    ap.add_argument("--threads", type=int, default=2)
    ap.add_argument("--reps", type=int, default=3)
    a = ap.parse_args()
    torch.set_num_threads(a.threads)
    lines = subprocess.run([a.bench, "--list"], check=True, capture_output=True, text=True).stdout
    ran = 0
    for line in lines.splitlines():
        name, *dims = line.split()
        if a.case and name != a.case:
            continue
        n, c, h, w, cout, k, s, p = map(int, dims)
        x = torch.randn(n, c, h, w, requires_grad=True)
        wt = torch.randn(cout, c, k, k, requires_grad=True)
        y = F.conv2d(x, wt, stride=s, padding=p)
        dy = torch.randn_like(y)
        with torch.no_grad():
            t_fwd = best(lambda: F.conv2d(x, wt, stride=s, padding=p), a.reps)

        def backward():
            x.grad = wt.grad = None
            F.conv2d(x, wt, stride=s, padding=p).backward(dy)

        t_fb = best(backward, a.reps)
        oh, ow = y.shape[2], y.shape[3]
        flop = 2.0 * cout * c * k * k * n * oh * ow
        shape = f"N{n} C{c} {h}x{w} -> C{cout} {oh}x{ow}, k{k} s{s} p{p}"
        load = os.getloadavg()[0]
        # backward alone: the forward+backward time less the forward's
        for d, t, f in (("forward", t_fwd, flop), ("backward", max(t_fb - t_fwd, 1e-9), 2 * flop)):
            print(json.dumps({"bench": "conv_torch", "case": name, "direction": d, "shape": shape,
                              "threads": a.threads, "gflop": round(f * 1e-9, 4),
                              "ms": round(t * 1e3, 3), "gflops": round(f / t * 1e-9, 2),
                              "torch": torch.__version__, "load1": round(load, 2)}), flush=True)
        ran += 1
    if not ran:
        raise SystemExit(f"conv_torch.py: no case {a.case!r}")


if __name__ == "__main__":
    main()
