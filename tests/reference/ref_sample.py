#!/usr/bin/python3
"""ref_sample.py: parallax-rank --sample (engine/sample.h) against the
independent PyTorch GPT of ref_gpt.py (fp32, CPU).

Trains a small byte-level GPT (2 layers, 4 heads, dim 64, block 32) for a
few steps with --export-safetensors and a checkpoint, then checks:
  * greedy: our ids equal the reference's greedy generation on the same
    weights (read from our safetensors file here, with numpy), id for id:
    a prompt longer than the block (cropped to its last 32 tokens, as
    nanoGPT's generate), and the empty prompt (which starts from "\\n");
    the smallest gap between the reference's two best logits is printed
    (a near tie would make an exact comparison fragile); and after six
    prompts cut from the training text, whose continuations must hold 8 or
    more distinct bytes (so the comparison is not of a model stuck on one);
  * the checkpoint (step_<N>/, re-cut to one rank) gives the same ids as
    the exported file; so does a tp 2 x dp 2 ZeRO-1 run's checkpoint
    against that run's export;
  * the simulated device (--device sim) gives the cpu's ids;
  * seeded sampling: the same seed gives the same text, another seed
    another text; top-k 1 at temperature 1 is the greedy text; with top-k
    5 every sampled id is among the reference's 5 best logits of its
    context;
  * stdout is the ids' bytes;
  * bad input exits 2 naming the value (tokens 0, top-k -1, temperature
    -1), missing weights 3.

usage: /usr/bin/python3 ref_sample.py RANK_BIN MAKE_TOKENS_PY WORKDIR
Exit 0 pass, 1 fail, 77 skip (no torch)."""
import json
import os
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
try:
    import numpy as np
    import torch
    import ref_gpt
except ImportError as e:  # pragma: no cover
    print('skip: %s (run with /usr/bin/python3)' % e)
    sys.exit(77)

LAYERS, HEADS, DIM, SEQ, VOCAB = 2, 4, 64, 32, 256
MODEL = ['--layers', str(LAYERS), '--heads', str(HEADS), '--dim', str(DIM), '--seq', str(SEQ)]
FAILS = []


def check(what, ok, detail=''):
    print('%s: %s%s' % ('ok  ' if ok else 'FAIL', what, (' (%s)' % detail) if detail else ''))
    if not ok:
        FAILS.append(what)


def load_safetensors(path):
    """Our export (checkpoint.h px_safetensors_write) read with numpy."""
    with open(path, 'rb') as f:
        raw = f.read()
    hl = struct.unpack('<Q', raw[:8])[0]
    head = json.loads(raw[8:8 + hl])
    P = {}
    for name, t in head.items():
        if name == '__metadata__':
            continue
        assert t['dtype'] == 'F32', name
        b, e = t['data_offsets']
        a = np.frombuffer(raw[8 + hl + b:8 + hl + e], dtype='<f4').reshape(t['shape'])
        P[name] = torch.from_numpy(a.copy())
    return P


def ref_logits(P, ctx):
    """The reference's logits of the last position of ctx cropped to the block."""
    with torch.no_grad():
        logits, _ = ref_gpt.gpt_logits(P, torch.tensor([ctx[-SEQ:]], dtype=torch.long), VOCAB)
    return logits[0, -1]


def ref_greedy(P, prompt, n):
    ids, gaps = list(prompt) or [10], []
    for _ in range(n):
        z = ref_logits(P, ids)
        top = torch.topk(z, 2).values
        gaps.append(float(top[0] - top[1]))
        ids.append(int(torch.argmax(z)))
    return ids[-n:], min(gaps)


def sample(rank_bin, work, weights, tag, prompt=b'', extra=(), env=None):
    """Runs our sample mode; returns (ids, stdout bytes, exit status, stderr)."""
    pf = os.path.join(work, tag + '.prompt')
    out = os.path.join(work, tag + '.ids.json')
    with open(pf, 'wb') as f:
        f.write(prompt)
    if os.path.exists(out):
        os.unlink(out)
    r = subprocess.run([rank_bin] + MODEL + ['--sample', weights, '--sample-prompt-file', pf,
                                             '--sample-ids', out] + list(extra),
                       capture_output=True, timeout=120,
                       env=dict(os.environ, **env) if env else None)
    ids = json.load(open(out))['ids'] if r.returncode == 0 else None
    return ids, r.stdout, r.returncode, r.stderr.decode(errors='replace')


