#!/usr/bin/env bash
# Builds parallax with AddressSanitizer + UndefinedBehaviorSanitizer into
# build-asan/ and runs the unit and integration suites there (STYLE.md,
# "Tests": the sanitizer build passes them). Not part of deploy/test.sh: it
# takes several times longer than the plain run.
#
# Usage: deploy/sanitize.sh [meson test args...]   e.g. deploy/sanitize.sh coll_matrix_n4
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_ASAN_BUILD_DIR:-$root/build-asan}

"$root/deploy/setup.sh" --no-build
# CPU code only: the CUDA kernels cannot run under ASan here (no GPU), and
# nvcc is not a sanitizer toolchain
[ -f "$build/build.ninja" ] ||
  meson setup "$build" "$root" -Db_sanitize=address,undefined -Db_lundef=false -Dcuda=disabled
ninja -C "$build"
# UCX keeps some allocations until exit on purpose; leaks are still reported
# for parallax's own code.
export ASAN_OPTIONS=${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0}
export UBSAN_OPTIONS=${UBSAN_OPTIONS:-print_stacktrace=1:halt_on_error=1}
if [ $# -gt 0 ]; then
  exec meson test -C "$build" --print-errorlogs "$@"
fi
exec meson test -C "$build" --print-errorlogs --suite unit --suite integration
