#!/usr/bin/python3
"""parallax-rank --sample on a Hugging Face GPT-2 against `transformers`'
greedy generate (fp32, CPU; no download).

Two randomly initialised GPT2LMHeadModels (2 layers, 4 heads, n_embd 64,
n_positions 48; biases and LayerNorms moved off 0 and 1, weights drawn
wider than GPT-2's 0.02 so that the logits are not near ties) are saved
with save_pretrained and sampled from directly (--sample DIR):
  * bytes: vocab 256 (no tokenizer: byte b is id b);
  * BPE:   a byte-level BPE trained here with the `tokenizers` package on
           the licenses in /usr/share/common-licenses (vocab 512), the
           model's vocab its size; --tokenizer FILE.
For a few prompts: the prompt ids parallax encodes equal tokenizers'
encode, the greedy ids (--sample-temperature 0) equal
model.generate(do_sample=False, max_new_tokens=N) id for id, and the text
on stdout is those ids' bytes. The smallest gap between the two best
logits on the way is printed (a near tie would make the exact comparison
fragile). Then:
  * the tokenizer beside the data: `pctl data prepare --tokenizer` copies
    it to book.tokenizer.json beside book.bin, and --sample with --data
    book.bin (no --tokenizer) codes the text with it: the same ids; the
    same OUT prepared byte by byte removes it;
  * the safetensors file alone (DIR/model.safetensors) gives the same ids;
  * a tokenizer of another vocab than the model's is refused (exit 2,
    naming both), as is a model without a tokenizer whose vocab is not 256.

usage: test_sample_hf.py RANK_BIN PCTL WORK PYDEPS
PYDEPS: build/pydeps (deploy/setup.sh --tests: transformers, tokenizers),
appended to sys.path so that Debian's numpy and torch stay first.
Exit 0 pass, 1 fail, 77 skip (transformers or tokenizers missing)."""
import json
import os
import shutil
import subprocess
import sys

L, NH, C, T = 2, 4, 64, 48
NEW = 16  # tokens generated after each prompt (prompt + NEW <= T)
FAILS = []


def check(what, ok, detail=''):
    print('%s: %s%s' % ('ok  ' if ok else 'FAIL', what, (' (%s)' % detail) if detail else ''))
    if not ok:
        FAILS.append(what)


def make_model(transformers, torch, vocab, seed, path):
    torch.manual_seed(seed)
    cfg = transformers.GPT2Config(vocab_size=vocab, n_positions=T, n_embd=C, n_layer=L,
                                  n_head=NH, initializer_range=0.2)
    model = transformers.GPT2LMHeadModel(cfg).eval()
    with torch.no_grad():
        for n, p in model.named_parameters():
            if 'ln_' in n or n.endswith('bias'):
                p.add_(torch.randn_like(p) * 0.1)
    model.save_pretrained(path, safe_serialization=True)
    return model


def greedy(torch, model, ids):
    """transformers' greedy ids after `ids`, and the smallest top-2 gap."""
    x = torch.tensor([ids], dtype=torch.long)
    with torch.no_grad():
        out = model.generate(x, attention_mask=torch.ones_like(x), do_sample=False,
                             max_new_tokens=NEW, min_new_tokens=NEW, pad_token_id=0,
                             eos_token_id=None, output_scores=True,
                             return_dict_in_generate=True)
    gap = min(float((s[0].topk(2).values[0] - s[0].topk(2).values[1])) for s in out.scores)
    return out.sequences[0, len(ids):].tolist(), gap


def sample(rank_bin, work, weights, vocab, prompt, extra, tag):
    ids_path = os.path.join(work, tag + '.ids.json')
    cmd = [rank_bin, '--layers', str(L), '--heads', str(NH), '--dim', str(C), '--seq', str(T),
           '--vocab', str(vocab), '--sample', weights, '--sample-prompt', prompt,
           '--sample-tokens', str(NEW), '--sample-temperature', '0',
           '--sample-ids', ids_path] + extra
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    if p.returncode != 0:
        print(p.stderr.decode(errors='replace')[-2000:])
        return None, None, p
    with open(ids_path) as f:
        got = json.load(f)
    return got['prompt'], got['ids'], p


