#!/usr/bin/env python3
"""bench_pp.py: the pipeline bubble and activation memory of GPipe, 1F1B, ZB-H1
and interleaved 1F1B (benchmark, not a test; issue 10).

pp = 4 stages (two layers each: 8 layers, 4 heads, dim 256, seq 64, vocab
256, micro-batches of 4 sequences; interleaved: V = 2 chunks of one layer
per stage), M = 4, 8, 16 micro-batches, STEPS steps
(default 6) through the standalone bootstrap on this machine's cores. Per
schedule and M: the measured idle fraction of each stage (pp_idle_s /
(pp_busy_s + pp_idle_s), the step metrics of pipeline.h), median over steps
2.., next to GPipe's and 1F1B's bubble (p-1)/(M+p-1) (Narayanan et al.
2021, section 2.2; ZB-H1's goal: at most half 1F1B's; interleaved's
(p-1)/(V*M+p-1), section 2.2.2), and the idle
fraction of the engine's own action lists (`parallax-rank
--print-schedule`) timed with a backward twice a forward (ZB1: input and
weight pass one forward each; interleaved: a chunk's passes 1/V of
those) and free messages. Then the peak activation bytes per stage
(memacct) of every schedule at M = 16.

The measured figures need a core per rank: with fewer cores than the 4
ranks the stages share cores and a waiting stage lends its core to the
others, so the measured idle fraction is not the schedule's bubble.

usage: bench_pp.py RANK_BIN MAKE_TOKENS_PY WORKDIR [STEPS] [SCHEDULE,...]"""
import os
import re
import statistics
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, '..', 'engine'))
from zero_util import license_tokens, run_world  # noqa: E402

P = 4
V = 2  # interleaved: chunks per stage
DIMS = ['--layers', str(P * V), '--heads', '4', '--dim', '256', '--seq', '64']
MB = 4  # sequences per micro-batch
SCHEDULES = ('gpipe', '1f1b', 'zb1', 'interleaved')


def sched_args(schedule):
    return ['--schedule', schedule] + (['--virtual-stages', str(V)]
                                       if schedule == 'interleaved' else [])


def simulate(rank_bin, schedule, p, m):
    """Idle fraction per stage of the engine's own action lists
    (`parallax-rank --print-schedule`) with forward 1, backward 2 (split
    schedules: input pass 1, weight pass 1; interleaved: a chunk's passes
    1/V of those) and free messages. An action (op, micro-batch, chunk)
    of stage s runs on virtual stage c*p + s; a forward waits for the
    previous virtual stage's, a backward for the next one's."""
    out = subprocess.run([rank_bin, '--pp', str(p), '--micro-batches', str(m),
                          '--print-schedule'] + sched_args(schedule), check=True,
                         capture_output=True, text=True).stdout
    lists = []
    for line in out.splitlines():
        if line.startswith('stage '):
            acts = []
            for tok in line.split(':', 1)[1].split():
                op = re.match(r'([A-Za-z<>]+)(\d+)(?:\.(\d+))?$', tok)
                if op and op.group(1) in ('F', 'B', 'W'):
                    acts.append((op.group(1), int(op.group(2)), int(op.group(3) or 0)))
            lists.append(acts)
    split = any(a[0] == 'W' for acts in lists for a in acts)
    v = 1 + max(a[2] for acts in lists for a in acts)
    cost = {'F': 1.0 / v, 'B': (1.0 if split else 2.0) / v, 'W': 1.0 / v}
    last = p * v - 1
    done = [dict() for _ in range(p)]  # (op, k) -> finish time
    clock = [0.0] * p
    pcs = [0] * p
    while any(pcs[s] < len(lists[s]) for s in range(p)):
        moved = False
        for s in range(p):
            if pcs[s] == len(lists[s]):
                continue
            op, k, c = lists[s][pcs[s]]
            j = c * p + s  # virtual stage
            dep = 0.0
            if op == 'F' and j > 0:
                dep = done[(j - 1) % p].get(('F', k, (j - 1) // p))
            elif op == 'B' and j < last:
                dep = done[(j + 1) % p].get(('B', k, (j + 1) // p))
            if dep is None:
                continue
            clock[s] = max(clock[s], dep) + cost[op]
            done[s][(op, k, c)] = clock[s]
            pcs[s] += 1
            moved = True
        assert moved, 'deadlock'
    end = max(clock)
    return (end - m * 3.0) / end


def main():
    if len(sys.argv) < 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:4]
    steps = int(sys.argv[4]) if len(sys.argv) > 4 else 6
    scheds = sys.argv[5].split(',') if len(sys.argv) > 5 else SCHEDULES
    os.makedirs(work, exist_ok=True)
    data = license_tokens(make_tokens, work)
    print('pp=%d, %s, micro-batch %d sequences, %d steps, %d cores' % (
        P, ' '.join(DIMS), MB, steps, os.cpu_count()))
    print('%-11s %3s  %-32s %6s  %6s  %6s  %s' % (
        'sched', 'M', 'measured idle per stage', 'mean', '(p-1)/(M+p-1)',
        '(p-1)/(VM+p-1)', 'simulated (B = 2F; zb1 B = W = F)'))
    peaks = {}
    for sched in scheds:
        for m in (4, 8, 16):
            tag = '%s_m%d' % (sched, m)
            args = DIMS + ['--batch', str(MB * m), '--steps', str(steps), '--data', data,
                           '--pp', str(P), '--micro-batches', str(m), '--lr', '1e-3']
            args += sched_args(sched)
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
            vtheory = (P - 1) / (V * m + P - 1)
            sim = simulate(rank_bin, sched, P, m)
            print('%-11s %3d  %-32s %5.1f%%  %6.1f%%         %s        %5.1f%%' % (
                sched, m, ' '.join('%5.1f%%' % (100 * f) for f in idle),
                100 * statistics.mean(idle), 100 * theory,
                '%5.1f%%' % (100 * vtheory) if sched == 'interleaved' else '     -', 100 * sim))
    print('peak activation bytes per stage at M=16:')
    for sched in scheds:
        print('  %-11s %s' % (sched, ' '.join('%10d' % b for b in peaks[(sched, 16)])))
    return 0


if __name__ == '__main__':
    sys.exit(main())
