#!/usr/bin/python3
"""NCCL's collectives through torch.distributed, the NCCL column of the
device check's collectives section (coll.py): all-reduce, all-gather,
reduce-scatter and all-to-all, sizes --min to --max (x4), busbw as
nccl-tests counts it (all-reduce 2(n-1)/n, the others (n-1)/n, times
algbw = bytes / time; bytes: the whole buffer, all ranks' parts).

World: --world, else 2 where the machine has 2 GPUs (one each), else 1:
NCCL refuses two ranks on one GPU ("invalid usage"/"Duplicate GPU"), so on
one GPU only world 1 can run, and a line says the 2-rank figure cannot be
measured there.

Output: per op one JSON line {"op", "world", "rows": [{"size", "time_us",
"algbw", "busbw"}]}; other lines are notes. Exits 0 when NCCL could not run
(the note says why), so the check goes on.
usage: nccl_bench.py [--world N] [--min 4K] [--max 256M] [--ops a,b]"""
import argparse
import json
import os
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

FACTOR = {'all_reduce': lambda n: 2 * (n - 1) / n, 'all_gather': lambda n: (n - 1) / n,
          'reduce_scatter': lambda n: (n - 1) / n, 'all_to_all': lambda n: (n - 1) / n}


def size_arg(s):
    mult = {'K': 1 << 10, 'M': 1 << 20, 'G': 1 << 30}
    s = s.strip().upper()
    return int(s[:-1]) * mult[s[-1]] if s[-1] in mult else int(s)


def run(rank, world, port, a, q):
    os.environ['MASTER_ADDR'], os.environ['MASTER_PORT'] = '127.0.0.1', str(port)
    torch.cuda.set_device(rank % torch.cuda.device_count())
    try:
        dist.init_process_group('nccl', rank=rank, world_size=world)
        for op in a.ops:
            rows, size = [], a.min
            while size <= a.max:
                n = max(world, size // 4 // world * world)  # floats, a multiple of world
                buf = torch.ones(n, device='cuda')
                out = torch.empty(n, device='cuda')
                part = torch.empty(n // world, device='cuda')

                def once():
                    if op == 'all_reduce':
                        dist.all_reduce(buf)
                    elif op == 'all_gather':
                        dist.all_gather_into_tensor(out, buf[: n // world])
                    elif op == 'reduce_scatter':
                        dist.reduce_scatter_tensor(part, buf)
                    else:
                        dist.all_to_all_single(out, buf)
                for _ in range(5):
                    once()
                torch.cuda.synchronize()
                iters = 200 if size < (1 << 20) else 20
                t0 = time.perf_counter()
                for _ in range(iters):
                    once()
                torch.cuda.synchronize()
                dt = (time.perf_counter() - t0) / iters
                algbw = n * 4 / dt / 1e9
                rows.append({'size': size, 'time_us': round(dt * 1e6, 2),
                             'algbw': round(algbw, 3),
                             'busbw': round(algbw * FACTOR[op](world), 3)})
                size *= 4
            if rank == 0:
                q.put(json.dumps({'op': op, 'world': world, 'rows': rows}))
        dist.destroy_process_group()
    except Exception as e:  # NCCL's refusals land here
        if rank == 0:
            q.put('nccl: not run: %s: %s' % (type(e).__name__, str(e).splitlines()[0][:200]))
    if rank == 0:
        q.put(None)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument('--world', type=int, default=0)
    ap.add_argument('--min', type=size_arg, default=4 << 10)
    ap.add_argument('--max', type=size_arg, default=256 << 20)
    ap.add_argument('--ops', default=','.join(FACTOR))
    ap.add_argument('--timeout', type=int, default=240)
    a = ap.parse_args()
    a.ops = [o for o in a.ops.split(',') if o]
    bad = [o for o in a.ops if o not in FACTOR]
    if bad:
        ap.error('unknown op %s (one of %s)' % (', '.join(bad), ', '.join(FACTOR)))
    if not torch.cuda.is_available():
        print('nccl: not run: no CUDA device')
        return 0
    ngpu = torch.cuda.device_count()
    world = a.world or min(2, ngpu)
    if world < 2:
        print('nccl: %d GPU: NCCL at world 1 only; the 2-rank NCCL figure cannot be measured '
              'on this machine (NCCL refuses two ranks on one GPU)' % ngpu)
    ctx = mp.get_context('spawn')
    q = ctx.Queue()
    port = 29611 + os.getpid() % 1000
    ps = [ctx.Process(target=run, args=(r, world, port, a, q)) for r in range(world)]
    for p in ps:
        p.start()
    deadline = time.time() + a.timeout
    try:
        while True:
            item = q.get(timeout=max(1, deadline - time.time()))
            if item is None:
                break
            print(item, flush=True)
    except Exception:
        print('nccl: no complete result within %d s' % a.timeout)
    for p in ps:
        p.join(timeout=10)
        if p.is_alive():
            p.kill()
    return 0


if __name__ == '__main__':
    sys.exit(main())
