#!/usr/bin/env python3
"""test_rank_cli.py: parallax-rank's command line (unit suite).

Checks exit status 2 with a message naming the bad value for bad arguments
(dim not divisible by heads, missing --data, bad number, unknown flag, bad
token file, missing file, a token >= vocab, heads % tp, a layout the engine
cannot run yet, a layout that does not fill PX_WORLD_SIZE, job flags given
with --spec-file, an unreadable spec file), all through the one validator
(planner/jobcfg.h), and, for a good 3-step run, exit 0, one stdout
line per step, and one JSON object per step in --metrics-out with the
documented keys and a finite, decreasing-overall loss; --export-init writes
layout.json, params_init.bin (num_params floats) and batch_1.bin.

usage: test_rank_cli.py RANK_BIN MAKE_TOKENS_PY WORKDIR   (stdlib only)"""
import json
import math
import os
import struct
import subprocess
import sys


def pb_varint(v):
    out = b''
    while True:
        b = v & 0x7f
        v >>= 7
        if v:
            out += bytes([b | 0x80])
        else:
            return out + bytes([b])


def pb_field(num, value):
    """One protobuf field: an int as a varint, bytes/str length-delimited."""
    if isinstance(value, int):
        return pb_varint(num << 3) + pb_varint(value)
    if isinstance(value, str):
        value = value.encode()
    return pb_varint(num << 3 | 2) + pb_varint(len(value)) + value


def job_spec(data, precision=None, schedule=None):
    """A packed parallax.v1.JobSpec (proto/parallax.proto field numbers) of a
    1-layer model, written by hand as a user without pctl would."""
    model = pb_field(1, 1) + pb_field(2, 2) + pb_field(3, 16) + pb_field(4, 16)
    spec = (pb_field(2, model) + pb_field(3, data) + pb_field(4, 1) + pb_field(5, 2) +
            pb_field(6, 3))
    if schedule:
        spec += pb_field(27, pb_field(1, 1) + pb_field(8, schedule))
    if precision:
        spec += pb_field(50, precision)
    return spec


