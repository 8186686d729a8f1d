#!/usr/bin/python3
"""test_layouts_rows.py: layouts.py's verdicts on made-up metrics (no runs):
equal figures pass; a loss 1e-4 off one rank's, a grad norm 1e-3 off, ranks
that disagree, a step missing, a bf16 loss 2e-2 off fp32 or 2e-3 off the
CPU's bf16, a failed run, and a resumed checkpoint's wrong steps each fail,
naming what; an unknown --only name is refused naming it.
usage: test_layouts_rows.py LAYOUTS_PY"""
import os
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(sys.argv[1])))
import layouts  # noqa: E402


def steps(loss=5.0, norm=1.0, n=layouts.STEPS, scale_step=None, f=1.0):
    return [{'step': s, 'loss': loss * (f if s == scale_step else 1.0) + 0.01 * s,
             'grad_norm': norm} for s in range(1, n + 1)]


def main():
    fails = 0
    ref = [steps()]
    same = [steps(), steps()]

    def case(what, results, want_ok, want_why='', on_cpu=False):
        nonlocal fails
        row = layouts.layout_row('x', 2, ref, results, on_cpu)
        ok = row[6] == want_ok and want_why in row[7]
        print('%s: %s -> %s' % (what, 'ok' if ok else 'FAIL', row))
        fails += not ok

    case('all equal', [same, same, same], True)
    case('all equal, cpu mode (no cpu column)', [same, same], True, on_cpu=True)
    case('fp32 loss 1e-4 off', [[steps(scale_step=3, f=1 + 1e-4)] * 2, same, same], False,
         'fp32 loss')
    case('fp32 norm 1e-3 off', [[steps(norm=1.001)] * 2, [steps(norm=1.001)] * 2,
                                [steps(norm=1.001)] * 2], False, 'fp32 norm')
    case('ranks disagree', [[steps(), steps(loss=5.1)], same, same], False, 'ranks disagree')
    case('a step missing', [[steps(n=4)] * 2, [steps(n=4)] * 2, [steps(n=4)] * 2], False, 'steps')
    case('bf16 2e-2 off fp32', [same, [steps(loss=5.1)] * 2, [steps(loss=5.1)] * 2], False,
         'bf16 vs fp32')
    case('bf16 2e-3 off cpu bf16', [same, same, [steps(scale_step=2, f=1.002)] * 2], False,
         'bf16 vs cpu bf16')
    case('a run failed', [same, None, same], False, 'run failed: bf16')

    class FakeRun:
        def __init__(self, resumed):
            self.resumed = resumed

        def __call__(self, tag, world, device, precision, extra, steps=5):
            if tag.endswith('-save'):
                return [[{'step': s, 'loss': 5.0, 'grad_norm': 1.0} for s in range(1, 7)]]
            return self.resumed
    good = [[{'step': s, 'loss': 5.0, 'grad_norm': 1.0} for s in range(4, 7)]]
    wrong = [[{'step': s, 'loss': 5.0, 'grad_norm': 1.0} for s in range(1, 7)]]
    for what, res, want in (('checkpoint resumed at step 4', good, True),
                            ('checkpoint restarted from step 1', wrong, False),
                            ('checkpoint resume failed', None, False)):
        row = layouts.checkpoint_pair(FakeRun(res), '/nonexistent', 'cuda', 'cpu')
        ok = row[6] == want and row[0] == 'ckpt cuda->cpu'
        print('%s: %s -> %s' % (what, 'ok' if ok else 'FAIL', row))
        fails += not ok
    out = subprocess.run([sys.executable, sys.argv[1], '--rank', 'x', '--work', '/nonexistent',
                          '--only', 'tp2,tp9'], capture_output=True, text=True, timeout=30)
    ok = out.returncode == 2 and 'unknown layout tp9' in out.stderr
    print('--only tp9 refused naming it: %s (%s)' % ('ok' if ok else 'FAIL', out.stderr.strip()[-120:]))
    fails += not ok
    print('test_layouts_rows: %s' % ('PASS' if not fails else '%d FAILED' % fails))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
