#!/usr/bin/python3
"""Integration: parallaxd as a service, with Debian's python3-grpcio as the
client and no rank ever placed (fast).

1. Config: an unknown key is an error naming the file, line and key
   (exit 2); --print-config shows every key with its value and where it
   came from (default, env PX_*, FILE:LINE, command line); a non-loopback
   --listen is refused unless control-remote = yes.
2. systemd notify protocol (a NOTIFY_SOCKET datagram socket, WATCHDOG_USEC
   = 400 ms as systemd sets it for WatchdogSec): READY=1 once serving,
   STATUS= with the job counts, WATCHDOG=1 pings at about half the
   watchdog period, STOPPING=1 on SIGTERM; exit 0.
3. control.sock is mode 0660.
4. gRPC round trip: Health/Check SERVING; SubmitJob -> GetJob -> ListJobs
   give the same job; malformed bytes -> INVALID_ARGUMENT, a message over
   the 64 MiB maximum -> RESOURCE_EXHAUSTED, an unknown method -> UNIMPLEMENTED;
   the daemon stays up."""
import os
import socket
import stat
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def run(argv, env, timeout=20):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace")


def check_config(exe, workdir, env):
    bad = os.path.join(workdir, "bad.conf")
    with open(bad, "w") as f:
        f.write("[parallaxd]\ndevices = cpu:2\n\ncolour = blue\n")
    code, out = run([exe, "--config", bad, "--print-config"], env)
    assert code == 2 and "%s:4: unknown key 'colour'" % bad in out, (code, out)
    print("config: unknown key -> exit 2: %s" % [l for l in out.splitlines() if "colour" in l][0]
          .split("] ", 1)[-1])
    good = os.path.join(workdir, "good.conf")
    with open(good, "w") as f:
        f.write("; comment\n[parallaxd]\ndevices = cpu:3\nheartbeat-ms = 250\n")
    e = dict(env, PX_PEER_DEAD_MS="4000")
    e.pop("PX_HEARTBEAT_MS", None)
    code, out = run([exe, "--config", good, "--print-config", "--heartbeat-ms", "300",
                     "--name", "cfgnode"], e)
    assert code == 0, out
    lines = {l.split("=")[0].strip(): l for l in out.splitlines() if "=" in l}
    want = {"devices": ("cpu:3", "%s:3" % good), "heartbeat-ms": ("300", "command line"),
            "peer-dead-ms": ("4000", "env PX_PEER_DEAD_MS"), "name": ("cfgnode", "command line"),
            "kill-grace-ms": (None, None), "collective-timeout-ms": ("60000", "default"),
            "token-file": (None, "default"), "control-remote": ("no", "default")}
    for k, (v, src) in want.items():
        assert k in lines, (k, out)
        if v:
            assert " %s " % v in lines[k] + " ", (k, lines[k])
        if src:
            assert lines[k].endswith("# " + src), (k, lines[k])
    print("config: --print-config sources: devices from %s:3, heartbeat-ms from the command "
          "line, peer-dead-ms from env PX_PEER_DEAD_MS" % os.path.basename(good))
    d = pc.Daemon(exe, "cfgremote", workdir, 1, env)
    d.control = "0.0.0.0:%d" % pc.free_port()
    code, out = run(d.argv(), env)
    assert code != 0 and "loopback" in out, (code, out)
    print("config: --listen 0.0.0.0 refused without control-remote = yes")


