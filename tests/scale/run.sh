#!/bin/sh
# Control-plane scale figures (not in any default suite; about 10 minutes
# on 2 cores for 8,32): N parallaxd daemons on this host, N = 8, 32 (more
# with SIZES=8,32,64,128), the table of tests/scale/scale.py.
#   tests/scale/run.sh [BUILD_DIR]      (default: build)
# Knobs (environment): SIZES, HEARTBEAT_MS (1000), PEER_DEAD_MS (10000),
# OUTAGE (20: seconds from the SIGKILL to the restart; the issue's 90 s
# outage costs 70 s more per size), WINDOW (10: idle seconds measured),
# SETTLE (20: seconds after convergence before that window, so that the
# join's rumours have drained and the window is idle).
set -eu
root=$(cd "$(dirname "$0")/../.." && pwd)
build=${1:-$root/build}
exec /usr/bin/python3 "$root/tests/scale/scale.py" \
    --parallaxd "$build/daemon/parallaxd" --proto "$root/proto/parallax.proto" \
    --rank "$build/rank/parallax-rank" \
    --sizes "${SIZES:-8,32}" --heartbeat-ms "${HEARTBEAT_MS:-1000}" \
    --dead-ms "${PEER_DEAD_MS:-10000}" --outage "${OUTAGE:-20}" --window "${WINDOW:-10}" \
    --settle "${SETTLE:-20}"
