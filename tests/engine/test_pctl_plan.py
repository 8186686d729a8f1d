#!/usr/bin/env python3
"""test_pctl_plan.py: `pctl plan` prints the ZeRO paper's figures and the engine's (unit).

pctl plan --params 7.5e9 --dp 64 --zero Z --paper prints 120.0, 31.4, 16.6
and 1.9 GB totals (Psi = 7.5B, N_d = 64, K = 12; Rajbhandari et al. 2020,
Figure 1); without --paper the accounting is the engine's fp32 AdamW (4 + 4
+ 8 bytes), as --precision's default trains; --json gives the exact bytes;
64 ranks print a summary, --ranks every row; GPT dims count the working
buffers; bad input is a usage error (exit 2) naming the value. The layout
table: --dp 2 --tp 2 --pp 2 lists every rank's coordinates (tp innermost,
then cp, dp, pp), the reporting rank and the node of each rank, and each
pipeline stage's memory for ZeRO 0 and 1 (what pp runs with);
--nodes/--devices-per-node that cannot hold whole tensor groups exit 2
naming the values; cp > 1 prints each context rank's slice and activations
falling with cp. Tensor parallelism (issue 9):
--tp 2 prints one tensor rank's parameter bytes and the activations of the
local micro-batch (--batch, --seq), fewer still with --sequence-parallel,
values worked out by hand from the tensor table and plan.h's activation
table.

usage: test_pctl_plan.py PCTL"""
import json
import subprocess
import sys


