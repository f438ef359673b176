#!/usr/bin/env bash
# Compile-checks every kernels/*.hip with nvcc through HIP's CUDA path, so a kernel that does not
# build fails CI (the kernels themselves are compiled at run time by hiprtc or NVRTC).
set -euo pipefail
cd "$(dirname "$0")/.."
shopt -s nullglob
kernels=(kernels/*.hip)
if [ ${#kernels[@]} -eq 0 ]; then echo "check_kernels: no kernels/*.hip yet"; exit 0; fi
command -v nvcc >/dev/null || { echo "check_kernels: nvcc not found; it is needed to check ${#kernels[@]} kernel(s)" >&2; exit 1; }
out=$(mktemp -d); trap 'rm -rf "$out"' EXIT
for k in "${kernels[@]}"; do
  name=$(basename "$k" .hip)
  nvcc -x cu -std=c++17 -arch=sm_90 -ptx -I kernels "$k" -o "$out/$name.ptx"
  echo "check_kernels: $k ok"
done
