#!/usr/bin/python3
"""Integration: bad job specs are rejected with INVALID_ARGUMENT messages
that name the value (missing data file, dp larger than the cluster, batch
not divisible by dp, dim not divisible by heads, seq longer than the data,
zero sizes), the daemon stays up; a job whose rank binary is missing fails
at launch naming it; a second daemon on a port in use (or on a state
directory in use) exits non-zero at start with a clear error; with
NOTIFY_SOCKET set the daemon sends READY=1 and STOPPING=1.
Needs no parallax-rank: nothing here is placed."""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def expect_reject(c, daemon, what, needles, **kw):
    try:
        job_id = c.submit(**kw)
    except pc.ClientError as e:
        msg = str(e)
        for n in needles:
            assert n in msg, "%s: message %r does not name %r" % (what, msg, n)
        assert daemon.alive(), "%s: daemon died" % what
        print("rejected %-34s %s" % (what + ":", msg.splitlines()[0]))
        return
    raise AssertionError("%s: accepted as %s" % (what, job_id))


def notify_supported(exe):
    """parallaxd links libsystemd when built with it (PX_HAVE_SYSTEMD)."""
    r = subprocess.run(["ldd", exe], stdout=subprocess.PIPE, stderr=subprocess.DEVNULL)
    return b"libsystemd" in r.stdout


def check_sd_notify(exe, cl):
    import socket
    path = os.path.join(cl.workdir, "notify.sock")
    sk = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sk.bind(path)
    sk.settimeout(20)
    env = dict(cl.env, NOTIFY_SOCKET=path)
    d = pc.Daemon(exe, cl.daemons[0].name + "n", cl.workdir, 1, env)
    d.start()
    try:
        msg = sk.recv(4096).decode()
        assert "READY=1" in msg, msg
        g = pc.Grpc(d, None)
        assert g.nodes()[0]["name"] == d.name  # serving when READY was sent
        d.proc.send_signal(15)
        msg = sk.recv(4096).decode()
        while msg.startswith("STATUS=") or msg == "WATCHDOG=1":  # periodic, may come first
            msg = sk.recv(4096).decode()
        assert "STOPPING=1" in msg, msg
        assert d.proc.wait(20) == 0
        print("sd_notify: READY=1 then STOPPING=1, exit 0")
    finally:
        sk.close()
        if d.alive():
            d.proc.kill()


def main():
    args = pc.parse_args(sys.argv[1:])
    missing_rank = "/nonexistent/parallax-rank"
    cl = pc.Cluster(args.parallaxd, n=2, devices=2, tag="err",
                    env={"PX_RANK_BIN": missing_rank})
    data = os.path.join(cl.workdir, "licenses.bin")
    ntok = pc.write_llmc_tokens(data, max_tokens=5000)
    bad_magic = os.path.join(cl.workdir, "bad.bin")
    with open(bad_magic, "wb") as f:
        f.write(b"\0" * 4096)
    client = lambda d: make_client(args, d)  # noqa: E731
    ok = dict(data=data, dp=4, batch=8, steps=5)
    with cl:
        cl.start(client)
        d0 = cl.daemons[0]
        c = client(d0)
        missing = os.path.join(cl.workdir, "no-such-file.bin")
        # (what, spec changes, words the daemon's message has, words any client's has)
        cases = [
            ("missing data file", dict(data=missing), [missing], [missing]),
            ("bad data header", dict(data=bad_magic), [bad_magic, "magic"], [bad_magic]),
            ("dp > cluster devices", dict(dp=8, batch=8), ["dp=8", "4 devices"], ["8", "4"]),
            ("batch % dp", dict(batch=6), ["batch=6", "dp=4"], ["batch", "6", "dp", "4"]),
            ("dim % heads", dict(dim=30, heads=4), ["dim=30", "heads=4"],
             ["dim", "30", "heads", "4"]),
            ("seq longer than data", dict(seq=ntok), ["seq=%d" % ntok, str(ntok)],
             ["seq", str(ntok)]),
            ("zero layers", dict(layers=0), ["layers=0"], ["layers", "0"]),
            ("zero steps", dict(steps=0), ["steps=0"], ["steps", "0"]),
        ]
        clients = [("grpc", pc.Grpc(d0, args.proto), 2)]
        if args.pctl and os.access(args.pctl, os.X_OK):
            clients.append(("pctl", c, 3))
        for cname, cc, which in clients:
            for what, change, strict, loose in cases:
                expect_reject(cc, d0, "%s %s" % (cname, what),
                              strict if which == 2 else loose, **dict(ok, **change))
        # names only a raw gRPC client can send (pctl refuses them itself): the
        # message names the string sent, not the -1 it does not map to
        g = pc.Grpc(d0, args.proto)
        expect_reject(g, d0, "grpc unknown precision", ["precision='fp64'"],
                      **dict(ok, precision="fp64"))
        expect_reject(g, d0, "grpc unknown schedule", ["schedule='zigzag'"],
                      **dict(ok, parallel=g.pb.ParallelSpec(dp=4, schedule="zigzag")))
        assert c.jobs() == [], "rejected jobs were stored: %s" % c.jobs()

        # a valid job whose rank binary is missing fails at launch, naming it,
        # and releases its devices (the next one is placed and fails the same way)
        for i in range(2):
            job_id = c.submit(data, dp=4, batch=8, steps=5)
            j = pc.wait_state(c, job_id, ("FAILED", "COMPLETED", "CANCELLED"), 30)
            assert pc.job_state(j) == "FAILED" and missing_rank in j["reason"], j
        print("launch failure: %s" % j["reason"])
        assert all(not dv["job_id"] for n in c.nodes() for dv in n["devices"]), c.nodes()

        # a second daemon on d0's Control port: fails at start, non-zero
        extra = pc.Daemon(args.parallaxd, d0.name + "x", cl.workdir, 1, cl.env)
        extra.control = d0.control
        r = subprocess.run(extra.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=cl.env, timeout=20)
        out = r.stdout.decode(errors="replace")
        assert r.returncode != 0, "second daemon on %s exited 0:\n%s" % (d0.control, out)
        assert d0.control in out, "error does not name the address:\n" + out
        print("second daemon on %s: exit %d, %s" % (d0.control, r.returncode,
                                                   [l for l in out.splitlines() if "ERROR" in l][-1]))
        # ... and one on d0's state directory
        extra2 = pc.Daemon(args.parallaxd, d0.name + "y", cl.workdir, 1, cl.env)
        extra2.state_dir = d0.state_dir
        r = subprocess.run(extra2.argv(), stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                           env=cl.env, timeout=20)
        out = r.stdout.decode(errors="replace")
        assert r.returncode != 0 and "in use" in out, "state dir reuse: %d\n%s" % (r.returncode, out)
        assert d0.alive(), "first daemon died"
        assert len(c.nodes()) == 2
        # standard health probe (grpc.health.v1.Health/Check: SERVING = 1)
        g = pc.Grpc(d0, args.proto)
        check = g.channel.unary_unary("/grpc.health.v1.Health/Check",
                                      request_serializer=lambda b: b,
                                      response_deserializer=lambda b: b)
        assert check(b"", timeout=5) == b"\x08\x01", "health check not SERVING"

        # systemd Type=notify: READY=1 once serving, STOPPING=1 on SIGTERM
        if notify_supported(args.parallaxd):
            check_sd_notify(args.parallaxd, cl)
        codes = cl.stop()
        assert codes == [0, 0], codes
        return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
