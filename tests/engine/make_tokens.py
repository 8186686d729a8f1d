#!/usr/bin/env python3
"""make_tokens.py: write text files as an llm.c-layout token file (byte-level
tokens: token = byte value, vocab 256).

usage: make_tokens.py OUT INPUT [INPUT ...] [--max-bytes N]

Layout: 256 little-endian int32 header (magic 20240520, version 1, token
count, zeros), then the tokens as little-endian uint16. Stdlib only."""
import struct
import sys


def main(argv):
    max_bytes = None
    args = []
    i = 1
    while i < len(argv):
        if argv[i] == '--max-bytes':
            max_bytes = int(argv[i + 1])
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
    header = [0] * 256
    header[0], header[1], header[2] = 20240520, 1, len(data)
    with open(out, 'wb') as f:
        f.write(struct.pack('<256i', *header))
        f.write(struct.pack('<%dH' % len(data), *data))
    print('%s: %d tokens' % (out, len(data)))
    return 0


if __name__ == '__main__':
    sys.exit(main(sys.argv))
