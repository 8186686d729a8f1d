#!/usr/bin/python3
"""test_sim.py: the engine's device path on the simulated device (issue 12;
kernels/px_kernels_sim.h), against the same run on cpu.

The sim device is the CPU op table over an arena the host cannot touch
(PROT_NONE outside the table's ops), staged by the transport exactly as CUDA
buffers are: a host read or write of a device tensor kills the rank (the
test then fails with the rank's log, which names the address and has a
backtrace). Model: 2 layers, 4 heads, dim 32, seq 16, global batch 8, 3
steps, clip 1.0, one seed and data file. For each layout, the run with
--device sim against the same layout on cpu (standalone bootstrap,
PX_SIM_DEVICE=1 in the environment):
  * every rank reports the same loss and grad norm as rank 0, each step's
    within 1e-5 relative of the cpu run (equivalence_problems), and BIT FOR
    BIT equal where the op order is the same (every layout here: the sim
    runs the CPU ops on the same bytes, and staging is bit for bit the host
    path, px_stage.c; the runs use PX_SHM=0, as the staged collectives
    reproduce the UCX host path's sum order, not the shared-memory one's);
  * step 1's gradient gathered to the canonical layout (--dump-dir) within
    1e-4 relative tensor by tensor (test_tp.grad_errors), and bit for bit;
  * the rank's log names the device (sim).
Also: --device sim without PX_SIM_DEVICE=1 is refused, naming the device and
the variable; LAYOUT 'ckpt': checkpoints, resume, validation and the
safetensors export on device ranks (ckpt_case).
usage: test_sim.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]"""
import os
import sys
import time

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from test_tp import grad_errors  # noqa: E402
from zero_util import equivalence_problems, license_tokens, log_text, run_world  # noqa: E402

ARGS = ['--layers', '2', '--heads', '4', '--dim', '32', '--seq', '16', '--batch', '8',
        '--steps', '3', '--lr', '1e-3', '--seed', '1337', '--grad-clip', '1.0']
MOE = ['--experts', '4', '--top-k', '2', '--dropless']
STEPS = 3
TOL_LOSS = TOL_NORM = 1e-5
TOL_GRAD = 1e-4
LAYOUTS = {  # name: (world, extra args)
    'one': (1, []),
    'dp2': (2, ['--dp', '2']),
    'dp2z1': (2, ['--dp', '2', '--zero', '1']),
    'dp2z2': (2, ['--dp', '2', '--zero', '2']),
    'dp2z3': (2, ['--dp', '2', '--zero', '3']),
    'tp2': (2, ['--tp', '2']),
    'tp2sp': (2, ['--tp', '2', '--sequence-parallel']),
    'dp2tp2z3': (4, ['--dp', '2', '--tp', '2', '--zero', '3']),
    'dp2bf16': (2, ['--dp', '2', '--zero', '1', '--precision', 'bf16']),
    'pp2': (2, ['--pp', '2', '--micro-batches', '2', '--schedule', '1f1b']),
    'pp2zb1': (2, ['--pp', '2', '--micro-batches', '2', '--schedule', 'zb1']),
    'pp2int': (2, ['--pp', '2', '--micro-batches', '2', '--schedule', 'interleaved',
                   '--virtual-stages', '2', '--layers', '4']),
    'dp2pp2z1': (4, ['--dp', '2', '--pp', '2', '--micro-batches', '2', '--schedule', 'gpipe',
                     '--zero', '1']),
    'tp2pp2': (4, ['--tp', '2', '--pp', '2', '--micro-batches', '2', '--schedule', '1f1b']),
    'cp2': (2, ['--cp', '2']),
    'dp2cp2z3': (4, ['--dp', '2', '--cp', '2', '--zero', '3']),
    'cp2tp2sp': (4, ['--cp', '2', '--tp', '2', '--sequence-parallel']),
    'cp2pp2': (4, ['--cp', '2', '--pp', '2', '--micro-batches', '2', '--schedule', '1f1b']),
    'cp2pp2bf16': (4, ['--cp', '2', '--pp', '2', '--micro-batches', '2', '--schedule', 'zb1',
                       '--precision', 'bf16']),
    'ep2bf16': (2, MOE + ['--dp', '2', '--ep', '2', '--precision', 'bf16']),
    'moe1': (1, MOE),
    'ep2': (2, MOE + ['--dp', '2', '--ep', '2']),
    'dp2ep2z3': (4, MOE + ['--dp', '4', '--ep', '2', '--zero', '3']),
    'cp2ep2': (4, MOE + ['--dp', '2', '--cp', '2', '--ep', '2']),
    'pp2ep2': (4, MOE + ['--dp', '2', '--pp', '2', '--ep', '2', '--micro-batches', '2',
                         '--schedule', '1f1b']),
    'ep2cap': (2, ['--experts', '4', '--top-k', '1', '--capacity-factor', '1.0', '--dp', '2',
                   '--ep', '2', '--test-router-skew', '2.0']),
}
DEFAULT = ['one', 'dp2', 'dp2z1', 'dp2z2', 'dp2z3', 'tp2', 'tp2sp', 'dp2bf16']


def read_bytes(path):
    with open(path, 'rb') as f:
        return f.read()


def same_tree(a, b):
    """the files under a and b, byte for byte (names and contents)"""
    fa = sorted(os.path.relpath(os.path.join(d, f), a) for d, _, fs in os.walk(a) for f in fs)
    fb = sorted(os.path.relpath(os.path.join(d, f), b) for d, _, fs in os.walk(b) for f in fs)
    return fa == fb and fa and all(read_bytes(os.path.join(a, f)) == read_bytes(os.path.join(b, f))
                                   for f in fa)


