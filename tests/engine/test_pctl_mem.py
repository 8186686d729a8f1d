#!/usr/bin/env python3
"""test_pctl_mem.py: ZeRO jobs through the daemons: `pctl submit --zero
--grad-accum --checkpoint-every --export-safetensors`, `pctl mem`, and
`pctl submit --resume` on another dp and stage (integration).

Two parallaxd on loopback (2 cpu devices each). Job A: dp=4, ZeRO-3,
accumulation 2, 6 steps, checkpoint every 3 steps, safetensors export. Checks:
it completes; `pctl mem A --json` has 4 ranks at step 6 whose peak of params +
grads + optimizer equals the plan's prediction (within 5%; in fact equal) and
whose categories' peaks equal the plan's; the plain table has 4 rows; the
checkpoints step_3/ and step_6/ hold meta.json and 4 shards; the export
exists; A's ranks are dp 0-3 at tp 0. Job B resumes A's step_3 with dp=2
and ZeRO-1: its steps 4-6 report A's losses within 1e-5. A spec with zero=4
is refused with a message naming it. Tensor parallelism: job T1 (one rank)
and job T2 (dp=1 x tp=2, 2 steps each, ZeRO-0): `pctl mem T2` reports tp 2,
world 2 and lists 2 ranks at dp 0 with tp 0 and 1 (the table too), each
holding the same parameter bytes, which equal its plan and are half of T1's
(within 5%: the LayerNorms, wpe and row-parallel biases are whole on every
tensor rank). Context parallelism: job C2 (cp=2) lists its ranks' cp index
and slice of each sequence ([0,8)+[24,32) and [8,16)+[16,24) of 32 tokens),
their activation peaks equal to the plan and below one rank's (job C1).

usage: test_pctl_mem.py --parallaxd PATH --proto PATH --pctl PATH --rank PATH
(run with /usr/bin/python3, as tests/integration)."""
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "integration"))
import pxcluster as pc  # noqa: E402
from pxpctl import Pctl  # noqa: E402

MODEL = ["--layers", "2", "--heads", "2", "--dim", "32", "--seq", "32", "--batch", "8",
         "--lr", "1e-3", "--seed", "7"]


def run_job(c, cl, data, name, *extra):
    """submits a 2-step job, waits for it to complete; returns `pctl mem --json`"""
    j = c.json("submit", "--data", data, "--steps", 2, "--name", name, *extra,
               *MODEL)["job_id"]
    job = pc.wait_state(c, j, ("COMPLETED", "FAILED", "CANCELLED"), 240)
    assert pc.job_state(job) == "COMPLETED", "job %s ended %s: %s\n%s" % (
        name, pc.job_state(job), job.get("reason"), cl.logs())
    return j, c.json("mem", j)


