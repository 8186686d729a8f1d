#!/usr/bin/python3
"""Integration: the failures an operator judges parallaxd by, on two real
daemons (2 CPU devices each, heartbeat 200 ms, peer timeout 3 s).

1. Cancel during rendezvous: the ranks (a wrapper that starts a child
   ignoring SIGTERM, then waits before exec'ing parallax-rank) never
   register; CancelJob -> CANCELLED within 2 s, and no process of any
   rank's process group is left once the kill grace has passed; devices
   free on both nodes.
2. SIGKILL of rank 2 (second node) of a running dp=4 job -> FAILED within
   15 s with a reason naming rank 2, its node and signal 9; no process of
   the job left on either node; every device free.
3. SIGSTOP of the second daemon -> the coordinator marks it down once
   its probes go unanswered and the suspicion ends (membership.c, not
   before max(2T, peer-dead-ms - 3T)) and fails its job naming the node; after SIGCONT the job stays FAILED and the node's
   ranks are stopped (no resurrection).
4. kill -9 of the coordinator mid-job and a restart (its ranks keep
   running, as under the unit's KillMode=process) -> the restarted daemon
   adopts the job: it stays RUNNING and COMPLETES (the adopted ranks are
   watched through pidfds; steps reported while the daemon was down are
   not recorded); history is intact (the
   earlier jobs keep their final states and reasons, the job its steps
   from before the crash); no rank left, devices free.
5. kill -9 of the coordinator, its local ranks killed while it is down,
   restart -> the job cannot be adopted and is FAILED with a reason saying
   so; the other node's ranks of it are stopped (the coordinator sees them
   in its heartbeats and sends StopRanks).
6. A second SubmitJob with the name of an active job -> ALREADY_EXISTS.
7. max_restarts: a job checkpointing every few steps loses a rank
   (SIGKILL) -> FAILED naming its restart; the restart (a new id, spec
   restart 1, restarted_from the old id) resumes from the newest complete
   checkpoint (its first step is the checkpoint's + 1) and COMPLETES.
Exit 77 (skipped) when parallax-rank was not built."""
import os
import signal
import stat
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

RUN = dict(dp=4, batch=8, steps=1000000, layers=2, heads=2, dim=64, seq=32)


def group_pids(pgids):
    """Live (non-zombie) processes whose process group is one of `pgids`."""
    out = []
    for d in os.listdir("/proc"):
        if not d.isdigit():
            continue
        try:
            with open("/proc/%s/stat" % d) as f:
                fields = f.read().rsplit(")", 1)[1].split()
        except OSError:
            continue
        if fields[0] != "Z" and int(fields[2]) in pgids:
            out.append(int(d))
    return out


def all_devices_free(c):
    nodes = c.nodes()
    return all(not dv.get("job_id") for n in nodes for dv in n.get("devices", [])) and nodes


