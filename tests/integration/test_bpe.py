#!/usr/bin/python3
"""Integration: a BPE-tokenized corpus trained through the daemons.

A byte-level BPE tokenizer (vocab 512, GPT-2 style) is trained with Hugging
Face's `tokenizers` on Debian's license texts; `pctl data prepare
--tokenizer` writes the tokens and the validation split and prints the
vocab. Two daemons on loopback with one CPU device each:
1. a job with --vocab 256, below the tokenizer's, is refused at submit
   (INVALID_ARGUMENT, exit 1) naming both vocabs;
2. a dp=2 job across both daemons with --vocab taken from pctl's output
   completes 30 steps: every loss finite, the first near ln(512) (a fresh
   model's uniform guess over the vocab), the last five steps' mean well
   below the first five's; validation loss finite;
3. a job submitted without --vocab gets the file's (512), pctl says so;
4. the same text written as uint32 tokens (--token-bytes 4, version 2)
   trains to the same losses, bit for bit;
5. `pctl sample` of the dp=2 job codes its text with the tokenizer that
   pctl data prepare copied beside the data (lic.tokenizer.json): the
   seeded text is parallax-rank --sample's with --tokenizer on the same
   weights, the prompt's tokens are the tokenizer's, and the text is no
   byte-level decoding (vocab 512 has none).
Skipped (77) without the tokenizers package (deploy/setup.sh --tests puts it
in build/pydeps, found beside pctl)."""
import json
import math
import os
import re
import struct
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import pxcluster as pc  # noqa: E402


