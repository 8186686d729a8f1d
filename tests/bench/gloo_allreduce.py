#!/usr/bin/python3
"""gloo_allreduce.py: PyTorch's CPU collective backend (Gloo) all-reduce
busbw, for comparison with px-coll-bench (compare_mpi.py --gloo).

    /usr/bin/python3 tests/bench/gloo_allreduce.py [-n 4] [-s 16777216] [-i 20]

N local processes, init_process_group('gloo') over TCP on 127.0.0.1, fp32
SUM all-reduce of S bytes, 3 warm-up then I timed iterations between two
barriers, rank 0's time. Prints one JSON line: size, ranks, time_us, algbw,
busbw (nccl-tests factor 2(n-1)/n), and whether the result was exact.
"""
import argparse
import json
import os
import sys
import time

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402


def worker(rank, n, nbytes, iters, port, q):
    import torch
    import torch.distributed as dist
    torch.set_num_threads(1)
    os.environ["MASTER_ADDR"] = "127.0.0.1"
    os.environ["MASTER_PORT"] = str(port)
    dist.init_process_group("gloo", rank=rank, world_size=n)
    count = nbytes // 4
    x = torch.full((count,), float(rank + 1), dtype=torch.float32)
    for _ in range(3):
        dist.all_reduce(x)
    x.fill_(float(rank + 1))
    dist.all_reduce(x)
    exact = bool((x == n * (n + 1) / 2).all())
    dist.barrier()
    t = time.perf_counter()
    for _ in range(iters):
        dist.all_reduce(x)
    dist.barrier()
    s = (time.perf_counter() - t) / iters
    if rank == 0:
        algbw = count * 4 / s / 1e9
        q.put({"size": count * 4, "ranks": n, "time_us": s * 1e6, "algbw": algbw,
               "busbw": algbw * 2 * (n - 1) / n, "exact": exact})
    dist.destroy_process_group()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("-n", type=int, default=4)
    ap.add_argument("-s", type=int, default=16 << 20)
    ap.add_argument("-i", type=int, default=20)
    a = ap.parse_args()
    import torch.multiprocessing as mp
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    port = free_port()
    procs = [ctx.Process(target=worker, args=(r, a.n, a.s, a.i, port, q)) for r in range(a.n)]
    for p in procs:
        p.start()
    res = q.get(timeout=600)
    for p in procs:
        p.join(60)
    if any(p.exitcode != 0 for p in procs):
        sys.exit("gloo_allreduce: a rank failed")
    print(json.dumps(res))
    return 0 if res["exact"] else 1


if __name__ == "__main__":
    sys.exit(main())
