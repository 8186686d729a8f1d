#!/usr/bin/python3
"""Integration (issue 16): ranks tracked by cgroup v2.

Every rank is started through a wrapper (PX_RANK_BIN) that first leaves a
child behind which calls setsid(1) (a new session and process group: the
process-group kill that stopped ranks before cannot reach it), then execs
parallax-rank. While the job runs, each such child is in its rank's cgroup
(/proc/PID/cgroup names parallax-<node>-<key>/<job>.r<rank>). After `pctl cancel`
returns: the job is CANCELLED, no process of the job is left (by /proc, as
ps sees it, and by the daemon's cgroups: none left, or all empty), and
`pctl nodes` shows every device free at once. The daemon's start-up line
says which tracking it uses. Skips (77) where the daemon finds no writable
cgroup v2 hierarchy, saying so: the fallback (process groups) is then what
runs, and the setsid child would survive."""
import os
import stat
import sys
import time
import uuid

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def cgroup_of(pid):
    with open("/proc/%d/cgroup" % pid) as f:
        for line in f:
            if line.startswith("0::"):
                return line[3:].strip()
    return ""


def main():
    args = pc.parse_args(sys.argv[1:])
    if not (args.rank and os.access(args.rank, os.X_OK)):
        print("SKIP: no parallax-rank in this build")
        sys.exit(77)
    marker = "3600.%d" % (uuid.uuid4().int % 1000000)  # `sleep 3600.N`: ours alone
    cl0 = pc.Cluster(args.parallaxd, n=1, devices=2, tag="cg")
    wrapper = os.path.join(cl0.workdir, "rank-wrapper.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n# a child that leaves the rank's process group and session\n"
                "setsid sleep %s </dev/null >/dev/null 2>&1 &\nexec %s \"$@\"\n"
                % (marker, args.rank))
    os.chmod(wrapper, stat.S_IRWXU)
    cl0.env["PX_RANK_BIN"] = wrapper
    for d in cl0.daemons:
        d.env = cl0.env
    client = lambda d: make_client(args, d)  # noqa: E731
    cl = cl0
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)

    def kill_marked(failed):
        """On failure, the wrapper's escaped children (marked) go too."""
        for pid in pc.procs_with_arg(marker) if failed else []:
            os.kill(pid, 9)
    cl.on_exit(kill_marked)
    with cl:
        cl.start(client)
        d0 = cl.daemons[0]
        log = d0.log_tail(200)
        if "tracked by cgroup v2" not in log:
            line = [l for l in log.splitlines() if "process group only" in l]
            assert line, "the daemon did not say how it tracks ranks:\n" + log
            print("SKIP: %s" % line[0])
            cl.stop()
            cl.cleanup()
            sys.exit(77)
        base_line = [l for l in log.splitlines() if "tracked by cgroup v2" in l][0]
        base = base_line.rsplit(" under ", 1)[1].strip()
        print("daemon: %s" % base_line.split(": ", 1)[1])
        c = client(d0)
        job_id = c.submit(data, dp=2, batch=4, steps=100000)
        pc.wait_state(c, job_id, ("RUNNING",), 120)
        kids = pc.wait_for(lambda: len(pc.procs_with_arg(marker)) == 2 and pc.procs_with_arg(marker),
                           30, "both ranks' setsid children")
        for pid in kids:
            with open("/proc/%d/stat" % pid) as f:
                fields = f.read().rsplit(")", 1)[1].split()
            sid = int(fields[3])
            assert sid == pid, "child %d did not start its own session (sid %d)" % (pid, sid)
            cg = cgroup_of(pid)
            assert ("%s/%s.r" % (os.path.basename(base), job_id)) in cg, \
                "setsid child %d is in cgroup %r" % (pid, cg)
        print("running: setsid children %s in cgroups %s" % (
            kids, sorted(cgroup_of(p).rsplit("/", 1)[1] for p in kids)))
        t0 = time.time()
        j = c.cancel(job_id)
        dt = time.time() - t0
        nodes = c.nodes()  # right after cancel returned
        assert pc.job_state(j) == "CANCELLED", j
        left = pc.procs_with_arg(marker) + pc.rank_pids(job_id)
        assert not left, "processes of the job left after cancel: %s" % left
        held = [(n["name"], dv["name"], dv["job_id"]) for n in nodes for dv in n["devices"]
                if dv["job_id"]]
        assert not held, "devices still held right after cancel: %s" % held
        cgs = [e for e in os.listdir(base) if e.startswith(job_id)] if os.path.isdir(base) else []
        for e in cgs:  # (removed once empty; an entry still there must be empty)
            with open(os.path.join(base, e, "cgroup.procs")) as f:
                assert not f.read().strip(), "cgroup %s still has processes" % e
        print("cancel returned in %.2f s: CANCELLED, no process left (ps and cgroup: %d "
              "cgroups left), every device free" % (dt, len(cgs)))
        codes = cl.stop()
        assert codes == [0], codes
    print("PASS")


if __name__ == "__main__":
    main()
