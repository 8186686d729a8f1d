#!/usr/bin/python3
"""ucx_levers.py: the intra-node transport levers for large all-gather and
all-to-all (issue 13), each measured against Open MPI in the same run.

    tests/bench/ucx_levers.py [--build build] [-n 2,4] [--ops all_gather,all_to_all]
                              [-b 1M] [-e 16M] [-r 1] [--lever NAME ...]

For every lever (a set of UCX / PX environment variables, below) and world
size it runs px-coll-bench under that environment and Open MPI's peer under
the unchanged one, one after the other (compare_mpi.py's run_pair, best of
-r runs per size), and prints per size our time, Open MPI's and the ratio
of busbw (ours / Open MPI's; above 1 ours is faster). The first lever,
"default", is what parallax ships. A benchmark to run by hand on an
otherwise idle machine; on a shared, loaded one figures move by 2x and
only large, repeated differences mean anything.
"""
import argparse
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import compare_mpi  # noqa: E402  (same folder)

# name -> environment added for parallax's ranks only. UCX 1.13 on one node
# picks posix/sysv shared memory for eager messages and CMA (process_vm_readv,
# single copy) for rendezvous; these switch one choice at a time.
LEVERS = {
    "default": {},
    # copy-in/copy-out through shared-memory FIFOs only: no single-copy path
    "no-cma": {"UCX_TLS": "posix,sysv,self"},
    # single copy pulled by the receiver (CMA get) vs pushed by the sender
    "rndv-get": {"UCX_RNDV_SCHEME": "get_zcopy"},
    "rndv-put": {"UCX_RNDV_SCHEME": "put_zcopy"},
    # rendezvous later: eager (two copies, no handshake) up to 256 KiB
    "rndv-256k": {"UCX_RNDV_THRESH": "256K"},
    # rendezvous never: every message eager through the FIFOs
    "eager-only": {"UCX_RNDV_THRESH": "inf"},
    # loopback TCP, what a multi-node job would use between nodes
    "tcp": {"UCX_TLS": "tcp,self"},
    # poll 20 us before sleeping on the event fd: the rendezvous handshake
    # (RTS, get, ATS) then need not wake a sleeping peer at each step
    "spin-20us": {"PX_SPIN_US": "20"},
}


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--build", default=os.path.join(compare_mpi.ROOT, "build"))
    ap.add_argument("-n", "--ranks", default="2,4")
    ap.add_argument("--ops", default="all_gather,all_to_all")
    ap.add_argument("-b", "--min-bytes", type=compare_mpi.parse_bytes, default=1 << 20)
    ap.add_argument("-e", "--max-bytes", type=compare_mpi.parse_bytes, default=16 << 20)
    ap.add_argument("-r", "--repeat", type=int, default=1)
    ap.add_argument("--lever", action="append", choices=sorted(LEVERS),
                    help="run only these levers (repeatable; default: all)")
    ap.add_argument("--peer", default=compare_mpi.PEER)
    a = ap.parse_args()
    if a.repeat < 1:
        ap.error("-r %d: need at least one run" % a.repeat)
    bench = os.path.join(a.build, "transport", "tools", "px-coll-bench")
    if not os.access(bench, os.X_OK):
        sys.exit("ucx_levers: %s is not built (ninja -C %s)" % (bench, a.build))
    peer = compare_mpi.build_peer(a.build, a.peer)
    base_env = dict(os.environ)
    for name in a.lever or list(LEVERS):
        for n in [int(x) for x in a.ranks.split(",")]:
            for op in a.ops.split(","):
                os.environ.clear()
                os.environ.update(base_env)
                os.environ.update(LEVERS[name])
                ours = [compare_mpi.run_ours(bench, n, op, a.min_bytes, a.max_bytes)
                        for _ in range(a.repeat)]
                os.environ.clear()
                os.environ.update(base_env)
                mpi = [compare_mpi.run_mpi(peer, n, op, a.min_bytes, a.max_bytes)
                       for _ in range(a.repeat)]
                if any(o is None for o in ours):
                    print("# %s %s %d ranks: not provided by this build" % (name, op, n))
                    continue
                ours, mpi = compare_mpi.best(ours), compare_mpi.best(mpi)
                print("# lever %-10s %s, %d ranks %s" %
                      (name, op, n, " ".join("%s=%s" % kv for kv in LEVERS[name].items())))
                print("#     size(B)      px_us     mpi_us   ratio")
                for size in sorted(ours):
                    m = mpi.get(size)
                    ratio = m["time_us"] / ours[size]["time_us"] if m else float("nan")
                    print("%13d %10.1f %10.1f %7.2f" % (size, ours[size]["time_us"],
                                                       m["time_us"] if m else float("nan"), ratio))
                sys.stdout.flush()


if __name__ == "__main__":
    main()
