#!/usr/bin/env bash
# The one script to run on a lent NVIDIA GPU (issue #12): an H200 with its own torch (2.11, CUDA 13) and
# Python 3.12, no network, 16 cores, 10 minutes a call. Inside 9.5 minutes, each step time-boxed:
#   1. build the core, the GoogleTest suite and bench_gpu with CMake (build/gpu);
#   2. run the CUDA device's GoogleTest suites: the fake-driver (graphs, staging, events included) and
#      NVRTC ones, and the CL device's suite on the real GPU (TINY_GPU_TEST_BACKEND=CUDA: every graph on
#      the CUDA device and on the CPU device, results compared; its replayed schedules run as CUDA graphs);
#   3. time tiny (bench_gpu on the CUDA device) against torch.cuda (bench/gpu_reference.py): a
#      device-to-device copy, a chain of 10 elementwise ops, a sum, 4096^3 matmuls in float32 and
#      bfloat16 (cuBLAS); print one table;
#   4. build the torch extension against that machine's torch, and if it builds, run GPU_TORCH_TESTS
#      with TINY_DEVICE=CUDA.
# Logs go to $OUT (what the device tool brings back) or build/gpu/logs. Without GoogleTest installed
# there, a copy of its source in .gtest-src (cp -r /usr/src/googletest .gtest-src here; carry it) is
# built with the tests; without either, the tests are left out and the summary says so.
#
# Usage: bench/gpu_check.sh [--dry-run]
#   --dry-run  the same steps on this machine without a GPU: the CL device (PoCL) for the GPU tests and
#              tiny's timings, torch on the CPU for the reference, small sizes, the extension not rebuilt
#              when one is there (TINY_GPU_CHECK_DEADLINE=seconds changes the 570 s budget;
#              TINY_GPU_CHECK_BUILD_DIR=build/cmake reuses the build `make` made;
#              TINY_GPU_CHECK_SKIP_EXTENSION=1 leaves the extension and torch_tests out).
set -u
cd "$(dirname "$0")/.."
ROOT=$PWD
DRY=0
[ "${1:-}" = --dry-run ] && DRY=1
PY=${PYTHON:-python3}
LOGS=${OUT:-$ROOT/build/gpu/logs}
BUILD=$ROOT/build/gpu
CMAKE_DIR=${TINY_GPU_CHECK_BUILD_DIR:-$BUILD/cmake}
mkdir -p "$LOGS" "$BUILD"
START=$(date +%s)
DEADLINE=$((START + ${TINY_GPU_CHECK_DEADLINE:-570}))
SUMMARY=()

# the dry run builds as `make` does here (RelWithDebInfo: ccache has its objects)
if [ $DRY = 1 ]; then
  BACKEND=CL TORCH_DEVICE=cpu N=$((4 << 20)) M=512 ROUNDS=2 REPS=2 BUILD_TYPE=RelWithDebInfo
else
  BACKEND=CUDA TORCH_DEVICE=cuda N=$((256 << 20)) M=4096 ROUNDS=5 REPS=10 BUILD_TYPE=Release
fi
GPU_TORCH_TESTS="torch_tests/test_reduce.py torch_tests/test_matmul.py torch_tests/test_views.py
  torch_tests/test_elementwise.py::test_binary_op_with_broadcast_tensor_matches_cpu
  torch_tests/test_elementwise.py::test_unary_op_matches_cpu
  torch_tests/test_training.py::test_demo_model_training_step_runs_without_fallbacks"

