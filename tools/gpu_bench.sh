#!/usr/bin/env bash
# Builds hipep and runs the GPU benchmarks on a machine with an NVIDIA GPU and no package index:
# benchmarks/kernel_bandwidth.py (achieved bandwidth of the int4 GEMV, GQA decode, norms and Softmax against
# the device-to-device copy) and benchmarks/decode.py (the ~1.1B int4 llama through ORT with
# IOBinding and through onnxruntime-genai, greedy tokens against the CPU EP), for the builder's CPU
# target (f32 activations) and, unless --quick, its CUDA target (`--precision int4-f16`).
#
# The machine needs what tools/gpu_check.sh needs, plus torch and transformers for the model
# builder; wheelhouse/ (tools/gpu_wheelhouse.sh) brings the rest, onnxruntime-genai and onnx-ir
# included. The ~1.1B model (0.9 GB) is built here, offline, from a local transformers config
# (~30 s on 16 cores) and cached under ~/.cache/hipep/models (HIPEP_CACHE_DIR moves it).
#
# Steps as in tools/gpu_check.sh: install the wheels (no index), build and install hipep (no build
# isolation), then, from outside the checkout so the installed hipep is imported: precompile the
# kernels, build the model, run both benchmarks. Logs and the results files (<date>-kernels-<gpu>
# and <date>-decode-<gpu>, .md and .png; without --quick also <date>-decode-host-<gpu>-int4-f16, where
# the int4-f16 step's host time goes) go to $OUT when set (else gpu-bench-logs/); the results
# are also copied into benchmarks/results/. Each benchmark runs under a time limit
# (HIPEP_BENCH_TIMEOUT seconds, default 200: the whole script stays under 10 minutes); kernel_bandwidth.py
# rewrites its results file after every workload, so a run cut short keeps the rows it measured.
#
# usage: tools/gpu_bench.sh [--quick]
set -uo pipefail
repo="$(cd "$(dirname "$0")/.." && pwd)"
cd "$repo"
py="${PYTHON:-python3}"
logs="${OUT:-$repo/gpu-bench-logs}"
limit="${HIPEP_BENCH_TIMEOUT:-200}"
quick=()
case "${1:-}" in
  --quick) quick=(--quick) ;;
  "") ;;
  -h|--help) sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'; exit 0 ;;
  *) echo "gpu_bench: unknown argument '$1' (usage: tools/gpu_bench.sh [--quick])" >&2; exit 2 ;;
esac
mkdir -p "$logs/results"
status=0
step() { echo "== gpu_bench: $*" | tee -a "$logs/summary.txt"; }

source "$repo/tools/gpu_install.sh"

export HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1  # the model comes from a local config, never a download

cd /tmp
step "precompile (kernel cache: ${HIPEP_KERNEL_CACHE:-~/.cache/hipep/kernels})"
"$py" -P -m hipep precompile >"$logs/precompile.log" 2>&1 || { step "FAILED: precompile (see precompile.log)"; status=1; }

precisions=(int4)
[ ${#quick[@]} -eq 0 ] && precisions+=(int4-f16)
for precision in "${precisions[@]}"; do
  step "the ~1.1B $precision model (hipep.tools.model_zoo size '1b')"
  start=$(date +%s)
  if "$py" -P -c "from hipep.tools import model_zoo; print(model_zoo.decoder('llama', '$precision', size='1b'))" \
       >"$logs/model-$precision.log" 2>&1; then
    step "model ready in $(( $(date +%s) - start )) s: $(tail -1 "$logs/model-$precision.log")"
  else
    step "FAILED: model build (see model-$precision.log): $(tail -1 "$logs/model-$precision.log")"
    status=1
  fi
done

run_bench() {  # name, log name, script arguments...
  local name=$1 log=$2
  shift 2
  step "benchmarks/$name.py $* (limit ${limit} s)"
  timeout --kill-after=10 "$limit" "$py" -P "$repo/benchmarks/$name.py" --out "$logs/results" "$@" 2>&1 \
    | tee "$logs/$log.log"
  local rc=${PIPESTATUS[0]}
  case $rc in
    0) ;;
    124|137) step "FAILED: $name.py ran past ${limit} s (HIPEP_BENCH_TIMEOUT)"; status=1 ;;
    *) step "FAILED: $name.py exit code $rc (see $log.log)"; status=1 ;;
  esac
  grep -E "^(wrote|could not run|gate missed|ORT \+ IOBinding|onnxruntime-genai|$name\.py:)" "$logs/$log.log" \
    >>"$logs/summary.txt"
}

run_bench kernel_bandwidth kernels "${quick[@]}"
run_bench decode decode "${quick[@]}"
[ ${#quick[@]} -eq 0 ] && run_bench decode decode-int4-f16 --precision int4-f16
[ ${#quick[@]} -eq 0 ] && run_bench decode_host decode-host-int4-f16 --precision int4-f16

results=("$logs/results"/*)
if [ ${#results[@]} -gt 0 ]; then
  cp "${results[@]}" "$repo/benchmarks/results/"
  step "results: $(cd "$logs/results" && ls | tr '\n' ' ')(also in benchmarks/results/)"
else
  step "FAILED: no results files"
  status=1
fi
exit $status
