#!/usr/bin/python3
"""make_tokens.py: write text files as an llm.c-layout token file (byte-level
tokens: token = byte value, vocab 256).

usage: make_tokens.py OUT INPUT [INPUT ...] [--max-bytes N] [--vocab N]

--vocab N (N >= 256) spreads the byte tokens over GPT-2-sized id ranges, for
testing a large, padded vocab with the same text: byte b becomes id
(b * 197) % N, except the newline, which becomes N - 1 (the last real id,
next to the padding rows); with N = 50257 the 256 ids are distinct.

Layout: 256 little-endian int32 header (magic 20240520, version 1, token
count, zeros), then the tokens as little-endian uint16. Stdlib only."""
import struct
import sys


def main(argv):
    max_bytes = None
    vocab = None
    args = []
    i = 1
    while i < len(argv):
        if argv[i] == '--max-bytes':
            max_bytes = int(argv[i + 1])
            i += 2
        elif argv[i] == '--vocab':
            vocab = int(argv[i + 1])
            i += 2
        else:
            args.append(argv[i])
            i += 1
    if len(args) < 2:
        print(__doc__, file=sys.stderr)
        return 2
    out, inputs = args[0], args[1:]
    data = bytearray()
    for path in inputs:
        with open(path, 'rb') as f:
            data += f.read()
        if max_bytes is not None and len(data) >= max_bytes:
            data = data[:max_bytes]
            break
    if not data:
        print('make_tokens.py: no input bytes', file=sys.stderr)
        return 1
    tokens = list(data)
    if vocab is not None:
        if vocab < 256 or vocab > 65536:
            print('make_tokens.py: --vocab must be in 256..65536', file=sys.stderr)
            return 2
        tokens = [vocab - 1 if b == 10 else (b * 197) % vocab for b in data]
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(data)
    with open(out, 'wb') as f:
        f.write(struct.pack('<256i', *header))
        f.write(struct.pack('<%dH' % len(tokens), *tokens))
    print('%s: %d tokens' % (out, len(data)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
