#!/usr/bin/env bash
# The zsm region against resident memory and, with --kernel-zram, against the kernel's own
# zram swap under the same budget (and without one), on the same data and accesses in one run
# (bench/region_bench.cpp says how), and prints the floor line and the table (also
# build/region_bench.txt).
#
#   tools/run-region-bench.sh [--kernel-zram] [zsm_region_bench options: --budget=BYTES
#                             --ratios=2,4,8 --access=seq,uniform,zipf --threads=1,2,4
#                             --touches-per-page=N --passes=N --at-scale --seed=N --quick]
#
# --kernel-zram (root only; never by default) makes /dev/$ZSM_ZRAM (default zram0) swap for the
# run: lz4, a disksize of $ZSM_ZRAM_DISKSIZE (default 2G), mkswap, swapon at the highest
# priority. It refuses a device that is already in use (a disksize set, or swap). Whatever
# happens (failure, Ctrl-C), the machine is put back as it was: swapoff, the device reset, its
# previous compression algorithm written back.
#
# Builds zsm_region_bench in $ZSM_BUILD (default build/bench, configured as tools/run-main.sh
# does when missing). Some minutes on 2 cores with the defaults (a 32 MiB budget; --at-scale
# adds a 16 GiB region at a 1 GiB budget, 2 GiB of it written: about a minute more).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${ZSM_BUILD:-$root/build/bench}"
zram="${ZSM_ZRAM:-zram0}"
disksize="${ZSM_ZRAM_DISKSIZE:-2G}"

die() { echo "run-region-bench.sh: $*" >&2; exit 2; }

kernel_zram=0
args=()
for arg in "$@"; do
  if [ "$arg" = --kernel-zram ]; then kernel_zram=1; else args+=("$arg"); fi
done

zram_is_swap() { grep -q "^/dev/$zram " /proc/swaps; }

# The device's state before the run, and putting it back.
dev="/sys/block/$zram"
previous_algorithm=""
zram_set_up=0
bench_pid=""
restore_zram() {
  [ "$zram_set_up" = 1 ] || return 0
  if [ -n "$bench_pid" ]; then kill "$bench_pid" 2> /dev/null || true; wait "$bench_pid" 2> /dev/null || true; fi
  local ok=1
  if zram_is_swap; then swapoff "/dev/$zram" || ok=0; fi
  if [ "$ok" = 1 ]; then
    echo 1 > "$dev/reset" || ok=0
    [ -z "$previous_algorithm" ] || echo "$previous_algorithm" > "$dev/comp_algorithm" || ok=0
  fi
  if [ "$ok" = 1 ]; then
    echo "run-region-bench.sh: /dev/$zram restored (not swap, reset, $previous_algorithm)" >&2
  else
    echo "run-region-bench.sh: could not restore /dev/$zram: check swapon --show and $dev" >&2
  fi
  zram_set_up=0
}

set_up_zram() {
  [ "$(id -u)" = 0 ] || die "--kernel-zram needs root (it makes /dev/$zram swap for the run)"
  [ -d "$dev" ] || die "--kernel-zram: no $dev (modprobe zram makes one)"
  command -v mkswap > /dev/null && command -v swapon > /dev/null || die "--kernel-zram needs mkswap and swapon (util-linux)"
  zram_is_swap && die "/dev/$zram is already swap: not touching it"
  [ "$(cat "$dev/disksize")" = 0 ] || die "/dev/$zram is in use (disksize $(cat "$dev/disksize")): not touching it"
  grep -qw lz4 "$dev/comp_algorithm" || die "/dev/$zram has no lz4 ($(cat "$dev/comp_algorithm"))"
  previous_algorithm="$(sed -n 's/.*\[\([^]]*\)\].*/\1/p' "$dev/comp_algorithm")"
  zram_set_up=1
  trap restore_zram EXIT
  trap 'restore_zram; exit 130' INT
  trap 'restore_zram; exit 143' TERM
  echo lz4 > "$dev/comp_algorithm"
  echo "$disksize" > "$dev/disksize"
  mkswap "/dev/$zram" > /dev/null
  swapon -p 32767 "/dev/$zram"
  echo "run-region-bench.sh: /dev/$zram is swap for the run (lz4, $disksize, priority 32767)" >&2
}

if [ ! -f "$build/CMakeCache.txt" ]; then
  "$root/tools/setup.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_BUILD_TESTS=OFF \
    > /dev/null
fi
cmake --build "$build" --target zsm_region_bench > /dev/null

if [ "$kernel_zram" = 1 ]; then
  set_up_zram
  args+=(--kernel-zram "--zram=$zram")
fi
mkdir -p "$root/build"
# In the background and waited for, so that a signal's trap runs at once (it stops the
# benchmark before it restores the device), not when the benchmark ends.
"$build/bench/zsm_region_bench" "${args[@]}" > >(tee "$root/build/region_bench.txt") &
bench_pid=$!
status=0
wait "$bench_pid" || status=$?
bench_pid=""
exit "$status"
