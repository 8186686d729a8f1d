#!/bin/sh
# bench_bind.sh: does binding each rank to its own core pay? (a
# benchmark, run by hand, not by meson)
#
# Runs bench_zero.py (--dp 2 --stages 0,3,3np) and, with --ddp,
# bench_ddp.py (--models big --reps 1 --bucket-mb '') ROUNDS times each
# (default 3), alternating unbound and bound in one window, so that other
# load on a shared machine falls on both alike. "Bound" launches every
# rank through `taskset -c (PX_RANK mod NCPU)` (as Open MPI's --bind-to core
# and Slurm's --cpu-bind=cores would place them; the limit run's second
# single rank goes to the next core); the PyTorch DDP peer is never bound
# (users do not bind it). With perf installed, each rank process runs
# under `perf stat -e cpu-migrations,context-switches,task-clock`, and the
# end prints, per variant, the rank processes' migrations (each), mean
# context switches and mean CPUs utilized (task-clock / wall). With
# BIND_SCHED=1 in the environment, instead of perf: each rank's
# /proc/PID/schedstat at its end, and per variant the mean time a rank ran
# and the mean time it was runnable but waiting for a CPU (run_delay: the
# time a peer stalls on it, whatever the code does).
#
# Output: WORK/{zero,ddp}_b{0,1}_rN.txt (each bench's own table, with the
# load average) and the perf summary on stdout.
#
# usage: tests/bench/bench_bind.sh [BUILD_DIR] [ROUNDS] [--ddp]
set -eu
HERE=$(cd "$(dirname "$0")" && pwd)
BUILD=$(cd "${1:-build}" && pwd)
ROUNDS=${2:-3}
DDP=${3:-}
NCPU=$(nproc)
WORK=$(mktemp -d /tmp/px_bench_bind.XXXXXX)
mkdir -p "$WORK/wrap/rank" "$WORK/zero"
# the wrapper stands in for BUILD/rank/parallax-rank (bench_ddp takes a build dir)
cat > "$WORK/wrap/rank/parallax-rank" <<EOF
#!/bin/sh
core=\${PX_RANK:-0}
case "\$*" in *single_1_*) core=1;; esac
core=\$((core % $NCPU))
pin=""
[ "\$BIND" = 1 ] && pin="taskset -c \$core"
if [ "\$BIND_SCHED" = 1 ]; then
  # the kernel's account of the rank (/proc/PID/schedstat: on-CPU ns,
  # run-queue wait ns, timeslices), read until it exits
  \$pin $BUILD/rank/parallax-rank "\$@" &
  pid=\$!; last=""
  while kill -0 \$pid 2>/dev/null; do s=\$(cat /proc/\$pid/schedstat 2>/dev/null) && last=\$s; sleep 0.1; done
  wait \$pid; rc=\$?
  echo "\$last" > \$BIND_PERF_DIR/sched.\$pid.txt
  exit \$rc
fi
pre=""
if command -v perf >/dev/null 2>&1; then
  pre="perf stat -e cpu-migrations,context-switches,task-clock -x, -o \$BIND_PERF_DIR/perf.\$\$.txt"
fi
exec \$pre \$pin $BUILD/rank/parallax-rank "\$@"
EOF
chmod +x "$WORK/wrap/rank/parallax-rank"

run() { # kind bind round
    d="$WORK/perf_$1_b$2"; mkdir -p "$d"
    out="$WORK/$1_b$2_r$3.txt"
    echo "round $3 bind $2: $(cat /proc/loadavg)" > "$out"
    if [ "$1" = zero ]; then
        BIND=$2 BIND_PERF_DIR=$d PX_ZERO_WAIT_LOG=1 python3 "$HERE/../engine/bench_zero.py" \
            "$WORK/wrap/rank/parallax-rank" "$HERE/../engine/make_tokens.py" "$WORK/zero" \
            --dp 2 --stages 0,3,3np >> "$out" 2>&1 || echo "bench failed" >> "$out"
    else
        BIND=$2 BIND_PERF_DIR=$d python3 "$HERE/bench_ddp.py" "$WORK/wrap" --models big \
            --reps 1 --bucket-mb '' >> "$out" 2>&1 || echo "bench failed" >> "$out"
    fi
    grep -v '^zero wait log' "$out"
}

kinds=zero
[ "$DDP" = --ddp ] && kinds="zero ddp"
for k in $kinds; do
    for i in $(seq 1 "$ROUNDS"); do
        run "$k" 0 "$i"
        run "$k" 1 "$i"
    done
done
for k in $kinds; do
    for b in 0 1; do
        [ -d "$WORK/perf_${k}_b$b" ] || continue
        printf '%s bind=%s: ' "$k" "$b"
        cat "$WORK/perf_${k}_b$b"/perf.*.txt 2>/dev/null | awk -F, '
            /cpu-migrations/ {n++; m = m " " $1}
            /context-switches/ {c += $1}
            /task-clock/ {u += $6}
            END {if (n) printf "%d rank processes, migrations each:%s; context switches mean %.0f; CPUs utilized mean %.3f\n", n, m, c / n, u / n; else print "no perf figures"}'
        cat "$WORK/perf_${k}_b$b"/sched.*.txt 2>/dev/null | awk '
            {n++; cpu += $1 / 1e9; wait += $2 / 1e9; sl += $3}
            END {if (n) printf "  schedstat: %d rank processes, on CPU %.2f s, runnable but waiting for a CPU %.2f s, %.0f timeslices (means)\n", n, cpu / n, wait / n, sl / n}'
    done
done
echo "work dir: $WORK"
