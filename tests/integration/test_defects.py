#!/usr/bin/python3
"""Integration: the defects issue 16 found when the project was tried as a
new user would, each a check that failed before its fix.

  socket race   two daemons started at the same instant on one runtime
                directory (different state directories): exactly one
                serves, the other exits non-zero naming the socket (five
                tries; before the fix both reported ready on one socket)
  names         a name with a newline and terminal escapes (clear screen,
                retitle) is INVALID_ARGUMENT at the daemon (gRPC) naming the
                byte, and at pctl submit (non-zero exit, before any call);
                a job whose data path holds escapes (a file name may) is
                shown by pctl status / list / submit errors with every
                control byte escaped (\x1b), none raw (needs parallax-rank)
  memory        --seq 100000 on a 2-layer dim-64 model (40 GB of attention
                activations per rank) is INVALID_ARGUMENT at submit with
                the figures (bytes a rank needs, bytes a device has, the
                node), not a rank's out-of-memory 1.5 s later; pctl exits
                non-zero with the same message
  peer names    two daemons started without --name (both take the host
                name) peering with each other: both log the collision as an
                error naming the peer's address, and `pctl nodes` (and
                ListNodes) shows it on the peer's row and on the node's own
  unique names  a name active on one daemon is refused by the other daemon
                of the cluster (ALREADY_EXISTS naming the node and job);
                once that job is cancelled the name is free on both
  clock skew    a daemon whose clock is 120 s ahead (libfaketime) coordinates
                a job: pctl list / status / nodes through the other daemon
                show its age as seconds, not "-" (times are relative to the
                answering daemon's clock, Job.now_ms / NodeInfo.now_ms);
                skipped, saying so, where libfaketime is not installed

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


EVIL = "x\n\x1b]0;pwned\x07\x1b[2J\x1b[H\xc2\x9b31m"


def raw_controls(text):
    """The control characters (C0 but newline, DEL, C1) in pctl's output."""
    return sorted({"%r" % ch for ch in text if (ord(ch) < 0x20 and ch != "\n") or
                   0x7f <= ord(ch) <= 0x9f})


def check_names(args, cl, data):
    d0 = cl.daemons[0]
    g = pc.Grpc(d0, args.proto)
    try:
        job_id = g.submit(data, dp=1, batch=2, steps=2, name=EVIL)
        raise AssertionError("name %r accepted as %s" % (EVIL, job_id))
    except pc.ClientError as e:
        assert "INVALID_ARGUMENT" in str(e) and "name" in str(e) and "\\x0a" in str(e), str(e)
        print("grpc submit, name with escapes: %s" % str(e))
    for bad in ("a b", "../etc", "-rf", "n" * 65):
        try:
            g.submit(data, dp=1, batch=2, steps=2, name=bad)
            raise AssertionError("name %r accepted" % bad)
        except pc.ClientError as e:
            assert "INVALID_ARGUMENT" in str(e) and "name" in str(e), str(e)
    ok = g.submit(data, dp=1, batch=2, steps=2, name="ok_name-1.2")  # the safe set passes
    pc.wait_state(g, ok, ("COMPLETED", "FAILED"), 120)
    if not (args.pctl and os.access(args.pctl, os.X_OK)):
        print("names: no pctl in this build, the pctl half skipped")
        return
    r = subprocess.run([args.pctl, "--server", d0.control, "submit", "--data", data, "--dp", "1",
                        "--batch", "2", "--steps", "2", "--name", EVIL],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=30)
    err = r.stderr.decode("utf-8", errors="surrogateescape")
    assert r.returncode != 0 and "--name" in err, (r.returncode, err)
    assert not raw_controls(err), "pctl printed raw control bytes %s: %r" % (raw_controls(err), err)
    print("pctl submit --name with escapes: exit %d: %s" % (r.returncode, err.splitlines()[0]))
    # a file name may hold escapes: the daemon echoes it; pctl must not
    # ... and UTF-8 text, which stays readable (the 0x82 inside U+20AC is no C1 control)
    evil_data = os.path.join(cl.workdir, "data\x1b[2J\x1b]0;t\x07\u20ac.bin")
    os.link(data, evil_data)
    job_id = g.submit(evil_data, dp=1, batch=2, steps=2, name="evil-path")
    pc.wait_state(g, job_id, ("COMPLETED", "FAILED"), 120)
    for argv in (["status", job_id], ["list"],
                 ["submit", "--data", evil_data + "\x1b[2Jmissing", "--dp", "1", "--batch", "2",
                  "--steps", "2"]):
        r = subprocess.run([args.pctl, "--server", d0.control] + argv, stdout=subprocess.PIPE,
                           stderr=subprocess.PIPE, timeout=30)
        out = (r.stdout + r.stderr).decode("utf-8", errors="surrogateescape")
        assert not raw_controls(out), "pctl %s printed raw control bytes %s:\n%r" % (
            argv[0], raw_controls(out), out)
        if argv[0] == "status":
            assert "data\\x1b[2J" in out and "\u20ac.bin" in out, out
    print("pctl status/list/submit: the data path's escapes shown as \\x1b, none raw")


