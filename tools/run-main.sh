#!/usr/bin/env bash
# The README's main job: set up, build optimised (-O2 -g, as the kernel builds), then run the
# paired store/free benchmark, the copy benchmark, the callgrind instruction counts and the
# memory benchmark and print one summary table, below the machine it ran on. Pass --full for
# the full-length run. How long it takes: tools/lib/main_job.py's usage.
# Takes 2-5 minutes on 2 cores (build 2 minutes, the short run 1.5-3); --full 15 minutes or
# more (tools/lib/main_job.py's usage says why).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"
"$root/tools/setup.sh"
build="$root/build/bench"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_BUILD_TESTS=OFF
cmake --build "$build" --target zsm_pair_bench zsm_copy_bench zsm_pair_count zsm_memory_bench
python3 "$root/tools/lib/main_job.py" --build "$build" "$@"
