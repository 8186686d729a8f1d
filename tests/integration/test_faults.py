#!/usr/bin/python3
"""Integration: faults and stops of running jobs on two daemons.

1. WatchJob (on the coordinator) streams a long job's progress; CancelJob -> CANCELLED, the
   stream ends on it, and no parallax-rank of the job is left.
2. SIGKILL of one rank (rank 2, on the second node), watched through the
   second daemon (which relays the coordinator's state) -> FAILED with a
   reason naming the rank and the signal; every other rank gone within
   seconds; the relayed stream ends on FAILED.
3. SIGKILL of the second daemon while its ranks run -> the coordinator
   fails the job ("is dead: it answered no membership probe") and stops
   its own ranks; the second daemon's ranks (frozen with SIGSTOP so they
   outlive it) are killed when it restarts.
4. SIGKILL and immediate restart of the second daemon (quicker than
   PX_PEER_DEAD_MS) while it holds all ranks of a job: no exit report ever
   comes; the coordinator sees the node's devices freed and fails the job.
Exit 77 (skipped) when parallax-rank was not built."""
import os
import signal
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402

LONG = dict(dp=4, batch=8, steps=1000000, layers=2, heads=2, dim=64, seq=32)


def wait_running(c, job_id, min_step=2):
    def check():
        j = c.job(job_id)
        st = pc.job_state(j)
        if st not in ("PENDING", "STARTING", "RUNNING"):
            raise AssertionError("job %s ended %s: %s" % (job_id, st, j.get("reason")))
        return j if st == "RUNNING" and j.get("step", 0) >= min_step else None
    return pc.wait_for(check, 120, "job %s to run %d steps" % (job_id, min_step), 0.3)