def main():
    pctl = sys.argv[1]
    failures = 0
    for z, want in enumerate(('120.0 GB', '31.4 GB', '16.6 GB', '1.9 GB')):
        out = subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64', '--zero', str(z),
                              '--paper'], capture_output=True, text=True, check=True).stdout
        row = [ln for ln in out.splitlines() if ln.startswith(str(z) + ' ')]
        total = row[0].split()[-4:-2] if row else []
        ok = ' '.join(total) == want
        print('zero %d: %s %s' % (z, ' '.join(total), 'ok' if ok else 'FAIL (want %s)' % want))
        failures += not ok
    j = json.loads(subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64', '--json',
                                   '--paper'], capture_output=True, text=True, check=True).stdout)
    exact = [s['total_bytes'] for s in j['stages']]
    ok = exact == [120e9, 31.40625e9, 16.640625e9, 1.875e9] and j['accounting'] == 'paper'
    print('json totals %s %s' % (exact, 'ok' if ok else 'FAIL'))
    failures += not ok
    # the default accounting is the engine's: fp32 params (4 bytes), not 2
    j = json.loads(subprocess.run([pctl, 'plan', '--params', '1000', '--zero', '0', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    failures += check('default accounting fp32', j['accounting'] == 'engine' and
                      j['stages'][0]['params_bytes'] == 4000 and j['param_bytes'] == 4, j)
    # 64 ranks: a summary, not 64 rows; --ranks lists them
    out = subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64'], capture_output=True,
                         text=True, check=True).stdout.splitlines()
    full = subprocess.run([pctl, 'plan', '--params', '7.5e9', '--dp', '64', '--ranks'],
                          capture_output=True, text=True, check=True).stdout.splitlines()
    failures += check('dp 64 summarised', len(out) < 16 and
                      '  node 0: 64 ranks (0..63)' in out and len(full) >= 64 + 8,
                      (len(out), len(full)))
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
    # params (S + E + M + max(M, H)) * 4, grads (S + E + M + H) * 4 (two
    # layers: the head's gradients in flight during layer 1's backward),
    # optimizer S*8 (plan.h)
    j = json.loads(subprocess.run([pctl, 'plan', '--layers', '2', '--dim', '8', '--heads', '2',
                                   '--vocab', '16', '--seq', '4', '--dp', '2', '--zero', '3',
                                   '--precision', 'fp32', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    s = j['stages'][0]
    want = ((1152 + 544 + 2 * 872) * 4, (1152 + 544 + 872 + 16) * 4, 1152 * 8)
    got = (s['params_bytes'], s['grads_bytes'], s['optimizer_bytes'])
    ok = got == want and s['params_count'] == 544 + 2 * 872 + 16
    print('GPT dims stage 3: %s %s' % (got, 'ok' if ok else 'FAIL want %s' % (want,)))
    failures += not ok
    p = subprocess.run([pctl, 'plan', '--params', '100', '--zero', '5'], capture_output=True,
                       text=True)
    ok = p.returncode == 2 and "zero=5" in p.stderr
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
    failures += test_layout(pctl)
    failures += test_tp(pctl)
    print('FAIL (%d)' % failures if failures else 'PASS')
    return 1 if failures else 0


def test_tp(pctl):
    """2 layers, dim 8, heads 2, vocab 16 (wte padded to 64 rows), seq 4,
    batch 2 (micro-batch 2, N = 8 tokens), fp32, ZeRO 0.
    Parameters: tp 1 2304 (test above). tp 2, per rank: embedding 32*8 + 4*8
    = 288, layer 16 (ln1) + 12*8 (qkvw) + 12 + 4*8 (attprojw) + 8 + 16 (ln2)
    + 16*8 (fcw) + 16 + 8*16 (fcprojw) + 8 = 460, head 16: 1224.
    Activations (floats; plan.h): tp 1: residual stream and LayerNorms (R = 8
    rows) 784, split buffers 2688 (one (N,Vp) classifier buffer: probs and
    dlogits in place over the logits), whole 152: 3624 = 14496 bytes. tp 2:
    split halves to 1344, + row max 8: 2288 floats + 16 doubles = 9280
    bytes. tp 2 + SP: R = 4 rows halves the 784 to 392, + spbuf 64 + dln 32:
    1992 floats + 16 doubles = 8096 bytes."""
    failures = 0
    base = [pctl, 'plan', '--layers', '2', '--dim', '8', '--heads', '2', '--vocab', '16',
            '--seq', '4', '--batch', '2', '--zero', '0', '--precision', 'fp32', '--json']
    got = {}
    for name, extra in (('tp1', []), ('tp2', ['--tp', '2']),
                        ('tp2sp', ['--tp', '2', '--sequence-parallel'])):
        j = json.loads(subprocess.run(base + extra, capture_output=True, text=True,
                                      check=True).stdout)
        st = j['stages'][0]
        got[name] = (st['params_count'], st['params_bytes'], st['grads_bytes'],
                     st['optimizer_bytes'], j['activations_bytes'], j['memory_planned'])
    want = {'tp1': (2304, 2304 * 4.0, 2304 * 4.0, 2304 * 8.0, 14496, True),
            'tp2': (1224, 1224 * 4.0, 1224 * 4.0, 1224 * 8.0, 9280, True),
            'tp2sp': (1224, 1224 * 4.0, 1224 * 4.0, 1224 * 8.0, 8096, True)}
    for name in want:
        failures += check('plan %s (params, bytes p/g/o, activations)' % name,
                          got[name] == want[name], '%s want %s' % (got[name], want[name]))
    # --device: cuda's fused attention keeps the (L,B,NH,T) lse
    # (2*2*2*4 = 32 floats) instead of (L,B,NH,T,T) (128) and no (T,T)
    # scratch (16): 112 floats, 448 bytes fewer; sim runs the cpu attention
    for dev, want_b in (('cuda', 14496 - 448), ('sim', 14496), ('cpu', 14496)):
        j = json.loads(subprocess.run(base + ['--device', dev], capture_output=True, text=True,
                                      check=True).stdout)
        failures += check('plan --device %s activations' % dev,
                          j['activations_bytes'] == want_b,
                          '%s want %s' % (j['activations_bytes'], want_b))
    failures += check('bytes fall with tp, activations further with SP',
                      got['tp2'][1] < got['tp1'][1] and
                      got['tp2sp'][4] < got['tp2'][4] < got['tp1'][4])
    # ZeRO-3 on dp 2 x tp 2: shards of the tp-local units (plan.h): units
    # 288, 460, 460, 16 padded to even: shard 612; E 288, M 460, H 16:
    # params (S + E + M + max(M, H)) * 4, grads (S + E + M + H) * 4
    j = json.loads(subprocess.run(base[:-7] + ['--zero', '3', '--precision', 'fp32', '--json',
                                               '--dp', '2', '--batch', '4', '--tp', '2'],
                                  capture_output=True, text=True, check=True).stdout)
    st = j['stages'][0]
    w = ((612 + 288 + 460 + 460) * 4.0, (612 + 288 + 460 + 16) * 4.0, 612 * 8.0)
    g = (st['params_bytes'], st['grads_bytes'], st['optimizer_bytes'])
    failures += check('plan dp2 x tp2 ZeRO-3', g == w and j['micro_batch'] == 2 and
                      j['activations_bytes'] == 9280, '%s want %s' % (g, w))
    # text: the activation line, and the errors
    out = subprocess.run(base[:-1] + ['--tp', '2', '--sequence-parallel'], capture_output=True,
                         text=True, check=True).stdout
    row = [ln.split() for ln in out.splitlines() if ln.startswith('0 ')]
    failures += check('text names the activations',
                      'activations per rank: micro-batch 2 x seq 4, tp 2, sequence '
                      'parallelism on' in out and row and row[0][11:13] == ['8.1', 'kB'], out)
    # sequence parallelism with tp 1 is a no-op submit accepts: so does plan
    p = subprocess.run(base[:-1] + ['--sequence-parallel'], capture_output=True, text=True)
    failures += check('--sequence-parallel with tp 1', p.returncode == 0, p.stderr)
    for argv, msg in ((['--tp', '2', '--dp', '2', '--batch', '3'],
                       'batch=3 is not divisible by dp=2 x grad_accum=1'),):
        p = subprocess.run(base[:-1] + argv, capture_output=True, text=True)
        failures += check(' '.join(argv), p.returncode == 2 and msg in p.stderr, p.stderr)
    return failures


def check(name, ok, detail=''):
    print('%s: %s%s' % (name, 'ok' if ok else 'FAIL', '' if ok else ' ' + str(detail)))
    return 0 if ok else 1


def test_layout(pctl):
    failures = 0
    # text: dp 2 x tp 2 x pp 2 on one node of 8
    p = subprocess.run([pctl, 'plan', '--dp', '2', '--tp', '2', '--pp', '2'],
                       capture_output=True, text=True)
    out = p.stdout.splitlines()
    rows = []
    for ln in out[out.index(' rank    dp    tp    pp    cp    ep  node') + 1:] if \
            ' rank    dp    tp    pp    cp    ep  node' in out else []:
        rows.append(tuple(int(x) for x in ln.split()))
    # (rank, dp, tp, pp, cp, ep, node), worked out by hand
    want = [(0, 0, 0, 0, 0, 0, 0), (1, 0, 1, 0, 0, 0, 0), (2, 1, 0, 0, 0, 0, 0),
            (3, 1, 1, 0, 0, 0, 0), (4, 0, 0, 1, 0, 0, 0), (5, 0, 1, 1, 0, 0, 0),
            (6, 1, 0, 1, 0, 0, 0), (7, 1, 1, 1, 0, 0, 0)]
    failures += check('dp2 tp2 pp2 table', p.returncode == 0 and rows == want, rows)
    failures += check('dp2 tp2 pp2 header',
                      'layout: dp=2 tp=2 pp=2 cp=1 ep=1 (world 8); reporting rank 4' in out and
                      'placement: 1 node x 8 devices (tensor groups whole on one node)' in out,
                      out[:4])
    # pipeline parallelism runs ZeRO 0 and 1: a row per (ZeRO stage, pipeline stage)
    rows = [ln.split()[:2] for ln in out if ln[:2] in ('0 ', '1 ', '2 ', '3 ')]
    failures += check('pp: memory per stage', rows == [['0', '0'], ['0', '1'], ['1', '0'],
                                                       ['1', '1']], out)
    # two nodes of 4: tensor groups {0,1} {2,3} on node 0, {4,5} {6,7} on node 1
    j = json.loads(subprocess.run([pctl, 'plan', '--dp', '2', '--tp', '2', '--pp', '2',
                                   '--nodes', '2', '--devices-per-node', '4', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    lay = j['layout']
    failures += check('json dp2 tp2 pp2 on 2 x 4',
                      [r['node'] for r in lay['ranks']] == [0, 0, 0, 0, 1, 1, 1, 1] and
                      [(r['dp'], r['tp'], r['pp']) for r in lay['ranks']] ==
                      [w[1:4] for w in want] and lay['world'] == 8 and
                      lay['reporting_rank'] == 4 and
                      [(s['zero'], s['pipeline_stage']) for s in j['stages']] ==
                      [(0, 0), (0, 1), (1, 0), (1, 1)] and j['memory_planned'] is True, lay)
    # dp 4 x cp 2, ep 4 in the dp x cp grid: rank = cp + 2 dp, ep = rank % 4,
    # edp = rank / 4; 2 nodes (default 4 devices each)
    j = json.loads(subprocess.run([pctl, 'plan', '--dp', '4', '--cp', '2', '--ep', '4',
                                   '--experts', '4', '--nodes', '2', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    lay = j['layout']
    got = [(r['rank'], r['dp'], r['cp'], r['ep'], r['edp'], r['node']) for r in lay['ranks']]
    want = [(r, r // 2, r % 2, r % 4, r // 4, r // 4) for r in range(8)]
    failures += check('json dp4 cp2 ep4', got == want and lay['devices_per_node'] == 4 and
                      lay['reporting_rank'] == 0, got)
    # context parallelism (issue 11): each rank's slice of the sequence and
    # activations falling with cp
    out = subprocess.run([pctl, 'plan', '--layers', '2', '--dim', '64', '--seq', '64', '--cp',
                          '2', '--zero', '0'], capture_output=True, text=True,
                         check=True).stdout
    failures += check('cp2 context slices',
                      'context: cp 2, 32 tokens of each 64-token sequence per rank' in out and
                      'cp rank 0: tokens [0, 16) and [48, 64)' in out and
                      'cp rank 1: tokens [16, 32) and [32, 48)' in out, out)
    acts = [json.loads(subprocess.run([pctl, 'plan', '--layers', '2', '--dim', '64', '--seq',
                                       '64', '--cp', str(c), '--json'], capture_output=True,
                                      text=True, check=True).stdout) for c in (1, 2, 4)]
    failures += check('cp activations fall', acts[0]['activations_bytes'] >
                      acts[1]['activations_bytes'] > acts[2]['activations_bytes'] > 0 and
                      [a['seq_per_rank'] for a in acts] == [64, 32, 16] and
                      all(a['memory_planned'] for a in acts), acts)
    # dp only: the memory plan as before, plus the table
    j = json.loads(subprocess.run([pctl, 'plan', '--params', '1000', '--dp', '2', '--zero', '0',
                                   '--precision', 'fp32', '--json'],
                                  capture_output=True, text=True, check=True).stdout)
    failures += check('dp only keeps the memory plan',
                      j['memory_planned'] is True and j['stages'][0]['total_bytes'] == 16000 and
                      [r['dp'] for r in j['layout']['ranks']] == [0, 1], j)
    # the mixture of experts (issue 11): the routers and E/ep experts per MoE
    # layer on each rank, outside ZeRO: 2 MoE layers of 8 experts, dim 16
    moe = ['--layers', '4', '--dim', '16', '--heads', '2', '--experts', '8', '--moe-every', '2',
           '--precision', 'fp32', '--zero', '0', '--json', '--batch', '4']
    per = 8 * 16 + 8 * (8 * 16 * 16 + 5 * 16)  # one MoE layer: router + 8 experts
    j1 = json.loads(subprocess.run([pctl, 'plan', '--dp', '4'] + moe, capture_output=True,
                                   text=True, check=True).stdout)
    j4 = json.loads(subprocess.run([pctl, 'plan', '--dp', '4', '--ep', '4'] + moe,
                                   capture_output=True, text=True, check=True).stdout)
    rank4 = 2 * (8 * 16 + 2 * (8 * 16 * 16 + 5 * 16))
    failures += check('moe plan: expert parameters per rank',
                      j1['moe']['expert_params'] == 2 * per and
                      j1['moe']['rank_params'] == 2 * per and
                      j4['moe']['rank_params'] == rank4 and j4['memory_planned'] is True and
                      j1['stages'][0]['total_bytes'] - j4['stages'][0]['total_bytes'] ==
                      16 * (2 * per - rank4), (j1.get('moe'), j4.get('moe')))
    # a MoE layer's unit holds no dense MLP (model.h): 8C^2 + 5C parameters
    # fewer per MoE layer than the same model without experts, 16 bytes each
    # (fp32 params, grads and two AdamW moments at ZeRO 0)
    j0 = json.loads(subprocess.run([pctl, 'plan', '--dp', '4'] + moe[:6] + ['--experts', '0'] +
                                   moe[8:], capture_output=True, text=True, check=True).stdout)
    mlp = 8 * 16 * 16 + 5 * 16
    s0, s1 = j0['stages'][0], j1['stages'][0]
    failures += check('moe plan: the MoE layers carry no dense MLP',
                      s0['params_count'] - s1['params_count'] == 2 * mlp and
                      s1['total_bytes'] - s0['total_bytes'] == 16 * (2 * per - 2 * mlp),
                      (s0['params_count'], s1['params_count'], s0['total_bytes'],
                       s1['total_bytes']))
    # layouts that cannot run or cannot be placed: exit 2, naming the values
    for argv, want_err in (
            (['--tp', '4', '--nodes', '2', '--devices-per-node', '2'],
             'tp=4 needs 4 devices on one node (a tensor group stays on one node); the '
             'largest node has 2 free'),
            (['--dp', '2', '--tp', '2', '--pp', '2', '--nodes', '2', '--devices-per-node', '3'],
             'world=8 (dp=2 x tp=2 x pp=2 x cp=1) needs 8 devices; the cluster has 6 free'),
            (['--dp', '3', '--tp', '2', '--nodes', '2', '--devices-per-node', '3',
              '--batch', '6'],
             'only 2 whole tensor groups of 3 fit'),
            (['--dp', '2', '--cp', '2', '--ep', '3'], 'ep=3 does not divide dp x cp = 4'),
            (['--cp', '2', '--seq', '18'], 'seq=18 is not divisible by 2 x cp=2'),
            (['--dp', '4', '--ep', '4', '--experts', '6'], 'experts=6 is not divisible by ep=4'),
            (['--heads', '4', '--tp', '3'], 'heads=4 is not divisible by tp=3'),
            (['--layers', '2', '--pp', '4'], 'layers=2 is fewer than pp=4 pipeline stages')):
        p = subprocess.run([pctl, 'plan'] + argv, capture_output=True, text=True)
        failures += check(' '.join(argv), p.returncode == 2 and want_err in p.stderr and
                          not p.stdout, (p.returncode, p.stderr.strip()))
    return failures


if __name__ == '__main__':
    sys.exit(main())