def main():
    args = pc.parse_args(sys.argv[1:])
    if not args.rank or not args.pctl:
        print("SKIP: parallax-rank or pctl not built")
        return 77
    pydeps = os.environ.get("PX_PYDEPS") or os.path.join(
        os.path.dirname(os.path.dirname(os.path.abspath(args.pctl))), "pydeps")
    sys.path.append(pydeps)  # after Debian's packages, as the other pydeps tests
    try:
        from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers
    except ImportError:
        print("SKIP: the tokenizers package is not in %s (deploy/setup.sh --tests)" % pydeps)
        return 77

    cl = pc.Cluster(args.parallaxd, n=2, devices=1, tag="bpe")
    cl.env["PX_RANK_BIN"] = os.path.abspath(args.rank)
    a = cl.daemons[0]
    for d in cl.daemons:
        d.env = cl.env
    env = dict(cl.env, PX_SERVER=a.control)

    def pctl(*x, check=True):
        r = subprocess.run([args.pctl] + [str(v) for v in x], capture_output=True, text=True,
                           timeout=240, env=env)
        if check and r.returncode:
            raise AssertionError("pctl %s: exit %d: %s%s" % (x, r.returncode, r.stderr, r.stdout))
        return r

    text = os.path.join(cl.workdir, "licenses.txt")
    with open(text, "wb") as f:
        lic = "/usr/share/common-licenses"
        for n in sorted(os.listdir(lic)):
            p = os.path.join(lic, n)
            if os.path.isfile(p) and not os.path.islink(p):
                f.write(open(p, "rb").read())
    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tok.decoder = decoders.ByteLevel()
    tok.train([text], trainers.BpeTrainer(vocab_size=512, special_tokens=["<|endoftext|>"],
                                          initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
                                          show_progress=False))
    tj = os.path.join(cl.workdir, "tokenizer.json")
    tok.save(tj)
    data = os.path.join(cl.workdir, "lic.bin")
    r = pctl("data", "prepare", "--text", text, "--out", data, "--tokenizer", tj,
             "--val-fraction", "0.05")
    m = re.search(r"submit with --vocab (\d+)", r.stdout)
    assert m, r.stdout
    vocab = int(m.group(1))
    assert vocab == 512, r.stdout
    print(r.stdout.strip())

    class Local:  # Cluster.start's readiness client: pctl
        def nodes(self):
            return json.loads(pctl("nodes", "--json").stdout)
    ok = False
    cl.start(lambda daemon: Local())
    try:
        common = ["--data", data, "--layers", "2", "--heads", "2", "--dim", "32", "--seq", "32",
                  "--batch", "8"]
        r = pctl("submit", *common, "--vocab", "256", check=False)
        assert r.returncode == 1 and "INVALID_ARGUMENT" in r.stderr and \
            "tokenized with vocab 512" in r.stderr and "vocab 256" in r.stderr, \
            (r.returncode, r.stderr)
        print("refused: %s" % r.stderr.strip())

        r = pctl("submit", *common, "--vocab", vocab, "--dp", "2", "--steps", "30", "--lr",
                 "3e-3", "--eval-every", "30", "--eval-batches", "2", "--name", "bpe",
                 "--follow", "--json")  # one device per daemon: a rank on each
        jid = json.loads(r.stdout)["id"]
        st = json.loads(pctl("status", jid, "--json").stdout)
        assert st["state"] == "completed", st["state"]
        steps = json.loads(pctl("metrics", jid, "--json").stdout)
        losses = [s["loss"] for s in steps]
        assert len(losses) == 30 and all(pc.finite(x) for x in losses), losses
        first, last = sum(losses[:5]) / 5, sum(losses[-5:]) / 5
        assert abs(losses[0] - math.log(vocab)) < 0.5, (losses[0], math.log(vocab))
        assert last < first - 0.5, (first, last)
        val = [s["val_loss"] for s in steps if s.get("val_loss") is not None]
        assert val and all(pc.finite(v) for v in val), steps
        print("dp=2 over 2 daemons, vocab %d: loss %.3f (ln %d = %.3f) -> %.3f (mean of the "
              "first five %.3f, last five %.3f); val loss %.3f" % (
                  vocab, losses[0], vocab, math.log(vocab), losses[-1], first, last, val[-1]))

        # no --vocab: pctl takes the one the file records (the tokenizer's)
        r = pctl("submit", *common, "--steps", "2", "--name", "bpe-auto", "--follow", "--json")
        assert "--vocab 512, the tokenizer's" in r.stderr, r.stderr
        st = json.loads(pctl("status", json.loads(r.stdout)["id"], "--json").stdout)
        assert st["state"] == "completed" and st["spec"]["vocab"] == 512, st
        print("no --vocab: %s" % r.stderr.strip())

        # the same tokens as uint32 (version 2): the ranks read them to the
        # same batches, so every loss is bitwise the uint16 job's
        data32 = os.path.join(cl.workdir, "lic32.bin")
        pctl("data", "prepare", "--text", text, "--out", data32, "--tokenizer", tj,
             "--val-fraction", "0.05", "--token-bytes", "4")
        with open(data32, "rb") as f:
            assert struct.unpack("<4i", f.read(16))[:2] == (20240520, 2)
        common32 = [data32 if x == data else x for x in common]
        r = pctl("submit", *common32, "--vocab", vocab, "--dp", "2", "--steps", "30", "--lr",
                 "3e-3", "--eval-every", "30", "--eval-batches", "2", "--name", "bpe32",
                 "--follow", "--json")
        jid32 = json.loads(r.stdout)["id"]
        steps32 = json.loads(pctl("metrics", jid32, "--json").stdout)
        assert [s["loss"] for s in steps32] == losses, (steps32, losses)
        assert [s["val_loss"] for s in steps32 if s.get("val_loss") is not None] == val
        print("uint32 token file: the same %d losses and validation loss, bit for bit" %
              len(losses))

        # the job's text, coded by the tokenizer beside its data
        assert open(os.path.join(cl.workdir, "lic.tokenizer.json"), "rb").read() == \
            open(tj, "rb").read()
        prompt = "You may copy"
        s = json.loads(pctl("sample", jid, "--prompt", prompt, "--tokens", "24",
                            "--temperature", "0.8", "--seed", "7", "--json").stdout)
        got = bytes(s["bytes"])
        ids_path = os.path.join(cl.workdir, "sample_ids.json")
        r = subprocess.run([args.rank, "--layers", "2", "--heads", "2", "--dim", "32", "--seq",
                            "32", "--vocab", str(vocab), "--sample", s["weights"],
                            "--tokenizer", tj, "--sample-prompt", prompt, "--sample-tokens",
                            "24", "--sample-temperature", "0.8", "--sample-seed", "7",
                            "--sample-ids", ids_path],
                           capture_output=True, timeout=120)
        assert r.returncode == 0, r.stderr.decode(errors="replace")
        ids = json.load(open(ids_path))
        assert got == r.stdout and len(got) > 0, (got, r.stdout)
        assert ids["codec"] == "bpe" and \
            ids["prompt"] == tok.encode(prompt, add_special_tokens=False).ids, ids
        print("pctl sample (BPE, beside the data): %r" % got.decode(errors="replace"))
        ok = True
    finally:
        cl.stop()
        if ok:
            cl.cleanup()
        else:
            print(cl.logs())
    print("PASS")
    return 0


if __name__ == "__main__":
    sys.exit(main())
