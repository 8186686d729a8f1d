#!/usr/bin/python3
"""Integration: the cluster token, the message-size limit, cluster-wide
ListJobs and pctl's --token-file / --max-restarts, on two real daemons with
Debian's python3-grpcio as the raw client.

1. token-file checks: a file other users may read, and an empty one, stop
   the daemon at start with a message saying why.
2. Both daemons run with --token-file; they see each other (heartbeats
   carry the token).
3. Peer plane: a call without the token, and with a wrong one, is
   UNAUTHENTICATED with a message naming the token; with it the call reaches
   the handler (NOT_FOUND for an unknown job); health stays open.
4. Control: over loopback no token is needed; over the node's own
   non-loopback address (control-remote = yes) it is, from grpcio and from
   pctl (--token-file, $PX_TOKEN_FILE).
5. max-message-bytes 1 MiB: a 2 MiB request is RESOURCE_EXHAUSTED.
6. A dp=2 job over both nodes completes with tokens on (ranks reach their
   coordinator's Peer service with the token from their environment, which
   never appears on their command line; both nodes give the job's ranks
   the same PX_JOB_SECRET, HMAC(token, job id), which they prove to each
   other at wire-up).
7. pctl submit --max-restarts reaches JobSpec.max_restarts.
8. ListJobs on either daemon lists both nodes' jobs (local_only lists one
   node's); with the other daemon SIGSTOPped the answer still comes within
   a few seconds, without that node's jobs.
10. Every RPC of the proto (each `rpc` of each service in
   proto/parallax.proto, enumerated from the file) sent to a daemon with a
   cluster token without one and with a wrong one: all UNAUTHENTICATED
   (Peer over loopback, Control over the node's non-loopback address), the
   wrong ones logged naming the caller; and the rate limit: after
   auth-max-wrong wrong tokens from one address its calls are refused
   RESOURCE_EXHAUSTED (the right token too) while another address is still
   answered, until auth-lockout-ms has passed.
9. TLS on the Peer plane (a self-signed certificate made here by openssl):
   two daemons with tls-cert-file/tls-key-file see each other and run a
   dp=2 job; a plaintext client gets no answer from the Peer port, a TLS
   client that trusts the certificate does.
Exit 77 when parallax-rank was not built."""
import hashlib
import hmac
import json
import os
import re
import secrets
import signal
import socket
import subprocess
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402

MD = "x-parallax-token"


def run(argv, env=None, timeout=20):
    r = subprocess.run(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, env=env,
                       timeout=timeout)
    return r.returncode, r.stdout.decode(errors="replace")


def host_ipv4():
    """A non-loopback IPv4 address of this machine, or None."""
    try:
        out = subprocess.run(["hostname", "-I"], stdout=subprocess.PIPE, timeout=5).stdout
    except (OSError, subprocess.SubprocessError):
        return None
    for a in out.decode().split():
        if "." in a and not a.startswith("127."):
            try:
                with socket.socket() as s:
                    s.bind((a, 0))
                return a
            except OSError:
                pass
    return None


def check_token_files(exe, workdir, env):
    d = pc.Daemon(exe, "sectok", workdir, 1, env)
    bad = os.path.join(workdir, "token-open")
    with open(bad, "w") as f:
        f.write("s3cret\n")
    os.chmod(bad, 0o644)
    code, out = run(d.argv() + ["--token-file", bad], env)
    assert code != 0 and "other users" in out and bad in out, (code, out)
    empty = os.path.join(workdir, "token-empty")
    with open(empty, "w") as f:
        f.write("  \n")
    os.chmod(empty, 0o600)
    code, out = run(d.argv() + ["--token-file", empty], env)
    assert code != 0 and "empty" in out, (code, out)
    code, out = run(d.argv() + ["--token-file", empty, "--max-message-bytes", "1048576",
                                "--print-config"], env)
    assert code == 0 and "max-message-bytes" in out and "1048576" in out, out
    print("token-file: mode 0644 and an empty file refused at start")


