#!/usr/bin/python3
"""Integration: a failed job's reason carries the rank's root-cause line.

A rank logs the specific cause first (e.g. "checkpoint: cannot read
DIR/meta.json ...") and a generic "training failed: not found" after it; the
job's reason must quote the first ERROR line of the rank's log, not the last
line. One daemon, one rank, a --resume directory holding no checkpoint."""
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
    cl.start(lambda daemon: g)
    ok = False
    try:
        r = subprocess.run([args.pctl, "--server", d.control, "submit", "--data", data,
                            "--layers", "1", "--heads", "2", "--dim", "16", "--seq", "16",
                            "--batch", "2", "--steps", "5", "--resume", empty, "--json"],
                           capture_output=True, text=True, timeout=30)
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        job_id = __import__("json").loads(r.stdout)["job_id"]
        j = pc.wait_state(g, job_id, ("FAILED",), 60)
        reason = j["reason"]
        assert "rank 0" in reason and "meta.json" in reason and "ERROR" in reason, reason
        assert "training failed" not in reason, reason
        print("reason: %s" % reason)
        ok = True
    finally:
        cl.stop()
        if ok:
            cl.cleanup()
        else:
            print(cl.logs())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
