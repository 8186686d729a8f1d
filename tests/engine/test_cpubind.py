#!/usr/bin/env python3
"""test_cpubind.py: --cpu-bind (issue 13) on real ranks (integration).

  * a bad value is refused before anything runs, naming it: parallax-rank
    exits 2, `pctl submit` exits non-zero (no daemon needed: pctl checks
    its flags before it connects);
  * dp 2, ZeRO-3, --cpu-bind cores: each rank logs the CPU it bound and the
    kernel's Cpus_allowed_list after binding: one CPU each, distinct, the
    first two of this process's allowed CPUs in rank order; and the run
    matches one rank (loss and grad norm 1e-5 of each step, every step-1
    gradient tensor 1e-4: equivalence_problems, grad_errors);
  * --cpu-bind none: not bound; auto with 4 ranks and fewer than 4 allowed
    CPUs: not bound, saying why; under `taskset -c C` (a one-CPU set)
    auto leaves 2 ranks unbound and cores puts both on C (the allowed set
    is respected).

usage: test_cpubind.py RANK_BIN PCTL MAKE_TOKENS_PY WORKDIR"""
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import equivalence_problems, license_tokens, log_text, run_world  # noqa: E402
from test_tp import grad_errors  # noqa: E402

ARGS = ['--layers', '2', '--heads', '2', '--dim', '32', '--seq', '32', '--batch', '8',
        '--steps', '4', '--lr', '1e-3', '--seed', '1337', '--dump-steps', '1']
STEPS = 4
TOL, TOL_GRAD = 1e-5, 1e-4
BOUND = re.compile(r'cpu-bind (\w+): bound to CPU (\d+) \(local rank (\d+) of (\d+).*'
                   r'Cpus_allowed_list (\S+)')
NOT_BOUND = re.compile(r'cpu-bind (\w+): not bound(.*)')


def bound(work, tag, world):
    """per rank: (cpu, Cpus_allowed_list) when its log says it bound, else None"""
    out = []
    for r in range(world):
        m = BOUND.search(log_text(work, tag, r))
        out.append((int(m.group(2)), m.group(5)) if m else None)
    return out


def main():
    if len(sys.argv) != 5:
        print(__doc__)
        return 2
    rank_bin, pctl, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    args = ARGS + ['--data', data]
    allowed = sorted(os.sched_getaffinity(0))
    failures = 0

    def check(ok, what):
        nonlocal failures
        print('%s %s' % ('ok  ' if ok else 'FAIL', what))
        failures += not ok

    # bad values, before anything runs
    p = subprocess.run([rank_bin] + args + ['--cpu-bind', 'sockets'], capture_output=True,
                       text=True, timeout=60)
    check(p.returncode == 2 and 'sockets' in p.stderr,
          'parallax-rank --cpu-bind sockets: exit %d, %r' % (p.returncode, p.stderr.strip()[-200:]))
    p = subprocess.run([pctl, '--server', 'unix:' + os.path.join(work, 'no-daemon.sock'), 'submit',
                        '--data', data, '--layers', '2', '--heads', '2', '--dim', '32',
                        '--seq', '32', '--batch', '8', '--steps', '4', '--cpu-bind', 'sockets'],
                       capture_output=True, text=True, timeout=60)
    check(p.returncode != 0 and 'sockets' in p.stderr,
          'pctl submit --cpu-bind sockets: exit %d, %r' % (p.returncode, p.stderr.strip()[-200:]))

    # one rank, the reference (auto: a lone rank is not bound)
    base_dump = os.path.join(work, 'dump_base')
    base = run_world(rank_bin, args + ['--dump-dir', base_dump], work, 'base', 1)
    if base is None:
        print('FAIL: single-rank run failed')
        return 1
    base = base[0]
    m = NOT_BOUND.search(log_text(work, 'base'))
    check(m is not None and 'only rank' in m.group(2), 'one rank, auto: not bound')

    # dp 2, ZeRO-3, cores: distinct CPUs, the first allowed ones, and equivalence
    dump = os.path.join(work, 'dump_cores')
    runs = run_world(rank_bin, args + ['--zero', '3', '--cpu-bind', 'cores', '--dump-dir', dump],
                     work, 'cores', 2)
    if runs is None:
        check(False, 'dp2 cores: a rank failed')
    else:
        got = bound(work, 'cores', 2)
        want = [allowed[i % len(allowed)] for i in range(2)]
        check(got == [(c, str(c)) for c in want],
              'dp2 cores: bound (CPU, Cpus_allowed_list) per rank %s, expected CPUs %s' %
              (got, want))
        bad, wl, wn = equivalence_problems(runs, base, STEPS, TOL, TOL)
        gerr, gname = grad_errors(dump, base_dump)
        if gerr > TOL_GRAD:
            bad.append('step-1 gradient of %s rel %.1e > %g' % (gname, gerr, TOL_GRAD))
        check(not bad, 'dp2 zero3 cores vs one rank: loss rel %.1e, norm rel %.1e, grad rel '
              '%.1e (%s) %s' % (wl, wn, gerr, gname, '; '.join(bad)))

    short = [a if a != str(STEPS) else '1' for a in ARGS] + ['--data', data]
    # none: not bound
    runs = run_world(rank_bin, short + ['--cpu-bind', 'none'], work, 'none', 2)
    check(runs is not None and bound(work, 'none', 2) == [None, None] and
          'cpu-bind none: not bound' in log_text(work, 'none', 1), 'dp2 none: not bound')
    # auto with more ranks than allowed CPUs: not bound
    if len(allowed) < 4:
        runs = run_world(rank_bin, short, work, 'auto4', 4)
        check(runs is not None and bound(work, 'auto4', 4) == [None] * 4 and
              'more of the job' in log_text(work, 'auto4', 3),
              'dp4 auto on %d allowed CPUs: not bound' % len(allowed))
    # a one-CPU allowed set (taskset): auto does not bind 2 ranks, cores puts both on it
    cpu = allowed[-1]
    ts = os.path.join(work, 'taskset_rank.sh')
    with open(ts, 'w') as f:
        f.write('#!/bin/sh\nexec taskset -c %d %s "$@"\n' % (cpu, rank_bin))
    os.chmod(ts, 0o755)
    runs = run_world(ts, short, work, 'set_auto', 2)
    check(runs is not None and bound(work, 'set_auto', 2) == [None, None],
          'taskset -c %d, dp2 auto: not bound' % cpu)
    runs = run_world(ts, short + ['--cpu-bind', 'cores'], work, 'set_cores', 2)
    got = bound(work, 'set_cores', 2) if runs is not None else None
    check(got == [(cpu, str(cpu))] * 2, 'taskset -c %d, dp2 cores: %s' % (cpu, got))
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


if __name__ == '__main__':
    sys.exit(main())
