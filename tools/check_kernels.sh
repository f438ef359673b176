#!/usr/bin/env bash
# Compile-checks every kernels/*.hip, so a kernel that does not build fails CI (the kernels
# themselves are compiled at run time by NVRTC or hiprtc):
#   * NVIDIA: nvcc, PTX for sm_90 (required);
#   * AMD: hipcc for gfx90a (CDNA2, MI200: wave 64) and gfx1030 (RDNA2: wave 32), with the
#     HIPEP_WARP_SIZE the runtime passes for each. Only where hipcc is installed (Debian:
#     `apt-get install hipcc`, HIP 5.2; .ci/run installs it); without it this part is skipped
#     and says so. HIP 5.2 does not know gfx942 (MI300) and has no device libraries for gfx11.
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
  echo "check_kernels: $k ok (nvcc sm_90)"
done

if ! command -v hipcc >/dev/null; then
  echo "check_kernels: SKIPPED the AMD check of ${#kernels[@]} kernel(s): hipcc not found (Debian: apt-get install hipcc)" >&2
  exit 0
fi
# target:warp size. HIP_PLATFORM=amd: hipcc otherwise picks the NVIDIA platform wherever nvcc is
# on the PATH.
amd_targets=(gfx90a:64 gfx1030:32)
jobs=$(nproc 2>/dev/null || echo 2)
amd_compile() {  # kernel target warp: one code object; its log is kept only on failure
  local name; name=$(basename "$1" .hip)
  if HIP_PLATFORM=amd hipcc -x hip -std=c++17 --offload-arch="$2" --cuda-device-only \
      -Wno-unused-command-line-argument -DHIPEP_WARP_SIZE="$3" -I kernels -c "$1" \
      -o "$out/$name.$2.o" >"$out/$name.$2.log" 2>&1; then
    echo "check_kernels: $1 ok (hipcc $2, warp $3)"
  else
    echo "check_kernels: $1 FAILED (hipcc $2, warp $3):" >&2
    cat "$out/$name.$2.log" >&2
    return 1
  fi
}
failed=0
running=0
for target in "${amd_targets[@]}"; do
  for k in "${kernels[@]}"; do
    amd_compile "$k" "${target%%:*}" "${target##*:}" &
    running=$((running + 1))
    if [ "$running" -ge "$jobs" ]; then wait -n || failed=1; running=$((running - 1)); fi
  done
done
while [ "$running" -gt 0 ]; do wait -n || failed=1; running=$((running - 1)); done
if [ "$failed" -ne 0 ]; then echo "check_kernels: the AMD check failed" >&2; exit 1; fi
hip_version=$(HIP_PLATFORM=amd hipcc --version 2>/dev/null | sed -n 's/^HIP version: //p' | head -n 1) || true
echo "check_kernels: ${#kernels[@]} kernel(s) ok for sm_90 and ${amd_targets[*]%%:*} (HIP ${hip_version:-version unknown})"
