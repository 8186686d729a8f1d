#!/usr/bin/env python3
"""test_pctl_plot.py: `pctl metrics --plot` on a fixed metrics set (issue 14).

Writes a metrics file as `pctl metrics --json` prints it (steps 10..200 by
10, the training loss falling from 5.0 to 1.0, a validation loss after every
50th step) and plots it with --from-json at a fixed size, then decodes the
chart: every line fits the width, the chart has the asked height, the y
labels are the data's extremes, the step axis runs from the first to the
last step, and the Braille dots of the first and last training points and
the validation markers are in the cells the data puts them in (linear and
--log). A second file with two jobs checks the overlay (both jobs' curves
start in their own rows). Also --csv: one row per step with the val_loss
column empty where there was none.

usage: test_pctl_plot.py PCTL WORKDIR"""
import json
import math
import os
import shutil
import subprocess
import sys

W, H = 72, 12
LABEL = 10  # "%8.4g ┤"
problems = []


def check(ok, what):
    if not ok:
        problems.append(what)


def plot(pctl, path, *extra):
    out = subprocess.run([pctl, 'metrics', '--from-json', path, '--plot', '--width', str(W),
                          '--height', str(H)] + list(extra), check=True, capture_output=True,
                         text=True, env=dict(os.environ, NO_COLOR='1')).stdout
    return out.rstrip('\n').split('\n')


def decode(lines):
    """(legend lines, chart rows, axis, step labels, dots: set of (x, y))."""
    axis = next(i for i, l in enumerate(lines) if '└' in l)
    rows = lines[axis - H:axis]
    dots, marks = set(), {}
    for r, line in enumerate(rows):
        cells = line[LABEL:]
        for c, ch in enumerate(cells):
            cp = ord(ch)
            if 0x2800 <= cp <= 0x28FF:
                bits = cp - 0x2800
                for (dx, dy), b in {(0, 0): 1, (0, 1): 2, (0, 2): 4, (0, 3): 64, (1, 0): 8,
                                    (1, 1): 16, (1, 2): 32, (1, 3): 128}.items():
                    if bits & b:
                        dots.add((2 * c + dx, 4 * r + dy))
            else:
                marks[(c, r)] = ch
    return lines[:axis - H], rows, lines[axis], lines[axis + 1], dots, marks


def main():
    pctl, work = sys.argv[1], sys.argv[2]
    shutil.rmtree(work, ignore_errors=True)
    os.makedirs(work)
    steps = list(range(10, 201, 10))
    loss = [5.0 - 4.0 * (s - 10) / 190 for s in steps]
    rows = [{'step': s, 'loss': l, 'grad_norm': 1.0, 'lr': 1e-3, 'tokens_per_second': 100.0,
             'elapsed_s': s / 10, 'time_ms': 0,
             'val_loss': (l + 0.5 if s % 50 == 0 else None)} for s, l in zip(steps, loss)]
    one = os.path.join(work, 'one.json')
    json.dump(rows, open(one, 'w'))
    cw = W - LABEL - 1  # chart cells (one column of slack)
    for log in (False, True):
        lines = plot(pctl, one, *(['--log'] if log else []))
        tag = 'log' if log else 'linear'
        legend, chart, axis, labels, dots, marks = decode(lines)
        check(all(len(l) <= W - 1 for l in lines),
              '%s: a line is wider than %d: %s' % (tag, W - 1, max(lines, key=len)))
        check(len(chart) == H and all(len(r) == LABEL + cw for r in chart),
              '%s: chart rows %s' % (tag, [len(r) for r in chart]))
        top, bottom = float(chart[0][:8]), float(chart[-1][:8])
        vmin = 1.0  # the extremes of every series: the last training loss, and
        vmax = max(max(loss), max(r['val_loss'] for r in rows if r['val_loss']))
        check(abs(top - vmax) < 1e-3 and abs(bottom - vmin) < 1e-3,
              '%s: y labels %g..%g, data %g..%g' % (tag, bottom, top, vmin, vmax))
        check(labels.split()[1:] == ['10', '200'] and labels.rstrip().endswith('200') and
              len(labels.rstrip()) == LABEL + cw, '%s: step axis %r' % (tag, labels))

        def ypix(v):
            f = (lambda t: math.log10(t)) if log else (lambda t: t)
            return round((f(vmax) - f(v)) / (f(vmax) - f(vmin)) * (4 * H - 1))

        def xpix(s):
            return round((s - 10) / 190 * (2 * cw - 1))
        first, last = (xpix(10), ypix(5.0)), (xpix(200), ypix(1.0))
        check(first in dots, '%s: first point (step 10, loss 5) not at dot %s' % (tag, first))
        check(last == (2 * cw - 1, 4 * H - 1) and last in dots,
              '%s: last point (step 200, loss 1) not at the bottom-right dot %s' % (tag, last))
        check(min(x for x, _ in dots) == 0 and max(x for x, _ in dots) == 2 * cw - 1,
              '%s: the line does not span the chart' % tag)
        want = {(xpix(r['step']) // 2, ypix(r['val_loss']) // 4)
                for r in rows if r['val_loss']}
        check(set(marks) == want, '%s: validation markers at %s, expected %s' %
              (tag, sorted(marks), sorted(want)))
        check('one.json train' in legend[0] and 'one.json val' in legend[0],
              '%s: legend %r' % (tag, legend))
        if not log:
            print('\n'.join(lines))
    # two jobs overlaid: B's loss is twice A's; both start at the left edge
    two = os.path.join(work, 'two.json')
    json.dump({'jobA': rows, 'jobB': [dict(r, loss=2 * r['loss'], val_loss=None) for r in rows]},
              open(two, 'w'))
    legend, chart, _, _, dots, marks = decode(plot(pctl, two))
    # no colour (a pipe, NO_COLOR): each job's line shows its letter, the
    # legend says whose, so two Braille lines can be told apart
    letters = set(marks.values())
    check({'a', 'b'} <= letters, 'overlay without colour: line letters %s, want a and b'
          % sorted(letters))
    check('⣀a jobA train' in ' '.join(legend) and '⣀b jobB train' in ' '.join(legend),
          'overlay legend names each line\'s letter: %r' % legend)
    top = float(chart[0][:8])
    check(abs(top - 10.0) < 1e-3, 'overlay: top label %g, expected 10 (jobB)' % top)
    left = sorted(y for x, y in dots if x == 0)
    ya = round((10.0 - 5.0) / 9.0 * (4 * H - 1))
    check(left and left[0] == 0 and ya in left,
          'overlay: the first dots column %s should hold jobB at 0 and jobA at %d' % (left, ya))
    check('jobA train' in ' '.join(legend) and 'jobB train' in ' '.join(legend),
          'overlay legend %r' % legend)
    # --csv
    csv = subprocess.run([pctl, 'metrics', '--from-json', one, '--csv'], check=True,
                         capture_output=True, text=True).stdout.strip().split('\n')
    check(csv[0] == 'job,step,loss,val_loss,grad_norm,lr,tokens_per_second,elapsed_s',
          'csv header %r' % csv[0])
    check(len(csv) == 1 + len(rows), 'csv has %d rows' % (len(csv) - 1))
    check(csv[1].split(',')[3] == '' and abs(float(csv[5].split(',')[3]) - (5.0 - 4.0 * 40 / 190 + 0.5)) < 1e-6,
          'csv val_loss column: %r %r' % (csv[1], csv[5]))
    for p in problems:
        print('FAIL: ' + p)
    return 1 if problems else 0


if __name__ == '__main__':
    sys.exit(main())