def launch_world(rank_bin, flags, world):
    """Trains on `world` ranks through the standalone bootstrap."""
    port = ref_gpt.free_port()
    procs = [subprocess.Popen([rank_bin] + flags, stdout=subprocess.DEVNULL,
                              stderr=subprocess.DEVNULL,
                              env=dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(world),
                                       PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port)))
             for r in range(world)]
    rcs = [p.wait(timeout=240) for p in procs]
    if any(rcs):
        raise RuntimeError('%d ranks exited %s' % (world, rcs))


def main():
    if len(sys.argv) != 4:
        print(__doc__)
        return 2
    rank_bin, make_tokens, work = sys.argv[1:]
    os.makedirs(work, exist_ok=True)
    root = os.path.join(os.path.dirname(os.path.abspath(__file__)), '..', '..')
    data = os.path.join(work, 'tokens.bin')
    subprocess.run([sys.executable, make_tokens, data, '/usr/share/common-licenses/GPL-3'],
                   check=True, stdout=subprocess.DEVNULL)
    weights = os.path.join(work, 'w.safetensors')
    ckdir = os.path.join(work, 'ck')
    steps = 600
    subprocess.run([rank_bin] + MODEL + ['--batch', '16', '--steps', str(steps), '--lr', '3e-3',
                                         '--data', data, '--export-safetensors', weights,
                                         '--checkpoint-every', str(steps),
                                         '--checkpoint-dir', ckdir],
                   check=True, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, timeout=300)
    ref_gpt.LAYERS, ref_gpt.HEADS, ref_gpt.DIM = LAYERS, HEADS, DIM
    P = load_safetensors(weights)

    n = 48
    prompt = b'ranks train a GPT and average gradients with collectives'  # > SEQ bytes
    # six prompts cut from the training text, so that greedy continuations
    # complete words (a small model alone mostly predicts spaces)
    text = open('/usr/share/common-licenses/GPL-3', 'rb').read()
    cases = [('long-prompt', prompt, n), ('empty-prompt', b'', n)]
    cases += [('text-%d' % i, text[o:o + 40], 12)
              for i, o in enumerate(range(1000, 31000, 5000))]
    seen = set()
    for tag, pr, k in cases:
        want, gap = ref_greedy(P, pr, k)
        ids, out, rc, err = sample(rank_bin, work, weights, tag, pr,
                                   ['--sample-tokens', str(k), '--sample-temperature', '0'])
        seen |= set(want)
        check('%s (%d bytes, block %d): greedy ids equal the reference\'s' % (tag, len(pr), SEQ),
              rc == 0 and ids == want,
              'smallest top-2 logit gap %.3g%s' % (gap, '' if ids == want else
                                                   '; ours %s, reference %s; exit %d: %s' % (
                                                       ids, want, rc, err[-300:])))
        check('%s: stdout is the ids\' bytes' % tag, rc == 0 and out == bytes(ids or []))
        if tag == 'long-prompt':
            greedy = ids
    check('the greedy texts hold 8 or more distinct bytes (not a model stuck on one)',
          len(seen) >= 8, repr(bytes(sorted(seen))))
    ids, _, rc, err = sample(rank_bin, work, os.path.join(ckdir, 'step_%d' % steps), 'ckpt',
                             prompt, ['--sample-tokens', str(n), '--sample-temperature', '0'])
    check('checkpoint step_%d gives the exported file\'s ids' % steps, ids == greedy,
          '' if ids == greedy else 'exit %d %s' % (rc, err[-300:]))

    # a tp 2 x dp 2 ZeRO-1 run's checkpoint, re-cut to one rank, against
    # the same run's export (gathered by the ranks)
    tp_w = os.path.join(work, 'tp.safetensors')
    tp_ck = os.path.join(work, 'tpck')
    launch_world(rank_bin, MODEL + ['--batch', '8', '--steps', '6', '--lr', '1e-2', '--data', data,
                                    '--export-safetensors', tp_w, '--checkpoint-every', '6',
                                    '--checkpoint-dir', tp_ck, '--dp', '2', '--tp', '2',
                                    '--zero', '1'], 4)
    flags = ['--sample-tokens', '24', '--sample-temperature', '0.7', '--sample-seed', '4']
    x, _, rc1, e1 = sample(rank_bin, work, tp_w, 'tpx', prompt, flags)
    y, _, rc2, e2 = sample(rank_bin, work, os.path.join(tp_ck, 'step_6'), 'tpy', prompt, flags)
    check('tp 2 x dp 2 ZeRO-1 checkpoint re-cut to one rank: its export\'s ids',
          x is not None and x == y, '' if x == y else 'exit %d %d: %s %s' % (rc1, rc2, e1[-300:],
                                                                            e2[-300:]))

    sim, _, rc, err = sample(rank_bin, work, weights, 'sim', prompt,
                             ['--sample-tokens', str(n), '--sample-temperature', '0',
                              '--device', 'sim'], env={'PX_SIM_DEVICE': '1'})
    check('the simulated device (host code never touches device memory) gives the cpu\'s ids',
          sim == greedy, '' if sim == greedy else 'exit %d: %s' % (rc, err[-300:]))

    seeded = ['--sample-tokens', str(n), '--sample-temperature', '1.0']
    a, _, _, _ = sample(rank_bin, work, weights, 's7a', prompt, seeded + ['--sample-seed', '7'])
    b, _, _, _ = sample(rank_bin, work, weights, 's7b', prompt, seeded + ['--sample-seed', '7'])
    c, _, _, _ = sample(rank_bin, work, weights, 's8', prompt, seeded + ['--sample-seed', '8'])
    check('seed 7 twice: the same text', a is not None and a == b)
    check('seed 8: another text than seed 7', a is not None and c is not None and a != c)
    k1, _, _, _ = sample(rank_bin, work, weights, 'k1', prompt,
                         seeded + ['--sample-seed', '7', '--sample-top-k', '1'])
    check('top-k 1 at temperature 1 is greedy', k1 == greedy)
    k5, _, _, _ = sample(rank_bin, work, weights, 'k5', prompt,
                         seeded + ['--sample-seed', '3', '--sample-top-k', '5'])
    ctx, outside = list(prompt), []
    for i, t in enumerate(k5 or []):
        top5 = torch.topk(ref_logits(P, ctx), 5).indices.tolist()
        if t not in top5:
            outside.append((i, t, top5))
        ctx.append(t)
    check('top-k 5: every sampled id among the reference\'s 5 best', k5 and not outside,
          str(outside[:3]))

    for flags, rc_want, name in ((['--sample-tokens', '0'], 2, 'tokens=0'),
                                 (['--sample-top-k', '-1'], 2, 'top_k=-1'),
                                 (['--sample-temperature', '-1'], 2, 'temperature=-1'),
                                 (['--sample-tokens', '100000'], 2, 'tokens=100000')):
        _, _, rc, err = sample(rank_bin, work, weights, 'bad', b'', flags)
        check('%s: exit %d naming it' % (' '.join(flags), rc_want), rc == rc_want and name in err,
              'exit %d: %s' % (rc, err.strip().splitlines()[-1][-200:] if err.strip() else ''))
    _, _, rc, err = sample(rank_bin, work, os.path.join(work, 'none.safetensors'), 'missing')
    check('missing weights: exit 3 naming the path', rc == 3 and 'none.safetensors' in err,
          'exit %d' % rc)

    print('%d check(s) failed: %s' % (len(FAILS), FAILS) if FAILS else 'all checks passed')
    return 1 if FAILS else 0


if __name__ == '__main__':
    sys.exit(main())