def check_memory(args, cl):
    d0 = cl.daemons[0]
    big = os.path.join(cl.workdir, "big.bin")
    ntok = pc.write_llmc_tokens(big, max_tokens=150000)
    assert ntok > 100001, ntok
    clients = [("grpc", pc.Grpc(d0, args.proto))]
    if args.pctl and os.access(args.pctl, os.X_OK):
        clients.append(("pctl", make_client(args, d0)))
    for cname, c in clients:
        try:
            job_id = c.submit(big, dp=1, batch=1, steps=1, layers=2, heads=2, dim=64, seq=100000)
            raise AssertionError("%s: seq 100000 accepted as %s" % (cname, job_id))
        except pc.ClientError as e:
            msg = str(e)
            assert "INVALID_ARGUMENT" in msg and "needs" in msg and "GiB" in msg and \
                d0.name in msg and "seq=100000" in msg, msg
            print("memory (%s): %s" % (cname, msg.strip().splitlines()[0]))
    assert all(j["spec"]["model"]["seq"] != 100000 for j in clients[0][1].jobs())


def check_peer_names(args, cl):
    ds = [pc.Daemon(args.parallaxd, "%snoname%c" % (cl.daemons[0].name, c), cl.workdir, 1, cl.env)
          for c in "ab"]
    ds[0].peers, ds[1].peers = [ds[1].peer], [ds[0].peer]
    procs = []
    for d in ds:
        a = d.argv()
        i = a.index("--name")
        del a[i:i + 2]  # as a user would start them: the host name for both
        log = open(d.log_path, "ab")
        procs.append(subprocess.Popen(a, stdout=log, stderr=subprocess.STDOUT, env=cl.env))
        log.close()
        d.proc = procs[-1]
    try:
        want = "which is this node's name"
        pc.wait_for(lambda: all(want in d.log_tail(200) for d in ds), 20,
                    "both daemons to log the name collision")
        for d in ds:
            line = [l for l in d.log_tail(200).splitlines() if want in l][0]
            other = ds[1] if d is ds[0] else ds[0]
            assert "ERROR" in line and other.peer in line, line
        print("peer names: both log: %s" % line.split(": ", 1)[1])
        nodes = pc.Grpc(ds[0], args.proto).nodes()
        errs = [n.get("error", "") for n in nodes]
        assert all(want in e for e in errs), nodes
        assert not any(n["alive"] for n in nodes[1:]), nodes  # the peer is not used
        if args.pctl and os.access(args.pctl, os.X_OK):
            r = subprocess.run([args.pctl, "--server", ds[1].control, "nodes"],
                               stdout=subprocess.PIPE, timeout=30)
            out = r.stdout.decode()
            assert r.returncode == 0 and out.count("ERROR: ") == 2 and want in out, out
            print("pctl nodes:\n" + out.rstrip())
    finally:
        for d in ds:
            d.stop()


