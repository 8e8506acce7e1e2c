#!/usr/bin/env bash
# An unmodified program on the zsm region: GNU sort, whose memory is one large buffer, run
# twice on the same generated text, without and with libzsm_region_preload.so
# (tools/region_preload/preload.cpp), and a third time on one line, for what sort holds
# outside its large buffer. Prints each run's peak RSS and times, whether the outputs are
# byte-identical (cmp), and the region's statistics at exit; exits 1 if they differ.
#
#   tools/run-region-preload-demo.sh [--mb=N] [--budget=SIZE] [--pool=SIZE] [--buffer=SIZE]
#                                    [--dir=DIR] [--lib=PATH]
#
#   --mb       the input, N x 10^6 bytes of lines (tools/data/sort_lines.awk, seed 12345;
#              kept in DIR and made again only when missing or of another size) (600)
#   --budget   ZSM_REGION_BUDGET, the region's resident budget (256M)
#   --pool     ZSM_REGION_POOL_BUDGET, the most the compressed pool holds; past it, copies go
#              to an unnamed backing file in DIR/tmp (ZSM_REGION_BACKING_FILE, 1G at most).
#              0: no pool budget and no file (4M)
#   --buffer   sort -S, its buffer (512M)
#   --dir      where the input, the outputs and sort's temporary files go
#              (build/region-preload-demo)
#   --lib      the library (default: built in $ZSM_BUILD, default build/bench)
# The region's size is ZSM_REGION_SIZE if set, else the library's default. LC_ALL=C for both
# runs. Peak RSS and times come from /usr/bin/time, or from python3's getrusage without it.
# Takes about 7 minutes on 2 cores with the defaults (two sorts of 600 MB: 174-198 s each at a
# load average of 20), seconds with --mb=20.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
mb=600 budget=256M pool=4M buffer=512M dir="$root/build/region-preload-demo" lib=""

die() { echo "run-region-preload-demo.sh: $*" >&2; exit 2; }
for arg in "$@"; do
  case "$arg" in
    --mb=*) mb="${arg#*=}" ;;
    --budget=*) budget="${arg#*=}" ;;
    --pool=*) pool="${arg#*=}" ;;
    --buffer=*) buffer="${arg#*=}" ;;
    --dir=*) dir="${arg#*=}" ;;
    --lib=*) lib="${arg#*=}" ;;
    *) die "unknown argument '$arg' (see the top of $0)" ;;
  esac
done
[[ "$mb" =~ ^[1-9][0-9]{0,5}$ ]] || die "--mb: '$mb' is not a count of megabytes (1..999999)"
[[ "$buffer" =~ ^[1-9][0-9]*[KMG]?$ ]] || die "--buffer: '$buffer' is not a size for sort -S"
[[ "$pool" =~ ^(0|[1-9][0-9]*[KMG]?)$ ]] || die "--pool: '$pool' is not a size"
command -v mawk > /dev/null || command -v awk > /dev/null || die "needs awk"
awk_bin="$(command -v mawk || command -v awk)"

if [ -z "$lib" ]; then
  build="${ZSM_BUILD:-$root/build/bench}"
  if [ ! -f "$build/CMakeCache.txt" ]; then
    "$root/tools/setup.sh"
    cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo \
      -DZSM_BUILD_TESTS=OFF > /dev/null
  fi
  cmake --build "$build" --target zsm_region_preload > /dev/null
  lib="$build/tools/region_preload/libzsm_region_preload.so"
fi
[ -f "$lib" ] || die "--lib: no file '$lib'"

mkdir -p "$dir/tmp"
input="$dir/input-$mb.txt"
target=$((mb * 1000000))
if [ ! -f "$input" ] || [ "$(stat -c %s "$input")" -lt "$target" ]; then
  "$awk_bin" -v seed=12345 -v target="$target" -f "$root/tools/data/sort_lines.awk" > "$input.part"
  mv "$input.part" "$input"
fi

# timed <out-prefix> <command...>: runs it; <prefix>.usage holds "peak_kib wall_s user_s sys_s".
timed() {
  local prefix="$1"
  shift
  if [ -x /usr/bin/time ]; then
    /usr/bin/time -f "%M %e %U %S" -o "$prefix.usage" "$@" 2> "$prefix.err"
  else
    python3 - "$prefix.usage" "$@" 2> "$prefix.err" <<'PY'
import resource, subprocess, sys, time
t = time.monotonic()
rc = subprocess.call(sys.argv[2:])
u = resource.getrusage(resource.RUSAGE_CHILDREN)
open(sys.argv[1], "w").write(f"{u.ru_maxrss} {time.monotonic() - t:.2f} {u.ru_utime:.2f} {u.ru_stime:.2f}\n")
sys.exit(rc)
PY
  fi
}

export LC_ALL=C
sort_cmd=(sort -S "$buffer" -T "$dir/tmp")
timed "$dir/plain" "${sort_cmd[@]}" -o "$dir/out-plain.txt" "$input"
pool_env=()
[ "$pool" = 0 ] || pool_env=(ZSM_REGION_POOL_BUDGET="$pool" ZSM_REGION_BACKING_FILE="$dir/tmp"
                             ZSM_REGION_BACKING_FILE_SIZE=1G)
timed "$dir/region" env LD_PRELOAD="$lib" ZSM_REGION_BUDGET="$budget" ZSM_REGION_STATS=1 \
  "${pool_env[@]}" "${sort_cmd[@]}" -o "$dir/out-region.txt" "$input"
head -1 "$input" > "$dir/one-line.txt"
timed "$dir/small" "${sort_cmd[@]}" -o "$dir/out-small.txt" "$dir/one-line.txt"

row() {  # row <label> <prefix>
  read -r kib wall user sys < "$2.usage"
  printf '| %s | %.1f | %s | %s | %s |\n' "$1" "$(echo "$kib / 1024" | bc -l)" "$wall" "$user" "$sys"
}
cpu="$(lscpu | sed -n 's/^Model name: *//p' | head -1)"
echo "# sort -S $buffer of $mb MB of lines ($(wc -l < "$input") lines), LC_ALL=C, $cpu, $(nproc) CPUs, Linux $(uname -r)"
echo "| run | peak RSS MiB | wall s | user s | sys s |"
echo "|---|---|---|---|---|"
row "sort" "$dir/plain"
row "sort, LD_PRELOAD region, ZSM_REGION_BUDGET=$budget${pool_env:+, pool $pool + backing file}" "$dir/region"
row "sort of one line (what it holds outside its buffer)" "$dir/small"
grep -h "zsm_region_preload" "$dir/region.err" || echo "(no statistics from the library: it was off)"
if cmp -s "$dir/out-plain.txt" "$dir/out-region.txt"; then
  echo "outputs byte-identical: yes ($(stat -c %s "$dir/out-plain.txt") bytes)"
else
  echo "outputs byte-identical: NO"
  exit 1
fi
