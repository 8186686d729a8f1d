#!/usr/bin/env python3
"""bench_pp.py: the pipeline bubble and activation memory of GPipe and 1F1B
(benchmark, not a test; issue 10).

pp = 4 stages (one layer each: 4 layers, 4 heads, dim 256, seq 64, vocab
256, micro-batches of 4 sequences), M = 4, 8, 16 micro-batches, STEPS steps
(default 6) through the standalone bootstrap on this machine's cores. Per
schedule and M: the measured idle fraction of each stage (pp_idle_s /
(pp_busy_s + pp_idle_s), the step metrics of pipeline.h), median over steps
2.., next to GPipe's and 1F1B's bubble (p-1)/(M+p-1) (Narayanan et al.
2021, section 2.2), and the idle fraction the schedule checker's
simulation gives with a backward twice a forward and free messages
(`parallax-rank --print-schedule` shows the lists). Then the peak
activation bytes per stage (memacct) of GPipe and 1F1B at M = 16.

The measured figures need a core per rank: with fewer cores than the 4
ranks the stages share cores and a waiting stage lends its core to the
others, so the measured idle fraction is not the schedule's bubble.

usage: bench_pp.py RANK_BIN MAKE_TOKENS_PY WORKDIR [STEPS]"""
import os
import statistics
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'engine'))
from zero_util import license_tokens, run_world  # noqa: E402

P = 4
DIMS = ['--layers', '4', '--heads', '4', '--dim', '256', '--seq', '64']
MB = 4  # sequences per micro-batch


def simulate(schedule, p, m, tf=1.0, tb=2.0):
    """Idle fraction per stage of the action lists (same lists as the
    engine: pipesched.c) run with forward tf, backward tb, messages free."""
    lists = []
    for s in range(p):
        acts = []
        fw = lambda k: acts.append(('F', k))  # noqa: E731
        bw = lambda k: acts.append(('B', k))  # noqa: E731
        if schedule == 'gpipe':
            for k in range(m):
                fw(k)
            for k in range(m):
                bw(k)
        else:
            warm = min(p - s - 1, m)
            for k in range(warm):
                fw(k)
            for i in range(m - warm):
                fw(warm + i)
                bw(i)
            for k in range(m - warm, m):
                bw(k)
        lists.append(acts)
    done = [dict() for _ in range(p)]  # (op, k) -> finish time
    clock = [0.0] * p
    pcs = [0] * p
    while any(pcs[s] < len(lists[s]) for s in range(p)):
        moved = False
        for s in range(p):
            if pcs[s] == len(lists[s]):
                continue
            op, k = lists[s][pcs[s]]
            if op == 'F':
                dep = done[s - 1].get(('F', k)) if s > 0 else 0.0
            else:
                dep = done[s + 1].get(('B', k)) if s < p - 1 else done[s].get(('F', k))
            if dep is None:
                continue
            start = max(clock[s], dep)
            clock[s] = start + (tf if op == 'F' else tb)
            done[s][(op, k)] = clock[s]
            pcs[s] += 1
            moved = True
        assert moved, 'deadlock'
    end = max(clock)
    busy = m * (tf + tb)
    return [(end - busy) / end for _ in range(p)]


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('pp=%d, %s, micro-batch %d sequences, %d steps, %d cores' % (
        P, ' '.join(DIMS), MB, steps, os.cpu_count()))
    print('%-6s %3s  %-32s %6s  %6s  %s' % ('sched', 'M', 'measured idle per stage', 'mean',
                                            '(p-1)/(M+p-1)', 'simulated (B = 2F)'))
    peaks = {}
    for sched in ('gpipe', '1f1b'):
        for m in (4, 8, 16):
            tag = '%s_m%d' % (sched, m)
            args = DIMS + ['--batch', str(MB * m), '--steps', str(steps), '--data', data,
                           '--pp', str(P), '--micro-batches', str(m), '--schedule', sched,
                           '--lr', '1e-3']
            runs = run_world(rank_bin, args, work, tag, P, deadline_s=600)
            if runs is None:
                print('%s: failed' % tag)
                return 1
            idle = []
            for rr in runs:
                fr = [x['pp_idle_s'] / (x['pp_idle_s'] + x['pp_busy_s']) for x in rr[1:]]
                idle.append(statistics.median(fr))
            peaks[(sched, m)] = [rr[-1]['memory']['activations']['peak'] for rr in runs]
            theory = (P - 1) / (m + P - 1)
            sim = simulate(sched, P, m)
            print('%-6s %3d  %-32s %5.1f%%  %6.1f%%        %5.1f%%' % (
                sched, m, ' '.join('%5.1f%%' % (100 * f) for f in idle),
                100 * statistics.mean(idle), 100 * theory, 100 * statistics.mean(sim)))
    print('peak activation bytes per stage at M=16:')
    for sched in ('gpipe', '1f1b'):
        print('  %-6s %s' % (sched, ' '.join('%10d' % b for b in peaks[(sched, 16)])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
