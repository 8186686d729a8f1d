#!/usr/bin/env python3
"""test_port_taken.py: the test cluster survives a port taken between
free_port() and the daemon's bind (integration tests run side by side with
gRPC, UCX and each other, which take ports of the ephemeral range at any
moment: a CI run once failed integration-errors with "cannot listen on
--peer-listen 127.0.0.1:36641").

Holds a listening socket on a port, gives that port to daemon a as its
peer port and to daemon b as its control port, and requires Cluster.start
to bring both up on new ports (every daemon sees the other), the held port
no longer named; and free_port() to pick ports below the kernel's ephemeral
range, where bind(0) and connect() never hand them out."""
import os
import socket
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402
from pxclient import make_client  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    lo, _ = pc.ephemeral_range()
    ports = [pc.free_port() for _ in range(50)]
    if lo > 11000:
        above = [p for p in ports if p >= lo]
        assert not above, "free_port() gave ephemeral-range ports %s (range starts at %d)" % (above, lo)

    held = socket.socket()
    held.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    held.bind(("127.0.0.1", 0))
    held.listen(1)
    taken = "127.0.0.1:%d" % held.getsockname()[1]

    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="port")
    a, b = cl.daemons
    a.peer = taken
    b.control = taken
    for d in cl.daemons:
        d.peers = [o.peer for o in cl.daemons if o is not d]
    cl.on_exit(lambda failed: held.close())
    with cl:
        cl.start(lambda d: make_client(args, d))
        for d in cl.daemons:
            assert d.alive(), "daemon %s is not running:\n%s" % (d.name, d.log_tail())
            assert taken not in (d.control, d.peer), \
                "daemon %s still names the taken port %s" % (d.name, taken)
        nodes = make_client(args, a).nodes()
        alive = sum(1 for n in nodes if n.get("alive"))
        assert alive == 2, "daemon a sees %d live nodes, want 2: %s" % (alive, nodes)
        codes = cl.stop()
        assert codes == [0, 0], "daemons exited %s" % codes
    print("test_port_taken: ok (the cluster moved to new ports; free_port() below %d)" % lo)


if __name__ == "__main__":
    main()
