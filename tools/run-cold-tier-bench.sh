#!/usr/bin/env bash
# zsm::Cache with and without its backing file (bench/cold_tier_bench.cpp says how), side by
# side in one run: working sets 4 and 16 times a 16 MiB memory, Zipf and uniform keys, real
# 4 KiB pages, a file of 4 times the memory in build/ (an unnamed file on this machine's disk,
# O_DIRECT), and prints the table (also build/cold_tier.txt).
#
#   tools/run-cold-tier-bench.sh [zsm_cold_tier_bench options: --memory=BYTES --ratios=4,16
#                                 --file-ratio=N --gets=N --keys=zipf,uniform --file=DIR --hog=N]
#
# Builds zsm_cold_tier_bench in $ZSM_BUILD (default build/bench, configured as
# tools/run-main.sh does when missing). About 2 minutes on 2 cores with the defaults.
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
build="${ZSM_BUILD:-$root/build/bench}"

if [ ! -f "$build/CMakeCache.txt" ]; then
  "$root/tools/setup.sh"
  cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_BUILD_TESTS=OFF \
    > /dev/null
fi
cmake --build "$build" --target zsm_cold_tier_bench > /dev/null
"$build/bench/zsm_cold_tier_bench" --memory=$((16 << 20)) --file="$root/build" \
  "$@" | tee "$root/build/cold_tier.txt"
