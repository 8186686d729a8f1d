#!/usr/bin/python3
"""Integration (regression): a daemon whose binary was replaced under it
(a package upgrade while the service runs, before systemd restarts it)
still launches ranks.

Ranks start through the daemon's own binary (the cgroup trampoline,
`parallaxd --exec-in-cgroup`). The daemon exec'd the path /proc/self/exe
links to; once the file is replaced that path is "... (deleted)", and every
job failed at launch ("spawn of parallax-rank failed: no such file or
directory") until the daemon restarted. Here a copy of parallaxd runs, the
copy is replaced by a new file (as dpkg does: a new inode renamed over the
path), and a dp=2 job must complete; then the copy is removed outright and
a second job must complete too."""
import os
import shutil
import sys
import tempfile

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    if pc.rank_missing(args):
        return 77
    bindir = tempfile.mkdtemp(prefix="px-upgrade-bin-")
    exe = os.path.join(bindir, "parallaxd")
    shutil.copy2(args.parallaxd, exe)
    cl = pc.Cluster(exe, n=1, devices=2, tag="upgrade")
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)  # not beside the copy
    a = cl.daemons[0]
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data)
    try:
        with cl:
            a.start()
            c = make_client(args, a)
            pc.wait_for(lambda: "ready:" in a.log_since_start(), 30, "the daemon to start")
            pc.wait_for(lambda: c.nodes(), 15, "the daemon to answer")
            for what in ("replaced", "removed"):
                if what == "replaced":
                    shutil.copy2(args.parallaxd, exe + ".dpkg-new")
                    os.replace(exe + ".dpkg-new", exe)
                else:
                    os.unlink(exe)
                job = c.submit(data, dp=2, batch=8, steps=3, layers=1, heads=2, dim=16, seq=16)
                j = pc.wait_state(c, job, ("COMPLETED", "FAILED", "CANCELLED"), 120)
                assert pc.job_state(j) == "COMPLETED", (
                    "with the daemon's binary %s under it: %s %s" % (what, pc.job_state(j),
                                                                     j.get("reason")))
                print("binary %s under the running daemon: job %s COMPLETED" % (what, job))
            codes = cl.stop()
            assert codes == [0], codes
    finally:
        shutil.rmtree(bindir, True)
    print("PASS")


if __name__ == "__main__":
    sys.exit(main())
