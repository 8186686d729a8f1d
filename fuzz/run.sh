#!/bin/sh
# Builds the libFuzzer targets with clang (build-fuzz/) and runs each for
# SECONDS (default 660) on a copy of the committed corpus, both at once,
# logging to $OUT/fuzz_<target>.log; exits non-zero if either found a crash.
# Usage: fuzz/run.sh [SECONDS] [OUT]
set -eu
root=$(cd "$(dirname "$0")/.." && pwd)
secs=${1:-660}
out=${2:-/tmp/px-fuzz}
[ -f "$root/build-fuzz/build.ninja" ] || CC=clang meson setup "$root/build-fuzz" "$root"
ninja -C "$root/build-fuzz" fuzz/fuzz_messages fuzz/fuzz_config
mkdir -p "$out"
pids=""
for t in messages config; do
  mkdir -p "$out/corpus-$t"
  cp -n "$root/fuzz/corpus/$t/"* "$out/corpus-$t/" 2>/dev/null || true
  PX_LOG_LEVEL=error nice "$root/build-fuzz/fuzz/fuzz_$t" -max_total_time="$secs" \
      -max_len=8192 -timeout=10 -rss_limit_mb=2048 -close_fd_mask=2 -artifact_prefix="$out/$t-" \
      "$out/corpus-$t" > "$out/fuzz_$t.log" 2>&1 &
  pids="$pids $!"
done
rc=0
for p in $pids; do wait "$p" || rc=1; done
for t in messages config; do tail -n 3 "$out/fuzz_$t.log"; done
exit $rc
