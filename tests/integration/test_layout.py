#!/usr/bin/python3
"""Integration: the parallel layout in a job's path, through pctl and two
daemons of 2 cpu devices each.

At submit (pctl exits non-zero, the daemon's message names the values):
  * --dp 1 --tp 4: a tensor group of 4 cannot be placed on nodes of 2
    devices: the message names tp=4 and the largest node's 2 free devices;
  * --heads 6 --tp 4: heads % tp;
  * --batch 12 --dp 2 --grad-accum 4: batch % (dp x grad_accum) (the daemon's
    message, sent over gRPC: pctl refuses this one itself, exit 2);
  * --pp 2: a placeable layout the engine cannot run yet;
  * --cp 2 --seq 18: the sequence is not divisible by 2 x cp;
  * a token file holding token 300 with the default vocab (256): the
    message names the largest token and the vocab.
A dp 2 x pp 2 job (GPipe, 4 micro-batches) over both daemons: `pctl status`
prints each stage's measured bubble (idle fraction) next to (p-1)/(M+p-1);
an interleaved pp 2 x V 2 job completes and its status shows the chunks and
(p-1)/(V*M+p-1); interleaved's rules are rejected at submit, named.
A dp=4 job over both daemons: `pctl status` prints 4 rank rows with their
coordinates (dp 0..3, tp/pp/cp/ep 0), nodes (2 on each daemon) and devices,
the reporting rank 0 marked; `--json` carries the same coordinates; each
rank was started with --spec-file (a 0600 file in the job's run directory)
and none of the old job flags; the job completes. An old client's JobSpec
(dp alone, no `parallel`, over gRPC) is read as parallel.dp = dp. A cp=2
job (ring attention) runs to completion with cp coordinates 0 and 1.
Exit 77 when parallax-rank or pctl was not built."""
import json
import os
import stat
import struct
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxpctl import pctl_cluster, pctl_fail  # noqa: E402


def write_tokens(path, tokens):
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(tokens)
    with open(path, "wb") as f:
        f.write(struct.pack("<256i", *header))
        f.write(struct.pack("<%dH" % len(tokens), *tokens))


def status_rows(text):
    """The rows of `pctl status`'s ranks table, split into columns."""
    lines = text.splitlines()
    i = lines.index("ranks:")
    head = lines[i + 1].split()
    assert head[:6] == ["RANK", "DP", "TP", "PP", "CP", "EP"] and head[6:8] == ["NODE", "DEVICE"], head
    rows = []
    for l in lines[i + 2:]:  # the table ends at the next section (paths ...)
        if not l.startswith("  "):
            break
        rows.append(l.split())
    return rows


