#!/usr/bin/env python3
"""test_metrics_ipv6.py: parallaxd's Prometheus endpoint (daemon/metrics.h)
listens on IPv6 addresses written as in URLs, [::1]:port.

1. A daemon started with --metrics-listen [::1]:PORT serves /metrics at
   http://[::1]:PORT/ (the node's build_info and device series), and logs
   that URL; nothing answers at 127.0.0.1:PORT (the IPv6 socket only).
2. Bad addresses stop parallaxd at start with an error naming them: an IPv6
   host without brackets (::1:PORT: which colon is the port's?), an
   unclosed bracket, a bracketed IPv4 host, a port out of range.
3. The daemon stops with status 0 (the endpoint's handles closed)."""
import os
import socket
import subprocess
import sys
import time
import urllib.request

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def v6_free_port():
    s = socket.socket(socket.AF_INET6)
    s.bind(("::1", 0))
    port = s.getsockname()[1]
    s.close()
    return port


def main():
    args = pc.parse_args(sys.argv[1:])
    try:
        v6_free_port()
    except OSError as e:
        print("SKIP: no IPv6 loopback here (%s)" % e)
        return 77
    cl = pc.Cluster(args.parallaxd, n=1, devices=2, tag="m6")
    (d,) = cl.daemons
    with cl:
        # 2. refused at start, naming the value
        for bad in ("::1:%d" % pc.free_port(), "[::1:9100", "[127.0.0.1]:9100", "[::1]:70000",
                    "[::1]:"):
            r = subprocess.run(d.argv() + ["--metrics-listen", bad], capture_output=True,
                               text=True, timeout=30, env=cl.env)
            out = r.stdout + r.stderr
            assert r.returncode != 0, "parallaxd accepted --metrics-listen %s:\n%s" % (bad, out)
            assert "metrics-listen '%s'" % bad in out, "no error naming %r:\n%s" % (bad, out)
            print("refused %-18s exit %d" % (bad, r.returncode))
        # 1. served over IPv6
        port = v6_free_port()
        d.extra = ["--metrics-listen", "[::1]:%d" % port]
        d.start()
        page = None
        deadline = time.monotonic() + 20
        while time.monotonic() < deadline and page is None:
            assert d.alive(), "parallaxd exited:\n%s" % d.log_tail()
            try:
                with urllib.request.urlopen("http://[::1]:%d/metrics" % port, timeout=5) as r:
                    page = r.read().decode()
                    ctype = r.headers["Content-Type"]
            except OSError:
                time.sleep(0.2)
        assert page is not None, "nothing served at http://[::1]:%d/metrics:\n%s" % (
            port, d.log_tail())
        assert ctype.startswith("text/plain; version=0.0.4"), ctype
        for want in ['parallax_build_info{node="%s"' % d.name,
                     'parallax_device_busy{node="%s",device="cpu:0"' % d.name]:
            assert want in page, "the metrics page lacks %r:\n%s" % (want, page)
        assert "http://[::1]:%d/metrics" % port in d.log_tail(200), d.log_tail()
        s = socket.socket()
        s.settimeout(2)
        v4 = s.connect_ex(("127.0.0.1", port))
        s.close()
        assert v4 != 0, "127.0.0.1:%d answered: the endpoint should be IPv6 only" % port
        print("served at http://[::1]:%d/metrics (%d bytes); not on 127.0.0.1" %
              (port, len(page)))
        # 3. clean stop
        codes = cl.stop()
        assert codes == [0], "parallaxd exited %s after serving metrics over IPv6" % codes
    print("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
