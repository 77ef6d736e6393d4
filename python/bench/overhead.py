"""What the Python binding adds to the C library's own cost, measured beside
it: one session run of a tiny graph (y = relu(x + c), 4 elements, one feed,
one fetch, on the CPU, one thread) and adding one op to a graph, each timed
through `hetex` and by the same calls in C (bench/bench_pyoverhead.c).

On a shared machine a figure is the least disturbed window: every case is
timed in short windows (--runs calls each), and the rounds alternate the C
program (its own best of 3 windows) with one window of every Python case,
so both sides sample the same stretch of load; each case keeps its best
window over --rounds rounds. One JSON object per case, then the added
microseconds (Python minus C) and `uptime`'s load before and after.

Python cases: run() into out= / into a new array (a dict of feeds, as a
loop writes it), a Runner (Session.runner) into out= / a new array, the
bare cffi call of hx_session_run on prepared arrays (no wrapper), one op
built (hetex.relu) and its bare cffi call. With the library's shared object
(the third argument; build/libhetex.so by default) also what releasing the
GIL costs a call: hx_version through ctypes.CDLL (releases it) against
ctypes.PyDLL (keeps it).

    python python/bench/overhead.py [bench_pyoverhead [libhetex.so]] [--rounds N] [--runs N]
"""
import argparse
import ctypes
import json
import os
import subprocess
import sys
import time

import numpy as np

import hetex
from hetex._lib import ffi, lib

HERE = os.path.dirname(os.path.abspath(__file__))
BUILD = os.path.join(HERE, "..", "..", "build")
_ns = time.perf_counter_ns


def python_cases(so_path):
    """{case: function(n) timing n calls, giving seconds per call}."""
    g = hetex.Graph()
    x = g.input("x", (4,))
    c = g.constant("c", np.array([1, -2, 3, -4], np.float32))
    y = hetex.relu(x + c)
    s = hetex.Session(g, accelerator="none", n_threads=1)
    xb = np.full(4, 0.5, np.float32)
    yb = np.empty(4, np.float32)
    feeds = {x: xb}
    r = s.runner([x], y)
    cf, cx = ffi.new("hx_feed[]", 1), ffi.new("hx_fetch[]", 1)
    cf[0].tensor, cf[0].data, cf[0].bytes = x._ptr, ffi.from_buffer(xb), xb.nbytes
    cx[0].tensor, cx[0].data, cx[0].bytes = y._ptr, ffi.from_buffer(yb, require_writable=True), yb.nbytes
    run, h = lib.hx_session_run, s._ptr
    relu = hetex.relu

    def timed(body):
        def f(n):
            t0 = _ns()
            body(n)
            return (_ns() - t0) * 1e-9 / n
        return f

    def run_out(n):
        for _ in range(n):
            s.run(feeds, y, out=yb)

    def run_new(n):
        for _ in range(n):
            s.run(feeds, y)

    def runner_out(n):
        for _ in range(n):
            r(xb, out=yb)

    def runner_new(n):
        for _ in range(n):
            r(xb)

    def cffi_run(n):
        for _ in range(n):
            run(h, cf, 1, cx, 1, 0)

    def op(n):
        z = hetex.Graph().input("z", (4,))
        t0 = _ns()
        for _ in range(n):
            z = relu(z)
        return (_ns() - t0) * 1e-9 / n

    def op_cffi(n):
        gr = hetex.Graph()
        z = gr.input("z", (4,))._ptr
        gp, f = gr._ptr, lib.hx_relu
        t0 = _ns()
        for _ in range(n):
            z = f(gp, z)  # the cffi call alone, no wrapper
        return (_ns() - t0) * 1e-9 / n

    cases = {"run_out": timed(run_out), "run_new": timed(run_new),
             "runner_out": timed(runner_out), "runner_new": timed(runner_new),
             "cffi_run": timed(cffi_run), "op": op, "op_cffi": op_cffi}
    if so_path:
        released = ctypes.CDLL(so_path).hx_version
        kept = ctypes.PyDLL(so_path).hx_version

        def call_released(n):
            for _ in range(n):
                released()

        def call_kept(n):
            for _ in range(n):
                kept()
        cases["ctypes_gil_released"] = timed(call_released)
        cases["ctypes_gil_kept"] = timed(call_kept)
    for f in cases.values():  # plans, caches, warms up
        f(1000)
    return cases


def uptime():
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("c_bench", nargs="?", default=os.path.join(BUILD, "bench_pyoverhead"))
    ap.add_argument("so", nargs="?", default=os.path.join(BUILD, "libhetex.so"))
    ap.add_argument("--rounds", type=int, default=100)
    ap.add_argument("--runs", type=int, default=1000)
    ap.add_argument("--ops", type=int, default=1000)
    a = ap.parse_args()
    so = a.so if os.path.exists(a.so) else None
    up_before = uptime()
    cases = python_cases(so)
    best = {}
    for _ in range(a.rounds):
        out = subprocess.run([a.c_bench, str(a.runs), str(a.ops), "3"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            o = json.loads(line)
            key = "c_" + o["case"]
            best[key] = min(best.get(key, 1e30), o["us"] * 1e-6)
        for k, f in cases.items():
            v = f(a.ops if k.startswith("op") else a.runs)
            best["py_" + k] = min(best.get("py_" + k, 1e30), v)
    up_after = uptime()
    common = {"rounds": a.rounds, "uptime_before": up_before, "uptime_after": up_after}
    for k, v in sorted(best.items()):
        side, case = k.split("_", 1)
        print(json.dumps({"bench": "pyoverhead", "side": side, "case": case,
                          "us": round(v * 1e6, 4), "window": a.ops if case.startswith("op") else a.runs,
                          **common}))
    c_run, c_op = best["c_run"], best["c_op"]
    added = {f"{k}_us": round((best["py_" + k] - c_run) * 1e6, 3)
             for k in ("run_out", "run_new", "runner_out", "runner_new", "cffi_run")}
    added["op_us"] = round((best["py_op"] - c_op) * 1e6, 3)
    added["op_cffi_us"] = round((best["py_op_cffi"] - c_op) * 1e6, 3)
    if so:
        added["gil_release_us"] = round(
            (best["py_ctypes_gil_released"] - best["py_ctypes_gil_kept"]) * 1e6, 3)
    print(json.dumps({"bench": "pyoverhead", "case": "added", **added,
                      "ratio_runner_out_to_c": round(best["py_runner_out"] / c_run, 2),
                      "ratio_run_out_to_c": round(best["py_run_out"] / c_run, 2),
                      "goal_us": 2.0, "python": sys.version.split()[0],
                      "numpy": np.__version__, **common}))


if __name__ == "__main__":
    main()
