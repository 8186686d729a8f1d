#!/usr/bin/python3
"""Integration (regression): a daemon whose gRPC channel to the coordinator
is still backing off must still deliver its ranks' exits.

Node b starts alone; its first heartbeats to a are refused, so its channel
to a backs off (gRPC's ~1 s, then ~1.6 s ... when this test was written;
now one heartbeat period, auth.c, so the window is narrower). a starts
~1.3 s later, sees b at once, and runs a short dp=4 job whose ranks on b
exit while b's channel may still be in backoff. Before RankExited was
retried, b's reports failed fast and the job stayed RUNNING forever; now it
must complete."""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    if pc.rank_missing(args):
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="late")
    a, b = cl.daemons
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data)
    with cl:
        b.start()
        time.sleep(1.3)
        a.start()
        c = make_client(args, a)

        def a_sees_b():
            try:
                return any(n["name"] == b.name and n["alive"] for n in c.nodes())
            except pc.ClientError:
                return False
        pc.wait_for(a_sees_b, 15, "a to see b")
        job_id = c.submit(data, dp=4, batch=8, steps=5, layers=1, heads=2, dim=16, seq=16)
        t0 = time.time()
        job = pc.wait_state(c, job_id, ("COMPLETED", "FAILED", "CANCELLED"), 40)
        # what this test is about: b's rank exits reach the coordinator, so
        # every rank slot ends "exited" (a job that FAILED for another reason
        # must still get them; COMPLETED needs them)
        def all_exited():
            j = c.job(job_id)
            return j if all(r["state"] == "exited" for r in j["ranks"]) else None
        job = pc.wait_for(all_exited, 30, "every rank's exit to reach the coordinator")
        b_ranks = [r for r in job["ranks"] if r["node"] == b.name]
        assert len(b_ranks) == 2, job["ranks"]
        if pc.job_state(job) != "COMPLETED":
            # the transport's end-of-training race (a rank leaving right after
            # the last all-reduce) is not the daemon's; report it, don't mask it
            assert pc.job_state(job) == "FAILED" and "peer failure" in job["reason"], job
            print("WARNING: job FAILED on the transport's exit race: %s" % job["reason"])
        else:
            assert all(r["exit_code"] == 0 for r in b_ranks), b_ranks
        print("job %s %s %.1f s after submission; b's exits delivered (codes %s)" % (
            job_id, pc.job_state(job), time.time() - t0, [r["exit_code"] for r in b_ranks]))
        codes = cl.stop()
        assert codes == [0, 0], codes
        return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
