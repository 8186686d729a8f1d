#!/usr/bin/python3
"""Integration: ranks that never register and ignore SIGTERM.

PX_RANK_BIN points at a fake rank (a shell script that ignores SIGTERM and
never calls RegisterRank). The job must fail when the rendezvous deadline
(PX_CONNECT_TIMEOUT_MS) passes, naming the ranks that did not register, and
every fake rank must be gone after SIGTERM + PX_KILL_GRACE_MS + SIGKILL.
Needs no parallax-rank."""
import os
import shutil
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402

FAKE = """#!/bin/bash
# fake parallax-rank: never registers, ignores SIGTERM
trap 'echo "got SIGTERM, ignoring"' TERM
echo "fake rank $*"
while :; do sleep 0.1; done
"""


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def main():
    args = pc.parse_args(sys.argv[1:])
    import tempfile
    fake_dir = tempfile.mkdtemp(prefix="px-fake-")
    fake = os.path.join(fake_dir, "parallax-rank")
    with open(fake, "w") as f:
        f.write(FAKE)
    os.chmod(fake, stat.S_IRWXU)
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="stk",
                    env={"PX_RANK_BIN": fake, "PX_CONNECT_TIMEOUT_MS": "2000",
                         "PX_KILL_GRACE_MS": "1000"})
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=5000)
    client = lambda d: make_client(args, d)  # noqa: E731
    cl.on_exit(lambda failed: shutil.rmtree(fake_dir, ignore_errors=True))
    with cl:
        cl.start(client)
        c = client(cl.daemons[0])
        job_id = c.submit(data, dp=4, batch=8, steps=5)
        t0 = time.time()
        j = pc.wait_state(c, job_id, ("FAILED", "COMPLETED", "CANCELLED"), 30)
        took = time.time() - t0
        assert pc.job_state(j) == "FAILED", j
        assert "rendezvous timed out" in j["reason"] and "0,1,2,3" in j["reason"], j["reason"]
        assert 1.5 < took < 15, took
        pids = [r["pid"] for r in j["ranks"]]
        assert len(pids) == 4 and all(p > 0 for p in pids), j["ranks"]
        pc.wait_for(lambda: not any(alive(p) for p in pids), 10,
                    "fake ranks to be killed (SIGTERM ignored -> SIGKILL)")
        gone = time.time() - t0
        logs = cl.logs()
        assert "ignored SIGTERM" in logs, logs
        log0 = c.logs(job_id, 0)
        assert "got SIGTERM, ignoring" in log0 and "--job %s" % job_id in log0, log0
        print("FAILED after %.1f s (%s); ranks SIGKILLed, all gone %.1f s after submission"
              % (took, j["reason"], gone))
        codes = cl.stop()
        assert codes == [0, 0], codes
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