def check_tls(args, token_file, token):
    import grpc
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="tls")
    cert = os.path.join(cl.workdir, "cert.pem")
    key = os.path.join(cl.workdir, "key.pem")
    code, out = run(["openssl", "req", "-x509", "-newkey", "rsa:2048", "-nodes", "-days", "2",
                     "-subj", "/CN=localhost", "-addext",
                     "subjectAltName=IP:127.0.0.1,DNS:localhost", "-keyout", key, "-out", cert])
    if code != 0:
        print("TLS: openssl could not make a certificate, skipped: %s" % out)
        return
    os.chmod(key, 0o600)
    for d in cl.daemons:
        d.extra = ["--token-file", token_file, "--tls-cert-file", cert, "--tls-key-file", key]
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    client = lambda d: pc.Grpc(d, args.proto)  # noqa: E731
    with cl:
        cl.start(client)
        a, b = cl.daemons
        g = client(a)
        job_id = g.submit(data, dp=2, batch=4, steps=10, layers=1, heads=2, dim=16, seq=16,
                          name="tls-train")
        j = pc.wait_state(g, job_id, ("COMPLETED", "FAILED", "CANCELLED"), 120)
        assert pc.job_state(j) == "COMPLETED", (j, cl.logs())
        assert sorted(r["node"] for r in j["ranks"]) == sorted([a.name, b.name]), j
        plain = grpc.insecure_channel(a.peer)
        try:
            plain.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda m: m,
                              response_deserializer=lambda m: m)(b"", timeout=3)
            raise AssertionError("plaintext call to the TLS Peer port answered")
        except grpc.RpcError as e:
            plain_code = e.code().name
        assert plain_code in ("UNAVAILABLE", "DEADLINE_EXCEEDED"), plain_code
        with open(cert, "rb") as f:
            creds = grpc.ssl_channel_credentials(root_certificates=f.read())
        tls = grpc.secure_channel(a.peer, creds)
        h = tls.unary_unary("/grpc.health.v1.Health/Check", request_serializer=lambda m: m,
                            response_deserializer=lambda m: m)
        assert h(b"", timeout=10) == b"\x08\x01"
        logs = tls.unary_unary("/parallax.v1.Peer/GetRankLog", request_serializer=lambda m: m,
                               response_deserializer=lambda m: m)
        req = g.pb.GetLogsRequest(job_id="none", rank=0).SerializeToString()
        def code_of(md):
            try:
                logs(req, timeout=10, metadata=md)
                return "OK"
            except grpc.RpcError as e:
                return e.code().name
        assert code_of(None) == "UNAUTHENTICATED"
        assert code_of(((MD, token),)) == "NOT_FOUND"
        codes = cl.stop()
        assert codes == [0, 0], (codes, cl.logs())
        print("TLS: peer plane over TLS (self-signed, openssl): dp=2 job COMPLETED; plaintext "
              "client -> %s; TLS client: health SERVING, token still required" % plain_code)


def proto_rpcs(proto):
    """[(service, method, request type, server-streaming)] of every rpc in
    the .proto file, in file order."""
    with open(proto) as f:
        text = re.sub(r"//[^\n]*", "", f.read())
    out = []
    for svc, body in re.findall(r"service\s+(\w+)\s*{(.*?)}", text, re.S):
        for m, req, stream in re.findall(
                r"rpc\s+(\w+)\s*\(\s*(\w+)\s*\)\s*returns\s*\(\s*(stream\s+)?\w+\s*\)",
                body):
            out.append((svc, m, req, bool(stream)))
    return out


def rpc_code(channel, svc, method, stream, payload, md):
    """The status code name of one raw call (OK when answered)."""
    import grpc
    path = "/parallax.v1.%s/%s" % (svc, method)
    ident = lambda m: m  # noqa: E731
    try:
        if stream:
            for _ in channel.unary_stream(path, request_serializer=ident,
                                          response_deserializer=ident)(payload, timeout=5,
                                                                       metadata=md):
                break
        else:
            channel.unary_unary(path, request_serializer=ident,
                                response_deserializer=ident)(payload, timeout=5, metadata=md)
        return "OK"
    except grpc.RpcError as e:
        return e.code().name


