#!/usr/bin/env bash
# Sets the machine up (deploy/setup.sh --tests: the build's packages and the
# tests' own: PyTorch, Open MPI, clang, Prometheus, ...) and runs every test suite that this
# machine can run: unit, fuzz, integration and reference (gpu runs only where a GPU
# is present; bench is not a test, and the chaos soak, suite soak, runs alone:
# tests/soak/run.sh). Exits non-zero if any test fails.
#
# Usage: deploy/test.sh [meson test args...]   e.g. deploy/test.sh --suite unit
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}

"$root/deploy/setup.sh" --tests
set +e
meson test -C "$build" --print-errorlogs --no-suite bench --no-suite soak "$@"
rc=$?
set -e
# One plain closing line with the totals, read from meson's own log.
python3 - "$build/meson-logs/testlog.json" <<'PY'
import json, sys
counts = {}
for line in open(sys.argv[1]):
    r = json.loads(line)
    counts[r["result"]] = counts.get(r["result"], 0) + 1
ok = counts.get("OK", 0) + counts.get("EXPECTEDFAIL", 0)
skipped = counts.get("SKIP", 0)
failed = sum(v for k, v in counts.items() if k not in ("OK", "EXPECTEDFAIL", "SKIP"))
print(f"tests: {ok} passed, {failed} failed, {skipped} skipped")
PY
exit $rc
