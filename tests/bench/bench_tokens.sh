#!/bin/sh
# bench_tokens.sh: single-rank training throughput (tokens/s) of parallax-rank
# beside the PyTorch peer (tests/bench/torch_gpt_bench.py, 1 thread) on
# the same model and batch, and the ratio ours/torch. Not a test: a benchmark.
#
# usage: tests/bench/bench_tokens.sh [BUILD_DIR] [STEPS] [RUNS]
#   BUILD_DIR  meson build dir holding rank/parallax-rank (default build)
#   STEPS      timed steps per run (default 20; the first 3 steps are warm-up)
#   RUNS       runs per side and model, alternating ours / PyTorch, of which
#              the best is reported (default 3: on a shared machine the best
#              run is the one least disturbed by other load)
# Env: TORCH_BENCH (peer script path), PYTHON (default /usr/bin/python3, which
# has Debian's python3-torch; a pyenv python3 first on PATH usually has not).
# Prints the load average before each model (figures under load are low).
# CLOCK=cpu counts CPU seconds instead of wall seconds, for a machine other
# jobs load: each side runs twice, long and short (ours STEPS+3 and 3 steps,
# PyTorch STEPS and 1 timed step), and tokens/s = the extra tokens / the
# extra user+sys CPU time (/usr/bin/time), so start-up, warm-up and the time
# spent waiting for a core all drop out; px-sgemm-bench times by thread CPU
# time (PX_BENCH_CLOCK=cpu). Default CLOCK=wall: the metrics' median step.
# Both sides run one thread (OPENBLAS_NUM_THREADS=1, torch --threads 1) and
# the same OpenBLAS core (issue 15): the one parallax-rank logs ("BLAS core
# X"), given to the peer as OPENBLAS_CORETYPE (Debian's torch calls the
# system OpenBLAS). Per model it also prints the single-thread sgemm GFLOP/s
# at the model's linear-layer shapes (px-sgemm-bench, same core) and our
# achieved FLOP rate as a share of it: tokens/s x (6N + 12 L T C) FLOP per
# token (N parameters; 12 L T C the attention score and value matmuls,
# forward and backward, Kaplan et al. 2020 / PaLM appendix B).
set -eu
here=$(cd "$(dirname "$0")" && pwd)
build=${1:-build}
steps=${2:-20}
runs=${3:-3}
clock=${CLOCK:-wall}
case $clock in wall|cpu) ;; *) echo "CLOCK must be wall or cpu, not '$clock'" >&2; exit 2;; esac
rank_bin=$build/rank/parallax-rank
sgemm_bin=$build/tests/bench/px-sgemm-bench
torch_bench=${TORCH_BENCH:-$here/torch_gpt_bench.py}
python=${PYTHON:-/usr/bin/python3}
[ -x "$rank_bin" ] || { echo "no $rank_bin (build first)" >&2; exit 1; }
[ -x "$sgemm_bin" ] || { echo "no $sgemm_bin (build first)" >&2; exit 1; }
[ -f "$torch_bench" ] || { echo "no PyTorch peer at $torch_bench (set TORCH_BENCH)" >&2; exit 1; }
work=$(mktemp -d /tmp/px_bench.XXXXXX)
trap 'rm -rf "$work"' EXIT
python3 "$here/../engine/make_tokens.py" "$work/tokens.bin" /usr/share/common-licenses/* >/dev/null
export OPENBLAS_NUM_THREADS=1 PX_BENCH_CLOCK=$clock
V=256

# cpu_s CMD...: runs CMD (stdout to $work/out), prints its user+sys seconds
cpu_s() {
    /usr/bin/time -f '%U %S' -o "$work/time" "$@" >"$work/out" 2>>"$work/rank.err"
    awk '{ print $1 + $2 }' "$work/time"
}

printf '%-16s %-10s %10s %10s %6s %9s %9s %6s\n' "model L/H/C/T/B" "BLAS core" "ours tok/s" \
    "torch tok/s" "ratio" "ours GF/s" "sgemm GF/s" "share"
while read -r L H C T B; do
    echo "# $L/$H/$C/$T/$B: load average $(cut -d' ' -f1-3 /proc/loadavg) before" >&2
    ours=0 theirs=0 core=
    for r in $(seq "$runs"); do
        rank_args="--layers $L --heads $H --dim $C --seq $T --batch $B --lr 1e-3"
        rank_args="$rank_args --data $work/tokens.bin"
        torch_args="--layers $L --heads $H --dim $C --seq $T --batch $B --threads 1"
        : >"$work/rank.err"
        if [ "$clock" = cpu ]; then
            # the extra tokens over the extra CPU seconds of a longer run
            # shellcheck disable=SC2086
            c1=$(cpu_s "$rank_bin" $rank_args --steps $((steps + 3)))
            # shellcheck disable=SC2086
            c0=$(cpu_s "$rank_bin" $rank_args --steps 3)
            core=$(sed -n 's/.*BLAS core \([A-Za-z0-9_]*\) .*/\1/p' "$work/rank.err" | head -n 1)
            [ -n "$core" ] || { echo "parallax-rank logged no BLAS core" >&2; exit 1; }
            # shellcheck disable=SC2086
            t1=$(OPENBLAS_CORETYPE=$core cpu_s "$python" "$torch_bench" $torch_args --steps "$steps")
            # shellcheck disable=SC2086
            t0=$(OPENBLAS_CORETYPE=$core cpu_s "$python" "$torch_bench" $torch_args --steps 1)
            o=$(python3 -c 'import sys; print("%.0f" % (int(sys.argv[1]) / (float(sys.argv[2]) - float(sys.argv[3]))))' \
                $((steps * B * T)) "$c1" "$c0")
            t=$(python3 -c 'import sys; print("%.0f" % (int(sys.argv[1]) / (float(sys.argv[2]) - float(sys.argv[3]))))' \
                $(((steps - 1) * B * T)) "$t1" "$t0")
        else
            # ours: median tok/s over steps 4..STEPS+3 (steps 1-3 warm up)
            # shellcheck disable=SC2086
            "$rank_bin" $rank_args --steps $((steps + 3)) \
                --metrics-out "$work/m.jsonl" >/dev/null 2>"$work/rank.err"
            core=$(sed -n 's/.*BLAS core \([A-Za-z0-9_]*\) .*/\1/p' "$work/rank.err" | head -n 1)
            [ -n "$core" ] || { echo "parallax-rank logged no BLAS core" >&2; exit 1; }
            o=$(python3 -c '
import json, statistics, sys
r = [json.loads(l)["tokens_per_second"] for l in open(sys.argv[1]) if l.strip()][3:]
print("%.0f" % statistics.median(r))' "$work/m.jsonl")
            # shellcheck disable=SC2086
            t=$(OPENBLAS_CORETYPE=$core "$python" "$torch_bench" $torch_args --steps "$steps" |
                sed -n 's/.*, \([0-9]*\) tokens\/s.*/\1/p')
        fi
        echo "#   run $r: ours $o tok/s, torch $t tok/s" >&2
        if [ "$o" -gt "$ours" ]; then ours=$o; fi
        if [ "$t" -gt "$theirs" ]; then theirs=$t; fi
    done
    peak=$(OPENBLAS_CORETYPE=$core "$sgemm_bin" "$L" "$C" "$T" "$B" "$V" |
        sed -n 's/^sgemm_gflops=\([0-9.]*\) .*/\1/p')
    python3 - "$L" "$H" "$C" "$T" "$B" "$V" "$core" "$ours" "$theirs" "$peak" <<'EOF_PY'
import sys
L, H, C, T, B, V = map(int, sys.argv[1:7])
core, ours, theirs, peak = sys.argv[7], float(sys.argv[8]), float(sys.argv[9]), float(sys.argv[10])
n = V * C + T * C + L * (12 * C * C + 13 * C) + 2 * C   # GPT-2 layout, tied LM head
flop_tok = 6 * n + 12 * L * T * C
gf = ours * flop_tok / 1e9
print('%-16s %-10s %10.0f %10.0f %6.2f %9.1f %9.1f %5.0f%%' % (
    '%d/%d/%d/%d/%d' % (L, H, C, T, B), core, ours, theirs, ours / theirs, gf, peak,
    100 * gf / peak))
EOF_PY
done <<EOF_MODELS
4 4 128 128 8
6 6 384 256 4
EOF_MODELS
