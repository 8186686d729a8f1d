#!/bin/sh
# The chaos soak (tests/soak/soak.py): a checkpointed dp=4 job on three
# namespace hosts survives >= 20 random faults (rank and daemon SIGKILLs,
# dropped links, a full checkpoint disk) and ends bitwise equal to an
# uninterrupted run, leaving nothing behind. Not part of deploy/test.sh (suite
# `soak`, excluded there like `bench`); about 10-25 minutes; needs root.
# Usage: tests/soak/run.sh [--seed S] [--faults N] [--steps N] [--keep]
#   PX_BUILD_DIR  build directory (default: <repo>/build)
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${PX_BUILD_DIR:-$root/build}
exec python3 "$root/tests/soak/soak.py" --parallaxd "$build/daemon/parallaxd" \
    --rank "$build/rank/parallax-rank" --pctl "$build/client/pctl" \
    --proto "$root/proto/parallax.proto" "$@"
