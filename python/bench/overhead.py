"""What the Python binding adds to the C library's own cost, measured beside
it: one session run of a tiny graph (y = relu(x + c), 4 elements, one feed,
one fetch, on the CPU, one thread) and adding one op to a graph, each timed
through `hetex` and by the same calls in C (bench/bench_pyoverhead.c, run
in turn with the Python rounds). Best of each round's per-call mean; one
JSON object per case, then the added microseconds.

    python python/bench/overhead.py [PATH_TO_bench_pyoverhead] [--rounds N]
"""
import argparse
import json
import os
import subprocess
import sys
import time

import numpy as np

import hetex

HERE = os.path.dirname(os.path.abspath(__file__))


def python_round(runs, ops):
    g = hetex.Graph()
    x = g.input("x", (4,))
    c = g.constant("c", np.array([1, -2, 3, -4], np.float32))
    y = hetex.relu(x + c)
    s = hetex.Session(g, accelerator="none", n_threads=1)
    xb = np.full(4, 0.5, np.float32)
    yb = np.empty(4, np.float32)
    feeds = {x: xb}
    for _ in range(1000):
        s.run(feeds, y, out=yb)
    res = {}
    t0 = time.perf_counter()
    for _ in range(runs):
        s.run(feeds, y, out=yb)
    res["run_out"] = (time.perf_counter() - t0) / runs
    t0 = time.perf_counter()
    for _ in range(runs):
        s.run(feeds, y)
    res["run_new"] = (time.perf_counter() - t0) / runs
    r = s.runner([x], y)  # the prepared run
    t0 = time.perf_counter()
    for _ in range(runs):
        r(xb, out=yb)
    res["runner_out"] = (time.perf_counter() - t0) / runs
    t0 = time.perf_counter()
    for _ in range(runs):
        r(xb)
    res["runner_new"] = (time.perf_counter() - t0) / runs
    h = hetex.Graph()
    z = h.input("z", (4,))
    relu = hetex.relu
    t0 = time.perf_counter()
    for _ in range(ops):
        z = relu(z)
    res["op"] = (time.perf_counter() - t0) / ops
    t0 = time.perf_counter()
    for _ in range(ops):
        hetex._lib.hx_relu(h._ptr, z._ptr)  # the cffi call alone, no wrapper
    res["op_cffi"] = (time.perf_counter() - t0) / ops
    return res


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("c_bench", nargs="?",
                    default=os.path.join(HERE, "..", "..", "build", "bench_pyoverhead"))
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--runs", type=int, default=20000)
    ap.add_argument("--ops", type=int, default=2000)
    a = ap.parse_args()
    best = {}
    for _ in range(a.rounds):
        out = subprocess.run([a.c_bench, str(a.runs), str(a.ops), "1"], check=True,
                             capture_output=True, text=True).stdout
        for line in out.splitlines():
            o = json.loads(line)
            key = "c_" + o["case"]
            best[key] = min(best.get(key, 1e30), o["us"] * 1e-6)
        for k, v in python_round(a.runs, a.ops).items():
            best["py_" + k] = min(best.get("py_" + k, 1e30), v)
    load = os.getloadavg()
    for k, v in sorted(best.items()):
        side, case = k.split("_", 1)
        print(json.dumps({"bench": "pyoverhead", "side": side, "case": case,
                          "us": round(v * 1e6, 4), "rounds": a.rounds, "load": load}))
    print(json.dumps({
        "bench": "pyoverhead", "case": "added",
        "run_us_with_out": round((best["py_run_out"] - best["c_run"]) * 1e6, 3),
        "run_us_new_array": round((best["py_run_new"] - best["c_run"]) * 1e6, 3),
        "runner_us_with_out": round((best["py_runner_out"] - best["c_run"]) * 1e6, 3),
        "runner_us_new_array": round((best["py_runner_new"] - best["c_run"]) * 1e6, 3),
        "op_us": round((best["py_op"] - best["c_op"]) * 1e6, 3),
        "op_us_cffi_call_only": round((best["py_op_cffi"] - best["c_op"]) * 1e6, 3),
        "goal_us": 2.0, "python": sys.version.split()[0], "load": load}))


if __name__ == "__main__":
    main()
