#!/usr/bin/python3
"""Integration: a rank that fails after start-up aborts its job's world
under the daemon too (one daemon, two devices, a dp=2 job).

Rank 0 fails at its first checkpoint (checkpoint_dir under /proc: mkdir
fails there; only rank 0 writes checkpoints), after start-up and training
steps. Required: the job is FAILED within LIMIT_S of its first reported
step (before the abort, rank 0's world close waited PX_COMM_TIMEOUT_MS =
60 s for rank 1's goodbye while rank 1 waited in the next all-reduce for
rank 0); the reason names rank 0 and its mkdir; rank 1's log names rank 0
and the same cause (through the abort notice, not a timeout).
Exit 77 when parallax-rank was not built."""
import json
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

LIMIT_S = 10.0


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.rank or not os.access(args.rank, os.X_OK) or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=1, devices=2, tag="abort")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    cl.env.pop("PX_COMM_TIMEOUT_MS", None)  # the default: a deadline must not end it
    (d,) = cl.daemons
    d.env = cl.env
    g = pc.Grpc(d, args.proto)
    with cl:
        cl.start(lambda daemon: g)
        r = subprocess.run([args.pctl, "--server", d.control, "submit", "--data", data,
                            "--dp", "2", "--layers", "1", "--heads", "2", "--dim", "16",
                            "--seq", "16", "--batch", "4", "--steps", "200",
                            "--checkpoint-every", "3", "--checkpoint-dir", "/proc/x/ck",
                            "--json"], capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        job_id = json.loads(r.stdout)["job_id"]
        t_step = None
        t_end = time.time() + 120
        while time.time() < t_end:
            j = g.job(job_id)
            if t_step is None and j.get("step", 0) >= 1:
                t_step = time.time()
            if pc.job_state(j) in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.1)
        took = time.time() - (t_step or time.time())
        state, reason = pc.job_state(j), j.get("reason", "")
        log1 = g.logs(job_id, 1)
        print("job %s %s %.1f s after its first step; reason: %s" % (job_id, state, took, reason))
        assert state == "FAILED", j
        assert t_step is not None, "no step reported before the failure"
        assert took < LIMIT_S, "FAILED only %.1f s after the first step" % took
        assert "rank 0" in reason and "mkdir /proc/x" in reason, reason
        assert "rank 0: peer failure (it aborted: checkpoint: mkdir /proc/x" in log1, log1[-3000:]
        assert "timeout" not in log1, log1[-3000:]
        print("rank 1's log: rank 0 aborted with its reason, no timeout")
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