def tp_mem(c, cl, data):
    """a dp=1 x tp=2 job's ranks with their coordinates, each holding half
    the parameters of the same model on one rank"""
    _, one = run_job(c, cl, data, "zmem-t1", "--dp", 1)
    t2, two = run_job(c, cl, data, "zmem-t2", "--dp", 1, "--tp", 2)
    assert (one["tp"], one["world"], len(one["ranks"])) == (1, 1, 1), one
    assert (two["dp"], two["tp"], two["world"]) == (1, 2, 2), two
    ranks = two["ranks"]
    assert [(r["rank"], r["dp"], r["tp"]) for r in ranks] == [(0, 0, 0), (1, 0, 1)], ranks
    full = one["ranks"][0]["categories"]["params"]["peak"]
    half = [r["categories"]["params"]["peak"] for r in ranks]
    for r in ranks:
        m = r["categories"]["params"]
        assert r["step"] == 2 and m["peak"] == m["plan"], r
        # issue 12: CPU ranks have no device memory to report
        assert r["device"] is None, r
    assert half[0] == half[1], half
    assert abs(half[0] / full - 0.5) <= 0.05 * 0.5, (half, full)
    table = c.run("mem", t2)
    rows = [ln.split() for ln in table.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [r[:3] for r in rows] == [["0", "0", "0"], ["1", "0", "1"]], table
    assert "dp 1, tp 2 (2 ranks)" in table, table
    assert all(r[-1] == "-" for r in rows), table  # device-GB: none on CPU
    print(table.rstrip())
    print("dp=1 x tp=2: params %d + %d B per tensor rank, %d B on one rank (ratio %.3f)" % (
        half[0], half[1], full, half[0] / full))


def cp_mem(c, cl, data):
    """a cp=2 job's ranks (issue 11): their cp index and context slice, and
    activation peaks equal to the plan and below one rank's"""
    _, one = run_job(c, cl, data, "zmem-c1", "--dp", 1)
    c2, two = run_job(c, cl, data, "zmem-c2", "--dp", 1, "--cp", 2)
    assert (two["cp"], two["seq"], two["world"]) == (2, 32, 2), two
    ranks = two["ranks"]
    assert [(r["rank"], r["cp"], r["tokens"]) for r in ranks] == [
        (0, 0, [[0, 8], [24, 32]]), (1, 1, [[8, 16], [16, 24]])], ranks
    full = one["ranks"][0]["categories"]["activations"]
    for r in ranks:
        m = r["categories"]["activations"]
        assert m["peak"] == m["plan"] and m["peak"] < full["peak"], (m, full)
    table = c.run("mem", c2)
    assert "cp 2, seq 32: each rank holds 16 tokens of every sequence" in table, table
    rows = [ln.split() for ln in table.splitlines() if ln.split() and ln.split()[0].isdigit()]
    assert [r[-2:] for r in rows] == [["0", "[0,8)+[24,32)"], ["1", "[8,16)+[16,24)"]], table
    print(table.rstrip())
    print("cp=2: activations %s B per rank, %d B on one rank" % (
        [r["categories"]["activations"]["peak"] for r in ranks], full["peak"]))


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.pctl or not os.access(args.pctl, os.X_OK) or not args.rank:
        print("SKIP: pctl or parallax-rank not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="zmem")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data)
    ck = os.path.join(cl.workdir, "ck")
    st = os.path.join(cl.workdir, "weights.safetensors")
    with cl:
        cl.start(lambda d: Pctl(args.pctl, d))
        c = Pctl(args.pctl, cl.daemons[0])
        a = c.json("submit", "--data", data, "--dp", 4, "--steps", 6, "--zero", 3,
                   "--grad-accum", 2, "--checkpoint-every", 3, "--checkpoint-dir", ck,
                   "--export-safetensors", st, "--name", "zmem-a", *MODEL)["job_id"]
        job = pc.wait_state(c, a, ("COMPLETED", "FAILED", "CANCELLED"), 240)
        assert pc.job_state(job) == "COMPLETED", "job A ended %s: %s\n%s" % (
            pc.job_state(job), job.get("reason"), cl.logs())
        mem = c.json("mem", a)
        assert mem["zero"] == 3 and mem["dp"] == 4 and mem["tp"] == 1, mem
        assert mem["world"] == 4, mem
        ranks = mem["ranks"]
        assert [r["rank"] for r in ranks] == [0, 1, 2, 3], ranks
        assert [(r["dp"], r["tp"]) for r in ranks] == [(0, 0), (1, 0), (2, 0), (3, 0)], ranks
        for r in ranks:
            assert r["step"] == 6, r
            got, want = r["state_peak"], r["plan_state_peak"]
            assert want > 0 and abs(got - want) <= 0.05 * want, (got, want)
            for cat in ("params", "grads", "optimizer"):
                m = r["categories"][cat]
                assert m["peak"] == m["plan"], (cat, m)
            assert r["categories"]["activations"]["peak"] > 0, r
            print("rank %d: state peak %d B, plan %d B; params %d grads %d optimizer %d" % (
                r["rank"], got, want, r["categories"]["params"]["peak"],
                r["categories"]["grads"]["peak"], r["categories"]["optimizer"]["peak"]))
        table = c.run("mem", a)
        rows = [ln for ln in table.splitlines() if ln.split() and ln.split()[0].isdigit()]
        assert len(rows) == 4, table
        print(table.rstrip())
        for s in (3, 6):
            names = sorted(os.listdir(os.path.join(ck, "step_%d" % s)))
            assert names == ["meta.json"] + ["shard_tp0_%d.bin" % k for k in range(4)], names
        assert os.path.getsize(st) > 4 * 30000, st
        base = {m["step"]: m["loss"] for m in c.metrics(a)}

        b = c.json("submit", "--data", data, "--dp", 2, "--steps", 6, "--zero", 1,
                   "--resume", os.path.join(ck, "step_3"), "--name", "zmem-b", *MODEL)["job_id"]
        job = pc.wait_state(c, b, ("COMPLETED", "FAILED", "CANCELLED"), 240)
        assert pc.job_state(job) == "COMPLETED", "job B ended %s: %s\n%s" % (
            pc.job_state(job), job.get("reason"), cl.logs())
        steps = c.metrics(b)
        assert [m["step"] for m in steps] == [4, 5, 6], steps
        for m in steps:
            rel = abs(m["loss"] - base[m["step"]]) / base[m["step"]]
            assert rel <= 1e-5, (m, base)
        print("resumed dp=2 ZeRO-1 from A's step 3: losses of steps 4-6 equal A's")

        try:
            c.json("submit", "--data", data, "--dp", 2, "--steps", 2, "--zero", 4, *MODEL)
            raise AssertionError("zero=4 was accepted")
        except pc.ClientError as e:
            assert "zero=4" in str(e), str(e)
            print("zero=4 refused: %s" % str(e).strip().splitlines()[0])
        tp_mem(c, cl, data)
        cp_mem(c, cl, data)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