def main():
    rank_bin, pctl, work, pydeps = sys.argv[1:5]
    sys.path.append(pydeps)  # after Debian's numpy and torch
    try:
        import torch
        import transformers
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
        from transformers.models.gpt2.tokenization_gpt2 import bytes_to_unicode
    except ImportError as e:
        print('SKIP: %s (deploy/setup.sh --tests installs transformers into %s)' % (e, pydeps))
        return 77
    transformers.logging.set_verbosity_error()
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    lic = sorted(os.path.join('/usr/share/common-licenses', f)
                 for f in os.listdir('/usr/share/common-licenses'))
    text = ''.join(open(f, encoding='utf-8', errors='ignore').read() for f in lic[:6])
    prompts = ['The ', 'You may copy', 'Permission is granted', 'GNU General Public',
               ' warranty of\n']
    gaps = []

    # ---- bytes: vocab 256
    byte_dir = os.path.join(work, 'bytes')
    bmodel = make_model(transformers, torch, 256, 11, byte_dir)
    for i, pr in enumerate(prompts):
        pids, ids, p = sample(rank_bin, work, byte_dir, 256, pr, [], 'bytes%d' % i)
        want, gap = greedy(torch, bmodel, list(pr.encode()))
        gaps.append(gap)
        check('bytes %r: greedy ids equal generate()' % pr, ids == want,
              'got %s want %s' % (ids, want))
        check('bytes %r: stdout is the ids\' bytes' % pr,
              p.returncode == 0 and p.stdout == bytes(want))
        if i == 0:
            _, ids_f, _ = sample(rank_bin, work, os.path.join(byte_dir, 'model.safetensors'),
                                 256, pr, [], 'bytesfile')
            check('bytes: the safetensors file alone gives the same ids', ids_f == ids)

    # ---- BPE: a tokenizer trained here, vocab 512
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train_from_iterator([text], trainers.BpeTrainer(
        vocab_size=512, special_tokens=['<|endoftext|>'],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False))
    tj = os.path.join(work, 'tokenizer.json')
    tok.save(tj)
    V = tok.get_vocab_size()
    check('the trained tokenizer has vocab 512', V == 512, V)
    byte_of = {c: b for b, c in bytes_to_unicode().items()}

    def token_bytes(ids):
        return b''.join(bytes(byte_of[ch] for ch in tok.id_to_token(i)) for i in ids)

    bpe_dir = os.path.join(work, 'bpe')
    model = make_model(transformers, torch, V, 12, bpe_dir)
    results = {}
    for i, pr in enumerate(prompts):
        enc = tok.encode(pr, add_special_tokens=False).ids
        pids, ids, p = sample(rank_bin, work, bpe_dir, V, pr, ['--tokenizer', tj], 'bpe%d' % i)
        want, gap = greedy(torch, model, enc)
        gaps.append(gap)
        results[pr] = ids
        check('bpe %r: prompt ids equal tokenizers\' encode' % pr, pids == enc,
              'got %s want %s' % (pids, enc))
        check('bpe %r: greedy ids equal generate()' % pr, ids == want,
              'got %s want %s' % (ids, want))
        check('bpe %r: stdout is the ids\' bytes' % pr,
              p.returncode == 0 and p.stdout == token_bytes(want),
              '%r vs %r' % (p.stdout[:60], token_bytes(want)[:60]))
    print('distinct generated BPE ids: %d' % len({x for v in results.values() if v for x in v}))

    # ---- the tokenizer beside the data, as pctl data prepare leaves it
    corpus = os.path.join(work, 'corpus.txt')
    with open(corpus, 'w', encoding='utf-8') as f:
        f.write(text)
    book = os.path.join(work, 'book.bin')
    p = subprocess.run([pctl, 'data', 'prepare', '--text', corpus, '--out', book,
                        '--tokenizer', tj], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                       timeout=120)
    side = os.path.join(work, 'book.tokenizer.json')
    check('pctl data prepare --tokenizer copies it beside the data',
          p.returncode == 0 and os.path.exists(side) and
          open(side, 'rb').read() == open(tj, 'rb').read(), p.stderr.decode()[-500:])
    pr = prompts[1]
    _, ids, _ = sample(rank_bin, work, bpe_dir, V, pr, ['--data', book], 'beside')
    check('--data book.bin codes with book.tokenizer.json', ids == results[pr],
          '%s vs %s' % (ids, results[pr]))
    # the same OUT prepared byte by byte: the tokenizer beside it goes
    p = subprocess.run([pctl, 'data', 'prepare', '--text', corpus, '--out', book],
                       stdout=subprocess.PIPE, stderr=subprocess.PIPE, timeout=120)
    check('pctl data prepare without --tokenizer removes the one beside OUT',
          p.returncode == 0 and not os.path.exists(side), p.stdout.decode()[-300:])

    # ---- refusals
    _, _, p = sample(rank_bin, work, byte_dir, 256, 'x', ['--tokenizer', tj], 'mismatch')
    err = p.stderr.decode(errors='replace')
    check('a tokenizer of vocab 512 for a model of vocab 256: exit 2 naming both',
          p.returncode == 2 and 'vocab 512' in err and 'vocab 256' in err, err.strip()[-300:])
    _, _, p = sample(rank_bin, work, bpe_dir, V, 'x', [], 'notok')
    err = p.stderr.decode(errors='replace')
    check('vocab 512 without a tokenizer: exit 2 naming the vocab',
          p.returncode == 2 and 'vocab=512' in err, err.strip()[-300:])

    print('smallest gap between the two best logits: %.3g' % min(gaps))
    if FAILS:
        print('%d check(s) failed' % len(FAILS))
        return 1
    print('all checks passed')
    return 0


if __name__ == '__main__':
    sys.exit(main())
