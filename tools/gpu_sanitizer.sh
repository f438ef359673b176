#!/usr/bin/env bash
# Runs hipep's GPU tests (tests/gpu) under NVIDIA's compute-sanitizer, one pass per tool:
#   memcheck   out-of-bounds and misaligned global/shared accesses, device faults, bad API calls;
#   racecheck  shared-memory hazards between threads of a block (the reduction and norm kernels);
#   synccheck  invalid __syncthreads/__syncwarp use (divergent barriers, bad shuffle masks).
# Writes under $OUT (else gpu-sanitizer-logs/): <tool>.<pid>.log (the sanitizer's report, one per
# process: the tests start child processes, all are tracked), <tool>-pytest.log (the tests' own
# output) and summary.txt with one line per tool: errors found, pytest's and the tool's exit code.
#
# hipep must already be installed for the machine's python3 (tools/gpu_check.sh builds and
# installs it); like gpu_check.sh this runs from outside the checkout (python -P), so the
# installed hipep, which has the native module, is the one imported.
#
# Settings under the sanitizer:
#   * CUDA graphs stay on (compute-sanitizer checks kernels replayed through cuGraphLaunch too);
#     SANITIZER_GRAPHS=0 sets HIPEP_CUDA_GRAPHS=0 so that every kernel is a plain launch.
#   * HIPEP_CUDA_SYNC stays off (it would also turn CUDA graphs off); the sanitizer names the kernel,
#     block and thread of every error itself.
#   * The kernel disk cache is a fresh folder per run ($OUT/kernel-cache), filled once by
#     `python -m hipep precompile` outside the sanitizer (its key covers NVRTC's version, the
#     architecture and the defines, so no other build's CUBIN is picked up): compiling every module
#     inside each sanitized process made a pass over tests/gpu take many minutes. The sanitizer
#     instruments kernels when a module is loaded, so cached CUBINs are checked like fresh ones;
#     generated pointwise kernels are still compiled on first use.
#   * Kernels run 10-100x slower (racecheck the most): SANITIZER_TIMEOUT (seconds per tool, default
#     1800) bounds each pass; a pass that runs out reports "timed out" in the summary.
#
# usage: tools/gpu_sanitizer.sh [extra pytest arguments, e.g. -k norm]
#   SANITIZER_TOOLS="memcheck racecheck synccheck" (default), SANITIZER_TEST_TIMEOUT (seconds of
#   one test before its threads' stacks are dumped, default 120), COMPUTE_SANITIZER (default
#   /usr/local/cuda/bin/compute-sanitizer, else the one on PATH), PYTHON (default python3);
#   SANITIZER_FILES="test_gpu_linalg.py test_gpu_decoders.py ...": one pass per file of tests/gpu
#   (each with SANITIZER_TIMEOUT, its own logs <tool>.<file>.* and summary line), so that a pass
#   that runs out of time loses one file, not the rest. A stopped pass reports the tests that had
#   passed by then. SANITIZER_JOBS=N runs up to N passes at once (default 1): the sanitizer's cost
#   is mostly host-side instrumentation and bookkeeping of one process, and a GPU machine has the
#   cores and the device memory for several. Tests that measure device-wide memory (cuMemGetInfo)
#   are not meaningful beside other processes; deselect them with -k when running passes at once.
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
py="${PYTHON:-python3}"
logs="${OUT:-$repo/gpu-sanitizer-logs}"
mkdir -p "$logs"
logs="$(cd "$logs" && pwd)"
tools="${SANITIZER_TOOLS:-memcheck racecheck synccheck}"
timeout_s="${SANITIZER_TIMEOUT:-1800}"
# A test running longer than this under the sanitizer gets every thread's Python stack written to
# its pytest log (pytest's faulthandler_timeout): a hang and a slow test then look different.
test_timeout="${SANITIZER_TEST_TIMEOUT:-120}"
sanitizer="${COMPUTE_SANITIZER:-/usr/local/cuda/bin/compute-sanitizer}"
[ -x "$sanitizer" ] || sanitizer="$(command -v compute-sanitizer || true)"
say() { echo "== gpu_sanitizer: $*" | tee -a "$logs/summary.txt"; }

[ -n "$sanitizer" ] || { say "FAILED: compute-sanitizer not found (set COMPUTE_SANITIZER)"; exit 1; }
say "$("$sanitizer" --version 2>/dev/null | grep -i version | head -1); $(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader 2>/dev/null | head -1)"
cd /tmp
"$py" -P -c "import hipep._native" 2>/dev/null \
  || { say "FAILED: hipep is not installed for $py (run tools/gpu_check.sh first)"; exit 1; }

export HIPEP_KERNEL_CACHE="$logs/kernel-cache"
rm -rf "$HIPEP_KERNEL_CACHE"
"$py" -P -m hipep precompile >"$logs/precompile.log" 2>&1 || say "precompile failed (see precompile.log): modules compile in the sanitized processes"
if [ "${SANITIZER_GRAPHS:-1}" = "0" ]; then export HIPEP_CUDA_GRAPHS=0; fi