def main():
    rank_bin, make_tokens, work = sys.argv[1:4]
    os.makedirs(work, exist_ok=True)
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data, '/usr/share/common-licenses/GPL-3'],
                   check=True, stdout=subprocess.DEVNULL)
    bad = os.path.join(work, 'bad.bin')
    with open(bad, 'wb') as f:
        f.write(struct.pack('<256i', *([7, 1, 10] + [0] * 253)) + b'\0' * 20)
    env = {k: v for k, v in os.environ.items() if not k.startswith('PX_')}
    base = ['--layers', '1', '--heads', '2', '--dim', '16', '--seq', '16', '--batch', '2',
            '--steps', '3']
    fails = 0

    def expect(args, code, needle):
        nonlocal fails
        p = subprocess.run([rank_bin] + args, capture_output=True, text=True, env=env)
        ok = p.returncode == code and needle in (p.stderr + p.stdout)
        print('%-55s exit %d %s' % (needle[:55], p.returncode, 'ok' if ok else 'FAIL'))
        if not ok:
            print(p.stdout[-1000:], p.stderr[-1000:])
            fails += 1
        return p

    b = base[:]
    b[b.index('--dim') + 1] = '130'
    b[b.index('--heads') + 1] = '4'
    expect(b + ['--data', data], 2, 'dim=130 is not divisible by heads=4')
    expect(base, 2, 'data file: no path given (--data)')
    # bytes >= 64 are common in English text: vocab 64 is too small, and the
    # message names the largest token (the file's largest byte)
    with open(data, 'rb') as f:
        largest = max(struct.unpack('<%dH' % ((os.path.getsize(data) - 1024) // 2),
                                    f.read()[1024:]))
    expect(base + ['--data', data, '--vocab', '64'], 2,
           '>= vocab 64 (largest token %d;' % largest)
    expect(base + ['--data', data, '--tp', '4'], 2, 'heads=2 is not divisible by tp=4')
    seq18 = base[:]
    seq18[seq18.index('--seq') + 1] = '18'
    expect(seq18 + ['--data', data, '--cp', '2'], 2,
           'seq=18 is not divisible by 2 x cp=2 (each context rank holds two of the 2 x cp '
           'chunks')
    expect(base + ['--data', data, '--dp', '2'], 2,
           'layout dp=2 tp=1 pp=1 cp=1 ep=1 (world 2) does not match the world of 1 ranks')
    expect(base + ['--data', data, '--batch', '3', '--dp', '1', '--grad-accum', '2'], 2,
           'batch=3 is not divisible by dp=1 x grad_accum=2')
    expect(['--spec-file', os.path.join(work, 'm.jsonl'), '--layers', '2'], 2,
           '--layers cannot be given with --spec-file')
    expect(['--spec-file', os.path.join(work, 'no-spec.pb')], 2, 'no-spec.pb')
    # a hand-written spec file with names the conversion cannot map: the
    # check names the string sent, not the -1 the conversion leaves
    fp64 = os.path.join(work, 'fp64.pb')
    with open(fp64, 'wb') as f:
        f.write(job_spec(data, precision='fp64'))
    expect(['--spec-file', fp64], 2, "precision='fp64' is not fp32 or bf16")
    zigzag = os.path.join(work, 'zigzag.pb')
    with open(zigzag, 'wb') as f:
        f.write(job_spec(data, schedule='zigzag'))
    expect(['--spec-file', zigzag], 2, "schedule='zigzag' is not a pipeline schedule")
    expect(base + ['--data', data, '--lr', 'abc'], 2, "--lr: bad value 'abc'")
    expect(base + ['--data', data, '--bogus', '1'], 2, "unknown or incomplete option '--bogus'")
    expect(base + ['--data', bad], 2, 'bad magic 7')
    expect(base + ['--data', os.path.join(work, 'missing.bin')], 2, 'missing.bin')
    expect(base + ['--data', data, '--coord', '127.0.0.1:1'], 2, '--coord needs --job')

    metrics = os.path.join(work, 'm.jsonl')
    p = expect(base + ['--data', data, '--metrics-out', metrics], 0, 'step 3 loss')
    lines = [l for l in p.stdout.splitlines() if l.startswith('step ')]
    if len(lines) != 3:
        print('FAIL expected 3 step lines, got %d' % len(lines))
        fails += 1
    recs = [json.loads(l) for l in open(metrics) if l.strip()]
    keys = {'step', 'loss', 'grad_norm', 'lr', 'tokens_per_second'}
    if len(recs) != 3 or any(not keys <= set(r) for r in recs) or \
            [r['step'] for r in recs] != [1, 2, 3] or \
            not all(math.isfinite(r['loss']) and 4.0 < r['loss'] < 6.5 for r in recs) or \
            not all(r['tokens_per_second'] > 0 for r in recs):
        print('FAIL metrics: %s' % recs)
        fails += 1
    else:
        print('metrics: %d records ok, loss %.4f -> %.4f' % (len(recs), recs[0]['loss'],
                                                             recs[-1]['loss']))

    exp = os.path.join(work, 'export')
    expect(base + ['--data', data, '--export-init', exp], 0, '')
    try:
        layout = json.load(open(os.path.join(exp, 'layout.json')))
        n = layout['num_params']
        sz = os.path.getsize(os.path.join(exp, 'params_init.bin'))
        bs = os.path.getsize(os.path.join(exp, 'batch_1.bin'))
        ok = sz == 4 * n and bs == 2 * 4 * 2 * 16 and len(layout['tensors']) == 16 and \
            sum(t['size'] for t in layout['tensors']) == n
    except (OSError, ValueError, KeyError) as e:
        print('export: %s' % e)
        ok = False
    print('export-init files %s' % ('ok' if ok else 'FAIL'))
    fails += not ok
    print('FAIL (%d)' % fails if fails else 'PASS')
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
