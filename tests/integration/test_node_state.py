#!/usr/bin/python3
"""Integration: `pctl node drain/resume/stop NODE` on two daemons A and B
with one device each, every request sent to A (which relays those for B).

  * drain B: `pctl nodes` (either daemon) shows B DRAINED; a dp=2 job,
    which needs B's device, is refused naming "node B is draining"; a dp=1
    job runs on A, whichever daemon coordinates it (B's own placement
    leaves B out too);
  * B restarted: still draining (its database keeps it);
  * resume B: the dp=2 job is placed on both and runs;
  * drain B while it runs: B shows DRAINING, the job completes, B shows
    DRAINED;
  * an unknown node is NOT_FOUND naming it, a bad verb a usage error, both
    non-zero exits;
  * stop B while a dp=2 job runs there: B's daemon exits 0, the job fails
    as when B's daemon gets SIGTERM, no rank of it is left anywhere and B
    left no cgroup.
"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
import pxpctl  # noqa: E402

MODEL = ["--layers", "1", "--heads", "2", "--dim", "16", "--seq", "16", "--batch", "2"]


def main():
    args = pc.parse_args(sys.argv[1:])
    for exe in (args.rank, args.pctl):
        if not exe or not os.access(exe, os.X_OK):
            print("SKIP: %s not built" % (exe or "pctl/parallax-rank"))
            return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="drain")
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    a, b = cl.daemons
    ca, cb = pxpctl.Pctl(args.pctl, a), pxpctl.Pctl(args.pctl, b)

    def node(client, name):
        return [n for n in client.nodes() if n["name"] == name][0]

    def submit(client, dp, steps):
        return client.json("submit", "--data", data, "--dp", dp, "--steps", steps, *MODEL)["job_id"]

    def ranks_on(job_id):
        return sorted({r["node"] for r in ca.job(job_id)["ranks"]})

    with cl:
        cl.start(lambda d: pxpctl.Pctl(args.pctl, d))
        pc.wait_all_alive(cl.daemons, cb, 20, "%s to see both nodes" % b.name)
        out = ca.run("node", "drain", b.name)
        assert out.strip() == "node %s: DRAINED" % b.name, out
        for c in (ca, cb):
            nb = node(c, b.name)
            assert nb["state"] == "DRAINED" and nb["draining"] is True, nb
            assert node(c, a.name)["state"] == "UP", c.nodes()
        print("drained %s through %s: %s" % (b.name, a.name, out.strip()))

        pxpctl.pctl_fail(ca, "dp=2 on a drained node",
                         ["submit", "--data", data, "--dp", 2, "--steps", 2] + MODEL,
                         ["node %s is draining" % b.name, "pctl node resume"])
        for c in (ca, cb):  # each coordinator's placement leaves B out
            j = submit(c, 1, 2)
            pc.wait_state(ca, j, ("COMPLETED",), 60)
            assert ranks_on(j) == [a.name], ca.job(j)
        print("dp=1 jobs coordinated by %s and by %s ran on %s only" % (a.name, b.name, a.name))

        assert b.stop() == 0
        b.start()
        pc.wait_all_alive(cl.daemons, cb, 20, "%s back" % b.name)
        assert node(cb, b.name)["state"] == "DRAINED", cb.nodes()
        assert "is draining (as it was before this restart)" in b.log_since_start()
        print("%s restarted: still DRAINED" % b.name)

        out = ca.run("node", "resume", b.name)
        assert out.strip() == "node %s: UP" % b.name, out
        pc.wait_for(lambda: node(ca, b.name)["state"] == "UP", 10, "%s UP" % b.name)
        j = submit(ca, 2, 6000)  # ~10 s on an idle 2-core machine
        pc.wait_state(ca, j, ("RUNNING",), 60)
        assert ranks_on(j) == sorted([a.name, b.name]), ca.job(j)
        out = ca.run("node", "drain", b.name)
        assert "DRAINING" in out and "1 of 1 devices still held" in out, out
        assert node(ca, b.name)["state"] == "DRAINING", ca.nodes()
        done = pc.wait_state(ca, j, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert done["state"] == "COMPLETED", done
        pc.wait_for(lambda: node(ca, b.name)["state"] == "DRAINED", 10,
                    "%s DRAINED once its job ended" % b.name)
        print("drained while a dp=2 job ran there: %s, then the job completed "
              "(step %d) and %s went DRAINED" % (out.strip(), done["step"], b.name))

        pxpctl.pctl_fail(ca, "unknown node", ["node", "drain", "no-such-node"],
                         ["NOT_FOUND", "no-such-node"])
        pxpctl.pctl_fail(ca, "bad verb", ["node", "reboot", b.name], ["reboot"], code=2)

        ca.run("node", "resume", b.name)
        pc.wait_for(lambda: node(ca, b.name)["state"] == "UP", 10, "%s UP" % b.name)
        j = submit(ca, 2, 100000)
        pc.wait_state(ca, j, ("RUNNING",), 60)
        pids = pc.rank_pids(j)
        assert len(pids) == 2, pids
        out = ca.run("node", "stop", b.name)
        assert out.strip().startswith("node %s: STOPPING" % b.name), out
        b.proc.wait(30)
        assert b.proc.returncode == 0, (b.proc.returncode, b.log_tail())
        assert "pctl node stop: stopping (ranks first)" in b.log_since_start()
        done = pc.wait_state(ca, j, ("FAILED",), 60)
        pc.wait_for(lambda: not [p for p in pids if os.path.exists("/proc/%d" % p) and
                                 p in pc.rank_pids(j)], 20, "the job's ranks to be gone")
        assert b.stop() == 0  # raises when B left a cgroup behind
        print("stopped %s under a running dp=2 job: exit 0, job FAILED (%s), no rank left"
              % (b.name, done["reason"]))
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
