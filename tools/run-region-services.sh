#!/usr/bin/env bash
# Long-running services whose old data sits idle (tools/lib/region_services.py), each run
# plainly and under zsm-run with no flags (its default mode; --zsm-args adds some), side by
# side: redis-server, a python3 process serving a dict, and sqlite3 (an in-memory database in a
# python3 process), each holding 256 MiB (at --scale=1) of 2 KiB values cut from the files of
# /usr/share and /usr/lib. A C++ client (tools/region/service_client.cpp, one connection, 16
# requests pipelined) reads the newest 30 % of the keys under Zipf(0.99), one read in a
# thousand an older key, and checks every value. Prints one Markdown table: the service's
# average and peak RSS, ops/s, p99 latency, wrong values, CPU shares, the region's line.
#
#   tools/run-region-services.sh [--services=redis,python,sqlite] [--scale=N] [--seconds=N]
#                                [--rounds=N] [--zsm-run=PATH] [--zsm-args="..."] [--user=UID] [--dir=DIR]
#                                [--check] [--no-install]
#
#   --services   any of redis,python,sqlite (all)
#   --scale      the values' size: 1 is 256 MiB per service (default 1; 0.05 for a quick run)
#   --seconds    the measured phase, after a warm-up of a quarter of it (default 60: each
#                service's two runs take some 2.5 minutes, all of them some 9 minutes on 2 cores;
#                --scale=0.05 --seconds=10 takes about 1.5 minutes)
#   --rounds     pairs of runs per service, alternating which runs first; a last row gives the
#                medians of the ratios (default 1)
#   --zsm-run    the launcher (default: built in $ZSM_BUILD, or build/release, target zsm-run)
#   --zsm-args   flags for zsm-run, e.g. "--budget=200M --stats" (--stats: the region's line at
#                exit in the table; without it, the line at start: budget and mode)
#   --user       run the services (plain too) as this uid, through setpriv (root only); the
#                launcher and the Python module are staged where that user can run them
#   --dir        where the corpus and the services' logs go (default build/region-services)
#   --check      exit 1 when a run fails or a value read back is wrong
#   --no-install do not install redis-server or python3 (a missing one is reported, not run)
# Installs only what the named services need (apt-get, root or sudo), nothing else; builds the
# client (target zsm_region_service_client) in $ZSM_BUILD or build/release.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
zsm_run="" services="redis,python,sqlite" user="" install=1 pass=("--dir=$root/build/region-services")

die() { echo "run-region-services.sh: $*" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --zsm-run=*) zsm_run="${arg#*=}" ;;
    --services=*) services="${arg#*=}"; pass+=("--services" "$services") ;;
    --user=*) user="${arg#*=}"; pass+=("--user" "$user") ;;
    --scale=*|--seconds=*|--rounds=*|--zsm-args=*|--dir=*) pass+=("${arg%%=*}=${arg#*=}") ;;
    --check) pass+=("$arg") ;;
    --no-install) install=0 ;;
    *) die "unknown argument '$arg' (see the top of $0)" ;;
  esac
done

package_of() {  # the Debian package a service needs
  case "$1" in
    redis) echo redis-server ;; python|sqlite) echo python3 ;;
    *) die "unknown service '$1' (redis,python,sqlite)" ;;
  esac
}

IFS=, read -ra wanted <<< "$services"
for s in "${wanted[@]}"; do package_of "$s" >/dev/null; done  # an unknown name: one line, exit 2

if ((install)); then
  source "$root/tools/lib/packages.sh"
  install_missing run-region-services.sh $(for s in "${wanted[@]}"; do package_of "$s"; done)
fi

source "$root/tools/lib/zsm_run.sh"
build="${ZSM_BUILD:-$root/build/release}"
[ -n "$zsm_run" ] || zsm_run="$(default_zsm_run "$root")"  # configures $build too
[ -x "$zsm_run" ] || die "no launcher at $zsm_run"
[ -f "$build/build.ninja" ] || cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo >/dev/null
cmake --build "$build" --target zsm_region_service_client >/dev/null
module="$root/tools/lib/region_services.py"
if [ -n "$user" ]; then  # copies the user can run (a clone under /root is out of its reach)
  stage="$(mktemp -d)"
  trap 'rm -rf "$stage"' EXIT
  stage_for_others "$stage" "$zsm_run" "$module" "$root/tools/lib/region_programs.py"
  zsm_run="$stage/$(basename "$zsm_run")" module="$stage/region_services.py"
fi
python3 "$module" --zsm-run "$zsm_run" --client "$build/tools/zsm_region_service_client" "${pass[@]}"
