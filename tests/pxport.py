"""pxport.py: picking a free TCP port of 127.0.0.1 for a test's daemons or
rank rendezvous, shared by every test and benchmark script (tests/*/).

A port bind(0) returns lies in the kernel's ephemeral range, which every
connect() and bind(0) of the processes running beside the test draws from
too, so it can be taken between the pick and the daemon's own bind; these
picks lie below that range instead."""
import random
import socket


def ephemeral_range():
    """The kernel's ephemeral port range (lo, hi) from
    /proc/sys/net/ipv4/ip_local_port_range (Linux's default 32768-60999)."""
    try:
        with open("/proc/sys/net/ipv4/ip_local_port_range") as f:
            lo, hi = (int(x) for x in f.read().split())
        return lo, hi
    except (OSError, ValueError):
        return 32768, 60999


def free_port():
    """A TCP port of 127.0.0.1 that was free at the call, picked at random
    below the ephemeral range: a port of that range (what bind(0) returns)
    can be handed to any process's connect() or bind(0) - gRPC, UCX and the
    other tests running beside this one - between this call and the
    daemon's own bind, which then fails with "address in use". Falls back
    to bind(0) when the range starts too low to leave room."""
    lo, _ = ephemeral_range()
    if lo > 11000:
        for _ in range(200):
            port = random.randint(10000, lo - 1)
            s = socket.socket()
            try:
                s.bind(("127.0.0.1", port))
                return port
            except OSError:
                continue
            finally:
                s.close()
    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()
    return port
