#!/usr/bin/python3
"""Integration (issue 16): a job reads FAILED only once its launched ranks
have exited on every node, and `pctl logs` shows a rank's control bytes
escaped on a terminal.

Two daemons, a dp=4 job (two ranks on each node). Every rank is started
through a wrapper (PX_RANK_BIN) that ignores SIGTERM, prints terminal
escapes (clear screen, a window title), runs parallax-rank and then goes on
sleeping, so a rank's process outlives its parallax-rank (which exits by
itself once its peer is gone) until the daemon's SIGKILL after
PX_KILL_GRACE_MS. Rank 3's process (on the second node) is killed with
SIGKILL: the job must fail naming it, and at the first moment GetJob reads
FAILED no process of the job may be left and every device of both nodes
must be free (before the fix the job read FAILED when the stop signals
went out, while ranks 0-2 still ran for the kill grace). Then `pctl logs` under a pseudo-terminal prints the
escapes as \\x1b and none raw; into a pipe it prints the log byte for byte."""
import os
import pty
import signal
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402

ESCAPES = "\\033[2J\\033]0;pwned\\007"  # as printf(1) reads them


def rank_pid_map(job_id):
    """{rank: pid} of the live parallax-rank processes of job_id."""
    out = {}
    for pid in pc.rank_pids(job_id):
        try:
            with open("/proc/%d/cmdline" % pid, "rb") as f:
                argv = f.read().split(b"\0")
        except OSError:
            continue
        if b"--rank" in argv:
            out[int(argv[argv.index(b"--rank") + 1])] = pid
    return out


def parent_of(pid):
    with open("/proc/%d/stat" % pid) as f:
        return int(f.read().rsplit(")", 1)[1].split()[1])


def alive(pid):
    try:
        with open("/proc/%d/stat" % pid) as f:
            return f.read().rsplit(")", 1)[1].split()[0] != "Z"
    except OSError:
        return False


def logs_on_tty(pctl, server, job_id, rank):
    """Output of `pctl logs` with a pseudo-terminal as its stdout."""
    master, slave = pty.openpty()
    p = subprocess.Popen([pctl, "--server", server, "logs", job_id, "--rank", str(rank)],
                         stdout=slave, stderr=subprocess.PIPE)
    os.close(slave)
    chunks = []
    while True:
        try:
            b = os.read(master, 65536)
        except OSError:  # EIO: the child closed the terminal
            break
        if not b:
            break
        chunks.append(b)
    os.close(master)
    assert p.wait(30) == 0, p.stderr.read()
    return b"".join(chunks)


def main():
    args = pc.parse_args(sys.argv[1:])
    if not (args.rank and os.access(args.rank, os.X_OK)):
        print("SKIP: no parallax-rank in this build")
        sys.exit(77)
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="end")
    wrapper = os.path.join(cl.workdir, "rank-wrapper.sh")
    with open(wrapper, "w") as f:
        f.write("#!/bin/sh\n# a rank that ignores SIGTERM and writes terminal escapes\n"
                "trap '' TERM\nprintf '%s'\n%s \"$@\"\nexec sleep 3600\n" % (ESCAPES, args.rank))
    os.chmod(wrapper, stat.S_IRWXU)
    cl.env["PX_RANK_BIN"] = wrapper
    for d in cl.daemons:
        d.env = cl.env
    client = lambda d: make_client(args, d)  # noqa: E731
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    with cl:
        cl.start(client)
        d0 = cl.daemons[0]
        c = client(d0)
        job_id = c.submit(data, dp=4, batch=4, steps=100000)
        pc.wait_state(c, job_id, ("RUNNING",), 120)
        pids = pc.wait_for(lambda: len(rank_pid_map(job_id)) == 4 and rank_pid_map(job_id),
                           30, "the job's 4 ranks")
        j = c.job(job_id)
        node3 = [r["node"] for r in j["ranks"] if r.get("rank", 0) == 3][0]
        procs = {r: parent_of(p) for r, p in pids.items()}  # what the daemons supervise
        t0 = time.time()
        os.kill(procs[3], signal.SIGKILL)
        deadline = t0 + 60
        while True:
            j = c.job(job_id)
            if pc.job_state(j) != "RUNNING" or time.time() > deadline:
                break
        dt = time.time() - t0
        left = pc.rank_pids(job_id) + [p for p in procs.values() if alive(p)]  # at once
        nodes = c.nodes()
        assert pc.job_state(j) == "FAILED", j
        assert "rank 3" in j.get("reason", "") and node3 in j["reason"], j["reason"]
        assert not left, "ranks of the job still running when it read FAILED: %s" % left
        held = [(n["name"], dv["name"]) for n in nodes for dv in n["devices"] if dv["job_id"]]
        assert not held, "devices still held when the job read FAILED: %s" % held
        grace = int(cl.env["PX_KILL_GRACE_MS"]) / 1000.0
        assert dt >= grace, "FAILED %.2f s after the kill, before the kill grace %.1f s: the " \
            "ranks ignoring SIGTERM cannot have gone" % (dt, grace)
        print("rank 3 killed: FAILED after %.2f s (kill grace %.1f s), no rank left, every "
              "device free; reason: %s" % (dt, grace, j["reason"]))

        if args.pctl and os.access(args.pctl, os.X_OK):
            raw = subprocess.run([args.pctl, "--server", d0.control, "logs", job_id, "--rank",
                                  "0"], stdout=subprocess.PIPE, check=True).stdout
            assert b"\x1b[2J" in raw and b"\x1b]0;pwned\x07" in raw, raw[:200]
            shown = logs_on_tty(args.pctl, d0.control, job_id, 0)
            assert b"\x1b" not in shown and b"\x07" not in shown, shown[:200]
            assert b"\\x1b[2J\\x1b]0;pwned\\x07" in shown, shown[:200]
            assert shown.count(b"\n") == raw.count(b"\n"), "lines changed on the terminal"
            print("pctl logs: escapes raw into a pipe, shown as \\x1b on a terminal (%d lines)"
                  % raw.count(b"\n"))
        codes = cl.stop()
        assert codes == [0, 0], codes
    print("PASS")


if __name__ == "__main__":
    main()
