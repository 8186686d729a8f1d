#!/usr/bin/python3
"""compare_mpi.py: parallax's collectives against Open MPI's (and Gloo's), same
ranks, same sizes, one after the other, on this machine.

    tests/bench/compare_mpi.py [--build build] [-n 2,4] [--ops all_reduce,...]
                               [-b 4K] [-e 64M] [--gloo] [--json OUT]

For each world size and op it runs build/transport/tools/px-coll-bench (forks
its own ranks, standalone bootstrap) and then tests/bench/mpi_coll_bench.c
(built here with mpicc into BUILD/tests/bench/, run with
`mpirun --allow-run-as-root --oversubscribe -np N`), both fp32 SUM, sizes x4,
200 timed iterations below 1 MiB and 20 from 1 MiB up, and prints per size
both busbw figures (nccl-tests bus factors) and the ratio ours / Open MPI
(flagged below issue 13's goals: 1.0 from 64 KiB up, 0.7 below), with the
1-minute load average before and after each pair (the figures mean little
when it is above the CPU count).
With -r R each pair runs R times alternating and each side keeps its best
time per size (on a shared machine the least disturbed run).
--gloo adds PyTorch's CPU backend (gloo_allreduce.py) for all-reduce at
16 MiB. Not a timed test: a benchmark to run by hand (the machine should be
otherwise idle; figures on a shared 2-core machine move by 10-20%).
"""
import argparse
import json
import os
import re
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))
PEER = os.path.join(HERE, "mpi_coll_bench.c")


def parse_bytes(s):
    m = re.fullmatch(r"(\d+)([KMG]?)(i?B)?", s.strip(), re.I)
    if not m:
        raise argparse.ArgumentTypeError("bad size %r" % s)
    return int(m.group(1)) << {"": 0, "K": 10, "M": 20, "G": 30}[m.group(2).upper()]


def build_peer(build, peer_src):
    out_dir = os.path.join(build, "tests", "bench")
    os.makedirs(out_dir, exist_ok=True)
    exe = os.path.join(out_dir, "mpi_coll_bench")
    if not os.path.isfile(peer_src):
        sys.exit("compare_mpi: the Open MPI peer %s is not there (--peer PATH)" % peer_src)
    if not os.path.exists(exe) or os.path.getmtime(exe) < os.path.getmtime(peer_src):
        subprocess.run(["mpicc", "-O2", "-o", exe, peer_src], check=True)
    return exe


def parse_json(out):
    """px-coll-bench --json's object; other lines (UCX writes its warnings to
    stdout) are passed on to stderr."""
    doc = None
    for line in out.splitlines():
        if line.startswith('{"op"'):
            doc = json.loads(line)
        elif line.strip():
            sys.stderr.write("px-coll-bench: %s\n" % line)
    if doc is None:
        raise RuntimeError("px-coll-bench printed no JSON: %r" % out[-500:])
    return doc


def run_ours(bench, n, op, minb, maxb):
    cmd = [bench, "-n", str(n), "--op", op, "-b", str(minb), "-e", str(maxb), "-f", "4",
           "--json"]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode == 2 and "not provided by this build" in p.stderr:
        return None
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
        raise RuntimeError("%s exited %d" % (" ".join(cmd), p.returncode))
    return {r["size"]: r for r in parse_json(p.stdout)["rows"]}


def run_mpi(exe, n, op, minb, maxb):
    cmd = ["mpirun", "--allow-run-as-root", "--oversubscribe", "-np", str(n), exe, op,
           str(minb), str(maxb)]
    env = dict(os.environ)
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-2000:] + p.stderr[-2000:])
        raise RuntimeError("%s exited %d" % (" ".join(cmd), p.returncode))
    rows = {}
    for line in p.stdout.splitlines():
        f = line.split()
        if len(f) == 5 and not line.startswith("#"):
            rows[int(f[0])] = {"size": int(f[0]), "count": int(f[1]), "time_us": float(f[2]),
                               "algbw": float(f[3]), "busbw": float(f[4])}
    return rows


def best(runs):
    """Per size, the run with the shortest time (the least disturbed)."""
    out = {}
    for rows in runs:
        for size, r in rows.items():
            if size not in out or r["time_us"] < out[size]["time_us"]:
                out[size] = r
    return out


def run_pair(bench, peer, n, op, minb, maxb, repeat):
    """Ours then Open MPI's, `repeat` times alternating; best time per size."""
    ours, mpi = [], []
    for _ in range(repeat):
        o = run_ours(bench, n, op, minb, maxb)
        if o is None:
            return None, run_mpi(peer, n, op, minb, maxb)
        ours.append(o)
        mpi.append(run_mpi(peer, n, op, minb, maxb))
    return best(ours), best(mpi)


