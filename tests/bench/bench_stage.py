#!/usr/bin/python3
"""bench_stage.py: the cost of staging device buffers (issue 12).

Runs px-coll-bench on host buffers and on `--device fake` buffers (host
memory that the transport treats as device memory, so every collective is
staged chunk by chunk through pinned host buffers exactly as a GPU's
memory is: transport/px_stage.c) and prints, per op and size, both bus
bandwidths and their ratio (fake / host). The ratio is the staging's
overhead: two extra copies per byte and the cutting into chunks; on a GPU
the copies run on the copy engines instead of memcpy. Each op and size is
run on the same ranks back to back; best of --repeat runs each.

usage: bench_stage.py PX_COLL_BENCH [--ranks 2] [--ops all_reduce,all_gather]
                      [--min 1M] [--max 64M] [--repeat 3]
(the staging chunk is the transport's default, 4 MiB)
"""
import argparse
import json
import subprocess
import sys


def run(exe, ranks, op, lo, hi, device):
    args = [exe, "-n", str(ranks), "--op", op, "-b", lo, "-e", hi, "-f", "4", "-w", "2",
            "-i", "10", "--json"]
    if device:
        args += ["--device", device]
    p = subprocess.run(args, capture_output=True, text=True, timeout=600)
    if p.returncode != 0:
        sys.exit("px-coll-bench %s failed (%d): %s" % (" ".join(args[1:]), p.returncode,
                                                        p.stderr[-2000:]))
    return {row["size"]: row["busbw"] for row in json.loads(p.stdout)["rows"]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("exe")
    ap.add_argument("--ranks", type=int, default=2)
    ap.add_argument("--ops", default="all_reduce,all_gather")
    ap.add_argument("--min", default="1M")
    ap.add_argument("--max", default="64M")
    ap.add_argument("--repeat", type=int, default=3)
    a = ap.parse_args()
    print("staged device buffers (--device fake) vs host buffers, %d ranks, busbw GB/s, "
          "best of %d" % (a.ranks, a.repeat))
    print("%-14s %10s %10s %10s %7s" % ("op", "bytes", "host", "staged", "ratio"))
    for op in a.ops.split(","):
        best = {"": {}, "fake": {}}
        for _ in range(a.repeat):
            for dev in ("", "fake"):
                for size, bw in run(a.exe, a.ranks, op, a.min, a.max, dev).items():
                    best[dev][size] = max(best[dev].get(size, 0.0), bw)
        for size in sorted(best[""]):
            h, d = best[""][size], best["fake"].get(size, 0.0)
            print("%-14s %10d %10.3f %10.3f %7.2f" % (op, size, h, d, d / h if h else 0.0))
    return 0


if __name__ == "__main__":
    sys.exit(main())
