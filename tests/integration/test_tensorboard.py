#!/usr/bin/python3
"""Integration: TensorBoard event files written live by rank 0, read back by
TensorBoard's own EventAccumulator (the PyPI `tensorboard` package, which
deploy/setup.sh --tests puts in build/pydeps; read in a child interpreter
with build/pydeps on PYTHONPATH, as its protobuf is newer than Debian's).

Two daemons, two devices each:
  1. `pctl submit --tensorboard DIR` (dp 2, validation every 3 steps):
     DIR/<job id>/ holds train/loss of every step equal (as float32) to
     `pctl metrics JOB --json`'s, val/loss at the steps that evaluated, and
     train/lr, train/grad_norm, train/tokens_per_second at every step, and
     (the daemons' ranks given PX_PEAK_TFLOPS) train/mfu equal to the
     metrics' mfu = model FLOPs x tokens/s / (2 x the peak);
  2. a job without --tensorboard: the coordinator's default,
     state-dir/tensorboard/<job id>/;
  3. --max-restarts: a rank killed after a checkpoint, the restarted job
     (a new id) appends to its first job's run: every step 1..N once
     (each event file read with TensorBoard's EventFileLoader);
  4. a DIR that cannot be created (a path under a file) is refused at
     submit, naming it;
  5. parallax-rank standalone with --tensorboard DIR writes DIR itself,
     its losses those of its --metrics-out.
Exit 0 pass, 1 fail, 77 skip (tensorboard not importable)."""
import glob
import json
import os
import signal
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxpctl import pctl_cluster, pctl_fail  # noqa: E402

MODEL = ["--layers", "1", "--heads", "2", "--dim", "16", "--seq", "16", "--batch", "4",
         "--lr", "1e-3", "--seed", "7"]


# MODEL's model FLOPs a token by hand (llm.c's 6N + 6LCT): N = one layer's
# 12 C^2 matrices + the 256 x C head, 6 x 1 x 16 x 16 for attention
FLOPS = 6 * (12 * 16 * 16 + 256 * 16) + 6 * 1 * 16 * 16
PEAK_TFLOPS = 0.1


def f32(x):
    return struct.unpack("<f", struct.pack("<f", x))[0]


def f32_near(got, want):
    """got (a float32 TensorBoard read) is f32(want) or a float32 next to
    it: `want` is a double (MFU) that `pctl --json` prints to 9 significant
    digits, and a double within ~1e-10 relative of a float32 rounding
    midpoint rounds to either neighbour once printed so (seen in CI:
    0.0381024275 printed, 0.03810242563 written)."""
    w = f32(want)
    ulp = abs(f32(w * (1 + 2 ** -23)) - w) or 1e-45
    return abs(got - w) <= ulp * 1.01


READER = r"""
import glob, json, os, sys
from tensorboard.backend.event_processing import event_accumulator as ea
from tensorboard.backend.event_processing.event_file_loader import EventFileLoader
rundir = sys.argv[1]
acc = ea.EventAccumulator(rundir, size_guidance={ea.SCALARS: 0})
acc.Reload()
out = {"scalars": {t: [[e.step, e.value] for e in acc.Scalars(t)]
                   for t in acc.Tags()["scalars"]}, "raw": []}
for path in sorted(glob.glob(os.path.join(rundir, "*tfevents*"))):
    for ev in EventFileLoader(path).Load():
        out["raw"] += [[v.tag, ev.step] for v in ev.summary.value]
print(json.dumps(out))
"""
PYDEPS = ""


def read_run(rundir):
    """TensorBoard's reading of a run: {"scalars": {tag: [[step, value]]},
    "raw": [[tag, step]] of every event of every file (duplicates kept,
    which EventAccumulator would hide)}. In its own interpreter with the
    pydeps first: the tensorboard package needs its newer protobuf."""
    r = subprocess.run(["/usr/bin/python3", "-c", READER, rundir], capture_output=True,
                       text=True, timeout=120, env=dict(os.environ, PYTHONPATH=PYDEPS))
    assert r.returncode == 0, (rundir, r.stderr)
    return json.loads(r.stdout)


