#!/usr/bin/python3
"""Integration: every pctl command that takes JOB takes the job's --name too.

Two jobs named 'eco1' run one after the other on one daemon; then
  * status, metrics, logs and mem of 'eco1' answer for the newest (with a
    note on stderr that two finished jobs have that name);
  * a third 'eco1', still running, is the one 'eco1' names (no note), and
    `pctl cancel eco1` cancels it;
  * an id still names its own job; a name no job has is NOT_FOUND, exit
    non-zero.
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
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="names")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    (d,) = cl.daemons
    d.env = cl.env
    g = pc.Grpc(d, args.proto)
    with cl:
        cl.start(lambda daemon: g)

        def pctl(*a):
            return subprocess.run([args.pctl, "--server", d.control] + list(a), capture_output=True,
                                  text=True, timeout=60)

        def submit(steps):
            r = pctl("submit", "--name", "eco1", "--data", data, "--layers", "1", "--heads", "2",
                     "--dim", "16", "--seq", "16", "--batch", "2", "--steps", str(steps), "--json")
            assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
            return json.loads(r.stdout)["job_id"]
        first = submit(2)
        pc.wait_state(g, first, ("COMPLETED",), 60)
        second = submit(3)
        pc.wait_state(g, second, ("COMPLETED",), 60)

        r = pctl("status", "eco1", "--json")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert json.loads(r.stdout)["id"] == second, r.stdout
        assert "2 finished jobs are named 'eco1'" in r.stderr and second in r.stderr, r.stderr
        r = pctl("metrics", "eco1", "--json")
        assert r.returncode == 0, (r.returncode, r.stdout, r.stderr)
        assert [m["step"] for m in json.loads(r.stdout)] == [1, 2, 3], r.stdout
        r = pctl("logs", "eco1")
        assert r.returncode == 0 and "step" in r.stdout, (r.returncode, r.stdout, r.stderr)
        r = pctl("mem", "eco1", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["job_id"] == second, \
            (r.returncode, r.stdout, r.stderr)
        r = pctl("status", first, "--json")  # an id names its own job
        assert r.returncode == 0 and json.loads(r.stdout)["id"] == first, (r.stdout, r.stderr)
        print("finished: eco1 names %s (the newest of 2)" % second)

        third = submit(100000)
        pc.wait_state(g, third, ("RUNNING",), 60)
        r = pctl("status", "eco1", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["id"] == third, (r.stdout, r.stderr)
        assert "named" not in r.stderr, r.stderr
        r = pctl("cancel", "eco1", "--json")
        assert r.returncode == 0 and json.loads(r.stdout)["id"] == third, (r.stdout, r.stderr)
        pc.wait_state(g, third, ("CANCELLED",), 60)
        print("running: eco1 names %s, cancelled by name" % third)

        r = pctl("status", "no-such-job")
        assert r.returncode != 0 and "NOT_FOUND" in r.stderr and "no-such-job" in r.stderr, \
            (r.returncode, r.stdout, r.stderr)
        print("unknown name: %s" % r.stderr.strip())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