def main():
    args = pc.parse_args(sys.argv[1:])
    setup = pctl_cluster(args, "lay")
    if setup is None:
        return 77
    cl, data, client = setup
    big = os.path.join(cl.workdir, "big-token.bin")
    write_tokens(big, [5, 300, 17] * 100 + [7])
    small = ["--layers", 2, "--heads", 2, "--dim", 32, "--seq", 16, "--steps", 4, "--lr", 1e-3]
    with cl:
        cl.start(client)
        d0, d1 = cl.daemons
        c = client(d0)

        pctl_fail(c, "tp over a node", ["submit", "--data", data, "--dp", 1, "--tp", 4,
                                        "--heads", 4, "--batch", 4],
                  ["INVALID_ARGUMENT", "tp=4 needs 4 devices on one node",
                   "the largest node has 2 free"])
        pctl_fail(c, "heads % tp", ["submit", "--data", data, "--tp", 4, "--heads", 6,
                                    "--dim", 96, "--batch", 4],
                  ["INVALID_ARGUMENT", "heads=6 is not divisible by tp=4"])
        pctl_fail(c, "pctl: batch % (dp x accum)", ["submit", "--data", data, "--dp", 2,
                                                    "--grad-accum", 4, "--batch", 12],
                  ["--batch 12 is not divisible by --dp 2 x --grad-accum 4"], code=2)
        g = pc.Grpc(d0, args.proto)
        try:
            g.submit(data, dp=2, batch=12, steps=4, seq=16, grad_accum=4,
                     parallel=g.pb.ParallelSpec(dp=2))
            raise AssertionError("batch 12 with dp 2 x grad_accum 4 was accepted")
        except pc.ClientError as e:
            assert "batch=12 is not divisible by dp=2 x grad_accum=4" in str(e), str(e)
            print("rejected %-28s %s" % ("daemon: batch % (dp x accum):", e))
        # an old client's spec: dp alone, no `parallel` (runs after the checks)
        old_id = g.submit(data, dp=2, batch=4, steps=4, seq=16, name="old-client")
        pctl_fail(c, "pp with zero 2", ["submit", "--data", data, "--dp", 1, "--pp", 2,
                                        "--zero", 2, "--batch", 4],
                  ["zero=2 with pp=2: pipeline parallelism runs with ZeRO 0 and 1 so far"])
        pctl_fail(c, "seq % (2 x cp)", ["submit", "--data", data, "--cp", 2, "--batch", 4,
                                        "--layers", 2, "--heads", 2, "--dim", 32, "--seq", 18,
                                        "--steps", 4],
                  ["INVALID_ARGUMENT", "seq=18 is not divisible by 2 x cp=2"])
        # interleaved 1F1B (issue 10): the daemon's validator names the values
        pctl_fail(c, "interleaved layers", ["submit", "--data", data, "--pp", 2, "--layers", 6,
                                            "--micro-batches", 2, "--schedule", "interleaved",
                                            "--virtual-stages", 2, "--batch", 4],
                  ["INVALID_ARGUMENT", "layers=6 is not divisible by pp=2 x virtual_stages=2"])
        pctl_fail(c, "interleaved micro-batches", ["submit", "--data", data, "--pp", 2,
                                                   "--layers", 4, "--micro-batches", 1,
                                                   "--schedule", "interleaved",
                                                   "--virtual-stages", 2, "--batch", 4],
                  ["INVALID_ARGUMENT", "micro_batches=1 is not a multiple of pp=2"])
        pctl_fail(c, "chunks without interleaved", ["submit", "--data", data, "--pp", 2,
                                                    "--layers", 4, "--micro-batches", 2,
                                                    "--virtual-stages", 2, "--batch", 4],
                  ["INVALID_ARGUMENT", "virtual_stages=2 with schedule 1f1b"])
        pctl_fail(c, "token >= vocab", ["submit", "--data", big, "--batch", 4] + small,
                  ["INVALID_ARGUMENT", "token 300 >= vocab 256", "largest token 300"])
        # nothing was stored but the old client's job; let it finish first
        jobs = c.jobs()
        assert [j["id"] for j in jobs] == [old_id], jobs
        assert jobs[0]["spec"]["parallel"]["dp"] == 2 and \
            jobs[0]["spec"]["parallel"]["world"] == 2, jobs
        old = pc.wait_state(c, old_id, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert pc.job_state(old) == "COMPLETED", (old, cl.logs())
        assert len(old["ranks"]) == 2 and [r["coord"]["dp"] for r in old["ranks"]] == [0, 1], old
        print("old client (dp only): read as %s, %s" % (old["spec"]["parallel"], old["state"]))

        # ranks run from the spec file: a long dp=4 job, looked at while it runs
        long_id = c.json("submit", "--data", data, "--dp", 4, "--batch", 8, "--name", "long",
                         *(small[:-4] + ["--steps", 100000, "--lr", 1e-3]))["job_id"]
        pc.wait_state(c, long_id, ("RUNNING",), 60)
        spec_file = os.path.join(d0.state_dir, "jobs", long_id, "spec.pb")
        mode = stat.S_IMODE(os.stat(spec_file).st_mode)
        assert mode == 0o600, "spec file mode %o" % mode
        pids = pc.rank_pids(long_id)
        assert len(pids) == 4, pids
        for pid in pids:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = [a.decode() for a in f.read().split(b"\0") if a]
            assert "--spec-file" in argv and "--layers" not in argv and "--batch" not in argv, argv
            assert argv[argv.index("--spec-file") + 1].endswith("/%s/spec.pb" % long_id), argv
        print("ranks started with --spec-file (mode %o): %s" % (mode, " ".join(argv[1:])))
        c.cancel(long_id)
        pc.wait_for(lambda: not pc.rank_pids(long_id), 30, "the long job's ranks to go")

        # a dp=4 job over both daemons
        job_id = c.json("submit", "--data", data, "--dp", 4, "--batch", 8, "--name", "lay4",
                        *small)["job_id"]
        job = pc.wait_state(c, job_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(job) == "COMPLETED", (job, cl.logs())

        text = c.run("status", job_id)
        assert "layout       dp=4 tp=1 pp=1 cp=1 ep=1 (world 4)" in text, text
        rows = status_rows(text)
        assert len(rows) == 4, text
        assert [r[0] for r in rows] == ["0*", "1", "2", "3"], rows
        assert [r[1:6] for r in rows] == [[str(k), "0", "0", "0", "0"] for k in range(4)], rows
        assert [r[6] for r in rows] == [d0.name, d0.name, d1.name, d1.name], rows
        assert [r[7] for r in rows] == ["cpu:0", "cpu:1", "cpu:0", "cpu:1"], rows
        print("status:\n" + text[text.index("layout"):].rstrip())

        j = c.json("status", job_id)
        # the resolved layout (status --json also carries every ParallelSpec
        # field beside it: sequence_parallel, micro_batches, ...)
        par = j["spec"]["parallel"]
        assert {k: par[k] for k in ("dp", "tp", "pp", "cp", "ep", "world")} == \
            {"dp": 4, "tp": 1, "pp": 1, "cp": 1, "ep": 1, "world": 4}, j["spec"]
        assert j["reporting_rank"] == 0, j
        assert [r["coord"] for r in j["ranks"]] == [
            {"dp": k, "tp": 0, "pp": 0, "cp": 0, "ep": 0} for k in range(4)], j["ranks"]
        assert [r["reporting"] for r in j["ranks"]] == [True, False, False, False], j["ranks"]
        assert [r["node"] for r in j["ranks"]] == [d0.name, d0.name, d1.name, d1.name]
        assert j["step"] == 4 and len(c.metrics(job_id)) == 4, j
        print("status --json: coordinates %s" % json.dumps([r["coord"]["dp"] for r in j["ranks"]]))

        # context parallelism (issue 11): cp 2 through pctl -> JobSpec ->
        # daemon -> --spec-file -> the ranks' ring attention
        cp_id = c.json("submit", "--data", data, "--cp", 2, "--batch", 4, "--name", "ring",
                       *small)["job_id"]
        job = pc.wait_state(c, cp_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(job) == "COMPLETED", (job, cl.logs())
        j = c.json("status", cp_id)
        assert j["spec"]["parallel"]["cp"] == 2 and j["spec"]["parallel"]["world"] == 2, j
        assert [r["coord"]["cp"] for r in j["ranks"]] == [0, 1], j["ranks"]
        assert j["step"] == 4 and len(c.metrics(cp_id)) == 4, j
        print("cp=2 job: coordinates cp %s, %s" % ([r["coord"]["cp"] for r in j["ranks"]],
                                                   j["state"]))

        # a pipeline (issue 10): dp 2 x pp 2 over both daemons, GPipe with 4
        # micro-batches; pctl status shows each stage's measured bubble
        pp_id = c.json("submit", "--data", data, "--dp", 2, "--pp", 2, "--batch", 8,
                       "--micro-batches", 4, "--schedule", "gpipe", "--name", "pipe",
                       *small)["job_id"]
        job = pc.wait_state(c, pp_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(job) == "COMPLETED", (job, cl.logs())
        text = c.run("status", pp_id)
        line = [ln for ln in text.splitlines() if ln.startswith("pipeline ")]
        assert line and "gpipe, 4 micro-batches; measured bubble" in line[0] and \
            " 0: " in line[0] and " 1: " in line[0] and "(p-1)/(M+p-1) = 20.0%" in line[0], text
        j = c.json("status", pp_id)
        bub = j.get("pipeline_bubble")
        assert bub and [b["stage"] for b in bub] == [0, 1] and \
            all(0.0 <= b["idle_fraction"] <= 1.0 and b["step_s"] > 0 for b in bub), j
        print("pipeline status: " + line[0])

        # interleaved 1F1B through the daemons: the JobSpec carries the
        # chunks to the ranks (spec file); pp 2 x V 2 on 4 layers
        int_id = c.json("submit", "--data", data, "--pp", 2, "--batch", 8, "--micro-batches", 2,
                        "--schedule", "interleaved", "--virtual-stages", 2, "--name", "inter",
                        *(["--layers", 4] + small[2:]))["job_id"]
        job = pc.wait_state(c, int_id, ("COMPLETED", "FAILED", "CANCELLED"), 180)
        assert pc.job_state(job) == "COMPLETED", (job, cl.logs())
        text = c.run("status", int_id)
        line = [ln for ln in text.splitlines() if ln.startswith("pipeline ")]
        assert line and "interleaved, 2 micro-batches, 2 chunks per stage" in line[0] and \
            "(p-1)/(V*M+p-1) = 20.0% (V=2)" in line[0], text
        print("interleaved status: " + line[0])

        codes = cl.stop()
        assert codes == [0, 0], codes
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