def main():
    args = pc.parse_args(sys.argv[1:])
    if pc.rank_missing(args):
        return 77
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="flt")
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data)
    client = lambda d: make_client(args, d)  # noqa: E731
    grpc_c = None
    jobs = []

    def kill_orphans(failed):
        """The ranks a SIGKILLed daemon left (the jobs' own, by /proc)."""
        for job_id in jobs:
            for pid in pc.rank_pids(job_id):
                try:
                    os.kill(pid, signal.SIGKILL)
                except OSError:
                    pass
    cl.on_exit(kill_orphans)
    with cl:
        cl.start(client)
        c = client(cl.daemons[0])
        grpc_c = pc.Grpc(cl.daemons[0], args.proto)

        # 1. watch + cancel
        job_id = c.submit(data, name="it-cancel", **LONG)
        jobs.append(job_id)
        # a second job needing every device waits; cancelling it while
        # PENDING ends it without ever placing it
        wait_running(c, job_id, 1)
        pending = c.submit(data, name="it-pending", **dict(LONG, steps=5))
        jobs.append(pending)
        j = c.job(pending)
        assert pc.job_state(j) == "PENDING", j
        j = c.cancel(pending)
        assert pc.job_state(j) == "CANCELLED" and not j["ranks"], j
        print("pending job %s cancelled before placement" % pending)
        seen_steps, states = [], []
        for ev in grpc_c.watch(job_id, timeout=180):
            states.append(pc.job_state(ev["job"]))
            if "metrics" in ev:
                seen_steps.append(ev["metrics"]["step"])
                if len(seen_steps) == 3:
                    j = c.cancel(job_id)
                    assert pc.job_state(j) == "CANCELLED", j
        assert states[-1] == "CANCELLED", states
        assert seen_steps[:3] == sorted(seen_steps[:3]) and len(seen_steps) >= 3, seen_steps
        t0 = time.time()
        pc.wait_for(lambda: pc.rank_pids(job_id) == [], 10, "ranks of %s to exit" % job_id)
        j = c.job(job_id)
        assert pc.job_state(j) == "CANCELLED" and "cancel" in j.get("reason", ""), j
        print("cancel: CANCELLED after %d streamed steps; ranks gone in %.1f s"
              % (len(seen_steps), time.time() - t0))

        # 2. SIGKILL one rank
        job_id = c.submit(data, name="it-kill", **LONG)
        jobs.append(job_id)
        j = wait_running(c, job_id)
        victim = [r for r in j["ranks"] if r.get("rank", 0) == 2][0]
        assert victim["node"] == cl.daemons[1].name and victim["pid"] > 0, victim
        assert victim["pid"] in pc.rank_pids(job_id), (victim, pc.rank_pids(job_id))
        # watched through the other daemon (it relays the coordinator's state)
        remote = pc.Grpc(cl.daemons[1], args.proto)
        steps, states, t0 = [], [], None
        for ev in remote.watch(job_id, timeout=60):
            states.append(pc.job_state(ev["job"]))
            if "metrics" in ev:
                steps.append(ev["metrics"]["step"])
                if len(steps) == 2:
                    os.kill(victim["pid"], signal.SIGKILL)
                    t0 = time.time()
        assert t0 is not None and states[-1] == "FAILED", states
        assert steps == sorted(steps) and len(set(steps)) == len(steps), steps
        j = pc.wait_state(c, job_id, ("FAILED",), 15)
        reason = j.get("reason", "")
        assert "rank 2" in reason and "signal 9" in reason, reason
        pc.wait_for(lambda: pc.rank_pids(job_id) == [], 10, "other ranks of %s to exit" % job_id)
        print("kill: FAILED (%s); all ranks gone in %.1f s; remote watch saw steps %s then %s"
              % (reason, time.time() - t0, steps[:2], states[-1]))

        # devices were released: a new job can be placed on all four again
        # 3. SIGKILL of the second daemon
        job_id = c.submit(data, name="it-node", **LONG)
        jobs.append(job_id)
        j = wait_running(c, job_id)
        # freeze b's ranks so they outlive their daemon (orphans for step 3b)
        b_ranks = [r["pid"] for r in j["ranks"] if r["node"] == cl.daemons[1].name]
        for pid in b_ranks:
            os.kill(pid, signal.SIGSTOP)
        cl.daemons[1].proc.kill()
        cl.daemons[1].proc.wait()
        t0 = time.time()
        j = pc.wait_state(c, job_id, ("FAILED",), 20)
        reason = j.get("reason", "")
        assert (cl.daemons[1].name + " (rank") in reason and "is dead" in reason, reason
        a_ranks = [r["pid"] for r in j["ranks"] if r["node"] == cl.daemons[0].name]
        pc.wait_for(lambda: not (set(a_ranks) & set(pc.rank_pids(job_id))), 10,
                    "coordinator-side ranks to exit")
        print("node kill: FAILED (%s) after %.1f s" % (reason, time.time() - t0))
        # b's (frozen) ranks outlived their daemon; the restarted b kills them
        left = set(b_ranks) & set(pc.rank_pids(job_id))
        assert left == set(b_ranks), (b_ranks, pc.rank_pids(job_id))
        cl.daemons[1].start()
        gb = pc.Grpc(cl.daemons[1], args.proto)

        def b_up():
            try:
                return gb.nodes()
            except pc.ClientError:
                return None
        pc.wait_for(b_up, 15, "the second daemon to restart")
        pc.wait_for(lambda: not (set(b_ranks) & set(pc.rank_pids(job_id))), 15,
                    "the killed daemon's ranks to be gone after its restart")
        print("restart of the killed daemon: its %d orphaned ranks killed" % len(left))


        # 4. a node daemon that crashes and is back before it counts as dead
        # (systemd Restart=on-failure): its ranks vanish without exit reports;
        # the coordinator notices from the node's device usage and fails the job
        filler = c.submit(data, name="it-filler", **dict(LONG, dp=2, batch=4))
        jobs.append(filler)
        wait_running(c, filler, 1)
        job_id = c.submit(data, name="it-vanish", **dict(LONG, dp=2, batch=4))
        jobs.append(job_id)
        j = wait_running(c, job_id, 1)
        assert all(r["node"] == cl.daemons[1].name for r in j["ranks"]), j["ranks"]
        cl.daemons[1].proc.kill()
        cl.daemons[1].proc.wait()
        cl.daemons[1].start()
        pc.wait_for(b_up, 15, "the second daemon to restart again")
        t0 = time.time()
        j = pc.wait_state(c, job_id, ("FAILED",), 30)
        assert "vanished" in j["reason"] and cl.daemons[1].name in j["reason"], j["reason"]
        assert pc.job_state(c.job(filler)) == "RUNNING", c.job(filler)
        print("crash+restart of a node: FAILED after %.1f s (%s)" % (time.time() - t0,
                                                                    j["reason"]))
        c.cancel(filler)
        pc.wait_for(lambda: pc.rank_pids(filler) == [] and pc.rank_pids(job_id) == [], 15,
                    "all ranks to be gone")
        codes = [d.stop() for d in cl.daemons]
        assert codes == [0, 0], codes
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