# Errors in the sanitizer's logs of one tool, summed over processes: memcheck and synccheck end
# with "ERROR SUMMARY: N errors", racecheck with "RACECHECK SUMMARY: N hazards displayed (E errors,
# W warnings)" (hazards that are only warnings are counted apart). Plain grep/awk: no gawk there.
count_errors() {  # the logs' name prefix (<tool> or <tool>.<file>)
  local prefix=$1 errors warnings
  errors=$(cat "$logs/$prefix".*.log 2>/dev/null | grep -oE "ERROR SUMMARY: [0-9]+" | awk '{n += $3} END {print n + 0}')
  local race
  race=$(cat "$logs/$prefix".*.log 2>/dev/null | grep "RACECHECK SUMMARY" | grep -oE "\([0-9]+ errors?, [0-9]+ warnings?\)" \
    | tr -d '(),' | awk '{e += $1; w += $3} END {print e + 0, w + 0}')
  warnings=${race#* }
  # racecheck may print an ERROR SUMMARY as well: its own summary, where there is one, counts
  if grep -qs "RACECHECK SUMMARY" "$logs/$prefix".*.log; then errors=${race% *}; fi
  echo "$errors errors, $warnings warnings$(api_errors "$prefix")"
}

# The errors that are refused driver calls rather than faults in a kernel ("Program hit
# CUDA_ERROR_... on CUDA API call to cuX"), by call and error: the tests provoke some on purpose
# (a launch the driver refuses), and cuda-bindings looks up driver entry points that an older
# driver lacks. Kernel errors are the rest.
api_errors() {
  local found
  found=$(cat "$logs/$1".*.log 2>/dev/null | grep -oE "Program hit [A-Z_]+ .* on CUDA API call to [A-Za-z0-9_]+" \
    | sed -E 's/Program hit ([A-Z_]+) .* on CUDA API call to ([A-Za-z0-9_]+)/\2 \1/' | sort | uniq -c \
    | awk '{printf "%s%s %s x%d", (NR > 1 ? ", " : ""), $2, $3, $1}')
  [ -z "$found" ] || echo " (API errors: $found)"
}

# Tests that passed before a pass was stopped: pytest -q's progress characters ('.' a pass).
passed_so_far() {  # progress lines' dots; the last may end in faulthandler's "Timeout (...)!" (no newline before it)
  grep -oE "^[.sFEx]+(( +\[ *[0-9]+%\])?$|Timeout \()" "$1" 2>/dev/null | tr -cd '.' | wc -c
}

status=0
run_pass() {  # tool, name of the pass (logs), pytest targets and arguments...
  local tool=$1 name=$2
  shift 2
  rm -f "$logs/$name".*.log
  say "$name: pytest $* (timeout ${timeout_s} s)"
  local start rc took tests
  start=$(date +%s)
  timeout --signal=TERM --kill-after=60 "$timeout_s" \
    "$sanitizer" --tool "$tool" --target-processes all --print-limit 200 --error-exitcode 86 \
      --log-file "$logs/$name.%p.log" \
      "$py" -P -m pytest "$@" -m gpu -p no:cacheprovider -q -rfEs -o "faulthandler_timeout=$test_timeout" \
      "${pytest_args[@]}" \
    >"$logs/$name-pytest.log" 2>&1
  rc=$?
  took=$(( $(date +%s) - start ))
  tests=$(grep -E "^[0-9]+ (passed|failed)|(passed|failed|skipped|error).* in [0-9.]+s" "$logs/$name-pytest.log" | tail -1)
  if [ "$rc" -eq 124 ] || [ "$rc" -eq 137 ]; then
    say "$name: timed out after ${took} s; $(count_errors "$name") so far; pytest: $(passed_so_far "$logs/$name-pytest.log") passed when stopped"
    status=1
    return
  fi
  # rc 86: the sanitizer found errors; any other nonzero code is pytest's (a failed test)
  say "$name: $(count_errors "$name") in ${took} s; exit code $rc; pytest: ${tests:-no summary (see $name-pytest.log)}"
  [ "$rc" -eq 0 ] || status=1
}

# Passes run at once write their outcome to a file each (a background job's variables die with it).
jobs_max="${SANITIZER_JOBS:-1}"
start_pass() {  # same arguments as run_pass
  if [ "$jobs_max" -le 1 ]; then run_pass "$@"; return; fi
  while [ "$(jobs -rp | wc -l)" -ge "$jobs_max" ]; do wait -n; done
  ( status=0; run_pass "$@"; echo "$status" >"$logs/$2.status" ) &
}

pytest_args=("$@")
for tool in $tools; do
  if [ -n "${SANITIZER_FILES:-}" ]; then
    for file in $SANITIZER_FILES; do
      start_pass "$tool" "$tool.${file%.py}" "$repo/tests/gpu/$file"
    done
  else
    start_pass "$tool" "$tool" "$repo/tests/gpu"
  fi
done
wait
if grep -qsv "^0$" "$logs"/*.status; then status=1; fi
say "logs in $logs"
exit $status