def check_notify(exe, workdir, env):
    path = os.path.join(workdir, "notify.sock")
    sk = socket.socket(socket.AF_UNIX, socket.SOCK_DGRAM)
    sk.bind(path)
    sk.settimeout(10)
    e = dict(env, NOTIFY_SOCKET=path, WATCHDOG_USEC="400000")
    d = pc.Daemon(exe, "notify%d" % os.getpid(), workdir, 1, e)
    d.start()
    try:
        msgs = []
        t_ready = None
        while True:
            m = sk.recv(4096).decode()
            msgs.append((time.time(), m))
            if "READY=1" in m and t_ready is None:
                t_ready = time.time()
                g = pc.Grpc(d, None)
                assert g.nodes()[0]["name"] == d.name  # serving when READY was sent
            if t_ready and time.time() - t_ready > 2.0:
                break
        pings = [t for t, m in msgs if "WATCHDOG=1" in m]
        status = [m for t, m in msgs if m.startswith("STATUS=")]
        assert len(pings) >= 3, msgs
        gaps = [b - a for a, b in zip(pings, pings[1:])]
        # The daemon pings every WatchdogSec / 2 (200 ms); systemd kills it when pings are
        # 400 ms apart. The times here are when this process read the datagrams, which a loaded
        # machine delays and bunches, so the check is on the count over the window: at least
        # one per 400 ms (never starved), at most one per 100 ms (periodic, not a busy loop).
        window = pings[-1] - pings[0] if len(pings) > 1 else 0.0
        assert window > 0 and window / 0.4 <= len(pings) - 1 <= window / 0.1 + 1, gaps
        assert status and "jobs running" in status[-1], msgs
        st = os.stat(os.path.join(d.runtime_dir, "control.sock"))
        assert stat.S_IMODE(st.st_mode) == 0o660, oct(st.st_mode)
        d.proc.send_signal(15)
        while True:
            m = sk.recv(4096).decode()
            if "STOPPING=1" in m:
                break
        assert d.proc.wait(20) == 0
        print("sd_notify: READY=1, %s, %d WATCHDOG=1 in 2 s (every %.0f ms for WatchdogSec "
              "400 ms), STOPPING=1, exit 0; control.sock mode 0660"
              % (status[-1], len(pings), 1000 * sum(gaps) / len(gaps)))
    finally:
        sk.close()
        if d.alive():
            d.proc.kill()
            d.proc.wait()


def varint(n):
    out = b""
    while n >= 0x80:
        out += bytes([(n & 0x7F) | 0x80])
        n >>= 7
    return out + bytes([n])


def check_grpc(cl, proto):
    import grpc
    d = cl.daemons[0]
    g = pc.Grpc(d, proto)
    raw = lambda path: g.channel.unary_unary(path, request_serializer=lambda b: b,  # noqa
                                             response_deserializer=lambda b: b)
    assert raw("/grpc.health.v1.Health/Check")(b"", timeout=5) == b"\x08\x01"
    data = os.path.join(cl.workdir, "tok.bin")
    pc.write_llmc_tokens(data, max_tokens=5000)
    job_id = g.submit(data, dp=1, batch=2, steps=3, name="svc-roundtrip")
    j = g.job(job_id)
    assert j["id"] == job_id and j["spec"]["name"] == "svc-roundtrip", j
    assert j["spec"]["data_path"] == data and j["spec"]["dp"] == 1, j
    listed = [x for x in g.jobs() if x["id"] == job_id]
    assert len(listed) == 1 and listed[0]["spec"] == j["spec"], listed
    print("grpcio: Health SERVING; SubmitJob %s -> GetJob -> ListJobs agree" % job_id)
    codes = {}
    for what, path, body in [
            ("malformed", "/parallax.v1.Control/GetJob", b"\x0a\xff\xff\xff"),
            ("oversized", "/parallax.v1.Control/GetJob", b"\x0a" + varint(65 << 20) +
             b"x" * (65 << 20)),
            ("unknown method", "/parallax.v1.Control/Nope", b"")]:
        try:
            raw(path)(body, timeout=20)
            raise AssertionError("%s accepted" % what)
        except grpc.RpcError as e:
            codes[what] = e.code().name
    assert codes == {"malformed": "INVALID_ARGUMENT", "oversized": "RESOURCE_EXHAUSTED",
                     "unknown method": "UNIMPLEMENTED"}, codes
    assert d.alive() and g.job(job_id)["id"] == job_id
    print("grpcio: malformed -> %(malformed)s, 65 MiB (limit 64 MiB) -> %(oversized)s, unknown method -> "
          "%(unknown method)s; daemon up" % codes)


def main():
    args = pc.parse_args(sys.argv[1:])
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="svc",
                    env={"PX_RANK_BIN": "/bin/true"})
    with cl:
        check_config(args.parallaxd, cl.workdir, cl.env)
        check_notify(args.parallaxd, cl.workdir, cl.env)
        cl.start(lambda d: pc.Grpc(d, args.proto))
        check_grpc(cl, args.proto)
        codes = cl.stop()
        assert codes == [0], codes
        return 0


if __name__ == "__main__":
    try:
        sys.exit(main())
    except AssertionError as e:
        print("FAIL:", e)
        sys.exit(1)
