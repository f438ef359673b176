#!/usr/bin/env bash
# Runs hipep's tests against one onnxruntime release: a virtual environment with that release
# (and hipep's test extra), hipep built and installed into it from a copy of this work tree, then
# pytest on the copy's tests from the copy (python -P: the installed hipep is the one imported).
#
#   tools/check_ort_versions.sh VERSION [PYTEST ARGS...]
#   tools/check_ort_versions.sh 1.24.1                       # the whole suite
#   tools/check_ort_versions.sh 1.24.1 tests/ort -x          # a subset
#
# VERSION is a pip version specifier's right-hand side (1.24.1, or 1.24.* for the newest 1.24).
# Environment:
#   HIPEP_ORT_VENV    the virtual environment (default /tmp/hipep-ort-VERSION); an existing one
#                     that already has this onnxruntime is reused and only hipep is reinstalled
#   HIPEP_ORT_FRESH=1 remove that environment first (CI)
#   HIPEP_ORT_EXTRAS  hipep's extras to install (default: test). The models extra needs
#                     onnxruntime-genai >= 0.18, which needs onnxruntime >= 1.31.
#   PYTHON            the interpreter the environment is made from (default python3)
# The ONNX Runtime headers come as for any build (ORT_INCLUDE_DIR or tools/fetch_ort_headers.sh).
# Exit status: pytest's (0: all selected tests passed; 5, nothing selected, counts as a failure).
set -euo pipefail

if [ $# -lt 1 ] || [[ "$1" == -* ]]; then
  sed -n '2,20p' "$0" | sed 's/^# \{0,1\}//'
  exit 2
fi
version="$1"
shift
[ $# -gt 0 ] || set -- tests
[[ "$version" =~ ^[0-9]+\.[0-9]+(\.[0-9]+|\.\*)$ ]] \
  || { echo "check_ort_versions: '$version' is not an onnxruntime version such as 1.24.1 or 1.24.*" >&2; exit 2; }

repo="$(cd "$(dirname "$0")/.." && pwd)"
venv="${HIPEP_ORT_VENV:-/tmp/hipep-ort-${version//\*/x}}"
extras="${HIPEP_ORT_EXTRAS:-test}"
t0=$(date +%s)
say() { echo "=== [ort $version, $(( $(date +%s) - t0 ))s] $*"; }

[ "${HIPEP_ORT_FRESH:-0}" = 1 ] && rm -rf "$venv"
if [ ! -x "$venv/bin/python" ]; then
  say "virtual environment $venv"
  "${PYTHON:-python3}" -m venv "$venv"
fi
py="$venv/bin/python"

# A copy of the work tree (tracked and untracked files, not ignored ones: no build folders, no
# native library), so the build writes nothing into the checkout and the copy's hipep/ cannot
# stand in for the installed one.
src="$(mktemp -d "${TMPDIR:-/tmp}/hipep-ort-src.XXXXXX")"
trap 'rm -rf "$src"' EXIT
(cd "$repo" && git ls-files -co --exclude-standard -z | tar --null -T - -cf -) | tar -xf - -C "$src"

say "installing onnxruntime==$version and hipep[$extras] from $repo"
export CMAKE_BUILD_PARALLEL_LEVEL="${CMAKE_BUILD_PARALLEL_LEVEL:-2}"
# (an existing environment keeps its dependencies; hipep itself is always built from this tree)
"$py" -m pip uninstall --quiet --yes hipep >/dev/null 2>&1 || true
"$py" -m pip install --quiet --disable-pip-version-check "onnxruntime==$version" "$src[$extras]"

cd "$src"
"$py" -P -c "
import hipep, onnxruntime, sys
assert hipep.__file__.startswith(sys.prefix), 'hipep imported from ' + hipep.__file__
print('=== hipep', hipep.__version__, 'from', hipep.get_library_path())
print('=== onnxruntime', onnxruntime.__version__)"
say "pytest $*"
status=0
"$py" -P -m pytest -p no:cacheprovider "$@" || status=$?
say "pytest exit status $status"
exit "$status"
