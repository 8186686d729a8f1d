#!/usr/bin/python3
"""`pctl data prepare --tokenizer`, against Hugging Face's `tokenizers` itself.

Byte-level BPE tokenizers are trained here, at test time, on a corpus of
Debian's license texts, a block of non-ASCII text, special tokens, CRLF,
odd whitespace, runs of thousands of spaces and punctuation (long pieces), and ~1 MB of random words over Latin, Greek and Cyrillic
letters (so a large vocab can be learnt):
  gpt2-4k     GPT-2 style (ByteLevel pre-tokenizer with its regex), vocab 4,096
  gpt2-50k    the same, vocab 50,257 (GPT-2's size)
  llama3-4k   Llama 3 style (Split on Llama 3's regex, then ByteLevel without
              regex; ignore_merges), vocab 4,096
  big-70k     GPT-2 style, vocab 70,000: ids past 65,535, so uint32 tokens
For each, the ids pctl writes (on 2 threads) equal tokenizers'
encode(corpus, add_special_tokens=False) over the whole corpus; the header
carries magic, version (1: uint16, 2: uint32), count and the vocab; one
thread writes the same bytes as two; Split pre-tokenizers with each of the
five behaviours, on regexes that also match empty strings, give tokenizers'
ids; decode(encode(x)) == x (the C module,
through test_tokenizer's roundtrip mode); --token-bytes 4 forces uint32 for
a small vocab; --val-fraction splits the same ids. Bad files and text get
a clear error naming the file and the field.

usage: test_tokenizer_hf.py PCTL TEST_TOKENIZER WORKDIR PYDEPS
Exit 0 pass, 1 fail, 77 skip (the tokenizers package not installed: deploy/
setup.sh --tests puts it in build/pydeps)."""
import json
import os
import random
import shutil
import struct
import subprocess
import sys

LLAMA3_REGEX = (r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}|"
                r" ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+")

EXTRA = ("Ünïcödé naïve café — “quotes” ‘single’ 日本語のテキスト 中文 한국어 ١٢٣٤ 12345678 "
         "Ελληνικά кириллица\n<|endoftext|>Next document's text, it'll be fine; we'd "
         "SHOUT'S.\n\n\n  indented\tand\t\ttabs   \r\nCRLF line\r\n\u00a0nbsp\u2003em space "
         "end.<|endoftext|>\n   \n\t\n" + "=" * 3000 + "\n" + " " * 4001 + "x\n" +
         "-+" * 1500 + "\n")


def corpus_text():
    parts = []
    lic = "/usr/share/common-licenses"
    for n in sorted(os.listdir(lic)):
        p = os.path.join(lic, n)
        if os.path.isfile(p) and not os.path.islink(p):
            parts.append(open(p, encoding="utf-8", errors="replace", newline="").read())
    parts.append(EXTRA)
    rng = random.Random(7)
    alpha = [chr(c) for c in list(range(0x61, 0x7b)) + list(range(0x3b1, 0x3ca)) +
             list(range(0x430, 0x450))]
    words = ["".join(rng.choice(alpha) for _ in range(rng.randint(2, 9))) for _ in range(40000)]
    for _ in range(8000):
        parts.append(" ".join(rng.choice(words) for _ in range(rng.randint(3, 14))) + ".\n")
    return "".join(parts)


