#!/usr/bin/python3
"""Integration: `pctl bench` on two daemons (2 CPU devices each), small sizes.

* --ranks 4 all_reduce 1K..64K --check --json: the job COMPLETED with ranks
  on both nodes, one row per size (x2), #wrong 0 everywhere, count = size/4,
  busbw = algbw x 2(n-1)/n; GetJob (gRPC) returns the same rows.
* the table form (--ranks 2 broadcast, x4 sizes): nccl-tests columns, one
  line per size, "Out of bounds values : 0 OK", exit 0.
* 3 ranks across the nodes: all-gather (half), reduce-scatter (bf16),
  all-to-all (int32), reduce (double), --check exact.
* bad values: an unknown op / dtype and too many ranks are INVALID_ARGUMENT
  from the daemon naming the field; a bad size is a usage error naming the
  flag; nothing is left running.

    test_pctl_bench.py --parallaxd P --proto P --pctl P --rank P
"""
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import pxcluster as pc  # noqa: E402


def pctl(args, d, *a, timeout=120):
    p = subprocess.run([args.pctl, "--server", d.control] + [str(x) for x in a],
                       capture_output=True, text=True, timeout=timeout)
    return p.returncode, p.stdout, p.stderr


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.pctl or not os.access(args.pctl, os.X_OK) or \
            (args.rank and not os.access(args.rank, os.X_OK)):
        print("SKIP: pctl or parallax-rank not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="bench")
    a, b = cl.daemons
    with cl:
        g = pc.Grpc(a, args.proto)
        cl.start(lambda d: g)

        rc, out, err = pctl(args, a, "bench", "--ranks", 4, "--op", "all_reduce", "--min-bytes",
                            "1K", "--max-bytes", "64K", "--check", "--iters", 5, "--json")
        assert rc == 0, (rc, out, err)
        doc = json.loads(out)
        assert doc["state"] == "completed" and doc["ranks"] == 4 and doc["wrong"] == 0, doc
        rows = doc["rows"]
        assert [r["size"] for r in rows] == [1024 << i for i in range(7)], rows
        for r in rows:
            assert r["wrong"] == 0 and r["count"] * 4 == r["size"] and r["type"] == "float", r
            assert r["redop"] == "sum" and r["time_us"] > 0, r
            assert abs(r["busbw"] - r["algbw"] * 1.5) <= 1e-6 * r["busbw"] + 1e-9, r
        job = g.job(doc["job_id"])
        assert pc.job_state(job) == "COMPLETED", job
        assert sorted({x["node"] for x in job["ranks"]}) == sorted([a.name, b.name]), job["ranks"]
        assert [int(r["size"]) for r in job["bench_rows"]] == [r["size"] for r in rows], job
        assert [int(r["wrong"]) for r in job["bench_rows"]] == [0] * 7, job
        # any daemon answers about the job (GetJob routed to the coordinator)
        jb = pc.Grpc(b, args.proto).job(doc["job_id"])
        assert len(jb["bench_rows"]) == 7, jb

        rc, out, err = pctl(args, b, "bench", "--ranks", 2, "--op", "broadcast", "--min-bytes",
                            4096, "--max-bytes", "256K", "--step-factor", 4, "--check")
        assert rc == 0, (rc, out, err)
        lines = [l.split() for l in out.splitlines() if l.strip() and not l.startswith("#")]
        assert [int(f[0]) for f in lines] == [4096, 16384, 65536, 262144], out
        for f in lines:
            assert len(f) == 8 and f[2] == "float" and f[3] == "none" and f[7] == "0", f
            assert int(f[1]) * 4 == int(f[0]) and abs(float(f[6]) - float(f[5])) < 0.011, f
        assert "Out of bounds values : 0 OK" in out, out

        # 3 ranks over both nodes: every other collective, odd sizes, exact
        for op, dtype in (("all_gather", "half"), ("reduce_scatter", "bfloat16"),
                          ("all_to_all", "int32"), ("reduce", "double")):
            rc, out, err = pctl(args, a, "bench", "--ranks", 3, "--op", op, "--dtype", dtype,
                                "--min-bytes", 1000, "--max-bytes", 8000, "--iters", 3,
                                "--check", "--json")
            assert rc == 0, (op, rc, out, err)
            d3 = json.loads(out)
            assert d3["state"] == "completed" and d3["wrong"] == 0 and len(d3["rows"]) == 4, d3
            assert all(r["type"] == dtype and r["wrong"] == 0 for r in d3["rows"]), d3

        for argv, code, words in (
                (["--op", "all_everything"], 1, ["INVALID_ARGUMENT", "bench.op", "all_everything"]),
                (["--dtype", "float128"], 1, ["INVALID_ARGUMENT", "bench.dtype", "float128"]),
                (["--ranks", 5], 1, ["INVALID_ARGUMENT", "ranks=5", "4 devices"]),
                (["--min-bytes", "12Q"], 2, ["--min-bytes", "12Q"]),
                (["--min-bytes", "8K", "--max-bytes", "4K"], 2, ["--max-bytes"]),
                (["--iters", 0], 2, ["--iters"])):
            rc, out, err = pctl(args, a, "bench", *argv)
            assert rc == code and all(w in err for w in words), (argv, rc, out, err)
        # rejected submissions left no job behind; the cluster is idle again
        def idle():
            return all(not dev["job_id"] for n in g.nodes() for dev in n["devices"])
        pc.wait_for(idle, 10, "every device to be free")
        # a coordinates 5; rejected ones left nothing (ListJobs lists the whole cluster)
        mine = [j for j in g.jobs() if j.get("coordinator") == a.name]
        assert len(mine) == 5, g.jobs()
        print("pctl bench: 4-rank all_reduce (7 sizes), 2-rank broadcast, 3-rank others exact; "
              "bad values rejected")
        codes = cl.stop()
        assert codes == [0, 0], codes
    return 0


if __name__ == "__main__":
    sys.exit(main())
