#!/usr/bin/python3
"""Hugging Face GPT-2 weights in and out (--init-from, --export-hf) against
`transformers` itself (fp32, CPU).

A randomly initialised GPT2LMHeadModel (no download: 4 layers, 4 heads,
n_embd 64, n_positions 32, vocab 300, which parallax pads to 320; its
biases and LayerNorms moved off 0 and 1 so that a swapped or dropped one
shows) is saved with save_pretrained. Then, in every layout (one rank,
dp 2, tp 2, pp 2, cp 2, dp 2 with ZeRO-3, and dp 2 x ep 2 with 4 experts
in every second layer, where (a) also checks that each expert starts as
its layer's MLP and nothing is exported), parallax-rank --init-from DIR
trains 2 steps with --dump-dir and --export-hf:
  (a) the initial parameters it dumps are the checkpoint's tensors, mapped
      by the spec below (Conv1D transposes, wte padded with zero rows),
      bit for bit; and its step-1 loss equals transformers' loss on the
      same batch (batch_1.bin) within 1e-5;
  (c) transformers loads the export (no missing or unexpected key), every
      exported tensor is the final dumped parameters (params_2.bin) mapped
      back, bit for bit, and its loss on the validation batch equals the
      run's validation loss after step 2 within 1e-5.
  (b) the round trip: --init-from then --export-hf with no step taken
      (--export-init ends the run before training; it runs each rank
      alone), the bytes of every tensor equal the input's: from the
      directory, and from a bare safetensors file as the hub's (no
      "transformer." prefix, mask buffers, the tied lm_head.weight) without
      config.json. In the layouts, (a)
      and (c) hold each way bit for bit.
  (d) a checkpoint of other dims is refused, naming both values, by
      parallax-rank (exit 2) and at submit (pctl submit --dry-run, the
      daemon's validator); a truncated file is refused, not read.

usage: test_hf_gpt2.py RANK_BIN MAKE_TOKENS WORK PYDEPS [PCTL]
PYDEPS: the folder deploy/setup.sh --tests installs transformers into
(build/pydeps); it is appended to sys.path, so Debian's numpy and torch
stay first. Exit 0 pass, 1 fail, 77 skip (transformers not installed)."""
import json
import os
import shutil
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from zero_util import run_world  # noqa: E402

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), '..'))
from pxport import free_port  # noqa: E402

L, NH, C, T, V, VP, B = 4, 4, 64, 32, 300, 320, 4


def model_args(layers=L, dim=C):
    return ['--layers', str(layers), '--heads', str(NH), '--dim', str(dim), '--seq', str(T),
            '--vocab', str(V), '--batch', str(B)]


MODEL = model_args()
TOL = 1e-5
LAYOUTS = [  # (name, world, flags)
    ('single', 1, []),
    ('dp2', 2, ['--dp', '2']),
    ('tp2', 2, ['--tp', '2']),
    ('pp2', 2, ['--pp', '2', '--micro-batches', '2']),
    ('cp2', 2, ['--cp', '2']),
    ('dp2z3', 2, ['--dp', '2', '--zero', '3']),
    # experts: each starts as its layer's MLP (sparse upcycling); with the
    # gates renormalised over the chosen two and no load-balancing loss the
    # model computes the dense GPT-2; no export (a GPT-2 has no experts)
    ('dp2ep2moe', 2, ['--dp', '2', '--ep', '2', '--experts', '4', '--top-k', '2',
                      '--dropless', '--aux-loss-coef', '0', '--moe-every', '2']),
]

# parallax's canonical tensors (model.h) -> transformers' names and whether
# the file holds the transpose (Conv1D keeps (in, out)); the spec the test
# checks the engine against, written out independently of planner/hfgpt2.c
HF = {'wte': ('wte.weight', 0), 'wpe': ('wpe.weight', 0),
      'ln1w': ('h.%d.ln_1.weight', 0), 'ln1b': ('h.%d.ln_1.bias', 0),
      'qkvw': ('h.%d.attn.c_attn.weight', 1), 'qkvb': ('h.%d.attn.c_attn.bias', 0),
      'attprojw': ('h.%d.attn.c_proj.weight', 1), 'attprojb': ('h.%d.attn.c_proj.bias', 0),
      'ln2w': ('h.%d.ln_2.weight', 0), 'ln2b': ('h.%d.ln_2.bias', 0),
      'fcw': ('h.%d.mlp.c_fc.weight', 1), 'fcb': ('h.%d.mlp.c_fc.bias', 0),
      'fcprojw': ('h.%d.mlp.c_proj.weight', 1), 'fcprojb': ('h.%d.mlp.c_proj.bias', 0),
      'lnfw': ('ln_f.weight', 0), 'lnfb': ('ln_f.bias', 0)}


