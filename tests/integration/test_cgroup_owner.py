#!/usr/bin/python3
"""Integration: a daemon's cgroups, locks and ranks are its own.

1. Two separate single-daemon clusters on this host with the same node
   name (different state dirs and ports), so the first job of each has the
   same id. A long dp=2 job runs on the first; a short dp=1 job runs to
   COMPLETED on the second. The first job must stay RUNNING with the same
   rank pids (the second daemon's cleanup of "its" rank 0 must not reach
   the first's), and the two daemons' cgroup bases must differ, each
   holding only its own ranks.
2. A second daemon on the first one's state directory (its own runtime dir
   and ports) refuses to start, naming the first: its pid, state directory
   and listen address. The first's job is untouched.
3. A clean stop (SIGTERM) leaves no cgroup of the daemon behind (also
   checked for every test by pxcluster at each daemon's stop).
4. The cgroup base itself: held (flock) by a live owner that is not a
   daemon of this state dir, a daemon refuses to start naming that owner
   (from the base's user.parallax.owner xattr); once the owner is gone (lock
   released: a dead daemon) the next start takes the base over.
5. A daemon SIGKILLed while its job runs leaves its ranks running; another
   daemon with the same node name starting meanwhile leaves them alone (they
   carry the first one's state dir, not its), and the first one's restart
   adopts them.
6. A cgroup under the base that the daemon did not make is left alone at
   its stop, and pxcluster's stop check fails on it (then removes it).
7. A daemon and its ranks SIGKILLed, the ranks' children that left their
   process group (setsid) live on in the rank cgroups; the daemon's restart
   kills them (the job, not adoptable, is FAILED).

Skips (77) where the daemon finds no writable cgroup v2 hierarchy."""
import fcntl
import os
import stat
import subprocess
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def cgroup_of(pid):
    try:
        with open("/proc/%d/cgroup" % pid) as f:
            for line in f:
                if line.startswith("0::"):
                    return line[3:].strip()
    except OSError:
        pass
    return ""


def run_refused(d, timeout=20):
    """Starts daemon `d`, which must exit by itself (non-zero) within
    `timeout` s; returns (exit code, its log since the start)."""
    d.start()
    try:
        rc = d.proc.wait(timeout)
    except subprocess.TimeoutExpired:
        d.proc.kill()
        d.proc.wait()
        raise AssertionError("%s did not refuse to start:\n%s" % (d.name, d.log_since_start()))
    return rc, d.log_since_start()


