#!/usr/bin/python3
"""torch_ddp_bench.py: the PyTorch peer of parallax's data parallelism
(bench_ddp.py runs it beside parallax-rank at dp=N). torch_gpt_model.GPT
under DistributedDataParallel over Gloo on CPU: --world processes of
--threads torch threads each (torch.multiprocessing), the GLOBAL --batch
split evenly over them, DDP's gradient buckets of --bucket-mb MiB (25, its
default). Each process trains on its own fixed random batch: 3 warm-up
steps, a barrier, --steps timed steps, a barrier. Rank 0 prints one line:

  torch VERSION DDP gloo world=.. threads=.. params=N B=.. T=.. L=.. C=..: X ms/step, Y tokens/s

(Y: global tokens per second.) The rendezvous is 127.0.0.1:--port. Needs
PyTorch: Debian's python3-torch, hence /usr/bin/python3.

  tests/bench/torch_ddp_bench.py --world 2 --layers 4 --heads 4 --dim 128 --seq 128 --batch 16
"""
import argparse
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402
import torch.multiprocessing as mp  # noqa: E402
from torch.nn.parallel import DistributedDataParallel as DDP  # noqa: E402
from torch_gpt_model import add_model_args, build  # noqa: E402


def worker(rank, a):
    os.environ['MASTER_ADDR'] = '127.0.0.1'
    os.environ['MASTER_PORT'] = str(a.port)
    torch.set_num_threads(a.threads)
    dist.init_process_group('gloo', rank=rank, world_size=a.world)
    model, _ = build(a)  # the same initial weights on every rank (seed 0)
    model = DDP(model, bucket_cap_mb=a.bucket_mb)
    opt = torch.optim.AdamW(model.parameters(), lr=a.lr)
    b = a.batch // a.world
    g = torch.Generator().manual_seed(rank)
    x = torch.randint(0, a.vocab, (b, a.seq), generator=g)
    y = torch.randint(0, a.vocab, (b, a.seq), generator=g)

    def step():
        opt.zero_grad()
        model(x, y).backward()
        opt.step()

    for _ in range(3):
        step()
    dist.barrier()
    t0 = time.time()
    for _ in range(a.steps):
        step()
    dist.barrier()
    dt = time.time() - t0
    if rank == 0:
        n = sum(t.numel() for t in model.parameters())
        print('torch %s DDP gloo world=%d threads=%d params=%d B=%d T=%d L=%d C=%d: '
              '%.1f ms/step, %.0f tokens/s' % (torch.__version__, a.world, a.threads, n, a.batch,
                                               a.seq, a.layers, a.dim, dt / a.steps * 1e3,
                                               a.batch * a.seq * a.steps / dt), flush=True)
    dist.destroy_process_group()


def main():
    p = argparse.ArgumentParser(description=__doc__.split('\n')[0])
    add_model_args(p, batch_help='GLOBAL batch in sequences, divisible by --world')
    p.set_defaults(batch=16)
    p.add_argument('--world', type=int, default=2, help='processes (data-parallel ranks)')
    p.add_argument('--port', type=int, default=29533, help='rendezvous port on 127.0.0.1')
    p.add_argument('--bucket-mb', type=float, default=25.0, help="DDP's bucket_cap_mb")
    a = p.parse_args()
    if a.world < 1 or a.batch % a.world:
        p.error('--batch %d is not divisible by --world %d' % (a.batch, a.world))
    mp.spawn(worker, args=(a,), nprocs=a.world)
    return 0


if __name__ == '__main__':
    sys.exit(main())
