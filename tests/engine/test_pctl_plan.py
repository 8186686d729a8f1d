#!/usr/bin/env python3
"""test_pctl_plan.py: `pctl plan` prints the ZeRO paper's figures (unit).

pctl plan --params 7.5e9 --dp 64 --zero Z prints 120.0, 31.4, 16.6 and 1.9 GB
totals (Psi = 7.5B, N_d = 64, K = 12; Rajbhandari et al. 2020, Figure 1);
--json gives the exact bytes; GPT dims count the working buffers; bad input is
a usage error (exit 2) naming the value.

usage: test_pctl_plan.py PCTL"""
import json
import subprocess
import sys


def main():
    pctl = sys.argv[1]
    failures = 0
    for z, want in enumerate(('120.0 GB', '31.4 GB', '16.6 GB', '1.9 GB')):
        out = subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64', '--zero', str(z)],
                             capture_output=True, text=True, check=True).stdout
        row = [ln for ln in out.splitlines() if ln.startswith(str(z) + ' ')]
        total = row[0].split()[-4:-2] if row else []
        ok = ' '.join(total) == want
        print('zero %d: %s %s' % (z, ' '.join(total), 'ok' if ok else 'FAIL (want %s)' % want))
        failures += not ok
    j = json.loads(subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    exact = [s['total_bytes'] for s in j['stages']]
    ok = exact == [120e9, 31.40625e9, 16.640625e9, 1.875e9]
    print('json totals %s %s' % (exact, 'ok' if ok else 'FAIL'))
    failures += not ok
    # K and precision
    j = json.loads(subprocess.run([pctl, 'plan', '--params', '1000', '--zero', '0',
                                   '--precision', 'fp32', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    ok = j['stages'][0]['total_bytes'] == 16000 and j['optimizer_bytes'] == 8
    print('fp32: %s %s' % (j['stages'][0]['total_bytes'], 'ok' if ok else 'FAIL'))
    failures += not ok
    # GPT dims: 2 layers dim 8 vocab 16 seq 4, dp 2, stage 3 (fp32); wte has
    # vocab 16 padded to 64 rows: embedding E = 64*8+4*8 = 544, layer M =
    # 12*64+13*8 = 872, head H = 2*8 = 16; shard 272+436+436+8 = 1152;
    # params (S + E + M + max(M, H)) * 4, grads (S + E + max(H, M)) * 4,
    # optimizer S*8 (plan.h)
    j = json.loads(subprocess.run([pctl, 'plan', '--layers', '2', '--dim', '8', '--heads', '2',
                                   '--vocab', '16', '--seq', '4', '--dp', '2', '--zero', '3',
                                   '--precision', 'fp32', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    s = j['stages'][0]
    want = ((1152 + 544 + 2 * 872) * 4, (1152 + 544 + 872) * 4, 1152 * 8)
    got = (s['params_bytes'], s['grads_bytes'], s['optimizer_bytes'])
    ok = got == want and s['params_count'] == 544 + 2 * 872 + 16
    print('GPT dims stage 3: %s %s' % (got, 'ok' if ok else 'FAIL want %s' % (want,)))
    failures += not ok
    p = subprocess.run([pctl, 'plan', '--params', '100', '--zero', '5'], capture_output=True,
                       text=True)
    ok = p.returncode == 2 and "'5'" in p.stderr
    print('--zero 5: exit %d %s' % (p.returncode, 'ok' if ok else 'FAIL'))
    failures += not ok
    # a bad value names its flag, in both the "--dp 0" and "--dp=0" forms
    for argv, flag, val in ((['--dp', '0'], '--dp', '0'), (['--layers', 'x'], '--layers', 'x'),
                            (['--dp=0'], '--dp', '0')):
        p = subprocess.run([pctl, 'plan', '--params', '100'] + argv, capture_output=True,
                           text=True)
        ok = p.returncode == 2 and ("'%s' for %s " % (val, flag)) in p.stderr
        print('%s: exit %d %s' % (' '.join(argv), p.returncode,
                                  'ok' if ok else 'FAIL: ' + p.stderr.strip()))
        failures += not ok
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
