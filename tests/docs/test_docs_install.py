#!/usr/bin/python3
"""test_docs_install.py: the documentation a user is pointed at is there.

* `meson install` installs docs/architecture.md and README.md into
  <datadir>/doc/parallax/ (read from `meson introspect --installed`, so
  nothing is copied), and every file:// URI of the configured systemd unit's
  Documentation= names one of the installed files;
* the repository is self-contained: no tracked file refers to a `shared/`
  folder beside it (`../shared`);
* every path under docs/ that README.md names exists.

usage: test_docs_install.py SOURCE_ROOT BUILD_ROOT"""
import json
import os
import re
import subprocess
import sys

def main():
    src, build = sys.argv[1], sys.argv[2]
    fails = []
    out = subprocess.run(['meson', 'introspect', '--installed', build], capture_output=True,
                         text=True, check=True).stdout
    installed = set(json.loads(out).values())
    docs = [p for p in installed if '/doc/parallax/' in p]
    for want in ('architecture.md', 'README.md', 'notes/ucx-1.13.md', 'notes/grpc-core-c.md'):
        if not any(p.endswith('/doc/parallax/' + want) for p in docs):
            fails.append('meson install does not install doc/parallax/%s (installs %s)'
                         % (want, sorted(docs)))
    unit = open(os.path.join(build, 'systemd', 'parallaxd.service')).read()
    doc_line = re.search(r'^Documentation=(.*)$', unit, re.M)
    uris = doc_line.group(1).split() if doc_line else []
    if not uris:
        fails.append('the unit has no Documentation=')
    for uri in uris:
        if uri.startswith('file://') and uri[len('file://'):] not in installed:
            fails.append('Documentation= names %s, which meson install does not install' % uri)

    if os.path.exists(os.path.join(src, '.git')):
        files = subprocess.run(['git', '-C', src, 'ls-files', '-z'], capture_output=True,
                               check=True).stdout.decode().split('\0')
        for f in filter(None, files):
            path = os.path.join(src, f)
            if f == 'tests/docs/test_docs_install.py' or \
                    not os.path.isfile(path):
                continue
            try:
                text = open(path, encoding='utf-8', errors='replace').read()
            except OSError:
                continue
            for m in re.finditer(r'\.\./shared\b|\bshared/peers\b|shared/notes', text):
                line = text.count('\n', 0, m.start()) + 1
                fails.append('%s:%d refers to a folder beside the repository: %r'
                             % (f, line, text[m.start():m.start() + 40]))
    else:
        print('not a git checkout: the ../shared scan is skipped')

    readme = open(os.path.join(src, 'README.md')).read()
    for ref in sorted(set(re.findall(r'\bdocs/[\w./-]+\w', readme))):
        if not os.path.exists(os.path.join(src, ref)):
            fails.append('README.md names %s, which is not in the repository' % ref)

    for f in fails:
        print('FAIL:', f)
    print('%d installed doc files, Documentation= %s: %s'
          % (len(docs), ' '.join(uris), 'FAIL' if fails else 'ok'))
    return 1 if fails else 0


if __name__ == '__main__':
    sys.exit(main())