def run_gloo(n, nbytes, iters):
    cmd = ["/usr/bin/python3", os.path.join(HERE, "gloo_allreduce.py"), "-n", str(n), "-s",
           str(nbytes), "-i", str(iters)]
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=900)
    if p.returncode != 0:
        sys.stderr.write(p.stderr[-2000:])
        raise RuntimeError("%s exited %d" % (" ".join(cmd), p.returncode))
    return json.loads(p.stdout.strip().splitlines()[-1])


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("-n", "--ranks", default="2,4")
    ap.add_argument("--ops", default="all_reduce,all_gather,reduce_scatter,all_to_all")
    ap.add_argument("-b", "--min-bytes", type=parse_bytes, default=4096)
    ap.add_argument("-e", "--max-bytes", type=parse_bytes, default=64 << 20)
    ap.add_argument("-r", "--repeat", type=int, default=1,
                    help="run each pair R times alternating, keep each side's best time per size")
    ap.add_argument("--gloo", action="store_true", help="also Gloo all-reduce at 16 MiB")
    ap.add_argument("--gloo-bytes", type=parse_bytes, default=16 << 20)
    ap.add_argument("--json", help="write all figures to this file")
    ap.add_argument("--peer", default=PEER, help="mpi_coll_bench.c (default tests/bench/)")
    a = ap.parse_args()

    bench = os.path.join(a.build, "transport", "tools", "px-coll-bench")
    if not os.access(bench, os.X_OK):
        sys.exit("compare_mpi: %s not built (ninja -C %s)" % (bench, a.build))
    peer = build_peer(a.build, a.peer)
    results = []
    worst = {}
    for n in [int(x) for x in a.ranks.split(",")]:
        for op in a.ops.split(","):
            load0 = os.getloadavg()
            ours, mpi = run_pair(bench, peer, n, op, a.min_bytes, a.max_bytes, a.repeat)
            load1 = os.getloadavg()
            if ours is None:
                print("# %s, %d ranks: not provided by this parallax build; Open MPI busbw: %s"
                      % (op, n, " ".join("%d:%.2f" % (s, mpi[s]["busbw"]) for s in sorted(mpi))))
                continue
            print("# %s, %d ranks, fp32 sum: busbw (GB/s), parallax / Open MPI; load average "
                  "%.2f before, %.2f after (%d CPUs)" % (op, n, load0[0], load1[0],
                                                         os.cpu_count() or 0))
            print("#%12s %10s %10s %10s %10s %7s" % ("size(B)", "px_us", "mpi_us", "px_busbw",
                                                     "mpi_busbw", "ratio"))
            for size in sorted(set(ours) & set(mpi)):
                o, m = ours[size], mpi[size]
                ratio = m["time_us"] / o["time_us"] if o["time_us"] > 0 else 0.0
                goal = 1.0 if size >= (64 << 10) else 0.7  # issue 13's goals
                flag = "" if ratio >= goal else "  < %.1f" % goal
                print(" %12d %10.1f %10.1f %10.2f %10.2f %7.2f%s" % (
                    size, o["time_us"], m["time_us"], o["busbw"], m["busbw"], ratio, flag))
                results.append({"op": op, "ranks": n, "size": size, "load": [load0[0], load1[0]],
                                "px_time_us": o["time_us"],
                                "mpi_time_us": m["time_us"], "px_busbw": o["busbw"],
                                "mpi_busbw": m["busbw"], "ratio": ratio})
                key = (op, n)
                worst[key] = min(worst.get(key, 1e9), ratio)
            sys.stdout.flush()
    if a.gloo:
        for n in [int(x) for x in a.ranks.split(",")]:
            gs, os_ = [], []
            for _ in range(a.repeat):
                gs.append(run_gloo(n, a.gloo_bytes, 20))
                os_.append(run_ours(bench, n, "all_reduce", a.gloo_bytes, a.gloo_bytes)[a.gloo_bytes])
            g = min(gs, key=lambda r: r["time_us"])
            o = min(os_, key=lambda r: r["time_us"])
            ratio = g["time_us"] / o["time_us"]
            print("# all_reduce %d B, %d ranks: parallax busbw %.2f GB/s (%.1f us), Gloo %.2f GB/s "
                  "(%.1f us): %.2fx" % (a.gloo_bytes, n, o["busbw"], o["time_us"], g["busbw"],
                                        g["time_us"], ratio))
            results.append({"op": "all_reduce", "ranks": n, "size": a.gloo_bytes,
                            "px_time_us": o["time_us"], "gloo_time_us": g["time_us"],
                            "px_busbw": o["busbw"], "gloo_busbw": g["busbw"], "gloo_ratio": ratio})
    if a.json:
        with open(a.json, "w") as f:
            json.dump(results, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
