#!/usr/bin/env bash
# The long fuzzing run (tests/fuzz): builds the libFuzzer targets under ASan + UBSan with
# clang-19 in build/fuzz-long, then runs each target for a while from the committed seeds and
# everything earlier runs kept. New inputs go to build/fuzz-corpus/<target>/, crashes (with
# the input that made them) to build/fuzz-artifacts/<target>/, logs to build/fuzz-long/logs/;
# the repository is only read.
#
#   tools/run-fuzz.sh [pool|cache|all] [seconds per target, default 600] [--jobs N] [-- flags]
#
# --jobs N runs N fuzzing processes per target that share its corpus (libFuzzer -jobs and
# -workers); flags after -- go to libFuzzer as they are (e.g. -seed=7, -only_ascii=1).
# Replay a crash: build/fuzz-long/tests/fuzz/<target>_fuzz build/fuzz-artifacts/<target>/crash-*
# Takes the build (about 3 minutes on 2 cores) plus the seconds per target times the targets
# (2 targets: 20 minutes with the default 600 s).
set -euo pipefail
source "$(dirname "$0")/lib/usage.sh" && usage_if_asked "$0" "$@"
root="$(cd "$(dirname "$0")/.." && pwd)"

usage() {
  echo "usage: tools/run-fuzz.sh [pool|cache|all] [seconds per target] [--jobs N] [-- flags]" >&2
  exit 2
}

targets=(pool cache)
seconds=600
jobs=1
extra=()
while (($#)); do
  case "$1" in
    pool | cache) targets=("$1") ;;
    all) targets=(pool cache) ;;
    --jobs) jobs="${2:?--jobs takes a number}"; shift ;;
    --) shift; extra=("$@"); break ;;
    *[!0-9]* | '') usage ;;
    *) seconds="$1" ;;
  esac
  shift
done

"$root/tools/setup.sh"
build="$root/build/fuzz-long"
cmake -S "$root" -B "$build" -G Ninja -DCMAKE_COMPILE_WARNING_AS_ERROR=ON \
  -DCMAKE_BUILD_TYPE=RelWithDebInfo -DZSM_SANITIZE=address,undefined -DZSM_BUILD_FUZZ=ON \
  -DZSM_BUILD_BENCH=OFF -DZSM_BUILD_TOOLS=OFF \
  -DCMAKE_C_COMPILER=clang-19 -DCMAKE_CXX_COMPILER=clang++-19
cmake --build "$build" -j "$(nproc)" --target "${targets[@]/%/_fuzz}"

# The executions a run made: the sum over its processes' final stats.
executions() {  # log files...
  awk '/stat::number_of_executed_units/ { n += $2 } END { print n + 0 }' "$@"
}

failed=()
for target in "${targets[@]}"; do
  corpus="$root/build/fuzz-corpus/$target"
  artifacts="$root/build/fuzz-artifacts/$target"
  logs="$build/logs/$target"
  mkdir -p "$corpus" "$artifacts" "$logs"
  rm -f "$logs"/*.log
  parallel=()
  ((jobs > 1)) && parallel=(-jobs="$jobs" -workers="$jobs")
  echo "=== $target: $seconds s, $jobs process(es), corpus $corpus"
  status=0
  (cd "$logs" && "$build/tests/fuzz/${target}_fuzz" -max_total_time="$seconds" -max_len=4096 \
    -timeout=60 -rss_limit_mb=4096 -print_final_stats=1 -artifact_prefix="$artifacts/" \
    "${parallel[@]}" "${extra[@]}" "$corpus" "$root/tests/fuzz/corpus/$target" \
    >run.log 2>&1) || status=$?
  echo "$target: $(executions "$logs"/*.log) executions," \
    "corpus of $(ls "$corpus" | wc -l) inputs, exit status $status"
  if ((status != 0)); then
    failed+=("$target")
    grep -h -A3 -E 'FUZZ_CHECK|ERROR: (AddressSanitizer|libFuzzer)|runtime error' "$logs"/*.log |
      head -20
    ls "$artifacts"
  fi
done
if ((${#failed[@]})); then
  echo "crashes in: ${failed[*]} (inputs under build/fuzz-artifacts/)"
  exit 1
fi
echo "no crash"
