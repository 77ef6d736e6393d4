#!/usr/bin/env python3
"""Where the time of a hetex Chrome trace (HX_TRACE, --trace) goes: per lane,
the busy time, and the ops (or copies) that take most of it, with their
count and mean. Spans before --skip seconds of the first event are left out
(the first steps' warm-up).

    python3 bench/trace_summary.py trace.json [--top 12] [--skip 2.0] [--json]
"""
import argparse
import collections
import json


def main():
    a = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    a.add_argument("trace")
    a.add_argument("--top", type=int, default=12, help="ops per lane (12)")
    a.add_argument("--skip", type=float, default=0.0, help="seconds left out at the start (0)")
    a.add_argument("--json", action="store_true", help="one JSON object per lane")
    o = a.parse_args()

    with open(o.trace) as f:
        events = json.load(f)["traceEvents"]
    lanes = {e["tid"]: e["args"]["name"] for e in events if e.get("ph") == "M"}
    spans = [e for e in events if e.get("ph") == "X"]
    if not spans:
        print("no spans in", o.trace)
        return
    start = min(e["ts"] for e in spans) + o.skip * 1e6
    end = max(e["ts"] + e["dur"] for e in spans)
    per_lane = collections.defaultdict(lambda: collections.defaultdict(list))
    for e in spans:
        if e["ts"] >= start:
            per_lane[e["tid"]][e["name"]].append(e["dur"])
    wall = (end - start) / 1e6
    for tid, ops in sorted(per_lane.items()):
        busy = sum(sum(d) for d in ops.values()) / 1e6
        rows = sorted(ops.items(), key=lambda kv: -sum(kv[1]))[: o.top]
        if o.json:
            print(json.dumps({"lane": lanes.get(tid, str(tid)), "wall_s": round(wall, 6),
                              "busy_s": round(busy, 6),
                              "ops": [{"name": n, "count": len(d), "total_s": sum(d) / 1e6,
                                       "mean_us": sum(d) / len(d)} for n, d in rows]}))
            continue
        print(f"{lanes.get(tid, tid)}: busy {busy:.3f} s of {wall:.3f} s ({100 * busy / wall:.0f}%)")
        for name, d in rows:
            t = sum(d) / 1e6
            print(f"  {name:<28} {len(d):>7}  {t:9.4f} s  {100 * t / busy:5.1f}%  "
                  f"mean {sum(d) / len(d):9.1f} us")


if __name__ == "__main__":
    main()
