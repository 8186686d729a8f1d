#!/bin/sh
# bench_tokens.sh: single-rank training throughput (tokens/s) of parallax-rank
# beside the PyTorch peer (../shared/peers/torch_gpt_bench.py beside the repo, 1 thread) on
# the same model and batch, and the ratio ours/torch. Not a test: a benchmark.
#
# usage: tests/bench/bench_tokens.sh [BUILD_DIR] [STEPS]
#   BUILD_DIR  meson build dir holding rank/parallax-rank (default build)
#   STEPS      timed steps per run (default 20; the first 3 steps are warm-up)
# Env: TORCH_BENCH (peer script path), PYTHON (default /usr/bin/python3).
# Both sides run one thread (OPENBLAS_NUM_THREADS=1, torch --threads 1).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
steps=${2:-20}
rank_bin=$build/rank/parallax-rank
torch_bench=${TORCH_BENCH:-$here/../../../shared/peers/torch_gpt_bench.py}
python=${PYTHON:-/usr/bin/python3}
[ -x "$rank_bin" ] || { echo "no $rank_bin (build first)" >&2; exit 1; }
[ -f "$torch_bench" ] || { echo "no PyTorch peer at $torch_bench (set TORCH_BENCH)" >&2; exit 1; }
work=$(mktemp -d /tmp/px_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/../engine/make_tokens.py" "$work/tokens.bin" /usr/share/common-licenses/* >/dev/null
export OPENBLAS_NUM_THREADS=1

printf '%-34s %12s %12s %8s\n' "model (L/H/C/T/B)" "ours tok/s" "torch tok/s" "ratio"
while read -r L H C T B; do
    # ours: median tok/s over steps 4..STEPS+3 (steps 1-3 warm up)
    "$rank_bin" --layers "$L" --heads "$H" --dim "$C" --seq "$T" --batch "$B" \
        --steps $((steps + 3)) --lr 1e-3 --data "$work/tokens.bin" \
        --metrics-out "$work/m.jsonl" >/dev/null 2>&1
    ours=$(python3 -c '
import json, statistics, sys
r = [json.loads(l)["tokens_per_second"] for l in open(sys.argv[1]) if l.strip()][3:]
print("%.0f" % statistics.median(r))' "$work/m.jsonl")
    theirs=$("$python" "$torch_bench" --layers "$L" --heads "$H" --dim "$C" --seq "$T" \
        --batch "$B" --steps "$steps" --threads 1 | sed -n 's/.*, \([0-9]*\) tokens\/s.*/\1/p')
    ratio=$(python3 -c "print('%.2f' % ($ours / $theirs))")
    printf '%-34s %12s %12s %8s\n' "$L/$H/$C/$T/$B" "$ours" "$theirs" "$ratio"
done <<EOF_MODELS
4 4 128 128 8
6 6 384 256 4
EOF_MODELS
