#!/usr/bin/env bash
# Fetches ONNX Runtime's C headers from Debian's libonnxruntime-dev and prints the include dir.
#
# The headers are not in the onnxruntime pip wheel and are never committed. apt-get runs with its
# own sources list, state and cache folders under the cache dir, so the machine's apt setup is
# untouched. The archive URI is read from the machine's own apt sources (the suite is swapped for
# one that carries libonnxruntime-dev >= 1.23); HIPEP_DEBIAN_URI overrides it.
#
# usage: fetch_ort_headers.sh [cache_dir]     (stdout: the include dir; logs go to stderr)
set -euo pipefail

cache="${1:-${HIPEP_CACHE_DIR:-${XDG_CACHE_HOME:-$HOME/.cache}/hipep}/ort-headers}"
suites="${HIPEP_DEBIAN_SUITES:-sid forky}"
min_api=23
log() { echo "fetch_ort_headers: $*" >&2; }
fail() {
  log "ERROR: $*"
  log "Fix: set ORT_INCLUDE_DIR to a folder holding onnxruntime_c_api.h and onnxruntime_ep_c_api.h"
  log "     (ONNX Runtime >= 1.23), or make Debian's libonnxruntime-dev (forky/sid) reachable via apt-get."
  exit 1
}

api_version() { sed -n 's/^#define ORT_API_VERSION \([0-9]*\).*/\1/p' "$1/onnxruntime_c_api.h" 2>/dev/null | head -1; }

find_include() {
  local d
  d=$(dirname "$(find "$1" -name onnxruntime_ep_c_api.h -print -quit 2>/dev/null)" 2>/dev/null) || return 1
  [ -f "$d/onnxruntime_c_api.h" ] && echo "$d"
}

# Already extracted and recent enough: nothing to do.
if inc=$(find_include "$cache/root") && [ "$(api_version "$inc")" -ge "$min_api" ] 2>/dev/null; then
  echo "$inc"; exit 0
fi

command -v apt-get >/dev/null || fail "apt-get is not available on this machine"
command -v dpkg-deb >/dev/null || fail "dpkg-deb is not available on this machine"

uri="${HIPEP_DEBIAN_URI:-}"
if [ -z "$uri" ]; then
  # First Debian archive URI of the machine's apt sources (deb822 or one-line format).
  uri=$(cat /etc/apt/sources.list.d/*.sources 2>/dev/null | awk '/^URIs:/ {for (i=2;i<=NF;i++) if ($i !~ /security/) {print $i; exit}}')
  [ -n "$uri" ] || uri=$(cat /etc/apt/sources.list /etc/apt/sources.list.d/*.list 2>/dev/null \
        | awk '$1=="deb" && $2 ~ /debian\/?$/ && $2 !~ /security/ {print $2; exit}')
fi
[ -n "$uri" ] || fail "no Debian archive URI found in /etc/apt; set HIPEP_DEBIAN_URI"
keyring=/usr/share/keyrings/debian-archive-keyring.gpg
[ -f "$keyring" ] || fail "Debian's archive keyring ($keyring) is missing"

apt_dir="$cache/apt"
mkdir -p "$apt_dir"/{lists/partial,archives/partial,etc/preferences.d,etc/apt.conf.d} "$cache/root"
: > "$apt_dir/status"
{
  echo "Types: deb"; echo "URIs: $uri"; echo "Suites: $suites"; echo "Components: main"
  echo "Signed-By: $keyring"
} > "$apt_dir/etc/hipep.sources"

apt_opts=(
  -o "Dir::Etc::SourceList=/dev/null"
  -o "Dir::Etc::SourceParts=$apt_dir/etc"
  -o "Dir::Etc::Preferences=/dev/null"
  -o "Dir::Etc::PreferencesParts=$apt_dir/etc/preferences.d"
  -o "Dir::State=$apt_dir"
  -o "Dir::State::Lists=$apt_dir/lists"
  -o "Dir::State::status=$apt_dir/status"
  -o "Dir::Cache=$apt_dir"
  -o "Dir::Cache::Archives=$apt_dir/archives"
  -o "Debug::NoLocking=1"
  -o "APT::Get::List-Cleanup=0"
  -o "Acquire::Languages=none"
  -o "Acquire::IndexTargets::deb::Contents-deb::DefaultEnabled=false"
)

log "updating a private package list for '$suites' from $uri"
apt-get "${apt_opts[@]}" -qq update >&2 || fail "apt-get update (private lists) failed"
log "downloading libonnxruntime-dev"
(cd "$apt_dir/archives" && apt-get "${apt_opts[@]}" -qq download libonnxruntime-dev >&2) \
  || fail "apt-get download libonnxruntime-dev failed"
deb=$(ls -t "$apt_dir"/archives/libonnxruntime-dev_*.deb 2>/dev/null | head -1)
[ -n "$deb" ] || fail "no libonnxruntime-dev .deb was downloaded"
rm -rf "$cache/root"; mkdir -p "$cache/root"
dpkg-deb -x "$deb" "$cache/root" || fail "could not extract $deb"
inc=$(find_include "$cache/root") || fail "$deb holds no onnxruntime_ep_c_api.h (too old: ONNX Runtime >= 1.23 is needed)"
v=$(api_version "$inc")
[ -n "$v" ] && [ "$v" -ge "$min_api" ] || fail "$deb has ORT_API_VERSION ${v:-unknown}; >= $min_api is needed"
log "headers (ORT_API_VERSION $v) in $inc"
echo "$inc"
