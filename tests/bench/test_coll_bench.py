#!/usr/bin/python3
"""Integration: px-coll-bench, the standalone collectives benchmark, with
--check on 1, 2, 3 and 4 ranks (its own launcher, standalone bootstrap).

For every op this build's transport provides: every row has #wrong == 0,
the sizes are min..max x4 rounded down to whole elements per rank (per-rank
ops), count = size / element size, and busbw = algbw x the nccl-tests bus
factor. Also: a torchrun-style launch (PX_* set by hand, no -n), the JSON
and table outputs agree in shape, and bad values exit 2 naming the flag.

    test_coll_bench.py PX_COLL_BENCH
"""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

FACTOR = {"all_reduce": lambda n: 2.0 * (n - 1) / n, "all_gather": lambda n: (n - 1) / n,
          "reduce_scatter": lambda n: (n - 1) / n, "all_to_all": lambda n: (n - 1) / n,
          "broadcast": lambda n: 1.0, "reduce": lambda n: 1.0}
PER_RANK = ("all_gather", "reduce_scatter", "all_to_all")
ESIZE = {"float": 4, "double": 8, "half": 2, "bfloat16": 2, "int32": 4, "int64": 8, "uint8": 1}


def run(exe, *args, env=None, timeout=120):
    p = subprocess.run([exe] + [str(a) for a in args], capture_output=True, text=True,
                       timeout=timeout, env=env)
    return p.returncode, p.stdout, p.stderr


def doc_of(out):
    """The --json object (UCX may write warnings to stdout on other lines)."""
    lines = [l for l in out.splitlines() if l.startswith('{"op"')]
    assert len(lines) == 1, out
    return json.loads(lines[0])


def check_rows(doc, op, n, minb, maxb, dtype="float"):
    rows = doc["rows"]
    es = ESIZE[dtype]
    want = []
    b = minb
    while b <= maxb:
        count = b // es
        if op in PER_RANK:
            count = count // n * n
        want.append(count * es)
        b *= 4
    got = [r["size"] for r in rows]
    assert got == want, (op, n, got, want)
    for r in rows:
        assert r["wrong"] == 0, (op, n, dtype, r)
        assert r["count"] * es == r["size"], r
        assert r["type"] == dtype, r
        assert r["time_us"] > 0, r
        f = FACTOR[op](n)
        assert abs(r["busbw"] - r["algbw"] * f) <= 1e-5 * r["busbw"] + 2e-6, (f, r)
        # algbw = size / time (GB/s), up to the printed digits of time (1e-6 us)
        if r["size"]:
            rel = 1e-5 + 1e-6 / r["time_us"]
            assert abs(r["algbw"] - r["size"] / (r["time_us"] * 1e3)) <= rel * r["algbw"] + 2e-6, r
    assert doc["ranks"] == n and doc["op"] == op and doc["wrong"] == 0, doc


def main():
    exe = sys.argv[1]
    checked = 0
    # which ops this transport build provides (they land one at a time)
    ops = []
    for op in FACTOR:
        rc, out, err = run(exe, "--op", op, "-b", "64", "-e", "64", "-i", "1", "-w", "0", "--json")
        if rc == 2 and "not provided by this build" in err:
            print("note: %s not provided by this transport build yet" % op)
            continue
        assert rc == 0, (op, rc, err)
        ops.append(op)
    assert "all_reduce" in ops and "broadcast" in ops, ops

    for n in (1, 2, 3, 4):
        for op in ops:
            minb, maxb = 1000, 256000  # odd sizes: per-rank rounding, 4 rows
            rc, out, err = run(exe, "-n", n, "--op", op, "-b", minb, "-e", maxb, "-i", 3, "-w", 1,
                               "-c", "--json", "-r", n - 1)
            assert rc == 0, (n, op, rc, err[-2000:])
            check_rows(doc_of(out), op, n, minb, maxb)
            checked += 1
    # every dtype, and the other reduction ops, on 3 ranks (odd per-rank blocks)
    for op in [o for o in ("all_reduce", "reduce_scatter", "reduce") if o in ops]:
        for dtype, redop in (("half", "sum"), ("bfloat16", "avg"), ("double", "prod"),
                             ("int32", "avg"), ("int64", "max"), ("uint8", "min"),
                             ("float", "avg")):
            rc, out, err = run(exe, "-n", 3, "--op", op, "-d", dtype, "-o", redop, "-b", 600,
                               "-e", 9600, "-i", 2, "-w", 1, "-c", "--json")
            assert rc == 0, (op, dtype, redop, rc, err[-2000:])
            doc = doc_of(out)
            check_rows(doc, op, 3, 600, 9600, dtype)
            assert all(r["redop"] == redop for r in doc["rows"]), doc
            checked += 1
    for op in [o for o in ("all_gather", "all_to_all", "broadcast") if o in ops]:
        rc, out, err = run(exe, "-n", 4, "--op", op, "-d", "uint8", "-b", 1001, "-e", 16016,
                           "-i", 2, "-c", "--json", "-r", 1)
        assert rc == 0, (op, rc, err[-2000:])
        check_rows(doc_of(out), op, 4, 1001, 16016, "uint8")
        checked += 1
    # counts 0 and 1 (sizes below an element / below one element per rank)
    rc, out, err = run(exe, "-n", 3, "--op", "all_reduce", "-b", 2, "-e", 8, "-f", 2, "-c",
                       "--json", "-i", 2)
    assert rc == 0, err
    rows = doc_of(out)["rows"]
    assert [r["count"] for r in rows] == [0, 1, 2], rows
    assert all(r["wrong"] == 0 for r in rows), rows

    # torchrun-style: the caller sets PX_* and starts each rank
    port = free_port()
    procs = []
    for r in range(2):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE="2", PX_MASTER_ADDR="127.0.0.1",
                   PX_MASTER_PORT=str(port))
        procs.append(subprocess.Popen([exe, "-b", "4K", "-e", "64K", "-c", "-i", "3"], env=env,
                                      stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True))
    outs = [p.communicate(timeout=120) for p in procs]
    assert [p.returncode for p in procs] == [0, 0], outs
    table = [l for l in outs[0][0].splitlines()
             if l and not l.startswith("#") and "UCX" not in l]
    assert [int(l.split()[0]) for l in table] == [4096, 16384, 65536], outs[0][0]
    assert all(l.split()[-1] == "0" for l in table), table
    assert "Out of bounds values : 0 OK" in outs[0][0], outs[0][0]
    assert not [l for l in outs[1][0].splitlines() if "UCX" not in l], outs[1][0]  # rank 0 only

    # bad values: exit 2, the flag named
    for args, word in ((["--op", "nope"], "--op"), (["-b", "0x"], "--min-bytes"),
                       (["-f", "3"], "step_factor"), (["-d", "float128"], "--dtype"),
                       (["-n", "2", "-r", "2"], "root"), (["-b", "8K", "-e", "4K"], "max_bytes")):
        rc, out, err = run(exe, *args)
        assert rc == 2 and word in err, (args, rc, err)
    print("px-coll-bench: %d op x world runs checked exact (ops: %s)" % (checked, ", ".join(ops)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