# step NAME SECONDS COMMAND...: runs it with at most SECONDS (or what is left of the budget), output in
# $LOGS/NAME.log; records "NAME ok|FAILED (rc)|TIMED OUT  Ns" and prints the log's tail on failure.
step() {
  local name=$1 limit=$2
  shift 2
  local left=$((DEADLINE - $(date +%s)))
  [ "$left" -lt "$limit" ] && limit=$left
  if [ "$limit" -lt 5 ]; then
    SUMMARY+=("$(printf '%-16s skipped: no time left' "$name")")
    return 1
  fi
  local t0=$(date +%s)
  timeout -k 5 "$limit" "$@" >"$LOGS/$name.log" 2>&1
  local rc=$? took=$(($(date +%s) - t0)) what=ok
  [ $rc -ne 0 ] && what="FAILED (rc $rc)"
  [ $rc -eq 124 ] || [ $rc -eq 137 ] && what="TIMED OUT after ${limit}s"
  SUMMARY+=("$(printf '%-16s %-24s %4ds' "$name" "$what" "$took")")
  echo "== $name: $what, ${took}s"
  [ $rc -ne 0 ] && tail -n 25 "$LOGS/$name.log"
  return $rc
}

note() {
  SUMMARY+=("$*")
  echo "== $*"
}

# ---- the machine ----
echo "== $(date -u +%FT%TZ) $(uname -m), $(nproc) cores, dry run: $DRY"
command -v nvidia-smi >/dev/null && timeout 20 nvidia-smi -L
SITE=$(timeout 60 "$PY" -c 'import site; print(site.getsitepackages()[0])' 2>/dev/null)
timeout 60 "$PY" -c 'import torch; print("torch", torch.__version__, "cuda", torch.version.cuda, "available", torch.cuda.is_available())' 2>&1 | tail -n 1
NVRTC=${TINY_NVRTC:-$(ls "$SITE"/nvidia/cu*/lib/libnvrtc.so.1[0-9] 2>/dev/null | head -n 1)}
CUOBJDUMP=${TINY_CUOBJDUMP:-$(command -v cuobjdump || ls "$SITE"/triton/backends/nvidia/bin/cuobjdump 2>/dev/null | head -n 1)}
[ -z "$NVRTC" ] && NVRTC=$( (ldconfig -p 2>/dev/null | grep -o '/.*libnvrtc.so.1[0-9]$'; ls /usr/local/cuda/lib64/libnvrtc.so.1[0-9] 2>/dev/null) | head -n 1)
echo "NVRTC: ${NVRTC:-not found}; cuobjdump: ${CUOBJDUMP:-not found}"
[ -n "$NVRTC" ] && export TINY_NVRTC=$NVRTC
[ -n "$CUOBJDUMP" ] && export TINY_CUOBJDUMP=$CUOBJDUMP

# ---- 1. the core, its tests, the bench ----
GEN=Ninja
command -v ninja >/dev/null || GEN="Unix Makefiles"
CMAKE_ARGS=(-S . -B "$CMAKE_DIR" -G "$GEN" -DCMAKE_BUILD_TYPE=$BUILD_TYPE -DTINY_NVRTC="$NVRTC" -DTINY_CUOBJDUMP="$CUOBJDUMP")
[ -d .gtest-src ] && CMAKE_ARGS+=(-DTINY_GTEST_SOURCE="$ROOT/.gtest-src")
[ -n "${TINY_GPU_CHECK_NO_SYSTEM_GTEST:-}" ] && CMAKE_ARGS+=(-DCMAKE_DISABLE_FIND_PACKAGE_GTest=ON)
if ! command -v cmake >/dev/null; then
  note "cmake           not found: nothing built"
else
  step configure 60 cmake "${CMAKE_ARGS[@]}" &&
    step build 240 cmake --build "$CMAKE_DIR" -j "$(nproc)"
fi
HAVE_TESTS=0
[ -x "$CMAKE_DIR/tiny_tests" ] && HAVE_TESTS=1
[ $HAVE_TESTS = 0 ] && note "tests           no GoogleTest (neither installed nor in .gtest-src): not built, not run"

