#!/usr/bin/env bash
# Prepares wheelhouse/ for tools/gpu_check.sh, on a machine with a package index: the Python
# packages the GPU machine lacks (cp312, manylinux x86_64 or pure Python), and ONNX Runtime's C
# headers from the build cache (tools/fetch_ort_headers.sh fills it), which the plugin builds
# against. wheelhouse/ is machine-local: list it in .git/info/exclude, not .gitignore.
#
# With --newest-ort the wheelhouse also carries the newest onnxruntime (tools/gpu_install.sh installs
# it over the machine's own, without its dependencies, which the machine's onnxruntime brought) and
# the newest onnxruntime-genai, so the GPU tests run against the newest release as CI runs the oldest.
#
# With --ort VERSION it carries that onnxruntime release instead (--ort 1.24.1: the oldest hipep
# supports, so the GPU tests run against both ends), and no onnxruntime-genai, which needs 1.30 or
# newer (tests that need it skip; with --models the decoders come built).
#
# With --models it first builds every tiny builder decoder tests/gpu runs (and the form of each
# that ORT's CPU EP runs), so the GPU machine runs the models this machine's transformers and
# builder made instead of building them with its own, older ones (whose configs can read
# differently: transformers 5.17 reads Qwen3.5's rotary factor from elsewhere than 5.25).
#
# usage: tools/gpu_wheelhouse.sh [--newest-ort | --ort VERSION] [--models] [wheelhouse_dir]
set -euo pipefail
cd "$(dirname "$0")/.."
newest_ort=0
ort_version=""
models=0
while [ $# -gt 0 ]; do
  case $1 in
    --newest-ort) newest_ort=1; shift ;;
    --ort) ort_version="${2:?--ort takes an onnxruntime version, such as 1.24.1}"; shift 2 ;;
    --models) models=1; shift ;;
    *) break ;;
  esac
done
dest="${1:-wheelhouse}"
py="${PYTHON:-python3}"
mkdir -p "$dest"

# xdsl is hipep's IR library; immutabledict (< 4.3.2) and ordered-set (4.1) are xdsl's needs;
# lit and filecheck run tests/lit. onnxruntime-genai and onnx-ir (its model builder's IR library)
# build and run the decoders of tools/gpu_bench.sh: 0.17.1 is the newest onnxruntime-genai whose
# onnxruntime requirement (>= 1.30) the GPU machine's onnxruntime 1.30 meets (0.18 asks for 1.31);
# with --newest-ort, the newest of both.
packages=("xdsl==0.74.0" "immutabledict<4.3.2" "ordered-set==4.1.0" "lit" "filecheck" "onnx-ir")
rm -f "$dest"/onnxruntime-*.whl "$dest"/onnxruntime_genai-*.whl  # one of each, the one asked for
if [ -n "$ort_version" ]; then
  packages+=("onnxruntime==$ort_version")
elif [ "$newest_ort" = 1 ]; then
  packages+=("onnxruntime" "onnxruntime-genai")
else
  packages+=("onnxruntime-genai==0.17.1")
fi
"$py" -m pip download --quiet --no-deps --only-binary=:all: --python-version 3.12 --implementation cp \
  --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 --platform manylinux2014_x86_64 \
  -d "$dest" "${packages[@]}"

headers_cache="${HIPEP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hipep}/ort-headers"
if ! include=$(dirname "$(find "$headers_cache" -name onnxruntime_ep_c_api.h -print -quit 2>/dev/null)" 2>/dev/null) \
   || [ ! -f "$include/onnxruntime_c_api.h" ]; then
  include=$(tools/fetch_ort_headers.sh "$headers_cache")
fi
rm -rf "$dest/ort-headers"
mkdir -p "$dest/ort-headers/include"
cp -r "$include" "$dest/ort-headers/include/onnxruntime"
# The tiny builder decoders and ORT's conformance probe cache, where this machine has them
# (tests/models and tests/conformance made them): tools/gpu_check.sh points HIPEP_CACHE_DIR at
# them, so the GPU machine builds nothing for tests/gpu. Every model folder under 4 MB (a few MB in
# all); the ~1.1B builds (model_zoo size '1b', ~1 GB) stay behind and are built on the GPU machine.
cache="${HIPEP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hipep}"
if [ "$models" = 1 ]; then
  "$py" -m hipep.tools.model_zoo --test-models
fi
rm -rf "$dest/hipep-cache"
for src in "$cache"/models/*/; do
  [ -d "$src" ] || continue
  if [ "$(du -sk "$src" | cut -f1)" -lt 4096 ]; then
    mkdir -p "$dest/hipep-cache/models" && cp -r "${src%/}" "$dest/hipep-cache/models/"
  fi
done
[ -d "$cache/conformance" ] && mkdir -p "$dest/hipep-cache" && cp -r "$cache/conformance" "$dest/hipep-cache/"

# the commit the GPU machine's results name (tools/gpu_install.sh exports it as HIPEP_COMMIT)
git rev-parse HEAD >"$dest/head.commit" 2>/dev/null || true

echo "gpu_wheelhouse: $(ls "$dest"/*.whl | wc -l) wheel(s) and ONNX Runtime headers in $dest:"
ls -1 "$dest"
