#!/usr/bin/python3
"""Integration: bad resumes, caught early and explained.

1. --resume of a directory holding no complete checkpoint is refused at
   submit (pctl exits non-zero naming resume_dir), not minutes later.
2. A failed job's reason carries the rank's root-cause line: resuming a
   checkpoint of another model fails in the rank, which logs the specific
   cause first ("cannot re-cut ... layers 1, this job 2") and a generic
   "training failed: invalid argument" after it; the reason must quote the
   first ERROR line of the rank's log, not the last line.
One daemon, one device."""
import json
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.rank or not os.access(args.rank, os.X_OK) or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="reason")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    empty = os.path.join(cl.workdir, "no-checkpoint")
    os.makedirs(empty)
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    (d,) = cl.daemons
    d.env = cl.env
    g = pc.Grpc(d, args.proto)
    with cl:
        cl.start(lambda daemon: g)
        base = [args.pctl, "--server", d.control, "submit", "--data", data, "--heads", "2",
                "--dim", "16", "--seq", "16", "--batch", "2", "--json"]

        def submit(*extra):
            return subprocess.run(base + list(extra), capture_output=True, text=True, timeout=30)
        r = submit("--layers", "1", "--steps", "5", "--resume", empty)
        assert r.returncode != 0 and "resume_dir" in r.stderr and "meta.json" in r.stderr, \
            (r.returncode, r.stdout, r.stderr)
        print("empty --resume refused at submit: %s" % r.stderr.strip())

        ck = os.path.join(cl.workdir, "ck")
        r = submit("--layers", "1", "--steps", "2", "--checkpoint-every", "2",
                   "--checkpoint-dir", ck)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        first = json.loads(r.stdout)["job_id"]
        pc.wait_state(g, first, ("COMPLETED",), 60)
        r = submit("--layers", "2", "--steps", "5", "--resume", os.path.join(ck, "step_2"))
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        job_id = json.loads(r.stdout)["job_id"]
        j = pc.wait_state(g, job_id, ("FAILED",), 60)
        reason = j["reason"]
        assert "rank 0" in reason and "ERROR" in reason and "re-cut" in reason, reason
        assert "training failed" not in reason, reason
        print("reason: %s" % reason)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
