"""test_func_length.py: no function in engine/ runs past 200 lines, and the
old all-in-one px_train_run_ex stays gone (a trainer read in parts:
trainer.c's assembly, pipeline.c's runner, params.c's state, train.c's loop).

A function is a body opened by '{' in column 0 and closed by '}' in column
0 (the code's style for function bodies: STYLE.md), counted from its
signature's first line to the closing brace. Usage: test_func_length.py
ENGINE_DIR. Stdlib only."""
import os
import re
import sys

LIMIT = 200


def functions(text):
    """(name, lines) of every function body in C source `text`."""
    lines = text.split('\n')
    out = []
    i = 0
    while i < len(lines):
        if lines[i] == '{':
            # the signature: back to the line that starts it (column 0, not
            # a comment, a preprocessor line or the end of something else)
            s = i - 1
            while s > 0 and (lines[s].startswith(' ') or lines[s].startswith('\t')):
                s -= 1
            m = re.search(r'(\w+)\s*\(', lines[s])
            name = m.group(1) if m else lines[s].strip()
            e = i + 1
            while e < len(lines) and lines[e] != '}':
                e += 1
            out.append((name, e - s + 1))
            i = e
        i += 1
    return out


def main():
    engine = sys.argv[1]
    # the measure itself: a 3-line function and a 203-line one
    sample = 'static int f(void)\n{\n}\n\nint g(int a,\n      int b)\n{\n' + \
        '    a++;\n' * 199 + '    return a + b;\n}\n'
    got = dict(functions(sample))
    assert got == {'f': 3, 'g': 204}, got
    fails, seen, longest = [], 0, ('', 0)
    for fn in sorted(os.listdir(engine)):
        if not fn.endswith('.c'):
            continue
        text = open(os.path.join(engine, fn)).read()
        assert 'px_train_run_ex' not in text, '%s: px_train_run_ex is back' % fn
        for name, n in functions(text):
            seen += 1
            if n > longest[1]:
                longest = ('%s:%s' % (fn, name), n)
            if n > LIMIT:
                fails.append('%s: %s is %d lines (at most %d)' % (fn, name, n, LIMIT))
    assert seen > 100, 'only %d functions found in %s' % (seen, engine)
    for f in fails:
        print(f)
    print('%d functions in engine/, the longest %s at %d lines' % (seen, longest[0], longest[1]))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