def canon_from_hf(sd, layout, prefix):
    """The canonical buffer (layout.json's tensors) built from state dict sd."""
    import numpy as np
    out = np.zeros(layout['num_params'], dtype=np.float32)
    for t in layout['tensors']:
        name, tr = HF[t['name']]
        shape, off = t['shape'], t['offset']
        per_layer = '%d' in name
        slices = []
        for l in range(L if per_layer else 1):
            a = sd[prefix + (name % l if per_layer else name)]
            slices.append(a.T if tr else a)
        whole = np.stack(slices) if per_layer else slices[0]
        if t['name'] == 'wte':  # the padding rows stay 0
            pad = np.zeros(shape, dtype=np.float32)
            pad[:V] = whole
            whole = pad
        assert list(whole.shape) == list(shape), (t['name'], whole.shape, shape)
        out[off:off + whole.size] = whole.reshape(-1)
    return out


def hf_from_canon(canon, layout, prefix):
    """The state dict a canonical buffer exports to (the inverse map)."""
    import numpy as np
    sd = {}
    for t in layout['tensors']:
        name, tr = HF[t['name']]
        a = canon[t['offset']:t['offset'] + int(np.prod(t['shape']))].reshape(t['shape'])
        if t['name'] == 'wte':
            a = a[:V]
        for l in range(L if '%d' in name else 1):
            s = a[l] if '%d' in name else a
            sd[prefix + (name % l if '%d' in name else name)] = np.ascontiguousarray(
                s.T if tr else s)
    return sd


def hf_loss(model, batch_path):
    import numpy as np
    import torch
    b = np.fromfile(batch_path, dtype=np.int32).reshape(2, B, T).astype(np.int64)
    with torch.no_grad():
        logits = model(torch.from_numpy(b[0])).logits
        loss = torch.nn.functional.cross_entropy(logits.reshape(-1, V),
                                                 torch.from_numpy(b[1]).reshape(-1))
    return float(loss)


def run_quiet(rank_bin, args, work, tag, world):
    """Runs a world that takes no step (no metrics to read); returns True
    when every rank exits 0, else prints rank 0's log."""
    port, procs = free_port(), []
    for r in range(world):
        env = dict(os.environ, PX_RANK=str(r), PX_WORLD_SIZE=str(world),
                   PX_MASTER_ADDR='127.0.0.1', PX_MASTER_PORT=str(port))
        log = open(os.path.join(work, '%s_rank%d.log' % (tag, r)), 'w')
        procs.append((subprocess.Popen([rank_bin] + args, env=env, stdout=log,
                                       stderr=subprocess.STDOUT), log))
    rcs = []
    for p, log in procs:
        try:
            rcs.append(p.wait(timeout=120))
        except subprocess.TimeoutExpired:
            p.kill()
            rcs.append(p.wait())
        log.close()
    if any(rcs):
        print('%s: ranks exited %s; rank 0 log:' % (tag, rcs))
        print(open(os.path.join(work, '%s_rank0.log' % tag)).read()[-3000:])
    return not any(rcs)


def bytes_equal(a, b):
    """Names whose tensors differ in bytes (or exist on one side only)."""
    return sorted(k for k in set(a) | set(b)
                  if k not in a or k not in b or a[k].tobytes() != b[k].tobytes())