def ckpt_case(rank_bin, args, work):
    """Checkpoints, validation and the safetensors export on device ranks:
    dp 2 x ep 2 with experts and a validation file, 4 steps, a checkpoint
    every 2 and validation every 2, then step 2 resumed; on sim and on cpu:
    the checkpoints and exports byte for byte, every step's loss, grad norm
    and validation loss (first run and resumed run) bit for bit."""
    t0 = time.time()
    data = args[args.index('--data') + 1]
    base = ['4' if i and args[i - 1] == '--steps' else a for i, a in enumerate(args)]
    base = base + MOE + ['--dp', '2', '--ep', '2', '--val-data', data, '--eval-every', '2',
                         '--eval-batches', '1']
    got, bad = {}, []
    for dev in ('cpu', 'sim'):
        ck = os.path.join(work, 'ck_%s' % dev)
        st = os.path.join(work, 'export_%s.safetensors' % dev)
        r1 = run_world(rank_bin, base + ['--device', dev, '--checkpoint-every', '2',
                                         '--checkpoint-dir', ck, '--export-safetensors', st],
                       work, 'ckpt_%s' % dev, 2)
        r2 = run_world(rank_bin, base + ['--device', dev, '--resume',
                                         os.path.join(ck, 'step_2')],
                       work, 'ckpt_resume_%s' % dev, 2)
        if r1 is None or r2 is None:
            bad.append('a %s run failed' % dev)
            continue
        got[dev] = ([(m['step'], m['loss'], m['grad_norm'], m.get('val_loss')) for m in r1[0]],
                    [(m['step'], m['loss'], m['grad_norm'], m.get('val_loss')) for m in r2[0]],
                    ck, st)
    if not bad:
        c, s_ = got['cpu'], got['sim']
        if c[0] != s_[0] or c[1] != s_[1]:
            bad.append('metrics differ: cpu %s %s, sim %s %s' % (c[0], c[1], s_[0], s_[1]))
        if not any(v is not None for *_, v in s_[0]):
            bad.append('no validation loss reported')
        if c[0][2:] != c[1] or len(c[1]) != 2:
            bad.append('the resumed run does not continue the first: %s vs %s' % (c[0], c[1]))
        if not same_tree(os.path.join(c[2], 'step_2'), os.path.join(s_[2], 'step_2')):
            bad.append('the step-2 checkpoints differ')
        if read_bytes(c[3]) != read_bytes(s_[3]):
            bad.append('the safetensors exports differ')
    print('%-9s %.1f s  checkpoint, resume, validation, export on sim vs cpu: %s' % (
        'ckpt', time.time() - t0, 'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
    return len(bad)


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    names = sys.argv[4:] or DEFAULT
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data, '--dump-steps', '1']
    os.environ['PX_SHM'] = '0'
    failures = 0

    # refused without the variable, naming it
    os.environ.pop('PX_SIM_DEVICE', None)
    r = run_world(rank_bin, args + ['--device', 'sim'], work, 'nosim', 1, expect_fail=True)
    text = log_text(work, 'nosim')
    ok = r is None and "device 'sim'" in text and 'PX_SIM_DEVICE=1' in text
    print('sim without PX_SIM_DEVICE=1: %s' % ('refused ok' if ok else 'FAIL: ' + text[-500:]))
    failures += not ok
    os.environ['PX_SIM_DEVICE'] = '1'

    for name in names:
        if name == 'ckpt':
            failures += ckpt_case(rank_bin, args, work)
            continue
        world, extra = LAYOUTS[name]
        t0 = time.time()
        dumps, runs = {}, {}
        for dev in ('cpu', 'sim'):
            dumps[dev] = os.path.join(work, 'dump_%s_%s' % (name, dev))
            runs[dev] = run_world(rank_bin, args + extra + ['--device', dev, '--dump-dir',
                                                            dumps[dev]],
                                  work, '%s_%s' % (name, dev), world)
        if runs['cpu'] is None or runs['sim'] is None:
            print('%-9s FAIL: a run failed (%s)' % (name, 'cpu' if runs['cpu'] is None else
                                                     'sim'))
            failures += 1
            continue
        bad, worst_l, worst_n = equivalence_problems(runs['sim'], runs['cpu'][0], STEPS, TOL_LOSS,
                                                     TOL_NORM)
        gerr, gname = grad_errors(dumps['sim'], dumps['cpu'])
        if not gerr <= TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        bitwise = [(m['loss'], m['grad_norm']) for m in runs['sim'][0]] == \
            [(m['loss'], m['grad_norm']) for m in runs['cpu'][0]] and \
            read_bytes(os.path.join(dumps['sim'], 'grads_1.bin')) == \
            read_bytes(os.path.join(dumps['cpu'], 'grads_1.bin'))
        if not bitwise:
            bad.append('not bit for bit the cpu run')
        if 'device sim' not in log_text(work, '%s_sim' % name):
            bad.append("the rank log does not say 'device sim'")
        print('%-9s %.1f s  worst loss rel %.1e  norm rel %.1e  step-1 grad rel %.1e (%s)  '
              'bitwise %s  %s' % (name, time.time() - t0, worst_l, worst_n, gerr, gname,
                                  bitwise, 'ok' if not bad else 'FAIL: ' + '; '.join(bad)))
        failures += len(bad)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
