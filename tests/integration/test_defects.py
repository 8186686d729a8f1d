#!/usr/bin/python3
"""Integration: the defects issue 16 found when the project was tried as a
new user would, each a check that failed before its fix.

  socket race   two daemons started at the same instant on one runtime
                directory (different state directories): exactly one
                serves, the other exits non-zero naming the socket (five
                tries; before the fix both reported ready on one socket)

Needs no parallax-rank unless said."""
import os
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def check_socket_race(args, cl):
    for attempt in range(5):
        ds = [pc.Daemon(args.parallaxd, "%srace%d%c" % (cl.daemons[0].name, attempt, c),
                        cl.workdir, 1, cl.env) for c in "ab"]
        shared = os.path.join(cl.workdir, "race%d-run" % attempt)
        for d in ds:
            d.runtime_dir = shared
        procs = [subprocess.Popen(d.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                  env=cl.env) for d in ds]
        try:
            # the loser exits at start; the winner keeps serving
            end = time.time() + 20
            while time.time() < end and all(p.poll() is None for p in procs):
                time.sleep(0.1)
            time.sleep(1.0)  # a second loser would have exited by now too
            codes = [p.poll() for p in procs]
            alive = [i for i, c in enumerate(codes) if c is None]
            assert len(alive) == 1, "attempt %d: %d daemons serve %s/control.sock (exit codes " \
                "%s)" % (attempt, len(alive), shared, codes)
            loser = procs[1 - alive[0]]
            out = loser.stdout.read().decode(errors="replace")
            assert loser.returncode != 0 and "control.sock" in out and "in use" in out, out
            if attempt == 0:
                print("socket race: one daemon serves, the other exits %d: %s" % (
                    loser.returncode, [l for l in out.splitlines() if "ERROR" in l][-1]))
        finally:
            for p in procs:
                if p.poll() is None:
                    p.terminate()
                    p.wait(20)
                p.stdout.close()


def main():
    args = pc.parse_args(sys.argv[1:])
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="dfx")
    client = lambda d: make_client(args, d)  # noqa: E731
    try:
        cl.start(client)
        check_socket_race(args, cl)
        codes = cl.stop()
        assert codes == [0, 0], codes
    except BaseException:
        print(cl.logs())
        cl.stop()
        raise
    cl.cleanup()
    print("PASS")


if __name__ == "__main__":
    main()