def main():
    args = pc.parse_args(sys.argv[1:])
    if not (args.rank and os.access(args.rank, os.X_OK)):
        print("SKIP: no parallax-rank in this build")
        sys.exit(77)
    client = lambda d: make_client(args, d)  # noqa: E731
    # same tag in one process: the same node name in both clusters
    cl1 = pc.Cluster(args.parallaxd, n=1, devices=2, tag="own")
    cl2 = pc.Cluster(args.parallaxd, n=1, devices=1, tag="own")
    d1, d2 = cl1.daemons[0], cl2.daemons[0]
    assert d1.name == d2.name and d1.state_dir != d2.state_dir, (d1.state_dir, d2.state_dir)
    data = os.path.join(cl1.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    extra = []  # daemons started here beside the clusters, stopped on failure
    extra_pids = []  # markers of processes started here, killed on failure
    try:
        cl1.start(client)
        if not d1.cgroup_base():
            print("SKIP: %s" % [l for l in d1.log_since_start().splitlines()
                                if "process group only" in l][:1])
            cl1.stop()
            cl1.cleanup()
            sys.exit(77)
        cl2.start(client)
        b1, b2 = d1.cgroup_base(), d2.cgroup_base()
        print("node %s twice: cgroup bases %s and %s" % (d1.name, b1, b2))

        # 1. the same job id on both; the second's ends, the first's goes on
        c1, c2 = client(d1), client(d2)
        job1 = c1.submit(data, dp=2, batch=4, steps=100000)
        pc.wait_state(c1, job1, ("RUNNING",), 120)
        pids1 = pc.wait_for(lambda: len(pc.rank_pids(job1)) == 2 and sorted(pc.rank_pids(job1)),
                            30, "both ranks of %s" % job1)
        job2 = c2.submit(data, dp=1, batch=4, steps=3)
        assert job2 == job1, "the two first jobs have different ids (%s, %s): no test" % (job1,
                                                                                           job2)
        j2 = pc.wait_state(c2, job2, ("COMPLETED", "FAILED"), 120)
        assert pc.job_state(j2) == "COMPLETED", j2
        time.sleep(1.0)  # the second daemon's cleanup after its rank's exit is done
        j1 = c1.job(job1)
        assert pc.job_state(j1) == "RUNNING", \
            "job %s on the first daemon is %s after the second's %s completed: %s" % (
                job1, pc.job_state(j1), job2, j1.get("reason"))
        for pid in pids1:
            assert os.path.exists("/proc/%d" % pid), "rank pid %d of the first daemon died" % pid
            cg = cgroup_of(pid)
            assert cg and b1.endswith(cg.rsplit("/", 1)[0]), \
                "rank pid %d is in cgroup %s, not under %s" % (pid, cg, b1)
        assert b1 != b2, "both daemons track ranks in %s" % b1
        print("1. same name, same job id %s: the second's completed, the first's still RUNNING "
              "(ranks %s alive, under %s)" % (job1, pids1, os.path.basename(b1)))

        # 2. a second daemon on the first one's state dir refuses, naming it
        intruder = pc.Daemon(args.parallaxd, d1.name, cl2.workdir, 1, cl1.env)
        intruder.state_dir = d1.state_dir
        intruder.runtime_dir = os.path.join(cl2.workdir, "intruder-run")
        intruder.log_path = os.path.join(cl2.workdir, "intruder.log")
        extra.append(intruder)
        rc, log = run_refused(intruder)
        assert rc != 0, "second daemon on %s exited %d" % (d1.state_dir, rc)
        want = ["in use by another parallaxd", "pid %d" % d1.proc.pid,
                os.path.realpath(d1.state_dir), d1.control]
        missing = [w for w in want if w not in log]
        assert not missing, "refusal does not name %s:\n%s" % (missing, log)
        line = [l for l in log.splitlines() if "in use by another parallaxd" in l][0]
        assert pc.job_state(c1.job(job1)) == "RUNNING" and sorted(pc.rank_pids(job1)) == pids1
        print("2. second daemon on the same state dir refused (exit %d): %s" % (
            rc, line.split(": ", 1)[-1]))

        c1.cancel(job1)
        codes = cl1.stop() + cl2.stop()  # pxcluster: fails if a base is left behind
        assert codes == [0, 0], codes
        for b in (b1, b2):
            assert not os.path.exists(b), "cgroup %s left after a clean stop" % b
        print("3. clean stops (exit 0) removed %s and %s" % (os.path.basename(b1),
                                                             os.path.basename(b2)))

        # 4. the cgroup base held by a live owner, then by a dead one
        os.mkdir(b1)
        owner = "pid %d, state dir /elsewhere/state, listen 127.0.0.1:1, peer 127.0.0.1:2" % (
            os.getpid())
        os.setxattr(b1, "user.parallax.owner", owner.encode())
        fd = os.open(b1, os.O_RDONLY | os.O_DIRECTORY)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            rc, log = run_refused(d1)
        finally:
            os.close(fd)  # the owner "dies": its lock goes
        assert rc != 0, rc
        assert "belongs to another running parallaxd" in log and owner in log, \
            "refusal does not name the base's owner:\n" + log
        print("4. base held by a live owner: refused (exit %d) naming it (%s)" % (rc, owner))
        cl1.start(client)
        assert d1.cgroup_base() == b1, (d1.cgroup_base(), b1)
        assert os.getxattr(b1, "user.parallax.owner").decode().startswith(
            "pid %d," % d1.proc.pid), os.getxattr(b1, "user.parallax.owner")
        codes = cl1.stop()
        assert codes == [0], codes
        assert not os.path.exists(b1), "cgroup %s left after a clean stop" % b1
        print("4. owner gone: the next daemon took %s over, and removed it at its stop"
              % os.path.basename(b1))

        # 5. the ranks a crashed daemon left running are its own to adopt:
        # another daemon of the same node name starting meanwhile leaves them
        cl1.start(client)
        c1 = client(d1)
        job3 = c1.submit(data, dp=2, batch=4, steps=100000)
        pc.wait_state(c1, job3, ("RUNNING",), 120)
        pids3 = pc.wait_for(lambda: len(pc.rank_pids(job3)) == 2 and sorted(pc.rank_pids(job3)),
                            30, "both ranks of %s" % job3)
        d1.proc.kill()
        d1.proc.wait()
        cl2.start(client)  # its start-up looks for orphan ranks of node d1.name
        gone = [p for p in pids3 if p not in pc.rank_pids(job3)]
        assert not gone, "ranks %s of %s (its daemon crashed) were killed when another daemon " \
            "named %s started:\n%s" % (gone, job3, d2.name, d2.log_since_start())
        codes = cl2.stop()
        assert codes == [0], codes
        cl1.start(client)
        c1 = client(d1)
        j3 = c1.job(job3)
        assert pc.job_state(j3) == "RUNNING" and "adopted" in d1.log_since_start(), \
            "%s after its daemon's restart: %s (%s)" % (job3, pc.job_state(j3), j3.get("reason"))
        assert sorted(pc.rank_pids(job3)) == pids3, (pc.rank_pids(job3), pids3)
        print("5. %s's ranks %s outlived its daemon's crash and another %s's start; its "
              "restart adopted them" % (job3, pids3, d2.name))
        c1.cancel(job3)
        codes = cl1.stop()
        assert codes == [0], codes
        assert not os.path.exists(b1), "cgroup %s left after a clean stop" % b1

        # 6. a cgroup under its base that the daemon did not make (no mark of
        # its state dir) is not its to remove; pxcluster's stop check then
        # fails on what was left behind, and removes it
        cl1.start(client)
        foreign = os.path.join(b1, "foreign.r0")
        os.mkdir(foreign)
        caught = None
        try:
            cl1.stop()
        except AssertionError as e:
            caught = str(e)
        assert caught and "left cgroup(s) behind" in caught and foreign in caught, caught
        assert not os.path.exists(b1), "pxcluster did not remove %s" % b1
        print("6. a foreign cgroup under the base was left alone by the daemon; the stop check "
              "failed on it: %s" % caught)

        # 7. what a crashed daemon's dead rank left in its cgroup (a child
        # that left the rank's process group) goes when that daemon restarts
        marker = "3600.%d" % (uuid.uuid4().int % 1000000)  # `sleep 3600.N`: ours alone
        wrapper = os.path.join(cl1.workdir, "rank-wrapper.sh")
        with open(wrapper, "w") as f:
            f.write("#!/bin/sh\nsetsid sleep %s </dev/null >/dev/null 2>&1 &\nexec %s \"$@\"\n"
                    % (marker, args.rank))
        os.chmod(wrapper, stat.S_IRWXU)
        cl1.env["PX_RANK_BIN"] = wrapper
        extra_pids.append(marker)
        cl1.start(client)
        c1 = client(d1)
        job4 = c1.submit(data, dp=2, batch=4, steps=100000)
        pc.wait_state(c1, job4, ("RUNNING",), 120)
        kids = pc.wait_for(lambda: len(pc.procs_with_arg(marker)) == 2 and pc.procs_with_arg(marker),
                           30, "both ranks' setsid children")
        d1.proc.kill()
        d1.proc.wait()
        for pid in pc.rank_pids(job4):
            os.kill(pid, 9)
        pc.wait_for(lambda: not pc.rank_pids(job4), 10, "the ranks of %s to die" % job4)
        assert sorted(pc.procs_with_arg(marker)) == sorted(kids), (pc.procs_with_arg(marker), kids)
        cl1.start(client)
        j4 = client(d1).job(job4)
        assert pc.job_state(j4) == "FAILED", j4
        left = pc.procs_with_arg(marker)
        assert not left, "setsid children %s of %s's dead ranks outlived their daemon's " \
            "restart (cgroups %s)" % (left, job4, [cgroup_of(p) for p in left])
        codes = cl1.stop()
        assert codes == [0], codes
        print("7. %s: daemon and ranks SIGKILLed, the ranks' setsid children %s killed by the "
              "daemon's restart (job FAILED: %s)" % (job4, kids, j4.get("reason")))
    except BaseException:
        print(cl1.logs())
        print(cl2.logs())
        for d in extra:
            print("---- %s (extra)\n%s" % (d.name, d.log_tail()))
        for d in extra + cl1.daemons + cl2.daemons:
            try:
                d.stop()
            except AssertionError as e:
                print(e)
        for marker in extra_pids:
            for pid in pc.procs_with_arg(marker):
                os.kill(pid, 9)
        raise
    cl1.cleanup()
    cl2.cleanup()
    print("PASS")


if __name__ == "__main__":
    main()
