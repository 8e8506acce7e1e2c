#!/usr/bin/env bash
# Real programs from Debian's packages under zsm-run (tools/lib/region_programs.py): sort, xz,
# zstd -3 (compress and decompress in a pipe), mawk, python3 (lists, dicts, bytes, a file read,
# numpy, multiprocessing), perl, sqlite3 (an in-memory database), redis-server (redis-benchmark,
# then BGSAVE, the RDB's digest compared), gcc on a generated file and java, each plainly and
# under the launcher at budgets of 1/2 and 1/4 of its plain peak RSS, with handler threads and
# in the SIGBUS mode (--fractions=0 adds zsm-run's default, no budget). Prints one Markdown table: completion, identical output, peak RSS against
# the target, wall time, faults, evictions, the region's peak (docs/region-figures.md holds one).
#
#   tools/run-region-programs.sh [--zsm-run=PATH] [--programs=a,b,...] [--fractions=2,4]
#                                [--modes=threads,sigbus] [--scale=N] [--dir=DIR] [--user=UID]
#                                [--check] [--check-peak] [--no-install]
#
#   --zsm-run    the launcher (default: built in $ZSM_BUILD, or build/release, target zsm-run)
#   --programs   any of sort,xz,zstd,mawk,python3,perl,sqlite3,redis-server,gcc,java (all)
#   --scale      multiplies every program's working set (1 by default; docs/region-figures.md's
#                table is --scale=0.05, some 5 minutes on 2 cores; larger scales thrash longer)
#   --user       every run (plain too) as this uid, through setpriv (root only): as a user
#                without privileges runs it (65534: nobody)
#   --check      exit 1 when a run fails, times out or gives other output
#   --check-peak and when a run at half the peak with handler threads misses the peak target
#   --no-install do not install the programs' packages (a missing one is reported, not run)
# Installs only what the named programs need (apt-get, root or sudo), nothing else.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
zsm_run="" programs="sort,xz,zstd,mawk,python3,perl,sqlite3,redis-server,gcc,java" install=1 pass=()

die() { echo "run-region-programs.sh: $*" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --zsm-run=*) zsm_run="${arg#*=}" ;;
    --programs=*) programs="${arg#*=}"; pass+=("--programs" "$programs") ;;
    --fractions=*|--modes=*|--scale=*|--dir=*|--user=*) pass+=("${arg%%=*}" "${arg#*=}") ;;
    --check|--check-peak) pass+=("$arg") ;;
    --no-install) install=0 ;;
    *) die "unknown argument '$arg' (see the top of $0)" ;;
  esac
done

package_of() {  # the Debian packages a program needs
  case "$1" in
    sort) echo coreutils ;; xz) echo xz-utils ;; zstd) echo zstd ;; mawk) echo mawk ;;
    python3) echo "python3 python3-numpy" ;; perl) echo perl ;;
    sqlite3) echo sqlite3 ;; redis-server) echo "redis-server redis-tools" ;; gcc) echo gcc ;;
    java) echo default-jre-headless ;;
    *) die "unknown program '$1' (sort,xz,zstd,mawk,python3,perl,sqlite3,redis-server,gcc,java)" ;;
  esac
}

IFS=, read -ra wanted <<< "$programs"
for p in "${wanted[@]}"; do package_of "$p" >/dev/null; done  # an unknown name: one line, exit 2

if ((install)); then
  source "$root/tools/lib/packages.sh"
  install_missing run-region-programs.sh $(for p in "${wanted[@]}"; do package_of "$p"; done)
fi

source "$root/tools/lib/zsm_run.sh"
[ -n "$zsm_run" ] || zsm_run="$(default_zsm_run "$root")"
[ -x "$zsm_run" ] || die "no launcher at $zsm_run"
exec python3 "$root/tools/lib/region_programs.py" --zsm-run "$zsm_run" "${pass[@]}"