def check_every_rpc(args, token_file, token):
    """Every rpc of the proto without the token and with a wrong one."""
    import grpc
    rpcs = proto_rpcs(args.proto)
    services = sorted({s for s, _, _, _ in rpcs})
    assert services == ["Control", "Peer"] and len(rpcs) >= 15, rpcs
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="secrpc")
    d = cl.daemons[0]
    ip = host_ipv4()
    d.extra = ["--token-file", token_file, "--auth-max-wrong", "1000"]
    if ip:
        d.control = "0.0.0.0:%d" % pc.free_port()
        d.extra += ["--control-remote", "yes"]
    pb = pc.Grpc(d, args.proto).pb
    ok = False
    try:
        cl.start(lambda x: pc.Grpc(x, args.proto))
        peer = grpc.insecure_channel(d.peer)
        ctl = grpc.insecure_channel("%s:%s" % (ip, d.control.rsplit(":", 1)[1])) if ip else None
        wrong = token[:-1] + ("x" if token[-1] != "x" else "y")
        tried = []
        for svc, method, req, stream in rpcs:
            ch = peer if svc == "Peer" else ctl
            if ch is None:
                continue
            payload = getattr(pb, req)().SerializeToString()
            for what, md in (("none", None), ("wrong", (("x-parallax-token", wrong),))):
                code = rpc_code(ch, svc, method, stream, payload, md)
                assert code == "UNAUTHENTICATED", (svc, method, what, code)
            tried.append("%s.%s" % (svc, method))
        log = d.log_since_start()
        for name in tried:
            path = "/parallax.v1.%s" % name.replace(".", "/")
            for why in ("no cluster token", "wrong cluster token"):
                assert re.search(r"refused %s from \S+: %s" % (re.escape(path), why), log), \
                    (name, why)
        assert token not in log and wrong not in log
        assert d.alive()
        print("every rpc of %s (%d: %s) without the token and with a wrong one: "
              "UNAUTHENTICATED, each logged with its caller%s"
              % (os.path.basename(args.proto), len(tried), ", ".join(tried),
                 "" if ip else "; Control skipped: no non-loopback address here"))
        assert cl.stop() == [0], cl.logs()
        ok = True
    finally:
        if not ok:
            print(cl.logs())
        cl.stop()
        if ok:
            cl.cleanup()


def check_rate_limit(args, token_file, token):
    """auth-max-wrong 5, auth-lockout-ms 3000 on the Peer plane: the 6th call
    after 5 wrong tokens is refused whatever it carries; another source
    address is not; after the lockout the right token is answered again."""
    import grpc
    cl = pc.Cluster(args.parallaxd, n=1, devices=1, tag="seclim")
    d = cl.daemons[0]
    ip = host_ipv4()
    lockout_s = 3.0
    d.extra = ["--token-file", token_file, "--auth-max-wrong", "5",
               "--auth-lockout-ms", str(int(lockout_s * 1000))]
    if ip:
        d.peer = "0.0.0.0:%d" % pc.free_port()
    pb = pc.Grpc(d, args.proto).pb
    payload = pb.GetLogsRequest(job_id="no-such-job", rank=0).SerializeToString()
    right = (("x-parallax-token", token),)
    wrong = (("x-parallax-token", "not-" + token),)
    ok = False
    try:
        cl.start(lambda x: pc.Grpc(x, args.proto))
        port = d.peer.rsplit(":", 1)[1]
        lo = grpc.insecure_channel("127.0.0.1:%s" % port)
        code = lambda ch, md: rpc_code(ch, "Peer", "GetRankLog", False, payload, md)  # noqa
        assert code(lo, right) == "NOT_FOUND"
        firsts = [code(lo, wrong) for _ in range(5)]
        assert firsts == ["UNAUTHENTICATED"] * 5, firsts
        t_locked = time.time()
        after = [code(lo, wrong), code(lo, right), code(lo, None)]
        assert after == ["RESOURCE_EXHAUSTED"] * 3, after
        other = "not tried (no non-loopback address)"
        if ip:
            other = code(grpc.insecure_channel("%s:%s" % (ip, port)), right)
            assert other == "NOT_FOUND", other
        log = d.log_since_start()
        assert "ipv4:127.0.0.1 sent 5 wrong cluster tokens" in log, log
        time.sleep(max(0.0, t_locked + lockout_s + 0.3 - time.time()))
        back = code(lo, right)
        assert back == "NOT_FOUND", back
        assert "lockout over (3 calls refused" in d.log_since_start()
        print("rate limit: 5 wrong tokens from 127.0.0.1 -> its next calls RESOURCE_EXHAUSTED "
              "(wrong, right and no token alike); %s from %s meanwhile; after %.0f s the right "
              "token is answered again" % (other, ip or "-", lockout_s))
        assert cl.stop() == [0], cl.logs()
        ok = True
    finally:
        if not ok:
            print(cl.logs())
        cl.stop()
        if ok:
            cl.cleanup()


