#!/usr/bin/env python3
"""Writes a token file in the llm.c layout (256 x int32 header: magic
20240520, version 1, token count; then uint16 tokens) of N random tokens
below VOCAB, for deploy/gpu-check.sh (the GPU machine has no corpus).
Usage: make_tokens.py OUT N VOCAB [SEED]"""
import struct
import sys
import random

out, n, vocab = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
rnd = random.Random(int(sys.argv[4]) if len(sys.argv) > 4 else 1337)
with open(out, "wb") as f:
    f.write(struct.pack("<256i", 20240520, 1, n, *([0] * 253)))
    f.write(struct.pack(f"<{n}H", *(rnd.randrange(vocab) for _ in range(n))))