# ---- 2. GoogleTest: the CUDA suites, the GPU suite on the real device ----
if [ $HAVE_TESTS = 1 ]; then
  step gtest_cuda 150 "$CMAKE_DIR/tiny_tests" --gtest_filter='Cuda*:HipFakeRuntime*:DeviceEvents*:GpuCompileCheck*:GpuDialects*' --gtest_brief=1
  TINY_GPU_TEST_BACKEND=$BACKEND step gtest_gpu 120 "$CMAKE_DIR/tiny_tests" --gtest_filter='ClDevice.*' --gtest_brief=1
  for s in gtest_cuda gtest_gpu; do
    [ -f "$LOGS/$s.log" ] && note "$(printf '%-16s' "$s") $(grep -E '^\[  (PASSED|FAILED|SKIPPED) ' "$LOGS/$s.log" | tr '\n' ' ' | grep . || echo "no totals (stopped: see $s.log)")"
  done
fi

# ---- 3. timings: tiny against torch ----
if [ -x "$CMAKE_DIR/bench_gpu" ]; then
  step bench_tiny 120 "$CMAKE_DIR/bench_gpu" "$BACKEND" $N $M $ROUNDS $REPS
fi
step bench_torch 90 "$PY" bench/gpu_reference.py "$TORCH_DEVICE" $N $M $ROUNDS $REPS
echo "== timings (n = $N float32, m = $M; best of $ROUNDS rounds of $REPS runs)"
cat "$LOGS"/bench_tiny.log "$LOGS"/bench_torch.log 2>/dev/null | grep '^device'
"$PY" - "$LOGS/bench_tiny.log" "$LOGS/bench_torch.log" <<'EOF' | tee "$LOGS/timings.txt"
import os
import sys

rows = {}
for path in sys.argv[1:]:
    for line in open(path) if os.path.exists(path) else []:
        f = line.split()
        if len(f) == 5 and f[0] in ("tiny", "torch"):
            rows.setdefault(f[1], {})[f[0]] = (float(f[2]), float(f[3]), f[4])


def cells(x):
    return (f"{x[0]:9.3f}", f"{x[1]:9.3f} {x[2]:<7}") if x else ("        -", "                -")


print(f"{'case':<18} {'tiny ms':>9} {'tiny rate':>17} {'torch ms':>9} {'torch rate':>17} {'speed vs torch':>14}")
for case, r in rows.items():
    t, p = r.get("tiny"), r.get("torch")
    ratio = f"{p[0] / t[0]:13.2f}x" if t and p and t[0] > 0 else "             -"
    print(f"{case:<18} {cells(t)[0]} {cells(t)[1]} {cells(p)[0]} {cells(p)[1]} {ratio}")
copy = rows.get("copy", {}).get("torch")
chain = rows.get("elementwise_chain", {}).get("tiny")
if copy and chain:
    # the same bytes read and written: the chain's bandwidth as a share of the copy's
    print(f"tiny's elementwise chain at {copy[0] / chain[0]:.2f} of torch's copy bandwidth (device to device; target 0.80)")
EOF
# ---- 4. the torch extension against this machine's torch, and torch_tests on the device ----
if [ -n "${TINY_GPU_CHECK_SKIP_EXTENSION:-}" ]; then
  note "extension       TINY_GPU_CHECK_SKIP_EXTENSION: not built, torch_tests not run"
  EXT=0
elif [ $DRY = 1 ] && ls torch_tiny/_C*.so >/dev/null 2>&1; then
  note "extension       dry run: the one built here is used"
  EXT=1
else
  EXT=0
  MAX_JOBS=$(nproc) step extension 240 "$PY" setup.py -q build_ext --inplace && EXT=1
fi
if [ $EXT = 1 ]; then
  if timeout 60 "$PY" -c 'import pytest' 2>/dev/null; then
    # shellcheck disable=SC2086
    TINY_DEVICE=$BACKEND PYTHONPATH=$ROOT step torch_tests 150 "$PY" -m pytest -q -x -p no:cacheprovider $GPU_TORCH_TESTS
    note "$(printf '%-16s' torch_tests) $(tail -n 1 "$LOGS/torch_tests.log" 2>/dev/null)"
  else
    note "torch_tests     pytest is not installed: not run"
  fi
fi

echo "== summary ($(($(date +%s) - START)) s in all; logs in $LOGS)"
printf '%s\n' "${SUMMARY[@]}"
