"""Pool the paired per-round ratios of several bench runs (2026-11-25).

usage: python3 docs/results/2026-11-25-strict-time-pooled/pool.py WORKLOAD VCPUS RESULTS.json...

Each round's off and strict samples are paired as the report pairs them
(ratio >1 is slower); prints each run's median, quartiles and rounds at or
under 1.15x, then the same for all the rounds together.
"""
import json
import statistics
import sys


def ratios(path, workload, cpus):
    cells = {}
    for s in json.load(open(path))["samples"]:
        if s["workload"] == workload and s["cpus"] == cpus:
            cells.setdefault(s["round"], {})[s["mode"]] = s
    out = []
    for _, m in sorted(cells.items()):
        if "off" in m and "strict" in m:
            off, st = m["off"]["value"], m["strict"]["value"]
            out.append(off / st if m["off"]["better"] == "higher" else st / off)
    return out


def summary(xs):
    q = statistics.quantiles(sorted(xs), n=4)
    return (f"n={len(xs)} median {statistics.median(xs):.3f} "
            f"quartiles {q[0]:.3f}-{q[2]:.3f} <=1.15: {sum(x <= 1.15 for x in xs)}")


def main():
    workload, cpus, runs = sys.argv[1], int(sys.argv[2]), sys.argv[3:]
    pooled = []
    for path in runs:
        r = ratios(path, workload, cpus)
        pooled += r
        print(path, summary(r))
    print("pooled", summary(pooled))


if __name__ == "__main__":
    main()
