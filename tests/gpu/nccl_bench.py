#!/usr/bin/env python3
"""NCCL's all-reduce and all-gather through torch.distributed, 2 processes on
one GPU (or on GPUs 0 and 1 where there are two), nccl-tests' busbw
(all-reduce 2(n-1)/n, all-gather (n-1)/n times algbw), sizes 1-256 MiB.
NCCL refuses two ranks on one GPU in many versions ("Duplicate GPU
detected"): then it prints that and exits 0, so the check goes on.
Output rows: "nccl OP BYTES time_us algbw busbw" (GB/s)."""
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp


def run(rank, world, port, q):
    os.environ["MASTER_ADDR"], os.environ["MASTER_PORT"] = "127.0.0.1", str(port)
    ngpu = torch.cuda.device_count()
    torch.cuda.set_device(rank % ngpu)
    try:
        dist.init_process_group("nccl", rank=rank, world_size=world)
        rows = []
        for op in ("all_reduce", "all_gather"):
            size = 1 << 20
            while size <= 256 << 20:
                n = size // 4
                buf = torch.ones(n, device="cuda")
                out = torch.empty(n, device="cuda")
                part = buf[: n // world]
                def once():
                    if op == "all_reduce":
                        dist.all_reduce(buf)
                    else:
                        dist.all_gather_into_tensor(out, part)
                for _ in range(3):
                    once()
                torch.cuda.synchronize()
                iters = 20
                t0 = time.perf_counter()
                for _ in range(iters):
                    once()
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) / iters
                algbw = size / dt / 1e9
                f = 2 * (world - 1) / world if op == "all_reduce" else (world - 1) / world
                rows.append(f"nccl {op} {size} {dt * 1e6:.1f} {algbw:.2f} {algbw * f:.2f}")
                size *= 4
        if rank == 0:
            q.put("\n".join(rows))
        dist.destroy_process_group()
    except Exception as e:  # NCCL's refusal of two ranks on one GPU lands here
        if rank == 0:
            q.put(f"nccl: not run: {type(e).__name__}: {str(e).splitlines()[0][:200]}")


def main():
    if not torch.cuda.is_available():
        print("nccl: not run: no CUDA device")
        return 0
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    ps = [ctx.Process(target=run, args=(r, 2, 29611, q)) for r in range(2)]
    for p in ps:
        p.start()
    try:
        print(q.get(timeout=240))
    except Exception:
        print("nccl: not run: no result within 240 s")
    for p in ps:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    return 0


if __name__ == "__main__":
    sys.exit(main())
