#!/usr/bin/env bash
# One setting's effect on the GPU, measured both ways in one machine session: the decode GEMV kernel
# table (benchmarks/kernel_bandwidth.py --only gemv,copy) and the ~1.1B int4-f16 decode
# (benchmarks/decode.py --precision int4-f16 --no-genai), each once without and once with the
# setting (an environment variable hipep reads, such as HIPEP_MNB_GEMV_TC=1), then the GPU test
# files given with --tests under the setting. Decode runs first: tok/s and the greedy tokens against
# the CPU EP are what decide a default.
#
# Machine time is short and a call may be cut: every step runs under the time left before
# --deadline (seconds from the start, default 540), a step that cannot get 30 s is skipped and says
# so, and each result lands under $OUT as it is made. Logs and results go to one tarball,
# $OUT/gpu-ab.tgz (a device call brings back a few files only); off such a machine, to gpu-ab-logs/.
# Needs what tools/gpu_bench.sh needs (wheelhouse/ from tools/gpu_wheelhouse.sh); the ~1.1B model is
# built first (model_zoo size '1b': ~30 s on the H200 machine's 16 cores), or taken from the cache.
#
# --no-kernels leaves the GEMV table out (a setting the kernels do not read, such as
# HIPEP_NATIVE_REPLAY=0, which changes the host's part of a run only).
#
# usage: tools/gpu_ab.sh VAR=VALUE [--deadline S] [--no-kernels] [--tests PATH...]
#   e.g. tools/gpu_ab.sh HIPEP_MNB_GEMV_TC=1 --tests tests/gpu/test_gpu_decoders.py
set -uo pipefail

# check_setting VAR=VALUE: the setting as given, or an error naming what is wrong (a hipep variable only:
# HIPEP_*, with a value).
check_setting() {
  local s=${1:-}
  if [[ ! "$s" =~ ^HIPEP_[A-Z0-9_]+=.+$ ]]; then
    echo "gpu_ab: expected a setting HIPEP_NAME=VALUE, got '${s}'" >&2
    return 2
  fi
  echo "$s"
}

# time_for LIMIT DEADLINE ELAPSED: the seconds a step may take (its limit, or what is left before the
# deadline if less), or nothing when under 30 s are left.
time_for() {
  local limit=$1 left=$(( $2 - $3 ))
  [ "$left" -lt 30 ] && return 0
  [ "$left" -lt "$limit" ] && limit=$left
  echo "$limit"
}

main() {
  local setting deadline=540 kernels=1 tests=()
  setting=$(check_setting "${1:-}") || exit 2
  shift
  while [ $# -gt 0 ]; do
    case $1 in
      --deadline) deadline=${2:?--deadline takes seconds}; shift 2 ;;
      --no-kernels) kernels=0; shift ;;
      --tests) shift; while [ $# -gt 0 ] && [[ $1 != --* ]]; do tests+=("$1"); shift; done ;;
      *) echo "gpu_ab: unknown argument '$1'" >&2; exit 2 ;;
    esac
  done
  t0=$(date +%s)  # (t0, repo, out, logs and py stay global: step and the exit trap use them)
  repo="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
  cd "$repo"
  out="${OUT:-$repo/gpu-ab-logs}"
  py="${PYTHON:-python3}"
  logs="$out/gpu-ab"
  mkdir -p "$logs/results/without" "$logs/results/with"
  step() { echo "== gpu_ab $(( $(date +%s) - t0 ))s: $*" | tee -a "$logs/summary.txt"; }
  pack() { (cd "$out" && tar czf gpu-ab.tgz gpu-ab && rm -rf gpu-ab); }
  trap pack EXIT
  step "setting: $setting; deadline ${deadline} s"
  # built every time (13 s): a machine still warm from an earlier call holds that call's hipep
  source "$repo/tools/gpu_install.sh"
  export PYTHONUNBUFFERED=1 HF_HUB_OFFLINE=1 TRANSFORMERS_OFFLINE=1
  # the tiny test models the wheelhouse carries, where tests read them (~/.cache/hipep)
  if [ -d wheelhouse/hipep-cache/models ]; then
    mkdir -p ~/.cache/hipep/models && cp -rn wheelhouse/hipep-cache/models/* ~/.cache/hipep/models/ 2>/dev/null
  fi
  cd /tmp
  step "the ~1.1B int4-f16 model (model_zoo size '1b')"
  "$py" -P -c "from hipep.tools import model_zoo; print(model_zoo.decoder('llama', 'int4-f16', size='1b'))" \
    >"$logs/model.log" 2>&1 || step "FAILED: model build (see model.log)"

  run() {  # name, limit, [env VAR=VALUE] command...
    local name=$1 limit
    limit=$(time_for "$2" "$deadline" $(( $(date +%s) - t0 )))
    shift 2
    if [ -z "$limit" ]; then step "$name: skipped (deadline)"; return; fi
    step "$name (limit ${limit} s)"
    local t rc
    t=$(date +%s)
    timeout -k 5 "$limit" "$@" >"$logs/$name.log" 2>&1
    rc=$?
    step "$name: exit $rc in $(( $(date +%s) - t )) s; $(grep -E '^(ORT \+ IOBinding|greedy tokens|wrote)' "$logs/$name.log" | head -2 | tr '\n' ' ')"
  }
  local decode=("$repo/benchmarks/decode.py" --precision int4-f16 --no-genai --runs 3 --compare 16)
  run decode-without 100 "$py" -P "${decode[@]}" --out "$logs/results/without"
  run decode-with 100 env "$setting" "$py" -P "${decode[@]}" --out "$logs/results/with"
  if [ "$kernels" = 1 ]; then
    local table=("$repo/benchmarks/kernel_bandwidth.py" --only gemv,copy --seconds 0.3)
    run kernels-without 100 "$py" -P "${table[@]}" --out "$logs/results/without"
    run kernels-with 100 env "$setting" "$py" -P "${table[@]}" --out "$logs/results/with"
  fi
  if [ ${#tests[@]} -gt 0 ]; then
    local paths=()
    for p in "${tests[@]}"; do paths+=("$repo/$p"); done
    run tests-with 200 env "$setting" "$py" -P -m pytest "${paths[@]}" -m gpu -q -p no:cacheprovider -rfE
    step "tests under $setting: $(tail -1 "$logs/tests-with.log" 2>/dev/null)"
  fi
  grep -h "^| ORT + IOBinding" "$logs"/results/*/*decode*.md 2>/dev/null | cut -d'|' -f2-7
}

if [ "${BASH_SOURCE[0]}" = "$0" ]; then
  main "$@"
fi