def check_unique_names(args, cl, data):
    g0, g1 = pc.Grpc(cl.daemons[0], args.proto), pc.Grpc(cl.daemons[1], args.proto)
    first = g0.submit(data, dp=1, batch=2, steps=1000000, name="dup-name")
    try:
        other = g1.submit(data, dp=1, batch=2, steps=1000000, name="dup-name")
        raise AssertionError("the same name accepted by a second daemon: %s and %s" % (first,
                                                                                     other))
    except pc.ClientError as e:
        msg = str(e)
        assert "ALREADY_EXISTS" in msg and cl.daemons[0].name in msg and first in msg, msg
        print("unique names: second daemon: %s" % msg)
    g0.cancel(first)
    again = g1.submit(data, dp=1, batch=2, steps=1000000, name="dup-name")
    g1.cancel(again)
    print("unique names: free again once %s was cancelled (%s took it)" % (first, again))


FAKETIME_LIB = "/usr/lib/x86_64-linux-gnu/faketime/libfaketimeMT.so.1"


def check_clock_skew(args, data):
    if not os.path.exists(FAKETIME_LIB):
        print("clock skew: SKIPPED: libfaketime (Debian faketime) is not installed")
        return
    if not (args.pctl and os.access(args.pctl, os.X_OK)):
        print("clock skew: SKIPPED: no pctl in this build")
        return
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="clk")
    # a sanitizer build's runtime must come first in the preload list
    ldd = subprocess.run(["ldd", args.parallaxd], stdout=subprocess.PIPE).stdout.decode()
    asan = [l.split("=>")[1].split()[0] for l in ldd.splitlines() if "libasan" in l and "=>" in l]
    cl.daemons[1].env = dict(cl.env, LD_PRELOAD=" ".join(asan + [FAKETIME_LIB]),
                             FAKETIME="+120s", FAKETIME_DONT_FAKE_MONOTONIC="1")
    client = lambda d: make_client(args, d)  # noqa: E731
    with cl:
        cl.start(client)
        a, b = cl.daemons
        gb = pc.Grpc(b, args.proto)
        job_id = gb.submit(data, dp=1, batch=2, steps=2)
        pc.wait_state(gb, job_id, ("COMPLETED", "FAILED"), 120)
        j = gb.job(job_id)
        assert int(j["created_ms"]) > time.time() * 1000 + 60000, "faketime not in effect: %s" % j
        pctl = [args.pctl, "--server", a.control]
        out = subprocess.run(pctl + ["list"], stdout=subprocess.PIPE, timeout=30).stdout.decode()
        row = [l for l in out.splitlines() if l.startswith(job_id + " ")]
        assert row, out
        age = row[0].split()[-1]
        assert age != "-" and age.endswith("s") and int(age[:-1]) < 60, \
            "age of %s (coordinated 120 s ahead) shown as %r:\n%s" % (job_id, age, out)
        st = subprocess.run(pctl + ["status", job_id], stdout=subprocess.PIPE,
                            timeout=30).stdout.decode()
        created = [l for l in st.splitlines() if l.startswith("created")][0]
        assert "(-" not in created and " ago)" in created, created
        nodes = subprocess.run(pctl + ["nodes"], stdout=subprocess.PIPE, timeout=30).stdout.decode()
        brow = [l for l in nodes.splitlines() if l.startswith(b.name)][0]
        assert brow.rstrip().endswith(" ago"), nodes
        print("clock skew: job of a node 120 s ahead: list age %s, status %r, nodes %r" % (
            age, created.strip(), brow.split()[-2] + " ago"))
        codes = cl.stop()
        assert codes == [0, 0], codes


def main():
    args = pc.parse_args(sys.argv[1:])
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="dfx")
    client = lambda d: make_client(args, d)  # noqa: E731
    try:
        cl.start(client)
        check_socket_race(args, cl)
        data = os.path.join(cl.workdir, "licenses.bin")
        pc.write_llmc_tokens(data, max_tokens=20000)
        check_names(args, cl, data)
        check_memory(args, cl)
        check_peer_names(args, cl)
        check_unique_names(args, cl, data)
        check_clock_skew(args, data)
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