def scalars(rundir):
    """{tag: [(step, value)]} of a run, as TensorBoard shows it."""
    return {t: [tuple(e) for e in v] for t, v in read_run(rundir)["scalars"].items()}


def raw_steps(rundir, tag):
    """Every step `tag` was written at, over all of the run's event files."""
    return sorted(st for t, st in read_run(rundir)["raw"] if t == tag)


def check_run(rundir, metrics, what):
    """The run's scalars are the job's step metrics."""
    s = scalars(rundir)
    want = {m["step"]: m for m in metrics}
    got = dict(s.get("train/loss", []))
    assert sorted(got) == sorted(want), "%s: train/loss steps %s, metrics %s" % (
        what, sorted(got), sorted(want))
    for step, m in want.items():
        assert got[step] == f32(m["loss"]), (what, step, got[step], m["loss"])
    for tag in ("train/lr", "train/grad_norm", "train/tokens_per_second"):
        assert [st for st, _ in s.get(tag, [])] == sorted(want), (what, tag, s.get(tag))
    lr = dict(s["train/lr"])
    for step, m in want.items():
        assert lr[step] == f32(m["lr"]), (what, step, lr[step], m["lr"])
    val = {m["step"]: m["val_loss"] for m in metrics if m.get("val_loss")}
    got_val = dict(s.get("val/loss", []))
    assert sorted(got_val) == sorted(val), (what, sorted(got_val), sorted(val))
    for step, v in val.items():
        assert got_val[step] == f32(v), (what, step, got_val[step], v)
    mfu = {m["step"]: m["mfu"] for m in metrics if "mfu" in m}
    got_mfu = dict(s.get("train/mfu", []))
    assert sorted(got_mfu) == sorted(mfu), (what, sorted(got_mfu), sorted(mfu))
    for step, v in mfu.items():
        assert f32_near(got_mfu[step], v), (what, step, got_mfu[step], v)
    return s


