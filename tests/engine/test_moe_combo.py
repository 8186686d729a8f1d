#!/usr/bin/env python3
"""test_moe_combo.py: the mixture of experts combined with the other
strategies equals the single-rank run (integration; issue 11).

The model, the checks and the oracle are test_moe.py's (10 steps, 8 experts
top-2, per-step loss and grad norm 1e-5 relative on every rank, every dense,
router and expert gradient tensor 1e-4, tokens received / dropped per
expert equal to one rank's); only the layouts differ:
  * cp2ep2 (world 2: cp 2, ep 2 over the two cp ranks) at capacity 1.0: the
    ep group holds the whole batch as sequence chunks (each rank a chunk
    from the front and its mirror from the back); the capacity is filled in
    the single-rank token order (moe.h px_moe_set_token_blocks), so the
    same choices are dropped as on one rank;
  * dp2cp2ep4 (world 4) at capacity 1.0: the ep group is the whole dp x cp
    grid, rows and chunks interleaved;
  * cp2 (world 2, ep 1) and dp2cp2ep2 with ZeRO 1 (world 4), dropless: an ep
    group holding part of the batch fills its own capacity, which one rank
    cannot reproduce, so dropless is their oracle;
  * pp2_1f1b (4 micro-batches, 1F1B: stage 0 holds 2 in flight, each in
    its own MoE activation slot), pp2gpipe_me2 (moe-every 2: stage 0 dense,
    stage 1 MoE), pp2int2 (4 layers, interleaved 1F1B with 2 chunks per
    stage: each stage's MoE layers in two chunks), cp2ep2pp2 (world 4) and
    dp2ep2pp2 (world 4, 2 micro-batches) at capacity 1.0,
    against one rank accumulating the same micro-batches (each micro-batch
    is routed, and its capacity filled, on its own).
  * tp2, tp2sp (sequence parallelism), dp2ep2tp2 and cp2ep2tp2sp (world 4),
    dp2ep2tp2pp2 (world 8, 1F1B) at capacity 1.0: the experts are replicated over the tensor group, each
    tensor rank computing the whole MoE MLP on the whole ln2 output.
usage: test_moe_combo.py RANK_BIN MAKE_TOKENS_PY WORKDIR [LAYOUT ...]"""
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import test_moe  # noqa: E402

LAYOUTS = {  # name: (world, base, extra args)
    'cp2ep2': (2, 'cap', ['--cp', '2', '--ep', '2']),
    'dp2cp2ep4': (4, 'cap', ['--cp', '2', '--ep', '4']),
    'cp2': (2, 'dropless', ['--cp', '2', '--ep', '1']),
    'dp2cp2ep2z1': (4, 'dropless', ['--cp', '2', '--ep', '2', '--zero', '1']),
    'pp2_1f1b': (2, 'cap_a4', ['--pp', '2', '--micro-batches', '4', '--grad-accum', '1',
                               '--schedule', '1f1b', '--ep', '1']),
    'pp2gpipe_me2': (2, 'cap_a2_me2', ['--pp', '2', '--micro-batches', '2', '--grad-accum',
                                       '1', '--schedule', 'gpipe', '--ep', '1']),
    'pp2int2': (2, 'cap_a4_l4', ['--pp', '2', '--micro-batches', '4', '--grad-accum', '1',
                                 '--schedule', 'interleaved', '--virtual-stages', '2',
                                 '--ep', '1']),
    'dp2ep2pp2': (4, 'cap_a2', ['--ep', '2', '--pp', '2', '--micro-batches', '2',
                                '--grad-accum', '1']),
    'cp2ep2pp2': (4, 'cap_a2', ['--cp', '2', '--ep', '2', '--pp', '2', '--micro-batches', '2',
                                '--grad-accum', '1']),
    'dp2ep2tp2pp2': (8, 'cap_a2', ['--ep', '2', '--tp', '2', '--pp', '2', '--micro-batches',
                                   '2', '--grad-accum', '1']),
    'tp2': (2, 'cap', ['--tp', '2', '--ep', '1']),
    'tp2sp': (2, 'cap', ['--tp', '2', '--sequence-parallel', '--ep', '1']),
    'dp2ep2tp2': (4, 'cap', ['--tp', '2', '--ep', '2']),
    'cp2ep2tp2sp': (4, 'cap', ['--cp', '2', '--tp', '2', '--sequence-parallel', '--ep', '2']),
}
# a pipeline routes each micro-batch on its own: the single rank runs the
# same micro-batches as gradient accumulation
BASES = {'cap_a4': ['--grad-accum', '4'],
         'cap_a2_me2': ['--grad-accum', '2', '--moe-every', '2'],
         'cap_a4_l4': ['--grad-accum', '4', '--layers', '4']}

if __name__ == '__main__':
    test_moe.LAYOUTS = LAYOUTS
    test_moe.BASES.update(BASES)
    sys.exit(test_moe.main())
