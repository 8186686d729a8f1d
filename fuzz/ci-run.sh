#!/bin/sh
# Runs one libFuzzer target for a fixed number of executions from a fixed
# seed, starting from the committed corpus (read only: new inputs go to a
# scratch directory removed afterwards), as the `fuzz` test suite does.
# Exits non-zero on a crash, leak, timeout or sanitizer report; the input
# that caused it is kept in $TMPDIR (default /tmp) as px-fuzz-<target>-crash-*
# and named in the output.
# Usage: fuzz/ci-run.sh BINARY CORPUS_DIR RUNS [SEED]
set -eu
bin=$1 corpus=$2 runs=$3 seed=${4:-1}
tmp=${TMPDIR:-/tmp}
scratch=$(mktemp -d "$tmp/px-fuzz-ci.XXXXXX")
trap 'rm -rf "$scratch"' EXIT
rc=0
PX_LOG_LEVEL=error "$bin" -runs="$runs" -seed="$seed" -max_len=8192 -timeout=10 \
    -rss_limit_mb=2048 -artifact_prefix="$tmp/px-fuzz-$(basename "$bin")-" \
    "$scratch" "$corpus" > "$scratch/log" 2>&1 || rc=$?
tail -n 40 "$scratch/log"
exit $rc
