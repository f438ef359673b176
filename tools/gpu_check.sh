#!/usr/bin/env bash
# Builds hipep and runs its GPU tests on a machine with an NVIDIA GPU and no package index.
#
# What the machine must have (the H200 test machine does): python3 with onnxruntime, onnx, numpy,
# ml_dtypes, cuda-bindings, cuda-pathfinder, nvidia-cuda-nvrtc, nvidia-cuda-runtime, cmake, ninja,
# pybind11, scikit-build-core and pytest. What it lacks comes from wheelhouse/ (made by
# tools/gpu_wheelhouse.sh on a connected machine): xdsl and its needs, lit, filecheck, and ONNX
# Runtime's C headers in wheelhouse/ort-headers.
#
# Steps: install the wheels (no index), build and install hipep (no build isolation: the
# machine's own build tools), then run tests/gpu (and the NVRTC compile check) from outside the
# checkout, so the installed hipep, which has the native module, is the one imported. Logs go to
# $OUT when set (else gpu-check-logs/).
#
# HIPEP_GPU_SHARDS=N (default 1) runs tests/gpu as N pytest processes at once on the one GPU, the
# conformance suite beside them, and test_gpu_device_memory.py (device memory flat over session
# cycles) alone after them (on the 16-core H200 machine seven such processes and the conformance
# suite took under 5 minutes; one after the other they take about 15). Logs per shard:
# gpu-tests-<k>.log. HIPEP_GPU_TEST_STALL_S (default 240): a test running longer writes every
# thread's stack into its log, and goes on.
#
# usage: [HIPEP_GPU_SHARDS=N] tools/gpu_check.sh [extra pytest arguments]
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
py="${PYTHON:-python3}"
logs="${OUT:-$repo/gpu-check-logs}"
mkdir -p "$logs"
status=0
step() { echo "== gpu_check: $*" | tee -a "$logs/summary.txt"; }

source "$repo/tools/gpu_install.sh"

# Test models made on a connected machine (the builder decoders, ORT's conformance probe cache) may
# come in wheelhouse/hipep-cache, laid out like ~/.cache/hipep; else they are built here.
if [ -d "$repo/wheelhouse/hipep-cache" ] && [ -z "${HIPEP_CACHE_DIR:-}" ]; then
  export HIPEP_CACHE_DIR="$repo/wheelhouse/hipep-cache"
  step "test model cache: $HIPEP_CACHE_DIR"
fi

cd /tmp
step "hipep demo"
"$py" -P -m hipep demo >"$logs/demo.log" 2>&1 || { step "FAILED: demo (see demo.log)"; status=1; }

step "precompile (kernel cache: ${HIPEP_KERNEL_CACHE:-~/.cache/hipep/kernels})"
"$py" -P -m hipep precompile 2>&1 | tee "$logs/precompile.log" || { step "FAILED: precompile"; status=1; }

conformance() {
  HIPEP_CONFORMANCE_DEVICE=CUDA HIPEP_CONFORMANCE_JSON="$logs/conformance-cuda.json" \
    "$py" -P -m pytest "$repo/tests/conformance/test_onnx_backend.py" -p no:cacheprovider -q -rfE \
    2>&1 | tail -60 >"$logs/conformance-cuda.log"
  return "${PIPESTATUS[0]}"
}
conformance_done() {  # $1: its exit code
  tail -5 "$logs/conformance-cuda.log" | tee -a "$logs/summary.txt"
  [ "$1" -eq 0 ] || status=$1
  step "conformance on the GPU: pytest exit code $1"
}