def main():
    rank_bin, make_tokens, work, pydeps = sys.argv[1:5]
    pctl = sys.argv[5] if len(sys.argv) > 5 else None
    sys.path.append(pydeps)  # after Debian's numpy and torch
    try:
        import numpy as np
        import torch
        import transformers
        from safetensors.numpy import load_file, save_file
    except ImportError as e:
        print('SKIP: %s (deploy/setup.sh --tests installs transformers into %s)' % (e, pydeps))
        return 77
    transformers.logging.set_verbosity_error()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    data, val = os.path.join(work, 'tokens.bin'), os.path.join(work, 'val.bin')
    for out, files in ((data, lic[:4]), (val, lic[4:6])):
        subprocess.run([sys.executable, make_tokens, out] + files + ['--vocab', str(V)],
                       check=True, stdout=subprocess.DEVNULL)

    torch.manual_seed(1234)
    cfg = transformers.GPT2Config(vocab_size=V, n_positions=T, n_embd=C, n_layer=L, n_head=NH)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if 'ln_' in n or n.endswith('bias'):
                p.add_(torch.randn_like(p) * 0.1)
    hf_dir = os.path.join(work, 'hf')
    model.save_pretrained(hf_dir, safe_serialization=True)
    src = load_file(os.path.join(hf_dir, 'model.safetensors'))
    prefix = 'transformer.'
    assert prefix + 'wte.weight' in src, sorted(src)[:4]
    # the same weights as a bare file laid out as the hub's gpt2 file: no
    # prefix, the attention's mask buffers (ignored), no config.json beside
    # it; and the tied head written out (accepted: it is wte)
    bare = os.path.join(work, 'bare', 'gpt2.safetensors')
    os.makedirs(os.path.dirname(bare))
    hub = {k[len(prefix):]: v for k, v in src.items()}
    hub.update({'h.%d.attn.bias' % l: np.tril(np.ones((1, 1, T, T), dtype=np.float32))
                for l in range(L)})
    hub['lm_head.weight'] = src[prefix + 'wte.weight'].copy()
    save_file(hub, bare, metadata={'format': 'pt'})

    fails = []

    def check(what, ok, detail=''):
        print('%-52s %s %s' % (what, 'ok' if ok else 'FAIL', detail))
        if not ok:
            fails.append(what)

    # (a) and (c) in every layout
    for name, world, flags in LAYOUTS:
        dump, export = os.path.join(work, name + '_dump'), os.path.join(work, name + '_hf')
        moe = '--experts' in flags
        args = MODEL + flags + ['--data', data, '--val-data', val, '--eval-batches', '1',
                                '--eval-every', '0', '--steps', '2', '--lr', '1e-3',
                                '--init-from', hf_dir, '--dump-dir', dump] + (
                                    [] if moe else ['--export-hf', export])
        if run_world(rank_bin, args, work, name, world) is None:
            check(name + ': the run', False)
            continue
        layout = json.load(open(os.path.join(dump, 'layout.json')))
        init = np.fromfile(os.path.join(dump, 'params_init.bin'), dtype=np.float32)
        want = canon_from_hf(src, layout, prefix)
        if moe:  # a MoE layer holds no dense MLP (planner/model.h): 0 there
            mls = {t['layer'] for t in json.load(open(os.path.join(dump, 'moe_layout.json')))[
                'tensors']}
            for t in layout['tensors']:
                if t['name'] in ('fcw', 'fcb', 'fcprojw', 'fcprojb'):
                    per = t['size'] // layout['layers']
                    for l in mls:
                        want[t['offset'] + l * per:t['offset'] + (l + 1) * per] = 0
        check(name + ': (a) initial parameters = the checkpoint',
              init.tobytes() == want.tobytes(),
              '' if init.tobytes() == want.tobytes() else
              'max diff %g' % float(np.max(np.abs(init - want))))
        ours = float(open(os.path.join(dump, 'loss_1.txt')).read().split()[0])
        ref = hf_loss(model, os.path.join(dump, 'batch_1.bin'))
        check(name + ': (a) step-1 loss = transformers\'', abs(ours - ref) <= TOL,
              'ours %.7f transformers %.7f diff %.1e' % (ours, ref, abs(ours - ref)))
        if moe:
            ml = json.load(open(os.path.join(dump, 'moe_layout.json')))
            mp = np.fromfile(os.path.join(dump, 'moe_params_init.bin'), dtype=np.float32)
            bad = []
            for t in ml['tensors']:
                if t['name'] == 'moe_router':
                    continue
                dense, tr = HF[t['name'][len('moe_'):]]
                a = src[prefix + dense % t['layer']]
                want = np.stack([a.T if tr else a] * ml['experts']).reshape(-1)
                got = mp[t['offset']:t['offset'] + want.size]
                if got.tobytes() != want.tobytes():
                    bad.append('%s.%d' % (t['name'], t['layer']))
            check(name + ': (a) every expert = its layer\'s MLP', not bad, ' '.join(bad))
            continue
        final = np.fromfile(os.path.join(dump, 'params_2.bin'), dtype=np.float32)
        got = load_file(os.path.join(export, 'model.safetensors'))
        bad = bytes_equal(got, hf_from_canon(final, layout, prefix))
        check(name + ': (c) export = the final parameters', not bad, ' '.join(bad[:4]))
        loaded, info = transformers.GPT2LMHeadModel.from_pretrained(
            export, output_loading_info=True)
        loaded.eval()
        missing = [k for k in info['missing_keys'] if not k.endswith('attn.bias')]
        check(name + ': (c) from_pretrained: every key', not missing and
              not info['unexpected_keys'], '%s %s' % (missing, info['unexpected_keys']))
        ours = float(open(os.path.join(dump, 'val_loss_2.txt')).read().split()[0])
        ref = hf_loss(loaded, os.path.join(dump, 'val_batch_0.bin'))
        check(name + ': (c) trained loss = transformers\' on the export',
              abs(ours - ref) <= TOL,
              'ours %.7f transformers %.7f diff %.1e' % (ours, ref, abs(ours - ref)))

    # (b) the round trip, no step taken
    # (--export-init runs each rank alone; in the layouts above (a) and (c)
    # hold the way in and the way out bit for bit)
    for name, world, flags, source in (('rt_bare', 1, [], bare), ('rt_dir', 1, [], hf_dir)):
        export = os.path.join(work, name + '_hf')
        args = MODEL + flags + ['--data', data, '--steps', '1', '--init-from', source,
                                '--export-init', os.path.join(work, name + '_dump'),
                                '--export-hf', export]
        if not run_quiet(rank_bin, args, work, name, world):
            check(name + ': the run', False)
            continue
        got = load_file(os.path.join(export, 'model.safetensors'))
        bad = bytes_equal(got, src)
        check(name + ': (b) round trip, every tensor\'s bytes', not bad, ' '.join(bad[:4]))

    # (d) refusals
    def refused(what, cmd, needles, rc_want=2):
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=60,
                           env=dict(os.environ, PX_WORLD_SIZE='1'))
        text = r.stdout + r.stderr
        ok = (r.returncode == rc_want if rc_want else r.returncode != 0) and \
            all(n in text for n in needles)
        check(what, ok, '' if ok else 'rc %d: %s' % (r.returncode, text.strip()[-300:]))

    refused('(d) rank: other n_embd named', [rank_bin] + model_args(dim=32) + [
        '--data', data, '--steps', '1', '--init-from', hf_dir], ['n_embd=64', 'dim=32'])
    trunc = os.path.join(work, 'trunc.safetensors')
    with open(bare, 'rb') as f, open(trunc, 'wb') as g:
        g.write(f.read()[:-100])
    refused('(d) rank: a truncated file', [rank_bin] + MODEL + [
        '--data', data, '--steps', '1', '--init-from', trunc], ['trunc.safetensors', 'inside'])
    # a GPT-2 of other math, or a file that is not one, named (parallax-rank
    # checks at start what pctl and the daemon check at submit)
    def variant(tag, config=None, tensors=None, raw=None):
        d = os.path.join(work, 'bad_' + tag)
        os.makedirs(d)
        c = json.load(open(os.path.join(hf_dir, 'config.json')))
        c.update(config or {})
        json.dump(c, open(os.path.join(d, 'config.json'), 'w'))
        path = os.path.join(d, 'model.safetensors')
        if raw is not None:
            open(path, 'wb').write(raw)
        else:
            save_file(tensors or src, path, metadata={'format': 'pt'})
        return d

    nosafe = os.path.join(work, 'bad_nosafetensors')
    os.makedirs(nosafe)
    shutil.copy(os.path.join(hf_dir, 'config.json'), nosafe)
    refused('(d) rank: a directory without model.safetensors', [rank_bin] + MODEL + [
        '--data', data, '--steps', '1', '--init-from', nosafe], ['has no model.safetensors'])
    untied = dict(src)
    untied['lm_head.weight'] = src[prefix + 'wte.weight'] * 2
    half = {k: v.astype(np.float16) for k, v in src.items()}
    for tag, d, needles in (
            ('relu', variant('relu', config={'activation_function': 'relu'}),
             ["activation_function 'relu'", 'gelu_new']),
            ('eps', variant('eps', config={'layer_norm_epsilon': 1e-6}),
             ['layer_norm_epsilon 1e-06', '1e-5']),
            ('inner', variant('inner', config={'n_inner': 3 * C}), ['n_inner']),
            ('untied', variant('untied', config={'tie_word_embeddings': False}),
             ['tie_word_embeddings']),
            ('lmhead', variant('lmhead', tensors=untied), ['lm_head.weight differs']),
            ('f16', variant('f16', tensors=half), ['is F16', 'only F32']),
            ('notjson', variant('notjson', raw=b'\x10\0\0\0\0\0\0\0not json at all!'),
             ['not a JSON object']),
            ('missing', variant('missing', tensors={k: v for k, v in src.items()
                                                    if 'h.2.mlp.c_fc.weight' not in k}),
             ['no tensor transformer.h.2.mlp.c_fc.weight'])):
        refused('(d) rank: ' + tag, [rank_bin] + MODEL + [
            '--data', data, '--steps', '1', '--init-from', d], needles,
            rc_want=1 if tag == 'lmhead' else 2)

    if pctl:
        refused('(d) pctl submit --dry-run: other n_layer named', [pctl, 'submit'] +
                model_args(layers=3) + [
            '--data', data, '--steps', '1', '--init-from', hf_dir, '--dry-run'],
            ['n_layer=4', 'layers=3'], rc_want=0)
        refused('(d) pctl submit --dry-run: experts with --export-hf', [pctl, 'submit'] +
                MODEL + ['--data', data, '--steps', '1', '--experts', '2', '--export-hf',
                         os.path.join(work, 'nope'), '--dry-run'],
                ['experts=2 with export_hf'], rc_want=0)

    if fails:
        print('FAIL: %d checks: %s' % (len(fails), '; '.join(fails)))
        return 1
    print('PASS')
    return 0


if __name__ == '__main__':
    sys.exit(main())
