# Installs what a GPU machine without a package index needs, for tools/gpu_check.sh and
# tools/gpu_bench.sh (sourced by them, from the repository root, with $py, $logs and step() set):
# the wheels in wheelhouse/ (tools/gpu_wheelhouse.sh makes them), then hipep itself, built with the
# machine's own build tools against ONNX Runtime's headers (wheelhouse/ort-headers, the build cache
# or ORT_INCLUDE_DIR). Exits the calling script on a failure.
# HIPEP_GPU_INSTALLED=1 skips all of it: hipep is already built and installed on this machine (a
# second check beside a first one, which must not rebuild the package the first one is importing).

# The commit results name (benchmarks/machine.py): wheelhouse/head.commit, which gpu_wheelhouse.sh
# writes and a caller rewrites when it copies a newer tree; a copied tree's .git may be older.
if [ -z "${HIPEP_COMMIT:-}" ] && [ -f wheelhouse/head.commit ]; then
  export HIPEP_COMMIT="$(cut -c1-7 wheelhouse/head.commit)"
fi
if [ "${HIPEP_GPU_INSTALLED:-0}" = "1" ]; then
  step "hipep already installed (HIPEP_GPU_INSTALLED=1): $("$py" -P -c 'import hipep; print(hipep.__file__)' 2>&1 | tail -1)"
  return 0
fi
step "machine: $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1); $("$py" --version)"

shopt -s nullglob
wheels=(wheelhouse/*.whl)
if [ ${#wheels[@]} -gt 0 ]; then
  step "installing ${#wheels[@]} wheel(s) from wheelhouse/"
  "$py" -m pip install --quiet --no-index --no-deps --no-compile "${wheels[@]}" >"$logs/pip-wheels.log" 2>&1 \
    || { step "FAILED: wheel install (see pip-wheels.log)"; exit 1; }
fi
# (the machine's own onnxruntime, or the newest one a wheelhouse made with --newest-ort carries)
step "onnxruntime $("$py" -c 'import onnxruntime; print(onnxruntime.__version__)' 2>&1 | tail -1)"

include="${ORT_INCLUDE_DIR:-}"
if [ -z "$include" ]; then
  header=$(find wheelhouse/ort-headers "${HOME}/.cache/hipep/ort-headers" -name onnxruntime_ep_c_api.h -print -quit 2>/dev/null)
  [ -n "$header" ] || { step "FAILED: no ONNX Runtime headers (run tools/gpu_wheelhouse.sh, or set ORT_INCLUDE_DIR)"; exit 1; }
  include=$(dirname "$header")
fi
step "building hipep against $include"
start=$(date +%s)
ORT_INCLUDE_DIR="$include" "$py" -m pip install --no-build-isolation --no-deps --no-index . >"$logs/build.log" 2>&1 \
  || { step "FAILED: build (see build.log)"; tail -30 "$logs/build.log"; exit 1; }
step "built in $(( $(date +%s) - start )) s"