# deal_shards N FILE...: the files dealt into N groups, one line each, largest file first and each to
# the group with the fewest bytes so far (test files' sizes roughly follow their run times).
deal_shards() {
  local n=$1
  shift
  local -a sizes=() groups=()
  local k f best
  for ((k = 0; k < n; k++)); do sizes[k]=0; groups[k]=""; done
  while read -r _ f; do
    best=0
    for ((k = 1; k < n; k++)); do [ "${sizes[k]}" -lt "${sizes[best]}" ] && best=$k; done
    sizes[best]=$((sizes[best] + $(wc -c <"$f")))
    groups[best]="${groups[best]:+${groups[best]} }$f"
  done < <(for f in "$@"; do echo "$(wc -c <"$f") $f"; done | sort -rn)
  for ((k = 0; k < n; k++)); do
    if [ -n "${groups[k]}" ]; then echo "${groups[k]}"; fi
  done
}

shards="${HIPEP_GPU_SHARDS:-1}"
# A test that runs longer than this many seconds gets every thread's stack written into its log
# (pytest's faulthandler_timeout; the test goes on): a stall then says where it waits.
stall="${HIPEP_GPU_TEST_STALL_S:-240}"
if [ "$shards" -le 1 ]; then
  step "pytest tests/gpu -m gpu"
  "$py" -P -m pytest "$repo/tests/gpu" -m gpu -p no:cacheprovider -q -rfEs --junitxml="$logs/gpu-tests.xml" \
    -o faulthandler_timeout="$stall" "$@" \
    2>&1 | tee "$logs/gpu-tests.log"
  rc=${PIPESTATUS[0]}
  [ "$rc" -eq 0 ] || status=$rc
  step "tests/gpu: pytest exit code $rc"
  if [ "${HIPEP_GPU_CONFORMANCE:-1}" = "1" ]; then
    step "ONNX conformance on the GPU (tests/conformance, HIPEP_CONFORMANCE_DEVICE=CUDA)"
    conformance
    conformance_done $?
  fi
else
  step "pytest tests/gpu -m gpu in $shards shards at once (test_gpu_device_memory.py after them)"
  mapfile -t groups < <(deal_shards "$shards" $(ls "$repo"/tests/gpu/test_*.py | grep -v '/test_gpu_device_memory\.py$'))
  pids=()
  for k in "${!groups[@]}"; do
    # shellcheck disable=SC2086  # a group is a list of paths
    "$py" -P -m pytest ${groups[k]} -m gpu -p no:cacheprovider -q -rfEs --junitxml="$logs/gpu-tests-$k.xml" \
      -o faulthandler_timeout="$stall" "$@" \
      >"$logs/gpu-tests-$k.log" 2>&1 &
    pids+=($!)
  done
  if [ "${HIPEP_GPU_CONFORMANCE:-1}" = "1" ]; then
    conformance &
    conformance_pid=$!
  fi
  for k in "${!pids[@]}"; do
    wait "${pids[k]}"
    rc=$?
    [ "$rc" -eq 0 ] || status=$rc
    step "shard $k ($(echo "${groups[k]}" | wc -w) files): pytest exit code $rc: $(tail -1 "$logs/gpu-tests-$k.log")"
  done
  if [ "${HIPEP_GPU_CONFORMANCE:-1}" = "1" ]; then
    wait "$conformance_pid"
    conformance_done $?
  fi
  "$py" -P -m pytest "$repo/tests/gpu/test_gpu_device_memory.py" -m gpu -p no:cacheprovider -q -rfEs \
    -o faulthandler_timeout="$stall" "$@" \
    >"$logs/gpu-tests-memory.log" 2>&1
  rc=$?
  [ "$rc" -eq 0 ] || status=$rc
  step "test_gpu_device_memory.py alone: pytest exit code $rc: $(tail -1 "$logs/gpu-tests-memory.log")"
fi

step "pytest tests/unit/test_kernels_compile.py and test_kernels_decode_ptx.py (NVRTC compile check)"
"$py" -P -m pytest "$repo/tests/unit/test_kernels_compile.py" "$repo/tests/unit/test_kernels_decode_ptx.py" \
  -p no:cacheprovider -q -rfEs 2>&1 \
  | tee "$logs/compile-check.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || status=$rc
step "compile check: pytest exit code $rc"
exit $status
