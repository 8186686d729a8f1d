#!/usr/bin/env python3
"""test_device_flag.py: parallax-rank --device (unit suite; runs without a GPU).

`--device cpu` and `cpu:1` train (exit 0, one line per step, the same losses
as no flag); an unknown device, a malformed CUDA ordinal, and a CUDA device
this process cannot use (no GPU visible, or a build without CUDA) fail with
a non-zero exit and a message naming the value; --precision fp32 trains the
same losses as no flag, bf16 trains 3 steps and says so in its log (the
losses are bf16's: tests/engine/test_bf16.py checks them), unknown names are
refused, named. Where a GPU is visible the
CUDA cases are the gpu suite's (px-opcheck) and are skipped here.

usage: test_device_flag.py RANK_BIN MAKE_TOKENS_PY WORKDIR HAVE_CUDA(0|1)"""
import os
import subprocess
import sys


def main():
    rank_bin, make_tokens, work, have_cuda = sys.argv[1], sys.argv[2], sys.argv[3], sys.argv[4] == '1'
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data, '/usr/share/common-licenses/GPL-3'],
                   check=True, stdout=subprocess.DEVNULL)
    env = {k: v for k, v in os.environ.items() if not k.startswith('PX_')}
    env['CUDA_VISIBLE_DEVICES'] = ''  # no GPU for this process, even on a GPU machine
    base = ['--layers', '1', '--heads', '2', '--dim', '16', '--seq', '16', '--batch', '2',
            '--steps', '3', '--data', data]
    fails = 0

    def run(args):
        return subprocess.run([rank_bin] + base + args, capture_output=True, text=True, env=env,
                              timeout=60)

    def losses(p):
        return [l.split()[3] for l in p.stdout.splitlines() if l.startswith('step')]

    ref = run([])
    if ref.returncode != 0 or len(losses(ref)) != 3:
        print('reference run failed:', ref.returncode, ref.stderr[-800:])
        return 1
    for dev in ('cpu', 'cpu:1'):
        p = run(['--device', dev])
        ok = p.returncode == 0 and losses(p) == losses(ref)
        print('%-12s exit %d losses %s %s' % (dev, p.returncode, losses(p), 'ok' if ok else 'FAIL'))
        fails += not ok
    cuda_msg = ('this process sees 0 CUDA devices' if have_cuda
                else 'this build has no CUDA backend')
    for dev, needle in (('tpu:0', "unknown device 'tpu:0'"),
                        ('cuda:x', "bad CUDA device 'cuda:x'"),
                        ('cuda:-1', "bad CUDA device 'cuda:-1'"),
                        ('cuda', "device 'cuda': " + cuda_msg),
                        ('cuda:3', "device 'cuda:3': " + cuda_msg)):
        p = run(['--device', dev])
        ok = p.returncode != 0 and needle in p.stderr and not losses(p)
        print('%-12s exit %d %-50s %s' % (dev, p.returncode, needle, 'ok' if ok else 'FAIL'))
        if not ok:
            print(p.stderr[-800:])
        fails += not ok
    # --precision: fp32 is the default, bf16 trains; unknown names are refused, named
    p = run(['--precision', 'fp32'])
    ok = p.returncode == 0 and losses(p) == losses(ref)
    print('%-12s exit %d %s' % ('fp32', p.returncode, 'ok' if ok else 'FAIL'))
    fails += not ok
    p = run(['--precision', 'bf16'])
    ok = (p.returncode == 0 and len(losses(p)) == 3 and
          'precision bf16 (bf16 GEMM and attention operands, fp32 elsewhere)' in p.stderr)
    print('%-12s exit %d %s' % ('bf16', p.returncode, 'ok' if ok else 'FAIL'))
    if not ok:
        print(p.stderr[-800:])
    fails += not ok
    for prec, needle in (('fp16', "'fp16' is not fp32 or bf16"),):
        p = run(['--precision', prec])
        ok = p.returncode != 0 and needle in p.stderr and not losses(p)
        print('%-12s exit %d %-50s %s' % (prec, p.returncode, needle, 'ok' if ok else 'FAIL'))
        if not ok:
            print(p.stderr[-800:])
        fails += not ok
    print('FAIL' if fails else 'PASS')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
