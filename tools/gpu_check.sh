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
# usage: tools/gpu_check.sh [extra pytest arguments]
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

step "pytest tests/gpu -m gpu"
"$py" -P -m pytest "$repo/tests/gpu" -m gpu -p no:cacheprovider -q -rfEs --junitxml="$logs/gpu-tests.xml" "$@" \
  2>&1 | tee "$logs/gpu-tests.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || status=$rc
step "tests/gpu: pytest exit code $rc"

if [ "${HIPEP_GPU_CONFORMANCE:-1}" = "1" ]; then
  step "ONNX conformance on the GPU (tests/conformance, HIPEP_CONFORMANCE_DEVICE=CUDA)"
  HIPEP_CONFORMANCE_DEVICE=CUDA HIPEP_CONFORMANCE_JSON="$logs/conformance-cuda.json" \
    "$py" -P -m pytest "$repo/tests/conformance/test_onnx_backend.py" -p no:cacheprovider -q -rfE \
    2>&1 | tail -60 >"$logs/conformance-cuda.log"
  rc=${PIPESTATUS[0]}
  tail -5 "$logs/conformance-cuda.log" | tee -a "$logs/summary.txt"
  [ "$rc" -eq 0 ] || status=$rc
  step "conformance on the GPU: pytest exit code $rc"
fi

step "pytest tests/unit/test_kernels_compile.py (NVRTC compile check)"
"$py" -P -m pytest "$repo/tests/unit/test_kernels_compile.py" -p no:cacheprovider -q -rfEs 2>&1 \
  | tee "$logs/compile-check.log"
rc=${PIPESTATUS[0]}
[ "$rc" -eq 0 ] || status=$rc
step "compile check: pytest exit code $rc"
exit $status