def main():
    args = pc.parse_args(sys.argv[1:])
    if pc.rank_missing(args):
        return 77
    import grpc
    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="sec")
    a, b = cl.daemons
    check_token_files(args.parallaxd, cl.workdir, cl.env)

    token = secrets.token_hex(32)
    tok = os.path.join(cl.workdir, "token")
    with open(tok, "w") as f:
        f.write(token + "\n")
    os.chmod(tok, 0o600)
    for d in cl.daemons:
        d.extra = ["--token-file", tok]
    ip = host_ipv4()
    if ip:
        a.control = "0.0.0.0:%d" % pc.free_port()
        a.extra += ["--control-remote", "yes"]
    a.extra += ["--max-message-bytes", "1048576"]
    data = os.path.join(cl.workdir, "licenses.bin")
    pc.write_llmc_tokens(data, max_tokens=20000)
    ok = False
    client = lambda d: pc.Grpc(d, args.proto)  # noqa: E731  loopback: no token needed
    try:
        cl.start(client)
        ga, gb = client(a), client(b)
        print("two daemons with --token-file see each other")

        # 3. the peer plane
        peer = grpc.insecure_channel(a.peer)
        raw = lambda path: peer.unary_unary(path, request_serializer=lambda m: m,  # noqa
                                            response_deserializer=lambda m: m)
        logs_req = ga.pb.GetLogsRequest(job_id="no-such-job", rank=0).SerializeToString()
        got = {}
        for what, md in (("none", None), ("wrong", ((MD, token[:-1] + "x"),)),
                         ("short", ((MD, token[:10]),)), ("right", ((MD, token),))):
            try:
                raw("/parallax.v1.Peer/GetRankLog")(logs_req, timeout=5, metadata=md)
                got[what] = ("OK", "")
            except grpc.RpcError as e:
                got[what] = (e.code().name, e.details())
        assert got["none"][0] == "UNAUTHENTICATED" and "cluster token" in got["none"][1], got
        assert got["wrong"][0] == "UNAUTHENTICATED" and "wrong" in got["wrong"][1], got
        assert got["short"][0] == "UNAUTHENTICATED", got
        assert got["right"][0] == "NOT_FOUND", got
        assert token not in repr(got)
        try:
            raw("/parallax.v1.Peer/Heartbeat")(b"", timeout=5)
            raise AssertionError("Heartbeat without a token accepted")
        except grpc.RpcError as e:
            assert e.code().name == "UNAUTHENTICATED", e
        assert raw("/grpc.health.v1.Health/Check")(b"", timeout=5) == b"\x08\x01"
        assert a.alive() and b.alive()
        print("peer plane: no token -> UNAUTHENTICATED (%s); wrong -> UNAUTHENTICATED (%s); "
              "right token -> %s; health open" % (got["none"][1], got["wrong"][1],
                                                 got["right"][0]))

        # 4. Control: loopback open, the node's address needs the token
        assert ga.nodes()
        if ip:
            port = a.control.rsplit(":", 1)[1]
            remote = "%s:%s" % (ip, port)
            try:
                pc.Grpc(a, args.proto, target=remote).nodes()
                raise AssertionError("remote Control call without a token accepted")
            except pc.ClientError as e:
                assert "UNAUTHENTICATED" in str(e), e
            try:
                pc.Grpc(a, args.proto, token="nope", target=remote).nodes()
                raise AssertionError("remote Control call with a wrong token accepted")
            except pc.ClientError as e:
                assert "UNAUTHENTICATED" in str(e) and "wrong" in str(e), e
            assert len(pc.Grpc(a, args.proto, token=token, target=remote).nodes()) == 2
            if args.pctl and os.access(args.pctl, os.X_OK):
                env = dict(os.environ)
                env.pop("PX_TOKEN_FILE", None)
                code, out = run([args.pctl, "--server", remote, "nodes"], env)
                assert code != 0 and "UNAUTHENTICATED" in out, (code, out)
                code, out = run([args.pctl, "--server", remote, "--token-file", tok, "nodes"],
                                env)
                assert code == 0 and a.name in out and b.name in out, (code, out)
                code, out = run([args.pctl, "--server", remote, "nodes"],
                                dict(env, PX_TOKEN_FILE=tok))
                assert code == 0 and a.name in out, (code, out)
                code, out = run([args.pctl, "--server", remote, "--token-file",
                                 os.path.join(cl.workdir, "missing"), "nodes"], env)
                assert code == 2 and "missing" in out, (code, out)
                print("pctl: %s without a token -> UNAUTHENTICATED; --token-file and "
                      "$PX_TOKEN_FILE -> answered" % remote)
            print("control: loopback without a token answered; %s (non-loopback) needs it"
                  % remote)
        else:
            print("control: no non-loopback address here, remote check skipped")

        # 5. max-message-bytes 1 MiB on a
        ctl = grpc.insecure_channel(a.control)
        big = ga.pb.GetJobRequest(job_id="x" * (2 << 20)).SerializeToString()
        try:
            ctl.unary_unary("/parallax.v1.Control/GetJob", request_serializer=lambda m: m,
                            response_deserializer=lambda m: m)(big, timeout=10)
            raise AssertionError("2 MiB request accepted")
        except grpc.RpcError as e:
            assert e.code().name == "RESOURCE_EXHAUSTED", e
        assert a.alive()
        print("max-message-bytes 1048576: a 2 MiB GetJob -> RESOURCE_EXHAUSTED")

        # 6. a job over both nodes with tokens on
        job_id = ga.submit(data, dp=2, batch=4, steps=30, layers=1, heads=2, dim=16, seq=16,
                           name="sec-train")
        seen_cmdline = 0
        t0 = time.time()
        while time.time() - t0 < 120:
            j = ga.job(job_id)
            for r in j.get("ranks", []):
                pid = r.get("pid")
                if r.get("node") != a.name or not pid:
                    continue
                try:
                    with open("/proc/%d/cmdline" % pid, "rb") as f:
                        cmd = f.read()
                    with open("/proc/%d/environ" % pid, "rb") as f:
                        envb = f.read()
                except OSError:
                    continue
                if b"parallax-rank" in cmd:
                    assert token.encode() not in cmd, "token on a rank's command line"
                    assert b"PX_CLUSTER_TOKEN=" + token.encode() in envb.split(b"\0")
                    # the job's own secret, derived from the token and the
                    # job id (auth.c), which its ranks prove at wire-up
                    want = hmac.new(token.encode(), b"parallax job secret " + job_id.encode(),
                                    hashlib.sha256).hexdigest().encode()
                    assert b"PX_JOB_SECRET=" + want in envb.split(b"\0"), \
                        [e for e in envb.split(b"\0") if e.startswith(b"PX_JOB_SECRET")]
                    seen_cmdline += 1
            if pc.job_state(j) in ("COMPLETED", "FAILED", "CANCELLED"):
                break
            time.sleep(0.3)
        j = ga.job(job_id)
        assert pc.job_state(j) == "COMPLETED", (j, cl.logs())
        nodes = sorted(r["node"] for r in j["ranks"])
        assert nodes == sorted([a.name, b.name]), nodes
        print("dp=2 job over %s and %s COMPLETED with tokens on (loss %.3f)%s"
              % (a.name, b.name, j["loss"],
                 "; rank's token in its environment, not its command line" if seen_cmdline
                 else ""))

        # 6b. a bench job with tokens on: its rank 0 reports rows to the
        # coordinator's Peer plane over a channel that carries the token
        if args.pctl and os.access(args.pctl, os.X_OK):
            sock = "unix:" + os.path.join(a.runtime_dir, "control.sock")
            r = subprocess.run([args.pctl, "--server", sock, "bench", "--ranks", "2", "--op",
                                "all_reduce", "--min-bytes", "4K", "--max-bytes", "16K",
                                "--iters", "2", "--check", "--json"],
                               capture_output=True, text=True, timeout=120)
            assert r.returncode == 0, (r.returncode, r.stdout, r.stderr, cl.logs())
            doc = json.loads(r.stdout)
            assert doc["state"] == "completed" and doc["wrong"] == 0, doc
            assert [x["size"] for x in doc["rows"]] == [4096, 8192, 16384], doc
            print("pctl bench with tokens on: COMPLETED, %d rows, 0 wrong" % len(doc["rows"]))

        # 7. pctl --max-restarts (through b's unix socket: a local user)
        mr_id = None
        if args.pctl and os.access(args.pctl, os.X_OK):
            sock = "unix:" + os.path.join(b.runtime_dir, "control.sock")
            ck = os.path.join(cl.workdir, "ckpt")
            base = [args.pctl, "--server", sock, "submit", "--data", data, "--dp", "1",
                    "--batch", "2", "--steps", "400", "--layers", "1", "--heads", "2",
                    "--dim", "16", "--seq", "16", "--checkpoint-every", "100",
                    "--checkpoint-dir", ck, "--name", "sec-restarts", "--json"]
            code, out = run(base + ["--max-restarts", "101"])
            assert code == 2 and "--max-restarts" in out, (code, out)
            code, out = run(base + ["--max-restarts", "2"])
            assert code == 0, (code, out)
            mr_id = json.loads(out)["job_id"]
            spec = gb.job(mr_id)["spec"]
            assert spec["max_restarts"] == 2 and spec["checkpoint_dir"] == ck, spec
            print("pctl submit --max-restarts 2 -> JobSpec.max_restarts = 2 (%s); 101 refused"
                  % mr_id)
        else:
            mr_id = gb.submit(data, dp=1, batch=2, steps=400, layers=1, heads=2, dim=16,
                              seq=16, name="sec-b")

        # 8. cluster-wide ListJobs
        def ids(jobs):
            return {x["id"]: x["coordinator"] for x in jobs}
        la, lb = ids(ga.jobs()), ids(gb.jobs())
        assert la.get(job_id) == a.name and la.get(mr_id) == b.name, la
        assert lb.get(job_id) == a.name and lb.get(mr_id) == b.name, lb
        local_a = ga._call("ListJobs", ga.pb.ListJobsRequest(local_only=True),
                           ga.pb.ListJobsResponse).get("jobs", [])
        assert job_id in ids(local_a) and mr_id not in ids(local_a), ids(local_a)
        order = [x["created_ms"] for x in ga.jobs()]
        assert order == sorted(order), order
        b.proc.send_signal(signal.SIGSTOP)
        try:
            t = time.time()
            la = ids(ga.jobs())
            dt = time.time() - t
        finally:
            b.proc.send_signal(signal.SIGCONT)
        assert job_id in la and mr_id not in la and dt < 5, (la, dt)
        print("ListJobs: each daemon lists both nodes' jobs (local_only: its own); with %s "
              "stopped, %s answers in %.1f s without its jobs" % (b.name, a.name, dt))
        try:
            gb.cancel(mr_id)
        except pc.ClientError:
            pass
        pc.wait_state(gb, mr_id, ("CANCELLED", "COMPLETED", "FAILED"), 30)
        codes = cl.stop()
        assert codes == [0, 0], (codes, cl.logs())
        check_every_rpc(args, tok, token)
        check_rate_limit(args, tok, token)
        check_tls(args, tok, token)
        ok = True
    finally:
        if not ok:
            print(cl.logs())
        cl.stop()
        if ok:
            cl.cleanup()
    print("security: all checks passed")
    return 0


if __name__ == "__main__":
    sys.exit(main())