def wait_running(c, job_id, min_step=1):
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
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="prod")
    slow_flag = os.path.join(cl.workdir, "slow")
    wrapdir = os.path.join(cl.workdir, "bin")
    os.makedirs(wrapdir)
    wrapper = os.path.join(wrapdir, "parallax-rank")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n"
                "if [ -e '%s' ]; then\n"
                "  (trap '' TERM; exec sleep 120) &\n"   # a child that ignores SIGTERM
                "  sleep 120\n"
                "fi\n"
                "exec '%s' \"$@\"\n" % (slow_flag, os.path.abspath(args.rank)))
    os.chmod(wrapper, os.stat(wrapper).st_mode | stat.S_IXUSR)
    cl.env["PX_RANK_BIN"] = wrapper
    for d in cl.daemons:
        d.env = cl.env
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=60000)
    a, b = cl.daemons
    pgids = set()

    def release(failed):
        """A daemon the test stopped (SIGSTOP) continues, so it can stop; the
        ranks of the process groups the test watched go."""
        for d in cl.daemons:
            if d.alive():
                d.proc.send_signal(signal.SIGCONT)
        for pid in group_pids(pgids):
            try:
                os.kill(pid, signal.SIGKILL)
            except OSError:
                pass
    cl.on_exit(release)
    with cl:
        cl.start(lambda d: pc.Grpc(d, args.proto))
        c = pc.Grpc(a, args.proto)

        # 1. cancel during rendezvous
        open(slow_flag, "w").close()
        job_id = c.submit(data, name="prod-rdv", **RUN)

        def spawned():
            j = c.job(job_id)
            assert pc.job_state(j) in ("PENDING", "STARTING"), j
            pids = [r["pid"] for r in j["ranks"]]
            return j if len(pids) == 4 and all(pids) and len(group_pids(set(pids))) >= 8 else None
        j = pc.wait_for(spawned, 20, "4 wrapper ranks and their children")
        assert pc.job_state(j) == "STARTING", j
        groups = set(r["pid"] for r in j["ranks"])
        pgids |= groups
        t0 = time.time()
        j = c.cancel(job_id)
        pc.wait_state(c, job_id, ("CANCELLED",), 2, "CANCELLED within 2 s of CancelJob")
        dt = time.time() - t0
        pc.wait_for(lambda: not group_pids(groups), 2 + 5, "every process of the ranks to go")
        gone = time.time() - t0
        pc.wait_for(lambda: all_devices_free(c), 5, "devices free after the cancel")
        os.unlink(slow_flag)
        print("cancel in rendezvous: CANCELLED in %.2f s; all %d rank process groups "
              "(incl. a SIGTERM-ignoring child) gone in %.1f s; devices free"
              % (dt, len(groups), gone))

        # 2. SIGKILL one rank
        job_id = c.submit(data, name="prod-kill", **RUN)
        j = wait_running(c, job_id)
        groups = set(r["pid"] for r in j["ranks"])
        pgids |= groups
        victim = [r for r in j["ranks"] if r.get("rank", 0) == 2][0]
        assert victim["node"] == b.name, victim
        # 6. duplicate name while active
        try:
            c.submit(data, name="prod-kill", **RUN)
            raise AssertionError("a second active job named prod-kill was accepted")
        except pc.ClientError as e:
            assert "ALREADY_EXISTS" in str(e) and job_id in str(e), str(e)
            print("duplicate --name: %s" % e)
        # without --name a job is named after its id: never a duplicate (pctl
        # sends no name of its own making)
        if args.pctl and os.access(args.pctl, os.X_OK):
            from pxpctl import Pctl
            uc = Pctl(args.pctl, a)
            others = [uc.submit(data, **RUN) for _ in range(2)]
            for o in others:
                assert c.job(o)["spec"]["name"] == o, c.job(o)
                c.cancel(o)
            print("two unnamed pctl jobs on the same data accepted, named %s" % others)
        os.kill(victim["pid"], signal.SIGKILL)
        t0 = time.time()
        j = pc.wait_state(c, job_id, ("FAILED",), 15)
        reason = j["reason"]
        assert "rank 2" in reason and b.name in reason and "signal 9" in reason, reason
        pc.wait_for(lambda: not group_pids(groups), 15 - (time.time() - t0),
                    "no process of the job left")
        pc.wait_for(lambda: all_devices_free(c), 15 - (time.time() - t0), "devices free")
        print("rank SIGKILL: FAILED (%s); processes gone and devices free %.1f s after the kill"
              % (reason, time.time() - t0))

        # 3. SIGSTOP the second daemon
        job_id = c.submit(data, name="prod-stop", **RUN)
        j = wait_running(c, job_id)
        groups = set(r["pid"] for r in j["ranks"])
        pgids |= groups
        b_groups = set(r["pid"] for r in j["ranks"] if r["node"] == b.name)
        b.proc.send_signal(signal.SIGSTOP)
        t0 = time.time()
        try:
            j = pc.wait_state(c, job_id, ("FAILED",), 3 + 10)
            down = time.time() - t0
            assert (b.name + " (rank") in j["reason"] and "is dead" in j["reason"], j["reason"]
            # not before its suspicion could end: max(2T, peer-dead-ms - 3T) after the
            # first unanswered probe, which ends after the stop (less 0.1 s: t0 is
            # taken after the signal was sent)
            hb, dead = int(cl.env["PX_HEARTBEAT_MS"]), int(cl.env["PX_PEER_DEAD_MS"])
            suspicion = max(2 * hb, dead - 3 * hb) / 1000.0
            assert down >= suspicion - 0.1, ("failed after %.2f s, before the %.1f s "
                                             "suspicion could end" % (down, suspicion))
            nb = [n for n in c.nodes() if n["name"] == b.name]
            assert nb and not nb[0].get("alive"), nb
        finally:
            b.proc.send_signal(signal.SIGCONT)
        pc.wait_for(lambda: not group_pids(b_groups), 15,
                    "the stopped node's ranks to be stopped after SIGCONT")
        pc.wait_for(lambda: not group_pids(groups), 10, "no process of the job left")
        time.sleep(1.0)
        j = c.job(job_id)
        assert pc.job_state(j) == "FAILED", j
        gb = pc.Grpc(b, args.proto)
        assert pc.job_state(gb.job(job_id)) == "FAILED"
        pc.wait_for(lambda: [n for n in c.nodes() if n["name"] == b.name and n.get("alive")],
                    10, "the second node to be back")
        print("daemon SIGSTOP: marked down, job FAILED after %.1f s (%s); after SIGCONT "
              "its ranks were stopped and the job stayed FAILED" % (down, j["reason"]))

        # 4. kill -9 of the coordinator mid-job, then restart
        # ListJobs lists the cluster; compare the jobs a coordinates (b may
        # not be heard of yet right after a's restart)
        before = {x["id"]: (pc.job_state(x), x.get("reason", "")) for x in c.jobs()
                  if x.get("coordinator") == a.name}
        steps = 600
        job_id = c.submit(data, name="prod-crash", **dict(RUN, steps=steps))
        j = wait_running(c, job_id, 2)
        groups = set(r["pid"] for r in j["ranks"])
        pgids |= groups
        steps_before = [m["step"] for m in c.metrics(job_id)]
        assert steps_before, "no metrics recorded before the crash"
        a.proc.kill()
        a.proc.wait()
        t0 = time.time()
        a.start()

        def a_up():
            try:
                return c.nodes()
            except pc.ClientError:
                return None
        pc.wait_for(a_up, 15, "the coordinator to restart")
        j = c.job(job_id)
        assert pc.job_state(j) == "RUNNING", j
        assert steps_before[-1] < steps, "job finished before the crash: use more steps"
        j = pc.wait_state(c, job_id, ("FAILED", "COMPLETED", "CANCELLED"), 180)
        assert pc.job_state(j) == "COMPLETED", j
        after = {x["id"]: (pc.job_state(x), x.get("reason", "")) for x in c.jobs()
                  if x.get("coordinator") == a.name}
        for k, v in before.items():
            assert after.get(k) == v, (k, v, after.get(k))
        steps_after = [m["step"] for m in c.metrics(job_id)]
        assert steps_after[:len(steps_before)] == steps_before, (steps_before, steps_after)
        pc.wait_for(lambda: not group_pids(groups), 20, "no rank of the crashed job left")
        pc.wait_for(lambda: all_devices_free(c), 10, "devices free after the restart")
        print("coordinator kill -9 at step %d + restart: job %s adopted, COMPLETED (%d "
              "steps) %.1f s later; %d earlier jobs and %d recorded steps intact; no rank left"
              % (steps_before[-1], job_id, steps, time.time() - t0, len(before),
                 len(steps_before)))

        # 5. kill -9 of the coordinator and of its ranks, restart
        job_id = c.submit(data, name="prod-crash2", **RUN)
        j = wait_running(c, job_id, 2)
        groups = set(r["pid"] for r in j["ranks"])
        pgids |= groups
        a.proc.kill()
        a.proc.wait()
        for r in j["ranks"]:
            if r["node"] == a.name:
                os.kill(r["pid"], signal.SIGKILL)
        t0 = time.time()
        a.start()
        pc.wait_for(a_up, 15, "the coordinator to restart")
        j = pc.wait_state(c, job_id, ("FAILED",), 10)
        assert "restarted" in j["reason"], j["reason"]
        pc.wait_for(lambda: not group_pids(groups), 20, "the other node's ranks to be stopped")
        pc.wait_for(lambda: all_devices_free(c), 10, "devices free")
        print("coordinator and its ranks killed, restart: FAILED (%s); the other node's ranks "
              "stopped %.1f s after the restart" % (j["reason"], time.time() - t0))

        # 7. restarts from the newest checkpoint
        ckdir = os.path.join(cl.workdir, "ckpt")
        job_id = c.submit(data, name="prod-restart", checkpoint_every=5, checkpoint_dir=ckdir,
                          max_restarts=1, **dict(RUN, steps=60))

        def checkpointed():
            j = c.job(job_id)
            assert pc.job_state(j) in ("PENDING", "STARTING", "RUNNING"), j
            done = [n for n in (os.listdir(ckdir) if os.path.isdir(ckdir) else [])
                    if os.path.exists(os.path.join(ckdir, n, "meta.json"))]
            return j if done and pc.job_state(j) == "RUNNING" else None
        j = pc.wait_for(checkpointed, 60, "a complete checkpoint of %s" % job_id, 0.1)
        pgids |= set(r["pid"] for r in j["ranks"])
        os.kill([r for r in j["ranks"] if r["rank"] == 1][0]["pid"], signal.SIGKILL)
        j = pc.wait_state(c, job_id, ("FAILED", "COMPLETED"), 15)
        assert pc.job_state(j) == "FAILED" and "restarted as" in j["reason"], j
        new_id = j["reason"].split("restarted as ")[1].split()[0]
        n = c.job(new_id)
        assert n["spec"]["restart"] == 1 and n["spec"]["restarted_from"] == job_id, n["spec"]
        assert n["spec"]["resume_dir"].startswith(ckdir + "/step_"), n["spec"]
        n = pc.wait_state(c, new_id, ("FAILED", "COMPLETED", "CANCELLED"), 180)
        assert pc.job_state(n) == "COMPLETED" and n["step"] == 60, n
        first = c.metrics(new_id)[0]["step"]
        ck_step = int(n["spec"]["resume_dir"].rsplit("step_", 1)[1])
        assert first == ck_step + 1, (first, ck_step)
        print("max_restarts: %s FAILED (%s); %s resumed at step %d and COMPLETED"
              % (job_id, j["reason"], new_id, first))

        codes = cl.stop()
        assert codes == [0, 0], codes
    return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