def train(tk, text, style, vocab, path):
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers
    if style == "llama3":
        tok = Tokenizer(models.BPE(ignore_merges=True))
        tok.pre_tokenizer = pre_tokenizers.Sequence([
            pre_tokenizers.Split(Regex(LLAMA3_REGEX), behavior="isolated", invert=False),
            pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    else:
        tok = Tokenizer(models.BPE())
        tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tr = trainers.BpeTrainer(vocab_size=vocab, special_tokens=["<|endoftext|>"],
                             initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                             show_progress=False)
    tok.train_from_iterator([text], tr)
    tok.save(path)
    return tok


def read_tokens(path):
    raw = open(path, "rb").read()
    hdr = struct.unpack("<256i", raw[:1024])
    width = {1: 2, 2: 4}[hdr[1]]
    n = hdr[2]
    assert len(raw) == 1024 + width * n, (path, len(raw), n, width)
    ids = list(struct.unpack("<%d%s" % (n, "H" if width == 2 else "I"), raw[1024:]))
    return hdr, ids


def main():
    pctl, test_tok, work, pydeps = sys.argv[1:5]
    sys.path.append(pydeps)  # after Debian's packages, as the other pydeps tests
    try:
        import tokenizers
    except ImportError:
        print("SKIP: the tokenizers package is not installed (deploy/setup.sh --tests)")
        return 77
    print("tokenizers", tokenizers.__version__)
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    text = corpus_text()
    corpus = os.path.join(work, "corpus.txt")
    with open(corpus, "w", encoding="utf-8", newline="") as f:
        f.write(text)
    print("corpus: %d bytes" % len(text.encode()))

    def run(*a, ok=True):
        r = subprocess.run([str(x) for x in a], capture_output=True, text=True, timeout=120)
        if ok and r.returncode:
            raise AssertionError("%s: exit %d: %s%s" % (a, r.returncode, r.stderr, r.stdout))
        return r

    for name, style, vocab, version in [("gpt2-4k", "gpt2", 4096, 1),
                                        ("gpt2-50k", "gpt2", 50257, 1),
                                        ("llama3-4k", "llama3", 4096, 1),
                                        ("big-70k", "gpt2", 70000, 2)]:
        tj = os.path.join(work, name + ".json")
        tok = train(tokenizers, text, style, vocab, tj)
        assert tok.get_vocab_size() == vocab, (name, tok.get_vocab_size())
        want = tok.encode(text, add_special_tokens=False).ids
        out = os.path.join(work, name + ".bin")
        r = run(pctl, "data", "prepare", "--text", corpus, "--out", out, "--tokenizer", tj,
                "--threads", "2")
        assert "--vocab %d" % vocab in r.stdout, r.stdout
        hdr, ids = read_tokens(out)
        assert hdr[:4] == (20240520, version, len(want), vocab), (name, hdr[:4])
        assert ids == want, "%s: ids differ from tokenizers' at index %d of %d" % (
            name, next(i for i, (a, b) in enumerate(zip(ids, want)) if a != b)
            if any(a != b for a, b in zip(ids, want)) else min(len(ids), len(want)), len(want))
        print("%s: %d ids equal to tokenizers' (version %d, vocab %d, %s)" % (
            name, len(ids), version, vocab, r.stdout.splitlines()[0]))
        one = os.path.join(work, name + "-1.bin")
        run(pctl, "data", "prepare", "--text", corpus, "--out", one, "--tokenizer", tj,
            "--threads", "1")
        assert open(one, "rb").read() == open(out, "rb").read(), name + ": 1 thread differs"
        r = run(test_tok, "roundtrip", tj, corpus)
        print("%s: %s" % (name, r.stdout.strip()))
        if name == "llama3-4k":
            r = run(test_tok, "chunks", tj, corpus)
            print("%s: %s" % (name, r.stdout.strip()))

    # Split's five behaviours with regexes that match empty strings too
    # (tokenizers' find_iter rules), on 20 KB of the corpus, vocab 400
    from tokenizers import Regex, decoders, models, pre_tokenizers, trainers
    part = text[:20000]
    ptxt = os.path.join(work, "part.txt")
    with open(ptxt, "w", encoding="utf-8", newline="") as f:
        f.write(part)
    for pat in [r"\s*", r"[aeiou]*", r"(?=e)", r"[^\p{L}]+"]:
        for beh in ["removed", "isolated", "merged_with_previous", "merged_with_next",
                    "contiguous"]:
            tok = tokenizers.Tokenizer(models.BPE())
            tok.pre_tokenizer = pre_tokenizers.Sequence([
                pre_tokenizers.Split(Regex(pat), behavior=beh),
                pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
            tok.decoder = decoders.ByteLevel()
            tok.train_from_iterator([part], trainers.BpeTrainer(
                vocab_size=400, initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                show_progress=False))
            tj = os.path.join(work, "split.json")
            tok.save(tj)
            out = os.path.join(work, "split.bin")
            run(pctl, "data", "prepare", "--text", ptxt, "--out", out, "--tokenizer", tj)
            _, ids = read_tokens(out)
            assert ids == tok.encode(part, add_special_tokens=False).ids, (pat, beh)
    print("Split: 4 regexes x 5 behaviours, the ids of tokenizers")

    # --token-bytes 4 on a small vocab: version 2, the same ids
    tj = os.path.join(work, "gpt2-4k.json")
    out = os.path.join(work, "forced32.bin")
    run(pctl, "data", "prepare", "--text", corpus, "--out", out, "--tokenizer", tj,
        "--token-bytes", "4")
    hdr, ids = read_tokens(out)
    _, ids16 = read_tokens(os.path.join(work, "gpt2-4k.bin"))
    assert hdr[1] == 2 and ids == ids16, hdr[:4]
    print("--token-bytes 4: version 2, the same %d ids" % len(ids))
    # --val-fraction: the last tenth of the ids in x_val.bin
    out = os.path.join(work, "split.bin")
    run(pctl, "data", "prepare", "--text", corpus, "--out", out, "--tokenizer", tj,
        "--val-fraction", "0.1")
    _, tr = read_tokens(out)
    _, va = read_tokens(os.path.join(work, "split_val.bin"))
    assert tr + va == ids16 and len(va) == int(len(ids16) * 0.1), (len(tr), len(va))
    print("--val-fraction 0.1: %d + %d ids" % (len(tr), len(va)))

    # errors: each names the file and what is wrong
    good = json.load(open(tj))

    def bad_file(tag, edit):
        d = json.loads(json.dumps(good))
        edit(d)
        p = os.path.join(work, "bad-%s.json" % tag)
        json.dump(d, open(p, "w"))
        return p

    def no_merges(d):
        del d["model"]["merges"]

    def wordpiece(d):
        d["model"]["type"] = "WordPiece"

    def unigram_ws(d):
        d["pre_tokenizer"] = {"type": "Whitespace"}

    def metaspace(d):
        d["pre_tokenizer"] = {"type": "Metaspace", "replacement": "\u2581",
                              "prepend_scheme": "always", "split": True}
        d["decoder"] = {"type": "Metaspace", "replacement": "\u2581",
                        "prepend_scheme": "always", "split": True}

    def bad_merge(d):
        d["model"]["merges"][5] = ["Q", "\u2581x"]

    badjson = os.path.join(work, "bad-json.json")
    open(badjson, "w").write(open(tj).read()[:5000])
    cases = [(badjson, "not valid JSON"),
             (bad_file("merges", no_merges), "model.merges is missing"),
             (bad_file("type", wordpiece), "model.type 'WordPiece' is not supported"),
             (bad_file("ws", unigram_ws), "pre_tokenizer.type 'Whitespace' is not supported"),
             (bad_file("meta", metaspace), "not a byte-level BPE"),
             (bad_file("merge5", bad_merge), "model.merges[5]"),
             (os.path.join(work, "missing.json"), "cannot open")]
    for path, want in cases:
        r = run(pctl, "data", "prepare", "--text", corpus, "--out", os.path.join(work, "x.bin"),
                "--tokenizer", path, ok=False)
        assert r.returncode == 1 and want in r.stderr and path in r.stderr, (path, r.stderr)
        print("refused: %s" % r.stderr.strip())
    latin1 = os.path.join(work, "latin1.txt")
    open(latin1, "wb").write(b"caf\xe9 au lait\n")
    r = run(pctl, "data", "prepare", "--text", latin1, "--out", os.path.join(work, "x.bin"),
            "--tokenizer", tj, ok=False)
    assert r.returncode == 1 and "not valid UTF-8 at byte 3" in r.stderr, r.stderr
    print("refused: %s" % r.stderr.strip())
    r = run(pctl, "data", "prepare", "--text", corpus, "--out", os.path.join(work, "x.bin"),
            "--tokenizer", os.path.join(work, "big-70k.json"), "--token-bytes", "2", ok=False)
    assert r.returncode == 1 and "vocab 70000 > 65536" in r.stderr, r.stderr
    print("refused: %s" % r.stderr.strip())
    assert not os.path.exists(os.path.join(work, "x.bin"))
    shutil.rmtree(work, ignore_errors=True)
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