def main():
    args = pc.parse_args(sys.argv[1:])
    pydeps = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(args.rank))), "pydeps")
    global PYDEPS
    PYDEPS = pydeps
    if subprocess.run(["/usr/bin/python3", "-c", "import tensorboard.backend.event_processing"],
                      env=dict(os.environ, PYTHONPATH=pydeps), capture_output=True).returncode:
        print("SKIP: tensorboard not importable (deploy/setup.sh --tests puts it in %s)" % pydeps)
        return 77
    # a forced device peak: the CPU ranks report MFU (none without it)
    setup = pctl_cluster(args, "tb", env={"PX_PEAK_TFLOPS": str(PEAK_TFLOPS)})
    if setup is None:
        return 77
    cl, data, client = setup
    with cl:
        cl.start(client)
        d0 = cl.daemons[0]
        c = client(d0)
        tbdir = os.path.join(cl.workdir, "tb")

        # 1. --tensorboard DIR
        job = c.json("submit", "--data", data, "--val-data", data, "--dp", "2", "--steps", "7",
                     "--eval-every", "3", "--tensorboard", tbdir, *MODEL)["job_id"]
        j = pc.wait_state(c, job, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert pc.job_state(j) == "COMPLETED", j
        assert j["spec"]["tensorboard_dir"] == os.path.join(tbdir, job), j["spec"]
        metrics = c.metrics(job)
        s = check_run(os.path.join(tbdir, job), metrics, "--tensorboard")
        for m in metrics:  # dp 2: the model FLOPs over both devices' peaks
            want = FLOPS * m["tokens_per_second"] / (2 * PEAK_TFLOPS * 1e12)
            assert abs(m.get("mfu", 0) - want) <= 1e-6 * want, (m, want)
        print("--tensorboard: %s/%s: %d steps, val/loss at %s, tags %s"
              % (tbdir, job, len(s["train/loss"]), [st for st, _ in s["val/loss"]], sorted(s)))

        # 2. the coordinator's default directory
        job2 = c.json("submit", "--data", data, "--steps", "3", *MODEL)["job_id"]
        j = pc.wait_state(c, job2, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert pc.job_state(j) == "COMPLETED", j
        run2 = os.path.join(d0.state_dir, "tensorboard", job2)
        assert j["spec"]["tensorboard_dir"] == run2, j["spec"]
        check_run(run2, c.metrics(job2), "default")
        print("default: %s" % run2)

        # 3. a restarted job appends to its run, every step once
        ckdir = os.path.join(cl.workdir, "ckpt")
        job3 = c.json("submit", "--data", data, "--dp", "2", "--steps", "1500",
                      "--checkpoint-every", "100", "--checkpoint-dir", ckdir, "--max-restarts", "1",
                      "--tensorboard", tbdir, *MODEL)["job_id"]
        run3 = os.path.join(tbdir, job3)

        def checkpointed():
            j = c.job(job3)
            assert pc.job_state(j) in ("PENDING", "STARTING", "RUNNING"), j
            done = [n for n in (os.listdir(ckdir) if os.path.isdir(ckdir) else [])
                    if os.path.exists(os.path.join(ckdir, n, "meta.json"))]
            return j if done and j.get("step", 0) >= 150 else None
        j = pc.wait_for(checkpointed, 90, "a checkpoint of %s and step 150" % job3, 0.05)
        os.kill([r for r in j["ranks"] if r["rank"] == 1][0]["pid"], signal.SIGKILL)
        j = pc.wait_state(c, job3, ("FAILED", "COMPLETED"), 30)
        assert pc.job_state(j) == "FAILED" and "restarted as" in j["reason"], j
        before = raw_steps(run3, "train/loss")
        new_id = j["reason"].split("restarted as ")[1].split()[0]
        n = pc.wait_state(c, new_id, ("FAILED", "COMPLETED", "CANCELLED"), 180)
        assert pc.job_state(n) == "COMPLETED", n
        assert n["spec"]["tensorboard_dir"] == run3, n["spec"]
        resumed = c.metrics(new_id)[0]["step"]
        steps = raw_steps(run3, "train/loss")
        assert steps == list(range(1, 1501)), (steps[:5], len(steps), len(set(steps)))
        assert len(glob.glob(os.path.join(run3, "*tfevents*"))) == 2, os.listdir(run3)
        got = dict(scalars(run3)["train/loss"])
        for m in c.metrics(new_id):  # the steps the restart wrote are its own
            if m["step"] > before[-1]:
                assert got[m["step"]] == f32(m["loss"]), (m, got[m["step"]])
        print("restart: %s wrote steps %d..%d, %s resumed at %d; the run holds 1..1500 once"
              % (job3, before[0], before[-1], new_id, resumed))

        # 4. a directory that cannot be made
        afile = os.path.join(cl.workdir, "a-file")
        open(afile, "w").close()
        pctl_fail(c, "--tensorboard under a file",
                  ["submit", "--data", data, "--steps", "2", "--tensorboard",
                   os.path.join(afile, "tb")] + MODEL,
                  ["tensorboard_dir", os.path.join(afile, "tb"), "Not a directory"])

    # 5. parallax-rank standalone
    work = cl.workdir
    os.makedirs(work, exist_ok=True)
    try:
        data5 = os.path.join(work, "t.bin")
        pc.write_llmc_tokens(data5, max_tokens=20000)
        run5 = os.path.join(work, "standalone")
        mpath = os.path.join(work, "m.jsonl")
        r = subprocess.run([args.rank, "--data", data5, "--steps", "4", "--metrics-out", mpath,
                            "--tensorboard", run5] + MODEL, capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        rows = [json.loads(line) for line in open(mpath)]
        check_run(run5, rows, "standalone")
        print("standalone: %s, %d steps" % (run5, len(rows)))

        # a DIR that cannot be made: a warning, training goes on
        r = subprocess.run([args.rank, "--data", data5, "--steps", "2", "--tensorboard",
                            os.path.join(mpath, "tb")] + MODEL, capture_output=True, text=True,
                           timeout=120, env=dict(os.environ, OPENBLAS_NUM_THREADS="1"))
        assert r.returncode == 0 and "tensorboard: cannot create" in r.stderr + r.stdout, \
            (r.returncode, r.stdout, r.stderr)
        assert "step 2 loss" in r.stdout, r.stdout
        print("standalone bad DIR: warned, trained")
    finally:
        import shutil
        shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
